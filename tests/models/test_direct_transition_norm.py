"""config.pd_ssm_transition_norm: the direct transition reads RMSNorm(u_t) with its own gain. What it
computes, its config check, save / reload, cached decode and remote-code loading; and the init of a direct mixer
without D_skip (W_P and C were left at the generic init)."""

from __future__ import annotations

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM, HybridSSMForTokenClassification
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config

NORMED = dict(pd_ssm_transition="direct", pd_ssm_transition_norm=True)


def test_the_config_check_names_the_field():
    for bad in (1, "true", None):
        with pytest.raises(ValueError, match="pd_ssm_transition_norm"):
            tiny_config("P", pd_ssm_transition_norm=bad)


@torch.no_grad()
def test_logits_are_w_p_of_the_normed_input_whatever_its_scale():
    """P_t's logits = W_P (g * u_t / RMS(u_t)): a rescaled input gives the same logits (up to the norm's eps); the gain starts at 1 and
    trains; without the option the layer has no norm and its logits are W_P u_t."""
    torch.manual_seed(0)
    layer = PDSSMMixer(tiny_config("P", **NORMED), 0)
    norm = layer.transition_norm
    assert torch.equal(norm.weight, torch.ones(32)) and norm.weight.requires_grad
    u = torch.randn(2, 5, 32)
    expected = (u / u.pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt()) @ layer.transition_proj.weight.T
    logits = layer.transition_logits(u)
    torch.testing.assert_close(logits, expected.view(2, 5, *logits.shape[2:]))
    torch.testing.assert_close(layer.transition_logits(0.02 * u), logits, rtol=1e-2, atol=1e-2)
    plain = PDSSMMixer(tiny_config("P", pd_ssm_transition="direct"), 0)
    assert plain.transition_norm is None
    assert torch.equal(plain.transition_logits(u).flatten(2), u @ plain.transition_proj.weight.T)


def test_the_gain_is_in_the_model_init_and_trains(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("P", **NORMED))
    gain = model.model.layers[0].mixer.transition_norm.weight
    assert torch.equal(gain, torch.ones_like(gain))
    ids = torch.randint(1, 37, (2, 7))
    model(input_ids=ids, labels=ids).loss.backward()
    assert gain.grad is not None and gain.grad.abs().sum() > 0


def test_cached_decode_and_reload(tmp_path):
    config = tiny_config("PAP", **NORMED)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path))
    assert HybridSSMConfig.from_pretrained(tmp_path).pd_ssm_transition_norm is True


def test_trust_remote_code_loads_without_hf_ssm(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("PA", **NORMED))
    with torch.no_grad():
        model.model.layers[0].mixer.transition_norm.weight.uniform_(0.5, 1.5)  # a trained gain travels too
    assert_loads_without_hf_ssm(model, tmp_path / "normed")


@pytest.mark.parametrize("cls", [HybridSSMForCausalLM, HybridSSMForTokenClassification])
def test_a_direct_mixer_without_skip_gets_its_own_init(cls, tmp_path):
    """Regression: a direct-transition mixer without D_skip owns no parameter itself (only W_P and C), and
    transformers took it for initialised, so W_P and C kept the generic N(0, 0.02^2) init. Now W_P ~ N(0, s^2 / d)
    and C is the identity, also after a reload that must keep the saved (trained) values instead."""
    config = tiny_config(
        "P", hidden_size=32, pd_ssm_num_heads=2, pd_ssm_head_state_size=8, pd_ssm_output_skip=False,
        pd_ssm_output_init="identity", pd_ssm_output_trainable=False, pd_ssm_transition_init_scale=3.0,
        block_type="post_norm_mixer", **NORMED,
    )  # fmt: skip
    torch.manual_seed(0)
    model = cls(config)
    mixer = model.model.layers[0].mixer
    assert torch.equal(mixer.out_proj.weight, torch.eye(32))
    assert mixer.transition_proj.weight.std().item() == pytest.approx(3.0 / 32**0.5, rel=0.1)
    with torch.no_grad():
        mixer.transition_proj.weight.mul_(2.0)
    model.save_pretrained(tmp_path)
    loaded = cls.from_pretrained(tmp_path).model.layers[0].mixer
    assert torch.equal(loaded.transition_proj.weight, mixer.transition_proj.weight)
