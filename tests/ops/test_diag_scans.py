"""Diagonal scans (hf_ssm/ops/diag/; the DEER steps of the lrc / gru / mgu mixers): the chunked parallel scan equals the
sequential loop, values and gradients, real or complex, at any chunk length; bf16 accumulates in float32; bad input
raises; and the Triton kernel (hf_ssm.ops.diag.triton) equals the torch scan (docs/design.md §6, §9)."""

from __future__ import annotations

import pytest
import torch
from op_checks import SHAPES, TOL, compare, kernel_diag_inputs, kernels, leaf, needs_kernels

from hf_ssm.ops.diag import diag_scan, reference


def _coefficients(shape, dtype):
    """Transition coefficients with zeros, negatives and a few |a| > 1, bounded so that long products stay finite."""
    a = torch.empty(shape, dtype=torch.float64).uniform_(-1.05, 1.05)
    a[:, ::7] = 0.0
    if dtype.is_complex:
        a = torch.polar(a.abs(), torch.rand(shape, dtype=torch.float64) * 6.3)
    return a.to(dtype)


# ------------------------------------------------------------------------------------ torch: scan == loop


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("steps,batch", [(1, 1), (5, 2), (64, 1), (65, 2), (257, 2), (4100, 1)])
def test_diag_scan_matches_sequential_with_gradients(steps, batch, dtype):
    """Parallel diagonal scan == the sequential loop, outputs and gradients (a may be 0, negative, |a| > 1)."""
    a = _coefficients((batch, steps, 3, 2), dtype).requires_grad_()
    b = torch.randn(batch, steps, 3, 2, dtype=dtype, requires_grad=True)
    x0 = torch.randn(batch, 3, 2, dtype=dtype, requires_grad=True)
    tol = 1e-9 if dtype == torch.float64 else 2e-4
    states_ref, final_ref = reference.diag_scan(a, b, x0)
    states, final = diag_scan(a, b, x0)
    assert (states - states_ref).abs().max() <= tol * (1 + states_ref.abs().max())
    assert torch.equal(final, states[:, -1])
    w = torch.randn_like(states_ref)
    grads_ref = torch.autograd.grad((states_ref * w.conj()).real.sum() + final_ref.abs().sum(), (a, b, x0))
    grads = torch.autograd.grad((states * w.conj()).real.sum() + final.abs().sum(), (a, b, x0))
    for g, g_ref in zip(grads, grads_ref):
        assert (g - g_ref).abs().max() <= tol * (1 + g_ref.abs().max())


@pytest.mark.parametrize("chunk", [1, 3, 16, 1000])
def test_diag_scan_chunk_size_does_not_change_result(chunk):
    """Any chunk length (padding, recursion, a single chunk) gives the same states."""
    a, b = _coefficients((2, 300, 4), torch.float64), torch.randn(2, 300, 4, dtype=torch.float64)
    ref, _ = reference.diag_scan(a, b)
    assert torch.allclose(diag_scan(a, b, chunk_size=chunk)[0], ref, atol=1e-12)


def test_diag_scan_bfloat16_accumulates_in_float32():
    """bf16 inputs are scanned in float32: the result equals the float32 scan of the same values, cast to bf16."""
    a = torch.rand(1, 2000, 8).mul(0.2).add(0.8).bfloat16()
    b = torch.randn(1, 2000, 8).bfloat16()
    states, _ = diag_scan(a, b)
    ref, _ = reference.diag_scan(a.float(), b.float())
    assert states.dtype == torch.bfloat16
    assert torch.allclose(states.float(), ref, atol=0.05, rtol=0.01)


def test_diag_scan_bad_inputs_raise():
    """Mismatched shapes, dtypes, a wrong initial state, a wrong mask or T = 0 raise a clear error."""
    a = torch.rand(2, 5, 3)
    with pytest.raises(ValueError, match="share the shape"):
        diag_scan(a, torch.rand(2, 5, 4))
    with pytest.raises(TypeError, match="dtype"):
        diag_scan(a, a.double())
    with pytest.raises(ValueError, match="initial_state"):
        diag_scan(a, a, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        diag_scan(a, a, mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="T >= 1"):
        diag_scan(a[:, :0], a[:, :0])


# ------------------------------------------------------------------------------------ Triton == torch


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64])
@pytest.mark.parametrize("batch,steps,chunk", SHAPES)
def test_diag_scan_matches_torch(dtype, batch, steps, chunk):
    """The kernel == the torch diagonal scan, states, final state and gradients, with and without a start state
    (bf16: on the rounded inputs, the reference in float32)."""
    a, b, x0 = kernel_diag_inputs(batch, steps, dtype)
    inputs = [leaf(t, dtype if dtype == torch.bfloat16 else None) for t in (a, b, x0)]
    ref_inputs = [leaf(t.detach().float() if dtype == torch.bfloat16 else t) for t in inputs]
    tol = TOL.get(dtype, 2e-5)

    def run(a, b, x0):
        return kernels.diag_scan(a, b, x0, chunk_size=chunk)

    compare(run, diag_scan, inputs, ref_inputs, tol)
    # without an initial state
    compare(lambda a, b: run(a, b, None), lambda a, b: diag_scan(a, b), inputs[:2], ref_inputs[:2], tol)
