"""The `paper` recipe builds the documented model and optimizer, explicit flags override recipe values,
last-token supervision ignores every other position, summary.json merges runs, and the minimal DFA sizes."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from hf_ssm.data import StateTrackingDataset, collate_state_tracking, get_task
from hf_ssm.data.automata import minimal_dfa_size, task_automaton
from hf_ssm.data.state_tracking import last_token_correct, supervised_labels
from hf_ssm.training.optimization import build_optimizer, build_scheduler
from hf_ssm.training.state_tracking.driver import build_model, length_buckets
from hf_ssm.training.state_tracking.recipes import resolve_settings
from hf_ssm.training.state_tracking.results import recipe_overrides, run_record, update_summary_json
from hf_ssm.training.state_tracking.settings import StateTrackingSettings
from model_checks import load_script, run_script


def paper_settings(**explicit) -> StateTrackingSettings:
    return StateTrackingSettings(**resolve_settings("paper", {"task": "parity", **explicit}))


def test_paper_recipe_builds_two_post_norm_pd_ssm_blocks_of_the_documented_sizes():
    """--recipe paper: 2 post-norm mixer-only PD-SSM blocks, d = N = 128, one head, K = 8, x_0 = e_0, dropout 0.01."""
    model = build_model(paper_settings())
    config = model.config
    assert config.mixers == ["pd_ssm", "pd_ssm"] and config.num_hidden_layers == 2
    assert (config.block_type, config.block_dropout) == ("post_norm_mixer", 0.01)
    assert (config.hidden_size, config.pd_ssm_head_state_size, config.pd_ssm_num_heads) == (128, 128, 1)
    assert (config.pd_ssm_dict_size, config.pd_ssm_initial_state) == (8, "one_hot")
    assert not any(".mlp." in name for name, _ in model.named_parameters())


def test_paper_recipe_protocol_values():
    """Last-token labels, batch 256, no clipping, validation on 8 x 1,024 sequences at 40-256, stop at 99.95%."""
    s = paper_settings()
    assert (s.supervision, s.batch_size, s.grad_clip, s.restarts) == ("last", 256, 0.0, 1)
    assert (s.validation_lengths, s.test_min_length, s.test_max_length) == ("test", 40, 256)
    assert s.num_buckets * s.val_samples_per_bucket == 8192 and s.target_accuracy == 0.9995
    assert (s.train_min_length, s.train_max_length, s.max_steps, s.eval_every) == (3, 40, 100_000, 5_000)


def test_paper_optimizer_has_no_weight_decay_on_the_embedding_and_warms_up_then_decays_to_1e_5():
    """AdamW lr 2e-3, weight decay 0.01 on all but the embedding; linear warm-up over 10% of the steps, then
    cosine to 1e-5 at the last step."""
    s = paper_settings(max_steps=100)
    model = build_model(s)
    optimizer = build_optimizer(model, s)
    assert isinstance(optimizer, torch.optim.AdamW)
    embedding = model.get_input_embeddings().weight
    (no_decay,) = [g for g in optimizer.param_groups if g["weight_decay"] == 0.0]
    (decay,) = [g for g in optimizer.param_groups if g["weight_decay"] == 0.01]
    assert len(no_decay["params"]) == 1 and no_decay["params"][0] is embedding
    assert len(decay["params"]) == len(list(model.parameters())) - 1
    assert s.warmup_steps == 10
    scheduler = build_scheduler(optimizer, s)
    lrs = []
    for _ in range(100):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == 0.0 and lrs[5] == pytest.approx(1e-3) and lrs[10] == pytest.approx(2e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-5)


def test_residual_recipe_keeps_the_settings_defaults():
    """--recipe residual changes nothing: the settings equal StateTrackingSettings(), its label included."""
    assert StateTrackingSettings(**resolve_settings("residual", {})) == StateTrackingSettings()


def test_renamed_recipe_is_refused_with_its_new_name():
    """`default` (the residual recipe's former name) is refused, the message naming `residual`."""
    with pytest.raises(ValueError, match=r"got 'default' \(`default` is now called `residual`\)"):
        resolve_settings("default", {})
    with pytest.raises(ValueError, match="is now called `residual`"):
        StateTrackingSettings(recipe="default").validate()


def _driver_settings(monkeypatch, tmp_path, *argv) -> list[StateTrackingSettings]:
    """[settings of the first run `train_state_tracking.py *argv` would train] (the fake trainer stops the driver)."""
    script = load_script("train_state_tracking")
    seen = []

    def fake_train(settings, run_dir, resume=False, validated=False):
        seen.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(script, "train_with_restarts", fake_train)  # the first run stops the driver
    with pytest.raises(SystemExit):
        script.main([*argv, "--output_dir", str(tmp_path)])
    return seen


def test_without_recipe_pd_ssm_takes_table_and_a_baseline_takes_residual(monkeypatch, tmp_path):
    """The driver's default is per mixer: PD-SSM runs get `table` (3 restarts), diag_lru gets `residual` with
    --baseline_restarts (1), each exactly as resolve_settings gives it."""
    script = load_script("train_state_tracking")
    runs = []
    for mixer in ("pd_ssm", "diag_lru"):
        runs += _driver_settings(monkeypatch, tmp_path / mixer, "--task", "parity", "--mixer", mixer)
    pd_ssm, diag_lru = runs
    assert pd_ssm == StateTrackingSettings(**resolve_settings("table", {"task": "parity", "mixer": "pd_ssm"}))
    assert (pd_ssm.recipe, pd_ssm.block_type, pd_ssm.embedding_init, pd_ssm.restarts) == (
        "table",
        "mixer_only",
        "one_hot",
        3,
    )
    expected = resolve_settings("residual", {"task": "parity", "mixer": "diag_lru", "restarts": 1})
    assert diag_lru == StateTrackingSettings(**expected)
    assert (diag_lru.recipe, diag_lru.block_type, diag_lru.hidden_size, diag_lru.max_steps) == (
        "residual",
        "pre_norm_residual",
        64,
        1000,
    )
    assert script.DEFAULT_MIXERS == ["pd_ssm", "diag_lru"]  # the README's job: one run of each recipe per task


def test_an_explicit_recipe_applies_to_every_mixer(monkeypatch, tmp_path):
    """--recipe residual: the PD-SSM run takes it too (not table); --recipe table: the baseline takes table."""
    pd_ssm = _driver_settings(monkeypatch, tmp_path / "a", "--task", "parity", "--recipe", "residual")[0]
    assert (pd_ssm.mixer, pd_ssm.recipe, pd_ssm.block_type) == ("pd_ssm", "residual", "pre_norm_residual")
    (diag_lru,) = _driver_settings(monkeypatch, tmp_path / "b", "--mixer", "diag_lru", "--recipe", "table")
    assert (diag_lru.recipe, diag_lru.block_type, diag_lru.embedding_init) == ("table", "mixer_only", "one_hot")


def test_hybrid_block_wide_is_hybrid_block_with_the_recorded_runs_flags():
    """--recipe hybrid_block_wide resolves to the settings of the runs in hybrid_block_h64c512.json (hybrid_block
    with `--learning_rate 1e-2 --num_heads 64 --hidden_size 512 --extra_config pd_ssm_output_init=normal`), the recipe
    name apart, and builds 64 heads of N = 8 read through a frozen random C (1,024 -> 512) with W_P at 1e-2 / sqrt(d)."""
    flags = {
        "learning_rate": 1e-2,
        "num_heads": 64,
        "hidden_size": 512,
        "extra_config": {"pd_ssm_output_init": "normal"},
    }
    wide = resolve_settings("hybrid_block_wide", {"task": "a5"})
    assert wide == {**resolve_settings("hybrid_block", {"task": "a5", **flags}), "recipe": "hybrid_block_wide"}
    records = json.loads(
        (Path(__file__).resolve().parents[2] / "results/state_tracking/hybrid_block_h64c512.json").read_text()
    )
    for record in records:  # what each recorded run trained, by its recipe and overrides
        recorded = resolve_settings(record["recipe"], {"task": "a5", **record["overrides"]})
        assert {**recorded, "recipe": "hybrid_block_wide"} == {**wide, "recipe": "hybrid_block_wide"}
    settings = StateTrackingSettings(**wide)
    settings.validate()
    model = build_model(settings)
    mixer = model.model.layers[0].mixer
    assert (model.config.pd_ssm_num_heads, model.config.hidden_size) == (64, 512)
    assert mixer.out_proj.weight.shape == (512, 1024) and not mixer.out_proj.weight.requires_grad
    assert 0.015 < mixer.out_proj.weight.std().item() < 0.025  # N(0, 0.02^2), not the identity
    groups = build_optimizer(model, settings).param_groups
    (w_p,) = [g for g in groups if any(p is mixer.transition_proj.weight for p in g["params"])]
    assert w_p["lr"] == pytest.approx(1e-2 * 512**-0.5, rel=1e-5)
    assert {g["lr"] for g in groups if g is not w_p} == {1e-2}


@pytest.mark.parametrize(
    ("recipe", "explicit"),
    [
        ("hybrid_block", {"num_heads": 64, "hidden_size": 512}),  # 512 is also the recipe's own d (32 heads)
        ("hybrid_block", {"num_heads": 16}),  # d follows: 256
        ("paper", {"max_steps": 50}),  # the warm-up follows: 5
        ("table", {"learning_rate": 3e-3, "num_heads": 8, "hidden_size": 256}),
    ],
)
def test_a_records_overrides_give_its_settings_back(recipe, explicit):
    """recipe_overrides lists every value that resolve_settings(recipe, overrides) needs to give the run's settings
    back, a value the recipe derives (d = 2 H N, the warm-up) included where it kept the recipe's own number."""
    settings = asdict(StateTrackingSettings(**resolve_settings(recipe, {"task": "a5", **explicit})))
    overrides = recipe_overrides(settings, recipe)
    keys = {k: settings[k] for k in ("task", "mixer", "seed", "num_generators")}  # a record's own fields
    assert asdict(StateTrackingSettings(**resolve_settings(recipe, {**keys, **overrides}))) == settings


def test_explicit_values_override_the_recipe_and_the_warmup_follows_max_steps():
    """An explicit value wins over the recipe's; the paper warm-up is 10% of the final max_steps unless
    warmup_steps is given."""
    s = paper_settings(learning_rate=1e-3, max_steps=50, supervision="every")
    assert (s.learning_rate, s.max_steps, s.warmup_steps, s.supervision) == (1e-3, 50, 5, "every")
    assert paper_settings(max_steps=50, warmup_steps=7).warmup_steps == 7
    with pytest.raises(
        ValueError,
        match=r"`recipe` must be one of \['table', 'table_wide', 'table_curriculum', 'table_forced', 'hybrid', 'hybrid_block', 'hybrid_block_wide', 'hybrid_recall'",
    ):
        resolve_settings("papers", {})


def test_command_line_flags_override_the_recipe(monkeypatch, tmp_path):
    """`--recipe paper --learning_rate 1e-3 --decay_embedding true`: those two flags win, the rest is the recipe."""
    argv = ["--recipe", "paper", "--task", "parity", "--learning_rate", "1e-3", "--decay_embedding", "true"]
    (s,) = _driver_settings(monkeypatch, tmp_path, *argv)
    assert (s.recipe, s.learning_rate, s.decay_embedding) == ("paper", 1e-3, True)
    assert (s.block_type, s.batch_size, s.weight_decay, s.warmup_steps) == ("post_norm_mixer", 256, 0.01, 10_000)


def test_bad_recipe_exits_with_code_2_naming_the_accepted_values(tmp_path):
    result = run_script("train_state_tracking", "--recipe", "authors", "--output_dir", str(tmp_path))
    assert result.returncode == 2
    assert (
        "--recipe: invalid choice: 'authors'" in result.stderr
        and "'table', 'table_wide', 'table_curriculum', 'table_forced', 'hybrid', 'hybrid_block', 'hybrid_block_wide', 'hybrid_recall', 'residual', "
        "'residual_narrow', 'direct', 'paper'"
        in result.stderr
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"supervision": "first"}, "`supervision` must be one of ['every', 'last']"),
        ({"block_type": "post"}, "`block_type` must be one of"),
        ({"lr_schedule": "linear"}, "`lr_schedule` must be one of ['cosine', 'cosine_with_min_lr', 'constant']"),
        ({"lr_schedule": "constant", "min_learning_rate": 1e-5}, "the 'constant' schedule has no floor"),
        ({"min_learning_rate": 1e-5}, "needs lr_schedule='cosine_with_min_lr'"),
    ],
)
def test_bad_recipe_fields_raise_a_clear_error(fields, message):
    with pytest.raises(ValueError) as err:
        StateTrackingSettings(**fields).validate()
    assert message in str(err.value)


# ------------------------------------------------------------------------------------------ last-token labels


def _batch(task="cycle_navigation", n=6):
    return collate_state_tracking([StateTrackingDataset(get_task(task), n, 3, 12, seed=1)[i] for i in range(n)])


def test_last_token_supervision_ignores_every_other_position():
    """With supervision "last", changing the labels or the logits at any position but a row's last real token
    changes neither the loss nor the accuracy (and under "every" the same change does move the loss)."""
    torch.manual_seed(0)
    batch = _batch()
    model = build_model(
        StateTrackingSettings(
            task="cycle_navigation", hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}
        )
    )
    labels = supervised_labels(batch, "last")
    last = batch["length"] - 1
    rows = torch.arange(len(last))
    assert (labels != -100).sum() == len(last) and torch.equal(labels[rows, last], batch["label"])

    other = torch.ones_like(labels, dtype=torch.bool)
    other[rows, last] = False
    scrambled = dict(batch, labels=torch.where(other & (batch["labels"] != -100), (batch["labels"] + 1) % 5, -100))
    assert torch.equal(supervised_labels(scrambled, "last"), labels)

    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    noisy = torch.where(other.unsqueeze(-1), logits + 10 * torch.randn_like(logits), logits)
    loss = model.loss_function(logits, labels, model.config)
    assert model.loss_function(noisy, labels, model.config) == loss
    assert last_token_correct(noisy.argmax(-1), batch) == last_token_correct(logits.argmax(-1), batch)
    every = batch["labels"]
    assert model.loss_function(noisy, every, model.config) != model.loss_function(logits, every, model.config)


def test_every_prefix_supervision_keeps_the_task_labels():
    batch = _batch("parity")
    assert supervised_labels(batch, "every") is batch["labels"]


# ---------------------------------------------------------------------------------------------- summary.json


def _results(task="parity", seed=0, accuracy=0.5):
    return {
        "task": task,
        "mixer": "pd_ssm",
        "seed": seed,
        "steps": 10,
        "cpu_seconds": 1.5,
        "train_seconds": 2.0,
        "validation": {"lengths": "test", "accuracy": accuracy},
        "test": {"buckets": [{"min_length": 40, "max_length": 147, "accuracy": accuracy}], "mean_accuracy": accuracy},
    }


def test_summary_merges_runs_and_replaces_a_rewritten_run(tmp_path):
    """Records of new runs are appended; the same (task, mixer, recipe, seed, run) replaces its old record; the
    file is rewritten atomically (no temporary file left) and holds exactly the documented fields."""
    path = tmp_path / "results" / "summary.json"
    update_summary_json(path, [run_record(_results(seed=0), "paper", "runs/a")])
    update_summary_json(path, [run_record(_results(seed=1), "paper", "runs/b")])
    merged = update_summary_json(path, [run_record(_results(seed=0, accuracy=0.9), "paper", "runs/a")])
    assert json.loads(path.read_text()) == merged
    assert [(r["seed"], r["test_mean_accuracy"]) for r in merged] == [(1, 0.5), (0, 0.9)]
    assert set(merged[0]) >= {"task", "mixer", "recipe", "seed", "steps", "cpu_seconds", "test_accuracy_by_bucket"}
    assert merged[1]["test_accuracy_by_bucket"] == {"40-147": 0.9} and merged[1]["recipe"] == "paper"
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]


def test_script_run_writes_one_summary_record_per_restart_seed(tmp_path):
    """A tiny paper-recipe run with 2 restarts (flags overriding the sizes) merges both seeds into --summary, each
    with its own far-length scores."""
    summary = tmp_path / "summary.json"
    tiny = [
        "--hidden_size", "16", "--state_size", "4", "--extra_config", "pd_ssm_dict_size=4", "--batch_size", "8", "--max_steps", "4",
        "--eval_every", "2", "--num_buckets", "2", "--eval_samples_per_bucket", "8", "--val_samples_per_bucket",
        "4", "--train_max_length", "12", "--test_min_length", "12", "--test_max_length", "30", "--restarts", "2",
        "--target_accuracy", "1.0", "--far_lengths", "40,50", "--far_samples_per_bucket", "2",
    ]  # fmt: skip
    result = run_script(
        "train_state_tracking", "--recipe", "paper", "--task", "parity", "--mixer", "pd_ssm", "--output_dir",
        str(tmp_path / "run"), "--summary", str(summary), *tiny, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = json.loads(summary.read_text())
    assert [(r["recipe"], r["seed"]) for r in records] == [("paper", 0), ("paper", 1000)]
    assert [set(r["far_accuracy_by_length"]) for r in records] == [{"40", "50"}] * 2
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == records
    assert "minimal DFA of parity: 2 states" in result.stdout and "best validation accuracy" in result.stdout
    settings = json.loads((tmp_path / "run" / "settings.json").read_text())
    assert (settings["block_type"], settings["supervision"], settings["hidden_size"]) == ("post_norm_mixer", "last", 16)
    # each record carries its learning curve (validation every 2 steps of 4) and the flags that changed the recipe
    assert [step for step, _ in records[0]["validation_curve"]] == [2, 4]
    assert records[0]["overrides"]["hidden_size"] == 16 and records[0]["overrides"]["train_max_length"] == 12
    assert "block_type" not in records[0]["overrides"] and "seed" not in records[0]["overrides"]
    figure = tmp_path / "curves.png"
    plotted = run_script("plot_state_tracking", "--summary", str(summary), "--out", str(figure))
    assert plotted.returncode == 0, plotted.stderr[-3000:]
    assert figure.stat().st_size > 0


def test_plot_script_refuses_a_series_that_matches_no_record(tmp_path):
    """--series that selects nothing is an error naming the flag, not an empty figure."""
    summary = tmp_path / "summary.json"
    update_summary_json(
        summary, [run_record({**_results(), "history": [{"step": 5, "val_accuracy": 0.5}]}, "residual", "a")]
    )
    result = run_script(
        "plot_state_tracking", "--summary", str(summary), "--series", "x=nowhere", "--out", str(tmp_path / "f.png")
    )
    assert result.returncode == 2 and "--series" in result.stderr and not (tmp_path / "f.png").exists()


# ------------------------------------------------------------------------------------------------ minimal DFA


def test_minimal_dfa_sizes_of_parity_and_cycle_navigation():
    """Parity needs 2 states (even / odd), cycle navigation 5 (the positions); A5 its 60 elements."""
    assert minimal_dfa_size(get_task("parity")) == 2
    assert minimal_dfa_size(get_task("cycle_navigation")) == 5
    assert minimal_dfa_size(get_task("a5")) == 60


@pytest.mark.parametrize("task", ["parity", "even_pairs", "cycle_navigation", "modular_arithmetic", "a5", "s5"])
def test_task_automaton_reproduces_the_generator_labels(task):
    """The automaton whose states are counted gives Task.labels on random sequences of the task."""
    task = get_task(task)
    machine, rng = task_automaton(task), random.Random(0)
    for _ in range(50):
        tokens, labels = task.sample(rng.choice([1, 3, 7, 21]), rng)
        assert machine.run(tokens) == labels


def test_bracketed_arithmetic_has_no_finite_automaton():
    with pytest.raises(ValueError, match="modular_arithmetic_brackets"):
        task_automaton(get_task("modular_arithmetic_brackets"))


def test_a_recipe_with_a_warmup_fraction_sets_its_own_max_steps():
    """resolve_settings derives the warm-up from the recipe's max_steps (it reads no settings class), so every
    recipe with a warm-up fraction must name one; an explicit max_steps still moves the warm-up with it."""
    from hf_ssm.training.state_tracking.recipes import RECIPES, WARMUP_FRACTIONS

    for name, fraction in WARMUP_FRACTIONS.items():
        assert fraction is None or "max_steps" in RECIPES[name], name
    assert resolve_settings("paper", {"max_steps": 2000})["warmup_steps"] == 200


@pytest.mark.parametrize("recipe", ["table", "direct"])
def test_square_output_recipes_size_the_model_to_its_heads(recipe):
    """Under table / direct, hidden_size is 2 H N (C square) unless given: 256 by default, 512 with 32 heads, and
    an explicit hidden_size wins (and is then checked by the model config)."""
    assert resolve_settings(recipe, {})["hidden_size"] == 256
    wide = StateTrackingSettings(**resolve_settings(recipe, {"task": "a5", "num_heads": 32}))
    wide.validate()
    assert wide.hidden_size == 512 and build_model(wide).config.hidden_size == 512
    assert resolve_settings(recipe, {"num_heads": 32, "hidden_size": 640})["hidden_size"] == 640
    assert StateTrackingSettings(**resolve_settings("residual", {"num_heads": 32})).hidden_size == 64


def test_a_model_with_attention_accepts_the_far_test_lengths():
    """max_position_embeddings covers the far lengths: the far test of a hybrid scores sequences of 1,000 tokens
    (it raised 'exceeds config.max_position_embeddings' when the limit was the longest test length)."""
    settings = StateTrackingSettings(
        **resolve_settings("table", {"task": "parity", "pattern": "SA", "block_type": "pre_norm_residual"})
    )
    model = build_model(settings)
    assert model.config.max_position_embeddings == 4000
    with torch.no_grad():
        logits = model(input_ids=torch.ones(1, 1000, dtype=torch.long)).logits
    assert logits.shape[:2] == (1, 1000)


@pytest.mark.parametrize(("recipe", "task"), [("hybrid", "a5"), ("hybrid_recall", "mqar")])
def test_hybrid_recipes_match_the_single_mixer_models_in_trained_parameters(recipe, task):
    """`hybrid` is table's PD-SSM layer then attention, pre-norm residual blocks, d = 256, W_P reading sqrt(d) e_v at
    init scale 1 (N(0, 1) logits); its single-mixer models (`--pattern SS`, PD-SSM or attention) train exactly as
    many parameters, so the matrix compares models of one size."""
    trained, mixers = {}, {}
    for mixer, pattern in [("pd_ssm", None), ("pd_ssm", "SS"), ("attention", "SS")]:
        explicit = {"task": task, "mixer": mixer, **({"pattern": pattern} if pattern else {})}
        model = build_model(StateTrackingSettings(**resolve_settings(recipe, explicit)))
        config = model.config
        assert (config.block_type, config.hidden_size, config.pd_ssm_transition_init_scale) == (
            "pre_norm_residual",
            256,
            1.0,
        )
        trained[(mixer, pattern)] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        mixers[(mixer, pattern)] = config.mixers
    assert mixers[("pd_ssm", None)] == ["pd_ssm", "attention"]
    assert len(set(trained.values())) == 1, trained


def test_hybrid_recall_recipe_tests_recall_at_64_or_more_pairs_in_256_tokens():
    """The claim's sizes: 256 tokens, 127 keys and values, the last test bucket 65-80 pairs, no far lengths."""
    s = StateTrackingSettings(**resolve_settings("hybrid_recall", {"task": "mqar"}))
    task = s.build_task()
    assert (task.sequence_length, task.num_keys, task.num_values, s.far_lengths) == (256, 127, 127, "")
    assert length_buckets(s.test_min_length, s.test_max_length, s.num_buckets)[-1] == (65, 80)


def test_hybrid_block_recipe_builds_the_ladders_layer_and_trains_w_p_at_its_own_rate():
    """--recipe hybrid_block: the PD-SSM layer (direct transitions, C the frozen identity, 32 heads of N = 8, d = 512)
    in a pre-norm residual block reading a trained embedding, then attention; everything at 1e-3 but W_P at
    1e-2 / sqrt(d) — also when the rate or the width is given (the scale follows them), unless the scale itself is."""
    settings = StateTrackingSettings(**resolve_settings("hybrid_block", {"task": "a5"}))
    settings.validate()
    model = build_model(settings)
    config, mixer = model.config, model.model.layers[0].mixer
    assert (config.mixers, config.block_type, config.hidden_size) == (["pd_ssm", "attention"], "pre_norm_residual", 512)
    assert (config.pd_ssm_num_heads, config.pd_ssm_head_state_size, config.pd_ssm_transition) == (32, 8, "direct")
    assert torch.equal(mixer.out_proj.weight, torch.eye(512)) and not mixer.out_proj.weight.requires_grad
    assert model.get_input_embeddings().weight.requires_grad and settings.restarts == 1
    groups = build_optimizer(model, settings).param_groups
    (w_p,) = [g for g in groups if any(p is mixer.transition_proj.weight for p in g["params"])]
    assert w_p["lr"] == pytest.approx(1e-2 * 512**-0.5, rel=1e-5) and len(w_p["params"]) == 1
    assert {g["lr"] for g in groups if g is not w_p} == {1e-3}
    faster = resolve_settings("hybrid_block", {"task": "a5", "learning_rate": 3e-3, "num_heads": 16})
    assert faster["hidden_size"] == 256
    assert faster["extra_config"]["pd_ssm_transition_lr_scale"] * 3e-3 == pytest.approx(1e-2 / 16, rel=1e-5)
    given = resolve_settings("hybrid_block", {"extra_config": {"pd_ssm_transition_lr_scale": 0.5}})
    assert given["extra_config"]["pd_ssm_transition_lr_scale"] == 0.5
