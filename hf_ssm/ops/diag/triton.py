"""The diagonal family's Triton kernel: x_t = a_t * x_{t-1} + b_t, real or complex (docs/design.md §3, §6).

``diag_scan`` has the contract (one signature, one docstring) of hf_ssm.ops.diag and checks its inputs with the
checks every diagonal implementation calls (hf_ssm.ops.checks): every channel is an independent scalar recurrence
(the inner step of every DEER iteration of the lrc / gru / mgu mixers; ``diag_lru`` runs the block scan with m = 1).
A padded step
(mask False) is set to the identity (a = 1, b = 0) before the kernel, as the torch scan does. Layout (B, T, *S) for a,
b and the states, (B, *S) for the initial / final states. Inputs float32, bfloat16 or float16 (accumulated in
float32), or complex64.

Backward: lambda_t = g_t + conj(a_{t+1}) lambda_{t+1}, run as nu_t = conj(a_t) lambda_t, lambda_t = g_t + nu_{t+1}
(the same chunked schedule in reversed time, see ``triton_common``); grad_a_t = lambda_t conj(x_{t-1}), grad_b = lambda,
grad_x0 = nu at the first step. The gradient of the final state enters as the reverse pass's initial state.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_diag_inputs, mask_steps
from ..triton_common import (
    Layout,
    carry_chunk,
    cdiv,
    check_float_dtype,
    chunk_program,
    final_chunk,
    grid_dim,
    on_tensor_device,
    schedule,
    single_chunk_starts,
    step_token,
    upstream_grads,
)

BLOCK_D = 256


@triton.jit
def _load(ptr, off, mask, COMPLEX: tl.constexpr):
    """(re, im) float32 at complex-element offsets `off` (im is zero and unused for real data)."""
    if COMPLEX:
        re = tl.load(ptr + 2 * off, mask=mask, other=0.0).to(tl.float32)
        im = tl.load(ptr + 2 * off + 1, mask=mask, other=0.0).to(tl.float32)
    else:
        re = tl.load(ptr + off, mask=mask, other=0.0).to(tl.float32)
        im = tl.zeros_like(re)
    return re, im


@triton.jit
def _store(ptr, off, re, im, mask, COMPLEX: tl.constexpr):
    if COMPLEX:
        tl.store(ptr + 2 * off, re, mask=mask)
        tl.store(ptr + 2 * off + 1, im, mask=mask)
    else:
        tl.store(ptr + off, re, mask=mask)


@triton.jit
def _mul(ar, ai, br, bi, COMPLEX: tl.constexpr):
    """(ar + i ai)(br + i bi); for real data only the real part is computed."""
    if COMPLEX:
        return ar * br - ai * bi, ar * bi + ai * br
    else:
        return ar * br, bi


@triton.jit
def _load_step(a_ptr, g_ptr, t, d, dm, D, COMPLEX: tl.constexpr):
    """Offsets of step t, its coefficient a_t and its input (forward) / state gradient (reverse) g_t."""
    off = t.to(tl.int64) * D + d
    ar, ai = _load(a_ptr, off, dm, COMPLEX)
    gr, gi = _load(g_ptr, off, dm, COMPLEX)
    return off, ar, ai, gr, gi


@triton.jit
def _diag_summary_kernel(
    a_ptr, g_ptr, cu_ptr, cum_ptr, loc_ptr, D, L, max_chunks,
    COMPLEX: tl.constexpr, REVERSE: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Per (sequence, chunk): composed coefficient and local end state of the chunk from a zero start."""
    pid, seq, c, start, end, t0, n = chunk_program(cu_ptr, L, max_chunks)
    d = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    dm = d < D
    cr = tl.full([BLOCK], 1.0, tl.float32)
    ci = tl.zeros([BLOCK], tl.float32)
    lr = tl.zeros([BLOCK], tl.float32)
    li = tl.zeros([BLOCK], tl.float32)
    for s in range(n):
        off, ar, ai, gr, gi = _load_step(a_ptr, g_ptr, step_token(t0, n, s, REVERSE), d, dm, D, COMPLEX)
        if REVERSE:  # nu <- conj(a) (nu + g)
            lr, li = _mul(ar, -ai, lr + gr, li + gi, COMPLEX)
            cr, ci = _mul(ar, -ai, cr, ci, COMPLEX)
        else:  # x <- a x + g
            lr, li = _mul(ar, ai, lr, li, COMPLEX)
            lr += gr
            li += gi
            cr, ci = _mul(ar, ai, cr, ci, COMPLEX)
    out = pid.to(tl.int64) * D + d
    _store(cum_ptr, out, cr, ci, dm, COMPLEX)
    _store(loc_ptr, out, lr, li, dm, COMPLEX)


@triton.jit
def _diag_carry_kernel(
    cum_ptr, loc_ptr, init_ptr, starts_ptr, D, max_chunks,
    COMPLEX: tl.constexpr, REVERSE: tl.constexpr, HAS_INIT: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Per sequence: the true state entering every chunk, walking the chunk summaries in (reversed) order."""
    seq = tl.program_id(0)
    d = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    dm = d < D
    if HAS_INIT:
        xr, xi = _load(init_ptr, seq.to(tl.int64) * D + d, dm, COMPLEX)
    else:
        xr = tl.zeros([BLOCK], tl.float32)
        xi = tl.zeros([BLOCK], tl.float32)
    for i in range(max_chunks):
        off = (seq.to(tl.int64) * max_chunks + carry_chunk(i, max_chunks, REVERSE)) * D + d
        _store(starts_ptr, off, xr, xi, dm, COMPLEX)
        cr, ci = _load(cum_ptr, off, dm, COMPLEX)
        lr, li = _load(loc_ptr, off, dm, COMPLEX)
        xr, xi = _mul(cr, ci, xr, xi, COMPLEX)
        xr += lr
        xi += li


@triton.jit
def _diag_apply_kernel(
    a_ptr, g_ptr, cu_ptr, starts_ptr, out_ptr, final_ptr, states_ptr, x0_ptr, grad_a_ptr, D, L, max_chunks,
    COMPLEX: tl.constexpr, REVERSE: tl.constexpr, GRAD_A: tl.constexpr, HAS_X0: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Per (sequence, chunk): run the chunk from its true incoming state, write every state (forward) or
    lambda and grad_a (reverse), and the sequence's final state (forward) / grad_x0 (reverse)."""
    pid, seq, c, start, end, t0, n = chunk_program(cu_ptr, L, max_chunks)
    d = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    dm = d < D
    xr, xi = _load(starts_ptr, pid.to(tl.int64) * D + d, dm, COMPLEX)
    for s in range(n):
        t = step_token(t0, n, s, REVERSE)
        off, ar, ai, gr, gi = _load_step(a_ptr, g_ptr, t, d, dm, D, COMPLEX)
        if REVERSE:
            lr = gr + xr
            li = gi + xi
            _store(out_ptr, off, lr, li, dm, COMPLEX)
            if GRAD_A:  # grad_a_t = lambda_t conj(x_{t-1}); x_{t-1} is x0 at the sequence start
                tt = tl.zeros_like(d) + t  # (the interpreter wants masks built from tensors, not scalars)
                pr, pi = _load(states_ptr, off - D, dm & (tt > start), COMPLEX)
                if HAS_X0:
                    qr, qi = _load(x0_ptr, seq.to(tl.int64) * D + d, dm & (tt == start), COMPLEX)
                    pr += qr
                    pi += qi
                gar, gai = _mul(lr, li, pr, -pi, COMPLEX)
                _store(grad_a_ptr, off, gar, gai, dm, COMPLEX)
            xr, xi = _mul(ar, -ai, lr, li, COMPLEX)
        else:
            xr, xi = _mul(ar, ai, xr, xi, COMPLEX)
            xr += gr
            xi += gi
            _store(out_ptr, off, xr, xi, dm, COMPLEX)
    last = final_chunk(start, end, L, REVERSE)
    _store(final_ptr, seq.to(tl.int64) * D + d, xr, xi, dm & (tl.zeros_like(d) + c == last), COMPLEX)


@on_tensor_device
def _run(
    a: torch.Tensor,
    g: torch.Tensor,
    layout: Layout,
    chunk: int,
    init: torch.Tensor | None,
    complex_: bool,
    reverse: bool,
    states: torch.Tensor | None = None,
    x0: torch.Tensor | None = None,
    grad_a: bool = False,
):
    """One chunked pass over the flattened (B*T, D) tokens (complex: (total, D, 2) float views), no autograd.

    Returns (out, final, grad_a): out (total, D[, 2]) float32 states (forward) or lambda (reverse); final
    (B, D[, 2]) the final state (forward) or grad_x0 (reverse); grad_a (reverse with grad_a=True) or None.
    """
    D = a.shape[1]
    S, C = layout.batch, layout.chunks(chunk)
    shape = (D, 2) if complex_ else (D,)
    dev = a.device
    f32 = torch.float32
    flags = dict(COMPLEX=complex_, REVERSE=reverse, BLOCK=BLOCK_D)
    nd = grid_dim(cdiv(D, BLOCK_D))
    if C > 1:
        cum = torch.empty(S * C, *shape, dtype=f32, device=dev)
        loc = torch.empty_like(cum)
        _diag_summary_kernel[(S * C, nd)](a, g, layout.cu, cum, loc, D, chunk, C, **flags)
        starts = torch.empty_like(cum)
        init_arg = init if init is not None else cum
        _diag_carry_kernel[(S, nd)](cum, loc, init_arg, starts, D, C, HAS_INIT=init is not None, **flags)
    else:
        starts = single_chunk_starts(init, (S, *shape), dev)
    out = torch.empty(a.shape[0], *shape, dtype=f32, device=dev)
    final = torch.empty(S, *shape, dtype=f32, device=dev)
    ga = torch.empty_like(out) if grad_a else out
    _diag_apply_kernel[(S * C, nd)](
        a, g, layout.cu, starts, out, final,
        states if states is not None else out, x0 if x0 is not None else out, ga,
        D, chunk, C, GRAD_A=grad_a, HAS_X0=x0 is not None, **flags,
    )  # fmt: skip
    return out, final, (ga if grad_a else None)


@torch.library.custom_op("hf_ssm::diag_pass", mutates_args=())
def _diag_pass(
    a: torch.Tensor,
    g: torch.Tensor,
    cu: torch.Tensor,
    batch: int,
    steps: int,
    chunk: int,
    init: torch.Tensor | None,
    complex_: bool,
    reverse: bool,
    states: torch.Tensor | None = None,
    x0: torch.Tensor | None = None,
    grad_a: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_run` as the custom op hf_ssm::diag_pass, so that torch.compile treats the kernel launches as one opaque
    call (docs/design.md §7.3) instead of tracing into Triton's launcher. grad_a is an empty tensor when not asked for
    (an op returns tensors only)."""
    out, final, ga = _run(a, g, Layout(cu, batch, steps), chunk, init, complex_, reverse, states, x0, grad_a)
    return out, final, ga if ga is not None else out.new_empty(0)


@_diag_pass.register_fake
def _(a, g, cu, batch, steps, chunk, init, complex_, reverse, states=None, x0=None, grad_a=False):
    shape = (a.shape[1], 2) if complex_ else (a.shape[1],)
    out = a.new_empty(a.shape[0], *shape, dtype=torch.float32)
    return out, a.new_empty(batch, *shape, dtype=torch.float32), torch.empty_like(out) if grad_a else out.new_empty(0)


def _flat(t: torch.Tensor | None, complex_: bool) -> torch.Tensor | None:
    """(B, T, *S) -> contiguous (B*T, D) (complex: (B*T, D, 2) float32 view)."""
    if t is None:
        return None
    t = t.reshape(t.shape[0] * t.shape[1], -1)
    if complex_:
        return torch.view_as_real(t.resolve_conj().contiguous())
    return t.contiguous()


def _flat_state(t: torch.Tensor | None, complex_: bool) -> torch.Tensor | None:
    if t is None:
        return None
    t = t.reshape(t.shape[0], -1)
    return torch.view_as_real(t.resolve_conj().contiguous()) if complex_ else t.contiguous()


def _unflat(t: torch.Tensor, shape, complex_: bool) -> torch.Tensor:
    return (torch.view_as_complex(t) if complex_ else t).reshape(shape)


class _DiagScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, x0, layout, chunk):
        complex_ = a.is_complex()
        af, bf, x0f = _flat(a, complex_), _flat(b, complex_), _flat_state(x0, complex_)
        out, final, _ = _diag_pass(af, bf, layout.cu, layout.batch, layout.steps, chunk, x0f, complex_, False)
        ctx.save_for_backward(af, x0f, out)
        ctx.layout, ctx.chunk, ctx.complex_, ctx.has_x0 = layout, chunk, complex_, x0 is not None
        ctx.shapes = (a.shape, (layout.batch, *a.shape[2:]))
        ctx.dtypes = (a.dtype, None if x0 is None else x0.dtype)
        return _unflat(out, a.shape, complex_), _unflat(final, ctx.shapes[1], complex_)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        af, x0f, states = ctx.saved_tensors
        complex_, (shape, final_shape) = ctx.complex_, ctx.shapes
        g, gf = upstream_grads(_flat(grad_states, complex_), _flat_state(grad_final, complex_), states)
        layout = ctx.layout
        lam, grad_x0, grad_a = _diag_pass(
            af, g, layout.cu, layout.batch, layout.steps, ctx.chunk, gf, complex_, True, states, x0f, True
        )
        dtype, x0_dtype = ctx.dtypes
        grad_a = _unflat(grad_a, shape, complex_).to(dtype)
        grad_b = _unflat(lam, shape, complex_).to(dtype)
        grad_x0 = _unflat(grad_x0, final_shape, complex_).to(x0_dtype) if ctx.has_x0 else None
        return grad_a, grad_b, grad_x0, None, None


def _check(a: torch.Tensor, b: torch.Tensor, x0: torch.Tensor | None, mask, chunk_size) -> tuple[Layout, int]:
    check_diag_inputs(a, b, x0, mask)
    if a.is_complex():
        if a.dtype != torch.complex64:
            raise TypeError(f"the Triton diagonal scan takes complex64 complex input, got {a.dtype}")
    else:
        check_float_dtype("a and b", a)
    return schedule(a, "a", chunk_size)


def diag_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.diag.diag_scan`` on the Triton kernels: a, b float32 / bfloat16 / float16 / complex64 (one
    dtype), states in a's dtype. chunk_size: time chunk of the schedule, ``triton_common.kernel_chunk_size(T)`` if
    None."""
    layout, chunk = _check(a, b, initial_state, mask, chunk_size)
    a, b = mask_steps(a, b, mask)
    states, final = _DiagScanFunction.apply(a, b, initial_state, layout, chunk)
    return states.to(a.dtype), final.to(a.dtype)


__all__ = ["diag_scan"]
