"""Step 0 of scripts/gpu_check.sh: check that this environment is the stack the GPU check was prepared for, and
record it. Expected: Python 3.12, torch 2.11 built for CUDA 13, Triton 3.6 (the GPU image's), and transformers >=
5.24 (hf_ssm's floor; the run carries 5.25, the image has 5.17).

    python scripts/gpu_stack.py [--rehearsal 1] [--out stack.json]

Exit status 3 on another stack (GPU_CHECK_ANY_STACK=1: a warning only), naming what differs and what was expected;
0 otherwise. The JSON holds every version, where transformers was imported from, and the carried wheels.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

EXPECTED = {"python": "3.12", "torch": "2.11", "torch_cuda": "13", "triton": "3.6"}
TRANSFORMERS_FLOOR = (5, 24)


def _release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: '2.11.0+cu130' -> (2, 11, 0)."""
    out = []
    for part in version.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _matches(found: str | None, expected: str) -> bool:
    """Whether `found` is release `expected` ('2.11' matches '2.11.0+cu130', not '2.12.0')."""
    want = _release(expected)
    return found is not None and _release(found)[: len(want)] == want


def stack() -> dict:
    """The versions that matter to the GPU check, read from what this interpreter imports."""
    import huggingface_hub
    import numpy
    import torch
    import transformers
    import triton

    wheels = sorted(Path(".whl").glob("*.whl"))
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton.__version__,
        "transformers": transformers.__version__,
        "transformers_from": str(Path(transformers.__file__).parent),
        "huggingface_hub": huggingface_hub.__version__,
        "numpy": numpy.__version__,
        "cuda_available": torch.cuda.is_available(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "carried_wheels": [w.name for w in wheels],
        "carried_bytes": sum(w.stat().st_size for w in wheels),
    }


def differences(found: dict) -> list[str]:
    """What differs from the expected stack, one line each."""
    out = [
        f"{name} {found[name]} (expected {want}.x)"
        for name, want in EXPECTED.items()
        if not _matches(found[name], want)
    ]
    if _release(found["transformers"])[:2] < TRANSFORMERS_FLOOR:
        out.append(
            f"transformers {found['transformers']} from {found['transformers_from']} (hf_ssm needs >= 5.24: carry the "
            "wheels, `bash scripts/gpu_wheels.sh` here, then name .whl in the run's carry)"
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rehearsal", default="0", help="1: a CPU rehearsal (recorded in the JSON)")
    parser.add_argument("--out", default=None, help="write the stack here as JSON")
    args = parser.parse_args(argv)
    found = {**stack(), "rehearsal": args.rehearsal == "1"}
    for key, value in found.items():
        if key != "carried_wheels":
            print(f"{key}: {value}")
    problems = differences(found)
    if args.out:
        Path(args.out).write_text(json.dumps({**found, "problems": problems}, indent=1) + "\n")
    if not problems:
        print("the expected stack")
        return 0
    for p in problems:
        print(f"gpu_stack: not the expected stack: {p}", file=sys.stderr)
    if os.environ.get("GPU_CHECK_ANY_STACK") == "1":
        print("gpu_stack: GPU_CHECK_ANY_STACK=1: going on anyway", file=sys.stderr)
        return 0
    return 3


if __name__ == "__main__":
    sys.exit(main())
