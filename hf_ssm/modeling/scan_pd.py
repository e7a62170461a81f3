"""Scans over PD transitions x_t = P_t D_t x_{t-1} + b_t (docs/design.md §4), in plain PyTorch.

A PD transition is stored sparsely: ``idx[j]`` is the row of the single 1 in column j of P, ``dv[j]`` the
complex diagonal entry of D. Applying it is a scatter-add, composing two of them is two gathers, and the
adjoint A^H is a gather, so no function here ever builds an N x N transition.

Layout shared by every function: ``(B, T, H, N)`` for ``idx`` (int64), ``dv``, ``b`` and the returned
states (complex64), ``(B, H, N)`` for the initial and final states.

- ``pd_scan_sequential``: a plain loop with autograd. The reference the parallel scan is tested against.
- ``pd_scan``: chunked parallel scan with a hand-written backward (the adjoint recurrence), the default
  on every device. About 2*sqrt(T) sequential steps instead of T, each over all chunks at once.

Both accept ``p_soft`` (B, T, H, N, N), the soft column distributions of P. Its values are never read: it
only receives the straight-through gradient of the hard P, dL/dP_t[i, j] = Re(conj(lambda_t[i]) dv_t[j]
x_{t-1}[j]) with lambda_t = dL/dx_t.
"""

from __future__ import annotations

import torch

from .scan_common import default_chunk_size, previous_states, resolve_chunk_size, state_gradients


def _apply_pd(idx: torch.Tensor, dv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(P D x)[i] = sum_{j: idx[j] = i} dv[j] x[j], over the last axis (a scatter-add)."""
    return torch.zeros_like(x).scatter_add_(-1, idx, dv * x)


def _check_inputs(idx, dv, b, x0):
    if idx.dim() != 4:
        raise ValueError(f"idx must have shape (B, T, H, N), got {tuple(idx.shape)}")
    if idx.dtype != torch.long:
        raise TypeError(f"idx must be int64, got {idx.dtype}")
    if dv.shape != idx.shape or b.shape != idx.shape:
        raise ValueError(
            f"idx, dv and b must share the shape (B, T, H, N); got {tuple(idx.shape)}, {tuple(dv.shape)}, {tuple(b.shape)}"
        )
    if not (dv.is_complex() and b.is_complex()):
        raise TypeError(f"dv and b must be complex, got {dv.dtype} and {b.dtype}")
    batch, _, heads, n = idx.shape
    if x0 is not None and tuple(x0.shape) != (batch, heads, n):
        raise ValueError(f"x0 must have shape (B, H, N) = {(batch, heads, n)}, got {tuple(x0.shape)}")


def pd_scan_sequential(
    idx: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor | None = None,
    p_soft: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference loop. Returns (states (B, T, H, N), final state (B, H, N)).

    The straight-through term ``(p_soft - p_soft.detach()) @ z`` is zero in value and routes the gradient
    of the hard P to ``p_soft``; it is written densely here because this function is a test oracle only.
    """
    _check_inputs(idx, dv, b, x0)
    batch, steps, heads, n = idx.shape
    x = torch.zeros(batch, heads, n, dtype=b.dtype, device=b.device) if x0 is None else x0
    states = []
    for t in range(steps):
        z = dv[:, t] * x
        x_next = torch.zeros_like(z).scatter_add(-1, idx[:, t], z) + b[:, t]
        if p_soft is not None:
            st = (p_soft[:, t] - p_soft[:, t].detach()).to(z.dtype)
            x_next = x_next + (st @ z.unsqueeze(-1)).squeeze(-1)
        x = x_next
        states.append(x)
    return torch.stack(states, dim=1), x


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
    """
    batch, steps, heads, n = idx.shape
    chunks = -(-steps // chunk)
    pad = chunks * chunk - steps
    idx = _pad_index(idx, pad).view(batch, chunks, chunk, heads, n)
    dv = _pad_time(dv, pad, 1.0).view(batch, chunks, chunk, heads, n)
    b = _pad_time(b, pad, 0.0).view(batch, chunks, chunk, heads, n)

    loc = torch.zeros_like(b[:, :, 0])
    c_idx = torch.arange(n, device=idx.device).expand(batch, chunks, heads, n)
    c_dv = torch.ones_like(dv[:, :, 0])
    locals_, cum_idx, cum_dv = [], [], []
    for step in range(chunk):
        i_l, d_l = idx[:, :, step], dv[:, :, step]
        loc = _apply_pd(i_l, d_l, loc) + b[:, :, step]
        c_dv = d_l.gather(-1, c_idx) * c_dv
        c_idx = i_l.gather(-1, c_idx)
        locals_.append(loc)
        cum_idx.append(c_idx)
        cum_dv.append(c_dv)

    starts = []
    carry = x0
    for c in range(chunks):
        starts.append(carry)
        carry = _apply_pd(cum_idx[-1][:, c], cum_dv[-1][:, c], carry) + locals_[-1][:, c]
    starts = torch.stack(starts, dim=1).unsqueeze(2)  # (B, C, 1, H, N)

    local = torch.stack(locals_, dim=2)
    states = _apply_pd(torch.stack(cum_idx, dim=2), torch.stack(cum_dv, dim=2), starts.expand_as(local)) + local
    return states.view(batch, chunks * chunk, heads, n)[:, :steps]


def _adjoint_scan_chunked(idx, dv, g, chunk):
    """The adjoint recurrence lam_t = g_t + A_{t+1}^H lam_{t+1} (lam_T = 0), (A^H l)[j] = conj(dv[j]) l[idx[j]],
    along dim 1 of (B, T, H, N), in the forward scan's three phases with time reversed; every step is a gather.

    1. inside each chunk, from its last step back: local adjoints from a zero start after the chunk, and the
       cumulative gather map (ck, cc) with lam_t = local_t + cc_t * lam_next[ck_t], lam_next the adjoint at the
       next chunk's first step (the transition after a chunk's last step is the next chunk's first);
    2. across chunks, from the last: lam at every chunk's first step (C sequential steps on (B, H, N));
    3. fix-up: one gather over the whole sequence.
    """
    batch, steps, heads, n = idx.shape
    chunks = -(-steps // chunk)
    pad = chunks * chunk - steps
    idx = _pad_index(idx, pad).view(batch, chunks, chunk, heads, n)
    dv = _pad_time(dv, pad, 1.0).view(batch, chunks, chunk, heads, n)
    g = _pad_time(g, pad, 0.0).view(batch, chunks, chunk, heads, n)
    eye = torch.arange(n, device=idx.device).expand(batch, chunks, heads, n)
    after_idx = torch.cat([idx[:, 1:, 0], eye[:, :1]], dim=1)  # (B, C, H, N): identity after the sequence
    after_dv = torch.cat([dv[:, 1:, 0], torch.ones_like(dv[:, :1, 0])], dim=1)

    loc = torch.zeros_like(g[:, :, 0])
    ck, cc = eye, torch.ones_like(loc)
    locals_, cum_k, cum_c = [None] * chunk, [None] * chunk, [None] * chunk
    for step in reversed(range(chunk)):
        k_n, c_n = (idx[:, :, step + 1], dv[:, :, step + 1]) if step + 1 < chunk else (after_idx, after_dv)
        c_n = c_n.conj()
        loc = c_n * loc.gather(-1, k_n) + g[:, :, step]
        cc = c_n * cc.gather(-1, k_n)
        ck = ck.gather(-1, k_n)
        locals_[step], cum_k[step], cum_c[step] = loc, ck, cc

    starts = [None] * chunks
    carry = torch.zeros_like(loc[:, 0])
    for c in reversed(range(chunks)):
        starts[c] = carry
        carry = cum_c[0][:, c] * carry.gather(-1, cum_k[0][:, c]) + locals_[0][:, c]
    starts = torch.stack(starts, dim=1).unsqueeze(2)  # (B, C, 1, H, N)

    local = torch.stack(locals_, dim=2)
    out = torch.stack(cum_c, dim=2) * starts.expand_as(local).gather(-1, torch.stack(cum_k, dim=2)) + local
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
    x0: torch.Tensor | None = None,
    p_soft: torch.Tensor | None = None,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked parallel PD scan. Returns (states (B, T, H, N), final state (B, H, N)).

    Args:
        idx: (B, T, H, N) int64, row of the 1 in each column of P_t.
        dv: (B, T, H, N) complex, diagonal of D_t.
        b: (B, T, H, N) complex, input term.
        x0: (B, H, N) complex initial state, zeros if None.
        p_soft: optional (B, T, H, N, N) real; receives the straight-through gradient of P_t.
        chunk_size: time chunk; a power of two near sqrt(T) if None.
    """
    _check_inputs(idx, dv, b, x0)
    batch, steps, heads, n = idx.shape
    if steps == 0:
        raise ValueError("pd_scan needs at least one time step (T >= 1)")
    if x0 is None:
        x0 = torch.zeros(batch, heads, n, dtype=b.dtype, device=b.device)
    if dv.dtype != b.dtype or x0.dtype != b.dtype:
        raise TypeError(f"dv, b and x0 must share one complex dtype, got {dv.dtype}, {b.dtype}, {x0.dtype}")
    if p_soft is not None and tuple(p_soft.shape) != (batch, steps, heads, n, n):
        raise ValueError(
            f"p_soft must have shape (B, T, H, N, N) = {(batch, steps, heads, n, n)}, got {tuple(p_soft.shape)}"
        )
    return _PDScanFunction.apply(idx, dv, b, x0, p_soft, resolve_chunk_size(chunk_size, steps))


def pd_compose(later: tuple[torch.Tensor, torch.Tensor], earlier: tuple[torch.Tensor, torch.Tensor]):
    """(idx, dv) of A_later @ A_earlier over the last axis: idx = idx2[idx1], dv = dv2[idx1] * dv1."""
    idx2, dv2 = later
    idx1, dv1 = earlier
    return idx2.gather(-1, idx1), dv2.gather(-1, idx1) * dv1


def pd_to_dense(idx: torch.Tensor, dv: torch.Tensor) -> torch.Tensor:
    """Dense (..., N, N) matrix P D of a sparse (idx, dv). For tests and benchmarks only."""
    n = idx.shape[-1]
    p = torch.zeros(*idx.shape, n, dtype=dv.dtype, device=dv.device)
    p.scatter_(-2, idx.unsqueeze(-2), 1)  # P[idx[j], j] = 1
    return p * dv.unsqueeze(-2)


__all__ = ["default_chunk_size", "pd_compose", "pd_scan", "pd_scan_backward", "pd_scan_sequential", "pd_to_dense"]
