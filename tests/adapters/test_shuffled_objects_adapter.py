"""tracking_shuffled_objects through the adapter experiment (scripts/train_adapter.py's run_experiment) on the
built-in tiny base: mixed n = 3, 5, 7 in one training set, test buckets per (n, swaps)."""

from __future__ import annotations

import json

import pytest

from hf_ssm.training.adapter import experiment, scoring
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


ENTITY_RUN = dict(
    task="tracking_shuffled_objects", pretrain_steps=0, tiny_hidden_size=16, tiny_layers=2, tiny_heads=2, max_steps=3,
    eval_every=3, batch_size=4, eval_batch_size=8, eval_samples_per_bucket=4, test_buckets="n", min_steps=0,
    train_max_transitions=7, adapter_kind="entity_tracking", frozen_mixer_parameters="", story_variety="varied",
    standardize_input=True, layer_index=0, train_examples=8,
)  # fmt: skip


@pytest.mark.parametrize("readout", ["classifier", "lm_head"])
def test_the_entity_tracker_trains_and_is_tested_on_held_out_stories(tmp_path, readout, monkeypatch):
    """The entity-tracking method on the tiny base, with either readout (the LM head's written after the last layer):
    a few steps on the "varied" stories, then test buckets per n and, for each held-out variety, per n again
    (named "heldout/n3:3-3", ...) on that variety's stories; the saved adapter is of kind entity_tracking with 7
    options."""
    extra = {"methods": "ssm_classifier", "heldout_buckets": "n"}
    if readout == "lm_head":
        extra = {"methods": "ssm", "write_layer_index": -1, "answer_loss": "vocab", "write_learning_rate": 0.1}
    settings = AdapterExperimentSettings(**ENTITY_RUN, **extra)
    seen = []  # the variety of every dataset's stories

    class Recording(scoring.NLStateTrackingDataset):
        def __init__(self, task, *args, **kwargs):
            seen.append(task.variety)
            super().__init__(task, *args, **kwargs)

    monkeypatch.setattr(scoring, "NLStateTrackingDataset", Recording)
    monkeypatch.setattr(experiment, "NLStateTrackingDataset", Recording)
    summary = run_experiment(settings, tmp_path)
    # training and validation on "varied", then the test: 3 buckets of it and 3 per held-out variety
    held_out = ["heldout"] * 3 + ["heldout_names"] * 3 if readout == "classifier" else []
    assert seen == ["varied", "varied", *["varied"] * 3, *held_out]
    (result,) = summary["results"]
    labels = list(summary_records(summary, str(tmp_path))[0]["accuracy_by_transitions"])
    plain = ["n3:3-3", "n5:5-5", "n7:7-7"]
    if readout == "classifier":
        assert labels == plain + [f"{v}/{b}" for v in ("heldout", "heldout_names") for b in plain]
    else:
        assert labels == plain
    config = json.loads((tmp_path / result["method"] / "adapter" / "adapter_config.json").read_text())
    assert (config["kind"], config["num_labels"], config["readout"]) == ("entity_tracking", 7, readout)
    assert "entity-tracking adapter @L0" in summary_records(summary, str(tmp_path))[0]["model"]
    assert "entity_tracking" in (tmp_path / result["method"] / "adapter" / "README.md").read_text()


def test_the_tagger_s_loss_is_added_with_its_weight():
    """score_batch of the entity tracker: the loss with role_weight w is the answer's loss plus w times the tagger's
    mean cross-entropy against the batch's token roles (computed here on its own); a batch without roles is refused."""
    import torch

    from hf_ssm.adapters import attach_ssm_adapter
    from hf_ssm.adapters.feature_cache import FrozenPrefix
    from hf_ssm.adapters.tiny_base import build_tiny_qwen2, build_word_tokenizer
    from hf_ssm.data import nl_state_tracking as nl
    from hf_ssm.training.adapter.scoring import score_batch

    task = nl.get_nl_task("tracking_shuffled_objects", variety="varied")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([task]))
    model = attach_ssm_adapter(
        build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=1, num_heads=2),
        AdapterExperimentSettings(**ENTITY_RUN, methods="ssm_classifier").classifier_adapter_config(None, 7),
    )
    data = nl.NLStateTrackingDataset(task, tokenizer, 3, 1, 4, seed=0)
    batch = nl.collate_nl_state_tracking([data[i] for i in range(3)], tokenizer.pad_token_id)
    answer_ids = torch.tensor(nl.answer_token_ids(task, tokenizer))
    losses = [score_batch("ssm_classifier", model, batch, answer_ids, "cpu", role_weight=w)[0] for w in (0.0, 2.0)]
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}  # the tagger's logits, again
    features = FrozenPrefix(model).features(**inputs)
    tracker = model.ssm_adapter
    logits = tracker.outputs(features, mask=batch["attention_mask"].bool(), input_ids=batch["input_ids"]).role_logits
    roles = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["token_roles"].flatten(), ignore_index=-100)
    torch.testing.assert_close(losses[1] - losses[0], 2.0 * roles)
    del batch["token_roles"]
    with pytest.raises(ValueError, match="trains its tagger on the stories' token roles"):
        score_batch("ssm_classifier", model, batch, answer_ids, "cpu")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task": "parity", "adapter_kind": "entity_tracking"}, "reads the roles of the tracking_shuffled_objects"),
        ({"methods": "lora_classifier"}, "trains methods \\['ssm_classifier', 'ssm'\\] only"),
        ({"transitions_at": "sentence_ends"}, "has no mixer: \\['transitions_at'\\]"),
        ({"frozen_mixer_parameters": "magnitude"}, "has no mixer: \\['frozen_mixer_parameters'\\]"),
        ({"adapter_kind": "tracker"}, "`adapter_kind` must be one of"),
        ({"story_variety": "mixed"}, "`story_variety` must be one of"),
        ({"heldout_buckets": "n", "heldout_varieties": "plain"}, "`heldout_varieties` must be one of"),
        ({"task": "parity", "adapter_kind": "mixer", "story_variety": "plain", "heldout_buckets": "n"},
         "apply to the tracking_shuffled_objects tasks only"),
    ],
)  # fmt: skip
def test_entity_settings_are_checked(fields, message):
    """The entity tracker's settings refuse another task, other methods and the mixer's options; the stories'
    variety and held-out buckets are checked by name and belong to the shuffled-objects tasks."""
    values = {**ENTITY_RUN, "methods": "ssm_classifier", **fields}
    if values["task"] == "parity":
        values["test_buckets"] = "1-3"
        values["story_variety"] = fields.get("story_variety", "plain")
    with pytest.raises(ValueError, match=message):
        AdapterExperimentSettings(**values).validate()
