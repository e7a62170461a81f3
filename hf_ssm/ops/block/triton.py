"""The block family's Triton kernels: h_t = A_t h_{t-1} + b_t over N independent m x m blocks, m <= 8 (docs/design.md
§5). ``block_scan`` and ``companion_scan`` have the contract (one signature, one docstring) of hf_ssm.ops.block and
check their shapes with the checks every block implementation calls (hf_ssm.ops.checks). Two forms share one set of
kernels:

- dense blocks (BD-LRU): A (B, T, N, m, m) (row i = output i), b (B, T, N, m);
- companion blocks (H-LRU): only the first row a (B, T, N, m) of each companion matrix and the input v (B, T, N) of
  slot 0 are read (m + 1 numbers per step instead of m^2 + m); the matrix is rebuilt on chip.

Inputs float32 / bfloat16 / float16, accumulated in float32; states and gradients are returned in the input dtype.

A program holds a tile of blocks (BN blocks x m) in registers; products are broadcast multiply-sums over the
(BN, m, m[, m]) tile. Backward: lambda_t = g_t + A_{t+1}^T lambda_{t+1}, run as nu_t = A_t^T lambda_t,
lambda_t = g_t + nu_{t+1} in reversed time; grad_A_t = lambda_t h_{t-1}^T, grad_b = lambda, grad_x0 = nu_0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_block_shapes, check_block_state, check_companion_shapes
from ..triton_common import (
    Layout,
    carry_chunk,
    cdiv,
    check_float_dtype,
    chunk_program,
    final_chunk,
    grid_dim,
    keep_flags,
    next_pow2,
    on_tensor_device,
    schedule,
    single_chunk_starts,
    step_token,
    upstream_grads,
)

MAX_BLOCK = 8


@triton.jit
def _load_A(A_ptr, t, n, nm, ii, jj, N, m, COMPANION: tl.constexpr):
    """Transitions of step t for the block tile: (BN, MP, MP) float32, zero outside m x m."""
    if COMPANION:  # first row from memory, ones on the sub-diagonal
        row = tl.load(
            A_ptr + (t.to(tl.int64) * N + n)[:, None] * m + jj[None, :], mask=nm[:, None] & (jj < m)[None, :], other=0.0
        ).to(tl.float32)
        shift = ((ii[:, None] == jj[None, :] + 1) & (ii[:, None] < m)).to(tl.float32)
        A = tl.where((ii == 0)[None, :, None], row[:, None, :], shift[None, :, :])
    else:
        off = ((t.to(tl.int64) * N + n)[:, None, None] * m + ii[None, :, None]) * m + jj[None, None, :]
        mask = nm[:, None, None] & (ii < m)[None, :, None] & (jj < m)[None, None, :]
        A = tl.load(A_ptr + off, mask=mask, other=0.0).to(tl.float32)
    return A


@triton.jit
def _load_vec(ptr, t, n, nm, ii, N, m, SLOT0: tl.constexpr):
    """Per-block vectors of step t: (BN, MP) float32; SLOT0: a scalar per block placed in slot 0."""
    if SLOT0:
        v = tl.load(ptr + t.to(tl.int64) * N + n, mask=nm, other=0.0).to(tl.float32)
        out = tl.where((ii == 0)[None, :], v[:, None], 0.0)
    else:
        off = (t.to(tl.int64) * N + n)[:, None] * m + ii[None, :]
        out = tl.load(ptr + off, mask=nm[:, None] & (ii < m)[None, :], other=0.0).to(tl.float32)
    return out


@triton.jit
def _load_step(A_ptr, g_ptr, keep_ptr, t, n, nm, ii, jj, N, m, COMPANION: tl.constexpr, REVERSE: tl.constexpr,
               HAS_KEEP: tl.constexpr):  # fmt: skip
    """Transition and input (forward) / state gradient (reverse) of step t; a masked step (keep[t] = 0) is the
    identity with zero input."""
    A = _load_A(A_ptr, t, n, nm, ii, jj, N, m, COMPANION)
    if REVERSE:
        g = _load_vec(g_ptr, t, n, nm, ii, N, m, False)
    else:
        g = _load_vec(g_ptr, t, n, nm, ii, N, m, COMPANION)
    if HAS_KEEP:
        keep = (tl.zeros_like(ii) + tl.load(keep_ptr + t)) != 0
        eye = (ii[:, None] == jj[None, :]).to(tl.float32)
        A = tl.where(keep[None, :, None], A, eye[None, :, :])
        if not REVERSE:
            g = tl.where(keep[None, :], g, 0.0)
    return A, g


@triton.jit
def _mv(A, x):
    """A x per block: (BN, MP, MP) x (BN, MP)."""
    return tl.sum(A * x[:, None, :], axis=2)


@triton.jit
def _mtv(A, x):
    """A^T x per block."""
    return tl.sum(A * x[:, :, None], axis=1)


@triton.jit
def _block_summary_kernel(
    A_ptr, g_ptr, keep_ptr, cu_ptr, cum_ptr, loc_ptr, N, m, L, max_chunks,
    COMPANION: tl.constexpr, REVERSE: tl.constexpr, HAS_KEEP: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    """Per (sequence, chunk, block tile): the chunk's composed transition and its local end state from zero."""
    pid, seq, c, start, end, t0, steps = chunk_program(cu_ptr, L, max_chunks)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nm = n < N
    ii = tl.arange(0, MP)
    jj = tl.arange(0, MP)
    eye = (ii[:, None] == jj[None, :]).to(tl.float32)
    cum = tl.zeros([BN, MP, MP], tl.float32) + eye[None, :, :]
    loc = tl.zeros([BN, MP], tl.float32)
    for s in range(steps):
        t = step_token(t0, steps, s, REVERSE)
        A, g = _load_step(A_ptr, g_ptr, keep_ptr, t, n, nm, ii, jj, N, m, COMPANION, REVERSE, HAS_KEEP)
        if REVERSE:  # nu <- A^T (nu + g); cum <- A^T cum
            loc = _mtv(A, loc + g)
            cum = tl.sum(A[:, :, :, None] * cum[:, :, None, :], axis=1)
        else:  # x <- A x + b; cum <- A cum
            loc = _mv(A, loc) + g
            cum = tl.sum(A[:, :, :, None] * cum[:, None, :, :], axis=2)
    base = pid.to(tl.int64) * N + n
    mask2 = nm[:, None] & (ii < m)[None, :]
    tl.store(loc_ptr + base[:, None] * m + ii[None, :], loc, mask=mask2)
    off3 = (base[:, None, None] * m + ii[None, :, None]) * m + jj[None, None, :]
    tl.store(cum_ptr + off3, cum, mask=mask2[:, :, None] & (jj < m)[None, None, :])


@triton.jit
def _block_carry_kernel(
    cum_ptr, loc_ptr, init_ptr, starts_ptr, N, m, max_chunks,
    REVERSE: tl.constexpr, HAS_INIT: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    """Per sequence and block tile: the true state entering every chunk."""
    seq = tl.program_id(0)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nm = n < N
    ii = tl.arange(0, MP)
    jj = tl.arange(0, MP)
    mask2 = nm[:, None] & (ii < m)[None, :]
    mask3 = mask2[:, :, None] & (jj < m)[None, None, :]
    if HAS_INIT:
        x = tl.load(init_ptr + (seq.to(tl.int64) * N + n)[:, None] * m + ii[None, :], mask=mask2, other=0.0)
        x = x.to(tl.float32)
    else:
        x = tl.zeros([BN, MP], tl.float32)
    for i in range(max_chunks):
        base = (seq.to(tl.int64) * max_chunks + carry_chunk(i, max_chunks, REVERSE)) * N + n
        tl.store(starts_ptr + base[:, None] * m + ii[None, :], x, mask=mask2)
        cum = tl.load(cum_ptr + (base[:, None, None] * m + ii[None, :, None]) * m + jj[None, None, :], mask=mask3)
        loc = tl.load(loc_ptr + base[:, None] * m + ii[None, :], mask=mask2)
        x = _mv(tl.where(mask3, cum, 0.0), x) + tl.where(mask2, loc, 0.0)


@triton.jit
def _block_apply_kernel(
    A_ptr, g_ptr, keep_ptr, cu_ptr, starts_ptr, out_ptr, final_ptr, states_ptr, x0_ptr, grad_A_ptr, N, m, L,
    max_chunks, COMPANION: tl.constexpr, REVERSE: tl.constexpr, GRAD_A: tl.constexpr, HAS_X0: tl.constexpr,
    HAS_KEEP: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    """Per (sequence, chunk, block tile): states (forward) or lambda and grad_A (reverse), and the final state /
    grad_x0 of the sequence."""
    pid, seq, c, start, end, t0, steps = chunk_program(cu_ptr, L, max_chunks)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nm = n < N
    ii = tl.arange(0, MP)
    jj = tl.arange(0, MP)
    mask2 = nm[:, None] & (ii < m)[None, :]
    x = tl.load(starts_ptr + (pid.to(tl.int64) * N + n)[:, None] * m + ii[None, :], mask=mask2, other=0.0)
    for s in range(steps):
        t = step_token(t0, steps, s, REVERSE)
        A, g = _load_step(A_ptr, g_ptr, keep_ptr, t, n, nm, ii, jj, N, m, COMPANION, REVERSE, HAS_KEEP)
        row = (t.to(tl.int64) * N + n)[:, None] * m + ii[None, :]
        if REVERSE:
            lam = g + x
            tl.store(out_ptr + row, lam, mask=mask2)
            if GRAD_A:  # h_{t-1}: the previous state, or x0 at the sequence start
                tt = tl.zeros_like(ii) + t
                prev = tl.load(states_ptr + row - N * m, mask=mask2 & (tt > start)[None, :], other=0.0)
                if HAS_X0:
                    first = mask2 & (tt == start)[None, :]
                    prev += tl.load(
                        x0_ptr + (seq.to(tl.int64) * N + n)[:, None] * m + ii[None, :], mask=first, other=0.0
                    )
                if HAS_KEEP:  # a masked step used the identity, not A_t: no gradient for A_t
                    prev = tl.where(((tl.zeros_like(ii) + tl.load(keep_ptr + t)) != 0)[None, :], prev, 0.0)
                if COMPANION:  # gradient of the first row only: lambda_t[0] h_{t-1}
                    lam0 = tl.sum(tl.where((ii == 0)[None, :], lam, 0.0), axis=1)
                    tl.store(grad_A_ptr + row, lam0[:, None] * prev, mask=mask2)
                else:
                    off3 = (row[:, :, None]) * m + jj[None, None, :]
                    mask3 = mask2[:, :, None] & (jj < m)[None, None, :]
                    tl.store(grad_A_ptr + off3, lam[:, :, None] * prev[:, None, :], mask=mask3)
            x = _mtv(A, lam)
        else:
            x = _mv(A, x) + g
            tl.store(out_ptr + row, x, mask=mask2)
    is_last = (tl.zeros_like(ii) + c == final_chunk(start, end, L, REVERSE))[None, :]
    tl.store(final_ptr + (seq.to(tl.int64) * N + n)[:, None] * m + ii[None, :], x, mask=mask2 & is_last)


def _tiles(N: int, mp: int) -> tuple[int, int]:
    """Block-tile sizes of the (BN, m, m) apply/carry kernels and the (BN, m, m, m) summary kernel."""
    cap = next_pow2(N)
    return min(cap, max(1, 1024 // (mp * mp))), min(cap, max(1, 2048 // (mp * mp * mp)))


@on_tensor_device
def _run(A, g, layout: Layout, chunk, m, init, companion, reverse, states=None, x0=None, grad_A=False, keep=None):
    """One chunked pass over the flattened (B*T) tokens: A (total, N, m, m) or (total, N, m) (companion first rows);
    g (total, N, m)
    or (total, N) (companion forward input). Returns (out (total, N, m), final (S, N, m), grad_A or None), float32."""
    total, N = A.shape[0], A.shape[1]
    S, C = layout.batch, layout.chunks(chunk)
    mp = next_pow2(m)
    bn, bn_sum = _tiles(N, mp)
    dev, f32 = A.device, torch.float32
    if C > 1:
        cum = torch.empty(S * C, N, m, m, dtype=f32, device=dev)
        loc = torch.empty(S * C, N, m, dtype=f32, device=dev)
        _block_summary_kernel[(S * C, grid_dim(cdiv(N, bn_sum)))](
            A, g, keep if keep is not None else g, layout.cu, cum, loc, N, m, chunk, C,
            COMPANION=companion, REVERSE=reverse, HAS_KEEP=keep is not None, MP=mp, BN=bn_sum,
        )  # fmt: skip
        starts = torch.empty_like(loc)
        _block_carry_kernel[(S, grid_dim(cdiv(N, bn)))](
            cum, loc, init if init is not None else loc, starts, N, m, C,
            REVERSE=reverse, HAS_INIT=init is not None, MP=mp, BN=bn,
        )  # fmt: skip
    else:
        starts = single_chunk_starts(init, (S, N, m), dev)
    out = torch.empty(total, N, m, dtype=f32, device=dev)
    final = torch.empty(S, N, m, dtype=f32, device=dev)
    ga = None
    if grad_A:
        ga = (
            torch.empty(total, N, m, dtype=f32, device=dev)
            if companion
            else torch.empty(total, N, m, m, dtype=f32, device=dev)
        )
    _block_apply_kernel[(S * C, grid_dim(cdiv(N, bn)))](
        A, g, keep if keep is not None else g, layout.cu, starts, out, final,
        states if states is not None else out, x0 if x0 is not None else out, ga if grad_A else out,
        N, m, chunk, C, COMPANION=companion, REVERSE=reverse, GRAD_A=grad_A, HAS_X0=x0 is not None,
        HAS_KEEP=keep is not None, MP=mp, BN=bn,
    )  # fmt: skip
    return out, final, ga


@torch.library.custom_op("hf_ssm::block_pass", mutates_args=())
def _block_pass(
    A: torch.Tensor,
    g: torch.Tensor,
    cu: torch.Tensor,
    batch: int,
    steps: int,
    chunk: int,
    m: int,
    init: torch.Tensor | None,
    companion: bool,
    reverse: bool,
    states: torch.Tensor | None = None,
    x0: torch.Tensor | None = None,
    grad_A: bool = False,
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_run` as the custom op hf_ssm::block_pass, so that torch.compile treats the kernel launches as one opaque
    call (docs/design.md §7.3) instead of tracing into Triton's launcher. grad_A is an empty tensor when not asked for
    (an op returns tensors only)."""
    layout = Layout(cu, batch, steps)
    out, final, ga = _run(A, g, layout, chunk, m, init, companion, reverse, states, x0, grad_A, keep)
    return out, final, ga if ga is not None else out.new_empty(0)


@_block_pass.register_fake
def _(A, g, cu, batch, steps, chunk, m, init, companion, reverse, states=None, x0=None, grad_A=False, keep=None):
    total, n = A.shape[0], A.shape[1]
    out = A.new_empty(total, n, m, dtype=torch.float32)
    ga = A.new_empty(0, dtype=torch.float32)
    if grad_A:
        ga = (
            A.new_empty(total, n, m, dtype=torch.float32)
            if companion
            else A.new_empty(total, n, m, m, dtype=torch.float32)
        )
    return out, A.new_empty(batch, n, m, dtype=torch.float32), ga


class _BlockScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, b, x0, keep, layout, chunk, companion):
        m = A.shape[-1]
        Af = A.reshape(layout.total, *A.shape[2:]).contiguous()
        bf = b.reshape(layout.total, *b.shape[2:]).contiguous()
        x0f = None if x0 is None else x0.contiguous()
        states, final, _ = _block_pass(
            Af, bf, layout.cu, layout.batch, layout.steps, chunk, m, x0f, companion, False, keep=keep
        )
        ctx.save_for_backward(Af, x0f, states, keep)
        ctx.layout, ctx.chunk, ctx.companion, ctx.m = layout, chunk, companion, m
        ctx.meta = (A.shape, A.dtype, b.shape, b.dtype, None if x0 is None else x0.dtype)
        return states.view(layout.batch, layout.steps, *states.shape[1:]), final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        Af, x0f, states, keep = ctx.saved_tensors
        layout, m = ctx.layout, ctx.m
        A_shape, A_dtype, b_shape, b_dtype, x0_dtype = ctx.meta
        g, gf = upstream_grads(grad_states, grad_final, states)
        lam, grad_x0, grad_A = _block_pass(
            Af, g, layout.cu, layout.batch, layout.steps, ctx.chunk, m, gf, ctx.companion, True, states, x0f, True, keep
        )
        grad_b = lam[..., 0] if ctx.companion else lam
        if keep is not None:  # a masked step had zero input
            grad_b = grad_b * keep.view(-1, *([1] * (grad_b.dim() - 1)))
        return (
            grad_A.reshape(A_shape).to(A_dtype),
            grad_b.reshape(b_shape).to(b_dtype),
            None if x0f is None else grad_x0.to(x0_dtype),
            None,
            None,
            None,
            None,
        )


def _scan(A, b, initial_state, mask, chunk_size, companion: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Checks and the call shared by the dense and companion scans (their shapes are checked by the caller)."""
    check_float_dtype("a" if companion else "A", A)
    check_float_dtype("v" if companion else "b", b)
    m = A.shape[-1]
    if not 1 <= m <= MAX_BLOCK:
        raise ValueError(f"the Triton block scan supports block sizes m in [1, {MAX_BLOCK}], got m = {m}")
    if initial_state is not None:
        check_float_dtype("initial_state", initial_state)
    layout, chunk = schedule(b, "b", chunk_size)
    states, final = _BlockScanFunction.apply(A, b, initial_state, keep_flags(mask), layout, chunk, companion)
    return states.to(b.dtype), final.to(b.dtype)


def block_scan(
    A: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.block.block_scan`` on the Triton kernels: m <= 8; A and b float32 / bfloat16 / float16 (they may
    differ, both accumulate in float32); states in b's dtype. chunk_size: time chunk of the schedule,
    ``triton_common.kernel_chunk_size(T)`` if None."""
    check_block_shapes(A, b, initial_state, mask)
    return _scan(A, b, initial_state, mask, chunk_size, companion=False)


def companion_scan(
    a: torch.Tensor,
    v: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.block.companion_scan`` on the Triton kernels: m <= 8, states in v's dtype; chunk_size as
    ``block_scan``'s."""
    check_companion_shapes(a, v)
    check_block_state(a, initial_state, mask)
    return _scan(a, v, initial_state, mask, chunk_size, companion=True)


__all__ = ["MAX_BLOCK", "block_scan", "companion_scan"]
