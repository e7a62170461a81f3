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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from ..data import TASK_NAMES, StateTrackingDataset, collate_state_tracking, get_task
from ..data.state_tracking import SUPERVISIONS, supervised_labels
from ..modeling import HybridSSMConfig, HybridSSMForTokenClassification
from ..modeling.config_values import BLOCK_TYPES, PD_SSM_DIAGONALS, PD_SSM_INITIAL_STATES, PD_SSM_INPUTS, check_choice
from ..modeling.configuration_hybrid_ssm import ATTENTION, PATTERN_LETTERS, SSM_MIXERS, check_config_keys
from ..modeling.mixer_registry import pattern_letters, width_matched_fields
from . import loop
from .checkpointing import atomic_save_dir, check_resume, check_resumed_settings, recorded_settings
from .cli import config_fields_field
from .optimization import LR_SCHEDULES, build_optimizer, build_scheduler
from .plotting import pyplot, save_figure
from .recipes import RECIPE_NAMES
from .stack import stack_config_fields, stack_pattern
from .state_tracking_evaluation import TEST_SEED, evaluate, evaluate_far_lengths, far_lengths
from .tables import accuracy_cells, markdown_table

VALIDATION_LENGTHS = ("train", "test")
VALIDATION_SEED = 10_000  # disjoint from the test seeds (state_tracking_evaluation): never the same sequences
# Settings a resumed run may change (checkpointing.check_resume): none changes the model, the training batches or
# the learning rate of any step. They decide when the run evaluates, checkpoints and stops early, how many restarts
# it tries, and how many sequences the final test scores; everything else must match the checkpoint's run.
RESUME_SAFE_SETTINGS = frozenset(
    {
        "eval_every",
        "save_every",
        "target_accuracy",
        "min_steps",
        "eval_samples_per_bucket",
        "restarts",
        "far_lengths",
        "far_samples_per_bucket",
    }  # fmt: skip
)
PATTERN_HELP = "one layer per letter: S = the mixer, " + ", ".join(f"{k} {v}" for k, v in PATTERN_LETTERS.items())


@dataclass
class StateTrackingSettings:
    """Everything one training run depends on (saved to the run folder as settings.json)."""

    task: str = field(default="parity", metadata={"help": f"one task: {', '.join(TASK_NAMES)}"})
    num_generators: int | None = field(
        default=None, metadata={"help": "generators of the a5 / s5 word problems (None: 2; refused for other tasks)"}
    )
    mixer: str = field(default="pd_ssm", metadata={"help": f"one mixer: {', '.join((*SSM_MIXERS, ATTENTION))}"})
    # One layer per letter, HybridSSMConfig's pattern letters with S = `mixer` (A attention, P pd_ssm, B bd_lru...).
    pattern: str = field(default="S", metadata={"help": PATTERN_HELP})
    hidden_size: int = 64
    state_size: int = 8
    num_heads: int = 16  # PD-SSM heads (independent automata; more heads, more chances to find the task's)
    dict_size: int = 16
    lru_group_size: int = 4
    train_min_length: int = 3
    train_max_length: int = 40
    test_min_length: int = 40
    test_max_length: int = 256
    num_buckets: int = 6
    eval_samples_per_bucket: int = 1024  # test sequences per length bucket (128 gave +- 4 points of noise)
    batch_size: int = 64
    max_steps: int = 1000
    # PD-SSM's x_0: "one_hot" = e_0, the automaton's start state (the authors' state-tracking code; see
    # HybridSSMConfig.pd_ssm_initial_state), or "zeros" as in docs/design.md §4. Other mixers ignore it.
    pd_ssm_initial_state: str = "one_hot"
    # PD-SSM's D and input map (HybridSSMConfig.pd_ssm_diagonal / pd_ssm_input). The default is the pure automaton,
    # D = 1 and no input map, so x_t = P_t ... P_1 e_0 is a basis vector naming the state: it learned parity, even
    # pairs, cycle navigation and A5 past the training lengths where the paper's layer ("complex" D with
    # b_t = B u_t, the paper recipe) degrades with the length (RESULTS.md, issue 14).
    pd_ssm_diagonal: str = "unit"
    pd_ssm_input: str = "none"
    # How P_t is made and how the states are read (HybridSSMConfig.pd_ssm_transition, pd_ssm_transition_init_scale,
    # pd_ssm_transition_norm, pd_ssm_output_skip, pd_ssm_output_init, pd_ssm_output_trainable); --extra_config wins.
    # These defaults are the dictionary layer (the `dictionary` recipe); the default recipe reads P_t's logits
    # straight off the normed token (issue 28, hf_ssm/training/recipes.py).
    pd_ssm_transition: str = "dictionary"
    pd_ssm_transition_init_scale: float = 1.0
    pd_ssm_transition_norm: bool = False
    pd_ssm_output_skip: bool = True
    pd_ssm_output_init: str = "normal"
    pd_ssm_output_trainable: bool = True
    learning_rate: float = 1e-2
    weight_decay: float = 0.0
    warmup_steps: int = 50
    grad_clip: float = 1.0
    eval_every: int = 50
    validation_lengths: str = "test"  # "train": select on training lengths; "test": on held-out test-length samples
    val_samples_per_bucket: int = 64
    target_accuracy: float = 0.99
    min_steps: int = 0  # no early stop before this step (longer training sharpens |D| -> 1 for long sequences)
    # Far lengths ("1000,4000"; "" = none): after the test, far_samples_per_bucket sequences of each length exactly
    # (a learnt automaton that is right is right at any length; docs/design.md §8.3).
    far_lengths: str = field(default="", metadata={"help": "far test lengths, e.g. 1000,4000 ('' = none)"})
    far_samples_per_bucket: int = field(default=256, metadata={"help": "sequences per far length"})
    save_every: int = 500
    seed: int = 0
    # Random restarts (train_with_restarts): seeds seed, seed+1, ...; the restart with the best validation accuracy
    # is kept, and no further restart starts once one reaches target_accuracy. The test set never takes part.
    restarts: int = 3
    # Issue 14 (hf_ssm/training/recipes.py): the recipe these values came from (a label, recorded in the
    # summary); which positions are supervised ("every" prefix label or only the "last" token); the block around
    # each mixer (HybridSSMConfig.block_type / block_dropout); no weight decay on the embedding when
    # decay_embedding is False; "cosine" (to 0) or transformers' "cosine_with_min_lr" (to min_learning_rate).
    recipe: str = field(default="default", metadata={"choices": RECIPE_NAMES, "help": "settings preset"})
    supervision: str = "every"
    block_type: str = "pre_norm_residual"
    block_dropout: float = 0.0
    decay_embedding: bool = True
    lr_schedule: str = "cosine"
    min_learning_rate: float = 0.0
    # Issue 28: the token embedding is not trained (requires_grad False: it stays at its N(0, 0.02^2) init, fixed
    # nearly orthogonal token codes), and the learning rate of PD-SSM's direct transition map W_P
    # (pd_ssm_transition="direct", `transition_proj`) is learning_rate * transition_lr_scale. Why (muP-style): one
    # Adam step moves every entry of W_P by about lr, so it moves a token's logit W_P u by about lr * sum_i |u_i|,
    # d times the step a free per-token logit table takes; dividing W_P's lr by d * RMS(u) gives the table's step.
    freeze_embedding: bool = False
    transition_lr_scale: float = 1.0
    extra_config: dict = config_fields_field(
        "extra HybridSSMConfig fields: a JSON object, e.g. '{\"pd_ssm_magnitude_bias_init\": 3.0}', or KEY=VALUE "
        "items (--config: the deprecated spelling)",
        aliases=("--config",),
        deprecated=("--config",),
    )

    def validate(self) -> None:
        get_task(self.task, **self.task_kwargs())  # raises ValueError for unknown tasks / bad k
        if self.train_min_length < 1 or self.train_min_length > self.train_max_length:
            raise ValueError(
                f"train lengths must satisfy 1 <= train_min_length <= train_max_length, got "
                f"[{self.train_min_length}, {self.train_max_length}]"
            )
        if self.train_max_length > self.test_max_length:
            raise ValueError(
                f"train_max_length ({self.train_max_length}) is above test_max_length ({self.test_max_length}): "
                "the test must reach at least the training lengths"
            )
        if self.test_min_length > self.test_max_length:
            raise ValueError(
                f"test_min_length ({self.test_min_length}) is above test_max_length ({self.test_max_length})"
            )
        check_choice("pd_ssm_initial_state", self.pd_ssm_initial_state, PD_SSM_INITIAL_STATES)
        check_choice("pd_ssm_diagonal", self.pd_ssm_diagonal, PD_SSM_DIAGONALS)
        check_choice("pd_ssm_input", self.pd_ssm_input, PD_SSM_INPUTS)
        check_choice("validation_lengths", self.validation_lengths, VALIDATION_LENGTHS)
        self._validate_recipe_fields()
        for name in (
            "batch_size",
            "max_steps",
            "eval_every",
            "num_buckets",
            "eval_samples_per_bucket",
            "val_samples_per_bucket",
            "far_samples_per_bucket",
            "hidden_size",
            "restarts",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"`target_accuracy` must be in (0, 1], got {self.target_accuracy}")
        if not isinstance(self.extra_config, dict):
            raise ValueError(f"--extra_config must be a JSON object of config fields, got {self.extra_config!r}")
        check_config_keys(self.extra_config, "--extra_config")
        far_lengths(self)  # raises on a malformed list
        model_config(self)  # the pattern letters, the sizes: HybridSSMConfig's own checks

    def _validate_recipe_fields(self) -> None:
        check_choice("recipe", self.recipe, RECIPE_NAMES)
        check_choice("supervision", self.supervision, SUPERVISIONS)
        check_choice("block_type", self.block_type, BLOCK_TYPES)
        check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        if not self.transition_lr_scale > 0:
            raise ValueError(f"`transition_lr_scale` must be > 0, got {self.transition_lr_scale}")
        config = model_config(self)  # a model without a pd_ssm layer has no W_P: the scale is unused there
        if self.transition_lr_scale != 1 and "pd_ssm" in config.mixers and config.pd_ssm_transition != "direct":
            raise ValueError(
                f"`transition_lr_scale` = {self.transition_lr_scale} scales the learning rate of the direct transition "
                f"map W_P only: it needs pd_ssm_transition='direct' (got {config.pd_ssm_transition!r}; pass "
                "--transition_lr_scale 1 with another transition)"
            )
        if self.lr_schedule != "cosine_with_min_lr" and self.min_learning_rate != 0:
            raise ValueError(
                f"`min_learning_rate` = {self.min_learning_rate} needs lr_schedule='cosine_with_min_lr'; "
                f"the {self.lr_schedule!r} schedule has no floor"
            )

    def task_kwargs(self) -> dict:
        """get_task's keywords: num_generators when given (get_task refuses it for tasks without generators)."""
        return {} if self.num_generators is None else {"num_generators": self.num_generators}


def length_buckets(low: int, high: int, count: int) -> list[tuple[int, int]]:
    """Split [low, high] into `count` contiguous integer ranges of (nearly) equal width."""
    edges = [round(low + (high - low + 1) * i / count) for i in range(count + 1)]
    buckets = [(edges[i], edges[i + 1] - 1) for i in range(count) if edges[i + 1] - 1 >= edges[i]]
    return buckets or [(low, high)]


def model_config(settings: StateTrackingSettings) -> HybridSSMConfig:
    """The HybridSSMConfig of a run: one layer per pattern letter (HybridSSMConfig's letters, S = the mixer)."""
    task = get_task(settings.task, **settings.task_kwargs())
    pattern, ssm_mixer = stack_pattern(settings.mixer, settings.pattern)
    letters = {**pattern_letters(), "S": ssm_mixer}
    config_fields = dict(
        stack_config_fields(settings, pattern, ssm_mixer),
        vocab_size=task.vocab_size,
        max_position_embeddings=max(settings.test_max_length, settings.train_max_length),
        pd_ssm_initial_state=settings.pd_ssm_initial_state,
        pd_ssm_diagonal=settings.pd_ssm_diagonal,
        pd_ssm_input=settings.pd_ssm_input,
        pd_ssm_transition=settings.pd_ssm_transition,
        pd_ssm_transition_init_scale=settings.pd_ssm_transition_init_scale,
        pd_ssm_transition_norm=settings.pd_ssm_transition_norm,
        pd_ssm_output_skip=settings.pd_ssm_output_skip,
        pd_ssm_output_init=settings.pd_ssm_output_init,
        pd_ssm_output_trainable=settings.pd_ssm_output_trainable,
        block_type=settings.block_type,
        block_dropout=settings.block_dropout,
        num_labels=task.num_classes,
        id2label={i: str(i) for i in range(task.num_classes)},
    )
    config_fields.update(_mixer_settings(settings, {letters.get(ch) for ch in pattern}))
    return HybridSSMConfig(**{**config_fields, **settings.extra_config})  # extra_config wins


def build_model(settings: StateTrackingSettings) -> HybridSSMForTokenClassification:
    config = model_config(settings)
    torch.manual_seed(settings.seed)
    model = HybridSSMForTokenClassification(config)
    if settings.freeze_embedding:
        model.get_input_embeddings().weight.requires_grad_(False)  # stays at its init (saved like any weight)
    return model


def _mixer_settings(settings: StateTrackingSettings, mixers: set) -> dict:
    """State widths of the other mixers matched to PD-SSM's: N complex numbers per head = 2 N H real numbers, each
    mixer's fields from its registry declaration (`width_fields`, mixer_registry.py)."""
    width = 2 * settings.state_size * settings.num_heads
    chosen = {"pd_ssm_num_heads": settings.num_heads, "lru_group_size": settings.lru_group_size}
    return width_matched_fields(sorted(m for m in mixers if m is not None), width, chosen)


def _batch(dataset: StateTrackingDataset, step: int, batch_size: int, rank: int = 0, world: int = 1) -> dict:
    """The deterministic batch of a training step (so a resumed run sees exactly the same data)."""
    start = (step * world + rank) * batch_size
    return collate_state_tracking([dataset[start + i] for i in range(batch_size)])


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
    task = get_task(settings.task, **settings.task_kwargs())
    model = build_model(settings)
    optimizer = build_optimizer(model, settings)
    scheduler = build_scheduler(optimizer, settings)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    train_data = StateTrackingDataset(
        task,
        settings.max_steps * settings.batch_size * accelerator.num_processes,
        settings.train_min_length,
        settings.train_max_length,
        seed=settings.seed,
    )
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

    test_buckets = length_buckets(settings.test_min_length, settings.test_max_length, settings.num_buckets)
    if settings.validation_lengths == "train":
        val_buckets = [(settings.train_min_length, settings.train_max_length)]
    else:
        val_buckets = test_buckets
    clock = loop.Stopwatch(seconds_before, cpu_seconds_before)
    last = {}  # the loss of the latest step

    def train_step(step: int) -> None:
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
            unwrapped, settings, val_buckets, VALIDATION_SEED, accelerator.device, settings.val_samples_per_bucket
        )
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
        final_model, settings, test_buckets, TEST_SEED, accelerator.device, settings.eval_samples_per_bucket
    )
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
        "transition_lr_scale": settings.transition_lr_scale,
        "train_lengths": [settings.train_min_length, settings.train_max_length],
        "history": history,
        "test": test,
        **({"far": far} if far is not None else {}),
    }
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        atomic_save_dir(run_dir / "model", lambda tmp: final_model.save_pretrained(tmp))  # no checkpoint marker
        (run_dir / "results.json").write_text(json.dumps(results, indent=2))
        plot_accuracy_vs_length([results], run_dir / "accuracy_vs_length.png")
    return results


def train_with_restarts(
    settings: StateTrackingSettings, run_dir: str | Path, resume: bool = False, validated: bool = False
) -> dict:
    """Train `settings.restarts` seeds (run_dir/seed_<s>/ each) and keep the best by validation accuracy.

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


def _restart_runs(settings: StateTrackingSettings, run_dir: Path) -> list[tuple[StateTrackingSettings, Path]]:
    """(settings, folder) of every restart: seeds seed, seed+1, ... in run_dir/seed_<s>/."""
    seeded = [replace(settings, seed=settings.seed + offset, restarts=1) for offset in range(settings.restarts)]
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
        ax.set(title=task, xlabel="sequence length", ylabel="last-position accuracy", ylim=(0, 1.02))
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


def _seed_cell(result: dict) -> str:
    """The kept seed, and how many restarts it was chosen from."""
    tried = len(result.get("restarts", [])) or 1
    return f"{result['seed']} ({tried} tried)" if tried > 1 else str(result["seed"])
