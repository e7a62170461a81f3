"""The one dispatch of the op families: which implementation runs a scan, the Triton kernels (each family's
``triton.py``, gathered in ``hf_ssm.ops.kernels``) or the parallel torch scans (each family's ``parallel.py``).

The setting is the config's ``scan_backend`` (``"auto"``, ``"torch"`` or ``"triton"``); a non-empty environment
variable ``HF_SSM_SCAN_BACKEND`` overrides it. With the tensors' device it gives the backend:

- ``"torch"``: always the PyTorch scans (hf_ssm.ops.pd, .block, .diag);
- ``"auto"``: the Triton kernels on CUDA tensors when triton imports and the dtype is supported, else torch;
- ``"triton"``: the Triton kernels, or a RuntimeError saying why they cannot run (no hf_ssm / triton, CPU tensors
  without ``TRITON_INTERPRET=1`` set before triton was imported, another device) or a ValueError for an unsupported
  input (float64, blocks larger than 8).

This file travels with the portable modeling code (flattened next to checkpoints for trust_remote_code, see
hf_ssm/modeling/portable.py): the kernels are imported lazily inside a try block, the one import of the Triton side
from the torch side, so a checkpoint still loads, on the torch scans, where hf_ssm or triton is missing.

Every scan family is reached through one ``ScanOps``, bound once per (setting, device) by ``scan_ops``: the block /
companion and diagonal scans, and the PD-SSM ops (the dictionary and bank transitions generated inside the op, and
the scan of given PD transitions). A mixer asks for its op, computes the op's inputs, calls it and projects; padding
(the identity transition) and the T = 1 decoding step live inside the ops.

The ops take rectangular (B, T, ...) batches only, no ``cu_seqlens``: the model runs packed documents by
re-gathering them one document per row (hf_ssm/modeling/packing.py, docs/design.md §7.5), which serves every mixer,
the DEER ones included, with a single code path.
"""

from __future__ import annotations

import os

import torch

from .block.parallel import block_scan as torch_block_scan
from .block.parallel import block_step as torch_block_step
from .block.parallel import companion_scan as torch_companion_scan
from .block.parallel import companion_step as torch_companion_step
from .checks import SCAN_BACKENDS, check_generated_inputs
from .diag.parallel import diag_scan as torch_diag_scan
from .diag.parallel import diag_step as torch_diag_step
from .pd.generated import BANK_OP, DICTIONARY_OP, GeneratedOp
from .pd.parallel import as_complex, is_decode_step, pd_step
from .pd.parallel import pd_scan as torch_pd_scan

ENV_VAR = "HF_SSM_SCAN_BACKEND"
# Largest block size / order of the Triton block scans.
TRITON_MAX_BLOCK = 8
_TRITON_REAL = (torch.float32, torch.bfloat16, torch.float16)

_kernels_cache: list = []  # [(module or None, reason or None)] once loaded


def _load_kernels():
    """(hf_ssm.ops.kernels or None, reason it is unusable or None); imported once, on first need. Absolute and
    inside a try block: the flattened copy next to a checkpoint reaches the installed package's kernels, and runs on
    torch where hf_ssm or triton is missing."""
    if not _kernels_cache:
        try:
            import hf_ssm.ops.kernels as module
        except ImportError as exc:
            _kernels_cache.append((None, f"hf_ssm.ops.kernels cannot be imported ({exc})"))
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


def kernel_dtype_problem(*tensors: torch.Tensor | None) -> str | None:
    """Why the Triton kernels (every family) cannot take these tensors' dtypes, or None."""
    for t in tensors:
        if t is not None and t.dtype not in _TRITON_REAL and t.dtype != torch.complex64:
            return f"dtype {t.dtype} (the kernels take float32 / bfloat16 / float16 / complex64)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# block / companion and diagonal scans: one op per family, bound once per (backend, device)


def _kernel_problem(m: int | None, *tensors: torch.Tensor | None) -> str | None:
    """Why the Triton block / diagonal scans cannot take these inputs (None if they can); m: block size, None for
    the diagonal scan."""
    if m is not None and m > TRITON_MAX_BLOCK:
        return f"block size m = {m} (the kernels take m <= {TRITON_MAX_BLOCK})"
    problem = kernel_dtype_problem(*tensors)
    if problem is None and m is not None and any(t is not None and t.is_complex() for t in tensors):
        return "complex blocks"
    return problem


class ScanOps:
    """The scan ops of one backend on one device, every family; build it with ``scan_ops``.

    Every op has one signature, ``op(inputs..., initial_state=None, mask=None) -> (states, final_state)`` with autograd:

    - ``block_scan(A (B, T, N, m, m), b (B, T, N, m), initial_state (B, N, m))``: BD-LRU, diag_lru, LSTM DEER;
    - ``companion_scan(a (B, T, N, m), v (B, T, N), initial_state (B, N, m))``: H-LRU;
    - ``diag_scan(a (B, T, *S), b (B, T, *S), initial_state (B, *S))``: the DEER linear steps;
    - ``pd_dictionary_scan(selection (B, T, H, K), dictionary (H, K, N, N), dv, b (B, T, H, N), initial_state
      (B, H, N), mask, temperature)`` and ``pd_bank_scan(logits (B, T, H, K), scores (H, K, N, N), ...)``: PD-SSM
      with P_t generated inside the op, straight-through (pd/generated.py); both are ``pd_generated(op, ...)`` with
      the op (DICTIONARY_OP / BANK_OP) that a transition mode holds (hf_ssm/modeling/pd_transitions.py);
    - ``pd_scan(idx (B, T, H, N), dv, b (B, T, H, N), initial_state (B, H, N), p_soft (B, T, H, N, N))``: PD
      transitions given as indices (PD-SSM's direct transition); the caller applies its padding (identity idx,
      dv = 1, b = 0); p_soft, optional, receives the straight-through gradient of P_t.

    The PD states are complex64 (dv, b, initial_state complex or real (..., 2) pairs).

    mask (B, T) bool: a False step (padding) is the identity transition with zero input. T = 1 (decoding) is one
    O(state) update on either backend, never the chunked machinery (for the PD ops: a step where no input needs a
    gradient, ``pd.parallel.is_decode_step``). Every method has the name of its op in the family's three
    implementations (``hf_ssm.ops.<family>.reference / parallel / triton``); on the Triton backend an input the
    kernels cannot take (float64, m > 8) runs on torch where the setting is "auto" and raises a ValueError where it
    is "triton".
    """

    def __init__(self, backend: str, source: str, strict: bool):
        self.backend, self.source, self.strict = backend, source, strict
        self._kernels = _load_kernels()[0] if backend == "triton" else None

    def __repr__(self) -> str:
        return f"ScanOps(backend={self.backend!r}, from {self.source})"

    def _use_kernels(self, m: int | None, *tensors) -> bool:
        if self._kernels is None:
            return False
        problem = _kernel_problem(m, *tensors)
        if problem is not None and self.strict:
            raise ValueError(
                f"{self.source}: the Triton scans cannot take these inputs: {problem}; use 'auto' or 'torch'"
            )
        return problem is None

    def _dispatch(self, kernel_op: str, torch_step, torch_scan, m: int | None, x, y, initial_state, mask):
        """The one rule of every op: T = 1 (decoding) is the torch single step on either backend; otherwise the
        kernel `kernel_op` where this backend has the kernels and they take these inputs, else the torch scan."""
        with _no_autocast(y):  # the scans and states stay in float32, also under autocast
            if y.dim() >= 2 and y.shape[1] == 1:
                return torch_step(x, y, initial_state, mask)
            if self._use_kernels(m, x, y, initial_state):
                return getattr(self._kernels, kernel_op)(x, y, initial_state, mask)
            return torch_scan(x, y, initial_state, mask)

    def block_scan(self, A, b, initial_state=None, mask=None):
        return self._dispatch("block_scan", torch_block_step, torch_block_scan, b.shape[-1], A, b, initial_state, mask)

    def companion_scan(self, a, v, initial_state=None, mask=None):
        m = a.shape[-1]
        return self._dispatch(
            "companion_scan", torch_companion_step, torch_companion_scan, m, a, v, initial_state, mask
        )

    def diag_scan(self, a, b, initial_state=None, mask=None):
        return self._dispatch("diag_scan", torch_diag_step, torch_diag_scan, None, a, b, initial_state, mask)

    # PD-SSM. The ops take care of their own autocast (the generated ops compute in float32 / complex64).

    def pd_dictionary_scan(self, selection, dictionary, dv, b, initial_state=None, mask=None, temperature=1.0):
        return self.pd_generated(DICTIONARY_OP, selection, dictionary, dv, b, initial_state, mask, temperature)

    def pd_bank_scan(self, logits, scores, dv, b, initial_state=None, mask=None, temperature=1.0):
        return self.pd_generated(BANK_OP, logits, scores, dv, b, initial_state, mask, temperature)

    def pd_generated(self, op: GeneratedOp, selection, matrices, dv, b, initial_state=None, mask=None, temperature=1.0):
        """The rule of the generated PD ops (`op`: DICTIONARY_OP or BANK_OP): check the inputs; T = 1 without
        gradient (decoding) is the op's one torch step on either backend; otherwise its kernel where this backend
        has the kernels and they take these inputs, else its torch op."""
        check_generated_inputs(op.name, selection, matrices, dv, b, initial_state, mask, temperature)
        if is_decode_step(selection.shape[1], selection, matrices, dv, b, initial_state):
            return op.step(selection, matrices, dv, b, initial_state, mask)
        if self._use_kernels(None, selection, matrices, dv, b, initial_state):
            return getattr(self._kernels, op.kernel)(selection, matrices, dv, b, initial_state, mask, temperature)
        return op.torch_op(selection, matrices, dv, b, initial_state, mask, temperature)

    def pd_scan(self, idx, dv, b, initial_state=None, p_soft=None):
        """The scan of given PD transitions, with the same T = 1 rule as the generated ops."""
        if is_decode_step(idx.shape[1], dv, b, initial_state, p_soft):
            return pd_step(idx[:, 0], dv, b, initial_state)
        if self._use_kernels(None, dv):
            return self._kernels.pd_scan(idx, dv, b, initial_state, p_soft)
        return torch_pd_scan(idx, as_complex(dv), as_complex(b), as_complex(initial_state), p_soft)


def _no_autocast(t: torch.Tensor):
    return torch.autocast(device_type=t.device.type, enabled=False)


_bound_ops: dict = {}


def scan_ops(setting: str | None, device: torch.device | str) -> ScanOps:
    """The ScanOps of `setting` ("auto" / "torch" / "triton", overridden by HF_SSM_SCAN_BACKEND) on `device`.

    The backend is resolved once per (setting, device) and the result kept: a mixer calls this at every forward
    for the price of a dictionary lookup. A "triton" setting where the kernels cannot run raises a RuntimeError.
    """
    choice, source = requested_backend(setting)
    device = torch.device(device)
    key = (choice, source, device)
    ops = _bound_ops.get(key)
    if ops is None:
        ops = ScanOps(resolve_backend(choice, device), source, strict=choice == "triton")
        _bound_ops[key] = ops
    return ops


__all__ = [
    "ENV_VAR",
    "SCAN_BACKENDS",
    "ScanOps",
    "kernel_dtype_problem",
    "requested_backend",
    "resolve_backend",
    "scan_ops",
    "triton_status",
]
