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

from ..checks import check_pd_inputs, previous_states, resolve_chunk_size, state_gradients, step_where_kept


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
