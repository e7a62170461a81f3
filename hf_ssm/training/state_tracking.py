"""Train a hybrid model on a state-tracking task and measure length generalisation (docs/design.md §8).

The model is a `HybridSSMForTokenClassification` trained on every prefix label the task defines (a dense
signal), on lengths in [train_min, train_max]; it is evaluated on the answer at the last position of fresh
sequences in length buckets far past the training lengths.

Model selection: every `eval_every` steps the model is scored on a fixed validation set, either at the training
lengths (`validation_lengths="train"`) or at the test lengths (`"test"`, the protocol of the PD-SSM authors'
released code: the validation sequences are drawn with their own seed, never the test sequences). The weights
with the best validation accuracy are the ones tested and saved; training stops early once validation reaches
`target_accuracy` (after `min_steps`).

Resuming (`resume=True`) continues from the latest checkpoint only with the settings it was trained with, apart
from RESUME_SAFE_SETTINGS (checked before settings.json is rewritten); `train_seconds` includes the training time
before the interruption.
"""

from __future__ import annotations

import json
import shutil
import statistics
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ..data import StateTrackingDataset, collate_state_tracking
from ..data.state_tracking import supervised_labels
from ..modeling import HybridSSMForTokenClassification
from . import loop
from .checkpointing import atomic_save_dir, check_resume, check_resumed_settings, recorded_settings
from .optimization import build_optimizer, build_scheduler
from .plotting import pyplot, save_figure
from .state_tracking_evaluation import TEST_SEED, evaluate, evaluate_far_lengths
from .state_tracking_settings import (
    RESUME_SAFE_SETTINGS,
    VALIDATION_SEED,
    StateTrackingSettings,
    model_config,
)
from .tables import accuracy_cells, markdown_table


def file_test_buckets(lengths: list[int], count: int) -> list[tuple[int, int]]:
    """Test buckets of a word-problem test file: one per distinct length, or, with more than `count` distinct
    lengths, the non-empty ones of `length_buckets(shortest, longest, count)`."""
    distinct = sorted(set(lengths))
    if len(distinct) <= count:
        return [(n, n) for n in distinct]
    return [(a, b) for a, b in length_buckets(distinct[0], distinct[-1], count) if any(a <= n <= b for n in distinct)]


def length_buckets(low: int, high: int, count: int) -> list[tuple[int, int]]:
    """Split [low, high] into `count` contiguous integer ranges of (nearly) equal width."""
    edges = [round(low + (high - low + 1) * i / count) for i in range(count + 1)]
    buckets = [(edges[i], edges[i + 1] - 1) for i in range(count) if edges[i + 1] - 1 >= edges[i]]
    return buckets or [(low, high)]


def build_model(settings: StateTrackingSettings) -> HybridSSMForTokenClassification:
    config = model_config(settings)
    torch.manual_seed(settings.seed)
    model = HybridSSMForTokenClassification(config)
    if settings.embedding_init == "one_hot":  # token v -> e_v (validate() checked hidden_size >= the vocabulary)
        embedding = model.get_input_embeddings().weight
        with torch.no_grad():
            embedding.copy_(torch.eye(*embedding.shape, dtype=embedding.dtype))
    if settings.freeze_embedding:
        model.get_input_embeddings().weight.requires_grad_(False)  # stays at its init (saved like any weight)
    return model


def _batch(dataset: StateTrackingDataset, step: int, batch_size: int, rank: int = 0, world: int = 1) -> dict:
    """The deterministic batch of a training step (so a resumed run sees exactly the same data). Indices wrap
    around the dataset: a word-problem file's rows are cycled in file order, epoch after epoch (a generated
    dataset holds every step's sequences, so its indices never wrap)."""
    start = (step * world + rank) * batch_size
    return collate_state_tracking([dataset[(start + i) % len(dataset)] for i in range(batch_size)])


def training_data(task, settings: StateTrackingSettings, num_samples: int, step: int) -> StateTrackingDataset:
    """The training sequences step `step` draws from: lengths [train_min_length, the longest length of that step
    (settings.longest_training_length: the length curriculum)], the run's seed. Item i is the same random draw at
    every step, so with the curriculum off (or past it) this is one fixed dataset, as before the curriculum. A
    word-problem file run trains on its training file's rows (less the validation rows), whatever the step."""
    if settings.data_file:  # the training file's rows (the validation rows held out); no curriculum for files
        return settings.file_splits()[0]
    longest = settings.longest_training_length(step)
    return StateTrackingDataset(task, num_samples, settings.train_min_length, longest, seed=settings.seed)


BEST_WEIGHTS = "best_weights.pt"


def train_state_tracking(
    settings: StateTrackingSettings,
    run_dir: str | Path,
    accelerator=None,
    resume: bool = False,
    validated: bool = False,
):
    """Train one model; writes run_dir/{settings.json, results.json, accuracy_vs_length.png, model/, checkpoints/}.

    Returns the results dict (also written to results.json). `validated`: the caller has run `settings.validate()`
    (which builds a HybridSSMConfig) already; otherwise it runs here.
    """
    if not validated:
        settings.validate()
    accelerator, run_dir, found = loop.begin_run(settings, run_dir, resume, RESUME_SAFE_SETTINGS, accelerator)
    task = settings.build_task()
    files = settings.file_splits() if settings.data_file else None  # (train, validation, test) rows
    val_rows, test_rows = (None, None) if files is None else files[1:]
    model = build_model(settings)
    optimizer = build_optimizer(model, settings)
    scheduler = build_scheduler(optimizer, settings)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    num_train_samples = settings.max_steps * settings.batch_size * accelerator.num_processes
    checkpoints = run_dir / "checkpoints"
    start_step, history, seconds_before, cpu_seconds_before = 0, [], 0.0, 0.0
    best = loop.BestWeights({"accuracy": -1.0, "step": 0})  # the weights that will be tested and saved
    if found is not None:
        meta = loop.load_checkpoint(accelerator, found)
        start_step, history = meta["step"], meta["history"]
        seconds_before = meta.get("train_seconds", 0.0)  # the training time before the interruption
        cpu_seconds_before = meta.get("cpu_seconds", 0.0)
        if (found / BEST_WEIGHTS).is_file():
            best = loop.BestWeights.load(meta["best"], found, BEST_WEIGHTS)
        accelerator.print(f"resumed from {found} at step {start_step}")

    if test_rows is None:
        test_buckets = length_buckets(settings.test_min_length, settings.test_max_length, settings.num_buckets)
    else:
        test_buckets = file_test_buckets(test_rows.lengths, settings.num_buckets)
    if settings.validation_lengths == "train":
        val_buckets = [(settings.train_min_length, settings.train_max_length)]
    else:
        val_buckets = test_buckets
    clock = loop.Stopwatch(seconds_before, cpu_seconds_before)
    last = {}  # the loss of the latest step

    def train_step(step: int) -> None:
        train_data = training_data(task, settings, num_train_samples, step)
        batch = _batch(train_data, step, settings.batch_size, accelerator.process_index, accelerator.num_processes)
        out = model(
            input_ids=batch["input_ids"].to(accelerator.device),
            attention_mask=batch["attention_mask"].to(accelerator.device),
            labels=supervised_labels(batch, settings.supervision).to(accelerator.device),
        )
        loop.optimizer_step(accelerator, out.loss, optimizer, scheduler, model.parameters(), settings.grad_clip)
        last["loss"] = out.loss

    def validation(step: int) -> dict:
        unwrapped = accelerator.unwrap_model(model)
        val = evaluate(
            unwrapped, settings, val_buckets, VALIDATION_SEED, accelerator.device, settings.val_samples_per_bucket,
            **_file_rows(val_rows),
        )  # fmt: skip
        history.append({"step": step, "loss": last["loss"].item(), "val_accuracy": val["mean_accuracy"]})
        if val["mean_accuracy"] >= best.record["accuracy"]:  # ties: the later, longer-trained weights
            best.keep(unwrapped, {"accuracy": val["mean_accuracy"], "step": step})
        return {"loss": f"{last['loss'].item():.3f}", "val": f"{val['mean_accuracy']:.3f}"}

    def reached_target(step: int) -> bool:
        return history[-1]["val_accuracy"] >= settings.target_accuracy and step >= settings.min_steps

    def save(step: int) -> None:
        meta = {
            "step": step,
            "history": history,
            "best": best.record,
            "train_seconds": clock.seconds,
            "cpu_seconds": clock.cpu_seconds,
            "settings": asdict(settings),
        }
        loop.save_checkpoint(
            accelerator, checkpoints / f"step_{step}", meta, lambda tmp: best.save(tmp, BEST_WEIGHTS), keep=2
        )

    model.train()
    outcome = loop.run_training(
        accelerator, desc=f"{settings.task}/{settings.mixer}", start=start_step, total=settings.max_steps,
        train_unit=train_step, evaluate=validation, eval_every=settings.eval_every, should_stop=reached_target,
        save=save, save_every=settings.save_every,
    )  # fmt: skip
    train_seconds = clock.seconds
    cpu_seconds = clock.cpu_seconds  # this process's CPU time (all its threads), plus the time before a resume

    final_model = accelerator.unwrap_model(model)
    if best.state is not None:
        final_model.load_state_dict(best.state)
    test = evaluate(
        final_model, settings, test_buckets, TEST_SEED, accelerator.device, settings.eval_samples_per_bucket,
        **_file_rows(test_rows),
    )  # fmt: skip
    far = evaluate_far_lengths(final_model, settings, accelerator.device)
    results = {
        "task": settings.task,
        "mixer": settings.mixer,
        "pattern": settings.pattern,
        "parameters": sum(p.numel() for p in accelerator.unwrap_model(model).parameters()),
        "seed": settings.seed,
        "steps": outcome.units,
        "best_step": best.record["step"],
        "validation": {"lengths": settings.validation_lengths, "accuracy": best.record["accuracy"]},
        "stopped_early": outcome.stopped_early,
        "train_seconds": train_seconds,
        "cpu_seconds": cpu_seconds,
        "recipe": settings.recipe,
        "supervision": settings.supervision,
        "freeze_embedding": settings.freeze_embedding,
        "embedding_init": settings.embedding_init,
        "transition_lr_scale": settings.transition_lr_scale,
        "train_lengths": [settings.train_min_length, settings.train_max_length],
        "length_curriculum": [settings.length_curriculum_start, settings.length_curriculum_steps]
        if settings.length_curriculum_steps
        else None,
        "history": history,
        "test": test,
        **({"far": far} if far is not None else {}),
        # what the test scores and its chance level (a uniform guess over the classes, Task.chance_accuracy)
        "scored_positions": task.scored_positions,
        "chance_accuracy": task.chance_accuracy,
        "size_name": task.size_name,
        **_file_record(settings, task, files),
    }
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        atomic_save_dir(run_dir / "model", lambda tmp: final_model.save_pretrained(tmp))  # no checkpoint marker
        (run_dir / "results.json").write_text(json.dumps(results, indent=2))
        plot_accuracy_vs_length([results], run_dir / "accuracy_vs_length.png")
    return results


def _file_rows(rows) -> dict:
    """evaluate()'s keyword for a word-problem file's rows; none for a generated task (its call stays as it was)."""
    return {} if rows is None else {"rows": rows}


def _file_record(settings: StateTrackingSettings, task, files) -> dict:
    """What results.json says about a word-problem file run (nothing for a generated task)."""
    if files is None:
        return {}
    train, val, test = files
    return {
        "data_file": settings.data_file,
        "test_data_file": settings.test_data_file,
        "num_classes": task.num_classes,
        "dense_targets": task.labels_every_prefix,
        "rows": {"train": len(train), "validation": len(val), "test": len(test)},
    }


def train_with_restarts(
    settings: StateTrackingSettings, run_dir: str | Path, resume: bool = False, validated: bool = False
) -> dict:
    """Train `settings.restarts` seeds (`restart_seeds`: seed, seed + 1000, ...; run_dir/seed_<s>/ each) and keep
    the best by validation accuracy.

    Ties go to the earlier seed. Stops starting new seeds once one reaches `target_accuracy` on validation.
    run_dir gets the kept run's model/, results.json (with every restart listed under "restarts", and
    "train_seconds" summed over all of them) and accuracy_vs_length.png. With restarts == 1 this is exactly
    `train_state_tracking(settings, run_dir)`. The settings are validated once, here (not again per restart: a
    restart changes only the seed), or not at all with `validated` (the caller did).
    """
    from accelerate import PartialState

    if not validated:
        settings.validate()
    run_dir = Path(run_dir)
    if resume:
        check_resume_runs(settings, run_dir)  # every restart, before any trains
    if settings.restarts == 1:
        return train_state_tracking(settings, run_dir, resume=resume, validated=True)
    runs = []
    for seeded, seed_dir in _restart_runs(settings, run_dir):
        finished = seed_dir / "results.json"
        if resume and finished.is_file() and (seed_dir / "model").is_dir():
            runs.append(json.loads(finished.read_text()))  # done before the interruption
        else:
            runs.append(train_state_tracking(seeded, seed_dir, resume=resume, validated=True))
        if runs[-1]["validation"]["accuracy"] >= settings.target_accuracy:
            break
    kept = max(runs, key=lambda r: (r["validation"]["accuracy"], -r["seed"]))
    results = {
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
    if PartialState().is_main_process:
        source = run_dir / f"seed_{kept['seed']}" / "model"
        atomic_save_dir(run_dir / "model", lambda tmp: shutil.copytree(source, tmp, dirs_exist_ok=True))
        (run_dir / "settings.json").write_text(json.dumps(asdict(settings), indent=2))
        (run_dir / "results.json").write_text(json.dumps(results, indent=2))
        plot_accuracy_vs_length([results], run_dir / "accuracy_vs_length.png")
    return results


# Restart r of a run with seed s trains seed s + r * RESTART_SEED_STRIDE: runs of consecutive seeds (0, 1, 2, ...)
# then never share a restart, so R restarts of 5 seeds are 5 R different trainings. (Earlier versions'
# restart r trained seed s + r: seed 0's second restart was seed 1's first, the same training, so "5 of 5 seeds" counted it
# twice.)
RESTART_SEED_STRIDE = 1000


def restart_seeds(seed: int, restarts: int) -> list[int]:
    """The seeds a run's restarts train, in order: seed, seed + 1000, seed + 2000, ..."""
    return [seed + r * RESTART_SEED_STRIDE for r in range(restarts)]


def _restart_runs(settings: StateTrackingSettings, run_dir: Path) -> list[tuple[StateTrackingSettings, Path]]:
    """(settings, folder) of every restart: the seeds of `restart_seeds`, each in run_dir/seed_<s>/."""
    seeded = [replace(settings, seed=s, restarts=1) for s in restart_seeds(settings.seed, settings.restarts)]
    return [(s, run_dir / f"seed_{s.seed}") for s in seeded]


def check_resume_runs(settings: StateTrackingSettings, run_dir: str | Path) -> None:
    """ValueError unless `train_with_restarts(settings, run_dir, resume=True)` continues every restart with the
    settings it was trained with (apart from RESUME_SAFE_SETTINGS): finished ones (kept as they are) and
    interrupted ones (continued from their checkpoint)."""
    run_dir = Path(run_dir)
    if settings.restarts == 1:
        check_resume(settings, run_dir, RESUME_SAFE_SETTINGS)
        return
    for seeded, seed_dir in _restart_runs(settings, run_dir):
        if (seed_dir / "results.json").is_file() and (recorded := recorded_settings(seed_dir)) is not None:
            check_resumed_settings(seeded, recorded, RESUME_SAFE_SETTINGS, seed_dir)
        else:
            check_resume(seeded, seed_dir, RESUME_SAFE_SETTINGS)


def plot_accuracy_vs_length(all_results: list[dict], path: str | Path) -> None:
    """One line per (task, mixer): last-position accuracy against the bucket's mean length."""
    plt = pyplot()

    tasks = sorted({r["task"] for r in all_results})
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for r in (r for r in all_results if r["task"] == task):
            xs = [(b["min_length"] + b["max_length"]) / 2 for b in r["test"]["buckets"]]
            ax.plot(xs, [b["accuracy"] for b in r["test"]["buckets"]], marker="o", label=r["mixer"])
        ax.axvspan(*all_results[0]["train_lengths"], color="grey", alpha=0.15, label="train lengths")
        first = next(r for r in all_results if r["task"] == task)
        scored = "accuracy over labelled positions" if first.get("scored_positions") == "labelled" else None
        ax.set(title=task, xlabel=first.get("size_name", "length").replace("length", "sequence length"),
               ylabel=scored or "last-position accuracy", ylim=(0, 1.02))  # fmt: skip
        if "chance_accuracy" in first:
            ax.axhline(first["chance_accuracy"], color="black", linestyle=":", label="chance")
        ax.legend()
    save_figure(fig, path)


def results_table(all_results: list[dict]) -> str:
    """Markdown table: one row per run, one column per test length bucket."""
    buckets = [f"{b['min_length']}-{b['max_length']}" for b in all_results[0]["test"]["buckets"]]
    header = ["task", "mixer", "params", "seed", "steps", "train s", *buckets, "mean"]
    rows = [
        [r["task"], r["mixer"], r["parameters"], _seed_cell(r), r["steps"], f"{r['train_seconds']:.0f}"]
        + [*accuracy_cells(r["test"]["buckets"]), f"{100 * r['test']['mean_accuracy']:.1f}"]
        for r in all_results
    ]
    return markdown_table(header, rows)


def seeds_table(all_results: list[dict]) -> str:
    """Markdown table of a run over several seeds: one row per task and mixer, the test mean accuracy of every
    seed (the kept restart's seed in brackets where a restart was kept), their mean ± sample std, the far lengths'
    accuracy where tested, and the CPU seconds of each seed (restarts included)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for result in all_results:
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
