"""A state-tracking run on a task mixture ("mqar+a5"): it trains on both tasks in equal shares, tests each on its
own lengths, records one summary record per task, and the ablated test zeroes exactly the named layers."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from hf_ssm.data.task_mixture import TaskMixture
from hf_ssm.training.state_tracking.driver import build_model, train_state_tracking, training_data
from hf_ssm.training.state_tracking.evaluation import zeroed_mixers
from hf_ssm.training.state_tracking.results import run_records
from hf_ssm.training.state_tracking.settings import StateTrackingSettings

MQAR_LENGTHS = {"train_min_length": 2, "train_max_length": 5, "test_min_length": 3, "test_max_length": 6,
                "num_buckets": 2, "far_lengths": ""}  # fmt: skip


def _settings(**overrides) -> StateTrackingSettings:
    values = dict(
        task="mqar+a5", mixer="pd_ssm", pattern="SA", hidden_size=16, state_size=4, num_heads=2, batch_size=8,
        max_steps=4, eval_every=2, save_every=2, num_buckets=2, eval_samples_per_bucket=8, val_samples_per_bucket=8,
        train_max_length=12, test_min_length=12, test_max_length=20, far_lengths="30", far_samples_per_bucket=4,
        restarts=1, task_vocab_size=16, sequence_length=24, component_settings={"mqar": MQAR_LENGTHS},
        extra_config={"pd_ssm_dict_size": 4},
    )  # fmt: skip
    return StateTrackingSettings(**{**values, **overrides})


def test_a_mixture_run_tests_each_task_on_its_own_and_records_each(tmp_path):
    """results.json holds each task's test on its own buckets (mqar by pairs, a5 by length), the far lengths only
    where that task has them, and an ablated test per named mixer; the summary gets one record per task, each
    naming the mixture."""
    settings = _settings(test_ablations="attention,pd_ssm")
    results = train_state_tracking(settings, tmp_path)
    mqar, a5 = (results["test"]["components"][name] for name in ("mqar", "a5"))
    assert [(b["min_length"], b["max_length"]) for b in mqar["buckets"]] == [(3, 4), (5, 6)]
    assert [(b["min_length"], b["max_length"]) for b in a5["buckets"]] == [(12, 15), (16, 20)]
    assert results["test"]["mean_accuracy"] == pytest.approx((mqar["mean_accuracy"] + a5["mean_accuracy"]) / 2)
    assert {b["task"] for b in results["far"]["buckets"]} == {"a5"}
    assert results["tasks"]["mqar"]["size_name"] == "num_pairs" and results["tasks"]["a5"]["train_lengths"] == [3, 12]
    assert set(results["ablations"]) == {"attention", "pd_ssm"}
    for point in results["history"]:  # the learning curve of each task, and their mean that selects
        assert point["val_accuracy"] == pytest.approx(sum(point["val_accuracy_by_task"].values()) / 2)
    records = run_records(results, tmp_path, "residual")
    assert [(r["task"], r["mixture"]) for r in records] == [("mqar", "mqar+a5"), ("a5", "mqar+a5")]
    assert set(records[0]["test_accuracy_by_bucket"]) == {"3-4", "5-6"} and "far_accuracy_by_length" not in records[0]
    assert records[1]["far_accuracy_by_length"].keys() == {"30"}
    assert [a for _, a in records[0]["task_validation_curve"]] == [
        h["val_accuracy_by_task"]["mqar"] for h in results["history"]
    ]
    assert (
        records[1]["ablation_mean_accuracy"]["pd_ssm"]
        == results["ablations"]["pd_ssm"]["components"]["a5"]["mean_accuracy"]
    )
    assert json.loads((tmp_path / "results.json").read_text())["test"] == results["test"]


def test_training_batches_hold_both_tasks_in_equal_shares_at_their_own_lengths():
    """Every training batch alternates mqar and a5 sequences (disjoint token ranges), mqar at its own pairs
    (2-5: 24 tokens), a5 at the run's lengths (3-12)."""
    settings = _settings()
    plan = settings.validate()
    data = training_data(settings, plan, 16, step=0)
    mqar, a5 = plan.task.components
    for i in range(16):
        ids = data[i]["input_ids"].tolist()
        if i % 2 == 0:
            assert len(ids) == 24 and max(ids) <= 15
        else:
            assert 3 <= len(ids) <= 12 and set(ids) <= {16, 17}
    assert isinstance(plan.task, TaskMixture) and plan.config.vocab_size == 18 and plan.config.num_labels == 7 + 60


def test_zeroed_mixers_leave_out_exactly_the_named_layers_and_clean_up():
    """Zeroing the attention layers gives the logits of the same model with its attention output projection at
    zero (the branch adds nothing), and once the block ends the model computes what it did before."""
    model = build_model(_settings()).eval()
    ids = torch.randint(16, 18, (2, 10))
    before = model(ids).logits
    with zeroed_mixers(model, "attention"):
        zeroed = model(ids).logits
    silenced = copy.deepcopy(model)
    for layer in silenced.model.layers:
        if layer.is_attention:
            torch.nn.init.zeros_(layer.mixer.o_proj.weight)
    torch.testing.assert_close(zeroed, silenced(ids).logits, rtol=0, atol=0)
    assert not torch.equal(zeroed, before)
    torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=0)
    with pytest.raises(ValueError, match="no 'diag_lru' layer to zero"):
        with zeroed_mixers(model, "diag_lru"):
            pass


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"task": "a5", "task_vocab_size": None, "sequence_length": None, "component_settings": {"a5": {}}},
         "applies to a task mixture"),
        ({"component_settings": {"s5": {}}}, "names 's5', which is not a task of 'mqar\\+a5'"),
        ({"component_settings": {"mqar": {"hidden_size": 8}}}, "must be a JSON object of the fields"),
        ({"component_settings": {"mqar": []}}, "must be a JSON object of the fields"),
        ({"component_settings": {"mqar": {**MQAR_LENGTHS, "test_max_length": 9}}}, "`test_max_length` = 9 \\(num_pairs\\)"),
        ({"component_settings": {"mqar": {**MQAR_LENGTHS, "num_buckets": 0}}}, "`num_buckets` must be >= 1"),
        ({"test_ablations": "attention,mamba2"}, "must name distinct mixers of the model's layers"),
        ({"test_ablations": "attention", "block_type": "post_norm_mixer"}, "needs block_type 'pre_norm_residual'"),
        ({"teacher_forcing_steps": 2}, "needs one task, not the mixture"),
    ],
)  # fmt: skip
def test_bad_mixture_settings_are_refused_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        _settings(**overrides).validate()
