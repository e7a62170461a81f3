"""The README's figures and facts that other pages or the code also state agree with them: the headline table with
RESULTS.md's tables and the records in results/, the main job's figures in RESULTS.md and the quick start's spread
of them with its records, the output folder with the driver, and the mixer letters with the registry."""

from __future__ import annotations

import json
import re

from hf_ssm.modeling.mixer_registry import pattern_letters
from hf_ssm.training.state_tracking.recipes import default_recipe
from model_checks import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "RESULTS.md").read_text(encoding="utf-8")
RECORDS = json.loads((ROOT / "results" / "state_tracking" / "summary.json").read_text(encoding="utf-8"))
# the re-runs with the current code of each task's command (RESULTS.md §1), whose diag_lru is the main job's
REPRODUCED = json.loads((ROOT / "results" / "state_tracking" / "reproduced.json").read_text(encoding="utf-8"))
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
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
    and mixer, and the record of that run in results/state_tracking/summary.json, rounded to 0.1; the column says
    that they are one seed's digits, and which seed: the only record of each run is of that seed."""
    headline = markdown_table(README, "**Headline.**")
    baselines = markdown_table(RESULTS, "### Baselines")
    for row, (_, results_row, folder, task) in TASKS.items():
        shown = headline[row]["diag_lru / attention (seed 0)"].split(" / ")
        for cell, mixer in zip(shown, ("diag_lru", "attention")):
            run = f"runs/experiments/{folder}/{task}_{mixer}"
            assert cell == first_number(baselines[results_row][mixer]), (row, mixer)
            assert cell == record_percent(run), (row, mixer)
            assert [r["seed"] for r in RECORDS if r["run"] == run] == [0], (row, mixer)


def test_the_main_jobs_figures_agree_with_its_records():
    """RESULTS.md's "The README's main job" table gives the records of the run folder it cites."""
    section = RESULTS[RESULTS.index("### The README's main job") :]
    folder = re.search(r"\(run\s+`(\w+)`\)", section).group(1)
    table = markdown_table(section, "| mixer |")
    for mixer, label in (("pd_ssm", "PD-SSM"), ("diag_lru", "diag_lru")):
        for task, column in (("parity", "parity"), ("cycle_navigation", "cycle navigation")):
            run = f"runs/experiments/{folder}/{task}_{mixer}" + ("/seed_0" if mixer == "pd_ssm" else "")
            assert table[label][column] == record_percent(run), (mixer, task)


def main_job_records(mixer: str, task: str) -> list[dict]:
    """Every recorded run of the README's main job for `mixer` on `task` (summary.json and reproduced.json): the
    mixer's default recipe, nothing overridden but the restarts the driver records."""
    return [
        r
        for r in RECORDS + REPRODUCED
        if (r["mixer"], r["task"]) == (mixer, task)
        and r["recipe"] == default_recipe(mixer, task)
        and r["overrides"] == {"restarts": 1}
    ]


def percent_range(values) -> str:
    """ "lo–hi" of fractions, as percentages rounded to 0.1 (the README's en dash)."""
    return f"{100 * min(values):.1f}–{100 * max(values):.1f}"


def test_the_quick_start_gives_the_spread_of_the_main_jobs_records_not_one_runs_digits():
    """What the quick start says the main job gives is the spread over every record of that job (a user's machine,
    threads or seed give other digits, all at chance): PD-SSM's 100 %, how many runs and which seed, the range of
    diag_lru's length buckets on parity, of its cycle-navigation buckets past the first, of that first bucket and
    of its cycle-navigation mean, each rounded to 0.1."""
    script = (ROOT / "scripts" / "train_state_tracking.py").read_text(encoding="utf-8")
    assert re.search(r"DEFAULT_TASKS = (\[.*\])", script).group(1) == '["parity", "cycle_navigation"]'
    assert re.search(r"DEFAULT_MIXERS = (\[.*\])", script).group(1) == '["pd_ssm", "diag_lru"]'
    quick_start = " ".join(README[README.index("## Quick start") : README.index("## Mixers")].split())
    pd_ssm = main_job_records("pd_ssm", "parity") + main_job_records("pd_ssm", "cycle_navigation")
    assert pd_ssm and all(r["test_mean_accuracy"] == 1.0 for r in pd_ssm)
    assert "PD-SSM at 100 % on both tasks and diag_lru at chance" in quick_start
    parity, cycle = main_job_records("diag_lru", "parity"), main_job_records("diag_lru", "cycle_navigation")
    assert len(parity) == len(cycle) and {r["seed"] for r in parity + cycle} == {0}
    assert f"the job's {NUMBER_WORDS[len(cycle)]} recorded runs (seed 0," in quick_start
    buckets = [list(r["test_accuracy_by_bucket"].items()) for r in cycle]
    first = {b[0][0] for b in buckets}
    assert first == {"40-75"} and {b[1][0].split("-")[0] for b in buckets} == {"76"}
    parity_buckets = [a for r in parity for a in r["test_accuracy_by_bucket"].values()]
    assert f"holds {percent_range(parity_buckets)} % on parity (chance 50)" in quick_start
    past_first = [a for b in buckets for _, a in b[1:]]
    # "at chance": within 2 points of 50 % on parity and 5 points of 20 % on cycle navigation past the first bucket
    assert all(abs(a - 0.5) < 0.02 for a in parity_buckets) and all(abs(a - 0.2) < 0.05 for a in past_first)
    assert f"each from 76 on {percent_range(past_first)} % on cycle navigation (chance 20)" in quick_start
    first_bucket = percent_range([b[0][1] for b in buckets])
    assert f"cycle-navigation bucket 40–75, next to the training lengths, held more ({first_bucket} %)" in quick_start
    means = percent_range([r["test_mean_accuracy"] for r in cycle])
    assert f"lifts its mean over 40–256 to {means} %" in quick_start


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
