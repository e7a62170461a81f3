"""The decode step (one token on a cache): equal to the full forward with padding, in both PD transition modes and
with one or several PD heads; greedy generate equal to an uncached argmax loop; the T = 1 shortcuts of the PD
mixer equal its sequence path."""

from __future__ import annotations

import inspect

import pytest
import torch

from hf_ssm import HybridSSMForCausalLM
from model_checks import tiny_config

# (transition, heads): heads = 1 takes the single-head shortcuts of the decode step (one 2-D product for the
# dictionary mode's transition, one linear map for each MLP's per-head layer), heads = 2 the batched ones.
MODES = [("dictionary", 1), ("dictionary", 2), ("bank", 1), ("bank", 2)]


def _model(transition: str, heads: int, pattern: str = "SA") -> HybridSSMForCausalLM:
    config = tiny_config(pattern, pd_ssm_transition=transition, pd_ssm_num_heads=heads)
    return HybridSSMForCausalLM(config).eval()


@pytest.mark.parametrize(("transition", "heads"), MODES)
@torch.no_grad()
def test_masked_token_by_token_decode_equals_full_forward(transition, heads):
    """Feeding a left-padded batch one token at a time (padding included, the mask growing with the cache) gives
    the full forward's logits at every real position (<= 1e-4), in both transition modes."""
    torch.manual_seed(0)
    model = _model(transition, heads)
    ids = torch.randint(1, 37, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding of different lengths; row 0 has none
    mask[2, :1] = 0
    full = model(ids, attention_mask=mask, use_cache=False).logits
    cache, steps = None, []
    for t in range(ids.shape[1]):
        out = model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache, use_cache=True)
        cache = out.cache
        steps.append(out.logits)
    decoded = torch.cat(steps, dim=1)
    real = mask.bool()
    assert torch.isfinite(decoded[real]).all()
    assert (decoded[real] - full[real]).abs().max().item() <= 1e-4


@pytest.mark.parametrize(("transition", "heads"), MODES)
@torch.no_grad()
def test_padding_fed_in_decode_steps_leaves_ssm_state_unchanged(transition, heads):
    """A decode step on a padding token (mask 0) returns the cached SSM state exactly."""
    torch.manual_seed(1)
    model = _model(transition, heads)
    ids = torch.randint(1, 37, (2, 5))
    cache = model(ids, use_cache=True).cache
    before = cache.layers[0].recurrent_states[0].clone()
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[:, -1] = 0
    model(torch.randint(1, 37, (2, 1)), attention_mask=mask, cache=cache, use_cache=True)
    assert torch.equal(cache.layers[0].recurrent_states[0], before)


@pytest.mark.parametrize(("transition", "heads"), MODES)
@torch.no_grad()
def test_greedy_generate_equals_uncached_argmax_loop(transition, heads):
    """generate(do_sample=False) with a padded batch equals taking the argmax of an uncached full forward again
    and again (token-identical)."""
    torch.manual_seed(2)
    model = _model(transition, heads, "SASA")
    ids = torch.randint(1, 37, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = 0
    out = model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    for _ in range(10):
        nxt = model(ids, attention_mask=mask, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        ids, mask = torch.cat([ids, nxt], dim=1), torch.cat([mask, torch.ones_like(nxt)], dim=1)
    assert torch.equal(out, ids)


@pytest.mark.parametrize("heads", [1, 2])
@torch.no_grad()
def test_single_step_diagonal_equals_sequence_diagonal(heads):
    """D_t computed for one step (both MLPs' hidden layers through one GELU call) equals D_t of the same step
    computed inside a sequence (<= 1e-6)."""
    torch.manual_seed(3)
    mixer = _model("dictionary", heads).model.layers[0].mixer
    u = torch.randn(2, 6, 32)
    sequence = mixer.diagonal(u)
    for t in range(u.shape[1]):
        step = mixer.diagonal(u[:, t : t + 1])
        assert step.shape == (2, 1, heads, 5) and step.dtype == torch.complex64
        assert (step[:, 0] - sequence[:, t]).abs().max().item() <= 1e-6, f"step {t}"


def test_forward_signature_is_the_undecorated_forwards():
    """The signature generate reads from model.forward every step (cached on the class) is the one of the
    forward under its decorators, so input names generate checks (attention_mask, logits_to_keep...) still match."""
    model = _model("dictionary", 1)
    undecorated = inspect.signature(inspect.unwrap(HybridSSMForCausalLM.forward))
    assert list(inspect.signature(model.forward).parameters) == list(undecorated.parameters)[1:]
    assert "logits_to_keep" in inspect.signature(model.forward).parameters
