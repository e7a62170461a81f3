"""Pieces the scan-op tests (tests/ops/) share: the device the Triton kernels run on, the marks of a kernel test,
random scan inputs, and the comparison of a scan's states, final state and input gradients with its reference.

On a CPU the kernels run in the Triton interpreter: TRITON_INTERPRET=1 must be set before anything imports triton
(tests/conftest.py sets it for the whole tree; this module repeats it for a direct import).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():  # must precede the first import of triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hf_ssm.ops import kernels  # noqa: E402  (never fails: kernels.AVAILABLE says whether triton imported)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
_CAN_RUN, _WHY_NOT = kernels.can_run(DEVICE)
# A test of the Triton kernels carries the `triton` mark (`pytest -m triton tests` selects them all, as a GPU check
# does) and is skipped where the kernels cannot run. A module of such tests sets `pytestmark = KERNEL_MARKS`.
KERNEL_MARKS = [
    pytest.mark.triton,
    pytest.mark.skipif(not _CAN_RUN, reason=f"Triton kernels cannot run on {DEVICE}: {_WHY_NOT}"),
]


def needs_kernels(test):
    """Decorator: KERNEL_MARKS on one test."""
    for mark in KERNEL_MARKS:
        test = mark(test)
    return test


TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}
# (batch, steps, chunk) of the kernel tests: T = 1; odd T in one chunk; T not a multiple of the chunk (3 chunks);
# B = 1 with 2 chunks. Tiny, since on a CPU the kernels run in the interpreter.
SHAPES = [(1, 1, None), (2, 7, None), (2, 11, 4), (1, 9, 5)]


# ------------------------------------------------------------------------------------------------ inputs


def rand(*shape, dtype=torch.float32, scale=1.0):
    """Standard normal values on DEVICE (bfloat16 requests are drawn in float32: rounding is the caller's)."""
    return (scale * torch.randn(*shape, dtype=torch.float32 if dtype == torch.bfloat16 else dtype)).to(DEVICE)


def leaf(t, dtype=None):
    """A fresh leaf on DEVICE, rounded to `dtype` first."""
    t = t if dtype is None else t.to(dtype)
    return t.detach().clone().requires_grad_()


def kernel_block_inputs(batch, steps, blocks, m):
    """Dense blocks A (B, T, N, m, m) with rows of |sum| around 1, inputs b (B, T, N, m), a start state (B, N, m)."""
    A = torch.softmax(rand(batch, steps, blocks, m, m + 1), dim=-1)[..., :m] * 1.2
    b = rand(batch, steps, blocks, m)
    h0 = rand(batch, blocks, m)
    return A, b, h0


def companion_coefficients(batch, steps, blocks, m):
    """Companion first rows a (B, T, N, m): softmax weights, so the recurrence stays bounded."""
    return torch.softmax(rand(batch, steps, blocks, m + 1), dim=-1)[..., :m]


def kernel_diag_inputs(batch, steps, dtype, channels=(3, 2)):
    """Diagonal coefficients a (zeros every 4th step; complex ones with |a| up to 1.1), inputs b, a start state."""
    a_dtype = torch.complex64 if dtype == torch.complex64 else torch.float32
    shape = (batch, steps, *channels)
    if dtype == torch.complex64:  # |a| up to 1.1: growing states are legal too
        a = torch.polar(1.1 * torch.rand(shape, device=DEVICE), 6.3 * torch.rand(shape, device=DEVICE))
    else:
        a = 1.2 * rand(*shape).clamp(-1.0, 1.0)
    a[:, ::4] = 0  # zero coefficients are legal
    b = rand(batch, steps, *channels, dtype=a_dtype)
    x0 = rand(batch, *channels, dtype=a_dtype)
    return a, b, x0


# ------------------------------------------------------------------------------------------------ comparisons


def assert_close(got, ref, tol, what=""):
    """max |got - ref| <= tol * (1 + max |ref|), compared in float32 / complex64."""
    got, ref = got.detach(), ref.detach()
    if got.is_complex() or ref.is_complex():
        got, ref = got.to(torch.complex64), ref.to(torch.complex64)
    else:
        got, ref = got.float(), ref.float()
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= tol * (1 + ref.abs().max().item()), f"{what}: max error {err:.3g}"


def scan_loss(states, final, w, wf):
    """A scalar touching every state and the final state (so both gradients flow)."""
    return (
        (states * w.conj()).real.sum() + (final * wf.conj()).real.sum()
        if states.is_complex()
        else ((states.float() * w).sum() + (final.float() * wf).sum())
    )


def compare(run, ref, inputs, ref_inputs, tol):
    """run(*inputs) and ref(*ref_inputs) -> (states, final): equal outputs and input gradients."""
    states, final = run(*inputs)
    ref_states, ref_final = ref(*ref_inputs)
    assert_close(states, ref_states, tol, "states")
    assert_close(final, ref_final, tol, "final")
    w, wf = torch.randn_like(ref_states), torch.randn_like(ref_final)
    wanted = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(scan_loss(states, final, w, wf), [inputs[i] for i in wanted])
    ref_grads = torch.autograd.grad(scan_loss(ref_states, ref_final, w, wf), [ref_inputs[i] for i in wanted])
    for i, g, r in zip(wanted, grads, ref_grads):
        assert_close(g, r, tol, f"gradient of input {i}")


def compare_rounded(run, ref, tensors, dtype):
    """compare() with the inputs rounded to `dtype` for `run` and the same rounded values in float32 for `ref`."""
    inputs = [leaf(t, dtype) for t in tensors]
    ref_inputs = [leaf(t.detach().float()) for t in inputs]
    compare(run, ref, inputs, ref_inputs, TOL[dtype])


def values_and_grads(fn, tensors, mask):
    """fn(*leaves[, mask]) -> (states, final), and the gradients of every leaf of one fixed weighted loss."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    states, final = fn(*leaves, mask) if mask is not None else fn(*leaves)
    w = torch.randn(states.shape, dtype=states.dtype, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((states * w).sum() + final.square().sum(), leaves)
    return states.detach(), final.detach(), grads
