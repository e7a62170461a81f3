"""Benchmark the Triton scans (hf_ssm.ops.<family>.triton) against their parallel torch scans; JSON output.

For every scan family and every point of a (B, T, H, N or m) sweep: forward time and forward+backward time of the
Triton kernel and of the torch scan, the speed-up, and the achieved bandwidth in GB/s (the bytes the operation must
move at least, over the measured time; the same byte count for both implementations):

    diag_real / diag_complex   x_t = a_t x_{t-1} + b_t over H*N channels (float32 / complex64)     (diag_lru, DEER)
    block_dense                BD-LRU blocks, (H*N / m) blocks of m x m
    block_companion            H-LRU companion blocks (first rows only), (H*N / m) channels of order m
    pd                         PD scan (idx, dv, b), H heads of N complex states
    pd_generated               P generation (dictionary of K matrices, straight-through) + PD scan, fused
    pd_mixer_dictionary        one PD-SSM mixer layer (d = H*N), scan_backend "triton" vs "torch"
    pd_mixer_bank              the same with pd_ssm_transition = "bank", when this version's config has that mode
                               (otherwise the row says it was skipped; not an error)

Needs a CUDA GPU. The acceptance targets (B=8, T=4096, H=8, N=64, m=4): every kernel's forward+backward at least
10x its torch parallel scan, and PD within 3x of the complex diagonal scan at equal state width; the "targets"
section of the JSON reports them when that point is in the sweep.

Without a GPU the script refuses (exit code 2), unless ``--cpu_sanity``: then it sets TRITON_INTERPRET=1 and runs
every kernel once at a tiny shape in the Triton interpreter, checking its outputs against torch; the times it
prints are interpreter times and say nothing about performance.

    python benchmarks/bench_kernels.py --out runs/bench_kernels.json
    python benchmarks/bench_kernels.py --batch 8 --steps 4096 --heads 8 --state 64 --blocks 4
    python benchmarks/bench_kernels.py --cpu_sanity
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

FAMILIES = (
    "diag_real",
    "diag_complex",
    "block_dense",
    "block_companion",
    "pd",
    "pd_generated",
    "pd_mixer_dictionary",
    "pd_mixer_bank",
)
MIXER_FAMILIES = {"pd_mixer_dictionary": "dictionary", "pd_mixer_bank": "bank"}
SKIPPED_BANK = "this version's config has no pd_ssm_transition (bank mode): skipped"


def bank_mode_available() -> bool:
    """Whether this version's config has the PD-SSM bank transition mode (pd_ssm_transition = "bank")."""
    from hf_ssm import HybridSSMConfig

    return getattr(HybridSSMConfig(), "pd_ssm_transition", None) is not None


def build_parser() -> argparse.ArgumentParser:
    # imported here, not with the module: hf_ssm imports triton, which main may first set TRITON_INTERPRET for
    from hf_ssm.training.cli import refuse_options
    from hf_ssm.training.legacy_settings import RENAMED_OPTIONS

    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kernels", nargs="+", default=list(FAMILIES), choices=FAMILIES, help="scan families to run")
    p.add_argument("--batch", nargs="+", type=int, default=[1, 8], help="batch sizes B")
    p.add_argument("--steps", nargs="+", type=int, default=[512, 4096], help="sequence lengths T")
    p.add_argument("--heads", nargs="+", type=int, default=[8], help="heads H (state width H*N)")
    p.add_argument("--state", nargs="+", type=int, default=[16, 64], help="state size N per head")
    p.add_argument("--blocks", nargs="+", type=int, default=[2, 4, 8], help="block sizes / orders m (block scans)")
    p.add_argument("--dict_size", type=int, default=16, help="dictionary size K (pd_generated)")
    p.add_argument("--repeats", type=int, default=10, help="timed repetitions (median reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed repetitions first (compilation, autotuning)")
    p.add_argument("--out", default=None, help="write the JSON here as well as to stdout")
    p.add_argument(
        "--cpu_sanity",
        action="store_true",
        help="no GPU: run each kernel once at a tiny shape in the Triton interpreter and check it against torch",
    )
    refuse_options(p, RENAMED_OPTIONS["bench_kernels"])
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def cpu_sanity_asked(argv=None) -> bool:
    """Whether the command line gives --cpu_sanity, read before anything imports triton (the full parser imports
    hf_ssm for its refusals of old spellings, and triton with it)."""
    light = argparse.ArgumentParser(add_help=False)
    light.add_argument("--cpu_sanity", action="store_true")
    return light.parse_known_args(argv)[0].cpu_sanity


# ---------------------------------------------------------------------------------------------------------------
# problems: inputs, the two implementations, byte counts


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def make_mixer_problem(family, batch, steps, heads, n, k, device):
    """One PD-SSM mixer layer, scan_backend "triton" vs "torch" (same weights): the problem tuple of make_problem,
    or None where this version has no bank mode."""
    import torch

    import hf_ssm.modeling
    from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM

    transition = MIXER_FAMILIES[family]
    # the paper's layer, where this version's defaults are another (older versions: their defaults are that layer)
    extra = dict(getattr(hf_ssm.modeling, "PAPER_PD_SSM_LAYER", {}))
    if getattr(HybridSSMConfig(), "pd_ssm_transition", None) is not None:
        extra["pd_ssm_transition"] = transition
    elif transition != "dictionary":
        return None
    mixers = []
    for backend in ("triton", "torch"):
        torch.manual_seed(0)  # the model's own init (post_init), identical for both backends
        config = HybridSSMConfig(
            vocab_size=32,
            hidden_size=heads * n,
            intermediate_size=4 * heads * n,
            num_hidden_layers=1,
            mixers=["pd_ssm"],
            pd_ssm_dict_size=k,
            scan_backend=backend,
            **{**extra, "pd_ssm_num_heads": heads, "pd_ssm_head_state_size": n},
        )
        mixers.append(HybridSSMForCausalLM(config).model.layers[0].mixer.to(device))
    u = torch.randn(batch, steps, heads * n, device=device, requires_grad=True)

    def run(mixer):
        def fn(u):
            y, _ = mixer(u)
            return y, y[:, -1]

        return fn

    desc = dict(family=family, B=batch, T=steps, H=heads, N=n, K=k, transition=transition)
    io = 2 * _nbytes(u)  # u in, y out: the layer's own traffic is far larger; GB/s here is only a floor
    return [u], run(mixers[0]), run(mixers[1]), io, 2 * io, desc


def make_problem(family, batch, steps, heads, n, m, k, device):
    """(inputs requiring grad, triton fn, torch fn, forward bytes, extra backward bytes, shape description)."""
    import torch

    if family in MIXER_FAMILIES:
        return make_mixer_problem(family, batch, steps, heads, n, k, device)

    from hf_ssm.ops import kernels
    from hf_ssm.ops.block import block_scan, companion_scan
    from hf_ssm.ops.diag import diag_scan
    from hf_ssm.ops.dispatch import scan_ops
    from hf_ssm.ops.pd import pd_scan

    g = torch.Generator(device="cpu").manual_seed(0)
    width = heads * n

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    desc = {"family": family, "B": batch, "T": steps, "H": heads, "N": n}
    if family in ("diag_real", "diag_complex"):
        dtype = torch.float32 if family == "diag_real" else torch.complex64
        a = (0.9 + 0.1 * torch.rand(batch, steps, width, generator=g)).to(device)
        if dtype == torch.complex64:
            a = torch.polar(a, 6.28 * torch.rand(a.shape, generator=g).to(device))
        b = rand(batch, steps, width, dtype=dtype)
        inputs = [a.requires_grad_(), b.requires_grad_()]
        out_bytes = _nbytes(b)  # states
        fwd = _nbytes(a, b) + out_bytes
        bwd = out_bytes + _nbytes(a) + out_bytes + _nbytes(a, b)  # grad in; a, states re-read; grads out
        return inputs, kernels.diag_scan, diag_scan, fwd, bwd, desc
    if family in ("block_dense", "block_companion"):
        if width % m:
            return None
        blocks = width // m
        desc.update(m=m, blocks=blocks)
        h_bytes = batch * steps * blocks * m * 4
        if family == "block_dense":
            A = torch.softmax(rand(batch, steps, blocks, m, m + 1), -1)[..., :m].contiguous()
            b = rand(batch, steps, blocks, m)
            inputs = [A.requires_grad_(), b.requires_grad_()]
            fwd = _nbytes(A, b) + h_bytes
            bwd = h_bytes + _nbytes(A) + h_bytes + _nbytes(A, b)
            return inputs, kernels.block_scan, block_scan, fwd, bwd, desc
        a = torch.softmax(rand(batch, steps, blocks, m + 1), -1)[..., :m].contiguous()
        v = rand(batch, steps, blocks)
        inputs = [a.requires_grad_(), v.requires_grad_()]

        fwd = _nbytes(a, v) + h_bytes
        bwd = h_bytes + _nbytes(a) + h_bytes + _nbytes(a, v)
        return inputs, kernels.companion_scan, companion_scan, fwd, bwd, desc
    # PD
    idx = torch.randint(0, n, (batch, steps, heads, n), generator=g).to(device)
    dv = torch.polar(
        (0.9 + 0.1 * torch.rand(batch, steps, heads, n, generator=g)),
        6.28 * torch.rand(batch, steps, heads, n, generator=g),
    ).to(device)
    b = rand(batch, steps, heads, n, dtype=torch.complex64)
    x_bytes = _nbytes(b)
    if family == "pd":
        inputs = [dv.requires_grad_(), b.requires_grad_()]
        fwd = _nbytes(idx, dv, b) + x_bytes
        bwd = x_bytes + _nbytes(idx, dv) + x_bytes + _nbytes(dv, b)
        return inputs, (lambda dv, b: kernels.pd_scan(idx, dv, b)), (lambda dv, b: pd_scan(idx, dv, b)), fwd, bwd, desc
    desc.update(K=k)
    sel = torch.softmax(rand(batch, steps, heads, k), -1)
    dictionary = rand(heads, k, n, n) / math.sqrt(n)
    inputs = [sel.requires_grad_(), dictionary.requires_grad_(), dv.requires_grad_(), b.requires_grad_()]

    def fused(sel, dictionary, dv, b):
        return kernels.pd_dictionary_scan(sel, dictionary, dv, b)

    def reference(sel, dictionary, dv, b):
        return scan_ops("torch", device).pd_dictionary_scan(sel, dictionary, dv, b)

    # the fused kernel's minimum traffic: sel, dictionary, dv, b in, states out (no (T, N, N) tensor)
    fwd = _nbytes(sel, dictionary, dv, b) + x_bytes
    bwd = x_bytes + _nbytes(sel, dictionary, dv) + x_bytes + _nbytes(sel, dictionary, dv, b)
    return inputs, fused, reference, fwd, bwd, desc


def _loss(out):
    states, final = out
    return states.real.sum() + final.real.sum() if states.is_complex() else states.float().sum() + final.float().sum()


def time_fn(fn, inputs, backward, warmup, repeats, sync):
    """Median seconds of fn(*inputs) (and the backward of a sum of its outputs)."""

    def once():
        out = fn(*inputs)
        if backward:
            for t in inputs:
                t.grad = None
            _loss(out).backward()
        return out

    for _ in range(warmup):
        once()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def max_error(fn, ref, inputs):
    out, ref_out = fn(*inputs), ref(*inputs)
    return max((a.detach() - b.detach()).abs().max().item() for a, b in zip(out, ref_out))


# ---------------------------------------------------------------------------------------------------------------


def run_gpu(args):
    import torch

    sync = torch.cuda.synchronize
    rows = []
    for family in args.kernels:
        for batch in args.batch:
            for steps in args.steps:
                for heads in args.heads:
                    for n in args.state:
                        for m in args.blocks if family.startswith("block") else [None]:
                            problem = make_problem(family, batch, steps, heads, n, m, args.dict_size, "cuda")
                            if problem is None:
                                if family == "pd_mixer_bank" and not any(r["family"] == family for r in rows):
                                    rows.append({"family": family, "skipped": SKIPPED_BANK})
                                continue
                            inputs, fast, ref, fwd_bytes, bwd_bytes, desc = problem
                            row = dict(desc)
                            try:
                                row["max_abs_error"] = max_error(fast, ref, inputs)
                                for name, fn in (("triton", fast), ("torch", ref)):
                                    f = time_fn(fn, inputs, False, args.warmup, args.repeats, sync)
                                    fb = time_fn(fn, inputs, True, args.warmup, args.repeats, sync)
                                    row[f"{name}_fwd_s"], row[f"{name}_fwdbwd_s"] = f, fb
                                    row[f"{name}_fwd_GBps"] = fwd_bytes / f / 1e9
                                    row[f"{name}_fwdbwd_GBps"] = (fwd_bytes + bwd_bytes) / fb / 1e9
                                row["speedup_fwd"] = row["torch_fwd_s"] / row["triton_fwd_s"]
                                row["speedup_fwdbwd"] = row["torch_fwdbwd_s"] / row["triton_fwdbwd_s"]
                            except torch.cuda.OutOfMemoryError as exc:
                                row["error"] = f"out of memory: {exc}"[:300]
                                torch.cuda.empty_cache()
                            rows.append(row)
                            print(json.dumps(row), file=sys.stderr, flush=True)
                            del inputs
    return rows, targets(rows)


def targets(rows):
    """The acceptance targets at B=8, T=4096, H=8, N=64 (m=4), when that point was measured."""

    def find(family, **extra):
        for r in rows:
            if r["family"] != family or "skipped" in r or "error" in r:
                continue
            if (r["B"], r["T"], r["H"], r["N"]) == (8, 4096, 8, 64):
                if all(r.get(k) == v for k, v in extra.items()):
                    return r
        return None

    out = {}
    for family in (f for f in FAMILIES if f not in MIXER_FAMILIES):  # the 10x target is per kernel
        r = find(family, m=4) if family.startswith("block") else find(family)
        if r is not None:
            out[f"{family}_fwdbwd_speedup_vs_torch"] = r["speedup_fwdbwd"]
            out[f"{family}_meets_10x"] = r["speedup_fwdbwd"] >= 10
    pd, diag = find("pd"), find("diag_complex")
    if pd is not None and diag is not None:
        out["pd_over_diag_complex_fwdbwd"] = pd["triton_fwdbwd_s"] / diag["triton_fwdbwd_s"]
        out["pd_within_3x_of_diag"] = out["pd_over_diag_complex_fwdbwd"] <= 3
    dictionary, bank = find("pd_mixer_dictionary"), find("pd_mixer_bank")
    if dictionary is not None and bank is not None:
        out["pd_mixer_bank_over_dictionary_fwdbwd"] = bank["triton_fwdbwd_s"] / dictionary["triton_fwdbwd_s"]
    return out


def run_cpu_sanity(args):
    """Every kernel once at a tiny shape in the interpreter: correctness against torch, and interpreter times."""
    rows = []
    for family in args.kernels:
        problem = make_problem(family, 1, 20, 1, 4, 2, 3, "cpu")  # T = 20: two chunks of 16
        if problem is None:
            rows.append({"family": family, "skipped": SKIPPED_BANK, "ok": True})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            continue
        inputs, fast, ref, _, _, desc = problem
        row = dict(desc)
        row["max_abs_error"] = max_error(fast, ref, inputs)
        row["interpreter_fwdbwd_s"] = time_fn(fast, inputs, True, 0, 1, lambda: None)
        row["torch_fwdbwd_s"] = time_fn(ref, inputs, True, 0, 1, lambda: None)
        row["ok"] = row["max_abs_error"] < 1e-4
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    if cpu_sanity_asked(argv):
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    args = parse_args(argv)
    import torch

    from hf_ssm.ops import kernels

    if not kernels.AVAILABLE:
        print(f"bench_kernels: the Triton kernels are unavailable: {kernels.UNAVAILABLE_REASON}", file=sys.stderr)
        return 2
    meta = {
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "python": platform.python_version(),
        "argv": sys.argv[1:] if argv is None else list(argv),
    }
    if torch.cuda.is_available() and not args.cpu_sanity:
        meta.update(mode="cuda", device=torch.cuda.get_device_name())
        rows, target = run_gpu(args)
        report = {"meta": meta, "results": rows, "targets": target}
    elif args.cpu_sanity:
        meta.update(
            mode="cpu-interpreter-sanity",
            device=platform.processor() or platform.machine(),
            note="Triton interpreter on CPU, tiny shapes: a correctness pass; the times are not performance numbers",
        )
        rows = run_cpu_sanity(args)
        report = {"meta": meta, "results": rows, "all_ok": all(r["ok"] for r in rows)}
    else:
        print(
            "bench_kernels: no CUDA GPU here. The Triton kernels are benchmarked on a GPU only; on a CPU they run in "
            "the Triton interpreter, whose times mean nothing. Run with --cpu_sanity for a tiny correctness pass.",
            file=sys.stderr,
        )
        return 2
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if report.get("all_ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
