"""config.pd_ssm_shared_selection: in bank mode one choice of entry per token for every head. What it
computes (every head applies its own entry k_t for the same k_t), W_s's size, the gradient reaching it, its config
check, save / reload, cached decode (the fused decode step is skipped) and remote-code loading."""

from __future__ import annotations

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from hf_ssm.modeling.pd_bank import bank_indices
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config

SHARED = dict(pd_ssm_transition="bank", pd_ssm_shared_selection=True)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pd_ssm_shared_selection": True}, "needs pd_ssm_transition='bank' (got 'dictionary'"),
        ({"pd_ssm_shared_selection": True, "pd_ssm_transition": "direct"}, "got 'direct'"),
        ({**SHARED, "pd_ssm_shared_selection": 1}, "must be True or False, got 1"),
    ],
)
def test_the_config_check_names_the_field_and_the_accepted_values(fields, message):
    with pytest.raises(ValueError, match="pd_ssm_shared_selection") as err:
        tiny_config("P", **fields)
    assert message in str(err.value)


@torch.no_grad()
def test_every_head_takes_its_own_entry_of_one_shared_choice():
    torch.manual_seed(0)
    config = tiny_config(
        "P", pd_ssm_dict_size=6, pd_ssm_diagonal="unit", pd_ssm_input="none", pd_ssm_initial_state="one_hot", **SHARED
    )
    layer = PDSSMMixer(config, 0)
    assert layer.selection.weight.shape == (6, 32)
    u = torch.randn(2, 7, 32)
    logits = layer.transition_logits(u)
    assert logits.shape == (2, 7, 2, 6) and torch.equal(logits[:, :, 0], logits[:, :, 1])
    choice = (u @ layer.selection.weight.T).argmax(-1)  # (B, T): the one symbol of each token
    bank = bank_indices(layer.dictionary)  # (H, K, N)
    state = torch.zeros(2, 2, dtype=torch.long)  # every head starts in state 0
    for t in range(7):
        state = torch.stack([bank[h, choice[:, t], state[:, h]] for h in range(2)], dim=1)
    _, final = layer(u)
    assert torch.equal(final.abs().argmax(-1), state)


def test_the_shared_selection_gets_a_gradient_and_keeps_its_identity_entry_bias():
    config = tiny_config("P", pd_ssm_identity_entry_logit=2.0, pd_ssm_dictionary_diagonal_init=0.0, **SHARED)
    torch.manual_seed(0)
    layer = PDSSMMixer(config, 0)
    assert torch.equal(layer.selection.bias, torch.tensor([2.0, 0.0, 0.0, 0.0]))
    out, _ = layer(torch.randn(2, 9, 32))
    out.square().sum().backward()
    assert layer.selection.weight.grad.abs().sum() > 0


def test_cached_decode_reload_and_remote_code(tmp_path):
    config = tiny_config("PAP", **SHARED)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path / "reload"))
    assert HybridSSMConfig.from_pretrained(tmp_path / "reload").pd_ssm_shared_selection is True
    assert_loads_without_hf_ssm(HybridSSMForCausalLM(tiny_config("PA", **SHARED)), tmp_path / "remote")
