"""The PD scan x_t = P_t D_t x_{t-1} + b_t in parallel torch (docs/design.md §4): the torch implementation of
``pd_scan`` (hf_ssm.ops.pd, where the op's contract is written once), and the T = 1 decoding step of every PD op.

A PD transition is stored sparsely: ``idx[j]`` is the row of the single 1 in column j of P, ``dv[j]`` the
complex diagonal entry of D. Applying it is a scatter-add, composing two of them is two gathers, and the
adjoint A^H is a gather, so no function here ever builds an N x N transition.

- ``pd_scan``: chunked parallel scan with a hand-written backward (the adjoint recurrence), the torch
  implementation of every PD op (the generated transitions of generated.py run it too). About 2*sqrt(T) sequential
  steps instead of T, each over all chunks at once. Its ``p_soft`` (B, T, H, N, N), the soft column distributions
  of P, is never read: it only receives the straight-through gradient of the hard P,
  dL/dP_t[i, j] = Re(conj(lambda_t[i]) dv_t[j] x_{t-1}[j]) with lambda_t = dL/dx_t.
- ``is_decode_step`` / ``pd_step``: the PD ops' one T = 1 rule and its one update, x = P D x0 + b, on either
  backend (``hf_ssm.ops.dispatch.ScanOps``).
"""

from __future__ import annotations

import torch

from ..checks import check_pd_inputs, into, previous_states, resolve_chunk_size, state_gradients, step_where_kept


def _apply_pd(idx: torch.Tensor, dv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(P D x)[i] = sum_{j: idx[j] = i} dv[j] x[j], over the last axis (a scatter-add)."""
    return torch.zeros_like(x).scatter_add_(-1, idx, dv * x)


def _pad_time(t: torch.Tensor, pad: int, value) -> torch.Tensor:
    """Pad (B, T, H, N) at the end of T with a constant (identity transitions / zero inputs)."""
    if pad == 0:
        return t
    filler = torch.full((t.shape[0], pad, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
    return torch.cat([t, filler], dim=1)


def _pad_index(idx: torch.Tensor, pad: int) -> torch.Tensor:
    """Pad (B, T, H, N) indices at the end of T with the identity permutation."""
    if pad == 0:
        return idx
    batch, _, heads, n = idx.shape
    eye = torch.arange(n, device=idx.device).expand(batch, pad, heads, n)
    return torch.cat([idx, eye], dim=1)


def _scatter_scan_chunked(idx, dv, b, x0, chunk):
    """Forward recurrence x_t = A_t x_{t-1} + b_t along dim 1 of (B, T, H, N). Returns states (B, T, H, N).

    1. inside each chunk (all chunks at once): local states from a zero start, and the cumulative
       transition from the chunk start (a PD matrix again: idx_cum <- idx_l[idx_cum], dv_cum <- dv_l[idx_cum] dv_cum);
    2. across chunks: the true state at every chunk start (C sequential steps on (B, H, N));
    3. fix-up: x = A_cum x_start + local, one scatter-add over the whole sequence.

    Every step writes into one (B, C, L, H, N) buffer per quantity (on CPU a fresh tensor per step and a stack at
    the end cost more than the steps' arithmetic), and the fix-up adds into the local states' buffer.
    """
    batch, steps, heads, n = idx.shape
    chunks = -(-steps // chunk)
    pad = chunks * chunk - steps
    idx = _pad_index(idx, pad).view(batch, chunks, chunk, heads, n)
    dv = _pad_time(dv, pad, 1.0).view(batch, chunks, chunk, heads, n)
    b = _pad_time(b, pad, 0.0).view(batch, chunks, chunk, heads, n)

    local, cum_idx, cum_dv = torch.empty_like(b), torch.empty_like(idx), torch.empty_like(dv)
    local[:, :, 0], cum_idx[:, :, 0], cum_dv[:, :, 0] = b[:, :, 0], idx[:, :, 0], dv[:, :, 0]
    rotated = torch.empty_like(b[:, :, 0])
    for step in range(1, chunk):
        i_l, d_l, before = idx[:, :, step], dv[:, :, step], cum_idx[:, :, step - 1]
        into(rotated, torch.mul, d_l, local[:, :, step - 1])
        local[:, :, step].copy_(b[:, :, step]).scatter_add_(-1, i_l, rotated)  # b + P D x_local
        into(cum_dv[:, :, step], torch.mul, d_l.gather(-1, before), cum_dv[:, :, step - 1])
        into(cum_idx[:, :, step], torch.gather, i_l, -1, before)

    starts = torch.empty_like(b[:, :, 0])  # (B, C, H, N)
    carry = x0
    for c in range(chunks):
        starts[:, c] = carry
        carry = _apply_pd(cum_idx[:, c, -1], cum_dv[:, c, -1], carry) + local[:, c, -1]

    states = local.scatter_add_(-1, cum_idx, cum_dv.mul_(starts.unsqueeze(2)))
    return states.view(batch, chunks * chunk, heads, n)[:, :steps]


def _adjoint_scan_chunked(idx, dv, g, chunk):
    """The adjoint recurrence lam_t = g_t + A_{t+1}^H lam_{t+1} (lam_T = 0), (A^H l)[j] = conj(dv[j]) l[idx[j]],
    along dim 1 of (B, T, H, N), in the forward scan's three phases with time reversed; every step is a gather.

    1. inside each chunk, from its last step back: local adjoints from a zero start after the chunk, and the
       cumulative gather map (ck, cc) with lam_t = local_t + cc_t * lam_next[ck_t], lam_next the adjoint at the
       next chunk's first step (the transition after a chunk's last step is the next chunk's first, the identity
       after the sequence);
    2. across chunks, from the last: lam at every chunk's first step (C sequential steps on (B, H, N));
    3. fix-up: one gather over the whole sequence, added into the local adjoints' buffer.

    Buffers as in ``_scatter_scan_chunked``.
    """
    batch, steps, heads, n = idx.shape
    chunks = -(-steps // chunk)
    pad = chunks * chunk - steps
    idx = _pad_index(idx, pad).view(batch, chunks, chunk, heads, n)
    dv = _pad_time(dv, pad, 1.0).view(batch, chunks, chunk, heads, n)
    g = _pad_time(g, pad, 0.0).view(batch, chunks, chunk, heads, n)

    local, ck, cc = torch.empty_like(g), torch.empty_like(idx), torch.empty_like(dv)
    last = chunk - 1
    local[:, :, last] = g[:, :, last]
    ck[:, :-1, last], cc[:, :-1, last] = idx[:, 1:, 0], dv[:, 1:, 0].conj()
    ck[:, -1, last], cc[:, -1, last] = torch.arange(n, device=idx.device), 1.0
    gathered = torch.empty_like(g[:, :, 0])
    for step in reversed(range(last)):
        k_n, c_n = idx[:, :, step + 1], dv[:, :, step + 1].conj()
        into(gathered, torch.mul, c_n, local[:, :, step + 1].gather(-1, k_n))
        into(local[:, :, step], torch.add, gathered, g[:, :, step])
        into(cc[:, :, step], torch.mul, c_n, cc[:, :, step + 1].gather(-1, k_n))
        into(ck[:, :, step], torch.gather, ck[:, :, step + 1], -1, k_n)

    starts = torch.empty_like(g[:, :, 0])  # (B, C, H, N)
    carry = torch.zeros_like(starts[:, 0])
    for c in reversed(range(chunks)):
        starts[:, c] = carry
        carry = cc[:, c, 0] * carry.gather(-1, ck[:, c, 0]) + local[:, c, 0]

    out = local.add_(cc.mul_(starts.unsqueeze(2).expand_as(local).gather(-1, ck)))
    return out.view(batch, chunks * chunk, heads, n)[:, :steps]


def pd_scan_backward(idx, dv, x0, states, grad_states, grad_final, chunk):
    """Adjoint pass of the PD scan x_t = P_t D_t x_{t-1} + b_t, all (B, T, H, N); x0 (B, H, N) (not None).

    Returns (lam, grad_dv, grad_x0, x_prev): lam_t = dL/dx_t = dL/db_t, from the reverse recurrence
    lam_t = g_t + A_{t+1}^H lam_{t+1} with (A^H l)[j] = conj(dv[j]) l[idx[j]]; grad_dv_t[j] = lam_t[idx_t[j]]
    conj(x_{t-1}[j]); grad_x0 = A_0^H lam_0; x_prev the states shifted by one step (x_{-1} = x0).
    """
    lam = _adjoint_scan_chunked(idx, dv, state_gradients(grad_states, grad_final, states), chunk)
    x_prev = previous_states(x0, states)
    lam_at_target = lam.gather(-1, idx)  # lambda_t[idx_t[j]]
    grad_dv = lam_at_target * x_prev.conj()
    grad_x0 = dv[:, 0].conj() * lam_at_target[:, 0]
    return lam, grad_dv, grad_x0, x_prev


class _PDScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, idx, dv, b, x0, p_soft, chunk):
        states = _scatter_scan_chunked(idx, dv, b, x0, chunk)
        ctx.save_for_backward(idx, dv, x0, states)
        ctx.chunk, ctx.has_p = chunk, p_soft is not None
        return states, states[:, -1].clone()

    @staticmethod
    def backward(ctx, grad_states, grad_final):
        idx, dv, x0, states = ctx.saved_tensors
        lam, grad_dv, grad_x0, x_prev = pd_scan_backward(idx, dv, x0, states, grad_states, grad_final, ctx.chunk)
        grad_p = None
        if ctx.has_p:  # straight-through: dL/dP_t[i, j] = Re(conj(lambda_t[i]) z_t[j]), z = dv * x_prev
            grad_p = (lam.conj().unsqueeze(-1) * (dv * x_prev).unsqueeze(-2)).real
        return None, grad_dv, lam, grad_x0, grad_p, None


def pd_scan(
    idx: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    p_soft: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.pd.pd_scan`` as a chunked parallel scan with a hand-written backward; dv, b and initial_state
    complex (one dtype), idx int64. chunk_size: time chunk, ``checks.default_chunk_size(T)`` (a power of two near
    sqrt(T)) if None."""
    check_pd_inputs(idx, dv, b, initial_state, p_soft)
    batch, steps, heads, n = idx.shape
    x0 = initial_state
    if x0 is None:
        x0 = torch.zeros(batch, heads, n, dtype=b.dtype, device=b.device)
    return _PDScanFunction.apply(idx, dv, b, x0, p_soft, resolve_chunk_size(chunk_size, steps))


# ---------------------------------------------------------------------------------------------------------------
# T = 1: the decoding step


def as_complex(t: torch.Tensor | None) -> torch.Tensor | None:
    """complex64, from complex or from real (..., 2) pairs (None stays None)."""
    if t is None or t.dtype == torch.complex64:
        return t
    if t.is_complex():
        return t.to(torch.complex64)
    return torch.view_as_complex(t.float().contiguous())


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records an op on these tensors (grad mode on and one of them requires a gradient)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def is_decode_step(steps: int, *tensors: torch.Tensor | None) -> bool:
    """The one T = 1 rule of the PD ops: a single step (T = 1) where none of the op's inputs `tensors` needs a
    gradient (decoding) is one O(H N) update, ``pd_step``, on either backend. With a gradient a single step goes
    through the scan like any sequence: the straight-through gradient of P is formed in the scan's backward."""
    return steps == 1 and not needs_grad(*tensors)


def as_pairs(t: torch.Tensor) -> torch.Tensor:
    """float32 (..., 2) (re, im) pairs, from complex (a view) or from real pairs."""
    return torch.view_as_real(t) if t.is_complex() else (t if t.dtype == torch.float32 else t.float())


def pd_step(idx, dv, b, x0=None, mask=None):
    """One step without gradient (T = 1, decode): x = P D x0 + b, one scatter-add, no chunk machinery.

    idx (B, H, N) int64, the transition of the step; dv, b (B, 1, H, N) complex or real (..., 2) pairs; x0 (B, H, N)
    complex, pairs or None (zeros); mask (B, 1) bool or None: a masked-out row keeps x0 (the identity transition
    with zero input). Returns (states (B, 1, H, N), final (B, H, N)) complex64; under torch.compile, real pairs
    (B, 1, H, N, 2) and (B, H, N, 2) instead (inductor generates no code for complex operators: a compiled decode
    step that stays in pairs, with the model's cache holding the states as pairs, has no complex op at all).
    """
    if torch.compiler.is_compiling():
        return _pd_step_in_pairs(idx, dv, b, x0, mask)
    dv, b = as_complex(dv)[:, 0], as_complex(b)[:, 0]
    x0 = torch.zeros_like(b) if x0 is None else as_complex(x0)
    x = step_where_kept(mask, b.clone().scatter_add_(-1, idx, dv * x0), x0)  # b + P D x0
    return x.unsqueeze(1), x


def _pd_step_in_pairs(idx, dv, b, x0, mask):
    """``pd_step``'s update b + P D x0 in real (re, im) pairs, for torch.compile (inductor generates no code for
    complex operators, which would then run one by one in eager). Returns real pairs (see ``pd_step``)."""
    dv, b = as_pairs(dv)[:, 0], as_pairs(b)[:, 0]  # (B, H, N, 2)
    x0 = torch.zeros_like(b) if x0 is None else as_pairs(x0)
    (dr, di), (xr, xi) = dv.unbind(-1), x0.unbind(-1)
    rotated = torch.stack((dr * xr - di * xi, dr * xi + di * xr), dim=-1)
    # P (D x0) as a sum against the one-hot matrix of idx rather than a scatter-add: inductor fuses this with the
    # rest of the step into one loop, where scatter_add_ stays a separate ATen call (BENCHMARKS.md, bench_compile).
    rows = torch.arange(idx.shape[-1], device=idx.device).view(-1, 1)
    one_hot = (idx.unsqueeze(-2) == rows).to(rotated.dtype)  # (B, H, N, N): [i, j] = 1 where column j goes to row i
    x = b + (one_hot.unsqueeze(-1) * rotated.unsqueeze(-3)).sum(-2)
    x = step_where_kept(mask, x, x0)
    return x.unsqueeze(1), x


__all__ = [
    "as_complex",
    "as_pairs",
    "is_decode_step",
    "needs_grad",
    "pd_scan",
    "pd_scan_backward",
    "pd_step",
]
