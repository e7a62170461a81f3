"""RoPE settings of HybridSSMConfig: transformers' `rope_theta` / `rope_scaling` keywords reach `rope_parameters`
(and the attention layers) however the config is built or changed, survive save / reload, and bad values are
refused naming the key instead of giving NaN logits or being dropped."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from model_checks import tiny_config


def _inv_freq(theta: float, head_dim: int = 8) -> torch.Tensor:
    """Default RoPE frequencies theta^(-2i / head_dim), i < head_dim / 2 (tiny_config: 32 / 4 heads)."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))


def _theta_of(model: HybridSSMForCausalLM) -> float:
    """The base the model's rotary embedding uses, read back from its frequencies: inv_freq[1] = theta^(-2 / hd)."""
    head_dim = model.config.head_dim
    return float(model.model.rotary_emb.inv_freq[1]) ** (-head_dim / 2)


def test_the_rope_theta_keyword_sets_the_base_the_attention_layers_use():
    """HybridSSMConfig(rope_theta=...) and a config dict holding rope_theta (a transformers 4.x config.json) give
    rope_parameters["rope_theta"] that value, the rotary embedding computes with it, and the logits differ from
    the default base's (the keyword was dropped without a word)."""
    built = tiny_config("AS", rope_theta=500.0)
    loaded = HybridSSMConfig.from_dict({**tiny_config("AS").to_dict(), "rope_parameters": None, "rope_theta": 500.0})
    for config in (built, loaded):
        assert config.rope_parameters == {"rope_type": "default", "rope_theta": 500.0}
        assert "rope_theta" not in config.to_dict()  # one place for the value, as transformers does it
    torch.manual_seed(0)
    default = HybridSSMForCausalLM(tiny_config("AS")).eval()
    model = HybridSSMForCausalLM(built).eval()
    model.load_state_dict(default.state_dict())
    torch.testing.assert_close(model.model.rotary_emb.inv_freq, _inv_freq(500.0))
    ids = torch.randint(1, 37, (1, 12))
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, default(ids).logits, rtol=0, atol=1e-6)


def test_rope_theta_with_rope_scaling_fills_the_theta_of_the_scaling_dict():
    """rope_scaling (the old name of rope_parameters) with a rope_theta keyword: the theta goes into the dict."""
    config = tiny_config("AS", rope_theta=500.0, rope_scaling={"rope_type": "linear", "factor": 2.0})
    assert config.rope_parameters == {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}


def test_the_theta_survives_save_pretrained_and_from_pretrained(tmp_path):
    """A model built with rope_theta=500 saves it in config.json's rope_parameters and reloads computing the same
    logits with the same base."""
    model = HybridSSMForCausalLM(tiny_config("AS", rope_theta=500.0)).eval()
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["rope_parameters"]["rope_theta"] == 500.0
    reloaded = HybridSSMForCausalLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.rope_parameters["rope_theta"] == 500.0
    ids = torch.randint(1, 37, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_rope_theta_after_construction_changes_rope_parameters_however_it_is_given(tmp_path):
    """`config.rope_theta = x`, `config.update({"rope_theta": x})` and `from_pretrained(path, rope_theta=x)` change
    rope_parameters["rope_theta"] (keeping the rope type and its keys) instead of leaving an attribute nothing
    reads; a bad value is refused and leaves the config as it was."""
    config = tiny_config("AS", rope_parameters={"rope_type": "linear", "factor": 2.0})
    config.rope_theta = 42.0
    assert config.rope_parameters == {"rope_type": "linear", "factor": 2.0, "rope_theta": 42.0}
    assert "rope_theta" not in vars(config)
    config.update({"rope_theta": 43.0})
    assert config.rope_parameters["rope_theta"] == 43.0
    with pytest.raises(ValueError, match=r"rope_parameters\['rope_theta'\].*> 0, got 0"):
        config.rope_theta = 0
    assert config.rope_parameters == {"rope_type": "linear", "factor": 2.0, "rope_theta": 43.0}

    HybridSSMForCausalLM(tiny_config("AS")).save_pretrained(tmp_path)
    model = HybridSSMForCausalLM.from_pretrained(tmp_path, rope_theta=800.0)
    assert model.config.rope_parameters == {"rope_type": "default", "rope_theta": 800.0}
    assert math.isclose(_theta_of(model), 800.0, rel_tol=1e-4)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        (dict(rope_theta=0), ValueError, r"rope_parameters\['rope_theta'\]` must be a finite number > 0, got 0"),
        (dict(rope_theta=-1.0), ValueError, r"rope_parameters\['rope_theta'\]` must be .* got -1.0"),
        (dict(rope_theta=float("nan")), ValueError, r"rope_parameters\['rope_theta'\]` must be .* got nan"),
        (dict(rope_parameters={"rope_type": "default", "rope_theta": 0.0}), ValueError, r"'rope_theta'\].*got 0.0"),
        (dict(rope_parameters={"rope_type": "default", "rope_theta": "1e4"}), ValueError, r"'rope_theta'\].*'1e4'"),
        (dict(rope_parameters={"rope_type": "spiral"}), ValueError, r"'rope_type'\]` must be one of .*'dynamic'"),
        (dict(rope_parameters={"rope_type": "linear"}), ValueError, r"rope_parameters`: Missing .*'factor'"),
        (dict(rope_parameters={"rope_type": "linear", "factor": 0.0}), ValueError, r"'factor'\]` must be .*> 0"),
        (dict(partial_rotary_factor=0.5), ValueError, r"'partial_rotary_factor'\]` must be 1 .*got 0.5"),
        (dict(rope_parameters={"full_attention": {"rope_type": "default"}}), ValueError, r"one flat dict.*full_att"),
        (dict(rope_parameters=[10000.0]), TypeError, r"`rope_parameters` must be a dict .*got list"),
        (
            dict(rope_theta=5.0, rope_parameters={"rope_type": "default", "rope_theta": 6.0}),
            ValueError,
            r"`rope_theta` = 5.0 and `rope_parameters\['rope_theta'\]` = 6.0 disagree",
        ),
        (
            dict(rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_parameters={"rope_type": "default"}),
            ValueError,
            r"`rope_scaling` \(the old name of `rope_parameters`\) .* disagree",
        ),
    ],
)
def test_bad_rope_settings_are_refused_naming_the_key(fields, error, message):
    """A theta of 0 or less (NaN logits), an unknown rope type, a type's missing or bad key, a partial rotation
    the attention does not do, per-layer-type dicts, and keywords that contradict rope_parameters are refused when
    the config is built, assigned or loaded with overrides, naming the key; an assignment leaves the config as it
    was."""
    with pytest.raises(error, match=message):
        tiny_config("AS", **fields)
    config = tiny_config("AS")
    before = config.to_dict()
    if set(fields) == {"rope_parameters"}:
        with pytest.raises(error, match=message):
            config.rope_parameters = fields["rope_parameters"]
    with pytest.raises(error, match=message):
        config.update(fields)
    assert config.to_dict() == before


def test_an_ssm_only_config_checks_rope_values_but_not_the_attention_head_size():
    """A model without attention layers still refuses a non-positive theta (a layer added later would read it), but
    not transformers' even-head_dim rule: its derived head_dim (36 // 4 = 9) is never used."""
    assert HybridSSMConfig(hidden_size=36, num_hidden_layers=1, mixers="S").head_dim == 9
    with pytest.raises(ValueError, match="rope_theta"):
        HybridSSMConfig(num_hidden_layers=1, mixers="S", rope_theta=-1.0)


def test_a_theta_edited_in_place_is_refused_when_the_model_is_built():
    """`config.rope_parameters["rope_theta"] = 0` edits the dict past the config's checks: building the model
    refuses it naming the key instead of computing NaN logits."""
    config = tiny_config("AS")
    config.rope_parameters["rope_theta"] = 0.0
    with pytest.raises(ValueError, match=r"rope_parameters\['rope_theta'\]` must be a finite number > 0, got 0.0"):
        HybridSSMForCausalLM(config)


@pytest.mark.parametrize(
    ("saved", "expected"),
    [
        ({}, {"rope_type": "default", "rope_theta": 10000.0}),
        ({"rope_theta": 500000.0, "rope_scaling": None}, {"rope_type": "default", "rope_theta": 500000.0}),
        (
            {"rope_theta": 100.0, "rope_scaling": {"type": "linear", "factor": 2.0}},
            {"type": "linear", "rope_type": "linear", "factor": 2.0, "rope_theta": 100.0},
        ),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, None),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 300.0}}, None),
    ],
)
def test_config_json_files_of_every_rope_form_load_with_their_settings(tmp_path, saved, expected):
    """A config.json without RoPE keys, one in transformers 4.x form (top-level rope_theta, rope_scaling with the
    old `type` key) and one with rope_parameters (this package's form) load with the settings they name (None:
    rope_parameters as saved)."""
    fields = {k: v for k, v in tiny_config("AS").to_dict().items() if k != "rope_parameters"}
    (tmp_path / "config.json").write_text(json.dumps({**fields, **saved}))
    config = HybridSSMConfig.from_pretrained(tmp_path)
    assert config.rope_parameters == (expected if expected is not None else saved["rope_parameters"])
    assert "rope_theta" not in vars(config)
    HybridSSMForCausalLM(config)  # the attention layers take it
