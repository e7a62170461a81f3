"""The commands the pages print use today's option spellings: every `--option` of a `python scripts/<script>.py`
command in README.md, RESULTS.md, docs/*.md, model_cards/*.md and the scripts' own docstrings is one the script's
parser lists (an old spelling would be refused with a usage error, hf_ssm/training/legacy_settings.py); the same for
a `python benchmarks/<bench>.py` command there, in BENCHMARKS.md and in the benchmarks' docstrings."""

from __future__ import annotations

import argparse
import importlib
import re
import sys

import pytest
from bench_scripts import BENCHES

from model_checks import BENCHMARKS, ROOT, load_script

# The scripts with a `build_parser`, whose options the pages cite.
SCRIPTS = (
    "pretrain",
    "finetune",
    "train_state_tracking",
    "train_adapter",
    "train_timeseries",
    "reference_automaton",
    "hybrid_ladder",
    "eval_nl_state_tracking",
    "demo_adapter",
    "make_model_card",
)
# a command runs on over lines ending in "\" (or "\\" in a docstring); the continuation is tried first, else the
# backslash would be read as a character and the command cut at the line's end
COMMAND = re.compile(r"python (?:-m )?scripts/(\w+)\.py((?:\\\\?\n|[^`\n])*)")
BENCH_COMMAND = re.compile(r"python (?:-m )?benchmarks/(\w+)\.py((?:\\\\?\n|[^`\n])*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def pages() -> list:
    return [
        *(ROOT / name for name in ("README.md", "RESULTS.md")),
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "model_cards").glob("*.md")),
        *(ROOT / "scripts" / f"{name}.py" for name in SCRIPTS),
    ]


def bench_pages() -> list:
    return [
        *(ROOT / name for name in ("README.md", "RESULTS.md", "BENCHMARKS.md")),
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "model_cards").glob("*.md")),
        *(BENCHMARKS / f"{name}.py" for name in BENCHES),
    ]


def cited_options(command=COMMAND, where_from=pages) -> dict[str, set[tuple[str, str]]]:
    """{script: {(option, where)}} of every command of the pages (`command`: the pattern, `where_from`: the pages)."""
    found: dict[str, set[tuple[str, str]]] = {}
    for page in where_from():
        text = page.read_text(encoding="utf-8")
        for match in command.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = f"{page.relative_to(ROOT)}:{line}"
            for option in OPTION.findall(match.group(2).split("#")[0]):
                found.setdefault(match.group(1), set()).add((option, where))
    return found


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_pages_cite_only_options_the_script_has(script):
    """Each cited option is a visible option of the script (not a hidden old spelling that refuses)."""
    parser = load_script(script).build_parser()
    options = {o for a in parser._actions if a.help is not argparse.SUPPRESS for o in a.option_strings}
    unknown = sorted((where, option) for option, where in cited_options().get(script, ()) if option not in options)
    assert unknown == []


@pytest.mark.parametrize("bench", BENCHES)
def test_the_pages_cite_only_options_the_benchmark_has(bench):
    """As above for a benchmark's commands (the old --threads of the benchmarks is such a hidden spelling)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # benchmarks import their siblings by name
    parser = importlib.import_module(bench).build_parser()
    options = {o for a in parser._actions if a.help is not argparse.SUPPRESS for o in a.option_strings}
    cited = cited_options(BENCH_COMMAND, bench_pages).get(bench, ())
    unknown = sorted((where, option) for option, where in cited if option not in options)
    assert cited and unknown == []


def test_the_pages_cite_the_training_scripts():
    """The check above reads the commands it should (the pattern still finds them)."""
    cited = cited_options()
    assert {"pretrain", "train_state_tracking", "train_adapter", "train_timeseries"} <= set(cited)
    assert any(option == "--base_model" for option, _ in cited["train_adapter"])
