"""The README's figures and facts that other pages or the code also state agree with them: the headline table with
RESULTS.md's baseline table and the records in results/, the main job's figures, duration and output folder with
RESULTS.md, its records and the driver, and the mixer letters with the registry."""

from __future__ import annotations

import json
import re

from hf_ssm.modeling.mixer_registry import pattern_letters
from model_checks import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "RESULTS.md").read_text(encoding="utf-8")
RECORDS = json.loads((ROOT / "results" / "state_tracking" / "summary.json").read_text(encoding="utf-8"))
# the seed-0 records of the baseline suite the two tables show (one folder per task and mixer)
BASELINE_RUNS = "runs/exp14/baselines/"
# headline row -> (RESULTS.md baseline row, task in the records); headline column -> mixer
TASKS = {
    "parity (50)": ("parity", "parity"),
    "even pairs (50)": ("even pairs", "even_pairs"),
    "cycle navigation (20)": ("cycle navigation", "cycle_navigation"),
    "A5, 2 generators (1.7)": ("A5 (k = 2)", "a5"),
}
MIXERS = {"diag_lru": "diag_lru", "attention": "attention", "bd_lru (m = 4)": "bd_lru"}


def markdown_table(text: str, after: str) -> dict[str, dict[str, str]]:
    """The first markdown table after `after` in `text`: row label -> column header -> cell."""
    lines = text[text.index(after) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    header, body = rows[0], rows[2:]
    return {row[0]: dict(zip(header[1:], row[1:])) for row in body}


def first_number(cell: str) -> str:
    return re.match(r"\**([\d.]+)", cell).group(1)


def record_percent(run: str) -> str:
    (record,) = [r for r in RECORDS if r["run"] == run]
    return f"{100 * record['test_mean_accuracy']:.1f}"


def test_headline_baselines_match_the_results_table_and_the_records():
    """Each baseline cell of the README's headline table is RESULTS.md's baseline table's figure for that task and
    mixer, and the seed-0 record of that run in results/state_tracking/summary.json, rounded to 0.1."""
    headline = markdown_table(README, "**Headline.**")
    baselines = markdown_table(RESULTS, "### Baselines")
    assert set(headline) == set(TASKS), sorted(headline)
    for row, (results_row, task) in TASKS.items():
        for column, mixer in MIXERS.items():
            ours = headline[row][column]
            assert ours == first_number(baselines[results_row][column]), (row, column)
            assert ours == record_percent(f"{BASELINE_RUNS}{task}_{mixer}"), (row, column)


def test_the_main_jobs_figures_agree_in_readme_results_and_records():
    """The main job's diag_lru figures the README gives (headline caption and quick start) are RESULTS.md's "The
    README's main job" and the records of the run folder it cites; its duration is that section's real time."""
    section = RESULTS[RESULTS.index("### The README's main job") :]
    figures = re.search(r"diag_lru ([\d.]+) / ([\d.]+) \(", section).groups()
    folder = re.search(r"`(runs/[\w/]+)/\.\.\.`", section).group(1)
    records = tuple(record_percent(f"{folder}/{task}_diag_lru") for task in ("parity", "cycle_navigation"))
    assert figures == records
    assert f"{figures[0]} on\nparity, {figures[1]} on cycle navigation" in README
    assert f"diag_lru {figures[0]} / {figures[1]} on parity /\ncycle navigation" in README
    seconds = float(re.search(r"real ([\d.]+) s", section).group(1))
    assert f"about {round(seconds, -1):.0f} s on a quiet 2-core CPU" in README


def test_quick_start_names_the_folder_and_file_the_main_job_writes():
    """The quick start names the folder the driver writes by default (its prefix and time stamp format, read from
    scripts/train_state_tracking.py and training/cli.py) and the comparison file the suite writes there."""
    script = (ROOT / "scripts" / "train_state_tracking.py").read_text(encoding="utf-8")
    cli = (ROOT / "hf_ssm" / "training" / "cli.py").read_text(encoding="utf-8")
    prefix = re.search(r'run_folder\(args\.output_dir, "([^"]+)"\)', script).group(1)
    stamp = re.search(r"time\.strftime\('([^']+)'\)", cli).group(1)
    shown = stamp.replace("%Y", "YYYY").replace("%m", "MM").replace("%d", "DD")
    shown = shown.replace("%H", "HH").replace("%M", "MM").replace("%S", "SS")
    quick_start = README[README.index("## Quick start") : README.index("## Building and using a model")]
    assert f"`{prefix}<{shown}>/`" in quick_start
    assert '(out / "comparison.md")' in script and "`comparison.md`" in quick_start


def test_the_pattern_letters_are_spelt_out_where_the_readme_uses_them():
    """The README's `mixers="SASA"` example spells out every letter of HybridSSMConfig's patterns, each with the
    mixer the registry gives it."""
    start = README.index('mixers="SASA"')
    comment = " ".join(line.split("#", 1)[1] for line in README[start:].splitlines()[:2])
    spelt = dict(re.findall(r"\b([A-Z]) `?(\w+)`?", comment))
    assert spelt == {**pattern_letters(), "S": "ssm_mixer"}
