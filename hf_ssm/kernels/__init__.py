"""Triton kernels for the hf_ssm scans, one module per scan family (docs/design.md §2, §9).

- ``pd_scan``: PD transitions x_t = P_t D_t x_{t-1} + b_t, plus ``pd_generated_scan`` (P generation fused in, no
  (T, N, N) tensor stored for its backward), ``pd_bank_scan`` (the bank transition mode: selection argmax and
  bank gather inside the scan) and ``pd_select``;
- ``block_scan`` / ``companion_scan``: dense m x m blocks (BD-LRU, diag_lru with m = 1, the LSTM's DEER step) and
  companion blocks (H-LRU), m <= 8;
- ``diag_scan``: real or complex diagonal scans (the DEER steps of the lrc / gru / mgu mixers).

Each is a ``torch.autograd.Function`` whose torch twin in ``hf_ssm.modeling`` is the reference, and checks its
shapes, mask and chunk size with the checks it shares with that twin (``hf_ssm.modeling.scan_common``), so both
backends accept and refuse the same calls; each takes a (B, T, ...) batch with initial / final states and an
optional (B, T) mask (no ``cu_seqlens``: packed documents run one per row, docs/design.md §7.5). The model reaches
every one of them through ``hf_ssm.modeling.scan_dispatch.scan_ops`` (``scan_backend`` in the config, or
``HF_SSM_SCAN_BACKEND``), which also takes the T = 1 decoding step on torch for every family. The kernels import from
``hf_ssm.modeling`` only two torch-level leaf modules that import nothing back (scan_common, pd_bank). A kernel
module and its torch twin share one name: ``hf_ssm.kernels.pd_scan`` and ``hf_ssm.modeling.pd_scan``, and so on.

On CPU the kernels run only under the Triton interpreter: set ``TRITON_INTERPRET=1`` before this package (and
triton) is imported. Importing this package never fails for a missing triton: ``AVAILABLE`` is False then and
``UNAVAILABLE_REASON`` says why.
"""

from __future__ import annotations

import torch

AVAILABLE = False
INTERPRET = False
UNAVAILABLE_REASON: str | None = None

try:
    import triton  # noqa: F401
except Exception as exc:  # ImportError, or a broken install raising something else
    UNAVAILABLE_REASON = f"triton cannot be imported ({type(exc).__name__}: {exc})"
else:
    from .block_scan import MAX_BLOCK, block_scan, companion_scan
    from .diag_scan import _diag_apply_kernel, diag_scan
    from .pd_scan import ONEHOT_MAX_N, pd_bank_scan, pd_generated_scan, pd_scan, pd_select

    AVAILABLE = True
    # whether triton.jit gave interpreted functions (TRITON_INTERPRET=1 when these modules were imported)
    INTERPRET = type(_diag_apply_kernel).__name__ == "InterpretedFunction"


def can_run(device: torch.device | str) -> tuple[bool, str | None]:
    """(True, None) when the kernels can run on tensors of `device`, else (False, the reason)."""
    device = torch.device(device)
    if not AVAILABLE:
        return False, UNAVAILABLE_REASON
    if INTERPRET:
        return True, None
    if device.type == "cuda":
        return True, None
    if device.type == "cpu":
        return False, (
            "the tensors are on the CPU, where Triton runs only in its interpreter, and TRITON_INTERPRET=1 was not "
            "set before triton / hf_ssm.kernels was imported"
        )
    return False, f"the Triton scans run on CUDA devices (or the CPU interpreter), not on {device.type!r}"


__all__ = ["AVAILABLE", "INTERPRET", "UNAVAILABLE_REASON", "can_run"]
if AVAILABLE:
    __all__ += [
        "MAX_BLOCK",
        "ONEHOT_MAX_N",
        "block_scan",
        "companion_scan",
        "diag_scan",
        "pd_bank_scan",
        "pd_generated_scan",
        "pd_scan",
        "pd_select",
    ]
