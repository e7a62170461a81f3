"""The post-norm mixer-only block (config.block_type = "post_norm_mixer", docs/design.md §7.1): what it computes, the
model-level invariants of tests/models/test_model_invariants.py for it, and its config checks."""

from __future__ import annotations

import os

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling import SSM_MIXER_CLASSES
from model_checks import (
    hybrid_config,
    load_without_hf_ssm,
    max_cached_decode_error,
    reload_is_bit_identical,
    save_with_reference,
    tiny_config,
)

MIXERS = list(SSM_MIXER_CLASSES)
TOL = 1e-4
POST_NORM = dict(block_type="post_norm_mixer", block_dropout=0.01)


@pytest.mark.parametrize("mixer", MIXERS)
def test_post_norm_cached_decode_equals_full_forward(mixer):
    """Prefill + cached token-by-token decode of a post-norm hybrid (mixer + attention) gives the full logits."""
    assert max_cached_decode_error(hybrid_config(mixer, **POST_NORM)) <= TOL


@pytest.mark.parametrize("mixer", ["pd_ssm", "diag_lru", "lrc_ssm"])
def test_post_norm_reload_is_bit_identical_and_keeps_the_block_fields(mixer, tmp_path):
    """save_pretrained -> from_pretrained of a post-norm model gives identical logits and the same block fields."""
    config = hybrid_config(mixer, **POST_NORM)
    assert reload_is_bit_identical(config, str(tmp_path))
    reloaded = HybridSSMConfig.from_pretrained(tmp_path)
    assert (reloaded.block_type, reloaded.block_dropout) == ("post_norm_mixer", 0.01)


def test_post_norm_loads_through_remote_code_without_hf_ssm(tmp_path):
    """A post-norm PD-SSM checkpoint loads with trust_remote_code where hf_ssm is not importable, identical logits."""
    directory = tmp_path / "post_norm"
    model = HybridSSMForCausalLM(tiny_config("PP", **POST_NORM))
    save_with_reference(model, directory, {"input_ids": torch.randint(1, 37, (2, 11))})
    assert "modeling_hybrid_ssm.py" in os.listdir(directory)
    (result,) = load_without_hf_ssm([{"directory": str(directory), "auto_class": "AutoModelForCausalLM"}], tmp_path)
    assert result["class"] == "HybridSSMForCausalLM" and "hf_ssm" not in result["module"], result
    assert result["identical"]


def test_post_norm_block_has_no_mlp_no_residual_and_no_final_norm():
    """The block is LayerNorm(Mixer(x) [+ D_skip x]) only: no SwiGLU / RMSNorm weights, no final norm."""
    model = HybridSSMForCausalLM(tiny_config("PD", **POST_NORM))
    names = [n for n, _ in model.named_parameters()]
    assert not any(".mlp." in n or "input_layernorm" in n or n.startswith("model.norm") for n in names), names
    pd_layer, lru_layer = model.model.layers
    assert pd_layer.skip is None  # the pd_ssm mixer's own D_skip is the skip
    assert lru_layer.skip is not None and torch.equal(lru_layer.skip, torch.ones(32))
    assert isinstance(model.model.norm, torch.nn.Identity)


@pytest.mark.parametrize("mixer", ["diag_lru", "attention"])
def test_post_norm_block_computes_layernorm_of_mixer_plus_skip(mixer):
    """For a mixer without its own skip: block(x) = LayerNorm(Mixer(x) + D_skip * x) (eval: no dropout)."""
    model = HybridSSMForCausalLM(tiny_config([mixer], **POST_NORM, lru_total_state_size=8)).eval()
    layer = model.model.layers[0]
    with torch.no_grad():
        layer.skip.uniform_(0.5, 1.5)
        x = torch.randn(2, 7, 32)
        if mixer == "attention":
            positions = torch.arange(7)[None]
            rope = model.model.rotary_emb(x, positions)
            got = layer(x, position_embeddings=rope)
            mixed = layer.mixer(x, rope, None)[0]
        else:
            got = layer(x)
            mixed = layer.mixer(x)[0]
        expected = layer.output_layernorm(mixed + layer.skip * x)
    assert torch.allclose(got, expected, atol=1e-6)


def test_post_norm_dropout_never_drops_the_pd_ssm_skip_term():
    """With Re(C x) = 0 the PD-SSM post-norm block is LayerNorm(D_skip * u) even in training with dropout:
    only Re(C x) is dropped out, as in the authors' block, never the D_skip * u term."""
    config = tiny_config("P", block_type="post_norm_mixer", block_dropout=0.5)
    layer = HybridSSMForCausalLM(config).model.layers[0].train()
    with torch.no_grad():
        layer.mixer.out_proj.weight.zero_()
        layer.mixer.skip.uniform_(0.5, 1.5)
        x = torch.randn(2, 7, 32)
        assert torch.allclose(layer(x), layer.output_layernorm(layer.mixer.skip * x), atol=1e-6)


def test_post_norm_dropout_is_active_in_training_only():
    """block_dropout drops out the mixer output in training mode; eval mode is deterministic."""
    model = HybridSSMForCausalLM(
        tiny_config("D", block_type="post_norm_mixer", block_dropout=0.5, lru_total_state_size=8)
    )
    ids = torch.randint(1, 37, (2, 9))
    with torch.no_grad():
        model.train()
        torch.manual_seed(0)
        a = model(ids).logits
        torch.manual_seed(1)
        b = model(ids).logits
        model.eval()
        c, d = model(ids).logits, model(ids).logits
    assert not torch.equal(a, b)
    assert torch.equal(c, d)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"block_type": "post_norm"},
            "`block_type` must be one of ['pre_norm_residual', 'post_norm_mixer', 'mixer_mlp', 'mixer_only']",
        ),
        ({"block_dropout": 0.1}, "applies only to block_type='post_norm_mixer'"),
        ({"block_type": "post_norm_mixer", "block_dropout": 1.0}, "`block_dropout` must be a number in [0, 1)"),
        ({"block_type": "post_norm_mixer", "block_dropout": -0.1}, "`block_dropout` must be a number in [0, 1)"),
        ({"block_type": "post_norm_mixer", "block_dropout": "0.1"}, "`block_dropout` must be a number in [0, 1)"),
    ],
)
def test_bad_block_fields_raise_a_clear_error(fields, message):
    """An unknown block type, dropout outside [0, 1), or dropout on the pre-norm block is refused by name."""
    with pytest.raises(ValueError) as err:
        tiny_config("P", **fields)
    assert message in str(err.value)
