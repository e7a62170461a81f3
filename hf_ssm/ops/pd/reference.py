"""The PD family's plain references (docs/design.md §4): the loops and dense forms the parallel torch scans
(parallel.py, generated.py) and the Triton kernels (triton.py) are tested against, under the ops' own names and
signatures (hf_ssm.ops.pd, where the contract is written once).

- ``pd_scan``: x_t = P_t D_t x_{t-1} + b_t as a plain loop with autograd;
- ``pd_dictionary_scan`` / ``pd_bank_scan``: the dictionary and bank ops as dense loops over (B, T, H, N, N)
  matrices with straight-through one-hots;
- ``pd_compose`` / ``pd_to_dense`` / ``dense_pd_scan``: the product of two sparse PD matrices, the dense
  (..., N, N) P D, and the scan of dense P.

Not part of the portable model code: nothing the model imports imports this module, so a saved checkpoint never
carries it.
"""

from __future__ import annotations

import torch

from ..checks import check_generated_inputs, check_pd_inputs, where_kept


def pd_scan(
    idx: torch.Tensor,
    dv: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    p_soft: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.pd.pd_scan`` as a plain loop. Returns (states (B, T, H, N), final state (B, H, N)).

    The straight-through term ``(p_soft - p_soft.detach()) @ z`` is zero in value and routes the gradient
    of the hard P to ``p_soft`` (B, T, H, N, N); it is written densely here because this function is a test oracle.
    """
    check_pd_inputs(idx, dv, b, initial_state, p_soft)
    batch, steps, heads, n = idx.shape
    x = torch.zeros(batch, heads, n, dtype=b.dtype, device=b.device) if initial_state is None else initial_state
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


def pd_compose(later: tuple[torch.Tensor, torch.Tensor], earlier: tuple[torch.Tensor, torch.Tensor]):
    """(idx, dv) of A_later @ A_earlier over the last axis: idx = idx2[idx1], dv = dv2[idx1] * dv1."""
    idx2, dv2 = later
    idx1, dv1 = earlier
    return idx2.gather(-1, idx1), dv2.gather(-1, idx1) * dv1


def pd_to_dense(idx: torch.Tensor, dv: torch.Tensor) -> torch.Tensor:
    """Dense (..., N, N) matrix P D of a sparse (idx, dv) (..., N)."""
    n = idx.shape[-1]
    p = torch.zeros(*idx.shape, n, dtype=dv.dtype, device=dv.device)
    p.scatter_(-2, idx.unsqueeze(-2), 1)  # P[idx[j], j] = 1
    return p * dv.unsqueeze(-2)


def dense_pd_scan(p, dv, b, x0=None, mask=None):
    """x_t = P_t (dv_t * x_{t-1}) + b_t with dense P (B, T, H, N, N), autograd through everything; mask (B, T) bool
    or None: a False step has P = I, dv = 1, b = 0. Returns (states (B, T, H, N), final (B, H, N))."""
    if mask is not None:
        one, zero = (torch.full((), v, dtype=dv.dtype, device=dv.device) for v in (1, 0))
        dv, b = where_kept(mask, dv, one), where_kept(mask, b, zero)
        p = where_kept(mask, p, torch.eye(p.shape[-1], dtype=p.dtype, device=p.device))
    x = torch.zeros_like(b[:, 0]) if x0 is None else x0
    states = []
    for t in range(p.shape[1]):
        x = (p[:, t].to(x.dtype) @ (dv[:, t] * x).unsqueeze(-1)).squeeze(-1) + b[:, t]
        states.append(x)
    return torch.stack(states, dim=1), x


def _straight_through(hard: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    return hard + (soft - soft.detach())


def _column_one_hot(m: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(m).scatter_(-2, m.argmax(dim=-2, keepdim=True), 1.0)


def pd_dictionary_scan(selection, dictionary, dv, b, initial_state=None, mask=None, temperature=1.0):
    """``hf_ssm.ops.pd.pd_dictionary_scan`` as a dense loop: P_t = onehot + softmax - softmax.detach() of
    M_t = sum_k s_t,k M_k down each column; dv, b, initial_state complex."""
    check_generated_inputs("pd_dictionary_scan", selection, dictionary, dv, b, initial_state, mask, temperature)
    m = torch.einsum("bthk,hkij->bthij", selection.float(), dictionary.float())
    p = _straight_through(_column_one_hot(m), torch.softmax(m / temperature, dim=-2))
    return dense_pd_scan(p, dv, b, initial_state, mask)


def pd_bank_scan(logits, scores, dv, b, initial_state=None, mask=None, temperature=1.0):
    """``hf_ssm.ops.pd.pd_bank_scan`` as a dense loop: e_t = straight-through one-hot of argmax logits
    (softmax(logits / tau)), P_k = straight-through column one-hot of scores_k (column softmax),
    P_t = sum_k e_t,k P_k; dv, b, initial_state complex."""
    check_generated_inputs("pd_bank_scan", logits, scores, dv, b, initial_state, mask, temperature)
    logits, scores = logits.float(), scores.float()
    hard_e = torch.zeros_like(logits).scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    e = _straight_through(hard_e, torch.softmax(logits / temperature, dim=-1))
    bank = _straight_through(_column_one_hot(scores), torch.softmax(scores / temperature, dim=-2))
    return dense_pd_scan(torch.einsum("bthk,hkij->bthij", e, bank), dv, b, initial_state, mask)


__all__ = ["dense_pd_scan", "pd_bank_scan", "pd_compose", "pd_dictionary_scan", "pd_scan", "pd_to_dense"]
