"""benchmarks/bench_pd.py: its targets (PD dictionary <= 3x, PD bank <= 1.2x diag_lru) are printed with a verdict in
its own output, per row and in a summary, so that a regression shows where the bench is run; the JSON is written
only when asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from model_checks import BENCHMARKS, ROOT

SCRIPT = BENCHMARKS / "bench_pd.py"
sys.path.insert(0, str(BENCHMARKS))

import bench_pd  # noqa: E402


def test_verdict_reads_the_ratio_against_each_target():
    """A ratio at or below a mixer's target is "met", above it "MISSED"; a mixer without a target (diag_lru, bd_lru)
    has "no target"."""
    assert bench_pd.TARGETS == {"pd dictionary": 3.0, "pd bank": 1.2}
    assert bench_pd.verdict("pd bank", 1.2) == "met"
    assert bench_pd.verdict("pd bank", 1.21) == "MISSED"
    assert bench_pd.verdict("pd dictionary", 2.9) == "met"
    assert bench_pd.verdict("pd dictionary", 3.5) == "MISSED"
    assert bench_pd.verdict("diag_lru", 1.0) == "no target"


def test_tiny_run_prints_targets_and_verdicts_and_writes_json_only_when_asked(tmp_path):
    """One tiny size (B, T, d, K) = (2, 32, 16, 4), one round, no memory table: every PD row of the table carries its
    target and a verdict (the floor row, the bank layer with its op replaced, none), the summary prints one line per
    target with its verdict, and --out writes a JSON whose rows hold the same targets and verdicts (without --out
    the run writes no file in its working directory)."""
    out = tmp_path / "pd.json"
    args = ["--sizes", "2,32,16,4", "--rounds", "1", "--mem_steps", "--cpu_threads", "1"]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {
        cells[5]: cells
        for cells in (line.strip("|").split("|") for line in run.stdout.splitlines() if line.startswith("| 2 | 32 |"))
    }
    rows = {label.strip(): [c.strip() for c in cells] for label, cells in rows.items()}
    assert rows["pd dictionary"][-2] == "<= 3x" and rows["pd bank"][-2] == "<= 1.2x"
    assert {rows[label][-1] for label in ("pd dictionary", "pd bank")} <= {"met", "MISSED"}
    assert rows["diag_lru"][-1] == "no target" and rows[bench_pd.FLOOR_LABEL][-1] == "no target"
    summary = run.stdout.split("Targets (fwd+bwd time / diag_lru's, wall clock):", 1)[1]
    lines = [line.strip() for line in summary.strip().splitlines()]
    assert [line.split(" <= ")[0] for line in lines] == ["pd dictionary", "pd bank"]
    assert all(line.endswith((": met", ": MISSED")) for line in lines)

    record = json.loads(out.read_text())
    by_mixer = {row["mixer"]: row for row in record["time"]}
    assert record["targets"] == {"pd dictionary": "fwd+bwd <= 3x diag_lru", "pd bank": "fwd+bwd <= 1.2x diag_lru"}
    for label in ("pd dictionary", "pd bank"):
        row = by_mixer[label]
        assert row["verdict"] == bench_pd.verdict(label, row["ratio_to_diag_lru"])
        assert row["cpu_median_s"] > 0

    plain = tmp_path / "plain"
    plain.mkdir()
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=plain, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert list(plain.iterdir()) == []
