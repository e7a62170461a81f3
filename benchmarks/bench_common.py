"""Pieces the benchmark scripts share (imported by name: `python benchmarks/bench_*.py` puts benchmarks/ on the path)."""

from __future__ import annotations

import ctypes
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


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_rise(fn: Callable[[], object]) -> int:
    """Rise (bytes) of the process's peak resident memory during one call of fn() (Linux).

    Freed heap goes back to the system first (glibc's malloc_trim, so that re-used memory counts again), the
    high-water mark is reset (echo 5 > /proc/self/clear_refs), then VmHWM after the call - VmRSS before it.
    torch's CPU allocator does not cache and large blocks are mmap-ed and returned on free, so this follows the
    live tensors closely (a slight over-estimate at worst); tracemalloc cannot see torch's allocations, and the
    torch profiler's memory events miss frees that happen outside an op.
    """
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) * 1024
