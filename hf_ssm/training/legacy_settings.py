"""Settings fields and script options that were renamed or moved, and what keeps the runs, records and commands written
under the old names loading (docs/design.md §11.2).

Three tables, old name -> new:

- `RENAMED_SETTINGS` ({settings class name: {old field: new field}}): a settings field under a new name, same value.
- `MOVED_TO_EXTRA_CONFIG` ({settings class name: {old field: Moved}}): a settings field that only copied a
  HybridSSMConfig field; that config field is now an `extra_config` key, the one way to set a config field
  (`--extra_config KEY=VALUE`). A value equal to the entry's `unset` meant "not set" and moves nowhere.
- `RENAMED_OPTIONS` ({settings class name: {old option: new option}}): an option of the script that fills the
  class that was a second spelling of another option. (The option of a renamed field is refused the same way.)

Besides these, every settings option has exactly one spelling, `--<field>`: HfArgumentParser's `--field-with-dashes`
twins and the `--no_<field>` / `--no-<field>` negations of a bool are refused naming it (`--<field> false`;
hf_ssm.training.cli.settings_parser).

On the command line an old spelling is refused, naming the new one (`renamed_option_message`). Reading keeps the old
names working: `upgrade_settings` turns a saved settings.json (a resumed run's, a record's) into the new fields, and
`upgrade_argv` a recorded command line into the new options, with the same values.

This module imports nothing of the wings (their settings modules, the checkpoint rules and the scripts read it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

_ALWAYS = object()  # `Moved.unset` of a field every value of which moves


@dataclass(frozen=True)
class Moved:
    """Where a moved settings field went: the `extra_config` key `key`; `unset`: the old value that meant "not set"
    (the config's or the wing's default applies, as before); `kind`: the old option's type, which reads a recorded
    command line's text (bool as HfArgumentParser read it: true / false, yes / no, 1 / 0)."""

    key: str
    unset: object = _ALWAYS
    kind: type = str


# The state-tracking fields that copied a PD-SSM config field of the same name (moved before this table existed).
_STATE_TRACKING_PD_SSM = {
    "pd_ssm_initial_state": str,
    "pd_ssm_diagonal": str,
    "pd_ssm_input": str,
    "pd_ssm_transition": str,
    "pd_ssm_transition_init_scale": float,
    "pd_ssm_transition_norm": bool,
    "pd_ssm_output_skip": bool,
    "pd_ssm_output_init": str,
    "pd_ssm_output_trainable": bool,
}

MOVED_TO_EXTRA_CONFIG: dict[str, dict[str, Moved]] = {
    "StateTrackingSettings": {
        "dict_size": Moved("pd_ssm_dict_size", kind=int),
        **{name: Moved(name, kind=kind) for name, kind in _STATE_TRACKING_PD_SSM.items()},
        # W_P's learning rate as a multiple of the model's: the config's since parameter_groups reads it there
        "transition_lr_scale": Moved("pd_ssm_transition_lr_scale", kind=float),
    },
    "TimeSeriesSettings": {"dict_size": Moved("pd_ssm_dict_size", kind=int)},
    "AdapterExperimentSettings": {
        "state_size": Moved("pd_ssm_head_state_size", kind=int),
        "num_heads": Moved("pd_ssm_num_heads", kind=int),
        "dict_size": Moved("pd_ssm_dict_size", kind=int),
        "temperature": Moved("pd_ssm_temperature", kind=float),
        "initial_state": Moved("pd_ssm_initial_state"),
        "input_map": Moved("pd_ssm_input"),
        "transition": Moved("pd_ssm_transition"),
        "dictionary_diagonal_init": Moved("pd_ssm_dictionary_diagonal_init", unset=None, kind=float),
        "identity_entry_logit": Moved("pd_ssm_identity_entry_logit", unset=None, kind=float),
        "shared_selection": Moved("pd_ssm_shared_selection", unset=False, kind=bool),
        "output_skip": Moved("pd_ssm_output_skip", unset=None, kind=bool),
    },
}

RENAMED_SETTINGS: dict[str, dict[str, str]] = {
    # pretraining: `preset` named a model (a HybridSSMConfig preset), the adapter's `preset` a set of settings
    "PretrainSettings": {"override": "extra_config", "preset": "model_preset"},
}

# {settings class name (or a script without one): {old option: new option}}: options of the script that fills the
# class.
RENAMED_OPTIONS: dict[str, dict[str, str]] = {
    "StateTrackingSettings": {"--config": "--extra_config"},
    "AdapterExperimentSettings": {"--base": "--base_model", "--summary_json": "--summary"},
    # scripts/reference_automaton.py: its options mirror StateTrackingSettings fields and now take their names
    "reference_automaton": {
        "--steps": "--max_steps",
        "--heads": "--num_heads",
        "--states": "--state_size",
        "--lr": "--learning_rate",
        "--eval_samples": "--eval_samples_per_bucket",
        "--threads": "--cpu_threads",
    },
    # scripts/eval_nl_state_tracking.py and scripts/demo_adapter.py: their options take the names of the adapter
    # settings they mean (AdapterExperimentSettings); the records keep their keys ("model", "fewshot")
    "eval_nl_state_tracking": {
        "--model": "--base_model",
        "--num_stories": "--eval_samples_per_bucket",
        "--fewshot": "--fewshot_examples",
        "--transitions": "--test_buckets",
        "--batch_size": "--eval_batch_size",
    },
    # demo_adapter.py keeps --transitions: the number of sentences of its one story, not buckets
    "demo_adapter": {"--model": "--base_model", "--fewshot": "--fewshot_examples"},
    # benchmarks/bench_lm.py: as scripts/hybrid_ladder.py's (the record's key `threads` stays)
    "bench_lm": {"--threads": "--cpu_threads"},
    # the other benchmarks/bench_*.py that set torch's threads: the same spelling (their records' `threads` stays).
    # Then every benchmark option's words joined by underscores, as the scripts' (same dest; bench_scaling accepted
    # both spellings of its four)
    "bench_pd": {
        "--threads": "--cpu_threads",
        "--mem-steps": "--mem_steps",
        "--mem-batch": "--mem_batch",
        "--mem-d": "--mem_d",
    },
    "bench_hybrid": {
        "--threads": "--cpu_threads",
        "--train-lengths": "--train_lengths",
        "--train-rounds": "--train_rounds",
        "--new-tokens": "--new_tokens",
        "--decode-rounds": "--decode_rounds",
    },
    "bench_compile": {
        "--threads": "--cpu_threads",
        "--new-tokens": "--new_tokens",
        "--decode-rounds": "--decode_rounds",
        "--train-length": "--train_length",
        "--train-rounds": "--train_rounds",
    },
    "bench_deer": {"--threads": "--cpu_threads", "--hidden-size": "--hidden_size", "--state-size": "--state_size"},
    "bench_scaling": {
        "--threads": "--cpu_threads",
        "--hidden-size": "--hidden_size",
        "--max-gib": "--max_gib",
        "--max-seconds": "--max_seconds",
        "--scan-backend": "--scan_backend",
    },
    "bench_lru": {"--threads": "--cpu_threads", "--scan-repeats": "--scan_repeats", "--seq-repeats": "--seq_repeats"},
    "bench_automaton_step": {"--threads": "--cpu_threads"},
    "bench_kernels": {"--dict-size": "--dict_size", "--cpu-sanity": "--cpu_sanity"},
}


def renamed_option_message(old: str, new: str) -> str:
    """The refusal of the old option spelling `old`: "<old> was renamed: use <new>"."""
    return f"{old} was renamed: use {new}"


def moved_option_message(old: str, moved: Moved, text: str | None = None) -> str:
    """The refusal of an old option whose config field is now an --extra_config key, with the item that gives the
    value `text` (as the old option read it) when there is one."""
    try:
        example = config_item(moved.key, _read_old_value(text, moved.kind, old))
    except ValueError:
        example = f"{moved.key}=VALUE"
    return f"{old} was renamed: it set the HybridSSMConfig field {moved.key}; pass --extra_config {example}"


def upgrade_settings(settings_class: str, values: dict, config_defaults: dict | None = None) -> dict:
    """A settings dict written under old names (a settings.json, a record's settings or overrides) in the new ones
    of the settings class named `settings_class`: renamed fields under their new name, moved fields as
    `extra_config` keys under the recorded `extra_config` (which wins, as it did over them). The values are
    unchanged. `config_defaults` (the class's CONFIG_DEFAULTS; give them for a whole settings.json, not for
    overrides of a recipe): a moved value equal to its key's default there is left to it. ValueError where an old
    and a new name are both given with different values."""
    values = dict(values)
    for old, new in RENAMED_SETTINGS.get(settings_class, {}).items():
        if old not in values:
            continue
        value = values.pop(old)
        if new in values and values[new] != value:
            raise ValueError(
                f"{settings_class}: `{old}` (the old name of `{new}`) = {value!r} and `{new}` = {values[new]!r} "
                f"disagree; give only `{new}`"
            )
        values[new] = value
    config = {}
    for old, moved in MOVED_TO_EXTRA_CONFIG.get(settings_class, {}).items():
        if old in values:
            value = values.pop(old)
            at_default = config_defaults is not None and config_defaults.get(moved.key, _ALWAYS) == value
            if (moved.unset is _ALWAYS or value != moved.unset) and not at_default:
                config[moved.key] = value
    if config:
        values["extra_config"] = {**config, **(values.get("extra_config") or {})}
    return values


def _read_old_value(text: str | None, kind: type, option: str):
    """The value a recorded command gave the old option `option` of type `kind` (None: a bare bool flag)."""
    if kind is bool:
        if text is None:
            return True
        lowered = text.lower()
        if lowered in ("yes", "true", "t", "y", "1"):
            return True
        if lowered in ("no", "false", "f", "n", "0"):
            return False
        raise ValueError(f"{option}: {text!r} is not a bool (true / false)")
    if text is None:
        raise ValueError(f"{option} needs a value")
    return kind(text)


def config_item(key: str, value) -> str:
    """A KEY=VALUE item of --extra_config that reads back as `value` (a string is written bare unless it would read
    as JSON)."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except json.JSONDecodeError:
            return f"{key}={value}"
    return f"{key}={json.dumps(value)}"


def upgrade_argv(settings_class: str, argv: list[str]) -> list[str]:
    """A command line of the script that fills the settings class named `settings_class` (e.g.
    "AdapterExperimentSettings": scripts/train_adapter.py), recorded under old option spellings, in the new ones: a
    renamed option under its new name, the options of moved fields as one --extra_config (with the items of any
    --extra_config given, which win), a `--field-with-dashes` spelling as `--field`. The values are those the old
    parser read."""
    renamed = {f"--{old}": f"--{new}" for old, new in RENAMED_SETTINGS.get(settings_class, {}).items()}
    renamed.update(RENAMED_OPTIONS.get(settings_class, {}))
    moved = MOVED_TO_EXTRA_CONFIG.get(settings_class, {})
    out, config, given = [], {}, []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--"):
            out.append(token)
            continue
        name, sep, inline = token.partition("=")
        name = renamed.get(name, name)
        field = name[2:].replace("-", "_")
        negated = field.startswith("no_") and field[3:] in moved
        if field in moved or negated:
            field = field[3:] if negated else field
            text = inline if sep else (argv[i] if i < len(argv) and not argv[i].startswith("--") else None)
            if not sep and text is not None:
                i += 1
            value = False if negated else _read_old_value(text, moved[field].kind, f"--{field}")
            if moved[field].unset is _ALWAYS or value != moved[field].unset:
                config[moved[field].key] = value
            continue
        if field == "extra_config":
            given = []  # argparse: a repeated --extra_config replaces the earlier one
            while i < len(argv) and not argv[i].startswith("--"):
                given.append(argv[i])
                i += 1
            continue
        out.append(f"--{field}" + (f"={inline}" if sep else ""))
    if config or given:
        out += ["--extra_config", *(config_item(k, v) for k, v in config.items()), *given]
    return out
