"""The README's quick start: the test command a newcomer copies is the one CI runs, and the main job is one line."""

from __future__ import annotations

import re

from hf_ssm.training.state_tracking.settings import RESUME_SAFE_SETTINGS
from model_checks import ROOT

README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"
QUICK_START = re.compile(r"^## Quick start\n(.*?)^## ", re.MULTILINE | re.DOTALL)
BASH_BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def quick_start_commands() -> list[str]:
    """The bash blocks of the README's quick start, each as its text without the final newline."""
    section = QUICK_START.search(README.read_text(encoding="utf-8"))
    assert section, "README.md has no '## Quick start' section"
    return [block.strip() for block in BASH_BLOCK.findall(section.group(1))]


def test_quick_start_is_two_one_line_commands():
    """Exactly two commands: install + the main job, install + the tests; each one line a newcomer pastes."""
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands), commands
    main_job, tests = commands
    assert main_job.startswith("pip install ") and "python scripts/train_state_tracking.py" in main_job
    assert tests.startswith("pip install ") and tests.endswith("python -m pytest -q")


def test_ci_runs_the_readme_test_command_verbatim():
    """.ci/run runs the README's test command as one of its lines, unchanged, and nothing installs before it
    (so a package the tests need but the command forgets fails CI as it fails a newcomer)."""
    tests = quick_start_commands()[1]
    lines = [line.strip() for line in CI.read_text(encoding="utf-8").splitlines()]
    assert tests in lines, f".ci/run does not run the README's test command {tests!r}"
    before = lines[: lines.index(tests)]
    assert not any("pip install" in line for line in before if not line.startswith("#")), before


def test_readme_names_exactly_the_resume_safe_state_tracking_settings():
    """The README's list of settings a resumed state-tracking run may change is RESUME_SAFE_SETTINGS."""
    text = README.read_text(encoding="utf-8")
    found = re.search(r"`--resume` continues each run.*?may change only (.*?)[;.]", text, re.DOTALL)
    assert found, "README.md no longer lists the resume-safe settings of the state-tracking script"
    listed = set(re.findall(r"`--(\w+)`", found.group(1)))
    assert listed == set(RESUME_SAFE_SETTINGS), listed ^ set(RESUME_SAFE_SETTINGS)


# A command line that runs a repository file: "python scripts/x.py", "bash scripts/experiments/y.sh".
RUNS_A_FILE = re.compile(r"\b(?:python|bash)\s+((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))\b")


def test_every_command_in_the_results_pages_runs_a_committed_file():
    """README, RESULTS.md and BENCHMARKS.md cite commands that run files of the repository, never a gitignored
    `runs/` script (those are not there for the next reader), and every file they run exists."""
    problems = []
    for name in ("README.md", "RESULTS.md", "BENCHMARKS.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        for path in RUNS_A_FILE.findall(text):
            if path.startswith("runs/") or not (ROOT / path).is_file():
                problems.append(f"{name}: {path}")
    assert not problems, problems


def test_the_results_pages_stay_short_and_current():
    """RESULTS.md is the current results a newcomer reads in minutes, not a lab notebook (the history is in git and
    CHANGELOG.md): five sections in at most 300 lines (a figure's long plotting command lives in the docs), no
    session-log sections."""
    text = (ROOT / "RESULTS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for marker in ("Still running", "this session", "(issue "):
        assert marker not in text, marker
