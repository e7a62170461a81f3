"""BD-LRU / H-LRU benchmarks (BENCHMARKS.md), printed as a Markdown table and written as JSON.

At equal recurrent state width W (default 256) and length T (default 4096), for diag_lru, bd_lru (m = 2, 4, 8),
h_lru (m = 2, 4) and pd_ssm (H = 4 heads x N = 64 complex states):
1. forward + backward time of the mixer layer (projections, gates and the parallel scan) on (B, T, d) input;
2. forward + backward time of the block scan alone, parallel (`block_scan`) vs the sequential loop
   (`hf_ssm.ops.block.reference.block_scan`), on the (A, b) the mixer produces, and their ratio.
Times are the best of several runs (--repeats, --scan_repeats, --seq_repeats; the median is in the JSON too).

    python benchmarks/bench_lru.py --out bench_lru.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics

import torch
from bench_common import wall_times

from hf_ssm import HybridSSMConfig
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.modeling.modeling_hybrid_ssm import SSM_MIXER_CLASSES
from hf_ssm.ops.block import block_scan, companion_matrices, reference
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS

# (mixer, m); pd_ssm has no block size (its state width is heads x N, see make_mixer)
CASES = [("diag_lru", 1), ("bd_lru", 2), ("bd_lru", 4), ("bd_lru", 8), ("h_lru", 2), ("h_lru", 4), ("pd_ssm", None)]


def timed(fn, repeats: int) -> dict:
    """Best and median wall time of fn() in seconds over `repeats` runs, after one warm-up.

    The table reports the best run: on a shared machine, other processes only ever add time.
    """
    times = wall_times(fn, repeats)
    return {"best": min(times), "median": statistics.median(times)}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def make_mixer(name: str, m: int | None, hidden: int, width: int) -> torch.nn.Module:
    config = HybridSSMConfig(
        **{**PAPER_PD_SSM_LAYER, "pd_ssm_num_heads": 4, "pd_ssm_head_state_size": width // 4},  # the paper's layer
        hidden_size=hidden,
        num_attention_heads=4,
        mixers=[name],
        num_hidden_layers=1,
        lru_total_state_size=width,
        lru_group_size=m or 1,
    )
    return SSM_MIXER_CLASSES[name](config, 0)


def mixer_forward_backward(mixer, u):
    u = u.detach().requires_grad_()
    y, _ = mixer(u)
    y.pow(2).mean().backward()


def scan_forward_backward(scan, A, b):
    A, b = A.detach().requires_grad_(), b.detach().requires_grad_()
    states, _ = scan(A, b)
    states.pow(2).mean().backward()


def run(args) -> list[dict]:
    rows = []
    u = torch.randn(args.batch, args.steps, args.hidden)
    for name, m in CASES:
        torch.manual_seed(0)
        mixer = make_mixer(name, m, args.hidden, args.width)
        row = {"mixer": name, "m": m, "state_width": args.width}
        row["mixer_fwd_bwd_s"] = timed(lambda mixer=mixer: mixer_forward_backward(mixer, u), args.repeats)
        if name != "pd_ssm":
            row["N"] = mixer.num_groups
            with torch.no_grad():
                A, b = mixer.scan_inputs(u)
                if mixer.scan_op == "companion_scan":  # the dense blocks the torch path scans
                    A, b = companion_matrices(A), torch.nn.functional.pad(b.unsqueeze(-1), (0, mixer.group_size - 1))
            row["scan_parallel_s"] = timed(lambda A=A, b=b: scan_forward_backward(block_scan, A, b), args.scan_repeats)
            row["scan_sequential_s"] = timed(
                lambda A=A, b=b: scan_forward_backward(reference.block_scan, A, b), args.seq_repeats
            )
            row["speedup"] = row["scan_sequential_s"]["best"] / row["scan_parallel_s"]["best"]
        else:
            row["N"] = f"{mixer.num_heads}x{mixer.head_state_size}"
        rows.append(row)
        print(f"  done: {name} m={m}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    def ms(value):
        return "–" if value is None else f"{1000 * value['best']:.1f}"

    lines = [
        "| mixer | m | N | state width | mixer fwd+bwd (ms) | scan parallel fwd+bwd (ms) | scan sequential fwd+bwd (ms) | parallel speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speedup = "–" if "speedup" not in r else f"{r['speedup']:.1f}×"
        lines.append(
            f"| {r['mixer']} | {r['m'] or '–'} | {r['N']} | {r['state_width']} | {ms(r['mixer_fwd_bwd_s'])} | "
            f"{ms(r.get('scan_parallel_s'))} | {ms(r.get('scan_sequential_s'))} | {speedup} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4096, help="sequence length T")
    parser.add_argument("--width", type=int, default=256, help="recurrent state width (N x m; pd_ssm: 4 heads x N)")
    parser.add_argument("--hidden", type=int, default=256, help="model width d")
    parser.add_argument("--batch", type=int, default=1, help="batch size B")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each mixer (best reported)")
    parser.add_argument("--scan_repeats", type=int, default=10, help="timed runs of the parallel scan")
    parser.add_argument("--seq_repeats", type=int, default=3, help="timed runs of the sequential loop")
    parser.add_argument("--cpu_threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    refuse_options(parser, RENAMED_OPTIONS["bench_lru"])
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    return parser


def main():
    args = build_parser().parse_args()
    torch.set_num_threads(args.cpu_threads)

    load_before = os.getloadavg()[0]
    rows = run(args)
    meta = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        # other processes on the machine distort timings: the 1-minute load average before and after the run
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "B": args.batch,
        "T": args.steps,
        "d": args.hidden,
        "repeats": {"mixer": args.repeats, "scan_parallel": args.scan_repeats, "scan_sequential": args.seq_repeats},
    }
    print(
        f"\nB={args.batch} T={args.steps} d={args.hidden}, torch {meta['torch']}, {meta['threads']} threads, "
        f"{meta['cpu']} ({meta['cpu_count']} cores), load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}\n"
    )
    print(table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
