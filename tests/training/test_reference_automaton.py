"""scripts/reference_automaton.py: the minimal straight-through automaton, and its comparison with the package's
layer (--beside_layer) on the same task, seed and test buckets."""

from __future__ import annotations

import json

import pytest

from model_checks import load_script, run_script

TINY = ["--task", "parity", "--max_steps", "5", "--num_heads", "2", "--state_size", "4", "--batch_size", "8",
        "--train_max_length", "12", "--test_min_length", "12", "--test_max_length", "20", "--num_buckets", "2",
        "--eval_samples_per_bucket", "8"]  # fmt: skip


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


def test_fixed_readout_names_each_state_by_its_class_and_detach_stops_the_gradient_at_the_previous_state():
    """--fixed_readout: the readout is frozen at "state k is class k" (logit FIXED_READOUT_SCALE on the state's own
    class), so only the transition tables train; it is refused when the states are fewer than the classes.
    --detach_state: the loss at position 2 trains the transition taken there and not the one before it."""
    import torch

    script = load_script("reference_automaton")
    model = script.ReferenceAutomaton(vocab_size=4, num_classes=3, heads=1, states=4, fixed_readout=True)
    assert not any(p.requires_grad for p in model.readout.parameters())
    ids = torch.tensor([[1, 2, 3]])
    states = model.head_states(ids).flatten(2)  # (1, 3, 4) one-hot
    logits = model(ids)
    assert torch.equal(logits, script.FIXED_READOUT_SCALE * states[..., :3])
    with pytest.raises(ValueError, match="fixed_readout needs heads"):
        script.ReferenceAutomaton(vocab_size=4, num_classes=9, heads=1, states=4, fixed_readout=True)
    for detach, first_token_trained in ((False, True), (True, False)):
        torch.manual_seed(0)
        model = script.ReferenceAutomaton(4, 3, heads=1, states=4, fixed_readout=True, detach_state=detach)
        loss = script.sequence_loss(model(torch.tensor([[1, 2]])), torch.tensor([[-100, 0]]))  # position 2 only
        loss.backward()
        assert (model.logits.grad[1].abs().sum() > 0) == first_token_trained
        assert model.logits.grad[2].abs().sum() > 0


def test_teacher_forcing_starts_each_step_from_the_labelled_state_and_tests_free_running():
    """--teacher_forcing_steps: in training, position t's state is P[v_t] applied to the state the label at t - 1
    names (e_0 at t = 0), so a loss at one position trains only the transition taken there, from that state; without
    labels, or in eval mode, the model runs on its own states. Refused without a fixed readout or with several
    heads (a label names a state only then)."""
    import torch

    script = load_script("reference_automaton")
    torch.manual_seed(0)
    model = script.ReferenceAutomaton(4, 4, heads=1, states=4, fixed_readout=True, teacher_forcing=True)
    ids, labels = torch.tensor([[1, 2, 3]]), torch.tensor([[2, 1, 3]])
    p = model.transitions()[:, 0]  # (V, N, N)
    forced = model.teacher_forced_states(ids, labels)[:, :, 0]  # (1, 3, N)
    for t, previous in enumerate((0, 2, 1)):
        assert torch.equal(forced[0, t], p[ids[0, t], :, previous])
    assert torch.equal(model(ids, labels), script.FIXED_READOUT_SCALE * forced)
    assert torch.equal(model(ids), model.readout(model.head_states(ids).flatten(2)))  # no labels: free running
    model.eval()
    assert torch.equal(model(ids, labels), model(ids))
    model.train()
    loss = script.sequence_loss(model(ids, torch.tensor([[-100, -100, 3]])), torch.tensor([[-100, -100, 3]]))
    loss.backward()  # position 3 alone: only token 3's table gets a gradient
    assert model.logits.grad[3].abs().sum() > 0 and model.logits.grad[1:3].abs().sum() == 0
    for kwargs in ({"fixed_readout": False}, {"fixed_readout": True, "heads": 2}):
        with pytest.raises(ValueError, match="teacher_forcing needs fixed_readout and heads == 1"):
            script.ReferenceAutomaton(4, 4, **{"heads": 1, "states": 4, **kwargs}, teacher_forcing=True)
