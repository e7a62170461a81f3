"""The length curriculum of the state-tracking driver (StateTrackingSettings.length_curriculum_steps /
length_curriculum_start): the longest training length grows linearly over the first steps, the batches respect it,
the run after the curriculum sees the same data as a run without one, and bad values raise a clear error."""

from __future__ import annotations

import pytest

from hf_ssm.training.state_tracking.driver import _batch, longest_training_length, train_state_tracking, training_data
from hf_ssm.training.state_tracking.settings import StateTrackingSettings


def _settings(**fields) -> StateTrackingSettings:
    values = dict(task="parity", train_min_length=3, train_max_length=40, batch_size=16)
    return StateTrackingSettings(**{**values, **fields})


def test_longest_length_grows_linearly_from_the_start_to_the_maximum_then_stays():
    settings = _settings(length_curriculum_steps=100, length_curriculum_start=5)
    longest = [longest_training_length(settings, step) for step in (0, 1, 50, 99, 100, 101, 5000)]
    assert longest == [5, 5, 22, 39, 40, 40, 40]  # 5 + 35 * step / 100, rounded down
    assert all(longest_training_length(_settings(), step) == 40 for step in (0, 7, 5000))  # no curriculum


def test_curriculum_batches_hold_only_lengths_up_to_the_longest_of_their_step():
    settings = _settings(length_curriculum_steps=100, length_curriculum_start=5)
    plan = settings.validate()
    for step in (0, 30, 70):
        batch = _batch(training_data(settings, plan, 10_000, step), step, settings.batch_size)
        lengths = batch["length"].tolist()
        assert min(lengths) >= 3 and max(lengths) <= longest_training_length(settings, step)
    early = _batch(training_data(settings, plan, 10_000, 0), 0, 64)["length"]
    assert set(early.tolist()) == {3, 4, 5}  # every length of the first range is drawn


def test_after_the_curriculum_the_batches_equal_those_of_a_run_without_it():
    curriculum = _settings(task="modular_arithmetic", length_curriculum_steps=10)
    flat = _settings(task="modular_arithmetic")
    plan = flat.validate()  # the curriculum changes no part of the plan
    for step in (10, 11, 25):
        a = _batch(training_data(curriculum, plan, 1_000, step), step, 16)
        b = _batch(training_data(flat, plan, 1_000, step), step, 16)
        assert a["input_ids"].equal(b["input_ids"]) and a["labels"].equal(b["labels"])
    early = _batch(training_data(curriculum, plan, 1_000, 0), 0, 16)["length"]
    assert set(early.tolist()) <= {3, 5}  # modular arithmetic's lengths are odd


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"length_curriculum_steps": -1}, "`length_curriculum_steps` must be a finite number >= 0, got -1"),
        (
            {"length_curriculum_steps": 10, "length_curriculum_start": 2},
            "`length_curriculum_start` must lie in [train_min_length, train_max_length] = [3, 40], got 2",
        ),
        (
            {"length_curriculum_steps": 10, "length_curriculum_start": 41},
            "`length_curriculum_start` must lie in [train_min_length, train_max_length] = [3, 40], got 41",
        ),
        (
            {"task": "modular_arithmetic", "train_min_length": 4, "length_curriculum_steps": 10,
             "length_curriculum_start": 4},
            "task 'modular_arithmetic' has no valid length in [4, 4]",
        ),
    ],
)  # fmt: skip
def test_bad_curriculum_values_raise_a_clear_error(fields, message):
    with pytest.raises(ValueError) as err:
        _settings(**fields).validate()
    assert message in str(err.value)


def test_a_curriculum_run_records_its_curriculum(tmp_path):
    settings = _settings(
        hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}, batch_size=4, max_steps=4, eval_every=2, num_buckets=1,
        eval_samples_per_bucket=4, val_samples_per_bucket=4, test_min_length=40, test_max_length=44, restarts=1,
        length_curriculum_steps=3, length_curriculum_start=4,
    )  # fmt: skip
    assert train_state_tracking(settings, tmp_path)["length_curriculum"] == [4, 3]
    assert (
        train_state_tracking(_settings(**{**vars(settings), "length_curriculum_steps": 0}), tmp_path / "flat")[
            "length_curriculum"
        ]
        is None
    )
