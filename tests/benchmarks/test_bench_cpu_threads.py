"""The benchmarks name torch's CPU thread count --cpu_threads, as bench_lm.py and the scripts do: the old --threads is
refused with a usage error naming it, and a command recorded with --threads reads as --cpu_threads (upgrade_argv).
Only the parsers run here, never a benchmark."""

from __future__ import annotations

import argparse
import importlib
import sys

import pytest
import torch

from hf_ssm.training.legacy_settings import RENAMED_OPTIONS, upgrade_argv
from model_checks import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

# benchmark -> its --cpu_threads default as it was under --threads (None: torch's thread count when the parser is built)
DEFAULTS = {
    "bench_pd": None,
    "bench_hybrid": 1,
    "bench_compile": 0,
    "bench_deer": 0,
    "bench_scaling": 0,
    "bench_lru": None,
    "bench_automaton_step": 1,
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_threads_is_refused_naming_cpu_threads(name, capsys):
    """--threads exits 2 with "--threads was renamed: use --cpu_threads"; --cpu_threads reads an int with the old
    default; the refused spelling stays out of --help."""
    parser = importlib.import_module(name).build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--threads", "1"])
    assert exit_info.value.code == 2 and "--threads was renamed: use --cpu_threads" in capsys.readouterr().err
    assert parser.parse_args(["--cpu_threads", "2"]).cpu_threads == 2
    default = torch.get_num_threads() if DEFAULTS[name] is None else DEFAULTS[name]
    assert parser.parse_args([]).cpu_threads == default
    visible = {o for a in parser._actions if a.help is not argparse.SUPPRESS for o in a.option_strings}
    assert "--cpu_threads" in visible and "--threads" not in visible


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_a_recorded_threads_command_reads_as_cpu_threads(name):
    assert upgrade_argv(name, ["--threads", "1", "--out", "x.json"]) == ["--cpu_threads", "1", "--out", "x.json"]


def test_no_benchmark_takes_threads():
    """Every benchmark that sets torch's threads from an option is in the table above and in RENAMED_OPTIONS (a new
    one spelled --threads would fail here)."""
    spelled_old = sorted(p.stem for p in BENCHMARKS.glob("*.py") if '"--threads"' in p.read_text(encoding="utf-8"))
    assert spelled_old == []
    takes_cpu_threads = {p.stem for p in BENCHMARKS.glob("*.py") if '"--cpu_threads"' in p.read_text(encoding="utf-8")}
    assert takes_cpu_threads == {*DEFAULTS, "bench_lm"}
    refuse_threads = {name for name, renamed in RENAMED_OPTIONS.items() if renamed.get("--threads") == "--cpu_threads"}
    assert {name for name in refuse_threads if name.startswith("bench_")} == takes_cpu_threads
