"""Pieces the benchmark scripts share (imported by name: `python scripts/bench_*.py` puts scripts/ on the path)."""

from __future__ import annotations

import time
from collections.abc import Callable


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
