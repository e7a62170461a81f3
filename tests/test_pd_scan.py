"""PD scan: the chunked parallel scan equals the sequential loop, and PD composition is what it claims."""

from __future__ import annotations

import pytest
import torch

from hf_ssm.modeling.scan_pd import pd_compose, pd_scan, pd_scan_sequential, pd_to_dense


def random_pd_inputs(batch, steps, heads, n, generator=None):
    idx = torch.randint(0, n, (batch, steps, heads, n), generator=generator)
    dv = torch.polar(torch.rand(batch, steps, heads, n) * 0.98 + 0.01, torch.rand(batch, steps, heads, n) * 6.283)
    b = torch.randn(batch, steps, heads, n, dtype=torch.complex64)
    x0 = torch.randn(batch, heads, n, dtype=torch.complex64)
    p_soft = torch.softmax(torch.randn(batch, steps, heads, n, n), dim=-2)
    return idx, dv, b, x0, p_soft


def outputs_and_grads(scan, idx, dv, b, x0, p_soft, grad_states, grad_final):
    leaves = [t.clone().requires_grad_() for t in (dv, b, x0, p_soft)]
    states, final = scan(idx, *leaves)
    loss = (states * grad_states.conj()).real.sum() + (final * grad_final.conj()).real.sum()
    return (states, final, *torch.autograd.grad(loss, leaves))


@pytest.mark.parametrize("steps", [1, 7, 64, 1000])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("n", [1, 5, 16])
def test_parallel_scan_matches_sequential(steps, batch, heads, n):
    """Outputs, final state and gradients w.r.t. dv, b, x0 and the soft P agree with the plain loop."""
    inputs = random_pd_inputs(batch, steps, heads, n)
    grad_states = torch.randn(batch, steps, heads, n, dtype=torch.complex64)
    grad_final = torch.randn(batch, heads, n, dtype=torch.complex64)
    ref = outputs_and_grads(pd_scan_sequential, *inputs, grad_states, grad_final)
    got = outputs_and_grads(pd_scan, *inputs, grad_states, grad_final)
    names = ["states", "final", "grad_dv", "grad_b", "grad_x0", "grad_p_soft"]
    for name, r, g in zip(names, ref, got):
        assert torch.allclose(g, r, atol=2e-5, rtol=1e-4), f"{name}: max err {(g - r).abs().max().item()}"


@pytest.mark.parametrize("chunk", [1, 3, 8, 64])
def test_chunk_size_does_not_change_result(chunk):
    """Any chunk size, including ones that do not divide T, gives the same states."""
    idx, dv, b, x0, _ = random_pd_inputs(2, 37, 2, 6)
    ref, _ = pd_scan_sequential(idx, dv, b, x0)
    got, _ = pd_scan(idx, dv, b, x0, chunk_size=chunk)
    assert torch.allclose(got, ref, atol=1e-5)


def test_states_match_dense_matrix_recurrence():
    """The sparse scan computes x_t = (P_t D_t) x_{t-1} + b_t with the dense P D built from (idx, dv)."""
    idx, dv, b, x0, _ = random_pd_inputs(2, 50, 2, 7)
    dense = pd_to_dense(idx, dv)
    x, expected = x0, []
    for t in range(idx.shape[1]):
        x = (dense[:, t] @ x.unsqueeze(-1)).squeeze(-1) + b[:, t]
        expected.append(x)
    states, _ = pd_scan(idx, dv, b, x0)
    assert torch.allclose(states, torch.stack(expected, dim=1), atol=1e-5)


def test_composition_matches_dense_product_and_is_associative():
    """compose(A2, A1) is the dense product A2 @ A1, is again column-one-hot times diagonal, and is associative."""
    n = 9
    mats = [random_pd_inputs(4, 1, 3, n)[:2] for _ in range(3)]
    mats = [(i[:, 0], d[:, 0]) for i, d in mats]
    a1, a2, a3 = mats
    composed = pd_compose(a2, a1)
    assert torch.allclose(pd_to_dense(*composed), pd_to_dense(*a2) @ pd_to_dense(*a1), atol=1e-6)
    nonzeros_per_column = (pd_to_dense(*composed).abs() > 0).sum(dim=-2)
    assert (nonzeros_per_column <= 1).all()
    left = pd_compose(pd_compose(a3, a2), a1)
    right = pd_compose(a3, pd_compose(a2, a1))
    assert torch.equal(left[0], right[0])
    assert torch.allclose(left[1], right[1], atol=1e-6)


def test_bad_scan_inputs_raise_clear_errors():
    """Bad shapes are rejected with a clear error instead of being broadcast."""
    idx, dv, b, x0, p_soft = random_pd_inputs(1, 4, 1, 3)
    with pytest.raises(ValueError, match="x0"):
        pd_scan(idx, dv, b, x0[:, :, :2])
    with pytest.raises(ValueError, match="p_soft"):
        pd_scan(idx, dv, b, x0, p_soft=p_soft[..., :2])
    with pytest.raises(TypeError, match="complex"):
        pd_scan(idx, dv.real, b, x0)
    with pytest.raises(ValueError, match="chunk_size"):
        pd_scan(idx, dv, b, x0, chunk_size=0)
