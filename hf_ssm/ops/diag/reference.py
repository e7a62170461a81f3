"""The diagonal family's plain reference (docs/design.md §3): ``diag_scan`` as a loop with autograd, under the op's
own name and signature (hf_ssm.ops.diag, where the contract is written once); the parallel torch scan
(parallel.py) and the Triton kernel (triton.py) are tested against it.
"""

from __future__ import annotations

import torch

from ..checks import check_diag_inputs, step_where_kept


def diag_scan(
    a: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.diag.diag_scan`` as a plain loop. Returns (states (B, T, *S), final state (B, *S)); a masked
    step keeps the state."""
    check_diag_inputs(a, b, initial_state, mask)
    x = torch.zeros_like(b[:, 0]) if initial_state is None else initial_state
    states = []
    for t in range(a.shape[1]):
        new = a[:, t] * x + b[:, t]
        x = step_where_kept(None if mask is None else mask[:, t], new, x)
        states.append(x)
    return torch.stack(states, dim=1), x


__all__ = ["diag_scan"]
