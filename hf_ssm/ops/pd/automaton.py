"""The direct transition of a pure automaton, trained: its straight-through gradient in O(N) per head and step
(docs/design.md §4.3).

A PD-SSM head with D = 1, no input (b = 0) and a basis-vector start (pd_ssm_initial_state "one_hot" or
"head_basis") only ever holds a basis vector: P_t maps e_q to e_(idx_t[q]). (This op also takes a zero state.) The
straight-through gradient of P_t's column logits L_t,

    dL/dL_t[i, j] = S[i, j] (G[i, j] - sum_k S[k, j] G[k, j]) / tau,   G[i, j] = Re(conj(lambda_t[i]) x_{t-1}[j]),

(S the column softmax of L_t / tau, lambda_t = dL/dx_t) is then zero outside the column q of the state x_{t-1} =
w e_q (w = 1, or 0 for the zero state): only that column's softmax is needed, N numbers per head and step where the
general path (`pd_scan` given p_soft) forms and differentiates the whole (B, T, H, N, N) column softmax. On the
table recipe's modular-arithmetic layer (8 heads of N = 64) that softmax was most of a training step's CPU time.
The value is the general path's, to float rounding (tests/mixers/test_pd_automaton.py).
"""

from __future__ import annotations

import torch

from ..checks import resolve_chunk_size
from .parallel import pd_scan, pd_scan_backward


class _AutomatonDirectScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, idx, x0, mask, temperature, chunk):
        dv = torch.ones(idx.shape, dtype=x0.dtype, device=x0.device)
        b = torch.zeros(idx.shape, dtype=x0.dtype, device=x0.device)
        states, final = pd_scan(idx, dv, b, x0, chunk_size=chunk)
        ctx.save_for_backward(logits, idx, dv, x0, states, mask)
        ctx.temperature, ctx.chunk = temperature, chunk
        return states, final

    @staticmethod
    def backward(ctx, grad_states, grad_final):
        logits, idx, dv, x0, states, mask = ctx.saved_tensors
        lam, _, grad_x0, x_prev = pd_scan_backward(idx, dv, x0, states, grad_states, grad_final, ctx.chunk)
        # x_{t-1} = w e_q per head: q its column, w its weight (1, or 0 for the zero state), both (B, T, H, 1)
        weight, column = x_prev.real.max(dim=-1, keepdim=True)
        n = logits.shape[-1]
        at_column = column.unsqueeze(-2).expand(*column.shape[:-1], n, 1)  # (B, T, H, N, 1): rows i, column q
        soft = torch.softmax(logits.gather(-1, at_column).squeeze(-1) / ctx.temperature, dim=-1)  # (B, T, H, N)
        g = lam.real * weight  # G[:, q]
        grad_column = soft * (g - (soft * g).sum(-1, keepdim=True)) / ctx.temperature
        if mask is not None:  # a padded step passes no gradient to its logits
            grad_column = grad_column * mask.to(grad_column.dtype)[..., None, None]
        grad_logits = torch.zeros_like(logits).scatter_(-1, at_column, grad_column.unsqueeze(-1))
        return grad_logits, None, grad_x0, None, None, None


def automaton_direct_scan(
    logits: torch.Tensor,
    idx: torch.Tensor,
    x0: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The PD scan of a pure automaton's direct transition, with the straight-through gradient of its logits.

    Args:
        logits: (B, T, H, N, N) float, the column logits of P_t ([..., i, j]: row i of column j).
        idx: (B, T, H, N) int64, their column argmax (the identity at padded steps: the caller's job).
        x0: (B, H, N) complex, a basis vector or zero in every head (not checked: the layer's static conditions,
            D = 1, no input, a basis or zero start, guarantee every state is one).
        mask: optional (B, T), 0 at padded steps (they pass no gradient to their logits).
        temperature: the column softmax's temperature in the backward.
        chunk_size: the scan's time chunk (``checks.default_chunk_size(T)`` if None).

    Returns (states (B, T, H, N), final state (B, H, N)), as ``pd_scan`` with D = 1 and b = 0.
    """
    chunk = resolve_chunk_size(chunk_size, idx.shape[1])
    return _AutomatonDirectScan.apply(logits, idx, x0, mask, temperature, chunk)


__all__ = ["automaton_direct_scan"]
