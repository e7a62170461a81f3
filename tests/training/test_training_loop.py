"""The training skeleton every driver shares (hf_ssm.training.loop) and the package's learning-rate schedule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hf_ssm.training.lm.lm_settings import PretrainSettings
from hf_ssm.training.lm.pretraining import learning_rate_at
from hf_ssm.training.loop import run_training
from hf_ssm.training.optimization import build_scheduler, warmup_cosine_factor, warmup_cosine_schedule
from hf_ssm.training.state_tracking.settings import StateTrackingSettings

QUIET = SimpleNamespace(is_local_main_process=False)  # all run_training asks of an accelerator: no progress bar


def _run(total=7, start=0, eval_every=3, save_every=2, stop_at=None):
    events = []
    outcome = run_training(
        QUIET, desc="test", start=start, total=total, eval_every=eval_every, save_every=save_every,
        train_unit=lambda index: events.append(("train", index)),
        evaluate=lambda done: events.append(("eval", done)),
        should_stop=lambda done: stop_at is not None and done >= stop_at,
        save=lambda done: events.append(("save", done)),
    )  # fmt: skip
    return events, outcome


def test_evaluates_every_eval_every_units_and_after_the_last_and_saves_before_the_last():
    """Unit n (from 1): train, then evaluate when n % eval_every == 0 or n == total, then checkpoint when
    n % save_every == 0 and n < total (the finished model is exported instead)."""
    events, outcome = _run()
    assert events == [
        ("train", 0), ("train", 1), ("save", 2), ("train", 2), ("eval", 3), ("train", 3), ("save", 4),
        ("train", 4), ("train", 5), ("eval", 6), ("save", 6), ("train", 6), ("eval", 7),
    ]  # fmt: skip
    assert (outcome.units, outcome.stopped_early) == (7, False)


def test_a_resumed_run_trains_only_the_remaining_units():
    events, outcome = _run(start=4)
    assert [e for e in events if e[0] == "train"] == [("train", 4), ("train", 5), ("train", 6)]
    assert outcome.units == 7


def test_early_stop_is_asked_only_after_an_evaluation_and_skips_that_units_checkpoint():
    events, outcome = _run(stop_at=2, save_every=3)  # wants to stop from unit 2; the first evaluation is at 3
    assert events == [("train", 0), ("train", 1), ("train", 2), ("eval", 3)]
    assert (outcome.units, outcome.stopped_early) == (3, True)
    _, at_the_end = _run(stop_at=7)
    assert (at_the_end.units, at_the_end.stopped_early) == (7, False)  # stopping at the last unit is no early stop


def test_eval_every_zero_evaluates_after_the_last_unit_only():
    events, _ = _run(eval_every=0, save_every=0)
    assert [e for e in events if e[0] != "train"] == [("eval", 7)]


def test_out_of_time_evaluates_that_unit_and_ends_the_run():
    """When `out_of_time()` turns True after a unit, that unit is evaluated although no evaluation is due, the run
    stops there (before its checkpoint), and `should_stop` is not needed for it."""
    events, clock = [], iter([False, False, True])
    outcome = run_training(
        QUIET, desc="test", start=0, total=10, eval_every=5, save_every=3,
        train_unit=lambda index: events.append(("train", index)),
        evaluate=lambda done: events.append(("eval", done)),
        should_stop=lambda done: False, out_of_time=lambda: next(clock),
        save=lambda done: events.append(("save", done)),
    )  # fmt: skip
    assert events == [("train", 0), ("train", 1), ("train", 2), ("eval", 3)]
    assert (outcome.units, outcome.stopped_early) == (3, True)


@pytest.mark.parametrize("min_ratio", [0.0, 0.1])
def test_every_driver_follows_the_one_package_schedule(min_ratio):
    """Warm-up from lr / W reaching the peak at step W - 1, cosine from the peak at step W down to min_ratio at
    max_steps: the LM's learning_rate_at, the state-tracking "cosine" scheduler and the LambdaLR of the
    time-series driver give the same learning rate at every step."""
    lr, warmup, total = 0.5, 4, 20
    expected = [lr * warmup_cosine_factor(step, warmup, total, min_ratio) for step in range(total + 1)]
    assert expected[0] == pytest.approx(lr / warmup) and expected[warmup - 1] == expected[warmup] == lr
    assert expected[total] == pytest.approx(lr * min_ratio)

    lm = PretrainSettings(learning_rate=lr, warmup_steps=warmup, max_steps=total, min_lr_ratio=min_ratio)
    assert [learning_rate_at(step, lm) for step in range(total + 1)] == pytest.approx(expected, rel=1e-15)

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    if min_ratio == 0.0:
        settings = StateTrackingSettings(learning_rate=lr, warmup_steps=warmup, max_steps=total)
        scheduler = build_scheduler(optimizer, settings)
    else:
        scheduler = warmup_cosine_schedule(optimizer, warmup, total, min_ratio)
    seen = []
    for _ in range(total + 1):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == expected
