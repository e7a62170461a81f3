"""HybridSSMConfig's PD-SSM defaults are the state tracker of docs/design.md §8.8, and what was saved under the
paper's defaults still computes what it computed.

- `HybridSSMConfig()` builds the tracker: 64 heads of N = 8, direct transitions, D = 1, no input map B, x_0 = e_0,
  C frozen, no D_skip, W_P at 1 / sqrt(d) of the model's rate through `hf_ssm.parameter_groups`.
- `PAPER_PD_SSM_LAYER` spread into a config gives the paper's layer (the old defaults).
- A saved config.json that lacks a field of PAPER_PD_SSM_LAYER (saved before the field existed) loads it at the
  paper's value; a hand-written dict of fields takes the current defaults.
- The language-model presets and the adapters keep the paper's layer.
"""

from __future__ import annotations

import json

import pytest
import torch

import hf_ssm
from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.presets import preset_config

TRACKER = {
    "pd_ssm_num_heads": 64,
    "pd_ssm_head_state_size": 8,
    "pd_ssm_transition": "direct",
    "pd_ssm_diagonal": "unit",
    "pd_ssm_initial_state": "one_hot",
    "pd_ssm_input": "none",
    "pd_ssm_output_skip": False,
    "pd_ssm_output_trainable": False,
    "pd_ssm_transition_lr_scale": None,
}


def test_the_defaults_are_the_tracker_and_the_paper_layer_is_one_dict_away():
    default = HybridSSMConfig()
    assert {key: getattr(default, key) for key in TRACKER} == TRACKER
    assert set(PAPER_PD_SSM_LAYER) == set(TRACKER)  # every default that changed has its paper value
    paper = HybridSSMConfig(**PAPER_PD_SSM_LAYER)
    assert {key: getattr(paper, key) for key in PAPER_PD_SSM_LAYER} == PAPER_PD_SSM_LAYER


def test_the_default_layer_is_a_pure_automaton_with_frozen_c_and_a_scaled_w_p():
    torch.manual_seed(0)
    config = HybridSSMConfig(vocab_size=16, hidden_size=64, num_hidden_layers=2, mixers="PA")
    model = HybridSSMForCausalLM(config)
    mixer = model.model.layers[0].mixer
    trained = {name for name, p in mixer.named_parameters() if p.requires_grad}
    assert trained == {"transition_proj.weight"}  # no B, no D MLPs, no D_skip; C frozen
    groups = hf_ssm.parameter_groups(model, 1e-2)
    w_p = [g for g in groups if any(p is mixer.transition_proj.weight for p in g["params"])]
    assert len(w_p) == 1 and w_p[0]["lr"] == pytest.approx(1e-2 / 64**0.5)
    # x_t = P_t ... P_1 e_0: every head's state is a real one-hot vector at every step (the automaton's state)
    features, _ = mixer.state_features(torch.randn(2, 9, 64))
    real, imag = features.unflatten(-1, (2, 8)).unbind(-2)
    assert torch.equal(imag, torch.zeros_like(imag))
    assert torch.equal(real.sum(-1), torch.ones(2, 9, 64)) and torch.equal(real.amax(-1), torch.ones(2, 9, 64))


def test_an_explicit_lr_scale_and_none_both_validate_and_none_is_refused_nowhere():
    assert HybridSSMConfig(pd_ssm_transition_lr_scale=0.5).pd_ssm_transition_lr_scale == 0.5
    assert HybridSSMConfig(**{**PAPER_PD_SSM_LAYER, "pd_ssm_transition_lr_scale": None}).pd_ssm_transition == (
        "dictionary"
    )
    with pytest.raises(ValueError, match="pd_ssm_transition_lr_scale"):
        HybridSSMConfig(**{**PAPER_PD_SSM_LAYER, "pd_ssm_transition_lr_scale": 0.5})


def test_a_config_saved_before_the_fields_existed_loads_the_paper_layer(tmp_path):
    HybridSSMConfig(**PAPER_PD_SSM_LAYER, mixers="PA", num_hidden_layers=2, hidden_size=32).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert all(saved[key] == value for key, value in PAPER_PD_SSM_LAYER.items())  # every field is written out
    for key in ("pd_ssm_input", "pd_ssm_output_skip", "pd_ssm_output_trainable", "pd_ssm_transition_lr_scale"):
        del saved[key]  # as a config.json written before these fields existed
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = HybridSSMConfig.from_pretrained(tmp_path)
    assert {key: getattr(loaded, key) for key in PAPER_PD_SSM_LAYER} == PAPER_PD_SSM_LAYER
    # a hand-written dict of fields (no transformers_version) is a new config: the current defaults
    fresh = HybridSSMConfig.from_dict({"mixers": "PA", "num_hidden_layers": 2, "hidden_size": 32})
    assert fresh.pd_ssm_input == "none" and fresh.pd_ssm_transition == "direct"


def test_a_config_under_the_old_name_of_n_takes_its_own_value_not_the_paper_default(tmp_path):
    HybridSSMConfig(**PAPER_PD_SSM_LAYER, mixers="P", num_hidden_layers=1, hidden_size=32).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["pd_ssm_state_size"] = 4  # the renamed field of docs/design.md §9.1
    del saved["pd_ssm_head_state_size"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.warns(FutureWarning, match="pd_ssm_head_state_size"):
        loaded = HybridSSMConfig.from_pretrained(tmp_path)
    assert loaded.pd_ssm_head_state_size == 4


def test_the_language_model_presets_and_the_adapters_keep_the_paper_layer():
    from hf_ssm.adapters import SSMAdapterConfig
    from hf_ssm.adapters.layer import mixer_config

    config = preset_config("hybrid-pd_ssm-tiny", vocab_size=260)
    assert {key: getattr(config, key) for key in ("pd_ssm_transition", "pd_ssm_input", "pd_ssm_diagonal")} == {
        "pd_ssm_transition": "dictionary",
        "pd_ssm_input": "projection",
        "pd_ssm_diagonal": "complex",
    }
    adapter = mixer_config(SSMAdapterConfig(mixer="pd_ssm"), hidden_size=32)
    assert {key: getattr(adapter, key) for key in PAPER_PD_SSM_LAYER} == PAPER_PD_SSM_LAYER


def test_the_default_hybrid_decodes_as_it_forwards_and_reloads_bit_identically(tmp_path):
    """The invariants every layer keeps (tests/models/test_model.py for the paper's layer), on the default one."""
    from model_checks import max_cached_decode_error, reload_is_bit_identical

    config = HybridSSMConfig(
        vocab_size=37, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, mixers="PA"
    )
    assert config.pd_ssm_transition == "direct" and config.pd_ssm_input == "none"
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path))
