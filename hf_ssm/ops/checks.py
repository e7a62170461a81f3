"""The input checks every op family shares (docs/design.md §2-§6): the mask and chunk-size rules of their one
signature, the shapes of the block, companion, diagonal and PD scans, of the PD-SSM generated ops and of a DEER
solve, padding as the identity step, and the two pieces every adjoint pass starts from.

Called by every implementation of a family (the plain reference, the parallel torch scan and the Triton kernel in
``hf_ssm/ops/<family>/``), so all of them accept and refuse the same calls with the same messages; a dtype rule that
differs between backends (the kernels take float32 / bfloat16 / float16 / complex64 only) stays the backend's own.
A leaf: it imports torch and nothing of hf_ssm, so the kernels, the torch scans and the model's config can all use
it (it travels with the portable checkpoint code, docs/design.md §2).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# Which implementation runs the scans: the config's `scan_backend` (ops/dispatch.py); the environment variable
# HF_SSM_SCAN_BACKEND overrides it.
SCAN_BACKENDS = ("auto", "torch", "triton")


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
            f"{where}mask must be a bool tensor of shape (B, T) = {(batch, steps)}, "
            f"got {mask.dtype} {tuple(mask.shape)}"
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


# ---- the block, companion and diagonal scans


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


def check_block_inputs(A: torch.Tensor, b: torch.Tensor, x0: torch.Tensor | None, mask: torch.Tensor | None) -> None:
    """The torch block scans' contract (the reference loop's and the parallel scan's): the block shapes, and A, b,
    initial_state of one real floating dtype."""
    check_block_shapes(A, b, x0, mask)
    if not (A.is_floating_point() and b.is_floating_point()) or A.dtype != b.dtype:
        raise TypeError(f"A and b must share one real floating dtype, got {A.dtype} and {b.dtype}")
    if x0 is not None and x0.dtype != b.dtype:
        raise TypeError(f"initial_state must have the dtype of b ({b.dtype}), got {x0.dtype}")


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


# ---- the PD scans and the PD-SSM generated ops


def complex_shape(t: torch.Tensor | None) -> tuple[int, ...] | None:
    """The shape of t as complex numbers: a complex tensor's own, real (re, im) pairs' without their trailing 2."""
    if t is None:
        return None
    shape = tuple(t.shape)
    if t.is_complex():
        return shape
    if shape[-1:] != (2,):
        raise ValueError(f"a real dv / b / initial_state must end in a (real, imag) axis of 2, got {shape}")
    return shape[:-1]


def check_pd_shapes(idx, dv, b, x0, p_soft=None) -> None:
    """The shapes of every scan of given PD transitions (torch, Triton, the reference loop): idx (B, T, H, N) with
    T >= 1, dv and b of its shape (complex, or real (..., 2) pairs), the initial state x0 (B, H, N) or None, p_soft
    (B, T, H, N, N) or None. The dtype rules are each implementation's own."""
    if idx.dim() != 4:
        raise ValueError(f"idx must have shape (B, T, H, N), got {tuple(idx.shape)}")
    dv_shape, b_shape = complex_shape(dv), complex_shape(b)
    if dv_shape != tuple(idx.shape) or b_shape != tuple(idx.shape):
        raise ValueError(
            f"idx, dv and b must share the shape (B, T, H, N); got {tuple(idx.shape)}, {dv_shape}, {b_shape}"
        )
    batch, steps, heads, n = idx.shape
    if steps == 0:
        raise ValueError("pd_scan needs at least one time step (T >= 1)")
    if x0 is not None and complex_shape(x0) != (batch, heads, n):
        raise ValueError(f"initial_state must have shape (B, H, N) = {(batch, heads, n)}, got {tuple(x0.shape)}")
    if p_soft is not None and tuple(p_soft.shape) != (batch, steps, heads, n, n):
        raise ValueError(
            f"p_soft must have shape (B, T, H, N, N) = {(batch, steps, heads, n, n)}, got {tuple(p_soft.shape)}"
        )


def check_pd_inputs(idx, dv, b, x0, p_soft=None) -> None:
    """The torch PD scans' contract (the reference loop's and the parallel scan's): dv, b and x0 of one complex
    dtype, idx int64, and ``check_pd_shapes``."""
    if not (dv.is_complex() and b.is_complex()):
        raise TypeError(f"dv and b must be complex, got {dv.dtype} and {b.dtype}")
    if dv.dtype != b.dtype or (x0 is not None and x0.dtype != b.dtype):
        x0_dtype = None if x0 is None else x0.dtype
        raise TypeError(f"dv, b and initial_state must share one complex dtype, got {dv.dtype}, {b.dtype}, {x0_dtype}")
    check_pd_shapes(idx, dv, b, x0, p_soft)
    if idx.dtype != torch.long:
        raise TypeError(f"idx must be int64, got {idx.dtype}")


def check_generated_inputs(name: str, selection, matrices, dv, b, x0, mask, temperature) -> None:
    """The shapes every generated PD op (torch, Triton, the dense reference) takes, `name` in the errors: selection
    (B, T, H, K) with T >= 1, matrices (H, K, N, N), dv and b (B, T, H, N) complex or (B, T, H, N, 2) real pairs,
    initial state (B, H, N) (pairs: (B, H, N, 2)) or None, mask (B, T) bool or None, temperature > 0. (Shapes only,
    no tensor op: it runs at every decoding step.)"""
    dv_shape, b_shape, x0_shape = complex_shape(dv), complex_shape(b), complex_shape(x0)
    sel_shape, m_shape = tuple(selection.shape), tuple(matrices.shape)
    if len(sel_shape) != 4:
        raise ValueError(f"{name}: the selection must have shape (B, T, H, K), got {sel_shape}")
    batch, steps, heads, k = sel_shape
    if len(m_shape) != 4 or m_shape[:2] != (heads, k) or m_shape[2] != m_shape[3]:
        raise ValueError(f"{name}: matrices must have shape (H, K, N, N) = ({heads}, {k}, N, N), got {m_shape}")
    n = m_shape[3]
    for label, shape in (("dv", dv_shape), ("b", b_shape)):
        if shape != (batch, steps, heads, n):
            raise ValueError(f"{name}: {label} must have shape (B, T, H, N) = {(batch, steps, heads, n)}, got {shape}")
    if x0_shape is not None and x0_shape != (batch, heads, n):
        raise ValueError(f"{name}: initial_state must have shape {(batch, heads, n)}, got {x0_shape}")
    check_mask(mask, batch, steps, op=name)
    if steps == 0:
        raise ValueError(f"{name}: needs at least one time step (T >= 1)")
    if not temperature > 0:
        raise ValueError(f"{name}: temperature must be > 0, got {temperature!r}")


# ---- a DEER solve


def check_deer_inputs(block: int, inputs, x0: torch.Tensor, mask: torch.Tensor | None) -> None:
    """The inputs of every DEER solve (the Newton solver's and the sequential loop's) of a cell with `block` x
    `block` Jacobian blocks: at least one per-step input (B, T, ...) with T >= 1, x0 (B, D) or (B, m, D), mask (B, T)
    bool."""
    if not inputs:
        raise ValueError("the cell needs at least one per-step input tensor")
    batch, steps = inputs[0].shape[:2]
    if steps == 0:
        raise ValueError("the input sequence is empty (T = 0)")
    if x0.shape[0] != batch or (block > 1 and (x0.dim() != 3 or x0.shape[1] != block)):
        raise ValueError(f"x0 must have shape (B, D) or (B, m, D) with B = {batch}, m = {block}; got {tuple(x0.shape)}")
    check_mask(mask, batch, steps)


# ---- padding and the adjoint passes


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
    "SCAN_BACKENDS",
    "check_block_inputs",
    "check_block_shapes",
    "check_block_state",
    "check_companion_shapes",
    "check_deer_inputs",
    "check_diag_inputs",
    "check_generated_inputs",
    "check_mask",
    "check_pd_inputs",
    "check_pd_shapes",
    "complex_shape",
    "default_chunk_size",
    "mask_steps",
    "previous_states",
    "resolve_chunk_size",
    "state_gradients",
    "step_where_kept",
    "where_kept",
]
