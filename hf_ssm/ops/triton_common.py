"""What every Triton kernel of the op families (hf_ssm/ops/<family>/triton.py) shares: the flattened token layout,
chunking, dtype rules, launch helpers, and the schedule's on-chip index arithmetic (which chunk a program runs, in
which order, who writes the final state).

Every scan here runs on a flat token axis: the input (B, T, ...) is flattened to (B*T, ...), and the kernels find
row r between the boundaries cu[r] = r T and cu[r + 1] (the table `Layout.cu`). The state starts every row from
that row's initial state (or zero) and one final state per row is returned. The scans take no variable-length
(``cu_seqlens``) input: the model runs packed documents one document per row (docs/design.md §7.5).

Chunked schedule (all three scan families): each sequence is cut into chunks of `chunk` steps, and
  1. summary: every (sequence, chunk, feature block) program runs its chunk from a zero state and records the
     chunk's composed transition and local end state (skipped when one chunk covers every sequence);
  2. carry: one program per (sequence, feature block) walks the chunk summaries in order and writes the true
     state entering every chunk (num_chunks sequential steps);
  3. apply: every (sequence, chunk, feature block) program re-runs its chunk from the true incoming state and
     writes the states; the program holding a sequence's last chunk writes its final state.
The reverse-time (adjoint) pass for gradients is the same schedule with time reversed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .checks import resolve_chunk_size

# Input dtypes the kernels accept (they load, convert to float32 and accumulate in float32).
REAL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kernel_chunk_size(steps: int) -> int:
    """The time chunk of every Triton scan when none is given: the power of two at or above round(sqrt(T)), clamped to
    [16, 128]. The torch scans use ``checks.default_chunk_size`` (the power of two nearest sqrt(T) in log scale)
    instead; the kernels need their own rule because a program runs its chunk's steps on chip:

    - at least 16: a shorter chunk launches programs that each do almost nothing, and a sequence of up to 16 steps
      is then one chunk, with no summary or carry pass at all;
    - rounded up: fewer chunks, a shorter sequential carry loop (one program per sequence and head);
    - at most 128: past that the per-program loop only grows, while the (sequence, chunk, head) grid has programs
      enough to fill the GPU.

    The chunk changes only the order of the float additions, not what is computed."""
    return min(128, max(16, next_pow2(round(math.sqrt(max(steps, 1))))))


@dataclass
class Layout:
    """Flat token layout of a (B, T, ...) input: cu int32 (B + 1,) row boundaries on the device."""

    cu: torch.Tensor
    batch: int
    steps: int

    @property
    def total(self) -> int:
        return self.batch * self.steps

    def chunks(self, chunk: int) -> int:
        return max(1, cdiv(self.steps, chunk))


def make_layout(batch: int, steps: int, device, name: str = "input") -> Layout:
    """Layout of a (B, T, ...) input."""
    if steps < 1:
        raise ValueError(f"the scan needs at least one time step (T >= 1), got {name} with T = {steps}")
    cu = torch.arange(0, (batch + 1) * steps, steps, dtype=torch.int32, device=device)
    return Layout(cu, batch, steps)


def schedule(t: torch.Tensor, name: str, chunk_size: int | None) -> tuple[Layout, int]:
    """The flat layout of a (B, T, ...) input `t` (called `name` in errors) and the time chunk of its schedule:
    chunk_size, or ``kernel_chunk_size(T)`` when None."""
    layout = make_layout(t.shape[0], t.shape[1], t.device, name)
    return layout, resolve_chunk_size(chunk_size, layout.steps, kernel_chunk_size)


def check_float_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in REAL_DTYPES:
        raise TypeError(
            f"the Triton scans take float32 / bfloat16 / float16 (complex64 for complex) {name}, got {t.dtype}; "
            "use scan_backend='torch' for other dtypes"
        )


def as_real_pairs(name: str, t: torch.Tensor) -> torch.Tensor:
    """A complex64 tensor as its (..., 2) float32 view; a real tensor whose last axis is 2 as itself."""
    if t.is_complex():
        if t.dtype != torch.complex64:
            raise TypeError(f"{name} must be complex64 for the Triton scans, got {t.dtype}")
        return torch.view_as_real(t.resolve_conj())
    if t.shape[-1] != 2:
        raise ValueError(f"{name} must be complex, or real with a last axis of 2 (real, imag); got {tuple(t.shape)}")
    check_float_dtype(name, t)
    return t


def keep_flags(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, T) bool mask -> the flat (B*T,) int32 keep flags the kernels read (None when there is no mask)."""
    return None if mask is None else mask.reshape(-1).to(torch.int32).contiguous()


def upstream_grads(grad_states, grad_final, states: torch.Tensor):
    """The gradients of a scan's outputs as the reverse pass reads them: grad_states in the flat float32 layout of
    `states` (zeros where autograd passes None) and grad_final float32 (None stays None), both contiguous."""
    if grad_states is None:
        g = torch.zeros_like(states)
    else:
        g = grad_states.reshape(states.shape).to(torch.float32).contiguous()
    return g, None if grad_final is None else grad_final.to(torch.float32).contiguous()


def single_chunk_starts(init: torch.Tensor | None, shape, device) -> torch.Tensor:
    """The state entering every row when one chunk covers it (no summary / carry pass): init as float32, or zeros
    of (B, *state) `shape`."""
    if init is not None:
        return init.to(torch.float32).contiguous()
    return torch.zeros(*shape, dtype=torch.float32, device=device)


def grid_dim(n: int) -> int:
    """Grid axes 1 and 2 are limited to 65535 programs on CUDA."""
    if n > 65535:
        raise ValueError(f"too many feature blocks for one launch ({n}); split the call")
    return n


def on_tensor_device(fn):
    """Launch on the GPU that holds the first argument (Triton launches on the current CUDA device)."""

    @functools.wraps(fn)
    def wrapper(first, *args, **kwargs):
        if first.is_cuda and first.device != torch.device("cuda", torch.cuda.current_device()):
            with torch.cuda.device(first.device):
                return fn(first, *args, **kwargs)
        return fn(first, *args, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------------------------------------------
# on-chip schedule arithmetic, shared by the summary / carry / apply kernels of every family (inlined by triton)


@triton.jit
def chunk_program(cu_ptr, L, max_chunks):
    """This program's chunk: grid axis 0 is row * max_chunks + chunk. Returns (pid, row, chunk, the row's first
    token start and end, the chunk's first token t0 and its number of steps, 0 for a chunk past the row's end)."""
    pid = tl.program_id(0)
    seq = pid // max_chunks
    c = pid % max_chunks
    start = tl.load(cu_ptr + seq)
    end = tl.load(cu_ptr + seq + 1)
    t0 = start + c * L
    steps = tl.minimum(tl.maximum(end - t0, 0), L)
    return pid, seq, c, start, end, t0, steps


@triton.jit
def step_token(t0, steps, s, REVERSE: tl.constexpr):
    """Token of the s-th step of a chunk: from its first token forward, from its last in reverse."""
    if REVERSE:
        return t0 + steps - 1 - s
    else:
        return t0 + s


@triton.jit
def carry_chunk(i, max_chunks, REVERSE: tl.constexpr):
    """The i-th chunk the carry pass visits: first to last forward, last to first in reverse."""
    if REVERSE:
        return max_chunks - 1 - i
    else:
        return i


@triton.jit
def final_chunk(start, end, L, REVERSE: tl.constexpr):
    """The chunk whose program writes the row's final state (forward) / gradient of x0 (reverse): the row's last
    chunk forward, its first in reverse."""
    if REVERSE:
        return 0
    else:
        return tl.maximum(tl.cdiv(end - start, L) - 1, 0)


__all__ = [
    "Layout",
    "as_real_pairs",
    "carry_chunk",
    "cdiv",
    "check_float_dtype",
    "chunk_program",
    "final_chunk",
    "grid_dim",
    "keep_flags",
    "kernel_chunk_size",
    "make_layout",
    "next_pow2",
    "on_tensor_device",
    "schedule",
    "single_chunk_starts",
    "step_token",
    "upstream_grads",
]
