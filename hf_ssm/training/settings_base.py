"""The settings the training wings share, declared once (docs/design.md §11.2).

Every wing's settings dataclass (causal LM: `lm.lm_settings.PretrainSettings` and `lm.finetuning.FinetuneSettings`;
`state_tracking.settings.StateTrackingSettings`; `adapter.experiment_settings.AdapterExperimentSettings`;
`timeseries.classification.TimeSeriesSettings`) is built from these groups and adds only its own fields:

- `TrainingSettings` (every wing): the optimisation (`learning_rate`, `weight_decay`, `grad_clip`, `batch_size`),
  the checkpoint cadence (`save_every`, in the wing's training units) and the `seed`;
- `StepTrainingSettings` (the wings that count optimizer steps: causal LM, state tracking, adapter): `max_steps`,
  the warm-up (`warmup_steps`) and the evaluation cadence (`eval_every`). The time-series wing counts epochs
  (`max_epochs`, `warmup_epochs`, a validation after every epoch) and declares those itself;
- `TrackingSettings` (the two state-tracking wings, formal tasks and stories on a frozen LM): the `task`, which
  positions are supervised, the early stop (`target_accuracy`, `min_steps`) and the test size per length bucket;
- `ConfigFieldSettings` (the wings that build a HybridSSMConfig or a mixer): `extra_config`, the one way a
  HybridSSMConfig field is set from the command line (`--extra_config KEY=VALUE ...`);
- `MixerSettings` (state tracking, time series, adapter): the SSM `mixer`;
- `DatasetSettings` (causal LM, time series): the `dataset`.

Every wing's `validate()` runs `check_numeric_settings` first: each numeric field finite and >= 0 (> 0 where it must
be), named in the error.

The run folder (`--output_dir`, `--resume`) and the seed lists (`--seeds`) are script arguments, not settings:
`hf_ssm.training.cli` declares them once for every script.

A wing whose default differs from the shared one does not declare the field again: it names the value in its class
attribute `DEFAULTS` ({field: default}), and may add a sentence to the field's --help (its accepted values) in
`HELP` ({field: text}). `SettingsGroup.__init_subclass__` applies both when the class is created, before
`@dataclass` reads it, so that the wing's `fields()`, its `__init__` defaults and its --help show the wing's value,
while the field's type and meaning stay those of its one declaration. Naming a field no base declares, or declaring a
field again as well, is a TypeError. A mutable default (a dict, list or set) is copied for every instance.

`@dataclass` reads only a class's own `__annotations__`, so the wing's gets an entry for each field it gives a default
or a help sentence: a tool that lists a class's own annotations sees those fields too. Its own `DEFAULTS` / `HELP`
record them; `declared_fields(cls)` is the fields `cls` declares, without them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import ClassVar

from ..modeling.config_values import check_number
from .cli import config_fields_field
from .legacy_settings import upgrade_settings


def help_field(text: str, **kwargs):
    """A dataclass field with its --help text (hf_ssm.training.cli.settings_parser)."""
    return field(metadata={"help": text}, **kwargs)


def check_numeric_settings(settings, signed: Collection[str] = (), positive: Collection[str] = ()) -> None:
    """The check of every numeric setting of every driver, run first by each settings dataclass's validate(): each
    int / float field of the dataclass `settings` must be a finite number (no nan, no inf), >= 0 unless it is in
    `signed` (a layer index counting from the end, a logit), and > 0 if it is in `positive` (a learning rate, a
    temperature: zero or less would train nothing or divide by zero). An unset optional (None) passes; the classes
    check their own tighter ranges after this. A numeric value of a dict field (an `extra_config` key: the config
    checks its range) must be finite too. ValueError naming the field, or the key."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, float):
                    check_number(f"{f.name}` key `{key}", item)
            continue
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if f.name in signed:
            check_number(f.name, value)
        else:
            check_number(f.name, value, low=0, low_open=f.name in positive)


class SettingsGroup:
    """The root of every training settings dataclass: applies a subclass's `DEFAULTS` and `HELP` (module docstring)."""

    DEFAULTS: ClassVar[dict] = {}
    HELP: ClassVar[dict] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        apply_wing_defaults(cls)

    @classmethod
    def from_saved(cls, values: dict):
        """The settings saved as `values` (a run's settings.json, a record's settings), also under the names they
        had before a renaming (legacy_settings.upgrade_settings)."""
        return cls(**saved_settings(cls, values))


def saved_settings(cls, values: dict) -> dict:
    """`values`, saved settings of the settings class `cls`, in its current field names (legacy_settings)."""
    return upgrade_settings(cls.__name__, values, getattr(cls, "CONFIG_DEFAULTS", {}))


def apply_wing_defaults(cls) -> None:
    """Give `cls` (a subclass being created, not yet a dataclass) the inherited fields named in its own `DEFAULTS` /
    `HELP`, with its default and its help sentence appended; type and the rest of the metadata as declared."""
    defaults, helps = cls.__dict__.get("DEFAULTS", {}), cls.__dict__.get("HELP", {})
    if not defaults and not helps:
        return
    annotations = cls.__dict__.get("__annotations__")
    if annotations is None:
        annotations = {}
        cls.__annotations__ = annotations
    again = sorted((set(defaults) | set(helps)) & set(annotations))
    if again:
        raise TypeError(
            f"{cls.__name__} declares {again} again: a shared field is declared once; set the wing's default in "
            "DEFAULTS and its help in HELP"
        )
    for name in dict.fromkeys([*defaults, *helps]):
        owner = next((base for base in cls.__mro__[1:] if name in getattr(base, "__dataclass_fields__", {})), None)
        if owner is None:
            raise TypeError(f"{cls.__name__}: DEFAULTS / HELP name {name!r}, which no base settings class declares")
        inherited = owner.__dataclass_fields__[name]
        metadata = dict(inherited.metadata)
        if name in helps:
            metadata["help"] = f"{metadata.get('help', '')}; {helps[name]}".lstrip("; ")
        if name in defaults:
            value = defaults[name]
            if isinstance(value, (dict, list, set)):
                new = field(default_factory=functools.partial(copy.deepcopy, value), metadata=metadata)
            else:
                new = field(default=value, metadata=metadata)
        elif inherited.default_factory is not dataclasses.MISSING:
            new = field(default_factory=inherited.default_factory, metadata=metadata)
        else:
            new = field(default=inherited.default, metadata=metadata)
        annotations[name] = typing.get_type_hints(owner)[name]
        setattr(cls, name, new)


def declared_fields(cls) -> list[str]:
    """The fields the class `cls` itself declares (not those it inherits, nor those it only gives a default)."""
    names = set(cls.__dict__.get("DEFAULTS", {})) | set(cls.__dict__.get("HELP", {}))
    own = cls.__dict__.get("__annotations__", {})
    return [f.name for f in dataclasses.fields(cls) if f.name in own and f.name not in names]


@dataclass
class TrainingSettings(SettingsGroup):
    """Optimisation, checkpoint cadence and seed: every wing's."""

    learning_rate: float = help_field("peak learning rate (AdamW)", default=1e-2)
    weight_decay: float = help_field("AdamW weight decay", default=0.0)
    grad_clip: float = help_field("clip the global gradient norm to this (0 = off)", default=1.0)
    batch_size: int = help_field("training examples per optimizer step and process", default=32)
    save_every: int = help_field(
        "checkpoint every N training units (optimizer steps; the time-series wing: epochs); 0 = never", default=0
    )
    seed: int = help_field("seed of the model's initialisation and of the training data", default=0)


@dataclass
class StepTrainingSettings(TrainingSettings):
    """The length, warm-up and evaluation cadence of a run counted in optimizer steps."""

    max_steps: int = help_field("optimizer steps", default=1000)
    warmup_steps: int = help_field("linear warm-up steps", default=30)
    eval_every: int = help_field("evaluate every N steps, and after the last", default=50)


@dataclass
class TrackingSettings(StepTrainingSettings):
    """The protocol of the state-tracking wings: a task trained on short sequences, stopped once validation reaches a
    target, tested by length bucket."""

    task: str = help_field("the state-tracking task", default="parity")
    supervision: str = help_field(
        "which positions are trained on: every position with a label, or only the last", default="every"
    )
    target_accuracy: float = help_field(
        "stop once the validation accuracy reaches this (not before min_steps)", default=0.99
    )
    min_steps: int = help_field("no early stop before this step", default=0)
    eval_samples_per_bucket: int = help_field("test sequences per length bucket", default=128)


@dataclass
class ConfigFieldSettings(SettingsGroup):
    """HybridSSMConfig fields of the run's model, one mechanism for every wing. `CONFIG_DEFAULTS`: the config fields
    the wing's model starts from, under `extra_config` (where the wing's default differs from HybridSSMConfig's);
    a resumed run compares `extra_config` over them (a key given at its wing default is the key not given)."""

    CONFIG_DEFAULTS: ClassVar[dict] = {}

    extra_config: dict = config_fields_field(
        "HybridSSMConfig fields, the one way to set a config field: KEY=VALUE items (the value read as JSON when it "
        "is JSON), e.g. pd_ssm_transition=bank, or a JSON object; merged key by key over the wing's own values"
    )


@dataclass
class MixerSettings(SettingsGroup):
    """The run's SSM mixer."""

    mixer: str = help_field("the SSM mixer (a registered mixer name)", default="pd_ssm")


@dataclass
class DatasetSettings(SettingsGroup):
    """The data a run trains on."""

    dataset: str | None = help_field("the dataset, by name or path", default=None)
