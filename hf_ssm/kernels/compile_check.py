"""Compile every Triton kernel of hf_ssm.kernels for a GPU architecture, without a GPU.

The interpreter tests (TRITON_INTERPRET=1) check what the kernels compute but not that they compile: the
interpreter runs the Python body with numpy and accepts programs the compiler rejects. This compiles each kernel,
over the constexpr variants the launchers use, through Triton's whole pipeline (TTIR -> TTGIR -> LLVM -> PTX ->
cubin with the ptxas shipped in the triton wheel), which needs no GPU or driver:

    python -m hf_ssm.kernels.compile_check            # sm_90 (H100 / H200)
    python -m hf_ssm.kernels.compile_check --arch 80  # A100
    python -m hf_ssm.kernels.compile_check --quick    # one variant per kernel (the test suite runs this)

It must run with TRITON_INTERPRET unset (the kernels are then real JIT functions). Exit code 0 when everything
compiled, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import sys
import time


def _variants():
    """(module name, kernel name, pointer dtypes, constexprs, float args, num_warps) of every launch variant."""
    diag, block, pd = "diag_scan", "block_scan", "pd_scan"
    for complex_, reverse in itertools.product([False, True], repeat=2):
        for dt in ["*fp32"] if complex_ else ["*fp32", "*bf16"]:
            ptrs = {"a_ptr": dt, "g_ptr": dt, "x0_ptr": dt, "cu_ptr": "*i32"}
            flags = dict(COMPLEX=complex_, REVERSE=reverse, BLOCK=256)
            yield diag, "_diag_summary_kernel", ptrs, flags, (), 4
            yield diag, "_diag_carry_kernel", ptrs, {**flags, "HAS_INIT": True}, (), 4
            yield diag, "_diag_apply_kernel", ptrs, {**flags, "GRAD_A": reverse, "HAS_X0": True}, (), 4
    tiles = importlib.import_module("hf_ssm.kernels.block_scan")._tiles
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
    for k_p, n_p in [(16, 16), (32, 64), (32, 128)]:
        ptrs = {"sel_ptr": "*fp32", "m_ptr": "*bf16", "keep_ptr": "*i32", "idx_ptr": "*i64"}
        flags = dict(HAS_KEEP=True, BT=16, KP=k_p, NP=n_p)
        yield pd, "_pd_select_kernel", ptrs, flags, (), 4
        yield pd, "_pd_generation_backward_kernel", ptrs, flags, ("inv_tau",), 8 if k_p * n_p >= 4096 else 4


def compile_all(arch: int = 90, verbose: bool = True, quick: bool = False) -> list[str]:
    """Compile every variant for sm_<arch> (quick: the reverse-pass variant of each kernel only); returns the
    failures (empty when all compiled)."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise RuntimeError("compile_check needs TRITON_INTERPRET unset: interpreted kernels cannot be compiled")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", arch, 32)
    failures = []
    variants = list(_variants())
    if quick:  # the last variant of each kernel: reverse pass, largest tiles
        variants = list({v[1]: v for v in variants}.values())
    for module, name, ptrs, constexprs, floats, warps in variants:
        fn = getattr(importlib.import_module(f"hf_ssm.kernels.{module}"), name)
        signature = {}
        for arg in fn.arg_names:
            if arg in constexprs:
                signature[arg] = "constexpr"
            elif arg.endswith("_ptr"):
                signature[arg] = ptrs.get(arg, "*fp32")
            else:
                signature[arg] = "fp32" if arg in floats else "i32"
        start = time.perf_counter()
        try:
            triton.compile(ASTSource(fn, signature, constexprs), target=target, options={"num_warps": warps})
        except Exception as exc:  # report every failing variant, not only the first
            failures.append(f"{name} {constexprs}: {type(exc).__name__}: {exc}")
            status = "FAIL"
        else:
            status = "ok"
        if verbose:
            print(f"{status:4s} {name} {constexprs} ({time.perf_counter() - start:.1f} s)", flush=True)
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="CUDA compute capability as an integer (90 = sm_90)")
    parser.add_argument("--quick", action="store_true", help="one variant per kernel instead of every variant")
    args = parser.parse_args(argv)
    failures = compile_all(args.arch, quick=args.quick)
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"{'all kernels compiled' if not failures else f'{len(failures)} variants failed'} for sm_{args.arch}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
