"""results/state_tracking/summary.json: one record per trained seed, merged across runs (issue 14).

A record is {task, mixer, recipe, seed, steps, cpu_seconds, test_accuracy_by_bucket, test_mean_accuracy} plus
`run` (the run folder), `train_seconds` (wall clock) and `best_validation_accuracy`. A run with restarts gives
one record per restart seed (best-of-N is reported beside, never instead). Records are keyed by (task, mixer,
recipe, seed, run): writing a run again replaces its records, any other run is appended. The file is rewritten
atomically (temporary file + os.replace) under an exclusive lock, so concurrent runs never lose records.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path

KEY = ("task", "mixer", "recipe", "seed", "run")


def run_record(results: dict, recipe: str, run: str) -> dict:
    """The summary record of one trained seed's results.json content."""
    return {
        "task": results["task"],
        "mixer": results["mixer"],
        "recipe": recipe,
        "seed": results["seed"],
        "steps": results["steps"],
        "cpu_seconds": results["cpu_seconds"],
        "test_accuracy_by_bucket": {
            f"{b['min_length']}-{b['max_length']}": b["accuracy"] for b in results["test"]["buckets"]
        },
        "test_mean_accuracy": results["test"]["mean_accuracy"],
        "best_validation_accuracy": results["validation"]["accuracy"],
        "train_seconds": results["train_seconds"],
        "run": run,
    }


def run_records(results: dict, run_dir: str | Path, recipe: str) -> list[dict]:
    """Every seed of a run: the one run itself, or each restart's seed_<s>/results.json."""
    run_dir = Path(run_dir)
    if "restarts" not in results:
        return [run_record(results, recipe, str(run_dir))]
    seeds = [json.loads((run_dir / f"seed_{r['seed']}" / "results.json").read_text()) for r in results["restarts"]]
    return [run_record(r, recipe, str(run_dir / f"seed_{r['seed']}")) for r in seeds]


def merge_summary(path: str | Path, records: list[dict]) -> list[dict]:
    """Merge `records` into the JSON list at `path` (created if missing); returns the merged list."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = json.loads(path.read_text()) if path.is_file() else []
        if not isinstance(merged, list):
            raise ValueError(f"{path} must hold a JSON list of records, found {type(merged).__name__}")
        new_keys = {tuple(r[k] for k in KEY) for r in records}
        merged = [r for r in merged if tuple(r.get(k) for k in KEY) not in new_keys] + list(records)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(merged, f, indent=2)
        os.replace(tmp, path)
    return merged
