"""One settings base for every training wing (hf_ssm/training/settings_base.py): each shared field declared once,
a wing's own default given as a default (not a second declaration), one spelling per option; and the settings,
records and commands written under the old names (hf_ssm/training/legacy_settings.py) still load and resume."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil

import pytest
from transformers import HfArgumentParser

import hf_ssm.training
from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
from hf_ssm.training.checkpointing import check_resumed_settings
from hf_ssm.training.cli import settings_parser
from hf_ssm.training.legacy_settings import MOVED_TO_EXTRA_CONFIG, RENAMED_SETTINGS, upgrade_argv, upgrade_settings
from hf_ssm.training.lm.finetuning import FinetuneSettings
from hf_ssm.training.lm.lm_settings import PretrainSettings
from hf_ssm.training.settings_base import (
    SettingsGroup,
    StepTrainingSettings,
    TrainingSettings,
    declared_fields,
)
from hf_ssm.training.state_tracking.settings import StateTrackingSettings
from hf_ssm.training.timeseries.classification import TimeSeriesSettings
from model_checks import load_script

WINGS = (PretrainSettings, FinetuneSettings, StateTrackingSettings, AdapterExperimentSettings, TimeSeriesSettings)
SCRIPTS = {
    "pretrain": PretrainSettings,
    "finetune": FinetuneSettings,
    "train_state_tracking": StateTrackingSettings,
    "train_adapter": AdapterExperimentSettings,
    "train_timeseries": TimeSeriesSettings,
}


def training_settings_classes() -> list[type]:
    """Every settings dataclass of hf_ssm.training (a dataclass whose name ends in "Settings"), found by importing
    each of its modules, so that a wing not named in WINGS is checked too."""
    found = {}
    for info in pkgutil.walk_packages(hf_ssm.training.__path__, "hf_ssm.training."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and name.endswith("Settings"):
                if obj.__module__ == module.__name__:
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[name] for name in sorted(found)]


def wing_default_names(cls) -> set[str]:
    """The inherited fields `cls` gives a default or a help sentence (its own DEFAULTS / HELP), not declarations."""
    return set(cls.__dict__.get("DEFAULTS", {})) | set(cls.__dict__.get("HELP", {}))


def test_no_settings_field_is_declared_twice():
    """Across every settings dataclass of hf_ssm.training, each field name is in the own `__annotations__` of one
    class only, leaving out a wing's DEFAULTS / HELP entries (a different default, not a second declaration); and
    `declared_fields` says the same."""
    classes = training_settings_classes()
    assert set(WINGS) <= set(classes) and len(classes) >= 12
    owners: dict[str, set[str]] = {}
    for cls in classes:
        fields = {f.name for f in dataclasses.fields(cls)}
        own = [name for name in cls.__dict__.get("__annotations__", {}) if name in fields]  # not the ClassVars
        declared = [name for name in own if name not in wing_default_names(cls)]
        assert sorted(declared) == sorted(declared_fields(cls)), cls.__qualname__
        for name in declared:
            owners.setdefault(name, set()).add(cls.__qualname__)
    twice = {name: sorted(classes) for name, classes in owners.items() if len(classes) > 1}
    assert twice == {}
    assert owners["learning_rate"] == {"TrainingSettings"} and owners["extra_config"] == {"ConfigFieldSettings"}
    assert owners["hidden_size"] == {"StackSettings"} and owners["tokenizer"] == {"DataSettings"}


def test_every_wing_shares_the_training_base_with_its_own_defaults():
    """Every wing is a TrainingSettings; those that count steps are StepTrainingSettings (the time series counts
    epochs); each wing keeps the defaults it had, with the shared field's type and help."""
    assert all(issubclass(wing, TrainingSettings) for wing in WINGS)
    assert not issubclass(TimeSeriesSettings, StepTrainingSettings)
    learning_rates = [wing().learning_rate for wing in WINGS]
    assert learning_rates == [3e-3, 1e-3, 1e-2, 1e-2, 5e-3]
    assert (PretrainSettings().max_steps, FinetuneSettings().max_steps, StateTrackingSettings().max_steps) == (
        300,
        150,
        1000,
    )
    assert (FinetuneSettings().tokenizer, PretrainSettings().tokenizer, FinetuneSettings().dataset) == (
        None,
        "byte",
        "builtin:dialogues",
    )
    field = {f.name: f for f in dataclasses.fields(PretrainSettings)}["batch_size"]
    assert field.default == 8 and field.type is int
    assert (
        field.metadata["help"].startswith("training examples per optimizer step")
        and "packed blocks" in field.metadata["help"]
    )


def test_declaring_a_shared_field_again_or_an_unknown_default_is_refused():
    """A wing that declares a shared field again, or gives a default to a field no base declares, is a TypeError
    when its class is created."""
    with pytest.raises(TypeError, match=r"declares \['learning_rate'\] again"):

        @dataclasses.dataclass
        class Twice(TrainingSettings):
            DEFAULTS = {"learning_rate": 1.0}
            learning_rate: float = 2.0

    with pytest.raises(TypeError, match="^Unknown: DEFAULTS / HELP name 'no_such_field', which no base settings"):

        class Unknown(SettingsGroup):
            DEFAULTS = {"no_such_field": 1}

    with pytest.raises(TypeError, match="^UnknownHelp: DEFAULTS / HELP name 'batch_sizes'"):

        class UnknownHelp(TrainingSettings):
            HELP = {"batch_sizes": "a misspelt field"}


@pytest.mark.parametrize("wing", WINGS, ids=[wing.__name__ for wing in WINGS])
def test_a_wings_defaults_are_what_its_parser_gives_without_arguments(wing):
    """Each default a wing sets in DEFAULTS (its own or a base wing's) is the value transformers' HfArgumentParser,
    and the scripts' settings_parser, give when no option is passed."""
    expected = {}
    for cls in reversed(wing.__mro__):
        expected.update(cls.__dict__.get("DEFAULTS", {}))
    assert expected, wing.__name__
    (plain,) = HfArgumentParser(wing).parse_args_into_dataclasses(args=[])
    scripts = settings_parser(wing).parse_args([])
    for name, value in expected.items():
        assert getattr(plain, name) == value and getattr(scripts, name) == value, name
    assert plain == wing()


def test_a_wing_default_keeps_the_declared_type_help_and_choices_and_copies_a_mutable_default():
    """A DEFAULTS entry changes only the default: the field keeps its declared type and metadata (help, choices),
    a dict / list default is a fresh copy per instance, and the field is not one the wing declares."""

    @dataclasses.dataclass
    class Base(SettingsGroup):
        kind: str = dataclasses.field(default="a", metadata={"help": "the kind", "choices": ["a", "b"]})
        items: list[str] = dataclasses.field(default_factory=list, metadata={"help": "the items"})
        table: dict = dataclasses.field(default_factory=dict, metadata={"help": "the table"})

    @dataclasses.dataclass
    class Wing(Base):
        DEFAULTS = {"kind": "b", "items": ["x"], "table": {"k": [1]}}
        HELP = {"kind": "this wing's kinds"}

    fields = {f.name: f for f in dataclasses.fields(Wing)}
    assert fields["kind"].type is str and fields["kind"].metadata["choices"] == ["a", "b"]
    assert fields["kind"].metadata["help"] == "the kind; this wing's kinds"
    assert fields["items"].metadata["help"] == "the items"
    first, second = Wing(), Wing()
    first.items.append("y")
    first.table["k"].append(2)
    assert (second.items, second.table) == (["x"], {"k": [1]}) and Wing.DEFAULTS["table"] == {"k": [1]}
    assert declared_fields(Wing) == [] and Base().kind == "a"
    (parsed,) = HfArgumentParser(Wing).parse_args_into_dataclasses(args=[])
    assert (parsed.kind, parsed.items) == ("b", ["x"])
    with pytest.raises(SystemExit):
        HfArgumentParser(Wing).parse_args_into_dataclasses(args=["--kind", "c"])  # the choices still hold


def _old_names(cls, values: dict) -> dict:
    """`values` (settings of `cls`) as a settings.json written before the renaming: renamed fields under their old
    name, the moved extra_config keys as their old fields (the adapter's at its old defaults when not set)."""
    old = dict(values)
    for before, after in RENAMED_SETTINGS.get(cls.__name__, {}).items():
        old[before] = old.pop(after)
    if "extra_config" not in old:  # renamed (pretraining's `override`)
        return old
    config = old.pop("extra_config")
    former = {"AdapterExperimentSettings": {**AdapterExperimentSettings.CONFIG_DEFAULTS}}.get(cls.__name__, {})
    for before, moved in MOVED_TO_EXTRA_CONFIG.get(cls.__name__, {}).items():
        if moved.key in config or moved.key in former:
            old[before] = config.pop(moved.key) if moved.key in config else former[moved.key]
        elif cls is AdapterExperimentSettings:
            old[before] = moved.unset  # an adapter's settings.json held every field
    if cls is not AdapterExperimentSettings:  # the adapter had no extra_config: every key moved out
        old["extra_config"] = config
    return old


CASES = [
    PretrainSettings(model_preset="pd_ssm-tiny", extra_config={"hidden_size": 32}),
    StateTrackingSettings(extra_config={"pd_ssm_dict_size": 8, "pd_ssm_transition": "bank"}),
    # transition_lr_scale: W_P's learning rate, a settings field until parameter_groups read it off the config
    StateTrackingSettings(extra_config={"pd_ssm_transition": "direct", "pd_ssm_transition_lr_scale": 0.25}),
    TimeSeriesSettings(extra_config={"pd_ssm_dict_size": 4}),
    AdapterExperimentSettings(extra_config={"pd_ssm_transition": "bank", "pd_ssm_output_skip": False}),
    AdapterExperimentSettings(),
]


@pytest.mark.parametrize("settings", CASES, ids=[f"{type(s).__name__}-{i}" for i, s in enumerate(CASES)])
def test_settings_saved_under_the_old_names_load_and_resume(settings):
    """A settings.json written under the old names (`override`, `preset`, `dict_size`, the adapter's `transition`,
    `num_heads`, ...) loads as the same settings (`from_saved`), and a run resumed with them passes the resume check;
    a changed value is still refused, named by its new name."""
    cls = type(settings)
    old = json.loads(json.dumps(_old_names(cls, dataclasses.asdict(settings))))
    assert set(old) != {f.name for f in dataclasses.fields(cls)}  # it really is spelt the old way
    loaded = cls.from_saved(old)
    effective = getattr(loaded, "mixer_settings", lambda: loaded.extra_config)()
    assert effective == getattr(settings, "mixer_settings", lambda: settings.extra_config)()
    assert dataclasses.replace(loaded, extra_config={}) == dataclasses.replace(settings, extra_config={})
    check_resumed_settings(settings, old, (), "the run")  # no error
    with pytest.raises(ValueError, match="learning_rate"):
        check_resumed_settings(dataclasses.replace(settings, learning_rate=0.5), old, (), "the run")


def test_a_moved_field_and_its_extra_config_key_resolve_as_before():
    """A moved field's value lands under the recorded extra_config, which wins (as it did over the field); a
    renamed field given under both names with different values is refused."""
    values = upgrade_settings("StateTrackingSettings", {"dict_size": 8, "extra_config": {"pd_ssm_dict_size": 4}})
    assert values == {"extra_config": {"pd_ssm_dict_size": 4}}
    with pytest.raises(ValueError, match="`override` .* and `extra_config` .* disagree"):
        upgrade_settings("PretrainSettings", {"override": {"a": 1}, "extra_config": {"a": 2}})


def test_a_recorded_command_reads_in_the_new_spellings():
    """upgrade_argv: --base and --summary_json under their new names, the PD-SSM options as one --extra_config (the
    values read as the old parser read them: "False" a bool, "0" a float), the items of a given --extra_config
    last (they win); the result parses to the same settings the old command gave."""
    old = "--base smollm2-135m --transition bank --output_skip False --dictionary_diagonal_init 0 --shared_selection"
    argv = upgrade_argv("AdapterExperimentSettings", [*old.split(), "--summary_json", "s.json", "--seed", "1"])
    assert argv == [
        "--base_model", "smollm2-135m", "--summary", "s.json", "--seed", "1", "--extra_config",
        "pd_ssm_transition=bank", "pd_ssm_output_skip=false", "pd_ssm_dictionary_diagonal_init=0.0",
        "pd_ssm_shared_selection=true",
    ]  # fmt: skip
    args = load_script("train_adapter").build_parser().parse_args(argv)
    assert (
        args.extra_config["pd_ssm_output_skip"] is False and args.extra_config["pd_ssm_dictionary_diagonal_init"] == 0
    )
    given = upgrade_argv("StateTrackingSettings", ["--dict_size", "8", "--config", "pd_ssm_dict_size=4"])
    assert given == ["--extra_config", "pd_ssm_dict_size=8", "pd_ssm_dict_size=4"]
    scaled = upgrade_argv("StateTrackingSettings", ["--transition_lr_scale", "0.04419"])
    assert scaled == ["--extra_config", "pd_ssm_transition_lr_scale=0.04419"]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_option_has_one_spelling_the_fields(script):
    """Each settings field of a training script is one option, spelled `--<field>`; every other spelling the parser
    knows (dashed twins, --no_<bool>, renamed and moved options) is hidden and refuses naming the spelling to use."""
    parser = load_script(script).build_parser()
    fields = {f.name for f in dataclasses.fields(SCRIPTS[script])}
    for action in parser._actions:
        if action.dest in fields:
            assert action.option_strings == [f"--{action.dest}"], action.option_strings
        elif action.option_strings and action.help == "==SUPPRESS==":
            assert type(action).__name__ == "RefusedOption", action.option_strings


def test_a_state_tracking_run_saved_under_the_old_names_resumes(tmp_path):
    """scripts/train_state_tracking.py --resume continues a run whose settings.json and checkpoint metadata hold the
    old names (here `dict_size`, before it became the extra_config key pd_ssm_dict_size)."""
    script = load_script("train_state_tracking")
    argv = [
        "--task", "parity", "--mixer", "pd_ssm", "--recipe", "residual", "--hidden_size", "16", "--state_size", "4",
        "--num_heads", "2", "--batch_size", "8", "--max_steps", "4", "--eval_every", "2", "--save_every", "2",
        "--num_buckets", "1", "--eval_samples_per_bucket", "8", "--val_samples_per_bucket", "8",
        "--train_max_length", "12", "--test_min_length", "12", "--test_max_length", "16", "--restarts", "1",
        "--output_dir", str(tmp_path), "--extra_config", "pd_ssm_dict_size=4",
    ]  # fmt: skip
    assert script.main(argv) == 0
    (tmp_path / "results.json").unlink()  # interrupted after its checkpoint at step 2
    saved = [tmp_path / "settings.json", *tmp_path.rglob("checkpoint_complete.json")]
    for path in saved:
        record = json.loads(path.read_text())
        settings = record.get("settings", record)
        settings["dict_size"] = settings["extra_config"].pop("pd_ssm_dict_size")  # the old spelling
        path.write_text(json.dumps(record))
    assert any("dict_size" in json.loads(path.read_text()).get("settings", {}) for path in saved[1:])
    assert script.main([*argv, "--resume"]) == 0
    assert json.loads((tmp_path / "results.json").read_text())["steps"] == 4
