"""PD-SSM's transition modes as objects (pd_transitions.py, docs/design.md §4): one table of modes that agrees with
the config's choices, a mode added as one class plus one table entry, and a clear error for an unknown name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hf_ssm.modeling import config_values, pd_transitions
from hf_ssm.modeling.config_values import (
    PD_SSM_DICTIONARY_TRANSITIONS,
    PD_SSM_PROJECTED_TRANSITIONS,
    PD_SSM_SHARED_SELECTION_TRANSITIONS,
    PD_SSM_TRANSITIONS,
)
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from model_checks import tiny_config


def test_the_mode_table_holds_exactly_the_configs_choices():
    """Every pd_ssm_transition the config accepts has a mode class, and no class is unreachable; the config's
    capability lists name modes of the right kind (a dictionary, a shared selection, a W_P)."""
    assert tuple(pd_transitions.TRANSITIONS) == PD_SSM_TRANSITIONS
    modes = pd_transitions.TRANSITIONS
    assert all(issubclass(modes[name], pd_transitions.DictionaryTransition) for name in PD_SSM_DICTIONARY_TRANSITIONS)
    assert all(issubclass(modes[name], pd_transitions.BankTransition) for name in PD_SSM_SHARED_SELECTION_TRANSITIONS)
    assert all(issubclass(modes[name], pd_transitions.DirectTransition) for name in PD_SSM_PROJECTED_TRANSITIONS)


@pytest.mark.parametrize("name", PD_SSM_TRANSITIONS)
def test_a_mixer_holds_one_mode_object_of_its_configs_transition(name):
    layer = PDSSMMixer(tiny_config("S", pd_ssm_transition=name), 0)
    assert isinstance(layer.transition, pd_transitions.TRANSITIONS[name]) and layer.transition.name == name
    assert "transition" not in dict(layer.named_children())  # a plain object: no state-dict prefix of its own


@torch.no_grad()
def test_a_new_mode_is_one_class_and_one_table_entry(monkeypatch):
    """A mode registered in TRANSITIONS (here the dictionary mode with hard selection weights), its name added to the
    config's choices, builds, runs and is used by the layer, with no other change to the mixer."""

    class HardDictionary(pd_transitions.DictionaryTransition):
        def select(self, logits):
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()

    monkeypatch.setitem(pd_transitions.TRANSITIONS, "hard_dictionary", HardDictionary)
    monkeypatch.setattr(config_values, "PD_SSM_TRANSITIONS", (*PD_SSM_TRANSITIONS, "hard_dictionary"))
    config = tiny_config("S", pd_ssm_transition="hard_dictionary")
    torch.manual_seed(0)
    layer = PDSSMMixer(config, 0)
    torch.manual_seed(0)
    soft = PDSSMMixer(tiny_config("S"), 0)
    assert layer.state_dict().keys() == soft.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(layer.state_dict().values(), soft.state_dict().values()))
    u = torch.randn(2, 6, 32)
    idx, _ = layer.transitions(u)
    # P_t of the hard mode is the column argmax of the one dictionary entry the logits pick
    choice = layer.transition_logits(u).argmax(-1)  # (B, T, H)
    picked = layer.dictionary[torch.arange(layer.num_heads), choice]  # (B, T, H, N, N)
    assert torch.equal(idx, picked.argmax(dim=-2))
    assert not torch.equal(layer(u)[0], soft(u)[0])  # the new mode's selection is what runs


def test_an_unknown_mode_name_is_refused_with_the_accepted_ones():
    """The mode table itself names the accepted modes (the config refuses an unknown name first, the same way)."""
    config = SimpleNamespace(pd_ssm_transition="permutation")
    with pytest.raises(ValueError, match=r"`pd_ssm_transition` must be one of \['dictionary', 'bank', 'direct'\]"):
        pd_transitions.transition_mode(config)
    with pytest.raises(ValueError, match=r"`pd_ssm_transition` must be one of \['dictionary', 'bank', 'direct'\]"):
        tiny_config("S", pd_ssm_transition="permutation")


def test_mode_names_appear_only_in_the_mode_table_and_the_config_checks():
    """The transition modes' names ("dictionary", "bank", "direct") are string values in hf_ssm/modeling only in
    pd_transitions.py (TRANSITIONS), config_values.py (the accepted values) and configuration_hybrid_ssm.py (the field's
    default): every other module asks the mode object, so a new mode is one class and one table entry. Docstrings
    do not count."""
    import ast

    from model_checks import ROOT

    names = {"dictionary", "bank", "direct"}
    allowed = {"pd_transitions.py", "config_values.py", "configuration_hybrid_ssm.py"}
    found = []
    for path in sorted((ROOT / "hf_ssm" / "modeling").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings:
                found.append(f"{path.name}:{node.lineno} {node.value!r}")
    assert [f for f in found if f.split(":")[0] not in allowed] == []
    assert any(f.startswith("pd_transitions.py") for f in found)  # the table itself is seen
