"""benchmarks/bench_scaling.py at tiny lengths: it runs in seconds, prints its three tables with the growth ratio,
the targets and a verdict per row, skips an attention cell over the memory budget instead of running it, and
writes a JSON record with every registered mixer."""

from __future__ import annotations

import json
import subprocess
import sys

from hf_ssm.modeling.mixer_registry import mixer_names
from model_checks import BENCHMARKS, ROOT

SCRIPT = BENCHMARKS / "bench_scaling.py"


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def table_rows(stdout: str, title: str) -> list[list[str]]:
    """The cells of the Markdown table printed under `title` (header row included, separator dropped)."""
    lines = stdout.split(f"\n{title}\n", 1)[1].strip().splitlines()
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_tiny_run_prints_tables_and_verdicts_and_json_has_every_mixer(tmp_path):
    """`--lengths 64,128`: the time table has the growth ratio beside the ideal 2, the targets table a verdict
    ("met" or "MISSED") for every SSM row, and the JSON one record per registered mixer (PD-SSM twice) plus
    attention, each with a measured time and peak at both lengths, and the run's torch, threads and loads (the
    settings keep the key `threads` of the records written before --cpu_threads)."""
    out = tmp_path / "scaling.json"
    result = run_bench("--lengths", "64,128", "--rounds", "1", "--cpu_threads", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]

    header, *time_rows = table_rows(result.stdout, "fwd+bwd median (ms)")
    assert header[-2:] == ["t(128) / t(64)", "ideal"]
    assert all(row[-1] == "2" and float(row[-2]) > 0 for row in time_rows)
    header, *target_rows = table_rows(result.stdout, "targets (SSM mixers)")
    assert header == ["mixer", "t(128) / t(64)", "ratio <= 2.5", "peak at T = 128 (GiB)", "peak <= 8 GiB", "verdict"]
    verdicts = {row[0]: row[-1] for row in target_rows}
    assert verdicts.pop("attention (sdpa)") == "no target"
    assert verdicts and set(verdicts.values()) <= {"met", "MISSED"}

    record = json.loads(out.read_text())
    mixers = [row["mixer"] for row in record["results"]]
    assert sorted(set(mixers)) == sorted({*mixer_names(), "attention"})
    assert mixers.count("pd_ssm") == 2 and len(verdicts) == len(mixers) - 1
    widths = {row["state_width"] for row in record["results"] if row["mixer"] != "attention"}
    assert widths == {256}  # every SSM mixer at the state width 2 d of bench_pd.py
    for row in record["results"]:
        assert [cell["T"] for cell in row["cells"]] == [64, 128]
        assert all(cell["median_s"] > 0 and cell["peak_bytes"] >= 0 for cell in row["cells"]), row["label"]
    assert record["threads"] == 1 and record["torch"] and record["load_average_start"] and record["load_average_end"]
    assert record["settings"]["threads"] == 1 and "cpu_threads" not in record["settings"]


def test_attention_over_the_memory_budget_is_skipped_not_run(tmp_path):
    """An attention cell whose estimated peak exceeds --max_gib is marked "skipped: needs ~X GiB" (with the
    estimate and sdpa backend in the JSON) and not timed; the SSM rows beside it still run."""
    out = tmp_path / "scaling.json"
    result = run_bench(
        "--smoke", "--mixers", "attention,diag_lru", "--max_gib", "1e-6", "--cpu_threads", "1", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| attention (sdpa) | — | skipped: needs ~" in result.stdout
    attention, ssm = (next(r for r in json.loads(out.read_text())["results"] if r["mixer"] == m)
                      for m in ("attention", "diag_lru"))  # fmt: skip
    for cell in attention["cells"]:
        assert cell["skipped"].startswith("needs ~") and "median_s" not in cell
        assert cell["estimated_peak_bytes"] > 1e-6 * 2**30 and cell["sdpa_backend"]
    assert attention["growth_ratio"] is None and all("median_s" in cell for cell in ssm["cells"])


def test_bad_lengths_are_refused():
    """--lengths needs two increasing positive integers; anything else exits 2 naming the option."""
    result = run_bench("--lengths", "128,64")
    assert result.returncode == 2 and "--lengths must be" in result.stderr
