"""What the compiled kernels need of an sm_90 SM (hf_ssm/ops/compile_check.py): ptxas's report is read right,
the occupancy follows CUDA's rules for compute capability 9.0, a spilling or unlaunchable variant is refused, and
every kernel of the package compiles for sm_90 without a GPU with no spill and at least one resident block an SM.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from op_checks import KERNEL_MARKS

from hf_ssm.ops import compile_check

pytestmark = KERNEL_MARKS

# ptxas's verbose report as Triton 3.9 prints it (its sm_90 ptxas is called ptxas-blackwell); 3.6 writes "ptxas info"
LOG = """ptxas-blackwell info    : 0 bytes gmem
ptxas-blackwell info    : Compiling entry function '_pd_select_kernel' for 'sm_90a'
ptxas-blackwell info    : Function properties for _pd_select_kernel
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas-blackwell info    : Used 42 registers, used 1 barriers, 1024 bytes smem, 384 bytes cmem[0]
"""


def test_the_ptxas_report_is_read():
    """Registers, stack frame, spill stores / loads and static shared memory come from the report's own lines, with
    either tool name; a report without them is an error, not zeros."""
    assert compile_check.parse_ptxas_log(LOG) == {
        "regs": 42, "stack_bytes": 16, "spill_stores": 8, "spill_loads": 4, "smem_static": 1024,
    }  # fmt: skip
    plain = LOG.replace("ptxas-blackwell", "ptxas").replace(", 1024 bytes smem", "")
    assert compile_check.parse_ptxas_log(plain)["smem_static"] == 0
    with pytest.raises(ValueError, match="no register / spill report"):
        compile_check.parse_ptxas_log("ptxas info    : 0 bytes gmem\n")


def test_occupancy_follows_the_sm90_rules():
    """Hand calculations with 65,536 registers given to warps in units of 256, 228 KiB of shared memory with 1 KiB
    reserved a block in units of 128 bytes, 2,048 threads and 32 blocks an SM."""
    # 44 registers: 44 x 32 = 1,408 -> 1,536 a warp; 65,536 // 1,536 = 42 warps -> 10 blocks of 4 warps: 40 / 64 warps
    occ = compile_check.occupancy(44, 0, 4)
    assert (occ["blocks_by_regs"], occ["blocks_per_sm"], occ["occupancy"]) == (10, 10, 0.625)
    # 241 registers at 8 warps: 7,936 a warp, 8 warps an SM: one block
    assert compile_check.occupancy(241, 61824, 8)["blocks_per_sm"] == 1
    # 100 KiB of shared memory: (102,400 + 1,024) a block, 233,472 // 103,424 = 2 blocks
    assert compile_check.occupancy(32, 100 * 1024, 4)["blocks_by_smem"] == 2
    # 16 registers, 1 warp: 32 blocks (the block limit, not the 64 the threads would allow)
    assert compile_check.occupancy(16, 0, 1)["blocks_per_sm"] == 32


def _record(regs=40, smem=0, warps=4, spill_stores=0, spill_loads=0):
    return {"regs": regs, "smem": smem, "spill_stores": spill_stores, "spill_loads": spill_loads,
            **compile_check.occupancy(regs, smem, warps)}  # fmt: skip


def test_a_spilling_or_unlaunchable_variant_is_refused():
    """A variant fails the check for a spill, for a register file or shared memory one block cannot have, and for
    over 1,024 threads; one that fits has no problem."""
    assert compile_check.launch_problems(_record()) == []
    assert compile_check.launch_problems(_record(spill_stores=4))[0].startswith("spills")
    assert any("registers x 1024 threads" in p for p in compile_check.launch_problems(_record(regs=128, warps=32)))
    assert any("shared memory" in p for p in compile_check.launch_problems(_record(smem=230 * 1024)))
    assert any("threads > 1024" in p for p in compile_check.launch_problems(_record(regs=16, warps=64)))


def _package_kernels() -> set[str]:
    """The names of every Triton kernel (a jitted function named *_kernel) of the op families."""
    found = set()
    for family in ("diag", "block", "pd"):
        mod = importlib.import_module(f"hf_ssm.ops.{family}.triton")
        found |= {name for name, obj in vars(mod).items() if name.endswith("_kernel") and hasattr(obj, "fn")}
    return found


@pytest.mark.slow
def test_every_kernel_compiles_for_sm90_without_spills_and_fits_an_sm(tmp_path):
    """`compile_check --quick` (one variant of every kernel, no GPU) exits 0, covers every kernel the package
    defines, and each variant compiled with no spill and at least one resident block an sm_90 SM."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    out = tmp_path / "resources.json"
    result = subprocess.run(
        [sys.executable, "-m", "hf_ssm.ops.compile_check", "--quick", "--json", str(out)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "all kernels compiled for sm_90" in result.stdout
    records = json.loads(out.read_text())["variants"]
    assert {r["kernel"] for r in records} == _package_kernels()
    for r in records:
        assert r["error"] is None and r["spill_stores"] == r["spill_loads"] == 0 and r["blocks_per_sm"] >= 1, r
