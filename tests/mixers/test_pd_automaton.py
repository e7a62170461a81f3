"""The pure automaton's direct-transition training path (hf_ssm/ops/pd/automaton.py): its states and the
straight-through gradient of its logits equal the general path's (`pd_scan` given the column softmax as p_soft), for
every basis or zero start, with padding; and the layer takes it exactly when its states are basis vectors."""

from __future__ import annotations

import pytest
import torch

import hf_ssm.modeling.pd_transitions as pd_transitions
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from hf_ssm.ops.pd import automaton_direct_scan, pd_scan
from model_checks import tiny_config

B, T, H, N = 3, 11, 2, 5


def _start(kind: str) -> torch.Tensor:
    """(B, H, N) complex128: e_0 in every head, e_(h + 1) in head h, or zeros."""
    x0 = torch.zeros(B, H, N, dtype=torch.complex128)
    if kind == "one_hot":
        x0[..., 0] = 1
    elif kind == "head_basis":
        x0[:, torch.arange(H), torch.arange(H) + 1] = 1
    return x0


@pytest.mark.parametrize("start", ["one_hot", "head_basis", "zeros"])
@pytest.mark.parametrize("padded", [False, True])
def test_fast_path_equals_the_general_straight_through_path(start, padded):
    torch.manual_seed(0)
    logits = torch.randn(B, T, H, N, N, dtype=torch.float64, requires_grad=True)
    mask = None
    idx = logits.detach().max(dim=-2).indices
    if padded:
        mask = torch.ones(B, T, dtype=torch.long)
        mask[0, -3:] = 0  # right padding
        mask[1, :2] = 0  # left padding
        idx = torch.where(mask.bool()[..., None, None], idx, torch.arange(N))
    x0, temperature = _start(start), 0.7
    weights = torch.randn(B, T, H, N, dtype=torch.complex128)
    final_weights = torch.randn(B, H, N, dtype=torch.complex128)

    def loss(states, final):
        return (states * weights).real.sum() + (final * final_weights).real.sum()

    states, final = automaton_direct_scan(logits, idx, x0, mask, temperature)
    (fast,) = torch.autograd.grad(loss(states, final), logits)

    soft = torch.softmax(logits / temperature, dim=-2)
    if mask is not None:
        soft = soft * mask.to(soft.dtype)[..., None, None, None]
    ones = torch.ones(B, T, H, N, dtype=torch.complex128)
    ref_states, ref_final = pd_scan(idx, ones, torch.zeros_like(ones), x0, soft)
    (general,) = torch.autograd.grad(loss(ref_states, ref_final), logits)

    assert torch.equal(states, ref_states) and torch.equal(final, ref_final)
    assert torch.allclose(fast, general, rtol=1e-12, atol=1e-14)
    assert fast.abs().sum() > 0 if start != "zeros" else fast.abs().sum() == 0


def _direct_layer(**overrides) -> PDSSMMixer:
    torch.manual_seed(0)
    fields = dict(
        pd_ssm_transition="direct", pd_ssm_diagonal="unit", pd_ssm_input="none", pd_ssm_initial_state="one_hot"
    )
    return PDSSMMixer(tiny_config("S", **{**fields, **overrides}), 0)


@pytest.mark.parametrize("start", ["one_hot", "head_basis"])  # a zero start without input is refused by the config
def test_layer_gradients_equal_those_of_the_general_path(monkeypatch, start):
    layer = _direct_layer(pd_ssm_initial_state=start)
    assert layer.is_pure_automaton()
    u = torch.randn(2, 9, 32)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, -4:] = 0

    def gradients():
        layer.zero_grad()
        out, final = layer(u, mask=mask)
        (out.square().sum() + final.real.sum()).backward()
        return out.detach(), {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}

    calls = []
    real_fast_path = pd_transitions.automaton_direct_scan
    monkeypatch.setattr(pd_transitions, "automaton_direct_scan", lambda *a: calls.append(1) or real_fast_path(*a))
    out_fast, fast = gradients()
    monkeypatch.setattr(PDSSMMixer, "is_pure_automaton", lambda self: False)
    out_general, general = gradients()

    assert calls == [1]  # the fast path ran once, then not under the patched condition
    assert torch.equal(out_fast, out_general) and fast.keys() == general.keys() and "transition_proj.weight" in fast
    for name in fast:
        assert torch.allclose(fast[name], general[name], rtol=1e-4, atol=1e-6), name


@pytest.mark.parametrize(
    "overrides",
    [{"pd_ssm_diagonal": "magnitude"}, {"pd_ssm_input": "projection"}, {"pd_ssm_initial_state": "learned"}],
)
def test_a_layer_whose_states_are_not_basis_vectors_is_not_a_pure_automaton(overrides):
    assert not _direct_layer(**overrides).is_pure_automaton()


def test_a_passed_in_state_takes_the_general_path(monkeypatch):
    layer = _direct_layer(pd_ssm_initial_state="one_hot")
    monkeypatch.setattr(
        pd_transitions, "automaton_direct_scan", lambda *a: pytest.fail("fast path with a passed state")
    )
    state = torch.randn(1, layer.num_heads, layer.head_state_size, dtype=torch.complex64)  # not a basis vector
    out, _ = layer(torch.randn(1, 4, 32), state=state)
    out.sum().backward()
    assert layer.transition_proj.weight.grad is not None
