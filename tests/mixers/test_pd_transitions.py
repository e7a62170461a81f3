"""PD-SSM's transition modes as objects (pd_transitions.py, docs/design.md §4.4): one list of modes (TRANSITIONS),
which the config checks and whose capability flags its field checks read, a mode added at run time with
`register_transition` alone, and a clear error for an unknown name."""

from __future__ import annotations

import ast
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from hf_ssm.modeling import HybridSSMForCausalLM, config_values, pd_transitions
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from hf_ssm.modeling.pd_transitions import register_transition, transition_names, unregister_transition
from hf_ssm.ops.dispatch import scan_ops
from model_checks import ROOT, max_cached_decode_error, tiny_config

BUILT_IN = ("dictionary", "bank", "direct")


@contextmanager
def registered(name: str, cls):
    """Mode `cls` registered as `name` for the block, unregistered after it."""
    register_transition(name, cls)
    try:
        yield
    finally:
        unregister_transition(name)


def test_the_mode_table_is_the_one_list_of_names():
    """The built-in modes in registration order; the capability flags name the modes of the right kind; the
    config's choice-value module keeps no list of them (a second list could drift)."""
    assert transition_names() == BUILT_IN == tuple(pd_transitions.TRANSITIONS)
    assert transition_names("has_dictionary") == ("dictionary", "bank")
    assert transition_names("can_share_selection") == ("bank",)
    assert transition_names("has_projection") == ("direct",)
    assert not [name for name in vars(config_values) if name.startswith("PD_SSM_") and "TRANSITION" in name]
    with pytest.raises(ValueError, match=r"`capability` must be one of \['has_dictionary'"):
        transition_names("fused_decode")


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_mixer_holds_one_mode_object_of_its_configs_transition(name):
    layer = PDSSMMixer(tiny_config("S", pd_ssm_transition=name), 0)
    assert isinstance(layer.transition, pd_transitions.TRANSITIONS[name]) and layer.transition.name == name
    assert "transition" not in dict(layer.named_children())  # a plain object: no state-dict prefix of its own


class IdentityTransition(pd_transitions.PDTransition):
    """P_t = I for every token: x_t = D_t x_(t-1) + b_t, a diagonal SSM. No parameters of its own."""

    def add_parameters(self, mixer, config) -> None:
        pass

    def init_parameters(self, mixer, init) -> None:
        pass

    def indices(self, mixer, u):
        n = mixer.head_state_size
        return torch.arange(n, device=u.device).expand(*u.shape[:2], mixer.num_heads, n)

    def scan(self, mixer, u, x0, mask, own_start):
        dv, b = mixer.diagonal(u), mixer.step_inputs(u)
        if mask is not None:  # a padded step leaves the state as it is
            keep = mask.bool()[..., None, None]
            dv, b = torch.where(keep, dv, torch.ones((), dtype=dv.dtype)), torch.where(keep, b, torch.zeros_like(b))
        x0 = torch.zeros_like(b[:, 0]) if x0 is None else x0
        return scan_ops(mixer.scan_backend, u.device).pd_scan(self.indices(mixer, u), dv, b, x0)


@torch.no_grad()
def test_a_mode_registered_at_run_time_builds_and_runs_a_model():
    """Adding a mode takes no edit of any file of the package: one class and one register_transition call (here
    in this test) make the name a value the config accepts, and a model of it builds, runs forward and decodes
    with its cache. The capability flags the new class inherits (none) are what the config's field checks read."""
    with registered("identity", IdentityTransition):
        assert transition_names()[-1] == "identity"
        config = tiny_config("PA", pd_ssm_transition="identity", pd_ssm_dict_size=3)
        torch.manual_seed(0)
        model = HybridSSMForCausalLM(config).eval()
        ids = torch.randint(1, config.vocab_size, (2, 7))
        assert torch.isfinite(model(ids).logits).all()
        layer = model.model.layers[0].mixer
        assert isinstance(layer.transition, IdentityTransition) and not {"selection", "dictionary"} & set(
            dict(layer.named_parameters())
        )
        # the states are the diagonal recurrence x_t = D_t x_(t-1) + b_t from the layer's start
        u = torch.randn(2, 5, config.hidden_size)
        states, _ = layer.transition.scan(layer, u, None, None, True)
        dv, b = layer.diagonal(u), layer.step_inputs(u)
        x, expected = torch.zeros_like(b[:, 0]), []
        for t in range(u.shape[1]):
            x = dv[:, t] * x + b[:, t]
            expected.append(x)
        torch.testing.assert_close(states, torch.stack(expected, 1), rtol=1e-5, atol=1e-5)
        assert max_cached_decode_error(config) < 1e-4
        with pytest.raises(ValueError, match=r"needs pd_ssm_transition='direct' \(got 'identity'"):
            tiny_config("P", pd_ssm_transition="identity", pd_ssm_transition_input_size=5)
        with pytest.raises(ValueError, match=r"has none \(set it to None, or pd_ssm_transition to 'dictionary'"):
            tiny_config("P", pd_ssm_transition="identity", pd_ssm_identity_entry_logit=1.0)
    with pytest.raises(ValueError, match=r"must be one of \['dictionary', 'bank', 'direct'\], got 'identity'"):
        tiny_config("P", pd_ssm_transition="identity")  # unregistered: refused again


@torch.no_grad()
def test_a_subclass_of_a_built_in_mode_takes_its_parameters_and_flags():
    """A mode registered as a subclass of the dictionary mode (hard selection weights) keeps its parameters, their
    draws and its capability flags, and is what the layer runs."""

    class HardDictionary(pd_transitions.DictionaryTransition):
        def select(self, logits):
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()

    with registered("hard_dictionary", HardDictionary):
        assert transition_names("has_dictionary") == ("dictionary", "bank", "hard_dictionary")
        torch.manual_seed(0)
        layer = PDSSMMixer(tiny_config("S", pd_ssm_transition="hard_dictionary"), 0)
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


def test_register_transition_refuses_a_taken_name_and_a_class_that_is_no_mode():
    with pytest.raises(ValueError, match=r"transition mode 'bank' is already registered"):
        register_transition("bank", IdentityTransition)
    with pytest.raises(ValueError, match=r"must be a non-empty string, got ''"):
        register_transition("", IdentityTransition)
    with pytest.raises(TypeError, match=r"must be a subclass of PDTransition, got <class 'object'>"):
        register_transition("plain", object)
    with pytest.raises(ValueError, match=r"`pd_ssm_transition` must be one of .*, got 'plain'"):
        unregister_transition("plain")
    assert transition_names() == BUILT_IN


def test_an_unknown_mode_name_is_refused_with_the_accepted_ones():
    """The mode table itself names the accepted modes, and the config's check is that same lookup."""
    config = SimpleNamespace(pd_ssm_transition="permutation")
    with pytest.raises(ValueError, match=r"`pd_ssm_transition` must be one of \['dictionary', 'bank', 'direct'\]"):
        pd_transitions.transition_mode(config)
    with pytest.raises(ValueError, match=r"`pd_ssm_transition` must be one of \['dictionary', 'bank', 'direct'\]"):
        tiny_config("S", pd_ssm_transition="permutation")


def _code_constants(path):
    """The string constants of a Python file outside docstrings, as (node, value)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return tree, [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in docstrings]


def test_mode_names_are_listed_only_in_the_mode_table():
    """In hf_ssm/modeling the modes' names are string values only in pd_transitions.py (their registration) and
    configuration_hybrid_ssm.py (the field's default): every other module asks the mode object or its class. And
    no module of the package or script holds a tuple, list or set of two mode names or more (a second list of
    them, which a new mode would have to join). Docstrings do not count."""
    names = set(BUILT_IN)
    found = []
    for path in sorted((ROOT / "hf_ssm" / "modeling").glob("*.py")):
        _, constants = _code_constants(path)
        found += [f"{path.name}:{node.lineno} {node.value!r}" for node in constants if node.value in names]
    assert [f for f in found if f.split(":")[0] not in {"pd_transitions.py", "configuration_hybrid_ssm.py"}] == []
    assert any(f.startswith("pd_transitions.py") for f in found)  # the registrations themselves are seen
    lists = []
    for path in sorted([*(ROOT / "hf_ssm").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]):
        tree, _ = _code_constants(path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if len(values & names) >= 2:
                    lists.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert lists == []
