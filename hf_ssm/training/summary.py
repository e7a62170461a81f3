"""results/state_tracking/summary.json: one record per trained seed, merged across runs.

A record is {task, mixer, recipe, seed, steps, cpu_seconds, test_accuracy_by_bucket, test_mean_accuracy} plus
`run` (the run folder), `train_seconds` (wall clock), `best_validation_accuracy`, `validation_curve` ([step,
validation accuracy] pairs, the learning curve) and `overrides` (every setting of the run that differs from its
recipe, e.g. {"extra_config": {"pd_ssm_diagonal": "magnitude"}}, so that a record names its exact variant). A run with restarts gives
one record per restart seed (best-of-N is reported beside, never instead). Records are keyed by (task, mixer,
recipe, seed, run): writing a run again replaces its records, any other run is appended. The file is rewritten
atomically (temporary file + os.replace) under an exclusive lock, so concurrent runs never lose records.

`merge_summary` serves every summary file of the package: the adapter experiment's results/adapter/summary.json
(hf_ssm.training.adapter_records) merges its records through it with its own key (run_dir, method, seed).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path

from .recipes import resolve_settings
from .state_tracking_settings import StateTrackingSettings

KEY = ("task", "mixer", "recipe", "seed", "run")


# Settings that identify a record by themselves (its key) or that change per seed; never listed as overrides.
NOT_OVERRIDES = frozenset({"task", "mixer", "seed", "recipe", "num_generators"})


def run_record(results: dict, recipe: str, run: str, overrides: dict | None = None) -> dict:
    """The summary record of one trained seed's results.json content (`overrides`: see recipe_overrides)."""
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
        **(
            {"far_accuracy_by_length": {str(b["min_length"]): b["accuracy"] for b in results["far"]["buckets"]}}
            if "far" in results
            else {}
        ),
        "best_validation_accuracy": results["validation"]["accuracy"],
        "train_seconds": results["train_seconds"],
        "validation_curve": [[h["step"], h["val_accuracy"]] for h in results.get("history", [])],
        "overrides": overrides or {},
        "run": run,
    }


def recipe_overrides(settings: dict, recipe: str) -> dict:
    """The entries of a run's settings.json content that differ from what `recipe` alone gives."""
    base = {**vars(StateTrackingSettings()), **resolve_settings(recipe, {})}
    return {k: v for k, v in settings.items() if k not in NOT_OVERRIDES and base.get(k) != v}


def run_records(results: dict, run_dir: str | Path, recipe: str) -> list[dict]:
    """Every seed of a run: the one run itself, or each restart's seed_<s>/results.json."""
    run_dir = Path(run_dir)
    folders = [run_dir] if "restarts" not in results else [run_dir / f"seed_{r['seed']}" for r in results["restarts"]]
    records = []
    for folder in folders:
        settings_file = folder / "settings.json"
        settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
        seed_results = results if folder == run_dir else json.loads((folder / "results.json").read_text())
        records.append(run_record(seed_results, recipe, str(folder), recipe_overrides(settings, recipe)))
    return records


def merge_summary(path: str | Path, records: list[dict], key: tuple[str, ...] = KEY, indent: int = 2) -> list[dict]:
    """Merge `records` into the JSON list at `path` (created if missing); returns the merged list.

    A record whose `key` fields equal a new record's is replaced; the others are kept. The read, merge and write
    happen under an exclusive lock on `<path>.lock` (never committed: .gitignore), so that runs merging into
    the same file at once keep each other's records."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = json.loads(path.read_text()) if path.is_file() else []
        if not isinstance(merged, list):
            raise ValueError(f"{path} must hold a JSON list of records, found {type(merged).__name__}")
        new_keys = {tuple(r[k] for k in key) for r in records}
        merged = [r for r in merged if tuple(r.get(k) for k in key) not in new_keys] + list(records)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(merged, f, indent=indent)
        os.replace(tmp, path)
    return merged
