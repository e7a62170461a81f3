"""The README's figures and facts that other pages or the code also state agree with them: the headline table with
RESULTS.md's tables and the records in results/, the main job's figures in RESULTS.md with its records, the output
folder with the driver, and the mixer letters with the registry."""

from __future__ import annotations

import json
import re

from hf_ssm.modeling.mixer_registry import pattern_letters
from model_checks import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "RESULTS.md").read_text(encoding="utf-8")
RECORDS = json.loads((ROOT / "results" / "state_tracking" / "summary.json").read_text(encoding="utf-8"))
# headline row -> (RESULTS.md PD-SSM row, RESULTS.md baseline row, the baseline runs' folder, task in the records)
TASKS = {
    "parity (50)": ("parity", "parity", "baselines_narrow", "parity"),
    "cycle navigation (20)": ("cycle navigation", "cycle navigation", "baselines_narrow", "cycle_navigation"),
    "A5, 2 generators (1.7)": ("A5, k = 2", "A5 (k = 2)", "baselines_narrow", "a5"),
    "S5, 4 generators (0.8)": ("S5, k = 4 (`table_wide`)", "S5 (k = 4), state width 256", "baselines_s5_k4", "s5"),
    "modular arithmetic (20)": (
        "modular arithmetic (`table_curriculum`)",
        "modular arithmetic",
        "baselines_narrow",
        "modular_arithmetic",
    ),
}


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


def test_headline_pd_ssm_figures_are_the_results_tables():
    """Each PD-SSM cell of the README's headline table is the mean ± std of that task's row in RESULTS.md §1."""
    headline = markdown_table(README, "**Headline.**")
    pd_rows = markdown_table(RESULTS, "### PD-SSM, each task with its recipe")
    for row, (results_row, *_) in TASKS.items():
        shown = re.search(r"\*\*([\d.]+ ± [\d.]+)\*\*", headline[row]["PD-SSM"]).group(1)
        assert shown == pd_rows[results_row]["mean ± std"], row


def test_headline_baselines_match_the_results_table_and_the_records():
    """Each diag_lru / attention cell of the headline table is RESULTS.md's baseline table's figure for that task
    and mixer, and the seed-0 record of that run in results/state_tracking/summary.json, rounded to 0.1."""
    headline = markdown_table(README, "**Headline.**")
    baselines = markdown_table(RESULTS, "### Baselines")
    for row, (_, results_row, folder, task) in TASKS.items():
        shown = headline[row]["diag_lru / attention"].split(" / ")
        for cell, mixer in zip(shown, ("diag_lru", "attention")):
            assert cell == first_number(baselines[results_row][mixer]), (row, mixer)
            assert cell == record_percent(f"runs/experiments/{folder}/{task}_{mixer}"), (row, mixer)


def test_the_main_jobs_figures_agree_with_its_records():
    """RESULTS.md's "The README's main job" table gives the records of the run folder it cites."""
    section = RESULTS[RESULTS.index("### The README's main job") :]
    folder = re.search(r"\(run\s+`(\w+)`\)", section).group(1)
    table = markdown_table(section, "| mixer |")
    for mixer, label in (("pd_ssm", "PD-SSM"), ("diag_lru", "diag_lru")):
        for task, column in (("parity", "parity"), ("cycle_navigation", "cycle navigation")):
            run = f"runs/experiments/{folder}/{task}_{mixer}" + ("/seed_0" if mixer == "pd_ssm" else "")
            assert table[label][column] == record_percent(run), (mixer, task)


def test_quick_start_names_the_folder_and_file_the_main_job_writes():
    """The quick start names the folder the driver writes by default (its prefix and time stamp format, read from
    scripts/train_state_tracking.py and training/cli.py) and the comparison file the suite writes there."""
    script = (ROOT / "scripts" / "train_state_tracking.py").read_text(encoding="utf-8")
    cli = (ROOT / "hf_ssm" / "training" / "cli.py").read_text(encoding="utf-8")
    prefix = re.search(r'run_folder\(args\.output_dir, "([^"]+)"\)', script).group(1)
    stamp = re.search(r"time\.strftime\('([^']+)'\)", cli).group(1)
    shown = stamp.replace("%Y", "YYYY").replace("%m", "MM").replace("%d", "DD")
    shown = shown.replace("%H", "HH").replace("%M", "MM").replace("%S", "SS")
    quick_start = README[README.index("## Quick start") : README.index("## Mixers")]
    assert '"comparison.md"' in script
    assert f"`{prefix}<{shown}>/comparison.md`" in quick_start


def test_the_mixer_table_spells_out_every_pattern_letter():
    """The README's mixer table gives every pattern letter of HybridSSMConfig with the mixer the registry gives it."""
    table = markdown_table(README, "## Mixers")
    spelt = {}
    for names, row in table.items():
        mixers = re.findall(r"`(\w+)`", names)
        letters = [letter.strip() for letter in row["letter"].split(",")]
        assert len(mixers) == len(letters), names
        spelt.update(zip(letters, mixers))
    assert spelt == pattern_letters()
