"""Pieces the benchmark scripts share (imported by name: `python benchmarks/bench_*.py` puts benchmarks/ on the path)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable

import torch


def wall_times(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall-clock seconds of `repeats` calls of fn(), after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def print_table_head(title: str, columns: list[str]) -> None:
    """A Markdown section title and the header of its table."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as "0.8 0.9 1.2" (recorded beside every timing)."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_record() -> dict:
    """What every benchmark JSON starts with: machine, torch version and threads, load average at the start."""
    return {
        "machine": dict(platform=platform.platform(), processor=platform.processor()),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": load_average(),
    }
