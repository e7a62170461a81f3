"""Teacher forcing of the state-tracking driver (`teacher_forcing_steps`, recipe `table_forced`): each position
trains from the state its previous label names, the classifier reads state k as class k, the settings that cannot
be teacher-forced are refused naming the field, and a run learns S3's table exactly while testing free."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import DynamicCache

from hf_ssm.data.state_tracking import StateTrackingDataset, collate_state_tracking
from hf_ssm.training.state_tracking.driver import build_model, train_state_tracking
from hf_ssm.training.state_tracking.recipes import resolve_settings
from hf_ssm.training.state_tracking.settings import StateTrackingSettings
from hf_ssm.training.state_tracking.teacher_forcing import teacher_forced_loss

S3 = dict(task="s3", state_size=6, extra_config={"pd_ssm_transition_init_scale": 3.46})  # sqrt(d): N(0, 1) logits
TINY_TEST = dict(num_buckets=2, eval_samples_per_bucket=64, val_samples_per_bucket=32, test_max_length=80)


def s3_settings(**fields) -> StateTrackingSettings:
    explicit = {**S3, **fields}
    explicit["extra_config"] = {**S3["extra_config"], **fields.get("extra_config", {})}
    return StateTrackingSettings(**resolve_settings("table_forced", explicit))


def _batch(task, size=4, seed=0):
    data = StateTrackingDataset(task, size, 3, 9, seed=seed)
    return collate_state_tracking([data[i] for i in range(size)])


def test_each_position_runs_one_step_from_the_state_its_previous_label_names():
    """Position t's logits under teacher forcing are the model's logits for the one-token sequence v_t started from
    e_(label t-1) through the cache (e_0, the identity, at t = 0: the model's own start), and the loss is the mean
    cross-entropy over the labelled positions."""
    settings = s3_settings()
    plan = settings.validate()
    model = build_model(settings)
    batch = _batch(plan.task)
    ids, labels = batch["input_ids"], batch["labels"]
    loss = teacher_forced_loss(model, plan.config, ids, labels)
    losses = []
    for b, t in zip(*torch.nonzero(labels >= 0, as_tuple=True), strict=True):
        previous = 0 if t == 0 else int(labels[b, t - 1])
        start = torch.zeros(1, 1, 6, 2)
        start[0, 0, previous, 0] = 1.0
        cache = DynamicCache(config=plan.config)
        cache.update_recurrent_state(start, 0)
        logits = model(input_ids=ids[b, t].view(1, 1), cache=cache).logits[0, 0]
        losses.append(torch.nn.functional.cross_entropy(logits[None], labels[b, t].view(1)))
        if t == 0:
            torch.testing.assert_close(logits, model(input_ids=ids[b, :1].view(1, 1)).logits[0, 0])
    torch.testing.assert_close(loss, torch.stack(losses).mean())


def test_the_readout_is_frozen_at_state_k_is_class_k():
    """The classifier of a teacher-forced model is not trained and reads state k as class k, with a logit of
    sqrt(d) after the final RMSNorm; the run's other layers are the `table` recipe's."""
    settings = s3_settings()
    model = build_model(settings)
    assert not model.score.weight.requires_grad and not model.score.bias.requires_grad
    hidden = torch.zeros(6, 12)
    hidden[torch.arange(6), torch.arange(6)] = 12**0.5  # e_k after the RMSNorm (norm weight 1 at init)
    assert torch.equal(model.score(hidden).argmax(-1), torch.arange(6))
    assert model.model.layers[0].mixer.transition_proj.weight.requires_grad


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_heads": 2}, "needs pd_ssm_num_heads=1 (got 2)"),
        ({"state_size": 8}, "needs state_size = the task's number of classes, 6 (got 8)"),
        ({"supervision": "last"}, "needs supervision='every' (got 'last')"),
        ({"task": "parity", "state_size": 2}, "needs a group word problem (a5, s5, s3, a4, ...), whose empty word"),
        ({"extra_config": {"pd_ssm_transition": "bank"}}, "needs pd_ssm_transition='direct' (got 'bank')"),
        ({"extra_config": {"pd_ssm_output_trainable": True}}, "needs pd_ssm_output_trainable=False (got True)"),
        ({"mixer": "diag_lru"}, "needs mixers=['pd_ssm'] (got ['diag_lru'])"),
        ({"teacher_forcing_steps": -1}, "`teacher_forcing_steps` must be a finite number >= 0, got -1"),
    ],
)
def test_settings_that_cannot_be_teacher_forced_are_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        s3_settings(**fields).validate()


def test_teacher_forced_run_learns_s3_exactly_and_tests_free_running(tmp_path):
    """S3 (6 states, 2 generators) through the driver: validation and test run the model on its own states and
    reach 100 % at 40-80, the record names the recipe and the teacher-forced steps."""
    settings = s3_settings(max_steps=400, **TINY_TEST)
    record = train_state_tracking(settings, tmp_path)
    assert record["test"]["mean_accuracy"] == 1.0
    saved = json.loads((tmp_path / "settings.json").read_text())
    assert (saved["recipe"], saved["teacher_forcing_steps"]) == ("table_forced", 1500)
