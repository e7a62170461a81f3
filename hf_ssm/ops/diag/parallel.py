"""The diagonal family in parallel torch (docs/design.md §3): the torch implementation of ``diag_scan``
(hf_ssm.ops.diag, where its contract is written once), its adjoint, and its T = 1 decoding step.

- ``diag_scan``: chunked parallel scan with a hand-written backward (the adjoint recurrence); half / bfloat16
  inputs are accumulated in float32 and the result is cast back to the inputs' dtype.
- ``diag_scan_adjoint``: the reverse-time recurrence of its backward (and of DEER's implicit gradient).
- ``diag_step``: one time step (T = 1, decoding).

The parallel form never divides: cumulative transitions are plain cumulative products inside a chunk, so a_t
= 0 or a_t < 0 is as safe as any other value (a log-space cumsum would need log|a| and a sign count, and breaks
at a_t = 0).
"""

from __future__ import annotations

import torch

from ..checks import (
    check_diag_inputs,
    into,
    mask_steps,
    previous_states,
    resolve_chunk_size,
    state_gradients,
    step_where_kept,
)
from ..checks import default_chunk_size as sqrt_chunk_size

# Inner chunk length cap: each level of the chunked scan is a loop of `chunk` steps over all chunks at once,
# then the chunk-start states are themselves a diagonal scan of length T / chunk (solved recursively), so the
# sequential depth is about chunk * log_chunk(T).
MAX_CHUNK = 64


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def default_chunk_size(steps: int) -> int:
    """A power of two near sqrt(T), at most MAX_CHUNK (longer sequences recurse instead)."""
    return min(MAX_CHUNK, sqrt_chunk_size(steps))


def _scan_loop(a: torch.Tensor, b: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """Plain loop without autograd, writing into one buffer: states (B, T, *S)."""
    out = torch.empty_like(b)
    x = x0
    for t in range(a.shape[1]):
        x = into(out[:, t], torch.addcmul, b[:, t], a[:, t], x)
    return out


def _scan_chunked(a: torch.Tensor, b: torch.Tensor, x0: torch.Tensor, chunk: int | None) -> torch.Tensor:
    """x_t = a_t x_{t-1} + b_t along dim 1, no autograd. Returns states (B, T, *S).

    1. inside each chunk (all chunks at once): local states from a zero start, and the cumulative product of a
       from the chunk start (a running product, safe for zero / negative a);
    2. the true state at every chunk start: a diagonal scan of length T / chunk over (cum_last, local_last),
       solved by the same function (recursion) or a loop when short;
    3. fix-up: x = cum * x_start + local, one elementwise pass over the whole sequence.
    """
    batch, steps = a.shape[:2]
    chunk = default_chunk_size(steps) if chunk is None else chunk
    if chunk <= 1 or steps <= chunk:
        return _scan_loop(a, b, x0)
    chunks = -(-steps // chunk)
    pad = chunks * chunk - steps
    if pad:  # identity transitions, zero inputs
        a = torch.cat([a, a.new_ones((batch, pad, *a.shape[2:]))], dim=1)
        b = torch.cat([b, b.new_zeros((batch, pad, *b.shape[2:]))], dim=1)
    a = a.reshape(batch, chunks, chunk, *a.shape[2:])
    b = b.reshape(batch, chunks, chunk, *b.shape[2:])

    # Written straight into one buffer: no per-step temporaries (on CPU a fresh tensor costs more than the math).
    local = torch.empty_like(b)
    local[:, :, 0] = b[:, :, 0]
    for step in range(1, chunk):
        into(local[:, :, step], torch.addcmul, b[:, :, step], a[:, :, step], local[:, :, step - 1])
    cum = torch.cumprod(a, dim=2)

    # Chunk-start states: s_0 = x0, s_{c+1} = cum_last_c * s_c + local_last_c.
    ends = _scan_chunked(cum[:, :, -1], local[:, :, -1], x0, None)  # state at the end of every chunk
    starts = torch.cat([x0.unsqueeze(1), ends[:, :-1]], dim=1).unsqueeze(2)  # (B, C, 1, *S)
    states = local.addcmul_(cum, starts)
    return states.reshape(batch, chunks * chunk, *states.shape[3:])[:, :steps]


def diag_scan_adjoint(a: torch.Tensor, g: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Reverse-time recurrence lambda_t = g_t + conj(a_{t+1}) * lambda_{t+1}, lambda_{T-1} = g_{T-1}.

    This is dL/dx_t when x_t = a_t x_{t-1} + b_t and g_t = dL/dx_t taken directly (the backward of every
    diagonal scan, and the adjoint step of DEER's implicit gradient). a, g: (B, T, *S); returns (B, T, *S).
    """
    # Run forward in reversed time: coefficient at reversed position s >= 1 is conj(a_{T-s}).
    coef = torch.cat([torch.ones_like(a[:, :1]), a[:, 1:].flip(1).conj()], dim=1)
    with torch.no_grad():
        return _scan_chunked(coef, g.flip(1), torch.zeros_like(g[:, 0]), chunk_size).flip(1)


class _DiagScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, x0, chunk):
        states = _scan_chunked(a, b, x0, chunk)
        ctx.save_for_backward(a, x0, states)
        ctx.chunk = chunk
        return states, states[:, -1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_final):
        a, x0, states = ctx.saved_tensors
        lam = diag_scan_adjoint(a, state_gradients(grad_states, grad_final, states), ctx.chunk)
        x_prev = previous_states(x0, states)
        # PyTorch's complex convention: for y = a x, grad_a = grad_y * conj(x), grad_x = grad_y * conj(a).
        grad_a = lam * x_prev.conj()
        grad_x0 = lam[:, 0] * a[:, 0].conj()
        return grad_a, lam, grad_x0, None


def diag_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hf_ssm.ops.diag.diag_scan`` as a chunked parallel scan, any real or complex dtype. chunk_size: inner chunk
    length, ``default_chunk_size(T)`` if None."""
    check_diag_inputs(a, b, initial_state, mask)
    if chunk_size is not None:
        chunk_size = resolve_chunk_size(chunk_size, a.shape[1])
    in_dtype = a.dtype
    dtype = _accumulation_dtype(in_dtype)
    a, b = mask_steps(a, b, mask)
    x0 = torch.zeros_like(b[:, 0]) if initial_state is None else initial_state
    states, final = _DiagScanFunction.apply(a.to(dtype), b.to(dtype), x0.to(dtype), chunk_size)
    return states.to(in_dtype), final.to(in_dtype)


def diag_step(
    a: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``diag_scan`` for T = 1 (decoding): the single update x = a_0 x0 + b_0, no chunk machinery."""
    check_diag_inputs(a, b, initial_state, mask)
    if a.shape[1] != 1:
        raise ValueError(f"diag_step takes one time step (T = 1), got T = {a.shape[1]}")
    x0 = torch.zeros_like(b[:, 0]) if initial_state is None else initial_state
    new = step_where_kept(mask, a[:, 0] * x0 + b[:, 0], x0)
    return new.unsqueeze(1), new


__all__ = [
    "default_chunk_size",
    "diag_scan",
    "diag_scan_adjoint",
    "diag_step",
]
