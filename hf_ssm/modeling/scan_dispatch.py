"""Which implementation runs a scan: the Triton kernels of ``hf_ssm.kernels`` or the PyTorch scans of this folder.

The setting is the config's ``scan_backend`` (``"auto"``, ``"torch"`` or ``"triton"``); a non-empty environment
variable ``HF_SSM_SCAN_BACKEND`` overrides it. It is resolved at every call from the tensors' device:

- ``"torch"``: always the PyTorch scans (``scan_pd``, ``scan_block``, ``scan_diag``), the references;
- ``"auto"``: the Triton kernels on CUDA tensors when triton imports and the dtype is supported, else torch;
- ``"triton"``: the Triton kernels, or a RuntimeError saying why they cannot run (no hf_ssm / triton, CPU tensors
  without ``TRITON_INTERPRET=1`` set before triton was imported, another device) or a ValueError for an unsupported
  input (float64, blocks larger than 8).

This file belongs to the portable modeling code (copied next to checkpoints for trust_remote_code): the kernels are
imported lazily inside a try block, so a checkpoint still loads, on the torch scans, where hf_ssm or triton is
missing.

Every function also takes packed variable-length input, ``cu_seqlens`` (int32, (num_seqs + 1,)) with tensors
(1, total_T, ...) and per-sequence initial / final states; its torch path (a loop over the sequences) is the
reference of the kernels' variable-length mode.
"""

from __future__ import annotations

import os

import torch

from .configuration_hybrid_ssm import SCAN_BACKENDS
from .scan_block import block_scan as torch_block_scan
from .scan_block import companion_matrices
from .scan_diag import diag_scan as torch_diag_scan
from .scan_diag import diag_scan_adjoint as torch_diag_scan_adjoint
from .scan_diag import diag_scan_forward as torch_diag_scan_forward

ENV_VAR = "HF_SSM_SCAN_BACKEND"
# Largest block size / order of the Triton block scans.
TRITON_MAX_BLOCK = 8
_TRITON_REAL = (torch.float32, torch.bfloat16, torch.float16)

_kernels_cache: list = []  # [(module or None, reason or None)] once loaded


def _load_kernels():
    """(hf_ssm.kernels or None, reason it is unusable or None); imported once, on first need."""
    if not _kernels_cache:
        try:
            from hf_ssm import kernels as module
        except ImportError as exc:
            _kernels_cache.append((None, f"hf_ssm.kernels cannot be imported ({exc})"))
        else:
            reason = None if module.AVAILABLE else module.UNAVAILABLE_REASON
            _kernels_cache.append((module if module.AVAILABLE else None, reason))
    return _kernels_cache[0]


def requested_backend(setting: str | None = None) -> tuple[str, str]:
    """(backend asked for, where it came from): the environment override, else the setting (default "auto")."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        if env.lower() not in SCAN_BACKENDS:
            raise ValueError(f"{ENV_VAR}={env!r} is not a scan backend; accepted: {list(SCAN_BACKENDS)}")
        return env.lower(), f"{ENV_VAR}={env.lower()!r}"
    setting = "auto" if setting is None else setting
    if setting not in SCAN_BACKENDS:
        raise ValueError(f"`scan_backend` must be one of {list(SCAN_BACKENDS)}, got {setting!r}")
    return setting, f"scan_backend={setting!r}"


def triton_status(device: torch.device | str) -> tuple[bool, str | None]:
    """(True, None) when the Triton scans can run on tensors of `device`, else (False, why)."""
    kernels, reason = _load_kernels()
    if kernels is None:
        return False, reason
    return kernels.can_run(device)


def resolve_backend(setting: str | None, device: torch.device | str, unsupported: str | None = None) -> str:
    """The backend ("torch" or "triton") of one call on tensors of `device`.

    unsupported: why these particular inputs cannot go to the kernels (None if they can); "auto" then uses torch,
    "triton" raises a ValueError.
    """
    choice, source = requested_backend(setting)
    if choice == "torch":
        return "torch"
    device = torch.device(device)
    if choice == "auto":
        if device.type != "cuda" or unsupported is not None:
            return "torch"
        return "triton" if triton_status(device)[0] else "torch"
    ok, reason = triton_status(device)
    if not ok:
        raise RuntimeError(
            f"{source} asks for the Triton scans, but they cannot run here: {reason}. "
            "Install them with `pip install hf-ssm[triton]` and use CUDA tensors (or set TRITON_INTERPRET=1 before "
            "importing triton, for the slow CPU interpreter), or set the backend to 'auto' / 'torch'."
        )
    if unsupported is not None:
        raise ValueError(f"{source}: the Triton scans cannot take these inputs: {unsupported}; use 'auto' or 'torch'")
    return "triton"


def _real_dtype_problem(*tensors: torch.Tensor | None) -> str | None:
    for t in tensors:
        if t is not None and t.dtype not in _TRITON_REAL and t.dtype != torch.complex64:
            return f"dtype {t.dtype} (the kernels take float32 / bfloat16 / float16 / complex64)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# packed variable-length input on the torch scans


def _bounds(cu_seqlens: torch.Tensor, total: int) -> list[int]:
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.is_floating_point():
        raise ValueError("cu_seqlens must be a 1-D integer tensor [0, len_0, len_0 + len_1, ..., total_T]")
    bounds = [int(x) for x in cu_seqlens.tolist()]
    if bounds[0] != 0 or bounds[-1] != total or any(e < s for s, e in zip(bounds, bounds[1:])):
        raise ValueError(f"cu_seqlens must start at 0, be non-decreasing and end at total_T = {total}; got {bounds}")
    return bounds


def varlen_torch(scan, cu_seqlens: torch.Tensor, per_step: tuple, x0: torch.Tensor | None, zero_state):
    """Run ``scan(*per_step_slices, x0_i) -> (states (1, L_i, ...), final (1, ...))`` on every packed sequence.

    per_step: tensors (1, total_T, ...) (None entries pass through); x0: (num_seqs, ...) or None; zero_state():
    the (1, ...) state of an empty sequence without x0. Returns (states (1, total_T, ...), finals (num_seqs, ...)).
    """
    first = next(t for t in per_step if t is not None)
    if first.shape[0] != 1:
        raise ValueError(f"with cu_seqlens the input must be packed as (1, total_T, ...), got {tuple(first.shape)}")
    bounds = _bounds(cu_seqlens, first.shape[1])
    if x0 is not None and x0.shape[0] != len(bounds) - 1:
        raise ValueError(f"x0 must hold one state per sequence ({len(bounds) - 1}), got {x0.shape[0]}")
    states, finals = [], []
    for i, (s, e) in enumerate(zip(bounds, bounds[1:])):
        x0_i = None if x0 is None else x0[i : i + 1]
        if e == s:
            finals.append(zero_state() if x0_i is None else x0_i)
            continue
        st, fin = scan(*(None if t is None else t[:, s:e] for t in per_step), x0_i)
        states.append(st)
        finals.append(fin)
    return torch.cat(states, dim=1), torch.cat([f.to(finals[-1].dtype) for f in finals], dim=0)


# ---------------------------------------------------------------------------------------------------------------
# diagonal scan


def diag_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor | None = None,
    *,
    backend: str | None = "auto",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x_t = a_t x_{t-1} + b_t with autograd: (states (B, T, *S), final (B, *S)), see ``scan_diag.diag_scan``."""
    if resolve_backend(backend, a.device, _real_dtype_problem(a, b, x0)) == "triton":
        return _load_kernels()[0].diag_scan(a, b, x0, cu_seqlens=cu_seqlens)
    if cu_seqlens is None:
        return torch_diag_scan(a, b, x0)
    return varlen_torch(torch_diag_scan, cu_seqlens, (a, b), x0, lambda: torch.zeros_like(b[:, 0]))


def diag_scan_forward(
    a: torch.Tensor,
    b: torch.Tensor,
    x0: torch.Tensor | None = None,
    *,
    backend: str | None = "auto",
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """States without autograd (float32 for half inputs), see ``scan_diag.diag_scan_forward``."""
    if resolve_backend(backend, a.device, _real_dtype_problem(a, b, x0)) == "triton":
        return _load_kernels()[0].diag_scan_forward(a, b, x0, cu_seqlens=cu_seqlens)
    if cu_seqlens is None:
        return torch_diag_scan_forward(a, b, x0)

    def scan(a_, b_, x0_):
        states = torch_diag_scan_forward(a_, b_, x0_)
        return states, states[:, -1]

    return varlen_torch(scan, cu_seqlens, (a, b), x0, lambda: torch.zeros_like(b[:, 0]))[0]


def diag_scan_adjoint(
    a: torch.Tensor, g: torch.Tensor, *, backend: str | None = "auto", cu_seqlens: torch.Tensor | None = None
) -> torch.Tensor:
    """lambda_t = g_t + conj(a_{t+1}) lambda_{t+1} within each sequence, no autograd."""
    if resolve_backend(backend, a.device, _real_dtype_problem(a, g)) == "triton":
        return _load_kernels()[0].diag_scan_adjoint(a, g, cu_seqlens=cu_seqlens)
    if cu_seqlens is None:
        return torch_diag_scan_adjoint(a, g)

    def scan(a_, g_, _x0):
        lam = torch_diag_scan_adjoint(a_, g_)
        return lam, lam[:, 0]

    return varlen_torch(scan, cu_seqlens, (a, g), None, lambda: torch.zeros_like(g[:, 0]))[0]


# ---------------------------------------------------------------------------------------------------------------
# block scans


def block_problem(m: int, *tensors) -> str | None:
    if m > TRITON_MAX_BLOCK:
        return f"block size m = {m} (the kernels take m <= {TRITON_MAX_BLOCK})"
    problem = _real_dtype_problem(*tensors)
    if problem is None and any(t is not None and t.is_complex() for t in tensors):
        return "complex blocks"
    return problem


def _masked_blocks(A: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None):
    if mask is None:
        return A, b
    keep = mask.view(*mask.shape, 1, 1)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    zero = torch.zeros((), dtype=b.dtype, device=b.device)
    return torch.where(keep.unsqueeze(-1), A, eye), torch.where(keep, b, zero)


def block_scan(
    A: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    mask: torch.Tensor | None = None,
    backend: str | None = "auto",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """h_t = A_t h_{t-1} + b_t over (B, T, N, m) blocks with autograd, see ``scan_block.block_scan``.

    mask: optional (B, T) bool, a False step is the identity with zero input.
    """
    if resolve_backend(backend, b.device, block_problem(b.shape[-1], A, b, h0)) == "triton":
        return _load_kernels()[0].block_scan(A, b, h0, mask=mask, cu_seqlens=cu_seqlens)
    A, b = _masked_blocks(A, b, mask)
    if cu_seqlens is None:
        return torch_block_scan(A, b, h0)
    return varlen_torch(torch_block_scan, cu_seqlens, (A, b), h0, lambda: torch.zeros_like(b[:, 0]))


def companion_scan(
    a: torch.Tensor,
    v: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    mask: torch.Tensor | None = None,
    backend: str | None = "auto",
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """H-LRU's scan S_t = C(a_t) S_{t-1} + [v_t, 0, ...] from the companion first rows a (B, T, N, m) and the
    slot-0 input v (B, T, N); S = [h_t, ..., h_{t-m+1}] (B, T, N, m). The Triton kernel never builds the m x m
    matrices; the torch path is ``block_scan(companion_matrices(a), pad(v))``."""
    m = a.shape[-1]
    if resolve_backend(backend, v.device, block_problem(m, a, v, h0)) == "triton":
        return _load_kernels()[0].companion_scan(a, v, h0, mask=mask, cu_seqlens=cu_seqlens)
    return block_scan(
        companion_matrices(a),
        torch.nn.functional.pad(v.unsqueeze(-1), (0, m - 1)),
        h0,
        mask=mask,
        backend="torch",
        cu_seqlens=cu_seqlens,
    )


__all__ = [
    "ENV_VAR",
    "SCAN_BACKENDS",
    "block_scan",
    "companion_scan",
    "diag_scan",
    "diag_scan_adjoint",
    "diag_scan_forward",
    "requested_backend",
    "resolve_backend",
    "triton_status",
    "varlen_torch",
]
