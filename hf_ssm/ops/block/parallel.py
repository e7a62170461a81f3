"""The block family in parallel torch (docs/design.md §3, §5): the torch implementations of ``block_scan`` and
``companion_scan`` (hf_ssm.ops.block, where their contract is written once), and their T = 1 decoding steps.

- ``block_scan``: chunked parallel scan with a hand-written backward (the adjoint recurrence, which is again a
  block scan). About 2*sqrt(T) sequential steps instead of T, each composing m x m blocks over all chunks and
  blocks at once.
- ``companion_scan``: H-LRU's form, ``block_scan`` on the companion matrices (``companion_matrices``).
- ``block_step`` / ``companion_step``: one time step (T = 1, decoding): a single O(N m^2) / O(N m) update.
"""

from __future__ import annotations

import torch
from torch.nn.functional import pad as nn_pad

from ..checks import (
    check_block_inputs,
    check_companion_shapes,
    check_mask,
    into,
    resolve_chunk_size,
    state_gradients,
    step_where_kept,
    where_kept,
)


def _masked(A: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Padding = the identity transition with zero input: (A, b) with I and 0 where mask is False."""
    if mask is None:
        return A, b
    eye = torch.eye(b.shape[-1], dtype=A.dtype, device=A.device)
    return where_kept(mask, A, eye), where_kept(mask, b, 0.0)


# Internal layout of the parallel scan: step-major "structure of arrays", E (L, m, m+1, B, C, N) holds the
# element of time t = c*L + s at E[s, :, :, b, c, n]. One in-chunk step s over all chunks and blocks is then a
# contiguous slice in which every matrix entry is a vector over (B, C, N), so a composition is m wide
# vectorised multiply-adds instead of B*C*N tiny matrix products (which cost far more per matrix on CPU).


def _to_chunks(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy time-major src (B, S, N, *inner) into step-major dst (L, *inner, B, C, N) at the times t < S."""
    chunk, steps, inner = dst.shape[0], src.shape[1], src.dim() - 3
    full, rem = divmod(steps, chunk)
    if full:  # (B, full, L, N, *inner) -> (L, *inner, B, full, N)
        view = src[:, : full * chunk].unflatten(1, (full, chunk))
        dst[..., :full, :] = view.permute(2, *range(4, 4 + inner), 0, 1, 3)
    if rem:  # (B, rem, N, *inner) -> (rem, *inner, B, N)
        dst[:rem, ..., full, :] = src[:, full * chunk :].permute(1, *range(3, 3 + inner), 0, 2)


def _from_chunks(states: torch.Tensor, steps: int, planar: bool = False) -> torch.Tensor:
    """Step-major states (L, m, B, C, N) -> time-major (B, T, N, m), the first `steps` times.

    planar: write planar memory (B, T, m, N), N innermost on both sides, and return its transposed view, for a
    planar caller (the LSTM's DEER), which then reads it without any further copy.
    """
    chunk, m, batch, chunks, blocks = states.shape
    if not planar:
        return states.permute(2, 3, 0, 4, 1).reshape(batch, chunks * chunk, blocks, m)[:, :steps]
    return states.permute(2, 3, 0, 1, 4).reshape(batch, chunks * chunk, m, blocks)[:, :steps].transpose(-1, -2)


def _is_planar(b: torch.Tensor) -> bool:
    """Whether b (B, T, N, m) is stored slot-major, N innermost (a transposed view of (B, T, m, N) memory)."""
    return b.shape[-1] > 1 and b.stride(-2) == 1


def _elements(A: torch.Tensor, b: torch.Tensor, chunk: int) -> torch.Tensor:
    """Scan elements E_t = [A_t | b_t] in a fresh step-major buffer (L, m, m+1, B, C, N).

    Times past T (the padding of the last chunk) get the identity transition and zero input, which leave the
    state unchanged.
    """
    batch, steps, blocks, m = b.shape
    chunks = -(-steps // chunk)
    E = torch.empty(chunk, m, m + 1, batch, chunks, blocks, dtype=b.dtype, device=b.device)
    _to_chunks(E[:, :, :m], A)
    _to_chunks(E[:, :, m], b)
    rem = steps - (chunks - 1) * chunk  # real times in the last chunk
    if rem < chunk:
        E[rem:, :, :m, :, -1] = torch.eye(m, dtype=b.dtype, device=b.device)[:, :, None, None]
        E[rem:, :, m, :, -1] = 0
    return E


def _adjoint_elements(A: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Elements [A_{t+1}^T | g_t] of the adjoint recurrence lambda_t = A_{t+1}^T lambda_{t+1} + g_t.

    A: the forward transitions, step-major (L, m, m, B, C, N); g: time-major (B, T, N, m). Returns a fresh
    step-major buffer (L, m, m+1, B, C, N). The step after the last chunk does not exist (zero transition);
    padding times get zero input, so lambda stays zero there whatever their transitions.
    """
    chunk, m = A.shape[:2]
    E = torch.empty(chunk, m, m + 1, *A.shape[3:], dtype=A.dtype, device=A.device)
    # time t + 1 is the next step of the same chunk, or step 0 of the next chunk; only outer axes move, so the
    # transposing copy keeps the long contiguous rows
    E[:-1, :, :m] = A[1:].transpose(1, 2)
    E[-1, :, :m, :, :-1] = A[0, :, :, :, 1:].transpose(0, 1)
    E[-1, :, :m, :, -1] = 0
    _to_chunks(E[:, :, m], g)
    rem = g.shape[1] - (E.shape[4] - 1) * chunk
    E[rem:, :, m, :, -1] = 0
    return E


def _step_sources(A: torch.Tensor, b: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step-major A (L, m, m, B, C, N) and b (L, m, B, C, N) for the forward scan, which only reads them.

    For planar inputs (N innermost) whose T is a multiple of the chunk these are views of the inputs (no copy:
    the scan reads every step slice in place, N contiguous); otherwise the identity-padded copy of ``_elements``
    (reading (B, T, N, m) blocks slice by slice would stride through memory).
    """
    batch, steps, blocks, m = b.shape
    if steps % chunk == 0 and (m == 1 or (_is_planar(b) and A.stride(2) == 1)):
        chunks = steps // chunk
        return (
            A.unflatten(1, (chunks, chunk)).permute(2, 4, 5, 0, 1, 3),
            b.unflatten(1, (chunks, chunk)).permute(2, 4, 0, 1, 3),
        )
    E = _elements(A, b, chunk)
    return E[:, :, :m], E[:, :, m]


def _scan_forward(A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor | None) -> torch.Tensor:
    """States of h_t = A_t h_{t-1} + b_t from step-major A (L, m, m, B, C, N) and b (L, m, B, C, N), which are
    only read. No autograd. Returns states (L, m, B, C, N).

    Inside each chunk (all chunks at once) E_s = [A_s | b_s] o E_{s-1}, the map from the chunk's incoming state to
    its s-th state, [A2 | b2] o [A1 | b1] = [A2 A1 | A2 b1 + b2]: a sum over j of column j of A2 times row j of
    E_{s-1}, written straight into E_s. Then ``_carry_and_fix_up``.
    """
    chunk, m = A.shape[:2]
    E = torch.empty(chunk, m, m + 1, *A.shape[3:], dtype=b.dtype, device=b.device)
    E[0, :, :m] = A[0]
    E[0, :, m] = b[0]
    for s in range(1, chunk):
        cur, prev, out = A[s], E[s - 1], E[s]
        into(out, torch.mul, cur[:, :1], prev[:1])
        for j in range(1, m):
            out.addcmul_(cur[:, j : j + 1], prev[j : j + 1])
        out[:, m] += b[s]
    return _carry_and_fix_up(E, x0, reverse=False)


def _scan_elements(E: torch.Tensor, x0: torch.Tensor | None, reverse: bool = False) -> torch.Tensor:
    """States of h_t = A_t h_{t-1} + b_t for step-major elements E (L, m, m+1, B, C, N). No autograd.

    E is overwritten (it is a private buffer). With reverse=True the recurrence runs from the last time to the
    first, h_t = A_t h_{t+1} + b_t, and x0 (B, N, m) enters after the last time. Returns states (L, m, B, C, N).
    Inside each chunk E_s <- E_s o E_{s-1} (see ``_scan_forward``), then ``_carry_and_fix_up``.
    """
    chunk, m = E.shape[:2]
    for s in range(chunk - 2, -1, -1) if reverse else range(1, chunk):
        cur, prev = E[s], E[s + 1] if reverse else E[s - 1]
        out = cur[:, :1] * prev[:1]
        for j in range(1, m):
            out.addcmul_(cur[:, j : j + 1], prev[j : j + 1])
        out[:, m] += cur[:, m]
        E[s] = out
    return _carry_and_fix_up(E, x0, reverse)


def _carry_and_fix_up(E: torch.Tensor, x0: torch.Tensor | None, reverse: bool) -> torch.Tensor:
    """From the in-chunk maps E (L, m, m+1, B, C, N): the true incoming state of every chunk (C sequential steps
    on (m, B, N)), then h = A_cum h_in + b_cum over the whole sequence (m multiply-adds, in E's b column).
    Returns states (L, m, B, C, N), a view of E."""
    chunk, m, _, batch, chunks, blocks = E.shape
    total = E[0] if reverse else E[-1]  # (m, m+1, B, C, N): each whole chunk
    carry = torch.zeros(m, batch, blocks, dtype=E.dtype, device=E.device) if x0 is None else x0.permute(2, 0, 1)
    incoming = [None] * chunks
    for c in range(chunks - 1, -1, -1) if reverse else range(chunks):
        incoming[c] = carry
        step = total[..., c, :]  # (m, m+1, B, N)
        carry = (step[:, :m] * carry).sum(1) + step[:, m]
    incoming = torch.stack(incoming, dim=-2)  # (m, B, C, N)

    states = E[:, :, m]  # fixed up in place: E is not read again
    for j in range(m):
        states.addcmul_(E[:, :, j], incoming[j])
    return states


class _BlockScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, b, x0, chunk):
        steps = b.shape[1]
        A_src, b_src = _step_sources(A, b, chunk)
        # keep the step-major transitions for the adjoint pass: one copy now is far cheaper than a second
        # transposing copy out of the time-major A later (not needed without gradients, e.g. DEER's iterations)
        needs_grad = any(ctx.needs_input_grad)
        A_steps = A_src.clone(memory_format=torch.contiguous_format) if needs_grad else None
        states = _from_chunks(_scan_forward(A_src, b_src, x0), steps, planar=_is_planar(b))
        ctx.save_for_backward(A_steps, x0, states)
        ctx.x0_is_none = x0 is None
        return states, states[:, -1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        A_steps, x0, states = ctx.saved_tensors
        steps, m = states.shape[1], states.shape[-1]
        # lambda_t = dL/dh_t = g_t + A_{t+1}^T lambda_{t+1}: the same scan, run backwards in time
        g = state_gradients(grad_states, grad_final, states)
        lam = _from_chunks(_scan_elements(_adjoint_elements(A_steps, g), None, reverse=True), steps)

        grad_A = grad_x0 = None
        if ctx.needs_input_grad[0]:
            # dL/dA_t[i, j] = lambda_t[i] h_{t-1}[j], written row by row: a broadcast outer product of tiny (m,)
            # rows is several times slower on CPU
            grad_A = torch.empty(*states.shape, m, dtype=states.dtype, device=states.device)
            for i in range(m):
                into(grad_A[:, 1:, :, i], torch.mul, states[:, :-1], lam[:, 1:, :, i : i + 1])
            grad_A[:, 0] = 0 if x0 is None else lam[:, 0].unsqueeze(-1) * x0.unsqueeze(-2)
        if not ctx.x0_is_none and ctx.needs_input_grad[2]:
            A_first = A_steps[0, ..., 0, :].permute(2, 3, 0, 1)  # (B, N, m, m): the transition at t = 0
            grad_x0 = (A_first.transpose(-1, -2) @ lam[:, 0].unsqueeze(-1)).squeeze(-1)
        return grad_A, lam, grad_x0, None


def block_scan(
    A: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.block.block_scan`` as a chunked parallel scan; A, b, initial_state of one real floating dtype.
    chunk_size: time chunk, a power of two near sqrt(T) if None."""
    check_block_inputs(A, b, initial_state, mask)
    chunk = resolve_chunk_size(chunk_size, b.shape[1])
    A, b = _masked(A, b, mask)
    return _BlockScanFunction.apply(A, b, initial_state, chunk)


def companion_matrices(a: torch.Tensor) -> torch.Tensor:
    """Companion matrices of order-m recurrences h_t = sum_k a[k-1] h_{t-k}: a (..., m) -> (..., m, m).

    State layout [h_t, h_{t-1}, ..., h_{t-m+1}]: the first row is (a_1 ... a_m), the sub-diagonal is ones
    (lag k moves to lag k+1), everything else zero.
    """
    m = a.shape[-1]
    shift = torch.eye(m - 1, m, dtype=a.dtype, device=a.device).expand(*a.shape[:-1], m - 1, m)
    return torch.cat([a.unsqueeze(-2), shift], dim=-2)


def companion_scan(
    a: torch.Tensor,
    v: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.block.companion_scan``: ``block_scan`` on the m x m companion matrices of a (the Triton kernel
    never builds them)."""
    check_companion_shapes(a, v)
    b = nn_pad(v.unsqueeze(-1), (0, a.shape[-1] - 1))
    return block_scan(companion_matrices(a), b, initial_state, mask, chunk_size=chunk_size)


def _single_step(new: torch.Tensor, h: torch.Tensor, mask: torch.Tensor | None):
    """(states (B, 1, N, m), final (B, N, m)) of one step whose update is `new`; a masked step keeps h."""
    new = step_where_kept(mask, new, h)
    return new.unsqueeze(1), new


def block_step(
    A: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``block_scan`` for T = 1 (decoding): the single update h = A_0 x0 + b_0, O(N m^2), no chunk machinery."""
    check_block_inputs(A, b, initial_state, mask)
    if b.shape[1] != 1:
        raise ValueError(f"block_step takes one time step (T = 1), got T = {b.shape[1]}")
    A0, b0 = A[:, 0], b[:, 0]
    if initial_state is None:
        return _single_step(b0, torch.zeros_like(b0), mask)
    return _single_step(torch.einsum("bnij,bnj->bni", A0, initial_state) + b0, initial_state, mask)


def companion_step(
    a: torch.Tensor, v: torch.Tensor, initial_state: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``companion_scan`` for T = 1 (decoding): h_t = a . S + v, the older slots shift down; O(N m)."""
    check_companion_shapes(a, v, steps=1)
    a0, v0 = a[:, 0], v[:, 0]
    S = torch.zeros_like(a0) if initial_state is None else initial_state
    if tuple(S.shape) != tuple(a0.shape) or S.dtype != a.dtype:
        raise ValueError(
            f"initial_state must be {a.dtype} of shape (B, N, m) = {tuple(a0.shape)}, got {S.dtype} {tuple(S.shape)}"
        )
    check_mask(mask, a.shape[0], 1)
    h = (a0 * S).sum(-1, keepdim=True) + v0.unsqueeze(-1)
    return _single_step(torch.cat([h, S[..., :-1]], dim=-1), S, mask)


__all__ = ["block_scan", "block_step", "companion_matrices", "companion_scan", "companion_step"]
