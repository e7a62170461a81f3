"""Named presets of the adapter experiment (scripts/train_adapter.py): the validated recipes behind RESULTS.md §2, as
data. A preset is a dict of `AdapterExperimentSettings` values for one base and task.

    python scripts/train_adapter.py --base smollm2-135m --task parity --seeds 0-4   # the task's preset
    python scripts/train_adapter.py --base smollm2-135m --task parity --preset lm_head --seed 0
    python scripts/train_adapter.py --base smollm2-135m --task parity --preset none  # the plain settings defaults

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

A task of a base with presets but none validated for it (SmolLM2 on `s5`) takes `none`.
"""

from __future__ import annotations

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
    "num_heads": 16,
    "initial_state": "one_hot",
    "input_map": "none",
    "transitions_at": "sentence_ends",
    "transition": "bank",
    "dict_size": 8,
    "dictionary_diagonal_init": 0.0,
    "temperature": 1.0,
    "output_skip": False,
    "frozen_mixer_parameters": "magnitude,phase,out_proj",
    "standardize_input": True,
    "learning_rate": 1e-2,
    "selection_learning_rate": 2e-3,
}
_PER_HEAD = {**_SENTENCES, "classifier_per_head": True}
_PREAMBLE = {"train_max_preamble_sentences": 30}
_LM_HEAD = {**_SENTENCES, "methods": "ssm", "write_layer_index": -1, "answer_loss": "vocab", "eval_every": 800}
_BASELINE_STEPS = {"max_steps": 200, "min_steps": 200}
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
    },
}
# base -> task -> the preset a run takes when --preset is not given: the task's best validated recipe.
DEFAULT_PRESETS: dict[str, dict[str, str]] = {
    SMOLLM2: {"parity": "per_head", "cycle_navigation": "per_head_preamble", "a5": "one_readout"},
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
