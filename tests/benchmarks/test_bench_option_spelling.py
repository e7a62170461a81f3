"""Every benchmark option is spelled as the package's other command lines spell theirs, words joined by underscores
(--new_tokens), one spelling an option. The dashed spellings the benchmarks took before (bench_scaling took both for
four options) are refused with a usage error naming the new one, keep their dest and default, and a command recorded
with them reads in the new spellings (upgrade_argv). Only the parsers run here, never a benchmark."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest
from bench_scripts import BENCHES

from hf_ssm.training.cli import RefusedOption
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS, upgrade_argv
from model_checks import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

# benchmark -> {old dashed spelling: (new spelling, its default, unchanged)}
RENAMED = {
    "bench_compile": {
        "--new-tokens": ("--new_tokens", 32),
        "--decode-rounds": ("--decode_rounds", 9),
        "--train-length": ("--train_length", 1024),
        "--train-rounds": ("--train_rounds", 5),
    },
    "bench_deer": {"--hidden-size": ("--hidden_size", 128), "--state-size": ("--state_size", 64)},
    "bench_hybrid": {
        "--train-lengths": ("--train_lengths", [1024, 4096]),
        "--train-rounds": ("--train_rounds", 5),
        "--new-tokens": ("--new_tokens", 32),
        "--decode-rounds": ("--decode_rounds", 5),
    },
    "bench_kernels": {"--dict-size": ("--dict_size", 16), "--cpu-sanity": ("--cpu_sanity", False)},
    "bench_lru": {"--scan-repeats": ("--scan_repeats", 10), "--seq-repeats": ("--seq_repeats", 3)},
    "bench_pd": {
        "--mem-steps": ("--mem_steps", [1024, 4096, 16384]),
        "--mem-batch": ("--mem_batch", 2),
        "--mem-d": ("--mem_d", 64),
    },
    "bench_scaling": {
        "--hidden-size": ("--hidden_size", 128),
        "--max-gib": ("--max_gib", 8.0),
        "--max-seconds": ("--max_seconds", 0.0),
        "--scan-backend": ("--scan_backend", "auto"),
    },
}
CASES = [(name, old, new, default) for name, renamed in RENAMED.items() for old, (new, default) in renamed.items()]


def build_parser(name: str) -> argparse.ArgumentParser:
    return importlib.import_module(name).build_parser()


def visible_options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions if a.help is not argparse.SUPPRESS for o in a.option_strings}


def test_every_benchmark_with_options_is_checked():
    """The list above is every benchmarks/*.py that adds an argument (a new benchmark is checked once listed)."""
    takes_options = {p.stem for p in BENCHMARKS.glob("*.py") if "add_argument(" in p.read_text(encoding="utf-8")}
    assert takes_options == set(BENCHES)


@pytest.mark.parametrize("name, old, new, default", CASES)
def test_a_dashed_spelling_is_refused_naming_the_new_one(name, old, new, default, capsys):
    """The old spelling exits 2 with "<old> was renamed: use <new>" and stays out of --help; the new one sets the
    attribute the old one set, with the old default."""
    parser = build_parser(name)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([old, "1"])
    assert exit_info.value.code == 2 and f"{old} was renamed: use {new}" in capsys.readouterr().err
    assert new in visible_options(parser) and old not in visible_options(parser)
    action = parser._option_string_actions[new]
    assert action.option_strings == [new]
    assert action.dest == old[2:].replace("-", "_") and action.default == default


@pytest.mark.parametrize("name, old, new, default", CASES)
def test_a_recorded_dashed_command_reads_in_the_new_spelling(name, old, new, default):
    assert upgrade_argv(name, [old, "1", "--out", "x.json"]) == [new, "1", "--out", "x.json"]


def test_the_renames_are_recorded_with_the_other_renamed_options():
    """The table above is RENAMED_OPTIONS's benchmark entries less the earlier --threads -> --cpu_threads."""
    recorded = {
        name: {old: new for old, new in renamed.items() if old != "--threads"}
        for name, renamed in RENAMED_OPTIONS.items()
        if name.startswith("bench_")
    }
    expected = {name: {old: new for old, (new, _) in renamed.items()} for name, renamed in RENAMED.items()}
    assert {name: renamed for name, renamed in recorded.items() if renamed} == expected


@pytest.mark.parametrize("name", BENCHES)
def test_every_option_is_one_spelling_with_underscores(name):
    """No option the parser accepts has a dash inside its name, none has a second spelling, and every option it hides
    is an old spelling it refuses (RENAMED_OPTIONS)."""
    parser = build_parser(name)
    accepted = [a for a in parser._actions if not isinstance(a, RefusedOption)]
    assert [o for a in accepted for o in a.option_strings if "-" in o.lstrip("-")] == []
    assert [a.option_strings for a in accepted if len([o for o in a.option_strings if o.startswith("--")]) > 1] == []
    hidden = {o for a in parser._actions if a.help is argparse.SUPPRESS for o in a.option_strings}
    refused = {o for a in parser._actions if isinstance(a, RefusedOption) for o in a.option_strings}
    assert hidden == refused == set(RENAMED_OPTIONS.get(name, {}))


def test_bench_kernels_reads_cpu_sanity_before_triton_is_imported():
    """bench_kernels's parser imports hf_ssm (and triton with it) for its refusals, and TRITON_INTERPRET must be set
    before triton is imported: main reads --cpu_sanity first with a parser that imports nothing."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import bench_kernels as b; "
        "print(b.cpu_sanity_asked(['--kernels', 'pd', '--cpu_sanity', '--out', 'x.json']), "
        "b.cpu_sanity_asked(['--kernels', 'pd']), 'triton' in sys.modules, 'hf_ssm' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code, str(BENCHMARKS)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["True", "False", "False", "False"]
