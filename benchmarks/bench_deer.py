"""Benchmark: DEER (parallel Newton) vs the sequential loop for the LrcSSM-family mixers, forward + backward.

One LrcSSM mixer layer (and optionally the GRU / MGU / LSTM variants) on random input; for every length T it
times forward + backward with `lrc_solver="deer"` and with `lrc_solver="sequential"` (a plain autograd loop of
exact steps), reports the speed-up, the Newton iterations DEER used and max|y_deer - y_seq|. One run per cell
(after a short warm-up; each time is the best of `--repeats` passes, which filters out other processes on
a shared machine), so ratios are measured within one run on the same machine.

    python benchmarks/bench_deer.py --lengths 1024 4096 16384 --out bench_deer.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from hf_ssm.modeling.configuration_hybrid_ssm import HybridSSMConfig
from hf_ssm.modeling.mixer_lrc import LRC_MIXER_CLASSES
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384], help="sequence lengths T")
    p.add_argument("--mixers", nargs="+", default=["lrc_ssm"], choices=sorted(LRC_MIXER_CLASSES), help="cells to time")
    p.add_argument("--batch", type=int, default=4, help="batch size B")
    p.add_argument("--hidden_size", type=int, default=128, help="model width d")
    p.add_argument("--state_size", type=int, default=64, help="lrc_num_channels D")
    p.add_argument("--tol", type=float, default=1e-4, help="deer_tol")
    p.add_argument("--repeats", type=int, default=3, help="passes per measurement; the fastest is reported")
    p.add_argument("--cpu_threads", type=int, default=0, help="torch threads (0: torch's default)")
    refuse_options(p, RENAMED_OPTIONS["bench_deer"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def time_fwd_bwd(mixer, u: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Seconds for one forward + backward of a scalar loss of the output, and the output y."""
    mixer.zero_grad(set_to_none=True)
    x = u.detach().requires_grad_()
    start = time.perf_counter()
    y, _ = mixer(x)
    y.square().mean().backward()
    return time.perf_counter() - start, y.detach()


def main() -> None:
    args = parse_args()
    if args.cpu_threads > 0:
        torch.set_num_threads(args.cpu_threads)
    rows = []
    for name in args.mixers:
        config = HybridSSMConfig(
            hidden_size=args.hidden_size,
            num_hidden_layers=1,
            mixers=[name],
            lrc_num_channels=args.state_size,
            deer_tol=args.tol,
        )
        torch.manual_seed(args.seed)
        mixer = LRC_MIXER_CLASSES[name](config, 0)
        with torch.no_grad():  # the model's default init: N(0, 0.02) projections (HF _init_weights)
            mixer.in_proj.weight.normal_(0.0, config.initializer_range)
            mixer.out_proj.weight.normal_(0.0, config.initializer_range)
        warm = torch.randn(args.batch, 64, args.hidden_size)
        for solver in ("deer", "sequential"):
            mixer.solver = solver
            time_fwd_bwd(mixer, warm)
        for steps in args.lengths:
            u = torch.randn(args.batch, steps, args.hidden_size)
            times = {"deer": [], "sequential": []}
            for _ in range(args.repeats):  # interleaved, so a burst of outside load hits both alike
                for solver in times:
                    mixer.solver = solver
                    seconds, y = time_fwd_bwd(mixer, u)
                    times[solver].append(seconds)
                    if solver == "deer":
                        y_deer, info = y, mixer.last_solve_info
                    else:
                        y_seq = y
            t_deer, t_seq = min(times["deer"]), min(times["sequential"])
            row = {
                "mixer": name,
                "T": steps,
                "sequential_s": t_seq,
                "deer_s": t_deer,
                "speedup": t_seq / t_deer,
                "newton_iterations": info.iterations,
                "rejected": info.rejected,
                "residual": info.residual,
                "max_abs_diff": (y_deer - y_seq).abs().max().item(),
            }
            rows.append(row)
            print(f"done {name} T={steps}: {row['speedup']:.2f}x", flush=True)

    header = "| mixer | T | sequential fwd+bwd (s) | DEER fwd+bwd (s) | speed-up | Newton iterations | max abs diff |"
    print()
    print(
        f"B={args.batch}, d={args.hidden_size}, D={args.state_size}, deer_tol={args.tol}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}"
    )
    print(header)
    print("|" + "---|" * 7)
    for r in rows:
        print(
            f"| {r['mixer']} | {r['T']} | {r['sequential_s']:.3f} | {r['deer_s']:.3f} | {r['speedup']:.2f}x "
            f"| {r['newton_iterations']} | {r['max_abs_diff']:.1e} |"
        )
    if args.out:
        # `threads`, the records' key from before --cpu_threads, in its place: old and new records read alike
        meta = {("threads" if k == "cpu_threads" else k): v for k, v in vars(args).items() if k != "out"}
        meta.update(torch=torch.__version__, threads=torch.get_num_threads(), machine=platform.machine())
        with open(args.out, "w") as f:
            json.dump({"settings": meta, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
