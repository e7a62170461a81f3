"""DEER's plain reference (docs/design.md §6): the recurrence x_t = F(x_{t-1}, inputs_t) as a loop of exact cell
steps, differentiable by autograd, with the inputs of ``deer_solve`` (hf_ssm.ops.deer, where the contract is written
once). The Newton solver (parallel.py) is tested against it; the model also runs it, for ``lrc_solver="sequential"``
and for a decoding step, so this reference travels with the portable checkpoint code.
"""

from __future__ import annotations

import torch

from ..checks import check_deer_inputs


def sequential_rollout(
    cell, inputs: tuple[torch.Tensor, ...], weights: tuple[torch.Tensor, ...], x0: torch.Tensor, mask=None
) -> torch.Tensor:
    """The states (B, T, *S) of ``deer_solve`` as a plain loop of exact steps (no SolveInfo: nothing is iterated)."""
    check_deer_inputs(cell.block, inputs, x0, mask)
    x, states = x0, []
    # unbind, not inputs[:, t]: the backward of T slices would build T full-size gradients (O(T^2) work).
    per_step = list(zip(*(i.unbind(1) for i in inputs)))
    keep = None if mask is None else mask.view(*mask.shape, *([1] * (x0.dim() - 1))).unbind(1)
    for t, step_inputs in enumerate(per_step):
        x_new = cell.step(x, step_inputs, weights)
        if keep is not None:
            x_new = torch.where(keep[t], x_new, x)
        x = x_new
        states.append(x)
    return torch.stack(states, dim=1)


__all__ = ["sequential_rollout"]
