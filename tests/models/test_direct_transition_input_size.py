"""config.pd_ssm_transition_input_size: the direct transition reads the first k features of u_t only. What it
computes (the other features cannot move P_t), W_P's size and init, the pure automaton's training path with it, its
config check, save / reload, cached decode and remote-code loading."""

from __future__ import annotations

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config

READS_FIVE = dict(pd_ssm_transition="direct", pd_ssm_transition_input_size=5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({**READS_FIVE, "pd_ssm_transition_input_size": 0}, "an int in [1, hidden_size = 32], got 0"),
        ({**READS_FIVE, "pd_ssm_transition_input_size": 33}, "an int in [1, hidden_size = 32], got 33"),
        ({**READS_FIVE, "pd_ssm_transition_input_size": 2.0}, "got 2.0"),
        ({**READS_FIVE, "pd_ssm_transition_input_size": True}, "got True"),
        ({"pd_ssm_transition_input_size": 5}, "needs pd_ssm_transition='direct' (got 'dictionary'"),
    ],
)
def test_the_config_check_names_the_field_and_the_accepted_values(fields, message):
    with pytest.raises(ValueError, match="pd_ssm_transition_input_size") as err:
        tiny_config("P", **fields)
    assert message in str(err.value)


@torch.no_grad()
def test_logits_are_w_p_of_the_first_k_features_and_the_rest_cannot_move_them():
    torch.manual_seed(0)
    layer = PDSSMMixer(tiny_config("P", pd_ssm_transition_init_scale=2.0, **READS_FIVE), 0)
    assert layer.transition_proj.weight.shape == (layer.num_heads * layer.head_state_size**2, 5)
    u = torch.randn(2, 7, 32)
    logits = layer.transition_logits(u)
    assert torch.equal(logits.flatten(2), u[..., :5] @ layer.transition_proj.weight.T)
    changed = u.clone()
    changed[..., 5:] = torch.randn(2, 7, 27)
    assert torch.equal(layer.transition_logits(changed), logits)
    wide = PDSSMMixer(tiny_config("P", pd_ssm_transition="direct"), 0)
    assert wide.transition_proj.weight.shape[1] == 32  # None: all d features, as before


def test_w_p_starts_at_the_init_scale_over_root_k_in_the_model_init():
    config = tiny_config("P", pd_ssm_transition_init_scale=3.0, pd_ssm_num_heads=4, **READS_FIVE)
    torch.manual_seed(0)
    weight = HybridSSMForCausalLM(config).model.layers[0].mixer.transition_proj.weight
    assert weight.std().item() == pytest.approx(3.0 / 5**0.5, rel=0.1)


def test_a_pure_automaton_reading_k_features_trains_on_the_fast_path_with_the_general_gradients():
    config = tiny_config("P", pd_ssm_diagonal="unit", pd_ssm_input="none", pd_ssm_initial_state="one_hot", **READS_FIVE)
    torch.manual_seed(0)
    layer = PDSSMMixer(config, 0)
    u = torch.randn(2, 9, 32)

    def gradient():
        layer.zero_grad()
        out, _ = layer(u)
        out.square().sum().backward()
        return layer.transition_proj.weight.grad.clone()

    fast = gradient()
    layer.is_pure_automaton = lambda: False
    torch.testing.assert_close(fast, gradient(), rtol=1e-4, atol=1e-6)


def test_cached_decode_reload_and_remote_code(tmp_path):
    config = tiny_config("PAP", **READS_FIVE)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path / "reload"))
    assert HybridSSMConfig.from_pretrained(tmp_path / "reload").pd_ssm_transition_input_size == 5
    assert_loads_without_hf_ssm(HybridSSMForCausalLM(tiny_config("PA", **READS_FIVE)), tmp_path / "remote")
