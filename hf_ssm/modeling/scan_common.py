"""What the scan families share (docs/design.md §3-§5): the mask and chunk-size rules of their one signature, the
input checks of the block, companion and diagonal scans, padding as the identity step, and the two pieces every
adjoint pass starts from.

Used by the PyTorch scans of this folder (diag_scan, block_scan, pd_scan, pd_ops) and by their Triton twins in
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


# ---- the input checks of the block, companion and diagonal scans (the torch scans' and the kernels' own)


def check_block_shapes(A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor | None, mask: torch.Tensor | None) -> None:
    """The shapes of every block scan (the Triton kernel's too): b (B, T, N, m) with T >= 1, A (B, T, N, m, m),
    initial_state (B, N, m), mask (B, T) bool. The dtype rules are each implementation's own."""
    if b.dim() != 4:
        raise ValueError(f"b must have shape (B, T, N, m), got {tuple(b.shape)}")
    if tuple(A.shape) != (*b.shape, b.shape[-1]):
        raise ValueError(f"A must have shape (B, T, N, m, m) = {(*b.shape, b.shape[-1])}, got {tuple(A.shape)}")
    check_block_state(b, x0, mask)


def check_block_state(blocks: torch.Tensor, x0: torch.Tensor | None, mask: torch.Tensor | None) -> None:
    """T >= 1, initial_state (B, N, m) and mask (B, T) of a block scan whose per-step blocks are `blocks`
    (B, T, N, m): b of the dense scan, the first rows a of the companion scan."""
    if blocks.shape[1] == 0:
        raise ValueError("a block scan needs at least one time step (T >= 1)")
    batch, steps, n, m = blocks.shape
    if x0 is not None and tuple(x0.shape) != (batch, n, m):
        raise ValueError(f"initial_state must have shape (B, N, m) = {(batch, n, m)}, got {tuple(x0.shape)}")
    check_mask(mask, batch, steps)


def check_companion_shapes(a: torch.Tensor, v: torch.Tensor, steps: int | None = None) -> None:
    """The shapes of every companion scan: a (B, T, N, m) first rows and v (B, T, N) slot-0 inputs (T = `steps`
    when given)."""
    if a.dim() != 4 or tuple(v.shape) != tuple(a.shape[:3]) or (steps is not None and a.shape[1] != steps):
        t = "T" if steps is None else steps
        raise ValueError(f"a must be (B, {t}, N, m) and v (B, {t}, N); got {tuple(a.shape)} and {tuple(v.shape)}")


def check_diag_inputs(a: torch.Tensor, b: torch.Tensor, x0: torch.Tensor | None, mask: torch.Tensor | None) -> None:
    """The contract of every diagonal scan (the Triton kernel's too): a, b (B, T, *S) of one dtype, T >= 1,
    initial_state (B, *S) of that dtype, mask (B, T) bool."""
    if a.dim() < 2:
        raise ValueError(f"a must have shape (B, T, ...), got {tuple(a.shape)}")
    if a.shape != b.shape:
        raise ValueError(f"a and b must share the shape (B, T, ...); got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must share one dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] == 0:
        raise ValueError("the scan needs at least one time step (T >= 1)")
    expected = (a.shape[0], *a.shape[2:])
    if x0 is not None:
        if tuple(x0.shape) != expected:
            raise ValueError(f"initial_state must have shape (B, ...) = {expected}, got {tuple(x0.shape)}")
        if x0.dtype != a.dtype:
            raise TypeError(f"initial_state must have the dtype of a and b ({a.dtype}), got {x0.dtype}")
    check_mask(mask, a.shape[0], a.shape[1])


def mask_steps(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Padding = the identity transition with zero input: (a, b) with 1 and 0 where mask is False."""
    return where_kept(mask, a, 1.0), where_kept(mask, b, 0.0)


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
    "check_block_shapes",
    "check_block_state",
    "check_companion_shapes",
    "check_diag_inputs",
    "check_mask",
    "default_chunk_size",
    "mask_steps",
    "previous_states",
    "resolve_chunk_size",
    "state_gradients",
    "step_where_kept",
    "where_kept",
]
