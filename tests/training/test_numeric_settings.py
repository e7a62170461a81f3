"""Every numeric setting of every driver (state tracking, adapter, pretraining, fine-tuning, time series) is checked
by the one helper, hf_ssm.training.settings_base.check_numeric_settings, before anything trains: nan and inf are refused,
and so are negative values of every setting that is not declared signed, each with a message naming the field.
(Before, `--learning_rate -1` trained and reported 0.0 % and `--learning_rate nan` died deep in the scan.)"""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from hf_ssm.training.adapter.experiment_settings import SIGNED_SETTINGS, AdapterExperimentSettings
from hf_ssm.training.lm.finetuning import FinetuneSettings
from hf_ssm.training.lm.lm_settings import PretrainSettings
from hf_ssm.training.state_tracking.settings import StateTrackingSettings
from hf_ssm.training.timeseries.classification import TimeSeriesSettings
from model_checks import load_script

DRIVERS = {
    "state_tracking": (StateTrackingSettings, {}),
    "adapter": (AdapterExperimentSettings, {}),
    "pretrain": (PretrainSettings, {"model_preset": "pd_ssm-tiny"}),
    "finetune": (FinetuneSettings, {"model": "unused"}),
    "timeseries": (TimeSeriesSettings, {}),
}
SIGNED = {"adapter": set(SIGNED_SETTINGS)}


def numeric_fields(cls) -> list[str]:
    """The fields of a settings dataclass annotated int or float (optional or not), bool excluded."""
    hints = typing.get_type_hints(cls)
    numeric = []
    for f in dataclasses.fields(cls):
        kinds = set(typing.get_args(hints[f.name])) or {hints[f.name]}
        if kinds & {int, float} and bool not in kinds:
            numeric.append(f.name)
    return numeric


CASES = [
    (driver, name, value)
    for driver, (cls, _) in DRIVERS.items()
    for name in numeric_fields(cls)
    for value in (math.nan, math.inf, -1)
    if not (value == -1 and name in SIGNED.get(driver, ()))
]


def test_the_cases_cover_every_driver_and_the_reported_fields():
    """The parametrisation below is not empty for any driver, and holds the learning rates the report named."""
    assert {d for d, _, _ in CASES} == set(DRIVERS)
    assert all(("adapter", "learning_rate", v) in CASES for v in (math.nan, math.inf, -1))
    assert len({(d, n) for d, n, _ in CASES}) > 100


@pytest.mark.parametrize(("driver", "name", "value"), CASES, ids=[f"{d}-{n}-{v}" for d, n, v in CASES])
def test_nan_inf_and_negative_numeric_settings_are_refused_naming_the_field(driver, name, value):
    """nan, inf, and -1 (for a setting not declared signed) in any numeric setting: ValueError naming it."""
    cls, required = DRIVERS[driver]
    cls(**required).validate()  # the defaults pass
    settings = cls(**required, **{name: value})
    with pytest.raises(ValueError, match=f"`{name}` must be a finite number"):
        settings.validate()


def test_the_signed_adapter_settings_still_take_negative_values():
    """A negative layer index (counting from the end) and a negative logit / diagonal offset stay valid."""
    signed = {"pd_ssm_dictionary_diagonal_init": -0.5, "pd_ssm_identity_entry_logit": -2.0}
    AdapterExperimentSettings(layer_index=-1, extra_config=signed, methods="ssm", write_layer_index=-1).validate()


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_the_adapter_mixer_fields_are_checked_by_the_config(value):
    """The adapter's mixer fields (extra_config keys) are checked: a nan or infinite value (every wing's extra_config)
    and a negative temperature (HybridSSMConfig's own check) are refused naming the config field."""
    with pytest.raises(ValueError, match="pd_ssm_temperature`"):
        AdapterExperimentSettings(extra_config={"pd_ssm_temperature": value}).validate()


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "0"])
def test_train_adapter_refuses_an_impossible_learning_rate_before_training(value, capsys):
    """scripts/train_adapter.py --learning_rate -1 / nan / inf / 0 exits 2 with the usage error naming the field,
    before any base is built or trained."""
    script = load_script("train_adapter")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--learning_rate", value])
    assert exit_info.value.code == 2
    assert "`learning_rate` must be a finite number > 0" in capsys.readouterr().err
