"""What the scan families share (docs/design.md §3-§5): the mask and chunk-size rules of their one signature,
padding as the identity step, and the two pieces every adjoint pass starts from.

Used by the PyTorch scans of this folder (scan_diag, scan_block, scan_pd, pd_ops) and by their Triton twins in
``hf_ssm.kernels``, so both backends accept and refuse the same calls with the same messages. Only torch is
imported (this folder is copied next to checkpoints for trust_remote_code).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def default_chunk_size(steps: int) -> int:
    """A power of two near sqrt(T): balances the intra-chunk and inter-chunk loops."""
    return max(1, 2 ** round(math.log2(math.sqrt(max(steps, 1)))))


def resolve_chunk_size(chunk_size: int | None, steps: int, default: Callable[[int], int] = default_chunk_size) -> int:
    """`chunk_size` as an int >= 1, or default(T) when it is None; a ValueError for a chunk below 1."""
    chunk = default(steps) if chunk_size is None else int(chunk_size)
    if chunk < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return chunk


def into(out: torch.Tensor, op: Callable, *args) -> torch.Tensor:
    """`op(*args, out=out)`: in eager the result is written straight into `out` (on CPU a fresh tensor costs more
    than the math of these small per-step ops); under torch.compile, which cannot trace `out=` into a strided
    view (a graph break), the same value is computed and copied into `out`."""
    if torch.compiler.is_compiling():
        return out.copy_(op(*args))
    return op(*args, out=out)


def check_mask(mask: torch.Tensor | None, batch: int, steps: int, op: str | None = None) -> None:
    """mask must be None or a (B, T) bool tensor (False = a padded step); `op` names the caller in the error."""
    if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != (batch, steps)):
        where = "" if op is None else f"{op}: "
        raise ValueError(
            f"{where}mask must be a bool tensor of shape (B, T) = {(batch, steps)}, got {mask.dtype} {tuple(mask.shape)}"
        )


def where_kept(mask: torch.Tensor | None, t: torch.Tensor, filler) -> torch.Tensor:
    """Padding as the identity step: t (B, T, ...) where mask (B, T) is True, `filler` (a scalar, or a tensor that
    broadcasts over t's trailing axes: the identity transition, a zero input) where it is False; t without a mask."""
    if mask is None:
        return t
    return torch.where(mask.view(*mask.shape, *([1] * (t.dim() - 2))), t, filler)


def step_where_kept(mask: torch.Tensor | None, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """One time step of every row: the updated state `new` (B, ...) where mask (B,) or (B, 1) is True, the state
    `old` it replaces where the step is padding (the identity); `new` without a mask."""
    if mask is None:
        return new
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


def state_gradients(
    grad_states: torch.Tensor | None, grad_final: torch.Tensor | None, states: torch.Tensor
) -> torch.Tensor:
    """g_t = dL/dx_t taken directly, (B, T, ...): the gradient of the states plus, at the last step, that of the final
    state; zeros where autograd passes None. grad_states is copied only when the final state's gradient is added."""
    if grad_final is None:
        return torch.zeros_like(states) if grad_states is None else grad_states
    g = torch.zeros_like(states) if grad_states is None else grad_states.clone()
    g[:, -1] += grad_final
    return g


def previous_states(x0: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """x_{t-1} for every step (B, T, ...): the states one step later, the initial state x0 (B, ...) first."""
    return torch.cat([x0.unsqueeze(1), states[:, :-1]], dim=1)


__all__ = [
    "check_mask",
    "default_chunk_size",
    "previous_states",
    "resolve_chunk_size",
    "state_gradients",
    "step_where_kept",
    "where_kept",
]
