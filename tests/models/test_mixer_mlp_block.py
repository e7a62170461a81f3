"""The blocks without the residual around the mixer (config.block_type = "mixer_mlp", and "mixer_only": the mixer
alone) and the PD-SSM output without D_skip u (config.pd_ssm_output_skip = False): what they compute,
their config checks, reload, cached decode and remote-code loading."""

from __future__ import annotations

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from hf_ssm.modeling.modeling_hybrid_ssm import HybridSSMRMSNorm
from model_checks import (
    assert_loads_without_hf_ssm,
    hybrid_config,
    max_cached_decode_error,
    reload_is_bit_identical,
    tiny_config,
)

STATE_READOUT = dict(block_type="mixer_mlp", pd_ssm_output_skip=False)


def test_config_checks_name_the_fields():
    with pytest.raises(ValueError, match="block_type.*pre_norm_residual.*post_norm_mixer.*mixer_mlp.*mixer_only"):
        tiny_config("P", block_type="mixer_alone")
    for block_type in ("mixer_mlp", "mixer_only"):
        with pytest.raises(ValueError, match="block_dropout"):
            tiny_config("P", block_type=block_type, block_dropout=0.1)
    for bad in (0, "false", None):
        with pytest.raises(ValueError, match="pd_ssm_output_skip"):
            tiny_config("P", pd_ssm_output_skip=bad)


@torch.no_grad()
def test_mixer_mlp_block_has_no_residual_around_the_mixer():
    """Layer output = m + SwiGLU(RMSNorm(m)) with m = Mixer(RMSNorm(x)): x itself is not added."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(tiny_config("P", block_type="mixer_mlp")).eval()
    layer = model.model.layers[0]
    x = torch.randn(2, 6, 32)
    mixed, _ = layer.mixer(layer.input_layernorm(x))
    expected = mixed + layer.mlp(layer.post_mixer_layernorm(mixed))
    assert torch.allclose(layer(x), expected, atol=1e-6)


@torch.no_grad()
def test_output_skip_off_gives_re_cx_alone_and_no_skip_parameter():
    """pd_ssm_output_skip=False: y = Re(C x) exactly (the default layer's output less D_skip u), no D_skip weight."""
    torch.manual_seed(0)
    with_skip = PDSSMMixer(tiny_config("S"), 0).eval()
    torch.manual_seed(0)
    without = PDSSMMixer(tiny_config("S", pd_ssm_output_skip=False), 0).eval()
    assert without.skip is None and "skip" not in dict(without.named_parameters())
    u = torch.randn(2, 7, 32)
    y_with, final_with = with_skip(u)
    y_without, final_without = without(u)
    assert torch.allclose(y_without, y_with - with_skip.skip * u, atol=1e-6)
    assert torch.equal(final_with, final_without)


@pytest.mark.parametrize("transition", ["dictionary", "bank", "direct"])
def test_state_readout_cached_decode_and_reload(transition, tmp_path):
    config = tiny_config("PAP", pd_ssm_transition=transition, **STATE_READOUT)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path))
    loaded = HybridSSMConfig.from_pretrained(tmp_path)
    assert (loaded.block_type, loaded.pd_ssm_output_skip) == ("mixer_mlp", False)


def test_mixer_mlp_block_decodes_with_other_mixers():
    assert max_cached_decode_error(hybrid_config("diag_lru", block_type="mixer_mlp")) < 1e-4


def test_output_skip_off_in_a_post_norm_block_has_no_skip_at_all():
    """post_norm_mixer with pd_ssm_output_skip=False: LayerNorm(Dropout(Re(C x))), no block D_skip either."""
    torch.manual_seed(0)
    config = tiny_config("P", block_type="post_norm_mixer", block_dropout=0.5, pd_ssm_output_skip=False)
    model = HybridSSMForCausalLM(config)
    layer = model.model.layers[0]
    assert layer.skip is None and layer.mixer.skip is None
    model.train()
    model(input_ids=torch.randint(1, 37, (2, 5))).logits.sum().backward()  # the dropout path runs
    assert max_cached_decode_error(tiny_config("PA", block_type="post_norm_mixer", pd_ssm_output_skip=False)) < 1e-4


def test_state_readout_trust_remote_code_loads_without_hf_ssm(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("PA", pd_ssm_transition="direct", **STATE_READOUT))
    assert_loads_without_hf_ssm(model, tmp_path / "state_readout")


def test_identity_output_init_starts_c_at_the_identity_and_is_checked(tmp_path):
    """pd_ssm_output_init="identity": C = I (d = 2HN = 20 here), also through the model's init; a reload keeps a
    trained C (the init does not run again); too narrow a model and unknown values are refused, naming the field."""
    config = tiny_config(
        "PA",
        hidden_size=20,
        num_attention_heads=2,
        num_key_value_heads=2,
        pd_ssm_output_init="identity",
        **STATE_READOUT,
    )
    model = HybridSSMForCausalLM(config)
    out_proj = model.model.layers[0].mixer.out_proj
    assert torch.equal(out_proj.weight, torch.eye(20))
    assert max_cached_decode_error(config) < 1e-4
    with torch.no_grad():
        out_proj.weight.add_(torch.randn(20, 20))
    model.save_pretrained(tmp_path)
    reloaded = HybridSSMForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(reloaded.model.layers[0].mixer.out_proj.weight, out_proj.weight)
    assert reloaded.config.pd_ssm_output_init == "identity"
    with pytest.raises(ValueError, match="pd_ssm_output_init='identity'.*hidden_size"):
        tiny_config("P", hidden_size=16, num_attention_heads=4, pd_ssm_output_init="identity")
    with pytest.raises(ValueError, match="pd_ssm_output_init.*normal.*identity"):
        tiny_config("P", pd_ssm_output_init="eye")


def test_output_init_scale_scales_c_at_the_start_only_and_is_checked(tmp_path):
    """pd_ssm_output_init_scale s: C starts N(0, (s * initializer_range)^2) or s times the identity, through the
    model's init; s = 1 given explicitly draws every weight the default config draws (the field changes nothing
    until it is set); a reload keeps the saved C; zero, negative, non-finite and non-numbers are refused naming
    the field."""

    def built(**fields):
        torch.manual_seed(0)
        config = tiny_config("PA", hidden_size=64, pd_ssm_num_heads=4, pd_ssm_head_state_size=8, **fields)
        return HybridSSMForCausalLM(config)

    default, unit, small = built(), built(pd_ssm_output_init_scale=1.0), built(pd_ssm_output_init_scale=0.05)
    weight = small.model.layers[0].mixer.out_proj.weight  # (64, 2 * 4 * 8)
    unit_weights, default_weights = unit.state_dict(), default.state_dict()
    assert all(torch.equal(unit_weights[name], default_weights[name]) for name in default_weights)
    std = default.model.layers[0].mixer.out_proj.weight.std().item()
    assert 0.8 * 0.02 < std < 1.2 * 0.02 and 0.8 * 0.001 < weight.std().item() < 1.2 * 0.001
    small.save_pretrained(tmp_path)
    reloaded = HybridSSMForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(reloaded.model.layers[0].mixer.out_proj.weight, weight)
    assert reloaded.config.pd_ssm_output_init_scale == 0.05
    eye = built(pd_ssm_output_init="identity", pd_ssm_output_init_scale=0.5)
    assert torch.equal(eye.model.layers[0].mixer.out_proj.weight, 0.5 * torch.eye(64))
    for bad in (0, -1.0, float("inf"), "0.1", True):
        with pytest.raises(ValueError, match="`pd_ssm_output_init_scale` must be a finite number > 0"):
            tiny_config("P", pd_ssm_output_init_scale=bad)


def test_frozen_identity_output_keeps_c_through_training_and_reload(tmp_path):
    """pd_ssm_output_trainable=False: C has no gradient and stays the identity after an optimizer step; the flag
    reloads, and a non-bool is refused naming the field."""
    config = tiny_config(
        "P",
        hidden_size=20,
        num_attention_heads=2,
        num_key_value_heads=2,
        block_type="post_norm_mixer",
        pd_ssm_output_skip=False,
        pd_ssm_output_init="identity",
        pd_ssm_output_trainable=False,
    )
    model = HybridSSMForCausalLM(config)
    out_proj = model.model.layers[0].mixer.out_proj
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    ids = torch.randint(1, 37, (2, 7))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    assert out_proj.weight.grad is None and torch.equal(out_proj.weight, torch.eye(20))
    assert reload_is_bit_identical(config, str(tmp_path))
    assert HybridSSMConfig.from_pretrained(tmp_path).pd_ssm_output_trainable is False
    assert max_cached_decode_error(config) < 1e-4
    with pytest.raises(ValueError, match="pd_ssm_output_trainable"):
        tiny_config("P", pd_ssm_output_trainable="no")


@torch.no_grad()
def test_mixer_only_block_is_the_mixer_alone_then_the_final_rmsnorm():
    """block_type="mixer_only": layer output = Mixer(x) exactly (no norm, residual or MLP, and no parameter of the
    block's own); the model's final RMSNorm reads it, so a hidden state of the stack is the mixer's output."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(tiny_config("P", block_type="mixer_only", pd_ssm_output_skip=False)).eval()
    layer = model.model.layers[0]
    x = torch.randn(2, 6, 32)
    assert torch.equal(layer(x), layer.mixer(x)[0])
    assert {name.split(".")[0] for name, _ in layer.named_parameters()} == {"mixer"}
    assert isinstance(model.model.norm, HybridSSMRMSNorm)
    ids = torch.randint(1, 37, (2, 5))
    out = model(input_ids=ids, output_hidden_states=True)
    mixed, _ = layer.mixer(model.model.embed_tokens(ids))
    assert torch.allclose(out.hidden_states[-1], model.model.norm(mixed), atol=1e-6)


@pytest.mark.parametrize("transition", ["dictionary", "direct"])
def test_mixer_only_cached_decode_and_reload(transition, tmp_path):
    config = tiny_config("PAP", block_type="mixer_only", pd_ssm_transition=transition, pd_ssm_output_skip=False)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path))
    assert HybridSSMConfig.from_pretrained(tmp_path).block_type == "mixer_only"
    assert max_cached_decode_error(hybrid_config("diag_lru", block_type="mixer_only")) < 1e-4


def test_mixer_only_trust_remote_code_loads_without_hf_ssm(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("PA", block_type="mixer_only", pd_ssm_transition="direct"))
    assert_loads_without_hf_ssm(model, tmp_path / "mixer_only")
