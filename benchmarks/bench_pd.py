"""PD-SSM cost against diagonal and block-diagonal LRUs (BENCHMARKS.md), in one process.

1. Time: one mixer's forward + backward on random (B, T, d) input, for PD-SSM dictionary mode, PD-SSM bank mode,
   diag_lru and bd_lru (m = 4) at equal real state width W = 2 N (PD: H = 1 head of N complex states = 2N reals;
   the LRUs' lru_total_state_size counts reals). The repetitions are interleaved (every round runs every mixer once, in
   a rotating order) so that load from other processes hits all of them alike; the table gives the median per
   mixer and its ratio to diag_lru's median, in wall-clock time and in the process's CPU time (on a machine shared
   with other work the CPU time is the steadier of the two; with one thread it counts the work of this process only).
   Targets, printed with a verdict (met / MISSED) beside each row and in a summary at the end: PD dictionary at most
   3x diag_lru, PD bank at most 1.2x diag_lru, at every size (the verdict reads the wall-clock ratio). One more row,
   "pd, op replaced (floor)", is the bank layer with its op replaced by states = b + D: the cost of the layer around
   its op, and so the least ratio the bank target can reach.
2. Peak memory of the same fwd+bwd at T = 1k, 4k, 16k: the rise of the process's peak resident set during the
   step, from Linux's high-water mark (freed heap returned with malloc_trim and the mark reset through
   /proc/self/clear_refs before the step, VmHWM - VmRSS after).
   torch's CPU allocator does not cache, and large blocks are mmap-ed and returned on free, so this follows the
   live tensors closely (a slight over-estimate at worst). tracemalloc cannot see torch's allocations, and the
   torch profiler's memory events miss frees that happen outside an op (e.g. of a loop's temporaries).

    python benchmarks/bench_pd.py                      # both sizes, memory at 1k / 4k / 16k
    python benchmarks/bench_pd.py --rounds 3 --mem_steps 1024   # quicker
    python benchmarks/bench_pd.py --cpu_threads 1 --out results/bench_pd_1thread.json   # also writes the JSON
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from bench_common import peak_rss_rise

from hf_ssm import HybridSSMConfig
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.modeling.modeling_hybrid_ssm import SSM_MIXER_CLASSES
from hf_ssm.ops.pd import GeneratedOp
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS

MIXERS = [
    ("pd dictionary", "pd_ssm", {"pd_ssm_transition": "dictionary"}),
    ("pd bank", "pd_ssm", {"pd_ssm_transition": "bank"}),
    ("diag_lru", "diag_lru", {}),
    ("bd_lru m=4", "bd_lru", {"lru_group_size": 4}),
]
SIZES = [(8, 256, 128, 8), (2, 1024, 64, 8)]  # (B, T, d = N, K)
# fwd+bwd time / diag_lru's at every size: at most this (the mixers without an entry have no target)
TARGETS = {"pd dictionary": 3.0, "pd bank": 1.2}


# The PD bank layer with its op (P_t's generation, the scan, the straight-through backward) replaced by states =
# b + D: what the layer costs around its op (the projections, the two MLPs, D and the read-out). No target; the
# bank row minus this row is the op, and this row / diag_lru is the least ratio the bank target can reach.
FLOOR_LABEL = "pd, op replaced (floor)"


def _op_replaced(selection, matrices, dv, b, initial_state=None, mask=None, temperature=1.0):
    """states = b + D (B, T, H, N), every input of the op still in the graph (its gradients are zeros)."""
    states = b + dv + 0 * (selection.sum() + matrices.sum())
    return states, states[:, -1]


def make_floor_mixer(d: int, k: int) -> torch.nn.Module:
    """The bank layer of MIXERS whose op is `_op_replaced`."""
    mixer = make_mixer("pd_ssm", {"pd_ssm_transition": "bank"}, d, k)
    mixer.transition.op = GeneratedOp("pd_op_replaced", _op_replaced, None, "none")
    return mixer


def verdict(label: str, ratio: float) -> str:
    """The verdict on a wall-clock ratio to diag_lru: "met" / "MISSED" against TARGETS[label], or "no target"."""
    if label not in TARGETS:
        return "no target"
    return "met" if ratio <= TARGETS[label] else "MISSED"


def make_mixer(kind: str, overrides: dict, d: int, k: int) -> torch.nn.Module:
    """One layer of `kind`; PD-SSM as the paper's layer (PAPER_PD_SSM_LAYER), one head of N = d, with `overrides`."""
    fields = {**PAPER_PD_SSM_LAYER, "pd_ssm_num_heads": 1, "pd_ssm_head_state_size": d, **overrides}
    config = HybridSSMConfig(
        hidden_size=d,
        num_attention_heads=4,
        mixers=[kind],
        num_hidden_layers=1,
        pd_ssm_dict_size=k,
        lru_total_state_size=2 * d,
        scan_backend="torch",
        **fields,
    )
    torch.manual_seed(0)
    return SSM_MIXER_CLASSES[kind](config, 0)


def fwd_bwd(mixer, u):
    u = u.detach().requires_grad_()
    y, _ = mixer(u)
    y.pow(2).mean().backward()


def time_size(batch, steps, d, k, rounds):
    mixers = [(label, make_mixer(kind, extra, d, k)) for label, kind, extra in MIXERS]
    mixers.append((FLOOR_LABEL, make_floor_mixer(d, k)))
    u = torch.randn(batch, steps, d)
    times = {label: [] for label, _ in mixers}
    cpu_times = {label: [] for label, _ in mixers}
    for _, mixer in mixers:  # warm-up
        fwd_bwd(mixer, u)
    for r in range(rounds):
        for i in range(len(mixers)):
            label, mixer = mixers[(i + r) % len(mixers)]
            mixer.zero_grad(set_to_none=True)
            cpu_start, start = time.process_time(), time.perf_counter()
            fwd_bwd(mixer, u)
            times[label].append(time.perf_counter() - start)
            cpu_times[label].append(time.process_time() - cpu_start)
    return {label: (statistics.median(times[label]), statistics.median(cpu_times[label])) for label in times}


def peak_bytes(mixer, u) -> int:
    """Rise of the process's peak resident memory during one fwd_bwd (Linux; bench_common.peak_rss_rise)."""
    fwd_bwd(mixer, u[:, :64])  # one-time allocations (thread pools, autograd) outside the measurement
    mixer.zero_grad(set_to_none=True)
    return peak_rss_rise(lambda: fwd_bwd(mixer, u))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (each runs every mixer once)")
    parser.add_argument("--mem_steps", type=int, nargs="*", default=[1024, 4096, 16384], help="T of the memory table")
    parser.add_argument("--mem_batch", type=int, default=2)
    parser.add_argument("--mem_d", type=int, default=64, help="d = N of the memory table")
    parser.add_argument("--cpu_threads", type=int, default=torch.get_num_threads())
    refuse_options(parser, RENAMED_OPTIONS["bench_pd"])
    parser.add_argument(
        "--sizes",
        nargs="*",
        default=[",".join(map(str, size)) for size in SIZES],
        help="B,T,d,K of each timed size (default: the two sizes of the targets)",
    )
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    return parser


def main():
    args = build_parser().parse_args()
    torch.set_num_threads(args.cpu_threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    print(
        "\n| B | T | d = N | K | state width (reals) | mixer | fwd+bwd median (ms) | / diag_lru "
        "| CPU median (ms) | CPU / diag_lru | target | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    record = {"torch": torch.__version__, "threads": torch.get_num_threads(), "rounds": args.rounds}
    record["load_average_start"] = os.getloadavg()[0]
    record["targets"] = {label: f"fwd+bwd <= {t:g}x diag_lru" for label, t in TARGETS.items()}
    record["time"], record["peak_memory_mib"] = [], []
    for batch, steps, d, k in (tuple(int(v) for v in size.split(",")) for size in args.sizes):
        med = time_size(batch, steps, d, k, args.rounds)
        (base, base_cpu) = med["diag_lru"]
        for label, (t, cpu) in med.items():
            ratio, verdict_ = t / base, verdict(label, t / base)
            target = f"<= {TARGETS[label]:g}x" if label in TARGETS else "-"
            record["time"].append(
                dict(
                    B=batch, T=steps, d=d, N=d, K=k, mixer=label, median_s=t, ratio_to_diag_lru=ratio,
                    cpu_median_s=cpu, cpu_ratio_to_diag_lru=cpu / base_cpu, target=target, verdict=verdict_,
                )
            )  # fmt: skip
            print(
                f"| {batch} | {steps} | {d} | {k} | {2 * d} | {label} | {1000 * t:.1f} | {ratio:.2f}× "
                f"| {1000 * cpu:.1f} | {cpu / base_cpu:.2f}× | {target} | {verdict_} |"
            )
    if args.mem_steps:
        d, batch = args.mem_d, args.mem_batch
        print(f"\nPeak memory rise of one fwd+bwd (MiB), B = {batch}, d = N = {d}, K = 8 (VmHWM - VmRSS)")
        print("\n| T | " + " | ".join(label for label, _, _ in MIXERS) + " |")
        print("|---|" + "---|" * len(MIXERS))
        for steps in args.mem_steps:
            u = torch.randn(batch, steps, d)
            peaks = [peak_bytes(make_mixer(kind, extra, d, 8), u) / 2**20 for _, kind, extra in MIXERS]
            print(f"| {steps} | " + " | ".join(f"{p:.1f}" for p in peaks) + " |")
            record["peak_memory_mib"].append(
                dict(B=batch, T=steps, d=d, N=d, K=8, **{label: p for (label, _, _), p in zip(MIXERS, peaks)})
            )
    record["load_average_end"] = os.getloadavg()[0]
    print(f"\nload average at the end {record['load_average_end']:.1f}")
    print("\nTargets (fwd+bwd time / diag_lru's, wall clock):")
    for label, target in TARGETS.items():
        rows = [r for r in record["time"] if r["mixer"] == label]
        ratios = ", ".join(f"{r['ratio_to_diag_lru']:.2f}x at (B, T) = ({r['B']}, {r['T']})" for r in rows)
        met = all(r["verdict"] == "met" for r in rows)
        print(f"  {label} <= {target:g}x diag_lru: {ratios}: {'met' if met else 'MISSED'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
