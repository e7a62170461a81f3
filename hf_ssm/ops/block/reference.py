"""The block family's plain references (docs/design.md §3, §5): ``block_scan`` and ``companion_scan`` as loops
with autograd, under the ops' own names and signatures (hf_ssm.ops.block, where the contract is written once); the
parallel torch scans (parallel.py) and the Triton kernels (triton.py) are tested against them.

A masked step keeps the previous state, written independently of the parallel scan's padding (the identity block
with zero input), so the tests compare two forms.
"""

from __future__ import annotations

import torch
from torch.nn.functional import pad as nn_pad

from ..checks import check_block_inputs, check_companion_shapes


def block_scan(
    A: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.block.block_scan`` as a plain loop. Returns (states (B, T, N, m), final state (B, N, m))."""
    check_block_inputs(A, b, initial_state, mask)
    batch, _, blocks, m = b.shape
    h = torch.zeros(batch, blocks, m, dtype=b.dtype, device=b.device) if initial_state is None else initial_state
    keep = [None] * b.shape[1] if mask is None else mask.view(*mask.shape, 1, 1).unbind(1)
    states = []
    # unbind once: indexing A[:, t] inside the loop would make every step's backward write a full-size gradient
    for A_t, b_t, keep_t in zip(A.unbind(1), b.unbind(1), keep):
        new = (A_t @ h.unsqueeze(-1)).squeeze(-1) + b_t
        h = new if keep_t is None else torch.where(keep_t, new, h)
        states.append(h)
    return torch.stack(states, dim=1), h


def companion_scan(
    a: torch.Tensor, v: torch.Tensor, initial_state: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.block.companion_scan`` as a plain loop over dense companion matrices (first row a_t, ones on the
    sub-diagonal) with input [v_t, 0, ..., 0]."""
    check_companion_shapes(a, v)
    m = a.shape[-1]
    shift = torch.eye(m - 1, m, dtype=a.dtype, device=a.device).expand(*a.shape[:-1], m - 1, m)
    return block_scan(
        torch.cat([a.unsqueeze(-2), shift], dim=-2), nn_pad(v.unsqueeze(-1), (0, m - 1)), initial_state, mask
    )


__all__ = ["block_scan", "companion_scan"]
