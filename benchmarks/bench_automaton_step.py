"""One training step of the state-tracking driver's PD-SSM automaton layer (the `table` recipe), with the pure
automaton's O(N) straight-through path (hf_ssm/ops/pd/automaton.py) against the general path that forms the
whole (B, T, H, N, N) column softmax (docs/design.md §4.3), in one process, interleaved rounds.

Two shapes: the recipe's default layer (16 heads of N = 8, d = 256) on A5, and the modular-arithmetic layer of
the `table_curriculum` recipe of modular arithmetic (8 heads of N = 64, d = 16). A step is forward, backward and Adam on one
training batch of 64 sequences at the longest training length; the figure is the median CPU seconds per step.

    python benchmarks/bench_automaton_step.py --out results/bench_automaton_step.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hf_ssm.data import StateTrackingDataset, collate_state_tracking, get_task
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS
from hf_ssm.training.optimization import build_optimizer
from hf_ssm.training.state_tracking.driver import build_model
from hf_ssm.training.state_tracking.recipes import resolve_settings
from hf_ssm.training.state_tracking.settings import StateTrackingSettings

SHAPES = {
    "a5, 16 heads of N = 8, d = 256": dict(task="a5"),
    "modular_arithmetic, 8 heads of N = 64, d = 16": dict(
        task="modular_arithmetic", num_heads=8, state_size=64, hidden_size=16, pd_ssm_transition_init_scale=4.0,
        pd_ssm_output_init="normal", pd_ssm_output_trainable=True,
    ),
}  # fmt: skip
PATHS = {"automaton O(N)": PDSSMMixer.is_pure_automaton, "general O(N^2)": lambda self: False}


def step_seconds(shape: dict, general: bool, length: int, steps: int) -> float:
    """CPU seconds per training step (median of `steps`, after one warm-up step) of a fresh model of `shape`."""
    settings = StateTrackingSettings(**resolve_settings("table", shape))
    settings.validate()
    task = get_task(settings.task)
    batch = collate_state_tracking([StateTrackingDataset(task, 64, length, length, seed=0)[i] for i in range(64)])
    PDSSMMixer.is_pure_automaton = PATHS["general O(N^2)"] if general else PATHS["automaton O(N)"]
    try:
        model = build_model(settings)
        optimizer = build_optimizer(model, settings)
        times = []
        for _ in range(steps + 1):
            start = time.process_time()
            model(input_ids=batch["input_ids"], labels=batch["labels"]).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.process_time() - start)
    finally:
        PDSSMMixer.is_pure_automaton = PATHS["automaton O(N)"]
    return statistics.median(times[1:])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each times every shape and path)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--length", type=int, default=39, help="sequence length (modular arithmetic: odd)")
    parser.add_argument("--cpu_threads", type=int, default=1)
    refuse_options(parser, RENAMED_OPTIONS["bench_automaton_step"])
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    return parser


def main():
    args = build_parser().parse_args()
    torch.set_num_threads(args.cpu_threads)
    figures = {(s, p): [] for s in SHAPES for p in PATHS}
    for _ in range(args.rounds):
        for shape_name, shape in SHAPES.items():
            for path in PATHS:
                figures[shape_name, path].append(step_seconds(shape, path != "automaton O(N)", args.length, args.steps))
    rows = []
    print(f"| layer | path | CPU s / step (median of {args.rounds} rounds) | speed-up |\n|---|---|---|---|")
    for shape_name in SHAPES:
        general = statistics.median(figures[shape_name, "general O(N^2)"])
        for path in PATHS:
            median = statistics.median(figures[shape_name, path])
            rows.append(
                {"layer": shape_name, "path": path, "cpu_seconds_per_step": median, "rounds": figures[shape_name, path]}
            )
            print(f"| {shape_name} | {path} | {median:.3f} | {general / median:.2f}x |")
    if args.out:
        record = {
            "threads": args.cpu_threads,
            "batch": 64,
            "length": args.length,
            "torch": torch.__version__,
            "rows": rows,
        }
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()
