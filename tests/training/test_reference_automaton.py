"""scripts/reference_automaton.py: the minimal straight-through automaton, and its comparison with the package's
layer (--beside_layer) on the same task, seed and test buckets."""

from __future__ import annotations

import json

from model_checks import run_script

TINY = ["--task", "parity", "--steps", "5", "--heads", "2", "--states", "4", "--batch_size", "8",
        "--train_max_length", "12", "--test_min_length", "12", "--test_max_length", "20", "--num_buckets", "2",
        "--eval_samples", "8"]  # fmt: skip


def test_reference_beside_the_layer_scores_both_on_the_same_test_buckets(tmp_path):
    """--beside_layer trains the layer with the default recipe (table, one run) at the reference's heads and states,
    and both are scored on the same buckets and test sizes; the layer's run folder is written."""
    out = tmp_path / "pair.json"
    result = run_script("reference_automaton", *TINY, "--json", str(out), "--beside_layer", str(tmp_path / "layer"))
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    layer = record["layer"]
    settings = json.loads((tmp_path / "layer" / "settings.json").read_text())
    assert (settings["recipe"], settings["num_heads"], settings["state_size"], settings["restarts"]) == (
        "table",
        2,
        4,
        1,
    )
    assert (settings["hidden_size"], settings["max_steps"], settings["batch_size"]) == (16, 5, 8)  # d = 2 H N
    assert layer["recipe"] == "table" and layer["steps"] <= 5
    bucket = lambda b: (b["min_length"], b["max_length"], b["samples"])  # noqa: E731
    assert [bucket(b) for b in record["test"]] == [bucket(b) for b in layer["test"]["buckets"]]
    assert (tmp_path / "layer" / "model").is_dir() and (tmp_path / "layer" / "results.json").is_file()
    assert "reference: mean" in result.stdout and "layer:     mean" in result.stdout
