"""A state-tracking run's results: its results.json (`run_results`; a run with restarts keeps the best one,
`kept_results`), written with its plot of accuracy against length (`write_results`), and
results/state_tracking/summary.json: one record per trained seed, merged across runs.

A record is {task, mixer, recipe, seed, steps, cpu_seconds, test_accuracy_by_bucket, test_mean_accuracy} plus `run`
(the run folder), `train_seconds` (wall clock), `best_validation_accuracy`, `validation_curve` ([step, validation
accuracy] pairs, the learning curve; a task mixture's task also has its own, `task_validation_curve`) and
`overrides` (every setting of the run that differs from its recipe, e.g. {"extra_config": {"pd_ssm_diagonal":
"magnitude"}}, so that a record names its exact variant). A run with restarts gives one record per restart seed
(best-of-N is reported beside, never instead). Records are keyed by (task, mixer, recipe, seed, run): writing a run
again replaces its records, any other run is appended. The file is rewritten atomically (temporary file +
os.replace) under an exclusive lock, so concurrent runs never lose records. A task mixture's run gives one record per
task (`component_results`: its `task` the task, `mixture` the mixture); a run with `test_ablations` adds
`ablation_mean_accuracy` ({mixer: the test mean with those layers zeroed}).

The summary file is merged through training/reports.py's `merge_summary` (`update_summary_json`), as the adapter
experiment's results/adapter/summary.json is with its own key. Beside the records: the results tables of a run
(`results_table`, `seeds_table`) and its plot of accuracy against length (`plot_accuracy_vs_length`).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..legacy_settings import upgrade_settings
from ..reports import accuracy_cells, markdown_table, merge_summary, pyplot, save_figure
from .recipes import resolve_settings
from .settings import RunPlan, StateTrackingSettings

KEY = ("task", "mixer", "recipe", "seed", "run")


# Settings that identify a record by themselves (its key) or that change per seed; never listed as overrides.
NOT_OVERRIDES = frozenset({"task", "mixer", "seed", "recipe", "num_generators"})


def run_results(
    settings: StateTrackingSettings, plan: RunPlan, run, outcome, test: dict, far, final_model, ablations: dict
) -> dict:
    """A run's results.json content: `run` the driver's run state (its best weights' record, history and clock),
    `outcome` its loop.LoopResult, `test` and `far` the test reports, `final_model` the tested model, unwrapped,
    `ablations` {mixer: the test with its layers zeroed} (`test_ablations`). A task mixture's `test` holds each
    task's report under "components", and "tasks" says what each task's test reads."""
    task = plan.task
    if len(plan.components) > 1:
        scoring = {"tasks": {c.task.name: _task_record(c.task, c.settings) for c in plan.components}}
    else:
        scoring = {k: v for k, v in _task_record(task, settings).items() if k != "train_lengths"}
    return {
        "task": settings.task,
        "mixer": settings.mixer,
        "pattern": settings.pattern,
        "parameters": sum(p.numel() for p in final_model.parameters()),
        "seed": settings.seed,
        "steps": outcome.units,
        "best_step": run.best.record["step"],
        "validation": {"lengths": settings.validation_lengths, "accuracy": run.best.record["accuracy"]},
        "stopped_early": outcome.stopped_early,
        "train_seconds": run.clock.seconds,
        "cpu_seconds": run.clock.cpu_seconds,  # this process's CPU time (all its threads), plus any before a resume
        "recipe": settings.recipe,
        "supervision": settings.supervision,
        "freeze_embedding": settings.freeze_embedding,
        "embedding_init": settings.embedding_init,
        "train_lengths": [settings.train_min_length, settings.train_max_length],
        "length_curriculum": [settings.length_curriculum_start, settings.length_curriculum_steps]
        if settings.length_curriculum_steps
        else None,
        "history": run.history,
        "test": test,
        **({"far": far} if far is not None else {}),
        **({"ablations": ablations} if ablations else {}),
        **scoring,
        **plan.file_record,
    }


def _task_record(task, settings: StateTrackingSettings) -> dict:
    """What the test of `task` scores and its chance level (a uniform guess over its classes, Task.chance_accuracy),
    and the lengths it trained on (`settings`: the run's, or a mixture component's)."""
    return {
        "scored_positions": task.scored_positions,
        "chance_accuracy": task.chance_accuracy,
        "size_name": task.size_name,
        "train_lengths": [settings.train_min_length, settings.train_max_length],
    }


def kept_results(runs: list[dict]) -> dict:
    """The results.json content of a run with restarts, from its restarts' `runs` (their results dicts, in order):
    the best one's, by validation accuracy (ties: the earlier seed), with every restart listed under "restarts" and
    the training times summed."""
    kept = max(runs, key=lambda r: (r["validation"]["accuracy"], -r["seed"]))
    return {
        **kept,
        "train_seconds": sum(r["train_seconds"] for r in runs),
        "cpu_seconds": sum(r["cpu_seconds"] for r in runs),
        "restarts": [
            {
                "seed": r["seed"],
                "validation_accuracy": r["validation"]["accuracy"],
                "test_mean_accuracy": r["test"]["mean_accuracy"],
                "steps": r["steps"],
                "train_seconds": r["train_seconds"],
            }
            for r in runs
        ],
    }


def write_results(run_dir: Path, results: dict) -> None:
    """Write a run's `results` to run_dir/results.json and its plot to run_dir/accuracy_vs_length.png."""
    (run_dir / "results.json").write_text(json.dumps(results, indent=2))
    plot_accuracy_vs_length([results], run_dir / "accuracy_vs_length.png")


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
        **({"mixture": results["mixture"]} if "mixture" in results else {}),
        **(
            {"ablation_mean_accuracy": {m: test["mean_accuracy"] for m, test in results["ablations"].items()}}
            if "ablations" in results
            else {}
        ),
        "best_validation_accuracy": results["validation"]["accuracy"],
        "train_seconds": results["train_seconds"],
        "validation_curve": [[h["step"], h["val_accuracy"]] for h in results.get("history", [])],
        **({"task_validation_curve": _task_curve(results)} if "mixture" in results else {}),
        "overrides": overrides or {},
        "run": run,
    }


def _task_curve(results: dict) -> list[list]:
    """[step, validation accuracy of this task] of a mixture's task (component_results), where recorded."""
    task = results["task"]
    return [[h["step"], h["val_accuracy_by_task"][task]] for h in results["history"] if "val_accuracy_by_task" in h]


def recipe_overrides(settings: dict, recipe: str) -> dict:
    """The entries of a run's settings.json content that differ from what `recipe` alone gives, so that
    `resolve_settings(recipe, {**the record's task, mixer, seed and generators, **overrides})` gives the run's
    settings back.

    A value the recipe derives from others (d = 2 H N, a warm-up fraction, W_P's rate) is listed also where it equals
    the recipe's own but what it derives from changed: 64 heads at hidden_size 512 under `hybrid_block`, whose 32
    heads give 512 and whose 64 would give 1,024."""
    defaults = vars(StateTrackingSettings())
    base = {**defaults, **resolve_settings(recipe, {})}
    overrides = {k: v for k, v in settings.items() if k not in NOT_OVERRIDES and base.get(k) != v}
    keys = {k: settings[k] for k in NOT_OVERRIDES - {"recipe"} if k in settings}  # the record's own fields
    resolved = {**defaults, **resolve_settings(recipe, {**keys, **overrides})}
    overrides.update((k, v) for k, v in settings.items() if k not in NOT_OVERRIDES and resolved.get(k) != v)
    return overrides


def component_results(results: dict) -> list[dict]:
    """A run's results as one results dict per task: the run's own, or for a task mixture one per component (its
    "task" the component, "mixture" the mixture, its test, far lengths and ablations the component's)."""
    if "tasks" not in results:
        return [results]
    out = []
    for name, scoring in results["tasks"].items():
        own = {k: v for k, v in results.items() if k not in ("tasks", "far", "ablations")}
        far = [b for b in results.get("far", {}).get("buckets", []) if b["task"] == name]
        own.update(task=name, mixture=results["task"], test=results["test"]["components"][name], **scoring)
        if far:
            own["far"] = {"buckets": far, "mean_accuracy": statistics.mean(b["accuracy"] for b in far)}
        if "ablations" in results:
            own["ablations"] = {m: test["components"][name] for m, test in results["ablations"].items()}
        out.append(own)
    return out


def run_records(results: dict, run_dir: str | Path, recipe: str) -> list[dict]:
    """Every seed of a run (the one run itself, or each restart's seed_<s>/results.json), one record per task it
    tested (`component_results`)."""
    run_dir = Path(run_dir)
    folders = [run_dir] if "restarts" not in results else [run_dir / f"seed_{r['seed']}" for r in results["restarts"]]
    records = []
    for folder in folders:
        settings_file = folder / "settings.json"
        settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
        settings = upgrade_settings("StateTrackingSettings", settings)  # a restart finished under the old names
        seed_results = results if folder == run_dir else json.loads((folder / "results.json").read_text())
        overrides = recipe_overrides(settings, recipe)
        records += [run_record(r, recipe, str(folder), overrides) for r in component_results(seed_results)]
    return records


def update_summary_json(path: str | Path, records: list[dict]) -> list[dict]:
    """Merge a run's records into the summary file at `path` (reports.merge_summary, keyed by KEY); returns the
    merged list."""
    return merge_summary(path, records, key=KEY)


def plot_accuracy_vs_length(all_results: list[dict], path: str | Path) -> None:
    """One line per (task, mixer), a task mixture's tasks each on its own: last-position accuracy against the
    bucket's mean length."""
    plt = pyplot()
    all_results = [r for results in all_results for r in component_results(results)]
    tasks = sorted({r["task"] for r in all_results})
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for r in (r for r in all_results if r["task"] == task):
            xs = [(b["min_length"] + b["max_length"]) / 2 for b in r["test"]["buckets"]]
            ax.plot(xs, [b["accuracy"] for b in r["test"]["buckets"]], marker="o", label=r["mixer"])
        first = next(r for r in all_results if r["task"] == task)
        ax.axvspan(*first["train_lengths"], color="grey", alpha=0.15, label="train lengths")
        scored = "accuracy over labelled positions" if first.get("scored_positions") == "labelled" else None
        ax.set(title=task, xlabel=first.get("size_name", "length").replace("length", "sequence length"),
               ylabel=scored or "last-position accuracy", ylim=(0, 1.02))  # fmt: skip
        if "chance_accuracy" in first:
            ax.axhline(first["chance_accuracy"], color="black", linestyle=":", label="chance")
        ax.legend()
    save_figure(fig, path)


def results_table(all_results: list[dict]) -> str:
    """Markdown table: one row per run and task (a task mixture's tasks each on their own), one column per test
    length bucket; runs whose buckets differ (a mixture's tasks) get a table each, one after the other."""
    layouts: dict[tuple, list[dict]] = {}
    for r in (r for results in all_results for r in component_results(results)):
        layouts.setdefault(tuple(f"{b['min_length']}-{b['max_length']}" for b in r["test"]["buckets"]), []).append(r)
    tables = []
    for buckets, results in layouts.items():
        header = ["task", "mixer", "params", "seed", "steps", "train s", *buckets, "mean"]
        rows = [
            [r["task"], r["mixer"], r["parameters"], _seed_cell(r), r["steps"], f"{r['train_seconds']:.0f}"]
            + [*accuracy_cells(r["test"]["buckets"]), f"{100 * r['test']['mean_accuracy']:.1f}"]
            for r in results
        ]
        tables.append(markdown_table(header, rows))
    return "\n\n".join(tables)


def seeds_table(all_results: list[dict]) -> str:
    """Markdown table of a run over several seeds: one row per task and mixer, the test mean accuracy of every
    seed (the kept restart's seed in brackets where a restart was kept), their mean ± sample std, the far lengths'
    accuracy where tested, and the CPU seconds of each seed (restarts included)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for result in (r for results in all_results for r in component_results(results)):
        groups.setdefault((result["task"], result["mixer"]), []).append(result)
    header = ["task", "mixer", "recipe", "test mean % per seed", "mean ± std", "far % (min over seeds)", "CPU s"]
    rows = []
    for (task, mixer), results in groups.items():
        means = [100 * r["test"]["mean_accuracy"] for r in results]
        far = [b for r in results if "far" in r for b in r["far"]["buckets"]]
        far_cells = {}
        for b in far:
            far_cells[b["min_length"]] = min(far_cells.get(b["min_length"], 100.0), 100 * b["accuracy"])
        rows.append(
            [
                task,
                mixer,
                results[0]["recipe"],
                " / ".join(f"{m:.2f}" + _kept_restart(r) for m, r in zip(means, results)),
                f"{statistics.mean(means):.2f} ± {statistics.stdev(means) if len(means) > 1 else 0.0:.2f}",
                " / ".join(f"{length}: {acc:.1f}" for length, acc in sorted(far_cells.items())) or "not tested",
                " / ".join(f"{r['cpu_seconds']:.0f}" for r in results),
            ]
        )
    return markdown_table(header, rows)


def _kept_restart(result: dict) -> str:
    """ " (seed 1004)" when the kept run is a restart, not the first seed of the run."""
    first = result.get("restarts", [{}])[0].get("seed", result["seed"])
    return f" (seed {result['seed']})" if result["seed"] != first else ""


def _seed_cell(result: dict) -> str:
    """The kept seed, and how many restarts it was chosen from."""
    tried = len(result.get("restarts", [])) or 1
    return f"{result['seed']} ({tried} tried)" if tried > 1 else str(result["seed"])
