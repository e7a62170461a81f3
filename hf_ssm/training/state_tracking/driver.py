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
from RESUME_SAFE_SETTINGS, and for a word-problem file run only with the same files, byte for byte (their
fingerprints, `checkpointing.check_data_files`; both checked before settings.json is rewritten); `train_seconds`
includes the training time before the interruption.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from ...data import StateTrackingDataset, collate_state_tracking
from ...data.state_tracking import supervised_labels
from ...data.task_mixture import MixtureDataset
from ...modeling import HybridSSMForTokenClassification
from .. import loop
from ..checkpointing import atomic_save_dir, check_data_files, check_resume_folder, run_finished
from ..cli import comma_list
from ..optimization import SublayerDelay, build_optimizer, build_scheduler
from .evaluation import TEST_SEED, evaluate_components, far_components, zeroed_mixers
from .results import kept_results, run_results, write_results
from .settings import (
    RESUME_SAFE_SETTINGS,
    VALIDATION_SEED,
    FileSplits,
    RunPlan,
    StateTrackingSettings,
    model_config,
)
from .teacher_forcing import fix_readout, teacher_forced_loss


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
    """The model a run of `settings` trains, seeded by settings.seed."""
    return _new_model(settings, model_config(settings))


def _new_model(settings: StateTrackingSettings, config) -> HybridSSMForTokenClassification:
    """The model of `config` (the run's HybridSSMConfig), seeded by settings.seed, with the embedding init and
    freezing that the settings ask for."""
    torch.manual_seed(settings.seed)
    model = HybridSSMForTokenClassification(config)
    if settings.embedding_init == "one_hot":  # token v -> e_v (validate() checked hidden_size >= the vocabulary)
        embedding = model.get_input_embeddings().weight
        with torch.no_grad():
            embedding.copy_(torch.eye(*embedding.shape, dtype=embedding.dtype))
    if settings.freeze_embedding:
        model.get_input_embeddings().weight.requires_grad_(False)  # stays at its init (saved like any weight)
    if settings.teacher_forcing_steps:
        fix_readout(model)  # "state k is class k", frozen: the teacher-forced start states name states by class
    if settings.attention_frozen_steps or settings.mlp_frozen_steps:
        SublayerDelay(model, attention=settings.attention_frozen_steps, mlp=settings.mlp_frozen_steps).silence()
    return model


def _batch(dataset: StateTrackingDataset, step: int, batch_size: int, rank: int = 0, world: int = 1) -> dict:
    """The deterministic batch of a training step (so a resumed run sees exactly the same data). Indices wrap
    around the dataset: a word-problem file's rows are cycled in file order, epoch after epoch (a generated
    dataset holds every step's sequences, so its indices never wrap)."""
    start = (step * world + rank) * batch_size
    return collate_state_tracking([dataset[(start + i) % len(dataset)] for i in range(batch_size)])


def longest_training_length(settings: StateTrackingSettings, step: int) -> int:
    """The longest training length at `step`: train_max_length, or under the length curriculum
    length_curriculum_start + (train_max_length - length_curriculum_start) * step / length_curriculum_steps,
    rounded down, until it reaches train_max_length."""
    if settings.length_curriculum_steps == 0:
        return settings.train_max_length
    span = settings.train_max_length - settings.length_curriculum_start
    grown = settings.length_curriculum_start + span * step / settings.length_curriculum_steps
    return min(settings.train_max_length, int(grown))


def training_data(settings: StateTrackingSettings, plan: RunPlan, num_samples: int, step: int):
    """The training sequences step `step` draws from: lengths [train_min_length, the longest length of that step
    (longest_training_length: the length curriculum)], the run's seed. Item i is the same random draw at every
    step, so with the curriculum off (or past it) this is one fixed dataset, as before the curriculum. A task
    mixture interleaves one such dataset per task, each at its own lengths and curriculum (a MixtureDataset). A
    word-problem file run trains on its training file's rows (less the validation rows), whatever the step."""
    if plan.files is not None:  # the training file's rows (the validation rows held out); no curriculum for files
        return plan.files.train
    # (task, its settings): the run's own, or each task of a mixture with its own lengths and curriculum
    runs = [(plan.task, settings)] if len(plan.components) == 1 else [(c.task, c.settings) for c in plan.components]
    longest = [longest_training_length(own, step) for _, own in runs]
    share = -(-num_samples // len(runs))  # sequences per task, rounded up
    datasets = [
        StateTrackingDataset(task, share, own.train_min_length, top, seed=settings.seed)
        for (task, own), top in zip(runs, longest)
    ]
    return datasets[0] if len(datasets) == 1 else MixtureDataset(datasets)


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
    already; otherwise it runs here. Either way the settings are resolved once (`RunPlan`: the task, the model
    config, a file run's rows), here, and every step reads the plan.
    """
    plan = settings.validate() if not validated else settings.plan()
    if resume:  # before begin_run rewrites settings.json
        check_data_files(plan.fingerprints, run_dir)
    _announce_files(plan.file_record)
    return _train_run(settings, plan, run_dir, accelerator, resume)


def _train_run(settings: StateTrackingSettings, plan: RunPlan, run_dir: str | Path, accelerator, resume: bool) -> dict:
    """train_state_tracking with validated `settings` and their `plan`, the data files checked for a resume."""
    accelerator, run_dir, found = loop.begin_run(settings, run_dir, resume, RESUME_SAFE_SETTINGS, accelerator)
    files = plan.files
    val_rows, test_rows = (None, None) if files is None else (files.validation, files.test)
    run = _start_run(settings, plan, accelerator, found)
    val_buckets, test_buckets = zip(*(_buckets(c.settings, files) for c in plan.components))
    outcome = _train(run, settings, plan, accelerator, run_dir / "checkpoints", val_buckets, val_rows)

    final_model = accelerator.unwrap_model(run.model)
    if run.best.state is not None:
        final_model.load_state_dict(run.best.state)
    if accelerator.is_main_process:  # the kept weights, saved as soon as training ends (no checkpoint marker)
        atomic_save_dir(run_dir / "model", lambda tmp: final_model.save_pretrained(tmp))

    def test() -> dict:
        return evaluate_components(final_model, plan.components, test_buckets, TEST_SEED, accelerator.device,
                                   settings.eval_samples_per_bucket, test_rows)  # fmt: skip

    tested = test()
    far = far_components(final_model, plan.components, accelerator.device)
    ablations = {}
    for mixer in comma_list(settings.test_ablations):  # which layer does which job
        with zeroed_mixers(final_model, mixer):
            ablations[mixer] = test()
    results = run_results(settings, plan, run, outcome, tested, far, final_model, ablations)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_results(run_dir, results)
    return results


@dataclass
class _Run:
    """What one training run carries from step to step: the prepared model, optimizer and schedule, the sublayers
    it holds back (`delay`), and the state a checkpoint saves (history, best weights, the clock of training time)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    delay: SublayerDelay
    start_step: int
    history: list
    best: loop.BestWeights
    clock: loop.Stopwatch


def _start_run(settings: StateTrackingSettings, plan: RunPlan, accelerator, found: Path | None) -> _Run:
    """The model (seeded by settings.seed), its optimizer and schedule prepared by `accelerator`, and the state
    of the checkpoint `found` where the run resumes (else a fresh start)."""
    model = _new_model(settings, copy.deepcopy(plan.config))  # its own copy: a model writes into its config
    optimizer = build_optimizer(model, settings)
    scheduler = build_scheduler(optimizer, settings)
    # attention_frozen_steps / mlp_frozen_steps at work (silenced by _new_model; a resumed model keeps its weights)
    delay = SublayerDelay(model, attention=settings.attention_frozen_steps, mlp=settings.mlp_frozen_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
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
    clock = loop.Stopwatch(seconds_before, cpu_seconds_before)
    return _Run(model, optimizer, scheduler, delay, start_step, history, best, clock)


def _buckets(settings: StateTrackingSettings, files: FileSplits | None) -> tuple[list, list]:
    """(validation buckets, test buckets): the test lengths in `num_buckets` buckets; validation at the training
    lengths, or on the test buckets. A word-problem file run's buckets are its rows' lengths: the test file's, and
    the validation rows' (one bucket at the training lengths for the training file's last rows)."""
    if files is not None:
        test_buckets = file_test_buckets(files.test.lengths, settings.num_buckets)
        if files.source == "last_rows":
            return [(settings.train_min_length, settings.train_max_length)], test_buckets
        return file_test_buckets(files.validation.lengths, settings.num_buckets), test_buckets
    test_buckets = length_buckets(settings.test_min_length, settings.test_max_length, settings.num_buckets)
    if settings.validation_lengths == "train":
        return [(settings.train_min_length, settings.train_max_length)], test_buckets
    return test_buckets, test_buckets


def _train(
    run: _Run, settings: StateTrackingSettings, plan: RunPlan, accelerator, checkpoints: Path, val_buckets, val_rows
):
    """The training loop: one optimizer step per unit, validation every eval_every steps (keeping the best
    weights), early stop at the target accuracy, checkpoints every save_every steps."""
    model, history, best, clock = run.model, run.history, run.best, run.clock
    num_train_samples = settings.max_steps * settings.batch_size * accelerator.num_processes
    last = {}  # the loss of the latest step
    fingerprints = plan.fingerprints  # a file run's files, compared on resume (check_data_files)

    def train_step(step: int) -> None:
        run.delay.before_step(step)
        train_data = training_data(settings, plan, num_train_samples, step)
        batch = _batch(train_data, step, settings.batch_size, accelerator.process_index, accelerator.num_processes)
        input_ids = batch["input_ids"].to(accelerator.device)
        labels = supervised_labels(batch, settings.supervision).to(accelerator.device)
        if step < settings.teacher_forcing_steps:
            loss = teacher_forced_loss(model, plan.config, input_ids, labels)
        else:
            loss = model(
                input_ids=input_ids, attention_mask=batch["attention_mask"].to(accelerator.device), labels=labels
            ).loss
        loop.optimizer_step(accelerator, loss, run.optimizer, run.scheduler, model.parameters(), settings.grad_clip)
        last["loss"] = loss

    def validation(step: int) -> dict:
        unwrapped = accelerator.unwrap_model(model)
        val = evaluate_components(unwrapped, plan.components, val_buckets, VALIDATION_SEED, accelerator.device,
                                  settings.val_samples_per_bucket, val_rows)  # fmt: skip
        tasks = {name: report["mean_accuracy"] for name, report in val.get("components", {}).items()}  # a mixture
        history.append({"step": step, "loss": last["loss"].item(), "val_accuracy": val["mean_accuracy"],
                        **({"val_accuracy_by_task": tasks} if tasks else {})})  # fmt: skip
        if val["mean_accuracy"] >= best.record["accuracy"]:  # ties: the later, longer-trained weights
            best.keep(unwrapped, {"accuracy": val["mean_accuracy"], "step": step})
        shown = {name: f"{accuracy:.3f}" for name, accuracy in tasks.items()}
        return {"loss": f"{last['loss'].item():.3f}", "val": f"{val['mean_accuracy']:.3f}", **shown}

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
            **({"data_files": fingerprints} if fingerprints else {}),
        }
        loop.save_checkpoint(
            accelerator, checkpoints / f"step_{step}", meta, lambda tmp: best.save(tmp, BEST_WEIGHTS), keep=2
        )

    model.train()
    return loop.run_training(
        accelerator, desc=f"{settings.task}/{settings.mixer}", start=run.start_step, total=settings.max_steps,
        train_unit=train_step, evaluate=validation, eval_every=settings.eval_every, should_stop=reached_target,
        save=save, save_every=settings.save_every,
    )  # fmt: skip


def _announce_files(record: dict) -> None:
    """One log line (main process) saying where a file run's validation rows come from and which columns of its
    files were ignored, from its `RunPlan.file_record`; nothing for a generated task (an empty record)."""
    from accelerate import PartialState

    if not record or not PartialState().is_main_process:
        return
    rows, validation = record["rows"], record["validation_rows"]
    if validation["source"] == "validation_file":
        source = f"the validation file {record['data_files']['validation_file']['path']}"
    else:
        source = {
            "longest_lengths": "the training file's longest lengths, held out of training",
            "last_rows": "the training file's last rows, at the training lengths",
        }[validation["source"]]
    unused = validation["held_out_unused"]
    unused = f" ({unused} more rows of those lengths neither trained on nor validated)" if unused else ""
    ignored = "; ".join(f"{name}: {', '.join(columns)}" for name, columns in record["ignored_columns"].items())
    print(
        f"word-problem files: training on {rows['train']} rows, validating on {rows['validation']} rows of lengths "
        f"{validation['lengths']} from {source}{unused}, testing on {rows['test']} rows"
        + (f"; columns ignored: {ignored}" if ignored else "")
    )


def train_with_restarts(
    settings: StateTrackingSettings, run_dir: str | Path, resume: bool = False, validated: bool = False
) -> dict:
    """Train `settings.restarts` seeds (`restart_seeds`: seed, seed + 1000, ...; run_dir/seed_<s>/ each) and keep
    the best by validation accuracy.

    Ties go to the earlier seed. Stops starting new seeds once one reaches `target_accuracy` on validation.
    run_dir gets the kept run's model/, results.json (with every restart listed under "restarts", and
    "train_seconds" summed over all of them) and accuracy_vs_length.png. With restarts == 1 this is exactly
    `train_state_tracking(settings, run_dir)`, but that `resume` keeps a run that finished
    (`checkpointing.run_finished`) instead of training on from its last checkpoint. The settings are validated once,
    here (not again per restart: a restart changes only the seed), or not at all with `validated` (the caller did),
    and resolved once (`RunPlan`, shared by the restarts).
    """
    plan = settings.validate() if not validated else settings.plan()
    run_dir = Path(run_dir)
    _announce_files(plan.file_record)
    restarts = _restart_runs(settings, run_dir)
    if resume:
        check_resume_runs(settings, run_dir, plan.fingerprints)  # every restart, before any trains
    runs = []
    for seeded, seed_dir in restarts:
        if resume and run_finished(seed_dir):  # done before the interruption: kept, not trained again
            print(f"{seed_dir}: finished before, kept as it is (its results.json and model/)")
            runs.append(json.loads((seed_dir / "results.json").read_text()))
        else:
            runs.append(_train_run(seeded, plan, seed_dir, None, resume))
        if runs[-1]["validation"]["accuracy"] >= settings.target_accuracy:
            break
    return runs[0] if settings.restarts == 1 else _keep_best(settings, run_dir, runs)


def _keep_best(settings: StateTrackingSettings, run_dir: Path, runs: list[dict]) -> dict:
    """The results of restarts `runs` (their results dicts, in order): the best one's (`kept_results`), written to
    run_dir with that run's model and settings.json."""
    from accelerate import PartialState

    results = kept_results(runs)
    if PartialState().is_main_process:
        source = run_dir / f"seed_{results['seed']}" / "model"
        atomic_save_dir(run_dir / "model", lambda tmp: shutil.copytree(source, tmp, dirs_exist_ok=True))
        (run_dir / "settings.json").write_text(json.dumps(asdict(settings), indent=2))
        write_results(run_dir, results)
    return results


# Restart r of a run with seed s trains seed s + r * RESTART_SEED_STRIDE: runs of consecutive seeds (0, 1, 2, ...)
# then never share a restart, so R restarts of 5 seeds are 5 R different trainings. (Earlier versions' restart r
# trained seed s + r: seed 0's second restart was seed 1's first, the same training, so "5 of 5 seeds" counted it
# twice.)
RESTART_SEED_STRIDE = 1000


def restart_seeds(seed: int, restarts: int) -> list[int]:
    """The seeds a run's restarts train, in order: seed, seed + 1000, seed + 2000, ..."""
    return [seed + r * RESTART_SEED_STRIDE for r in range(restarts)]


def _restart_runs(settings: StateTrackingSettings, run_dir: Path) -> list[tuple[StateTrackingSettings, Path]]:
    """(settings, folder) of every restart: the seeds of `restart_seeds`, each in run_dir/seed_<s>/; a single run
    (restarts == 1) trains in run_dir itself."""
    if settings.restarts == 1:
        return [(settings, run_dir)]
    seeded = [replace(settings, seed=s, restarts=1) for s in restart_seeds(settings.seed, settings.restarts)]
    return [(s, run_dir / f"seed_{s.seed}") for s in seeded]


def check_resume_runs(settings: StateTrackingSettings, run_dir: str | Path, fingerprints: dict) -> None:
    """ValueError unless `train_with_restarts(settings, run_dir, resume=True)` continues every restart (a single
    run: run_dir itself) on the same data files (`fingerprints`: the RunPlan's) and with the settings it was trained
    with (apart from RESUME_SAFE_SETTINGS): finished restarts (kept as they are) and interrupted ones (continued
    from their checkpoint)."""
    for seeded, seed_dir in _restart_runs(settings, Path(run_dir)):
        check_resume_folder(seeded, seed_dir, RESUME_SAFE_SETTINGS, fingerprints)
