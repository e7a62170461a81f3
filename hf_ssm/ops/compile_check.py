"""Compile every Triton kernel of the op families (hf_ssm/ops/<family>/triton.py) for a GPU architecture, without
a GPU, and read what each variant needs of an SM: registers, spills, shared memory, and the occupancy that allows.

The interpreter tests (TRITON_INTERPRET=1) check what the kernels compute but not that they compile: the
interpreter runs the Python body with numpy and accepts programs the compiler rejects. This compiles each kernel,
over the constexpr variants the launchers use, through Triton's whole pipeline (TTIR -> TTGIR -> LLVM -> PTX ->
cubin with the ptxas shipped in the triton wheel), which needs no GPU or driver:

    python -m hf_ssm.ops.compile_check            # sm_90 (H100 / H200)
    python -m hf_ssm.ops.compile_check --arch 80  # A100
    python -m hf_ssm.ops.compile_check --quick    # one variant per kernel (the test suite runs this)
    python -m hf_ssm.ops.compile_check --json r.json --markdown r.md   # the resource table as files too
    python -m hf_ssm.ops.compile_check --loaded   # on a GPU: also load each kernel, read the driver's counts
    python -m hf_ssm.ops.compile_check --jobs 8   # compile in 8 processes

Each variant compiles in a fresh Triton cache, so the time printed is a cold compilation and ptxas really runs: its
verbose report (registers a thread, spill stores / loads, stack frame, static shared memory) is read for every
variant, and the dynamic shared memory from Triton's metadata. From these, the SM limits of sm_90 (SM90) give the
resident blocks an SM and the occupancy. A variant fails the check when it does not compile, spills, or cannot
launch (more than 255 registers a thread, more registers than an SM has for one block, more shared memory than a
block may have, more than 1,024 threads). With --loaded (a GPU, the kernels' own architecture) each compiled kernel
is also loaded, and the driver's register count must equal ptxas's.

It must run with TRITON_INTERPRET unset (the kernels are then real JIT functions). Exit code 0 when every variant
compiled and fits, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import itertools
import json
import math
import multiprocessing
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

# sm_90 (H100 / H200), from CUDA's occupancy rules for compute capability 9.0.
SM90 = {
    "regs_per_sm": 65536,
    "max_regs_per_thread": 255,
    "reg_alloc_unit": 256,  # registers are given to a warp in units of 256
    "smem_per_sm": 228 * 1024,
    "smem_per_block": 227 * 1024,
    "smem_alloc_unit": 128,
    "smem_reserved_per_block": 1024,  # the system's share of every resident block
    "threads_per_sm": 2048,
    "threads_per_block": 1024,
    "blocks_per_sm": 32,
}


def _variants():
    """(family, kernel name, pointer dtypes, constexprs, float args, num_warps) of every launch variant."""
    diag, block, pd = "diag", "block", "pd"  # the families: hf_ssm.ops.<family>.triton
    for complex_, reverse in itertools.product([False, True], repeat=2):
        for dt in ["*fp32"] if complex_ else ["*fp32", "*bf16"]:
            ptrs = {"a_ptr": dt, "g_ptr": dt, "x0_ptr": dt, "cu_ptr": "*i32"}
            flags = dict(COMPLEX=complex_, REVERSE=reverse, BLOCK=256)
            yield diag, "_diag_summary_kernel", ptrs, flags, (), 4
            yield diag, "_diag_carry_kernel", ptrs, {**flags, "HAS_INIT": True}, (), 4
            yield diag, "_diag_apply_kernel", ptrs, {**flags, "GRAD_A": reverse, "HAS_X0": True}, (), 4
    tiles = importlib.import_module("hf_ssm.ops.block.triton")._tiles
    for companion, reverse, m in itertools.product([False, True], [False, True], [1, 2, 3, 8]):
        mp = 1 << (m - 1).bit_length()
        bn, bn_sum = tiles(4096, mp)
        ptrs = {"A_ptr": "*bf16", "g_ptr": "*fp32", "keep_ptr": "*i32", "cu_ptr": "*i32", "x0_ptr": "*fp32"}
        flags = dict(COMPANION=companion, REVERSE=reverse, HAS_KEEP=True, MP=mp)
        yield block, "_block_summary_kernel", ptrs, {**flags, "BN": bn_sum}, (), 4
        yield block, "_block_carry_kernel", ptrs, dict(REVERSE=reverse, HAS_INIT=True, MP=mp, BN=bn), (), 4
        apply = {**flags, "GRAD_A": reverse, "HAS_X0": True, "BN": bn}
        yield block, "_block_apply_kernel", ptrs, apply, (), 4
    for reverse, onehot, n_p in itertools.product([False, True], [True, False], [4, 64, 128, 256]):
        if onehot and n_p > 128:
            continue
        warps = 8 if n_p >= 128 else 4
        ptrs = {"idx_ptr": "*i64", "dv_ptr": "*fp32", "g_ptr": "*bf16", "cu_ptr": "*i32", "cidx_ptr": "*i32"}
        flags = dict(REVERSE=reverse, ONEHOT=onehot, NP=n_p)
        yield pd, "_pd_summary_kernel", ptrs, flags, (), warps
        yield pd, "_pd_carry_kernel", ptrs, {**flags, "HAS_INIT": True}, (), warps
        yield pd, "_pd_apply_kernel", ptrs, {**flags, "HAS_X0": True, "WRITE_Z": reverse}, (), warps
        # bank transitions: the (H, K, N) int32 bank and float32 logits, the selection of k_t in the kernel
        bank = {**ptrs, "bank_ptr": "*i32", "logit_ptr": "*fp32", "keep_ptr": "*i32"}
        bank_flags = {**flags, "HAS_KEEP": True, "KP": 16}
        yield pd, "_pd_bank_summary_kernel", bank, bank_flags, (), warps
        yield pd, "_pd_bank_apply_kernel", bank, {**bank_flags, "HAS_X0": True, "WRITE_Z": reverse}, (), warps
    for k_p, n_p in [(16, 16), (16, 64), (32, 64), (32, 128)]:  # (16, 64): the acceptance shape K = 16, N = 64
        ptrs = {"sel_ptr": "*fp32", "m_ptr": "*bf16", "keep_ptr": "*i32", "idx_ptr": "*i64"}
        flags = dict(HAS_KEEP=True, BT=16, KP=k_p, NP=n_p)
        yield pd, "_pd_select_kernel", ptrs, flags, (), 4
        yield pd, "_pd_generation_backward_kernel", ptrs, flags, ("inv_tau",), 8 if k_p * n_p >= 4096 else 4


def parse_ptxas_log(log: str) -> dict:
    """Registers a thread, spill stores / loads (bytes), stack frame (bytes) and static shared memory (bytes) from
    ptxas's verbose report of one kernel (its `ptxas info` or `ptxas-blackwell info` lines)."""
    used = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if used is None or spills is None:
        raise ValueError(f"no register / spill report in the ptxas log: {log[-500:]!r}")
    smem = re.search(r"Used \d+ registers.*?(\d+) bytes smem", log)
    return {
        "regs": int(used.group(1)),
        "stack_bytes": int(spills.group(1)),
        "spill_stores": int(spills.group(2)),
        "spill_loads": int(spills.group(3)),
        "smem_static": int(smem.group(1)) if smem else 0,
    }


def occupancy(regs: int, smem: int, warps: int, sm: dict = SM90) -> dict:
    """Resident blocks an SM by each limit (registers, shared memory, threads, blocks) and the occupancy (resident
    warps / the SM's maximum) of a kernel using `regs` registers a thread, `smem` bytes of shared memory a block and
    `warps` warps a block."""
    threads = 32 * warps
    regs_per_warp = math.ceil(regs * 32 / sm["reg_alloc_unit"]) * sm["reg_alloc_unit"]
    by_regs = (sm["regs_per_sm"] // regs_per_warp) // warps if regs else sm["blocks_per_sm"]
    smem_block = math.ceil(smem / sm["smem_alloc_unit"]) * sm["smem_alloc_unit"] + sm["smem_reserved_per_block"]
    by_smem = sm["smem_per_sm"] // smem_block
    by_threads = sm["threads_per_sm"] // threads
    blocks = min(by_regs, by_smem, by_threads, sm["blocks_per_sm"])
    return {
        "threads": threads,
        "blocks_by_regs": by_regs,
        "blocks_by_smem": by_smem,
        "blocks_by_threads": by_threads,
        "blocks_per_sm": blocks,
        "occupancy": blocks * threads / sm["threads_per_sm"],
    }


def launch_problems(record: dict, sm: dict = SM90) -> list[str]:
    """Why a compiled variant (a record of compile_variant) spills or cannot launch; empty when it fits."""
    problems = []
    if record["spill_stores"] or record["spill_loads"]:
        problems.append(f"spills ({record['spill_stores']} bytes stored, {record['spill_loads']} loaded)")
    if record["regs"] > sm["max_regs_per_thread"]:
        problems.append(f"{record['regs']} registers a thread > {sm['max_regs_per_thread']}")
    if record["blocks_by_regs"] == 0:
        problems.append(f"{record['regs']} registers x {record['threads']} threads > {sm['regs_per_sm']} an SM")
    if record["smem"] > sm["smem_per_block"]:
        problems.append(f"{record['smem']} bytes of shared memory > {sm['smem_per_block']} a block")
    if record["threads"] > sm["threads_per_block"]:
        problems.append(f"{record['threads']} threads > {sm['threads_per_block']} a block")
    return problems


def _signature(fn, ptrs: dict, constexprs: dict, floats) -> dict:
    signature = {}
    for arg in fn.arg_names:
        if arg in constexprs:
            signature[arg] = "constexpr"
        elif arg.endswith("_ptr"):
            signature[arg] = ptrs.get(arg, "*fp32")
        else:
            signature[arg] = "fp32" if arg in floats else "i32"
    return signature


def _compile(variant, arch: int, cache: str):
    """triton.compile of one variant for sm_<arch> with `cache` as Triton's cache; (the kernel, what it printed)."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    family, name, ptrs, constexprs, floats, warps = variant
    fn = getattr(importlib.import_module(f"hf_ssm.ops.{family}.triton"), name)
    printed = io.StringIO()
    with knobs.cache.scope(), knobs.nvidia.scope():
        knobs.cache.dir = cache
        knobs.nvidia.dump_ptxas_log = True  # ptxas's verbose report, printed: captured here
        with contextlib.redirect_stdout(printed):
            source = ASTSource(fn, _signature(fn, ptrs, constexprs, floats), constexprs)
            kernel = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
    return kernel, printed.getvalue()


def compile_variant(variant, arch: int, cache: str) -> dict:
    """Compile one variant (an item of _variants) for sm_<arch> into the empty cache folder `cache`; its record:
    names, cold compile time, ptxas's counts, shared memory, occupancy and launch problems. A variant that fails to
    compile has `error` set instead of the counts."""
    family, name, ptrs, constexprs, floats, warps = variant
    arg_names = getattr(importlib.import_module(f"hf_ssm.ops.{family}.triton"), name).arg_names
    dtypes = {k: v for k, v in ptrs.items() if k in arg_names and v not in ("*fp32", "*i32")}
    record = {"kernel": name, "constexprs": constexprs, "pointer_dtypes": dtypes, "num_warps": warps, "error": None}
    start = time.perf_counter()
    try:
        kernel, log = _compile(variant, arch, cache)
    except Exception as exc:  # report every failing variant, not only the first
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        return record
    record["compile_s"] = time.perf_counter() - start
    record.update(parse_ptxas_log(log))
    record["smem"] = kernel.metadata.shared + record["smem_static"]
    record.update(occupancy(record["regs"], record["smem"], warps))
    record["problems"] = launch_problems(record)
    return record


def load_variant(variant, arch: int, cache: str, record: dict) -> None:
    """On a GPU: load the variant compiled into `cache` (a cache hit) with the driver, add its register count, local
    memory (n_spills) and thread limit to `record`, and a problem where its register count differs from ptxas's."""
    kernel, _ = _compile(variant, arch, cache)
    try:
        kernel._init_handles()
    except Exception as exc:  # OutOfResources, or a driver error: the variant cannot launch here
        record["problems"].append(f"the driver cannot load it: {type(exc).__name__}: {exc}"[:500])
        return
    record.update(driver_regs=kernel.n_regs, driver_spills=kernel.n_spills, driver_max_threads=kernel.n_max_threads)
    if kernel.n_regs != record["regs"]:
        record["problems"].append(f"the driver counts {kernel.n_regs} registers, ptxas {record['regs']}")


def compile_all(
    arch: int = 90, verbose: bool = True, quick: bool = False, loaded: bool = False, jobs: int = 1
) -> list[dict]:
    """The record of every variant for sm_<arch> (quick: the last variant of each kernel: reverse pass, largest
    tiles), compiled in `jobs` processes, each variant in a cache of its own; printed in order when `verbose`. With
    `loaded` (a GPU), each compiled variant is then loaded here (load_variant)."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("compile_check needs TRITON_INTERPRET unset: interpreted kernels cannot be compiled")
    variants = list(_variants())
    if quick:
        variants = list({v[1]: v for v in variants}.values())
    records = []
    with tempfile.TemporaryDirectory() as root:
        caches = [os.path.join(root, str(i)) for i in range(len(variants))]
        work = [(v, arch, c) for v, c in zip(variants, caches)]
        with contextlib.ExitStack() as stack:
            mapped = itertools.starmap(compile_variant, work)
            if jobs > 1:  # fork: no CUDA context exists yet in this process (loading comes after)
                pool = stack.enter_context(ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")))
                mapped = pool.map(compile_variant, *zip(*work))
            for variant, cache, record in zip(variants, caches, mapped):
                if loaded and not record["error"]:
                    load_variant(variant, arch, cache, record)
                records.append(record)
                if verbose:
                    print(_line(record), flush=True)
    return records


def _line(r: dict) -> str:
    label = f"{r['kernel']} {r['constexprs']}" + (f" {r['pointer_dtypes']}" if r["pointer_dtypes"] else "")
    if r["error"]:
        return f"FAIL {label}: {r['error'].splitlines()[0]}"
    status = "ok" if not r["problems"] else "BAD"
    return (
        f"{status:4s} {label} ({r['compile_s']:.1f} s): {r['regs']} regs, {r['spill_stores']}/{r['spill_loads']} "
        f"B spilled, {r['smem']} B smem, {r['num_warps']} warps, {r['blocks_per_sm']} blocks/SM, "
        f"occupancy {r['occupancy']:.0%}" + (f"; {'; '.join(r['problems'])}" if r["problems"] else "")
    )


def markdown(records: list[dict], arch: int) -> str:
    """The resource table: one row per variant."""
    lines = [
        f"| kernel | constexprs | pointer dtypes | warps | compile s | registers | spill st / ld B | stack B | "
        f"smem B | blocks/SM (regs, smem, threads) | occupancy sm_{arch} |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        flags = ", ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in r["constexprs"].items())
        dtypes = ", ".join(f"{k}={v}" for k, v in r["pointer_dtypes"].items())
        if r["error"]:
            lines.append(f"| {r['kernel']} | {flags} | {dtypes} | {r['num_warps']} | FAILED | | | | | | |")
            continue
        lines.append(
            f"| {r['kernel']} | {flags} | {dtypes} | {r['num_warps']} | {r['compile_s']:.1f} | {r['regs']} | "
            f"{r['spill_stores']} / {r['spill_loads']} | {r['stack_bytes']} | {r['smem']} | {r['blocks_per_sm']} "
            f"({r['blocks_by_regs']}, {r['blocks_by_smem']}, {r['blocks_by_threads']}) | {r['occupancy']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="CUDA compute capability as an integer (90 = sm_90)")
    parser.add_argument("--quick", action="store_true", help="one variant per kernel instead of every variant")
    parser.add_argument("--loaded", action="store_true", help="on a GPU: load each kernel, check the driver's counts")
    parser.add_argument("--jobs", type=int, default=1, help="compile in this many processes")
    parser.add_argument("--json", default=None, help="write every variant's record here")
    parser.add_argument("--markdown", default=None, help="write the resource table here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    records = compile_all(args.arch, quick=args.quick, loaded=args.loaded, jobs=args.jobs)
    failed = [r for r in records if r["error"]]
    bad = [r for r in records if not r["error"] and r["problems"]]
    for r in failed + bad:
        print(_line(r), file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arch": args.arch, "sm_limits": SM90, "variants": records}, f, indent=1)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(records, args.arch))
    compiled = sum(r["compile_s"] for r in records if not r["error"])
    print(f"{len(records)} variants, {compiled:.1f} s of compilation, {time.perf_counter() - start:.1f} s in all")
    print(f"{'all kernels compiled' if not failed else f'{len(failed)} variants failed'} for sm_{args.arch}")
    print("no spills; every variant can launch" if not bad else f"{len(bad)} variants spill or cannot launch")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
