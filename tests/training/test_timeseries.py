"""Time-series training (hf_ssm/training/timeseries/classification.py) and scripts/train_timeseries.py: exact resume after an
interruption, refused and safe setting changes on resume, a smoke run on BasicMotions, a run on synthetic series,
bad arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from timeseries_files import needs_aeon, random_rows, write_ts

from hf_ssm import HybridSSMForTimeSeriesClassification
from hf_ssm.data.timeseries import ChannelNormalizer, load_timeseries
from hf_ssm.training.timeseries.classification import TimeSeriesSettings, train_timeseries
from model_checks import checkpoint_names, kill_at_evaluation, load_script, run_script


def resumable_run_settings(data_dir: Path, max_epochs: int) -> dict:
    """Writes a small two-class dataset "Res" (16 train, 6 test series) to `data_dir`; settings of a tiny diag_lru
    run on it that saves a checkpoint every 2 epochs."""
    g = torch.Generator().manual_seed(4)
    write_ts(data_dir, "Res_TRAIN", "a b", random_rows(16, 2, g))
    write_ts(data_dir, "Res_TEST", "a b", random_rows(6, 2, g))
    return dict(
        dataset="Res", data_dir=str(data_dir), mixer="diag_lru", hidden_size=8, state_size=4,
        batch_size=4, max_epochs=max_epochs, patience=10, save_every=2,
    )  # fmt: skip


def test_resume_after_interruption_reproduces_uninterrupted_run(tmp_path, monkeypatch):
    """A run killed in epoch 5 resumes from its epoch-4 checkpoint and reproduces the uninterrupted history."""
    import hf_ssm.training.timeseries.classification as ts_training

    settings = resumable_run_settings(tmp_path / "data", max_epochs=6)
    full = train_timeseries(TimeSeriesSettings(**settings), tmp_path / "full")

    # validation of epoch 5: after the epoch-4 checkpoint
    kill_at_evaluation(monkeypatch, ts_training, 5, train_timeseries, TimeSeriesSettings(**settings), tmp_path / "part")
    assert checkpoint_names(tmp_path / "part") == ["step_2", "step_4"]
    resumed = train_timeseries(TimeSeriesSettings(**settings), tmp_path / "part", resume=True)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(resumed["history"], full["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5, abs=1e-6)
        assert a["val_accuracy"] == b["val_accuracy"]
    assert resumed["test_accuracy"] == full["test_accuracy"] and resumed["best_epoch"] == full["best_epoch"]


def test_resume_with_changed_settings_is_refused_and_safe_ones_may_change(tmp_path):
    """train_timeseries(resume=True) compares the settings with the checkpoint's: a new hidden size is refused
    naming the field before settings.json is rewritten; patience (declared safe) may change."""
    from hf_ssm.training.timeseries.classification import RESUME_SAFE_SETTINGS

    settings = resumable_run_settings(tmp_path / "data", max_epochs=3)
    run = tmp_path / "run"
    train_timeseries(TimeSeriesSettings(**settings), run)
    recorded = (run / "settings.json").read_text()
    with pytest.raises(ValueError, match="hidden_size 8 -> 16"):
        train_timeseries(TimeSeriesSettings(**{**settings, "hidden_size": 16}), run, resume=True)
    assert (run / "settings.json").read_text() == recorded
    assert "patience" in RESUME_SAFE_SETTINGS
    resumed = train_timeseries(TimeSeriesSettings(**{**settings, "patience": 12}), run, resume=True)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3]
    assert not (run / "model" / "checkpoint_complete.json").exists()  # an exported model, not a checkpoint


@needs_aeon
def test_script_smoke_run_on_basicmotions(tmp_path):
    """Two seeds of a tiny model on BasicMotions write per-run folders, a reloadable model and the summary table."""
    result = run_script(
        "train_timeseries", "--dataset", "BasicMotions", "--mixer", "diag_lru", "--seeds", "0,1",
        "--max_epochs", "3", "--hidden_size", "8", "--state_size", "4", "--batch_size", "16",
        "--output_dir", str(tmp_path), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for seed in (0, 1):
        run = tmp_path / "BasicMotions_diag_lru" / f"seed_{seed}"
        for name in ("settings.json", "data.json", "results.json", "curves.png", "model/model.safetensors"):
            assert (run / name).is_file(), name
        results = json.loads((run / "results.json").read_text())
        assert 0.0 <= results["test_accuracy"] <= 1.0 and results["sizes"] == {"train": 32, "val": 8, "test": 40}
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["summary"]
    assert row["seeds"] == [0, 1] and len(row["test_accuracies"]) == 2
    assert (tmp_path / "summary.md").read_text().count("| BasicMotions | diag_lru |") == 1
    assert "| dataset | model |" in result.stdout

    model_dir = tmp_path / "BasicMotions_diag_lru" / "seed_0" / "model"
    model = HybridSSMForTimeSeriesClassification.from_pretrained(model_dir).eval()
    norm = ChannelNormalizer.from_dict(json.loads((model_dir / "normalizer.json").read_text()))
    data = load_timeseries("BasicMotions", seed=0)
    assert torch.allclose(norm.mean, data.normalizer.mean)
    with torch.no_grad():
        preds = model(data.test.values).logits.argmax(-1)
    accuracy = (preds == data.test.labels).float().mean().item()
    assert accuracy == pytest.approx(json.loads((model_dir.parent / "results.json").read_text())["test_accuracy"])


def test_script_trains_on_synthetic_series_without_files(tmp_path):
    """--dataset synthetic --synthetic_shape 64,3,2: one epoch of a PD-SSM bank layer on 12 generated series, the
    run folder named after the shape, its data record with the generated split and no files."""
    result = run_script(
        "train_timeseries", "--dataset", "synthetic", "--synthetic_shape", "64,3,2", "--synthetic_series", "12",
        "--mixer", "pd_ssm", "--extra_config", "pd_ssm_transition=bank", "--seeds", "0", "--max_epochs", "1",
        "--hidden_size", "8", "--state_size", "4", "--batch_size", "4", "--output_dir", str(tmp_path), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "synthetic_64x3x2_pd_ssm" / "seed_0"
    data = json.loads((run / "data.json").read_text())
    assert data["files"] == {} and data["input_channels"] == 3 and data["max_length"] == 64
    assert sum(data["sizes"].values()) == 12 and data["class_names"] == ["class0", "class1"]
    results = json.loads((run / "results.json").read_text())
    assert results["epochs"] == 1 and 0.0 <= results["test_accuracy"] <= 1.0
    settings = json.loads((run / "settings.json").read_text())
    assert settings["synthetic_shape"] == "64,3,2" and settings["extra_config"] == {"pd_ssm_transition": "bank"}
    assert "| synthetic_64x3x2 | pd_ssm |" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "synthetic"], "needs --synthetic_shape"),
        (["--dataset", "synthetic", "--synthetic_shape", "64,3"], "LENGTH,CHANNELS,CLASSES"),
        (["--dataset", "synthetic", "--synthetic_shape", "64,3,2", "--synthetic_series", "4"], ">= 3 x classes = 6"),
        (["--dataset", "synthetic", "--synthetic_shape", "64,3,2", "--data_dir", "."], "--data_dir is not read"),
        (["--synthetic_shape", "64,3,2"], "only read with --dataset synthetic"),
        (["--mixer", "rnn"], "unknown mixer"),
        (["--dataset", "NoSuchData", "--data_dir", "."], "not found"),
        (["--pattern", "SX"], "unknown letters"),
        (["--split", "random"], "invalid choice"),
        (["--extra_config", '{"lru_blok_size": 2}'], "did you mean `lru_group_size`"),
        (["--extra_config", '{"hiden_size": 8}'], "did you mean `hidden_size`"),
        (["--extra_config", "hiden_size=8"], "did you mean `hidden_size`"),  # KEY=VALUE items, as in pretrain.py
        (["--extra_config", '{"hidden_size": 8'], "not valid JSON"),
    ],
)
def test_script_bad_arguments_exit_with_clear_message(args, message, tmp_path, capsys):
    """Bad arguments stop the script (exit 2) before any training, with a message naming the problem."""
    script = load_script("train_timeseries")  # in-process: a subprocess per case would mostly time imports
    with pytest.raises(SystemExit) as exit_info:
        script.main([*args, "--output_dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
