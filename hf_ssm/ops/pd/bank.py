"""PD-SSM's bank transitions (docs/design.md §4, after Flash PD-SSM): the bank of column one-hot matrices, the
gather of one step's transition from it, and the straight-through gradients of the selection logits and the
score matrices.

With K score matrices per head (H, K, N, N): P_k = column argmax of score_k (the bank, (H, K, N) int64, once per
call), and step t uses P_t = P_{k_t} with k_t = argmax_k logits_t (B, T, H, K). The backward is straight-through:
softmax(logits / tau) in place of the argmax over k, softmax(score_k / tau) down each column in place of P_k.

Shared by the torch op (generated.py) and the Triton kernel's backward (triton.py); it imports only torch.
"""

from __future__ import annotations

import torch


def bank_indices(scores: torch.Tensor) -> torch.Tensor:
    """The bank (H, K, N) int64: column j of P_k has its 1 in row bank[h, k, j] = argmax_i scores[h, k, i, j]."""
    return scores.argmax(dim=-2)


def gather_bank(bank: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """idx (B, T, H, N) = bank[h, choice[b, t, h]], an index gather from the (H*K, N) table."""
    heads, k, n = bank.shape
    rows = choice + k * torch.arange(heads, device=choice.device)
    return bank.reshape(heads * k, n)[rows.reshape(-1)].view(*choice.shape, n)


def _column_softmax_backward(s: torch.Tensor, g: torch.Tensor, temperature: float) -> torch.Tensor:
    """Gradient w.r.t. M of softmax(M / tau) down each column (dim -2), given s = that softmax and its gradient g.
    Overwrites g."""
    g.sub_((s * g).sum(-2, keepdim=True)).mul_(s)
    return g.div_(temperature) if temperature != 1.0 else g


def _bank_outer_sums(lam, z, choice, k):
    """dL/dP_k = sum over steps with choice = k of Re(conj(lam_t) z_t^T): (H, K, N, N), Theta(T N^2) in all.

    Steps are grouped by their choice (a stable sort per head), and each group is one (N x 2n) @ (2n x N) product.
    """
    batch, steps, heads, n = lam.shape
    lam_r = torch.view_as_real(lam).transpose(-1, -2)  # (B, T, H, 2, N)
    z_r = torch.view_as_real(z).transpose(-1, -2)
    out = lam_r.new_zeros(heads, k, n, n)
    if torch.compiler.is_compiling():
        # The groups' sizes depend on the data (a graph break under torch.compile): sum the per-step outer
        # products into their choice instead, the same sums at Theta(B T N^2) memory.
        for h in range(heads):
            outer = torch.einsum("sci,scj->sij", lam_r[:, :, h].reshape(-1, 2, n), z_r[:, :, h].reshape(-1, 2, n))
            out[h].index_add_(0, choice[:, :, h].reshape(-1), outer)
        return out
    for h in range(heads):
        ch = choice[:, :, h].reshape(-1)
        order = torch.argsort(ch, stable=True)
        counts = torch.bincount(ch, minlength=k).tolist()
        # one copy straight from the transposed views into choice order (a reshape, then [order], copied twice)
        lh = lam_r[:, :, h].flatten(0, 1).index_select(0, order).split(counts)
        zh = z_r[:, :, h].flatten(0, 1).index_select(0, order).split(counts)
        for kk in range(k):
            if counts[kk]:
                out[h, kk] = lh[kk].reshape(-1, n).T @ zh[kk].reshape(-1, n)
    return out


def _bank_choice_grad(lam: torch.Tensor, z: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """dL/de_t,k = <G_t, P_k> = sum_j Re(conj(lam_t[bank_k[j]]) z_t[j]): (B, T, H, K), one index gather of N
    entries per token and bank entry.

    lam is read as float64 (one 8-byte element per complex number), so that each bank entry's gather is one
    torch.gather down the last axis into a re-used buffer: several times faster on CPU than an index_select of
    (re, im) pairs along the H N axis, which was most of the bank op's backward. The products and sums are those
    of the pair layout, so the values are the same bit for bit."""
    batch, steps, heads, n = lam.shape
    k = bank.shape[1]
    tokens = batch * steps
    lam_64 = lam.resolve_conj().contiguous().view(torch.float64).reshape(tokens, heads * n)
    z_r = torch.view_as_real(z).reshape(tokens, heads, 2 * n)
    rows = bank + n * torch.arange(heads, device=bank.device).view(heads, 1, 1)  # (H, K, N) into the H N axis
    rows = rows.transpose(0, 1).reshape(k, 1, heads * n)
    out = lam_64.new_empty(batch, steps, heads, k, dtype=torch.float32)
    picked = torch.empty_like(lam_64)
    for kk in range(k):
        torch.gather(lam_64, 1, rows[kk].expand(tokens, -1), out=picked)
        pairs = picked.view(torch.float32).view(tokens, heads, 2 * n)
        out[..., kk] = pairs.mul_(z_r).sum(-1).view(batch, steps, heads)
    return out


def bank_straight_through_grads(logits, scores, choice, lam, z, mask, temperature, need_logits=True, need_scores=True):
    """(dL/dlogits (B, T, H, K) or None, dL/dscores (H, K, N, N) or None) of the bank transitions, given the
    adjoint lam_t = dL/dx_t and z_t = dv_t * x_{t-1} (B, T, H, N) complex, choice = argmax logits (B, T, H).

    With G_t = Re(conj(lam_t) z_t^T) = dL/dP_t: dL/de_t,k = <G_t, P_k> goes through the softmax(logits / tau)
    Jacobian, and dL/dP_k = sum_{t: k_t = k} G_t through the column softmax of scores_k / tau. Padded steps
    (mask (B, T) False) pass nothing. Shared by the torch op and the Triton kernel's backward.
    """
    if mask is not None:
        z = z * mask.view(*mask.shape, 1, 1)
    grad_logits = grad_scores = None
    if need_logits:
        grad_e = _bank_choice_grad(lam, z, bank_indices(scores))
        p = torch.softmax(logits / temperature, dim=-1)
        grad_logits = p * (grad_e - (p * grad_e).sum(-1, keepdim=True)) / temperature
    if need_scores:
        s = torch.softmax(scores / temperature, dim=-2)
        grad_scores = _column_softmax_backward(s, _bank_outer_sums(lam, z, choice, scores.shape[1]), temperature)
    return grad_logits, grad_scores


__all__ = ["bank_indices", "bank_straight_through_grads", "gather_bank"]
