"""The Triton backend: every family's kernels by op name, when triton imports (docs/design.md §2, §9).

- ``pd_scan``, ``pd_dictionary_scan``, ``pd_bank_scan`` (and ``pd_select``): hf_ssm/ops/pd/triton.py;
- ``block_scan`` / ``companion_scan``: dense m x m blocks and companion blocks, m <= 8: hf_ssm/ops/block/triton.py;
- ``diag_scan``: real or complex diagonal scans: hf_ssm/ops/diag/triton.py.

Each kernel has the name, the signature and the input checks of its op in the family's other implementations (the
plain ``reference`` and the ``parallel`` torch scan beside it, contract in the family's ``__init__``), plus the
kernels' own dtype rules; each takes a (B, T, ...) batch with initial / final states and an optional (B, T) mask
(no ``cu_seqlens``: packed documents run one per row, docs/design.md §7.5). The model reaches every one of them
through ``hf_ssm.ops.dispatch.scan_ops`` (``scan_backend`` in the config, or ``HF_SSM_SCAN_BACKEND``), whose lazy
import of this module is the one arrow from the torch side to the Triton side. Nothing here imports hf_ssm.modeling.

On CPU the kernels run only under the Triton interpreter: set ``TRITON_INTERPRET=1`` before this module (and
triton) is imported. Importing this module never fails for a missing triton: ``AVAILABLE`` is False then and
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
    from .block.triton import MAX_BLOCK, block_scan, companion_scan
    from .diag.triton import _diag_apply_kernel, diag_scan
    from .pd.triton import ONEHOT_MAX_N, pd_bank_scan, pd_dictionary_scan, pd_scan, pd_select

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
            "set before triton / hf_ssm.ops.kernels was imported"
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
        "pd_dictionary_scan",
        "pd_scan",
        "pd_select",
    ]
