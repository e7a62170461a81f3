"""What every Triton scan shares: packed variable-length layout, chunking, dtype rules, launch helpers.

Every scan here runs on a *packed* token axis: the input (B, T, ...) of a batched call is flattened to (B*T, ...)
with sequence boundaries cu_seqlens = [0, T, 2T, ..., B*T]; a variable-length call passes (1, total, ...) and its
own cu_seqlens (int32, (num_seqs + 1,), FlashAttention convention). The state is reset at every sequence start
(to that sequence's initial state, or zero) and one final state per sequence is returned.

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
import os
from dataclasses import dataclass

import torch

# Whether the kernels run under the Triton interpreter: decided once, when triton is imported (it reads the
# variable then), so this records the value at import time rather than reading the environment later.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Input dtypes the kernels accept (they load, convert to float32 and accumulate in float32).
REAL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 2 ** math.ceil(math.log2(n))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def default_chunk_size(max_len: int) -> int:
    """A power of two near sqrt(T), clamped to [16, 128]: enough chunks to fill the GPU, short carry loop."""
    return min(128, max(16, next_pow2(round(math.sqrt(max(max_len, 1))))))


@dataclass
class Layout:
    """Packed token layout. cu: int32 (num_seqs + 1,) on the device; batch/steps: the caller's leading shape."""

    cu: torch.Tensor
    num_seqs: int
    max_len: int
    total: int
    batch: int
    steps: int
    varlen: bool

    def chunks(self, chunk: int) -> int:
        return max(1, cdiv(self.max_len, chunk))


def make_layout(batch: int, steps: int, device, cu_seqlens: torch.Tensor | None, name: str = "input") -> Layout:
    """Layout of a (B, T, ...) input, or of a packed (1, total, ...) input with cu_seqlens."""
    if cu_seqlens is None:
        if steps < 1:
            raise ValueError(f"the scan needs at least one time step (T >= 1), got {name} with T = {steps}")
        cu = torch.arange(0, (batch + 1) * steps, steps, dtype=torch.int32, device=device)
        return Layout(cu, batch, steps, batch * steps, batch, steps, False)
    if batch != 1:
        raise ValueError(f"with cu_seqlens, {name} must be packed as (1, total_T, ...), got a batch of {batch}")
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError("cu_seqlens must be a 1-D integer tensor [0, len_0, len_0 + len_1, ..., total_T]")
    if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.is_floating_point():
        raise TypeError(f"cu_seqlens must be int32 (or int64), got {cu_seqlens.dtype}")
    host = cu_seqlens.detach().to("cpu", torch.int64)
    lengths = host[1:] - host[:-1]
    if int(host[0]) != 0 or int(host[-1]) != steps or bool((lengths < 0).any()):
        raise ValueError(
            f"cu_seqlens must start at 0, be non-decreasing and end at total_T = {steps}; got {host.tolist()}"
        )
    cu = cu_seqlens.to(device=device, dtype=torch.int32).contiguous()
    return Layout(cu, len(lengths), int(lengths.max()), steps, 1, steps, True)


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


__all__ = [
    "INTERPRET",
    "Layout",
    "as_real_pairs",
    "cdiv",
    "check_float_dtype",
    "default_chunk_size",
    "grid_dim",
    "make_layout",
    "next_pow2",
    "on_tensor_device",
]
