"""Block scans (hf_ssm/ops/block/; BD-LRU dense m x m blocks, diag_lru with m = 1, H-LRU companion blocks, the LSTM's
DEER step): the chunked scan with its hand-written backward equals the sequential loop and finite differences,
companion blocks are laid out as documented, and the Triton kernels (hf_ssm.ops.block.triton) equal the torch scans,
values and gradients, in float32 and bfloat16, with padding masks (docs/design.md §5, §9)."""

from __future__ import annotations

import pytest
import torch
from op_checks import (
    DEVICE,
    companion_coefficients,
    compare,
    compare_rounded,
    kernel_block_inputs,
    kernels,
    leaf,
    needs_kernels,
    rand,
    values_and_grads,
)

from hf_ssm.modeling.mixer_lru import normalize_gates
from hf_ssm.ops import dispatch
from hf_ssm.ops.block import block_scan, companion_matrices, reference


def random_scan_inputs(batch, steps, blocks, m, dtype=torch.float32):
    """Transitions with row-normalised signed entries (as the mixers make them), inputs and an initial state."""
    p = normalize_gates(3 * torch.randn(batch, steps, blocks, m, m + 1, dtype=dtype), "tanh_l1")
    A = p[..., :m].contiguous().requires_grad_()
    b = torch.randn(batch, steps, blocks, m, dtype=dtype, requires_grad=True)
    x0 = torch.randn(batch, blocks, m, dtype=dtype, requires_grad=True)
    return A, b, x0


# ------------------------------------------------------------------------------------ torch: scan == loop


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_parallel_block_scan_matches_sequential(m):
    """block_scan (chunked, hand-written backward) == the sequential loop: states, final state and the gradients
    of A, b and x0, for B = 1, odd T and several chunk sizes (dividing T or not)."""
    A, b, x0 = random_scan_inputs(1, 37, 3, m)
    g_states, g_final = torch.randn(1, 37, 3, m), torch.randn(1, 3, m)
    ref_states, ref_final = reference.block_scan(A, b, x0)
    ref_grads = torch.autograd.grad((ref_states * g_states).sum() + (ref_final * g_final).sum(), (A, b, x0))
    for chunk in (None, 1, 5, 37, 64):
        states, final = block_scan(A, b, x0, chunk_size=chunk)
        grads = torch.autograd.grad((states * g_states).sum() + (final * g_final).sum(), (A, b, x0))
        torch.testing.assert_close(states, ref_states, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(final, ref_final, atol=1e-5, rtol=1e-5)
        for got, want in zip(grads, ref_grads):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("steps", [1, 2, 16])
def test_block_scan_edge_cases(steps):
    """T = 1 and short T, B = 2, no initial state, gradient through the final state only: same as the loop."""
    A, b, _ = random_scan_inputs(2, steps, 2, 3)
    states, final = block_scan(A, b, chunk_size=4)
    ref_states, ref_final = reference.block_scan(A, b)
    torch.testing.assert_close(states, ref_states, atol=1e-6, rtol=1e-5)
    grads = torch.autograd.grad(final.pow(2).sum(), (A, b))
    ref_grads = torch.autograd.grad(ref_final.pow(2).sum(), (A, b))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_block_scan_backward_passes_gradcheck():
    """The hand-written backward equals finite differences (float64), independently of the sequential loop."""
    A, b, x0 = random_scan_inputs(1, 7, 2, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda A, b, x0: block_scan(A, b, x0, chunk_size=3), (A, b, x0))


def test_block_scan_rejects_bad_shapes():
    """Mismatched shapes, T = 0 and a wrong initial state raise ValueError instead of broadcasting silently."""
    A, b, x0 = random_scan_inputs(1, 5, 2, 3)
    with pytest.raises(ValueError, match="A must have shape"):
        block_scan(A[..., :2], b)
    with pytest.raises(ValueError, match="initial_state must have shape"):
        block_scan(A, b, x0[:, :1])
    with pytest.raises(ValueError, match="T >= 1"):
        block_scan(A[:, :0], b[:, :0])
    with pytest.raises(ValueError, match="b must have shape"):
        reference.block_scan(A, b[0])


def test_companion_matrix_layout():
    """companion_matrices puts (a_1 ... a_m) in the first row and ones on the sub-diagonal."""
    C = companion_matrices(torch.tensor([0.5, 0.3, 0.2]))
    assert torch.equal(C, torch.tensor([[0.5, 0.3, 0.2], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))


@pytest.mark.parametrize("steps", [16, 13])
def test_block_scan_on_planar_views_equals_contiguous_input(steps):
    """Slot-major (planar) inputs, passed as transposed views as DEER passes them, give the states, final state
    and gradients of the same values stored (B, T, N, m); T a multiple of the chunk (read in place) or not."""
    A, b, h0 = random_scan_inputs(2, steps, 5, 2, dtype=torch.float64)
    planar = (A.permute(0, 1, 3, 4, 2).contiguous(), b.transpose(-1, -2).contiguous())

    def as_views(Ap, bp, h):
        return block_scan(Ap.permute(0, 1, 4, 2, 3), bp.transpose(-1, -2), h, chunk_size=4)

    def contiguous(A_, b_, h):
        return block_scan(A_, b_, h, chunk_size=4)

    got = values_and_grads(as_views, (*planar, h0), None)
    want = values_and_grads(contiguous, (A, b, h0), None)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    torch.testing.assert_close(got[2][0].permute(0, 1, 4, 2, 3), want[2][0])
    torch.testing.assert_close(got[2][1].transpose(-1, -2), want[2][1])
    torch.testing.assert_close(got[2][2], want[2][2])


# ------------------------------------------------------------------------------------ Triton == torch


def _companion_reference(a, v, h0, mask=None):
    return dispatch.scan_ops("torch", DEVICE).companion_scan(a, v, h0, mask)


@needs_kernels
@pytest.mark.parametrize(
    "m,dtype,batch,steps,chunk",
    [
        # (m, dtype, batch, steps, chunk)
        (1, torch.float32, 2, 11, 4),
        (2, torch.float32, 1, 1, None),
        (3, torch.float32, 2, 7, None),
        (3, torch.bfloat16, 2, 11, 4),
        (4, torch.float32, 1, 9, 5),
        (8, torch.float32, 2, 11, 4),
        (8, torch.bfloat16, 1, 1, None),
    ],
)
def test_block_scan_matches_torch(m, dtype, batch, steps, chunk):
    """The dense-block kernel == the torch block scan, states, final state and gradients (bf16: on the rounded
    inputs, the reference in float32)."""
    compare_rounded(
        lambda A, b, h0: kernels.block_scan(A, b, h0, chunk_size=chunk),
        block_scan,
        kernel_block_inputs(batch, steps, 3, m),
        dtype,
    )


@needs_kernels
@pytest.mark.parametrize(
    "m,dtype,batch,steps,chunk",
    [
        (2, torch.float32, 2, 11, 4),
        (3, torch.bfloat16, 1, 9, 5),
        (4, torch.float32, 1, 1, None),
        (8, torch.float32, 2, 7, None),
    ],
)
def test_companion_scan_matches_torch(m, dtype, batch, steps, chunk):
    """The companion-block kernel == the torch companion scan, states, final state and gradients."""
    a = companion_coefficients(batch, steps, 3, m)
    v, h0 = rand(batch, steps, 3), rand(batch, 3, m)
    compare_rounded(
        lambda a, v, h0: kernels.companion_scan(a, v, h0, chunk_size=chunk), _companion_reference, (a, v, h0), dtype
    )


@needs_kernels
@pytest.mark.parametrize("companion", [False, True], ids=["dense", "companion"])
def test_block_scans_with_padding_mask(companion):
    """A masked step is the identity with zero input (padding), in the kernel and in the torch path."""
    m, batch, steps = 3, 2, 11
    mask = torch.rand(batch, steps, device=DEVICE) > 0.3
    if companion:
        first = companion_coefficients(batch, steps, 2, m)
        inputs = [leaf(t) for t in (first, rand(batch, steps, 2), rand(batch, 2, m))]
        run, ref = kernels.companion_scan, _companion_reference
    else:
        inputs = [leaf(t) for t in kernel_block_inputs(batch, steps, 2, m)]
        run = kernels.block_scan

        def ref(A, b, h0, mask):
            return dispatch.scan_ops("torch", DEVICE).block_scan(A, b, h0, mask)

    ref_inputs = [leaf(t) for t in inputs]
    compare(lambda *t: run(*t, mask=mask, chunk_size=4), lambda *t: ref(*t, mask=mask), inputs, ref_inputs, 2e-5)


@needs_kernels
def test_block_scan_rejects_large_blocks():
    A, b, _ = kernel_block_inputs(1, 3, 1, 9)
    with pytest.raises(ValueError, match="m in"):
        kernels.block_scan(A, b)
