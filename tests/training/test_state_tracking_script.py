"""scripts/train_state_tracking.py: a smoke run writes a complete run folder; bad arguments exit clearly."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import hf_ssm.training.state_tracking.evaluation as scoring
from hf_ssm import HybridSSMForTokenClassification
from hf_ssm.data import load_word_problem_file
from hf_ssm.training.state_tracking.driver import build_model, length_buckets, train_state_tracking, train_with_restarts
from hf_ssm.training.state_tracking.recipes import resolve_settings
from hf_ssm.training.state_tracking.settings import StateTrackingSettings
from model_checks import checkpoint_names, kill_at_evaluation, load_script, run_script

TINY = [  # the residual recipe: the driver's mechanics at the smallest sizes (table needs d = 2 H N)
    "--recipe", "residual", "--hidden_size", "16", "--state_size", "4", "--extra_config", "pd_ssm_dict_size=4", "--batch_size", "8",
    "--max_steps", "6", "--eval_every", "3", "--save_every", "3", "--num_buckets", "2",
    "--eval_samples_per_bucket", "8", "--train_max_length", "12", "--test_min_length", "12",
    "--test_max_length", "30", "--restarts", "2",
]  # fmt: skip


def test_smoke_run_writes_run_folder_and_loadable_checkpoint(tmp_path):
    """A tiny run produces settings, results, plot and a model that reloads with identical outputs."""
    result = run_script(
        "train_state_tracking", "--task", "parity", "--mixer", "pd_ssm", "--output_dir", str(tmp_path), *TINY
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("settings.json", "results.json", "accuracy_vs_length.png", "model/model.safetensors"):
        assert (tmp_path / name).is_file(), name
    for model_dir in (tmp_path / "model", tmp_path / "seed_0" / "model"):  # an exported model, not a checkpoint
        assert not (model_dir / "checkpoint_complete.json").exists()
    results = json.loads((tmp_path / "results.json").read_text())
    assert [b["min_length"] for b in results["test"]["buckets"]] == [12, 22]
    assert all(0.0 <= b["accuracy"] <= 1.0 for b in results["test"]["buckets"])
    model = HybridSSMForTokenClassification.from_pretrained(tmp_path / "model").eval()
    ids = torch.randint(1, 3, (2, 20))
    assert model(ids).logits.shape == (2, 20, 2)
    assert "parity" in result.stdout and "| task | mixer |" in result.stdout


def test_default_recipe_smoke_run_records_table_and_reloads(tmp_path):
    """Without --recipe a PD-SSM run trains the `table` recipe (here at d = 2 H N = 16): results.json and
    settings.json say so, and the saved model reloads with the same logits."""
    tiny_table = ["--num_heads", "2", "--state_size", "4", "--hidden_size", "16", "--batch_size", "8",
                  "--max_steps", "4", "--min_steps", "0", "--eval_every", "2", "--num_buckets", "1",
                  "--eval_samples_per_bucket", "8", "--val_samples_per_bucket", "8", "--train_max_length", "12",
                  "--test_min_length", "12", "--test_max_length", "20", "--restarts", "1"]  # fmt: skip
    result = run_script("train_state_tracking", "--task", "parity", "--mixer", "pd_ssm", "--output_dir", str(tmp_path),
                        *tiny_table)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert (settings["recipe"], settings["block_type"], settings["embedding_init"]) == (
        "table",
        "mixer_only",
        "one_hot",
    )
    assert json.loads((tmp_path / "results.json").read_text())["recipe"] == "table"
    model = HybridSSMForTokenClassification.from_pretrained(tmp_path / "model").eval()
    rebuilt = build_model(StateTrackingSettings(**settings))
    rebuilt.load_state_dict(model.state_dict())
    ids = torch.randint(1, 3, (2, 15))
    torch.testing.assert_close(rebuilt.eval()(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_suite_writes_comparison(tmp_path):
    """--suite over two mixers writes one comparison table (Markdown + JSON) and plot."""
    result = run_script(
        "train_state_tracking",
        "--suite",
        "--tasks",
        "parity",
        "--mixers",
        "pd_ssm,attention",
        "--output_dir",
        str(tmp_path),
        *TINY,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert [r["mixer"] for r in rows] == ["pd_ssm", "attention"]
    assert (tmp_path / "comparison.png").is_file()
    assert (tmp_path / "comparison.md").read_text().count("| parity |") == 2
    # --restarts 2 applies to PD-SSM; the baseline trains --baseline_restarts seeds (default 1)
    assert len(rows[0]["restarts"]) == 2 and "restarts" not in rows[1]
    settings = json.loads((tmp_path / "parity_attention" / "settings.json").read_text())
    assert settings["restarts"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "sorting"], "unknown task"),
        (["--task", "a5", "--num_generators", "60"], "num_generators"),
        (["--task", "parity", "--train_max_length", "300"], "train_max_length"),
        (["--task", "parity", "--mixer", "rnn"], "unknown mixer"),  # (lstm is a mixer now: the nn.LSTM baseline)
        (["--task", "parity", "--validation_lengths", "all"], "validation_lengths"),
        (["--task", "parity", "--mixer", "diag_lru", "--baseline_restarts", "0"], "restarts"),
        (["--task", "parity", "--extra_config", "pd_ssm_initial_state=ones"], "pd_ssm_initial_state"),
        # an old flag of a PD-SSM setting, now an --extra_config key: refused naming the new spelling
        (["--task", "parity", "--pd_ssm_transition", "direct"], "pass --extra_config pd_ssm_transition=direct"),
        # HybridSSMConfig's pattern letters (any other letter used to mean the mixer): S, A, P, B, H, D, L, G, M, R
        (["--task", "parity", "--pattern", "SXA"], "unknown letters ['X']"),
        (["--task", "parity", "--pattern", "sa"], "unknown letters ['a', 's']"),
        (["--task", "parity", "--num_generators", "3"], "num_generators only applies to the group tasks"),
        (["--task", "parity", "--extra_config", '{"pd_ssm_diagnal": "unit"}'], "did you mean `pd_ssm_diagonal`"),
        (["--task", "parity", "--extra_config", "hiden_size=8"], "did you mean `hidden_size`"),
        (["--task", "parity", "--config", '{"hiden_size": 8}'], "--config was renamed: use --extra_config"),
        (["--task", "parity", "--dict_size", "8"], "pass --extra_config pd_ssm_dict_size=8"),  # a moved field
        (["--task", "parity", "--extra_config", "{"], "not valid JSON"),
        (["--task", "parity", "--decay_embedding", "maybe"], "Truthy value expected"),
        # the memory tasks' own arguments: refused for other tasks, their ranges checked before training
        (["--task", "parity", "--sequence_length", "64"], "`sequence_length` applies to the tasks mqar only"),
        (["--task", "s3", "--task_vocab_size", "64"], "`task_vocab_size` applies to the tasks mqar"),
        (["--task", "mqar", "--task_vocab_size", "2"], "`task_vocab_size` must be an int >= 5"),
        (
            [
                "--task",
                "mqar",
                "--task_vocab_size",
                "64",
                "--sequence_length",
                "64",
                "--train_max_length",
                "8",
                "--test_min_length",
                "8",
                "--test_max_length",
                "30",
            ],
            "`test_max_length` = 30 (num_pairs) is outside what task 'mqar' accepts, [1, 21]",
        ),  # fmt: skip
        (  # the task's own train_min_length (32) cannot hold 20 data tokens and their markers
            ["--task", "selective_copying", "--num_data_tokens", "20"],
            "`train_min_length` = 32 (length) is outside what task 'selective_copying' accepts, >= 40",
        ),
    ],
)
def test_bad_arguments_exit_with_clear_message(args, message, tmp_path):
    """Refused (exit 2) before any training, naming the problem; none is silently ignored."""
    result = run_script("train_state_tracking", *args, "--output_dir", str(tmp_path))
    assert result.returncode == 2
    assert message in result.stderr
    assert not any(tmp_path.iterdir())


def test_extra_config_items_and_json_give_the_same_settings_validated_once(tmp_path, monkeypatch):
    """--extra_config takes KEY=VALUE items or a JSON object, with the same settings; the script validates each
    run's settings once and tells train_with_restarts so."""
    script = load_script("train_state_tracking")
    seen, validations = [], []

    def fake_train(settings, run_dir, resume=False, validated=False):
        seen.append(validated)
        return {"validation": {"accuracy": 1.0}, "cpu_seconds": 0.0}

    monkeypatch.setattr(script, "train_with_restarts", fake_train)
    original = StateTrackingSettings.validate
    monkeypatch.setattr(StateTrackingSettings, "validate", lambda self: validations.append(self) or original(self))
    monkeypatch.setattr(script, "run_records", lambda *args: [])
    monkeypatch.setattr(script, "results_table", lambda results: "")
    parser = script.build_parser()
    old = parser.parse_args(["--extra_config", '{"pd_ssm_transition": "bank"}'])
    new = parser.parse_args(["--extra_config", "pd_ssm_transition=bank"])
    assert old.extra_config == new.extra_config == {"pd_ssm_transition": "bank"}
    assert parser.parse_args([]).extra_config is script.NOT_GIVEN  # not given: the recipe's (or the default) value
    argv = ["--task", "parity", "--mixer", "pd_ssm", "--restarts", "3", "--output_dir", str(tmp_path)]
    assert script.main([*argv, "--extra_config", "pd_ssm_transition=bank"]) == 0
    assert seen == [True] and len(validations) == 1


def test_restarts_validate_the_settings_once(tmp_path, monkeypatch):
    """train_with_restarts validates once (it used to validate again in every restart, each time building a
    HybridSSMConfig: 4 times for 3 restarts): each restart trains through the driver's inner run, which never
    validates."""
    import hf_ssm.training.state_tracking.driver as st
    import hf_ssm.training.state_tracking.results as st_results

    validations, restarts = [], []
    original = StateTrackingSettings.validate
    monkeypatch.setattr(StateTrackingSettings, "validate", lambda self: validations.append(self) or original(self))

    def fake_restart(settings, plan, run_dir, accelerator, resume):
        restarts.append(settings.seed)
        (run_dir / "model").mkdir(parents=True)
        test = {"mean_accuracy": 0.5, "buckets": []}
        return {"seed": settings.seed, "validation": {"accuracy": 0.5}, "test": test, "steps": 1, "train_seconds": 0.0,
                "cpu_seconds": 0.0, "task": settings.task, "mixer": settings.mixer, "train_lengths": [3, 40]}  # fmt: skip

    monkeypatch.setattr(st, "_train_run", fake_restart)
    monkeypatch.setattr(st_results, "plot_accuracy_vs_length", lambda results, path: None)
    results = st.train_with_restarts(StateTrackingSettings(restarts=3), tmp_path)
    assert len(results["restarts"]) == 3 and restarts == [0, 1000, 2000] and len(validations) == 1


def test_pattern_letters_mean_what_they_mean_in_the_config():
    """--pattern uses HybridSSMConfig's letters with S = --mixer: B is bd_lru (it used to mean the mixer), and
    every SSM family in the pattern gets its state width matched to PD-SSM's 2 N H."""
    from hf_ssm.training.state_tracking.settings import model_config

    base = dict(task="parity", hidden_size=16, state_size=4, num_heads=1)
    config = model_config(StateTrackingSettings(**base, mixer="pd_ssm", pattern="BA"))
    assert config.mixers == ["bd_lru", "attention"] and config.lru_total_state_size == 8
    config = model_config(StateTrackingSettings(**base, mixer="diag_lru", pattern="SAL"))
    assert config.mixers == ["diag_lru", "attention", "lrc_ssm"] and config.lrc_num_channels == 8
    config = model_config(StateTrackingSettings(**base, mixer="attention", pattern="SP"))
    assert config.mixers == ["attention", "pd_ssm"]  # an attention baseline turns S into A only
    assert model_config(StateTrackingSettings(task="a5", num_generators=3)).vocab_size == 4


def test_resume_after_interruption_reproduces_uninterrupted_run(tmp_path, monkeypatch):
    """A run killed at step 6 resumes from its step-4 checkpoint and reproduces the uninterrupted loss curve."""

    settings = dict(
        task="parity", hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}, batch_size=8, eval_every=2, save_every=2,
        num_buckets=1, eval_samples_per_bucket=8, train_max_length=12, test_min_length=12, test_max_length=20,
        target_accuracy=1.0, max_steps=8,
    )  # fmt: skip
    full = train_state_tracking(StateTrackingSettings(**settings), tmp_path / "full")

    # the evaluation at step 6: after the step-4 checkpoint, before the step-6 one
    kill_at_evaluation(
        monkeypatch, scoring, 3, train_state_tracking, StateTrackingSettings(**settings), tmp_path / "part"
    )
    assert checkpoint_names(tmp_path / "part") == ["step_2", "step_4"]
    assert not (tmp_path / "part" / "model").exists()

    resumed = train_state_tracking(StateTrackingSettings(**settings), tmp_path / "part", resume=True)
    assert [h["step"] for h in resumed["history"]] == [h["step"] for h in full["history"]] == [2, 4, 6, 8]
    for a, b in zip(resumed["history"], full["history"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
    # the best-validation weights found before the interruption travel in the checkpoint
    assert resumed["best_step"] == full["best_step"] and resumed["validation"] == full["validation"]


def test_resume_keeps_a_finished_run_whose_last_checkpoint_precedes_its_end(tmp_path, monkeypatch):
    """A run that stopped early (at step 6, its last checkpoint at 4) is finished: --resume of a multi-seed command
    keeps its results and model instead of training it again from step 4 (which it used to do, rewriting both)."""
    import hf_ssm.training.state_tracking.driver as st

    settings = StateTrackingSettings(
        task="parity", hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}, batch_size=8, eval_every=2,
        save_every=4, num_buckets=1, eval_samples_per_bucket=8, train_max_length=12, test_min_length=12,
        test_max_length=20, target_accuracy=1e-6, min_steps=6, max_steps=8, restarts=1,
    )  # fmt: skip
    first = train_with_restarts(settings, tmp_path)
    assert first["steps"] == 6 and checkpoint_names(tmp_path) == ["step_4"]
    written = {name: (tmp_path / name).stat().st_mtime_ns for name in ("results.json", "model/model.safetensors")}

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(st, "_train_run", no_training)
    kept = train_with_restarts(settings, tmp_path, resume=True)
    assert kept == json.loads(json.dumps(first))
    assert written == {name: (tmp_path / name).stat().st_mtime_ns for name in written}


def test_length_buckets_cover_range_without_gaps():
    buckets = length_buckets(40, 256, 6)
    assert buckets[0][0] == 40 and buckets[-1][1] == 256
    assert all(b[0] == a[1] + 1 for a, b in zip(buckets, buckets[1:]))


def test_best_validation_weights_are_the_ones_tested_and_saved(tmp_path, monkeypatch):
    """Validation runs on held-out test-length sequences; the best-scoring weights (not the last) are kept."""
    import hf_ssm.training.state_tracking.driver as st

    settings = StateTrackingSettings(
        task="parity", hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}, batch_size=8, eval_every=2, num_buckets=2,
        eval_samples_per_bucket=8, val_samples_per_bucket=4, train_max_length=12, test_min_length=12,
        test_max_length=20, target_accuracy=1.0, max_steps=6, save_every=0,
    )  # fmt: skip
    real_evaluate, seen, snapshots = scoring.evaluate, [], []
    scripted = iter([0.3, 0.8, 0.5])  # validation accuracy at steps 2, 4, 6: step 4 is the best

    def scripted_evaluate(model, settings_, task, buckets, seed, device, samples_per_bucket):
        seen.append((list(buckets), seed, samples_per_bucket))
        if seed == st.TEST_SEED:
            return real_evaluate(model, settings_, task, buckets, seed, device, samples_per_bucket)
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"buckets": [], "mean_accuracy": next(scripted)}

    monkeypatch.setattr(scoring, "evaluate", scripted_evaluate)
    results = train_state_tracking(settings, tmp_path)
    test_buckets = [(12, 15), (16, 20)]
    assert seen[:3] == [(test_buckets, st.VALIDATION_SEED, 4)] * 3 and seen[3] == (test_buckets, st.TEST_SEED, 8)
    assert results["best_step"] == 4 and results["validation"] == {"lengths": "test", "accuracy": 0.8}
    saved = HybridSSMForTokenClassification.from_pretrained(tmp_path / "model").state_dict()
    assert all(torch.equal(saved[k], snapshots[1][k]) for k in snapshots[1])
    assert not all(torch.equal(saved[k], snapshots[2][k]) for k in snapshots[2])


def test_validation_on_training_lengths_uses_one_training_length_bucket(tmp_path, monkeypatch):
    settings = StateTrackingSettings(
        task="parity", hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}, batch_size=8, eval_every=2, num_buckets=1,
        eval_samples_per_bucket=4, train_max_length=12, test_min_length=12, test_max_length=20, max_steps=2,
        validation_lengths="train", save_every=0,
    )  # fmt: skip
    real_evaluate, seen = scoring.evaluate, []

    def recording_evaluate(model, settings_, task, buckets, seed, device, samples_per_bucket):
        seen.append(list(buckets))
        return real_evaluate(model, settings_, task, buckets, seed, device, samples_per_bucket)

    monkeypatch.setattr(scoring, "evaluate", recording_evaluate)
    train_state_tracking(settings, tmp_path)
    assert seen == [[(3, 12)], [(12, 20)]]


def _scripted_validation(monkeypatch, accuracy_by_seed: dict[int, float]):
    """Make every validation of seed s score accuracy_by_seed[s]; tests run for real."""
    import hf_ssm.training.state_tracking.driver as st

    real_evaluate, current = scoring.evaluate, {}
    real_train = st._train_run

    def train(settings, plan, run_dir, accelerator, resume):
        current["seed"] = settings.seed
        return real_train(settings, plan, run_dir, accelerator, resume)

    def evaluate(model, settings_, task, buckets, seed, device, samples_per_bucket):
        if seed == st.TEST_SEED:
            return real_evaluate(model, settings_, task, buckets, seed, device, samples_per_bucket)
        return {"buckets": [], "mean_accuracy": accuracy_by_seed[current["seed"]]}

    monkeypatch.setattr(scoring, "evaluate", evaluate)
    monkeypatch.setattr(st, "_train_run", train)


RESTART_SETTINGS = dict(
    task="parity", hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}, batch_size=8, eval_every=2, num_buckets=1,
    eval_samples_per_bucket=4, val_samples_per_bucket=4, train_max_length=12, test_min_length=12,
    test_max_length=20, max_steps=2, save_every=0, seed=5, restarts=3, target_accuracy=0.95,
)  # fmt: skip


def test_restarts_keep_the_seed_with_the_best_validation_accuracy(tmp_path, monkeypatch):
    _scripted_validation(monkeypatch, {5: 0.4, 1005: 0.9, 2005: 0.6})
    results = train_with_restarts(StateTrackingSettings(**RESTART_SETTINGS), tmp_path)
    assert results["seed"] == 1005 and [r["seed"] for r in results["restarts"]] == [5, 1005, 2005]
    assert results["train_seconds"] == pytest.approx(sum(r["train_seconds"] for r in results["restarts"]))
    kept = HybridSSMForTokenClassification.from_pretrained(tmp_path / "model").state_dict()
    seed_1005 = HybridSSMForTokenClassification.from_pretrained(tmp_path / "seed_1005" / "model").state_dict()
    seed_5 = HybridSSMForTokenClassification.from_pretrained(tmp_path / "seed_5" / "model").state_dict()
    assert all(torch.equal(kept[k], seed_1005[k]) for k in kept)
    assert not all(torch.equal(kept[k], seed_5[k]) for k in kept)
    assert json.loads((tmp_path / "results.json").read_text())["seed"] == 1005


def test_restarts_of_consecutive_seeds_never_train_the_same_seed():
    """Restart r of seed s trains s + 1000 r: seeds 0..4 with 3 restarts each are 15 different trainings (with
    s + r, seed 0's second restart was seed 1's first, and a "5 of 5 seeds" result counted it twice)."""
    from hf_ssm.training.state_tracking.driver import restart_seeds

    assert restart_seeds(5, 3) == [5, 1005, 2005] and restart_seeds(5, 1) == [5]
    trained = [s for seed in range(5) for s in restart_seeds(seed, 3)]
    assert len(set(trained)) == 15


def test_restarts_stop_once_validation_reaches_the_target(tmp_path, monkeypatch):
    _scripted_validation(monkeypatch, {5: 0.3, 1005: 0.97, 2005: 1.0})
    results = train_with_restarts(StateTrackingSettings(**RESTART_SETTINGS), tmp_path)
    assert results["seed"] == 1005 and [r["seed"] for r in results["restarts"]] == [5, 1005]
    assert not (tmp_path / "seed_2005").exists()


def _interrupted_run(run_dir: Path, monkeypatch, **overrides) -> dict:
    """Train 8 steps with checkpoints every 2, killed at the step-6 evaluation (latest checkpoint: step 4)."""

    settings = dict(
        task="parity", hidden_size=16, state_size=4, extra_config={"pd_ssm_dict_size": 4}, batch_size=8, eval_every=2, save_every=2,
        num_buckets=1, eval_samples_per_bucket=8, train_max_length=12, test_min_length=12, test_max_length=20,
        target_accuracy=1.0, max_steps=8, **overrides,
    )  # fmt: skip
    kill_at_evaluation(monkeypatch, scoring, 3, train_state_tracking, StateTrackingSettings(**settings), run_dir)
    return settings


def test_resume_refuses_changed_settings_before_touching_the_run_folder(tmp_path, monkeypatch):
    """--resume with a new learning rate (silently ignored before), hidden size or task (a raw state_dict error
    after settings.json was overwritten): refused, naming each field, and settings.json is left as it was."""
    settings = _interrupted_run(tmp_path, monkeypatch)
    recorded = (tmp_path / "settings.json").read_text()
    with pytest.raises(ValueError, match="learning_rate 0.01 -> 0.02") as info:
        train_state_tracking(StateTrackingSettings(**{**settings, "learning_rate": 0.02}), tmp_path, resume=True)
    assert "settings that may change on resume" in str(info.value)
    with pytest.raises(ValueError, match="task 'parity' -> 'even_pairs'; hidden_size 16 -> 32"):
        train_state_tracking(
            StateTrackingSettings(**{**settings, "task": "even_pairs", "hidden_size": 32}), tmp_path, resume=True
        )
    assert (tmp_path / "settings.json").read_text() == recorded
    assert checkpoint_names(tmp_path) == ["step_2", "step_4"]


def test_resume_accepts_safe_changes_and_counts_the_time_before_the_interruption(tmp_path, monkeypatch):
    """A setting declared safe (here save_every) may change; train_seconds of the resumed run includes the
    training time recorded in the checkpoint, not only the time after the restart."""
    from hf_ssm.training.checkpointing import read_metadata
    from hf_ssm.training.state_tracking.settings import RESUME_SAFE_SETTINGS

    settings = _interrupted_run(tmp_path, monkeypatch)
    before = read_metadata(tmp_path / "checkpoints" / "step_4")["train_seconds"]
    assert before > 0 and "save_every" in RESUME_SAFE_SETTINGS
    resumed = train_state_tracking(StateTrackingSettings(**{**settings, "save_every": 3}), tmp_path, resume=True)
    assert [h["step"] for h in resumed["history"]] == [2, 4, 6, 8]
    assert resumed["train_seconds"] > before
    assert json.loads((tmp_path / "settings.json").read_text())["save_every"] == 3


def test_script_resume_checks_every_restart_before_training(tmp_path, monkeypatch, capsys):
    """The script compares the settings of every restart (finished or interrupted) before any run starts; --resume
    needs --output_dir (it used to start a fresh time-stamped run)."""
    _scripted_validation(monkeypatch, {5: 0.4, 1005: 0.5, 2005: 0.6})
    train_with_restarts(StateTrackingSettings(**RESTART_SETTINGS), tmp_path)
    script = load_script("train_state_tracking")
    args = [f"--{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in RESTART_SETTINGS.items()
            if k not in ("task", "learning_rate")]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--task", "parity", "--mixer", "pd_ssm", "--recipe", "residual", *args, "--learning_rate", "0.5", "--output_dir",
                     str(tmp_path), "--resume"])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "learning_rate 0.01 -> 0.5" in err and "seed_5" in err
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--task", "parity", "--resume"])
    assert exit_info.value.code == 2 and "--resume needs --output_dir" in capsys.readouterr().err


def test_far_lengths_extend_the_test_report_and_the_summary(tmp_path):
    """far_lengths "60,80": the kept model is also scored on far_samples_per_bucket sequences of exactly those
    lengths (results.json "far", summary far_accuracy_by_length); a malformed or too short list is refused."""
    from hf_ssm.training.state_tracking.driver import train_state_tracking
    from hf_ssm.training.state_tracking.results import run_record
    from hf_ssm.training.state_tracking.settings import StateTrackingSettings

    settings = StateTrackingSettings(
        task="parity", max_steps=2, eval_every=2, batch_size=4, val_samples_per_bucket=2, eval_samples_per_bucket=2,
        test_max_length=48, num_buckets=1, far_lengths="60,80", far_samples_per_bucket=3, num_heads=2,
    )  # fmt: skip
    results = train_state_tracking(settings, tmp_path / "run")
    far = results["far"]["buckets"]
    assert [(b["min_length"], b["max_length"], b["samples"]) for b in far] == [(60, 60, 3), (80, 80, 3)]
    record = run_record(results, "default", "run")
    assert set(record["far_accuracy_by_length"]) == {"60", "80"}
    for bad in ("40,x", "30"):
        with pytest.raises(ValueError, match="`far_lengths` must be comma-separated lengths above test_max_length"):
            StateTrackingSettings(test_max_length=48, far_lengths=bad).validate()
    # a length the task never produces is refused before training (it once failed at the test, after the training)
    with pytest.raises(ValueError, match=r"`far_lengths` \[1000\] are not lengths of task 'modular_arithmetic'"):
        StateTrackingSettings(task="modular_arithmetic", far_lengths="1000,4001").validate()
    StateTrackingSettings(task="modular_arithmetic", far_lengths="1001,4001").validate()
    assert "far" not in train_state_tracking(replace(settings, far_lengths=""), tmp_path / "plain")


def test_mqar_run_scores_every_query_by_number_of_pairs_and_records_chance(tmp_path):
    """A tiny mqar run: the buckets count key-value pairs at the fixed sequence length, the accuracy is over every
    queried position (= prefix_accuracy, with sequence_accuracy beside it), the chance level is recorded and
    printed, and the model's position limit is the sequence length, not the pair count."""
    result = run_script(
        "train_state_tracking", "--task", "mqar", "--task_vocab_size", "24", "--sequence_length", "20",
        "--mixer", "lstm", "--recipe", "residual", "--hidden_size", "16", "--batch_size", "8", "--max_steps", "4",
        "--eval_every", "2", "--num_buckets", "2", "--eval_samples_per_bucket", "8", "--val_samples_per_bucket", "8",
        "--train_min_length", "1", "--train_max_length", "3", "--test_min_length", "3", "--test_max_length", "6",
        "--restarts", "1", "--output_dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert (results["chance_accuracy"], results["size_name"], results["scored_positions"]) == (
        pytest.approx(1 / 11),
        "num_pairs",
        "labelled",
    )
    buckets = results["test"]["buckets"]
    assert [(b["min_length"], b["max_length"]) for b in buckets] == [(3, 4), (5, 6)]
    for b in buckets:  # every pair is queried: 8 sequences of 3-4 pairs hold 24-32 queries
        assert (
            b["accuracy"] == b["prefix_accuracy"]
            and 8 * b["min_length"] <= b["scored_positions"] <= 8 * b["max_length"]
        )
        assert 0 <= b["sequence_accuracy"] <= 1
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["max_position_embeddings"] == 20 and config["mixers"] == ["lstm"]
    assert "chance 9.09% (scored at every labelled position; buckets by num_pairs)" in result.stdout


def _write_z5(path, count: int, lengths, dense: bool, seed: int, generator: bool = False) -> list[list[int]]:
    """Z5 word problems (sums mod 5) computed here, written in the paper's CSV format (`length,input,target`), or
    with `generator` in the layout the authors' generator writes (`seed,input,target`, the prefix products).
    Returns every row's prefix products."""
    import random

    rng, lines, prefixes = random.Random(seed), ["seed,input,target" if generator else "length,input,target"], []
    for _ in range(count):
        word = [rng.randrange(5) for _ in range(rng.choice(lengths))]
        prefix = [sum(word[: t + 1]) % 5 for t in range(len(word))]
        first = seed if generator else len(word)
        lines.append(f"{first},{' '.join(map(str, word))},{' '.join(map(str, prefix if dense else prefix[-1:]))}")
        prefixes.append(prefix)
    path.write_text("\n".join(lines) + "\n")
    return prefixes


FILE_RUN = ["--recipe", "residual", "--hidden_size", "16", "--state_size", "4", "--extra_config", "pd_ssm_dict_size=4", "--batch_size",
            "8", "--max_steps", "4", "--eval_every", "2", "--val_samples_per_bucket", "8", "--restarts", "1"]  # fmt: skip


def test_word_problem_files_train_and_test_through_the_driver(tmp_path, capsys):
    """--data_file / --test_data_file: training on the file's rows (prefix products), the lengths and classes
    taken from the files, validation on the training file's longest lengths, held out of training (the protocol
    selects on lengths past the training ones), one test bucket per test-file length (final products only),
    recorded in results.json and settings.json and said in the log."""
    _write_z5(tmp_path / "train.csv", 40, [3, 4, 5, 6], dense=True, seed=0)  # 19, 10, 9 and 2 rows of each length
    _write_z5(tmp_path / "test.csv", 12, [9, 12], dense=False, seed=1)
    script = load_script("train_state_tracking")
    out = tmp_path / "run"
    args = ["--data_file", str(tmp_path / "train.csv"), "--test_data_file", str(tmp_path / "test.csv"),
            "--mixer", "pd_ssm", "--output_dir", str(out), *FILE_RUN]  # fmt: skip
    assert script.main(args) == 0
    results = json.loads((out / "results.json").read_text())
    settings = json.loads((out / "settings.json").read_text())
    assert results["task"] == "word_problem_file" and results["num_classes"] == 5 and not results["dense_targets"]
    # 8 validation rows need lengths 6 and 5 (2 + 9 rows); 8 of each validate (2 + 8), 1 row is held out unused
    assert results["rows"] == {"train": 29, "validation": 10, "test": 12} and results["steps"] == 4
    assert results["validation_rows"] == {
        "source": "longest_lengths",
        "lengths": [5, 6],
        "rows": 10,
        "held_out_unused": 1,
    }
    assert results["train_lengths"] == [3, 4] and settings["validation_lengths"] == "test"
    assert [(b["min_length"], b["max_length"]) for b in results["test"]["buckets"]] == [(9, 9), (12, 12)]
    assert sum(b["samples"] for b in results["test"]["buckets"]) == 12
    assert (settings["test_min_length"], settings["test_max_length"]) == (9, 12)
    assert "validating on 10 rows of lengths [5, 6] from the training file's longest lengths" in capsys.readouterr().out


def test_file_validation_holds_out_whole_lengths_or_reads_its_own_file(tmp_path):
    """The held-out validation lengths are never trained on: no training row has them. With --validation_file the
    whole training file trains and that file validates; --validation_lengths train keeps the earlier split, the
    training file's last rows at the training lengths."""
    _write_z5(tmp_path / "train.csv", 30, [3, 4, 5], dense=True, seed=0)
    _write_z5(tmp_path / "test.csv", 4, [9], dense=False, seed=1)
    _write_z5(tmp_path / "val.csv", 5, [7, 8], dense=True, seed=2)
    script = load_script("train_state_tracking")
    parser = script.build_parser()
    files = ["--data_file", str(tmp_path / "train.csv"), "--test_data_file", str(tmp_path / "test.csv")]

    def planned(*extra):
        argv = [*files, *extra, "--mixer", "pd_ssm", "--output_dir", str(tmp_path / "o")]
        _, [(settings, _)] = script.plan_runs(parser, parser.parse_args(argv))
        return settings, settings.validate().files

    settings, splits = planned("--val_samples_per_bucket", "4")
    assert set(splits.validation.lengths) == {5} and 5 not in splits.train.lengths and len(splits.validation) == 4
    assert len(splits.train) + len(splits.validation) + splits.unused == 30 and settings.train_max_length == 4
    settings, splits = planned("--validation_file", str(tmp_path / "val.csv"))
    assert (len(splits.train), len(splits.validation), splits.source) == (30, 5, "validation_file")
    assert settings.train_max_length == 5 and list(settings.validate().fingerprints) == [
        "data_file", "validation_file", "test_data_file",
    ]  # fmt: skip
    settings, splits = planned("--validation_lengths", "train", "--val_samples_per_bucket", "4")
    assert (len(splits.train), len(splits.validation), splits.source) == (26, 4, "last_rows")
    assert splits.validation.inputs == load_word_problem_file(tmp_path / "train.csv").inputs[26:]


@pytest.mark.parametrize(
    ("extra", "body", "message"),
    [
        ([], "length,input,target\n3,1 2 x,1\n", "train.csv: row 1, column `input`: token 'x' (position 2) is not an "
         "integer"),
        ([], "length,input,target\n3,1 2,1\n", "train.csv: row 1, column `length`: 3, but column `input` has 2 tokens"),
        (["--train_max_length", "9"], None, "--train_max_length: a word-problem file run takes its lengths from the "
         "files"),
        (["--task", "parity"], None, "--data_file makes the task 'word_problem_file'"),
        (["--num_classes", "3"], None, "num_classes must be an int above every element index of the files"),
        (["--far_lengths", "1000"], None, "`far_lengths` = '1000': a word-problem file run is tested on its test "
         "file's rows only"),
        (["--validation_file", "TEST", "--validation_lengths", "train"], None, "`validation_lengths` = 'train' "
         "validates on the training file's last rows; with --validation_file the validation rows are that file's"),
        (["--val_samples_per_bucket", "100"], None, "train.csv: validation holds out the training file's longest "
         "lengths, at least val_samples_per_bucket (100) rows, and its lengths [3, 4] leave none to train on"),
    ],
)  # fmt: skip
def test_bad_word_problem_runs_exit_with_the_row_and_column(tmp_path, capsys, extra, body, message):
    """A malformed training file exits with its file, row and column; length flags, another task, too few classes,
    far lengths (no generator draws them), a validation file beside the training-row split and a split that leaves
    nothing to train on are refused before any training."""
    _write_z5(tmp_path / "train.csv", 20, [3, 4], dense=True, seed=0)
    _write_z5(tmp_path / "test.csv", 4, [8], dense=False, seed=1)
    if body is not None:
        (tmp_path / "train.csv").write_text(body)
    extra = [str(tmp_path / "test.csv") if arg == "TEST" else arg for arg in extra]
    script = load_script("train_state_tracking")
    args = ["--data_file", str(tmp_path / "train.csv"), "--test_data_file", str(tmp_path / "test.csv"),
            "--output_dir", str(tmp_path / "run"), *FILE_RUN, *extra]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        script.main(args)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run" / "results.json").exists()


def test_file_settings_need_a_data_file():
    """--test_data_file or --num_classes without --data_file, or the file task without files: refused by name."""
    with pytest.raises(ValueError, match="`test_data_file` applies to word-problem files only"):
        StateTrackingSettings(test_data_file="x.csv").validate()
    with pytest.raises(ValueError, match="reads its sequences from --data_file"):
        StateTrackingSettings(task="word_problem_file").validate()


def test_validate_returns_the_plan_every_step_reads(tmp_path, monkeypatch):
    """validate() returns the run's RunPlan: the task, the model config model_config(settings) builds, the far
    lengths parsed; train_with_restarts resolves it once for all restarts, and each restart's model gets its own
    copy of the config (the plan's is left as it was)."""
    import hf_ssm.training.state_tracking.driver as st
    from hf_ssm.training.state_tracking.settings import model_config

    settings = StateTrackingSettings(**{**RESTART_SETTINGS, "far_lengths": "30"})
    plan = settings.validate()
    assert plan.task.name == "parity" and plan.files is None and plan.far_lengths == (30,)
    assert plan.config.to_dict() == model_config(settings).to_dict()
    plans, configs = [], []
    monkeypatch.setattr(StateTrackingSettings, "plan", lambda self: plans.append(self) or plan)
    real_new_model = st._new_model
    monkeypatch.setattr(st, "_new_model", lambda s, config: configs.append(config) or real_new_model(s, config))
    before = plan.config.to_json_string()
    results = st.train_with_restarts(settings, tmp_path, validated=True)
    assert len(plans) == 1 and len(configs) == len(results["restarts"]) > 1
    assert all(c is not plan.config for c in configs)
    assert plan.config.to_json_string() == before


def test_the_authors_generator_layout_trains_and_tests_with_the_default_recipe(tmp_path, capsys):
    """Files as jopetty/word-problem's generator writes them (`seed,input,target`, prefix products, no length
    column) train and test under the default PD-SSM recipe, `table` (its far lengths once refused every file run):
    the training labels are the prefix products, the `seed` column is named as ignored in the log and in
    results.json, and the far test is recorded as not run (a file run's test is its test file)."""
    import hf_ssm.training.state_tracking.driver as st
    from hf_ssm.data.state_tracking import supervised_labels

    prefixes = _write_z5(tmp_path / "train.csv", 40, [2, 3, 4, 5], dense=True, seed=0, generator=True)
    _write_z5(tmp_path / "test.csv", 8, [8, 10], dense=True, seed=1, generator=True)
    script = load_script("train_state_tracking")
    out = tmp_path / "run"
    tiny_table = ["--num_heads", "2", "--state_size", "4", "--batch_size", "8", "--max_steps", "4", "--min_steps",
                  "0", "--eval_every", "2", "--val_samples_per_bucket", "8", "--restarts", "1"]  # fmt: skip
    args = ["--data_file", str(tmp_path / "train.csv"), "--test_data_file", str(tmp_path / "test.csv"),
            "--mixer", "pd_ssm", "--output_dir", str(out), *tiny_table]  # fmt: skip
    assert script.main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert (results["recipe"], results["dense_targets"], results["steps"]) == ("table", True, 4)
    assert results["ignored_columns"] == {"data_file": ["seed"], "test_data_file": ["seed"]}
    assert "far" not in results and results["far_test"].startswith("none: a word-problem file run is tested")
    assert [(b["min_length"], b["max_length"]) for b in results["test"]["buckets"]] == [(8, 8), (10, 10)]
    assert "columns ignored: data_file: seed; test_data_file: seed" in capsys.readouterr().out
    settings = StateTrackingSettings(**json.loads((out / "settings.json").read_text()))
    plan = settings.validate()
    batch = st._batch(st.training_data(settings, plan, 0, 0), 0, settings.batch_size)
    trained = [p for p in prefixes if len(p) <= settings.train_max_length][: settings.batch_size]
    labels = supervised_labels(batch, settings.supervision)
    assert settings.supervision == "every" and [row[: len(p)].tolist() for row, p in zip(labels, trained)] == trained


def test_resume_refuses_word_problem_files_that_changed(tmp_path, capsys):
    """A file run records its files' fingerprints (path, size, sha256 of the bytes) in results.json and its
    checkpoints; --resume after the training file changed (once: old and new rows mixed without a word) is
    refused naming the file, before anything is rewritten. A run recorded before fingerprints were kept resumes."""
    _write_z5(tmp_path / "train.csv", 40, [3, 4, 5, 6], dense=True, seed=0)
    _write_z5(tmp_path / "test.csv", 4, [9], dense=False, seed=1)
    script = load_script("train_state_tracking")
    out = tmp_path / "run"
    args = ["--data_file", str(tmp_path / "train.csv"), "--test_data_file", str(tmp_path / "test.csv"),
            "--mixer", "pd_ssm", "--output_dir", str(out), "--save_every", "2", *FILE_RUN]  # fmt: skip
    assert script.main(args) == 0
    recorded = json.loads((out / "results.json").read_text())["data_files"]
    assert recorded["data_file"]["size"] == (tmp_path / "train.csv").stat().st_size
    assert set(recorded) == {"data_file", "test_data_file"} and len(recorded["data_file"]["sha256"]) == 64
    with (tmp_path / "train.csv").open("a") as handle:  # one more row of a length the file has: same settings
        handle.write("3,1 1 1,1 2 3\n")
    before = (out / "settings.json").read_text()
    with pytest.raises(SystemExit) as exit_info:
        script.main([*args, "--resume"])
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the parser's error line, after its usage
    assert exit_info.value.code == 2 and "--resume: the data files differ from those the run in" in err
    assert "data_file " in err and "train.csv" in err and "test_data_file" not in err
    assert (out / "settings.json").read_text() == before
    old_settings = json.loads((out / "settings.json").read_text())
    del old_settings["validation_file"]  # as a run written before the setting existed
    (out / "settings.json").write_text(json.dumps(old_settings))
    for record in [out / "results.json", *(out / "checkpoints").glob("*/checkpoint_complete.json")]:
        content = json.loads(record.read_text())
        del content["data_files"]  # as a run written before fingerprints were recorded
        content.get("settings", {}).pop("validation_file", None)
        record.write_text(json.dumps(content))
    assert script.main([*args, "--resume"]) == 0


def test_memory_tasks_run_on_their_own_defaults(tmp_path):
    """--task mqar / selective_copying / compression with no other flag: each run (PD-SSM under `table`, diag_lru
    under `residual`) takes the task's published lengths (TASK_SETTINGS), which the generic ones (test to 256
    pairs, training from length 3, far lengths 1,000 and 4,000) once made refused. The task's settings win over
    the recipe's, an explicit flag over both."""
    from hf_ssm.training.state_tracking.recipes import TASK_SETTINGS

    script = load_script("train_state_tracking")
    parser = script.build_parser()

    def planned(*argv) -> list[StateTrackingSettings]:
        _, runs = script.plan_runs(parser, parser.parse_args([*argv, "--output_dir", str(tmp_path / "o")]))
        return [settings for settings, _ in runs]

    for task in ("mqar", "selective_copying", "compression"):
        runs = planned("--task", task)
        assert [(s.mixer, s.recipe) for s in runs] == [("pd_ssm", "table"), ("diag_lru", "residual")]
        for settings in runs:
            assert {k: getattr(settings, k) for k in TASK_SETTINGS[task]} == TASK_SETTINGS[task], (task, settings)
    assert [s.far_lengths for s in planned("--task", "selective_copying")] == ["1000,4000", ""]  # the recipes'
    (explicit,) = planned("--task", "compression", "--mixer", "pd_ssm", "--train_max_length", "31", "--far_lengths",
                          "1001", "--num_buckets", "3")  # fmt: skip
    assert (explicit.train_max_length, explicit.far_lengths, explicit.num_buckets) == (31, "1001", 3)
    assert (explicit.test_min_length, explicit.recipe, explicit.embedding_init) == (21, "table", "one_hot")
    (paper,) = planned("--task", "compression", "--mixer", "pd_ssm", "--recipe", "paper")
    assert (paper.num_buckets, paper.batch_size, paper.supervision) == (2, 256, "last")
    (recall,) = planned("--task", "mqar", "--mixer", "pd_ssm", "--recipe", "hybrid_recall")
    assert recall == StateTrackingSettings(**resolve_settings("hybrid_recall", {"task": "mqar", "mixer": "pd_ssm"}))
