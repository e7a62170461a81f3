"""tracking_shuffled_objects through the adapter experiment (scripts/train_adapter.py's run_experiment) on the
built-in tiny base: mixed n = 3, 5, 7 in one training set, test buckets per (n, swaps)."""

from __future__ import annotations

import json

import pytest

from hf_ssm.training.adapter.experiment import run_experiment
from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
from hf_ssm.training.adapter.records import summary_records


def test_mixed_sizes_train_and_test_by_objects_and_swaps(tmp_path):
    """A 7-class classifier adapter and an LM-head adapter train a few steps on stories of 3, 5 and 7 objects with
    1-7 swaps (one transition per sentence end); the test has one bucket per n and item ("1-7,n,4n"), each named
    with its n in the table and the summary records, with chance 1/n."""
    settings = AdapterExperimentSettings(
        task="tracking_shuffled_objects", methods="ssm_classifier,ssm", pretrain_steps=0, tiny_hidden_size=16,
        tiny_layers=1, tiny_heads=2, max_steps=3, eval_every=3, batch_size=4, eval_batch_size=8,
        eval_samples_per_bucket=4, test_buckets="1-7,n,4n", train_max_transitions=7, min_steps=0,
        transitions_at="sentence_ends",
    )  # fmt: skip
    summary = run_experiment(settings, tmp_path)
    assert summary["num_classes"] == 7
    for result in summary["results"]:
        buckets = [(b["objects"], b["min_transitions"], b["max_transitions"]) for b in result["test"]["buckets"]]
        assert buckets == [(3, 1, 7), (3, 3, 3), (3, 12, 12), (5, 1, 7), (5, 5, 5), (5, 20, 20), (7, 1, 7),
                           (7, 7, 7), (7, 28, 28)]  # fmt: skip
        assert all(b["max_tokens"] > 0 and 0 <= b["accuracy"] <= 1 for b in result["test"]["buckets"])
    adapter = json.loads((tmp_path / "ssm_classifier" / "adapter" / "adapter_config.json").read_text())
    assert adapter["num_labels"] == 7 and adapter["transition_token_ids"]
    table = (tmp_path / "results.md").read_text()
    assert "| n3:1-7 | n3:3-3 | n3:12-12 | n5:1-7 |" in table and "| 33.3 | 33.3 | 33.3 | 20.0 |" in table
    records = summary_records(summary, str(tmp_path))
    assert list(records[0]["accuracy_by_transitions"])[:3] == ["n3:1-7", "n3:3-3", "n3:12-12"]


def test_object_buckets_are_refused_for_an_automaton_task():
    """ "4n" means nothing for the automata: the settings refuse it, naming the option."""
    with pytest.raises(ValueError, match="`test_buckets` must look like '1-10,40,80'"):
        AdapterExperimentSettings(task="parity", test_buckets="n,4n").validate()
