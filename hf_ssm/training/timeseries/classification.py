"""Train a hybrid model on a UEA / UCR classification dataset (the LrcSSM / PD-SSM setting, docs/design.md §6.7).

One run = one dataset, one mixer (or pattern), one seed: `HybridSSMForTimeSeriesClassification` (linear encoder
-> hybrid stack -> mean over real steps -> linear classifier) trained with AdamW on cross-entropy. After every
epoch the validation split is scored; the best epoch is the one with the highest validation accuracy (ties go
to the lower validation loss), training stops after `patience` epochs without a new best, and the test split is
scored once, with the best epoch's weights. `summarize` then reports mean ± std over seeds.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from ...data.timeseries import (
    MISSING_POLICIES,
    SPLIT_MODES,
    SYNTHETIC,
    TimeSeriesData,
    TimeSeriesSplit,
    check_synthetic,
    load_timeseries,
    synthetic_timeseries,
)
from ...modeling import HybridSSMConfig, HybridSSMForTimeSeriesClassification
from ...modeling.configuration_hybrid_ssm import ATTENTION, SSM_MIXERS, check_config_keys
from .. import loop
from ..checkpointing import atomic_save_dir
from ..loop import batch_ranges, eval_mode
from ..optimization import warmup_cosine_schedule
from ..reports import markdown_table, pyplot, save_figure
from ..settings_base import ConfigFieldSettings, DatasetSettings, TrainingSettings, check_numeric_settings
from ..stack import PAPER_PD_SSM_MODE, StackSettings, stack_config_fields, stack_pattern

BEST_WEIGHTS = "best_model.safetensors"
# Settings a resumed run may change (checkpointing.check_resume): when it checkpoints and how long it waits for a
# new best epoch; neither changes the model, the batches or the learning rate of any epoch (max_epochs would: it
# sets the length of the cosine schedule). Everything else must match the checkpoint's run.
RESUME_SAFE_SETTINGS = frozenset({"save_every", "patience"})
SYNTHETIC_SERIES = 32  # series generated for --dataset synthetic when --synthetic_series is not given


@dataclass
class TimeSeriesSettings(StackSettings, ConfigFieldSettings, DatasetSettings, TrainingSettings):
    """Everything one training run depends on (saved to the run folder as settings.json). The shared fields
    (optimisation, checkpoint cadence in epochs, seed, the model stack, extra_config, dataset) are declared in
    training/settings_base.py and training/stack.py."""

    DEFAULTS = {
        "dataset": "BasicMotions",
        "hidden_size": 32,
        "state_size": 16,
        "num_heads": 1,
        "batch_size": 8,
        "learning_rate": 5e-3,
        "weight_decay": 0.01,
        "save_every": 10,
    }
    HELP = {
        "dataset": f"a UEA / UCR name, folder or .ts file; '{SYNTHETIC}': generated series of --synthetic_shape",
        "mixer": f"one of {', '.join((*SSM_MIXERS, ATTENTION))}",
        "state_size": "time series: also the LRUs' total state and the LrcSSM cells' channels",
    }
    # PD-SSM: the paper's layer (heads and N are the settings' own) with a dictionary of K = 8
    CONFIG_DEFAULTS: ClassVar[dict] = {**PAPER_PD_SSM_MODE, "pd_ssm_dict_size": 8}

    data_dir: str | None = field(
        default=None, metadata={"help": "folder holding <dataset>/ or the .ts files (None: aeon's)"}
    )
    synthetic_shape: str | None = field(
        default=None,
        metadata={"help": f"with --dataset {SYNTHETIC}: LENGTH,CHANNELS,CLASSES, e.g. 17984,6,5 (EigenWorms' shape)"},
    )
    synthetic_series: int | None = field(
        default=None,
        metadata={"help": f"with --dataset {SYNTHETIC}: how many series, split 70/15/15 (default {SYNTHETIC_SERIES})"},
    )
    split: str = field(default="auto", metadata={"choices": SPLIT_MODES, "help": "how validation/test are made"})
    val_fraction: float = 0.15
    test_fraction: float = 0.15
    missing: str = field(default="raise", metadata={"choices": MISSING_POLICIES, "help": "'?' / NaN policy"})
    missing_indicators: bool = field(default=False, metadata={"help": "append the observed mask as channels"})
    max_epochs: int = field(default=50, metadata={"help": "training epochs at most"})
    patience: int = field(default=15, metadata={"help": "stop after this many epochs without a new best"})
    warmup_epochs: int = field(default=2, metadata={"help": "epochs of linear learning-rate warm-up"})

    def validate(self) -> None:
        check_numeric_settings(self, positive=("learning_rate",))
        if not self.dataset:
            raise ValueError(f"`dataset` must name a dataset (or {SYNTHETIC!r}), got {self.dataset!r}")
        self._validate_synthetic()
        if self.mixer not in (*SSM_MIXERS, ATTENTION):
            raise ValueError(f"`mixer` must be one of {[*SSM_MIXERS, ATTENTION]}, got {self.mixer!r}")
        if self.split not in SPLIT_MODES:
            raise ValueError(f"`split` must be one of {list(SPLIT_MODES)}, got {self.split!r}")
        if self.missing not in MISSING_POLICIES:
            raise ValueError(f"`missing` must be one of {list(MISSING_POLICIES)}, got {self.missing!r}")
        for name in ("hidden_size", "state_size", "num_heads", "lru_group_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        for name in ("max_epochs", "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        check_config_keys(self.extra_config, "--extra_config")
        model_config(self, input_channels=1, num_labels=2, max_length=1)  # config errors (pattern, sizes) now

    def _validate_synthetic(self) -> None:
        """--synthetic_shape / --synthetic_series belong to --dataset synthetic, and --data_dir does not."""
        if self.dataset != SYNTHETIC:
            for name in ("synthetic_shape", "synthetic_series"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"`{name}` is only read with --dataset {SYNTHETIC}, got --dataset {self.dataset!r}"
                    )
            return
        if self.synthetic_shape is None:
            raise ValueError(f"--dataset {SYNTHETIC} needs --synthetic_shape LENGTH,CHANNELS,CLASSES (e.g. 17984,6,5)")
        if self.data_dir is not None:
            raise ValueError(f"--dataset {SYNTHETIC} generates its series: --data_dir is not read (leave it out)")
        check_synthetic(self.synthetic_shape, self.series_count)

    @property
    def series_count(self) -> int:
        """How many synthetic series (--synthetic_series, default SYNTHETIC_SERIES)."""
        return SYNTHETIC_SERIES if self.synthetic_series is None else self.synthetic_series

    @property
    def label(self) -> str:
        """Short name of the model: the mixer, plus the pattern when it is not one plain layer."""
        return self.mixer if self.pattern == "S" else f"{self.mixer}:{self.pattern}"


def model_config(settings: TimeSeriesSettings, input_channels: int, num_labels: int, max_length: int):
    """HybridSSMConfig of a run: one layer per pattern letter, `S` = `settings.mixer` (docs/design.md §7 letters)."""
    pattern, ssm_mixer = stack_pattern(settings.mixer, settings.pattern)
    options = dict(
        stack_config_fields(settings, pattern, ssm_mixer),
        vocab_size=1,  # continuous input: the token table is not used
        max_position_embeddings=max(max_length, 1),
        lru_total_state_size=settings.state_size,
        lru_group_size=1 if settings.mixer == "diag_lru" else settings.lru_group_size,
        lrc_num_channels=settings.state_size,
        input_channels=input_channels,
        num_labels=num_labels,
        classifier_pooling="mean",  # as in the papers: average over time, then classify
        use_cache=False,
    )
    options.update({**settings.CONFIG_DEFAULTS, **settings.extra_config})
    return HybridSSMConfig(**options)


def build_model(settings: TimeSeriesSettings, data: TimeSeriesData) -> HybridSSMForTimeSeriesClassification:
    config = model_config(settings, data.input_channels, data.num_classes, data.max_length)
    config.id2label = dict(enumerate(data.class_names))
    config.label2id = {c: i for i, c in enumerate(data.class_names)}
    torch.manual_seed(settings.seed)
    return HybridSSMForTimeSeriesClassification(config)


def load_data(settings: TimeSeriesSettings) -> TimeSeriesData:
    """The run's data: the .ts files of `settings.dataset`, or generated series for --dataset synthetic (seeded
    by the run's seed, like its split)."""
    if settings.dataset == SYNTHETIC:
        return synthetic_timeseries(
            settings.synthetic_shape,
            settings.series_count,
            seed=settings.seed,
            val_fraction=settings.val_fraction,
            test_fraction=settings.test_fraction,
            missing=settings.missing,
            missing_indicators=settings.missing_indicators,
        )
    return load_timeseries(
        settings.dataset,
        settings.data_dir,
        split=settings.split,
        seed=settings.seed,
        val_fraction=settings.val_fraction,
        test_fraction=settings.test_fraction,
        missing=settings.missing,
        missing_indicators=settings.missing_indicators,
    )


@torch.no_grad()
def evaluate(model, split: TimeSeriesSplit, batch_size: int, device) -> dict:
    """Accuracy and mean cross-entropy of `model` on every case of `split`."""
    correct, loss_sum = 0, 0.0
    with eval_mode(model):
        for indices in batch_ranges(len(split), batch_size):
            batch = split.batch(torch.arange(indices.start, indices.stop))
            out = model(**{k: v.to(device) for k, v in batch.items()})
            correct += int((out.logits.argmax(-1).cpu() == batch["labels"]).sum())
            loss_sum += float(out.loss) * len(batch["labels"])
    return {"accuracy": correct / len(split), "loss": loss_sum / len(split), "samples": len(split)}


def _epoch_batches(n: int, batch_size: int, seed: int, epoch: int, rank: int, world: int) -> list[torch.Tensor]:
    """This process's batches of an epoch: a permutation fixed by (seed, epoch), so a resumed run repeats it."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    batches = []
    for start in range(0, n, batch_size * world):
        chunk = order[start : start + batch_size * world]
        mine = chunk[rank::world]
        batches.append(mine if len(mine) else chunk[:1])  # every process takes the same number of steps
    return batches


def _is_better(val: dict, best: dict | None) -> bool:
    if best is None or val["accuracy"] > best["val_accuracy"]:
        return True
    return val["accuracy"] == best["val_accuracy"] and val["loss"] < best["val_loss"]


def train_timeseries(
    settings: TimeSeriesSettings,
    run_dir: str | Path,
    accelerator=None,
    resume: bool = False,
    data: TimeSeriesData | None = None,
    validated: bool = False,
) -> dict:
    """Train one model; writes run_dir/{settings.json, data.json, results.json, curves.png, model/, checkpoints/}.

    model/ holds the best-validation weights (save_pretrained) and normalizer.json (the training-split channel
    statistics to apply to new series). Returns the results dict (also written to results.json). `validated`: the
    caller has run `settings.validate()` already (the script does, for every run before the first trains).
    """
    if not validated:
        settings.validate()
    accelerator, run_dir, found = loop.begin_run(settings, run_dir, resume, RESUME_SAFE_SETTINGS, accelerator)
    data = data or load_data(settings)
    if accelerator.is_main_process:
        (run_dir / "data.json").write_text(json.dumps(data.describe(), indent=2))
    run = _start_run(settings, data, accelerator, found)
    outcome = _train(run, settings, data, accelerator, run_dir / "checkpoints")
    train_seconds = run.clock.seconds

    unwrapped = accelerator.unwrap_model(run.model)
    unwrapped.load_state_dict(run.best.state)  # the test split is scored once, with the best-validation weights
    test = evaluate(unwrapped, data.test, settings.batch_size, accelerator.device)
    results = {
        "dataset": data.name,
        "mixer": settings.mixer,
        "pattern": settings.pattern,
        "label": settings.label,
        "seed": settings.seed,
        "parameters": run.parameters,
        "epochs": outcome.units,
        "best_epoch": run.best.record["epoch"],
        "stopped_early": outcome.stopped_early,
        "train_seconds": train_seconds,
        "val_accuracy": run.best.record["val_accuracy"],
        "test_accuracy": test["accuracy"],
        "test_loss": test["loss"],
        "split_rule": data.split_rule,
        "sizes": {"train": len(data.train), "val": len(data.val), "test": len(data.test)},
        "history": run.history,
    }
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:

        def write_model(tmp: Path) -> None:
            unwrapped.save_pretrained(tmp)
            (tmp / "normalizer.json").write_text(json.dumps(data.normalizer.to_dict(), indent=2))

        atomic_save_dir(run_dir / "model", write_model)  # an exported model: no checkpoint marker
        (run_dir / "results.json").write_text(json.dumps(results, indent=2))
        plot_curves([results], run_dir / "curves.png")
    return results


@dataclass
class _Run:
    """What one training run carries from epoch to epoch: the prepared model, optimizer and schedule, and the
    state a checkpoint saves (history, best weights, epochs without improvement, the clock)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    parameters: int
    start_epoch: int
    history: list
    best: loop.BestWeights
    bad_epochs: int
    clock: loop.Stopwatch


def _start_run(settings: TimeSeriesSettings, data: TimeSeriesData, accelerator, found: Path | None) -> _Run:
    """The model (seeded by settings.seed), AdamW and its warm-up cosine schedule over the epochs' steps, prepared
    by `accelerator`, and the state of the checkpoint `found` where the run resumes (else a fresh start)."""
    model = build_model(settings, data)
    parameters = sum(p.numel() for p in model.parameters())
    steps_per_epoch = math.ceil(len(data.train) / (settings.batch_size * accelerator.num_processes))
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    scheduler = warmup_cosine_schedule(
        optimizer, settings.warmup_epochs * steps_per_epoch, settings.max_epochs * steps_per_epoch
    )
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    start_epoch, history, best, bad_epochs, seconds_before = 0, [], loop.BestWeights(), 0, 0.0
    if found is not None:
        meta = loop.load_checkpoint(accelerator, found)
        start_epoch, history, bad_epochs = meta["epoch"], meta["history"], meta["bad_epochs"]
        seconds_before = meta["train_seconds"]
        if meta["best"] is not None:
            best = loop.BestWeights.load(meta["best"], found, BEST_WEIGHTS)
        accelerator.print(f"resumed from {found} at epoch {start_epoch}")
    clock = loop.Stopwatch(seconds_before)
    return _Run(model, optimizer, scheduler, parameters, start_epoch, history, best, bad_epochs, clock)


def _train(run: _Run, settings: TimeSeriesSettings, data: TimeSeriesData, accelerator, checkpoints: Path):
    """The training loop: one epoch per unit, validation after each (keeping the best weights), an early stop
    after `patience` epochs without improvement, checkpoints every save_every epochs."""
    model, history, best, clock = run.model, run.history, run.best, run.clock
    unwrapped = accelerator.unwrap_model(model)
    device, rank, world = accelerator.device, accelerator.process_index, accelerator.num_processes
    train = {}  # the latest epoch's training loss and accuracy

    def train_epoch(epoch: int) -> None:
        loss_sum = correct = seen = 0
        for index in _epoch_batches(len(data.train), settings.batch_size, settings.seed, epoch, rank, world):
            batch = {k: v.to(device) for k, v in data.train.batch(index).items()}
            out = model(**batch)
            loop.optimizer_step(
                accelerator, out.loss, run.optimizer, run.scheduler, model.parameters(), settings.grad_clip
            )
            loss_sum += out.loss.item() * len(index)
            correct += int((out.logits.argmax(-1) == batch["labels"]).sum())
            seen += len(index)
        train.update(loss=loss_sum / seen, accuracy=correct / seen)

    def validation(epoch: int) -> dict:
        val = evaluate(unwrapped, data.val, settings.batch_size, device)
        history.append(
            {
                "epoch": epoch,
                "train_loss": train["loss"],
                "train_accuracy": train["accuracy"],
                "val_loss": val["loss"],
                "val_accuracy": val["accuracy"],
            }
        )
        if _is_better(val, best.record):
            best.keep(unwrapped, {"epoch": epoch, "val_accuracy": val["accuracy"], "val_loss": val["loss"]})
            run.bad_epochs = 0
        else:
            run.bad_epochs += 1
        return {"loss": f"{train['loss']:.3f}", "val": f"{val['accuracy']:.3f}", "best": best.record["epoch"]}

    def save(epoch: int) -> None:
        meta = {
            "epoch": epoch,
            "history": history,
            "best": best.record,
            "bad_epochs": run.bad_epochs,
            "train_seconds": clock.seconds,
            "settings": asdict(settings),
        }
        folder = checkpoints / f"step_{epoch}"  # step = epoch here
        loop.save_checkpoint(accelerator, folder, meta, lambda tmp: best.save(tmp, BEST_WEIGHTS), keep=2)

    model.train()
    return loop.run_training(
        accelerator, desc=f"{data.name}/{settings.label}/seed{settings.seed}", start=run.start_epoch,
        total=settings.max_epochs, train_unit=train_epoch, evaluate=validation, eval_every=1,
        should_stop=lambda epoch: run.bad_epochs >= settings.patience, save=save, save_every=settings.save_every,
    )  # fmt: skip


def summarize(all_results: list[dict]) -> list[dict]:
    """One row per (dataset, model): test accuracy mean ± sample std over seeds, and time per run."""
    groups: dict[tuple, list[dict]] = {}
    for r in all_results:
        groups.setdefault((r["dataset"], r["label"]), []).append(r)
    rows = []
    for (dataset, label), runs in groups.items():
        accs = [r["test_accuracy"] for r in runs]
        secs = [r["train_seconds"] for r in runs]
        rows.append(
            {
                "dataset": dataset,
                "model": label,
                "parameters": runs[0]["parameters"],
                "seeds": [r["seed"] for r in runs],
                "test_accuracy_mean": statistics.fmean(accs),
                "test_accuracy_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                "test_accuracies": accs,
                "val_accuracy_mean": statistics.fmean(r["val_accuracy"] for r in runs),
                "epochs_mean": statistics.fmean(r["epochs"] for r in runs),
                "best_epochs": [r["best_epoch"] for r in runs],
                "seconds_mean": statistics.fmean(secs),
                "seconds_std": statistics.stdev(secs) if len(secs) > 1 else 0.0,
            }
        )
    return rows


def results_table(rows: list[dict]) -> str:
    """Markdown table of `summarize` rows (accuracies in %, std over seeds; time = training wall-clock per run)."""
    header = ["dataset", "model", "params", "seeds", "test acc % (mean ± std)", "test acc per seed", "val acc %"]
    header += ["epochs (best)", "s / run (mean ± std)"]
    table = []
    for r in rows:
        per_seed = ", ".join(f"{100 * a:.1f}" for a in r["test_accuracies"])
        best = ", ".join(str(e) for e in r["best_epochs"])
        table.append(
            [r["dataset"], r["model"], r["parameters"], len(r["seeds"])]
            + [f"{100 * r['test_accuracy_mean']:.1f} ± {100 * r['test_accuracy_std']:.1f}", per_seed]
            + [f"{100 * r['val_accuracy_mean']:.1f}", f"{r['epochs_mean']:.0f} ({best})"]
            + [f"{r['seconds_mean']:.0f} ± {r['seconds_std']:.0f}"]
        )
    return markdown_table(header, table)


def plot_curves(all_results: list[dict], path: str | Path) -> None:
    """Training loss and validation accuracy per epoch; one colour per model, one line per seed."""
    plt = pyplot()

    labels = sorted({r["label"] for r in all_results})
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    shown = set()
    for r in all_results:
        epochs = [h["epoch"] for h in r["history"]]
        name = None if r["label"] in shown else r["label"]
        shown.add(r["label"])
        ax_loss.plot(epochs, [h["train_loss"] for h in r["history"]], color=colours[r["label"]], label=name)
        ax_acc.plot(epochs, [h["val_accuracy"] for h in r["history"]], color=colours[r["label"]], label=name)
        ax_acc.plot([r["best_epoch"]], [r["val_accuracy"]], marker="o", color=colours[r["label"]])
    ax_loss.set(title="training loss", xlabel="epoch", yscale="log")
    ax_acc.set(title=f"{all_results[0]['dataset']}: validation accuracy (dot = best)", xlabel="epoch", ylim=(0, 1.02))
    ax_acc.legend()
    save_figure(fig, path)
