"""The settings of one state-tracking run (docs/design.md §8.3): `StateTrackingSettings`, the dataclass every
driver flag fills (through HfArgumentParser, training/cli.py) and that is saved as the run's settings.json, with its
validation; `RunPlan`, what the settings resolve to (the task, the model config, a file run's rows), resolved once; the
settings a resumed run may change; and `model_config`, the HybridSSMConfig the settings define.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import ClassVar

from ...data import TASK_NAMES, get_task
from ...data.state_tracking import SUPERVISIONS
from ...data.task_mixture import MIXTURE_SEPARATOR, TaskMixture
from ...data.word_problems import WORD_PROBLEM_TASK, WordProblemDataset, load_word_problem_file, word_problem_task
from ...modeling import HybridSSMConfig
from ...modeling.config_values import BLOCK_TYPES, BLOCKS_WITH_MLP, check_choice
from ...modeling.configuration_hybrid_ssm import ATTENTION, SSM_MIXERS, check_config_keys
from ...modeling.mixer_registry import pattern_letters, width_matched_fields
from ..cli import config_fields_field
from ..optimization import LR_SCHEDULES
from ..settings_base import ConfigFieldSettings, TrackingSettings, check_numeric_settings
from ..stack import StackSettings, check_ablations, stack_config_fields, stack_pattern
from .recipes import MODEL_DEFAULTS, RECIPE_NAMES, check_recipe
from .teacher_forcing import check_teacher_forcing

VALIDATION_LENGTHS = ("train", "test")
EMBEDDING_INITS = ("normal", "one_hot")
VALIDATION_SEED = 10_000  # disjoint from the test seeds (evaluation.py): never the same sequences
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
        "test_ablations",
    }  # fmt: skip
)
# The settings that take one of a few values, with those values (validate() refuses any other, naming them).
CHOICES = {
    "validation_lengths": VALIDATION_LENGTHS,
    "supervision": SUPERVISIONS,
    "block_type": BLOCK_TYPES,
    "lr_schedule": LR_SCHEDULES,
    "embedding_init": EMBEDDING_INITS,
}


# Where a file run's validation rows come from (FileSplits.source): --validation_file; the training file's longest
# lengths, held out of training (validation_lengths "test", the default: select on lengths past the training ones);
# the training file's last val_samples_per_bucket rows (validation_lengths "train", at the training lengths).
VALIDATION_SOURCES = ("validation_file", "longest_lengths", "last_rows")
# The settings that name a file run's files, in FileSplits.files order.
FILE_SETTINGS = ("data_file", "validation_file", "test_data_file")
# The settings a component of a task mixture ("mqar+a5") may set for itself (`component_settings`): its data. Every
# other setting (the model, the optimisation, the task arguments, which go to the component that takes them) is
# the run's.
COMPONENT_SETTINGS = (
    "train_min_length",
    "train_max_length",
    "test_min_length",
    "test_max_length",
    "num_buckets",
    "far_lengths",
    "length_curriculum_steps",
    "length_curriculum_start",
)


@dataclass(frozen=True)
class FileSplits:
    """A word-problem file run's rows (`StateTrackingSettings.file_splits`).

    train: the rows trained on, cycled in file order. validation: the rows that select the model. test: the test
    file. source: where the validation rows come from (VALIDATION_SOURCES). unused: rows of the training file held
    out with the validation lengths beyond the val_samples_per_bucket per length that validate (trained on never).
    """

    train: WordProblemDataset
    validation: WordProblemDataset
    test: WordProblemDataset
    source: str
    unused: int = 0

    def files(self) -> dict[str, WordProblemDataset]:
        """{setting (FILE_SETTINGS order): the rows read from its file} of every file the run reads."""
        read = {"data_file": self.train, "validation_file": self.validation, "test_data_file": self.test}
        return {name: rows for name, rows in read.items() if name != "validation_file" or self.source == name}

    def fingerprints(self) -> dict:
        """{setting: {"path", "sha256", "size"}} of each file the run reads, as read: recorded in results.json and
        the checkpoints, compared when the run resumes."""
        return {name: rows.fingerprint for name, rows in self.files().items()}

    def describe(self) -> dict:
        """What a run's log line and results.json say about its rows: the counts, the validation lengths and
        their source, and each file's ignored columns."""
        files = self.files()
        return {
            "rows": {"train": len(self.train), "validation": len(self.validation), "test": len(self.test)},
            "validation_rows": {
                "source": self.source,
                "lengths": sorted(set(self.validation.lengths)),
                "rows": len(self.validation),
                "held_out_unused": self.unused,
            },
            "ignored_columns": {name: list(f.ignored_fields) for name, f in files.items() if f.ignored_fields},
        }


@dataclass(frozen=True)
class RunPlan:
    """What a run's settings resolve to, resolved once before it trains (`StateTrackingSettings.plan`), so that
    the driver's steps read it instead of asking the settings again. A restart changes only the seed, so its
    restarts share one plan.

    task: the run's Task. config: the model's HybridSSMConfig (each model is built from its own copy).
    files: a word-problem file run's rows (FileSplits: training, validation, test), None for a generated task.
    far_lengths: the far test lengths (`far_lengths`), () for none (a mixture: (), each task has its own in
        `components`).
    fingerprints: a file run's files as read (`FileSplits.fingerprints`), {} for a generated task: recorded in the
        checkpoints and results.json, compared when the run resumes (checkpointing.check_data_files).
    file_record: what results.json says about a file run's files (`file_record`; the run's log line reads it
        too), {} for a generated task.
    components: what the run trains and tests on, one `Component` per task: the run's task alone, or each task of
        a mixture (`task` is then the TaskMixture, whose vocabulary and classes the model takes).
    """

    task: object
    config: HybridSSMConfig
    files: FileSplits | None
    far_lengths: tuple[int, ...]
    fingerprints: dict
    file_record: dict
    components: tuple[Component, ...]


@dataclass(frozen=True)
class Component:
    """One task a run trains and tests on: its `Task` (a mixture's component in the mixture's ids), the run's
    settings with the component's own data settings (`component_settings`) and its far test lengths."""

    task: object
    settings: StateTrackingSettings
    far_lengths: tuple[int, ...]


@dataclass
class StateTrackingSettings(StackSettings, ConfigFieldSettings, TrackingSettings):
    """Everything one training run depends on (saved to the run folder as settings.json). The shared fields
    (optimisation, cadence, seed, the task protocol, the model stack, extra_config) are declared in
    training/settings_base.py and training/stack.py; these defaults are the `residual` recipe's."""

    DEFAULTS = {
        "batch_size": 64,
        "max_steps": 1000,
        "warmup_steps": 50,
        "save_every": 500,
        "eval_samples_per_bucket": 1024,  # 128 gave +- 4 points of noise
    }
    HELP = {
        "task": f"one of {', '.join(TASK_NAMES)} ({WORD_PROBLEM_TASK}: set by --data_file), or several joined by "
        f"{MIXTURE_SEPARATOR!r}: a mixture, e.g. mqar+a5",
        "supervision": f"{' or '.join(SUPERVISIONS)}",
        "mixer": f"one of {', '.join((*SSM_MIXERS, ATTENTION))}",
        "extra_config": "state tracking: over the recipe's (which sets the PD-SSM layer's: pd_ssm_transition, "
        "pd_ssm_diagonal, pd_ssm_input, pd_ssm_initial_state, pd_ssm_output_skip, ...) and MODEL_DEFAULTS, e.g. "
        "pd_ssm_transition=bank or '{\"pd_ssm_magnitude_bias_init\": 3.0}'",
    }
    CONFIG_DEFAULTS: ClassVar[dict] = MODEL_DEFAULTS

    # Word-problem files (hf_ssm/data/word_problems.py: CSV `length,input,target` or `seed,input,target`, JSONL or a
    # JSON array) instead of a generated task: the training rows, the validation rows (file_splits: a validation
    # file, else the training file's longest lengths held out, or with validation_lengths "train" its last rows) and
    # the test rows; the lengths come from the files (file_lengths), the classes are the largest element index + 1
    # or num_classes.
    data_file: str = field(
        default="", metadata={"help": "training word-problem file (CSV, JSONL or a JSON array); '' = none"}
    )
    test_data_file: str = field(default="", metadata={"help": "test word-problem file, required with --data_file"})
    validation_file: str = field(
        default="",
        metadata={
            "help": "validation word-problem file ('' = hold out the training file's longest lengths, or with "
            "--validation_lengths train its last --val_samples_per_bucket rows)"
        },
    )
    num_classes: int | None = field(
        default=None, metadata={"help": "group elements of the files (None: the largest index in them + 1)"}
    )
    num_generators: int | None = field(
        default=None,
        metadata={"help": "generators of the group word problems a5 / s5 / s3 / s4 (None: 2; refused for other tasks)"},
    )
    # The memory tasks' own arguments (hf_ssm/data/memory_tasks.py; None: the task's default, refused for a task
    # they do not apply to). For mqar the train / test "lengths" below count key-value pairs at this fixed length.
    task_vocab_size: int | None = field(
        default=None,
        metadata={
            "help": "mqar / selective_copying / compression: token ids incl. pad and specials, >= 5 (None: the "
            "task's; the script gives mqar 256, TASK_SETTINGS)"
        },
    )
    sequence_length: int | None = field(default=None, metadata={"help": "mqar: the fixed sequence length (256)"})
    num_queries: int | None = field(default=None, metadata={"help": "mqar: queries per sequence (None: every pair)"})
    num_data_tokens: int | None = field(default=None, metadata={"help": "selective_copying: tokens to copy (16)"})
    train_min_length: int = 3
    train_max_length: int = 40
    # Length curriculum (docs/design.md §8.3): over the first length_curriculum_steps steps the longest training
    # length grows linearly from length_curriculum_start to train_max_length (0 steps: every length from the start).
    # Short sequences first is what let the reference automaton learn modular arithmetic (RESULTS.md).
    length_curriculum_steps: int = field(
        default=0, metadata={"help": "steps over which the longest training length grows (0: no curriculum)"}
    )
    length_curriculum_start: int = field(
        default=5, metadata={"help": "the longest training length at step 0 of the length curriculum"}
    )
    test_min_length: int = 40
    test_max_length: int = 256
    num_buckets: int = 6
    # "train": select on training lengths; "test": on held-out test-length samples (a file run: on the training file's
    # longest lengths, held out of training, unless it has a validation_file; file_splits)
    validation_lengths: str = "test"
    val_samples_per_bucket: int = 64
    # Far lengths ("1000,4000"; "" = none): after the test, far_samples_per_bucket sequences of each length exactly
    # (a learnt automaton that is right is right at any length; docs/design.md §8.3).
    far_lengths: str = field(default="", metadata={"help": "far test lengths, e.g. 1000,4000 ('' = none)"})
    far_samples_per_bucket: int = field(default=256, metadata={"help": "sequences per far length"})
    # A task mixture ("mqar+a5": each sequence one task, each task tested on its own; data/task_mixture.py): a
    # component's own data settings (COMPONENT_SETTINGS) over the run's, e.g. mqar's pairs where a5 has lengths.
    component_settings: dict = config_fields_field(
        "a task mixture's per-task data settings over the run's, e.g. "
        '\'mqar={"train_min_length": 4, "train_max_length": 32, "far_lengths": ""}\' '
        f"(fields: {', '.join(COMPONENT_SETTINGS)})"
    )
    # After the test, the test again with the outputs of these layers zeroed ("attention,pd_ssm": each kind on its
    # own; pre-norm residual blocks, where a zeroed mixer leaves its residual branch out): which layer does which job.
    test_ablations: str = field(
        default="",
        metadata={"help": "comma-separated mixers whose layers' outputs a second test zeroes, e.g. attention,pd_ssm"},
    )
    # Random restarts (train_with_restarts): seeds seed, seed + 1000, seed + 2000, ... (state_tracking.restart_seeds:
    # runs of consecutive seeds share no restart); the restart with the best validation accuracy is kept, and no
    # further restart starts once one reaches target_accuracy. The test set never takes part.
    restarts: int = 3
    # The recipe (hf_ssm/training/state_tracking/recipes.py) these values came from (a label, recorded in the
    # summary; these field defaults are the `residual` recipe's values, the driver's PD-SSM default is `table`); which positions are supervised ("every" prefix label or only the "last" token); the block around
    # each mixer (HybridSSMConfig.block_type / block_dropout); no weight decay on the embedding when
    # decay_embedding is False; "cosine" (to 0) or transformers' "cosine_with_min_lr" (to min_learning_rate).
    recipe: str = field(
        default="residual",
        metadata={
            "choices": RECIPE_NAMES,
            "help": "settings preset (driver default: the task's recipe for pd_ssm: table, s5 table_wide, modular_arithmetic table_curriculum; residual for every other mixer)",
        },
    )
    block_type: str = "pre_norm_residual"
    block_dropout: float = 0.0
    decay_embedding: bool = True
    lr_schedule: str = "cosine"
    min_learning_rate: float = 0.0
    # The token embedding is not trained (requires_grad False: it stays at its N(0, 0.02^2) init, fixed
    # nearly orthogonal token codes). (W_P's own learning rate is the config's pd_ssm_transition_lr_scale.)
    freeze_embedding: bool = False
    # The token embedding's start: "normal" (HybridSSMConfig's N(0, initializer_range^2)) or "one_hot" (token v is
    # the basis vector e_v; needs hidden_size >= the task's vocabulary). One-hot codes make W_P u_v column v of W_P:
    # with the embedding frozen and no transition norm, W_P is then a free N x N logit table per head and token, Adam
    # steps each table entry on its own (no coupling of the tokens through shared input features), exactly
    # scripts/reference_automaton.py's table (docs/design.md §8.3).
    embedding_init: str = field(default="normal", metadata={"choices": EMBEDDING_INITS, "help": "normal or one_hot"})
    # Teacher forcing (teacher_forcing.py): the first this many steps run every position from the state its previous
    # label names, with the classifier fixed at "state k is class k"; needs recipe table_forced's layer.
    teacher_forcing_steps: int = field(
        default=0, metadata={"help": "steps that start each position from its previous label's state (0: none)"}
    )
    # Sublayers held back at the start (optimization.SublayerDelay): the attention layers' / the SwiGLU blocks'
    # output projections start at zero and none of their parameters learns before this step, so the model's other
    # layers learn the task alone first. The SwiGLU blocks held back while the PD-SSM layer searches give the
    # residual block's A5 runs that stopped at 50 % their automaton (docs/design.md §8.8); attention alone held back
    # did not help SAA (§8.7).
    attention_frozen_steps: int = field(
        default=0, metadata={"help": "steps before the attention layers (output at zero until then) start learning"}
    )
    mlp_frozen_steps: int = field(
        default=0, metadata={"help": "steps before the SwiGLU blocks (output at zero until then) start learning"}
    )

    def validate(self) -> RunPlan:
        """ValueError naming the first wrong setting: the values on their own first (numbers, choices, the config
        keys, the counts, the files), then against what they resolve to (`plan`). Returns that RunPlan."""
        check_numeric_settings(self, positive=("learning_rate",))
        for name, accepted in CHOICES.items():
            check_choice(name, getattr(self, name), accepted)
        check_recipe(self.recipe)
        if not isinstance(self.extra_config, dict):
            raise ValueError(f"--extra_config must be a JSON object of config fields, got {self.extra_config!r}")
        check_config_keys(self.extra_config, "--extra_config")
        self._validate_counts()
        self._validate_files()
        return self.plan()

    def plan(self) -> RunPlan:
        """What the run resolves to, once (RunPlan), with the checks that need it: the lengths against the task
        and each other, the one-hot embedding against the vocabulary, the model config (HybridSSMConfig's own
        checks, the transition learning-rate scale) and the far lengths. For settings whose values `validate`
        checked (it ends here)."""
        try:
            task = self.build_task()  # raises ValueError for unknown tasks / bad arguments / malformed files
        except ValueError as err:  # get_task's vocab_size is the flag --task_vocab_size here
            raise ValueError(str(err).replace("`vocab_size`", "`task_vocab_size`")) from None
        components = self.components(task)
        files = self.file_splits() if self.data_file else None
        fingerprints = files.fingerprints() if files is not None else {}  # the files as read: a resume compares them
        record = file_record(self, task, files, fingerprints) if files is not None else {}
        far = components[0].far_lengths if len(components) == 1 else ()
        config = _model_config(self, task, components)  # the pattern letters, the sizes: HybridSSMConfig's checks
        if self.teacher_forcing_steps:
            if isinstance(task, TaskMixture):
                raise ValueError(f"`teacher_forcing_steps` needs one task, not the mixture {task.name!r}")
            check_teacher_forcing(config, task, self.supervision)
        if self.attention_frozen_steps and "attention" not in config.mixers:
            raise ValueError(
                f"`attention_frozen_steps` = {self.attention_frozen_steps} needs an attention layer, and the "
                f"model's layers are {list(config.mixers)} (add one with --pattern, e.g. SA, or pass 0)"
            )
        if self.mlp_frozen_steps and config.block_type not in BLOCKS_WITH_MLP:
            raise ValueError(
                f"`mlp_frozen_steps` = {self.mlp_frozen_steps} needs SwiGLU blocks, and block_type "
                f"{config.block_type!r} has none (they come with {list(BLOCKS_WITH_MLP)}; or pass 0)"
            )
        return RunPlan(task, config, files, far, fingerprints, record, components)

    def components(self, task) -> tuple[Component, ...]:
        """The run's `Component`s for its Task or TaskMixture `task`, each one's lengths checked against its task
        (`_validate_lengths`) and its far lengths resolved; `component_settings` refused but for a mixture's
        components and COMPONENT_SETTINGS."""
        if not isinstance(self.component_settings, dict):
            raise ValueError(f"`component_settings` must be a JSON object, got {self.component_settings!r}")
        if not isinstance(task, TaskMixture):
            if self.component_settings:
                raise ValueError(
                    f"`component_settings` applies to a task mixture (tasks joined by {MIXTURE_SEPARATOR!r}, e.g. "
                    f"mqar+a5), not {self.task!r}"
                )
            self._validate_lengths(task)
            return (Component(task, self, tuple(far_lengths(self, task))),)
        names = [c.name for c in task.components]
        for name, values in self.component_settings.items():
            if name not in names:
                raise ValueError(f"`component_settings` names {name!r}, which is not a task of {task.name!r}: {names}")
            wrong = sorted(set(values) - set(COMPONENT_SETTINGS)) if isinstance(values, dict) else values
            if wrong or not isinstance(values, dict):
                raise ValueError(
                    f"`component_settings` of {name!r} must be a JSON object of the fields "
                    f"{', '.join(COMPONENT_SETTINGS)}, got {wrong!r}"
                )
        out = []
        for component in task.components:
            own = replace(self, task=component.name, component_settings={})
            own = replace(own, **self.component_settings.get(component.name, {}))
            check_numeric_settings(own, positive=("learning_rate",))
            own._validate_counts()
            own._validate_lengths(component)
            out.append(Component(component, own, tuple(far_lengths(own, component))))
        return tuple(out)

    def _validate_counts(self) -> None:
        """The counts of at least 1, the target accuracy in (0, 1], and a learning-rate floor only with a schedule
        that has one."""
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
        if self.lr_schedule != "cosine_with_min_lr" and self.min_learning_rate != 0:
            raise ValueError(
                f"`min_learning_rate` = {self.min_learning_rate} needs lr_schedule='cosine_with_min_lr'; "
                f"the {self.lr_schedule!r} schedule has no floor"
            )

    def _validate_lengths(self, task) -> None:
        """The train / test lengths against `task` (the run's Task) and each other, the length curriculum, and the
        one-hot embedding against the task's vocabulary."""
        if not self.data_file:  # a file run's lengths are its files' (file_lengths)
            self._validate_task_sizes(task)
        if self.train_min_length < 1 or self.train_min_length > self.train_max_length:
            raise ValueError(
                f"train lengths must satisfy 1 <= train_min_length <= train_max_length, got "
                f"[{self.train_min_length}, {self.train_max_length}]"
            )
        if self.train_max_length > self.test_max_length and not self.data_file:  # files: their own lengths
            raise ValueError(
                f"train_max_length ({self.train_max_length}) is above test_max_length ({self.test_max_length}): "
                "the test must reach at least the training lengths"
            )
        if self.test_min_length > self.test_max_length:
            raise ValueError(
                f"test_min_length ({self.test_min_length}) is above test_max_length ({self.test_max_length})"
            )
        self._validate_length_curriculum(task)
        if self.embedding_init == "one_hot" and self.hidden_size < task.vocab_size:
            raise ValueError(
                f"`embedding_init='one_hot'` gives every token its own basis vector: it needs hidden_size >= the "
                f"task's vocabulary ({task.vocab_size} for {self.task!r}), got hidden_size={self.hidden_size}"
            )

    def _validate_task_sizes(self, task) -> None:
        """Every train / test length (for mqar: number of pairs) inside the range the task accepts, refused here
        rather than when the first batch or bucket is drawn."""
        low, high = task.size_range()
        for name in ("train_min_length", "train_max_length", "test_min_length", "test_max_length"):
            value = getattr(self, name)
            if value < low or (high is not None and value > high):
                accepted = f"[{low}, {high}]" if high is not None else f">= {low}"
                raise ValueError(
                    f"`{name}` = {value} ({task.size_name}) is outside what task {self.task!r} accepts, {accepted}: "
                    f"{task._length_rule()}"
                )

    def _validate_length_curriculum(self, task) -> None:
        if self.length_curriculum_steps == 0:
            return
        if not self.train_min_length <= self.length_curriculum_start <= self.train_max_length:
            raise ValueError(
                f"`length_curriculum_start` must lie in [train_min_length, train_max_length] = "
                f"[{self.train_min_length}, {self.train_max_length}], got {self.length_curriculum_start}"
            )
        if not any(task.valid_length(n) for n in range(self.train_min_length, self.length_curriculum_start + 1)):
            raise ValueError(
                f"`length_curriculum_start` = {self.length_curriculum_start}: task {self.task!r} has no valid length "
                f"in [{self.train_min_length}, {self.length_curriculum_start}] ({task._length_rule()})"
            )

    def build_task(self):
        """The run's Task: `get_task(task, num_generators)`, or for a file run the WordProblemTask of its files."""
        if self.data_file:
            return word_problem_task(*self.word_problem_files(), num_classes=self.num_classes)
        return get_task(self.task, **self.task_kwargs())

    def word_problem_files(self) -> list[WordProblemDataset]:
        """The rows of a file run's files as read (load_word_problem_file): training, [validation,] test."""
        return [load_word_problem_file(getattr(self, name)) for name in FILE_SETTINGS if getattr(self, name)]

    def file_splits(self) -> FileSplits:
        """The rows a file run trains, validates and tests on (FileSplits): the training file's rows less the
        validation rows where they come from it, the validation rows (VALIDATION_SOURCES) and the test file's.

        Without a validation file, validation_lengths "test" holds out the training file's longest lengths, the
        fewest that hold val_samples_per_bucket rows, never trained on (the published protocol selects on lengths
        past the training ones); the first val_samples_per_bucket rows of each validate. "train" holds out the
        last val_samples_per_bucket rows, at the training lengths. ValueError when nothing would be left to train."""
        files = self.word_problem_files()
        train, test = files[0], files[-1]
        if self.validation_file:
            return FileSplits(train, files[1], test, "validation_file")
        count = self.val_samples_per_bucket
        if self.validation_lengths == "train":
            if len(train) <= count:
                raise ValueError(
                    f"{train.path} has {len(train)} rows: it needs more than val_samples_per_bucket ({count}), the "
                    "rows held out for validation"
                )
            kept = len(train) - count
            return FileSplits(train.subset(range(kept)), train.subset(range(kept, len(train))), test, "last_rows")
        held = _longest_lengths(train.lengths, count)
        if held is None:
            raise ValueError(
                f"{train.path}: validation holds out the training file's longest lengths, at least "
                f"val_samples_per_bucket ({count}) rows, and its lengths {sorted(set(train.lengths))} leave none to "
                "train on: give --validation_file (rows longer than the training rows), --validation_lengths train "
                "(its last rows, at the training lengths) or a smaller --val_samples_per_bucket"
            )
        kept = [i for i, n in enumerate(train.lengths) if n not in held]
        validating = []  # the first `count` rows of each held-out length, shortest first
        for n in sorted(held):
            validating += [i for i, m in enumerate(train.lengths) if m == n][:count]
        unused = len(train) - len(kept) - len(validating)
        return FileSplits(train.subset(kept), train.subset(validating), test, "longest_lengths", unused)

    def _validate_files(self) -> None:
        """A file run: a training and a test file, its own task name, lengths equal to the files' (file_lengths), no
        generator-only setting. Without files: none of the file settings."""
        if not self.data_file:
            for name in ("test_data_file", "validation_file", "num_classes"):
                if getattr(self, name) not in ("", None):
                    raise ValueError(f"`{name}` applies to word-problem files only: give --data_file too")
            if self.task == WORD_PROBLEM_TASK:
                raise ValueError(f"task {WORD_PROBLEM_TASK!r} reads its sequences from --data_file; none was given")
            return
        if self.task != WORD_PROBLEM_TASK:
            raise ValueError(
                f"with --data_file the task is {WORD_PROBLEM_TASK!r} (the file's group), got {self.task!r}"
            )
        if not self.test_data_file:
            raise ValueError("`test_data_file` is required with --data_file (the test rows and their lengths)")
        if self.far_lengths:
            raise ValueError(
                f"`far_lengths` = {self.far_lengths!r}: a word-problem file run is tested on its test file's rows "
                "only, and has no generator to draw far-length sequences; put longer rows in --test_data_file "
                "(far lengths default to none for a file run)"
            )
        refused = {
            "num_generators": self.num_generators is not None,
            "length_curriculum_steps": self.length_curriculum_steps != 0,
        }
        for name, given in refused.items():
            if given:
                raise ValueError(f"`{name}` needs a generated task; a word-problem file run has only its files' rows")
        if self.validation_file and self.validation_lengths == "train":
            raise ValueError(
                "`validation_lengths` = 'train' validates on the training file's last rows; with --validation_file "
                "the validation rows are that file's: drop one of them"
            )
        # reads the files: a malformed one, or a split that leaves nothing to train on, is refused here
        expected = file_lengths(self)
        wrong = {k: getattr(self, k) for k, v in expected.items() if getattr(self, k) != v}
        if wrong:
            raise ValueError(
                f"the lengths of a word-problem file run are the files' ({expected}), got {wrong}: drop the length "
                "settings (scripts/train_state_tracking.py fills them) or take them from file_lengths(settings)"
            )

    def task_kwargs(self) -> dict:
        """get_task's keywords: the task arguments that were given (get_task refuses one the task does not take)."""
        given = {
            "num_generators": self.num_generators,
            "vocab_size": self.task_vocab_size,
            "sequence_length": self.sequence_length,
            "num_queries": self.num_queries,
            "num_data_tokens": self.num_data_tokens,
        }
        return {key: value for key, value in given.items() if value is not None}


def _longest_lengths(lengths: list[int], count: int) -> set[int] | None:
    """The fewest longest of `lengths` that hold at least `count` rows between them; None when that takes every
    length (nothing left to train on)."""
    rows_of = Counter(lengths)
    held, rows = set(), 0
    for n in sorted(rows_of, reverse=True)[:-1]:  # the shortest length always trains
        held.add(n)
        rows += rows_of[n]
        if rows >= count:
            return held
    return None


def file_lengths(settings: StateTrackingSettings) -> dict:
    """The length settings of a word-problem file run: train_min/max_length of the rows trained on (with
    validation_lengths "train", of the whole training file, the held-out last rows included, as before the other
    validation sources), test_min/max_length of the test file."""
    splits = settings.file_splits()
    trained = splits.train.lengths + (splits.validation.lengths if splits.source == "last_rows" else [])
    return {
        "train_min_length": min(trained),
        "train_max_length": max(trained),
        "test_min_length": min(splits.test.lengths),
        "test_max_length": max(splits.test.lengths),
    }


def far_lengths(settings, task) -> list[int]:
    """`settings.far_lengths` "1000,4000" -> [1000, 4000] ("" -> []); ValueError naming the field otherwise, or
    naming the lengths that are not lengths of `task` (the run's Task)."""
    try:
        lengths = [int(x) for x in settings.far_lengths.split(",") if x.strip()]
    except ValueError:
        lengths = [0]
    if any(length <= settings.test_max_length for length in lengths):
        raise ValueError(
            f"`far_lengths` must be comma-separated lengths above test_max_length ({settings.test_max_length}), "
            f"e.g. '1000,4000', or '' for none; got {settings.far_lengths!r}"
        )
    invalid = [length for length in lengths if not task.valid_length(length)]
    if invalid:  # refused before training, not when the test reaches them
        raise ValueError(
            f"`far_lengths` {invalid} are not lengths of task {settings.task!r} ({task._length_rule()}); got "
            f"{settings.far_lengths!r}"
        )
    return lengths


def file_record(settings: StateTrackingSettings, task, files: FileSplits, fingerprints: dict) -> dict:
    """What results.json says about a word-problem file run: the files and their `fingerprints`, the classes of
    `task` (its Task), the rows of each split of `files`, where validation came from, the ignored columns."""
    return {
        "data_file": settings.data_file,
        "test_data_file": settings.test_data_file,
        **({"validation_file": settings.validation_file} if settings.validation_file else {}),
        "data_files": fingerprints,
        "num_classes": task.num_classes,
        "dense_targets": task.labels_every_prefix,
        **files.describe(),
        "far_test": "none: a word-problem file run is tested on its test file's rows only",
    }


def model_config(settings: StateTrackingSettings, task=None) -> HybridSSMConfig:
    """The HybridSSMConfig of a run: one layer per pattern letter (HybridSSMConfig's letters, S = the mixer).
    `task`: the run's Task where the caller has resolved it (a driver does, once), else `settings.build_task()`."""
    task = task if task is not None else settings.build_task()
    return _model_config(settings, task, settings.components(task))


def _model_config(settings: StateTrackingSettings, task, components: tuple[Component, ...]) -> HybridSSMConfig:
    """model_config of the run's Task or TaskMixture `task` and its `components` (StateTrackingSettings.plan
    resolves each once)."""
    pattern, ssm_mixer = stack_pattern(settings.mixer, settings.pattern)
    letters = {**pattern_letters(), "S": ssm_mixer}
    mixers = sorted({letters[ch] for ch in pattern if ch in letters})
    stack_fields = stack_config_fields(settings, pattern, ssm_mixer)
    check_ablations(settings.test_ablations, mixers, settings.block_type)  # refused before training, not after
    # The other mixers' state widths matched to PD-SSM's: N complex numbers per head = 2 N H real numbers, each
    # mixer's fields from its registry declaration (`width_fields`, mixer_registry.py).
    width = 2 * settings.state_size * settings.num_heads
    chosen = {"pd_ssm_num_heads": settings.num_heads, "lru_group_size": settings.lru_group_size}
    config_fields = {
        **stack_fields,
        "vocab_size": task.vocab_size,
        # the longest sequence in tokens of any component, the far test lengths included (for mqar the lengths
        # count pairs, at a fixed sequence length)
        "max_position_embeddings": max(
            c.task.num_tokens(max(c.settings.test_max_length, c.settings.train_max_length, *c.far_lengths))
            for c in components
        ),
        "block_type": settings.block_type,
        "block_dropout": settings.block_dropout,
        "num_labels": task.num_classes,
        "id2label": {i: str(i) for i in range(task.num_classes)},
        **width_matched_fields(mixers, width, chosen),
    }
    return HybridSSMConfig(**{**config_fields, **MODEL_DEFAULTS, **settings.extra_config})  # extra_config wins
