"""UEA / UCR time series: the `.ts` parser, splits, training-only normalisation, the model and the script."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForTimeSeriesClassification
from hf_ssm.data.timeseries import (
    ChannelNormalizer,
    TimeSeriesSplit,
    aeon_data_dir,
    impute_forward_fill,
    load_timeseries,
    parse_ts,
    stratified_split,
)
from hf_ssm.training.timeseries import TimeSeriesSettings, train_timeseries
from model_checks import die_at_evaluation, load_script, run_script

needs_aeon = pytest.mark.skipif(
    aeon_data_dir() is None or not (aeon_data_dir() / "BasicMotions").is_dir(), reason="aeon (BasicMotions) missing"
)

EQUAL = """\
# A comment line, then the header.
@problemName Toy
@timeStamps false
@missing false
@univariate false
@dimensions 2
@equalLength true
@seriesLength 3
@classLabel true up down
@data
1,2,3:4,5,6:up
-1.5,0,2e1:7,8,9:down
0.5,0.25,0.125:1,1,1:up
"""

UNEQUAL = """\
@problemName Ragged
@missing false
@dimensions 2
@equalLength false
@classLabel true a b
@data
1,2,3,4:5,6,7,8:a

10,20:30,40:b
"""


def write_ts(folder: Path, name: str, header_classes: str, rows: list[tuple[list[list[float]], str]], missing=False):
    """Write a small multivariate .ts file; rows are (dims, label) with dims[c] the values of channel c."""
    lines = [
        f"@problemName {name.split('_')[0]}",
        f"@missing {'true' if missing else 'false'}",
        f"@dimensions {len(rows[0][0])}",
        "@equalLength false",
        f"@classLabel true {header_classes}",
        "@data",
    ]
    for dims, label in rows:
        text = ":".join(",".join("?" if isinstance(v, float) and math.isnan(v) else repr(v) for v in d) for d in dims)
        lines.append(f"{text}:{label}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.ts").write_text("\n".join(lines) + "\n")


def random_rows(count: int, channels: int, generator, offset: float = 0.0, scale: float = 1.0, classes="ab"):
    rows = []
    for i in range(count):
        length = int(torch.randint(3, 9, (1,), generator=generator))
        values = torch.randn(channels, length, generator=generator) * scale + offset
        rows.append(([[round(float(v), 4) for v in ch] for ch in values], classes[i % len(classes)]))
    return rows


# ------------------------------------------------------------------------------------------------ parser


def test_parse_equal_length_values_labels_and_header():
    """Every value lands at (case, step, channel); labels and the declared classes are read in order."""
    ts = parse_ts(EQUAL, source="toy.ts")
    expected = torch.tensor(
        [[[1, 4], [2, 5], [3, 6]], [[-1.5, 7], [0, 8], [20, 9]], [[0.5, 1], [0.25, 1], [0.125, 1]]],
        dtype=torch.float32,
    )
    assert torch.equal(ts.values, expected)
    assert ts.lengths.tolist() == [3, 3, 3]
    assert ts.labels == ["up", "down", "up"]
    assert ts.class_names == ["up", "down"]
    assert ts.header["problemname"] == "Toy"


def test_parse_unequal_lengths_pads_with_zeros_and_keeps_lengths():
    """Shorter series are right-padded with 0 (not NaN) and their true lengths are recorded."""
    ts = parse_ts(UNEQUAL)
    assert ts.values.shape == (2, 4, 2)
    assert ts.lengths.tolist() == [4, 2]
    assert ts.values[1, :2].tolist() == [[10, 30], [20, 40]]
    assert ts.values[1, 2:].tolist() == [[0, 0], [0, 0]]


def test_missing_values_raise_by_default_naming_the_line():
    """'?' is never silently accepted: the default policy raises and names the line of the missing value."""
    text = EQUAL.replace("-1.5,0,2e1", "-1.5,?,2e1")
    with pytest.raises(ValueError, match=r"toy\.ts, line 12: dimension 1 has a missing value"):
        parse_ts(text, source="toy.ts")
    text = EQUAL.replace("7,8,9", "7,NaN,9")
    with pytest.raises(ValueError, match="line 12"):
        parse_ts(text)
    kept = parse_ts(text, missing="impute")  # the parser keeps NaN; imputation happens after normalisation
    assert math.isnan(kept.values[1, 1, 1]) and not torch.isnan(kept.values[0]).any()


@pytest.mark.parametrize(
    ("old", "new", "line", "message"),
    [
        ("-1.5,0,2e1", "-1.5,zero,2e1", 12, "value 2 is 'zero', not a number"),
        ("-1.5,0,2e1", "-1.5,,2e1", 12, "not a number"),
        ("0.5,0.25,0.125:1,1,1:up", "0.5,0.25,0.125:up", 13, "expected 2 dimension"),
        ("7,8,9:down", "7,8,9:sideways", 12, "'sideways' is not declared"),
        ("1,2,3:4,5,6:up", "1,2,3:4,5:up", 11, "different lengths"),
        ("1,2,3:4,5,6:up", "1,2,3,4:4,5,6,7:up", 11, "@seriesLength is 3"),
        ("@dimensions 2", "@dimensions two", 6, "@dimensions must be an integer"),
        ("@timeStamps false", "@timeStamps true", 3, "not supported"),
        ("0.5,0.25,0.125:1,1,1:up", "0.5,0.25,0.125:1,1,1:up\n@missing true", 14, "after @data"),
        ("-1.5,0,2e1", "-1.5,inf,2e1", 12, "infinite"),
    ],
)
def test_malformed_file_raises_naming_the_line(old, new, line, message):
    """Malformed input is refused with a ValueError naming the file and the offending line."""
    text = EQUAL.replace(old, new)
    assert text != EQUAL
    with pytest.raises(ValueError, match=f"bad.ts, line {line}: .*{message}"):
        parse_ts(text, source="bad.ts")


def test_file_without_data_or_cases_raises():
    with pytest.raises(ValueError, match="no @data line"):
        parse_ts("@problemName X\n@classLabel true a\n")
    with pytest.raises(ValueError, match="no cases after @data"):
        parse_ts("@problemName X\n@classLabel true a\n@data\n\n")
    with pytest.raises(ValueError, match="line 1: expected an @ header"):
        parse_ts("1,2,3:a\n")


# ------------------------------------------------------------------------------------------------ splits


def test_single_file_is_split_70_15_15_stratified_and_seeded(tmp_path):
    """One .ts file -> disjoint train/val/test covering every case, each class in each part, fixed by the seed."""
    g = torch.Generator().manual_seed(0)
    write_ts(tmp_path / "Solo", "Solo", "a b", random_rows(40, 2, g))
    data = load_timeseries(tmp_path / "Solo", seed=3)
    assert (len(data.train), len(data.val), len(data.test)) == (28, 6, 6)
    assert "70/15/15" in data.split_rule
    for part in (data.train, data.val, data.test):
        assert sorted(set(part.labels.tolist())) == [0, 1]
    parts = stratified_split(torch.tensor([i % 2 for i in range(40)]), (0.7, 0.15, 0.15), seed=3)
    flat = torch.cat(parts).tolist()
    assert sorted(flat) == list(range(40))  # disjoint and complete
    again = stratified_split(torch.tensor([i % 2 for i in range(40)]), (0.7, 0.15, 0.15), seed=3)
    other = stratified_split(torch.tensor([i % 2 for i in range(40)]), (0.7, 0.15, 0.15), seed=4)
    assert all(torch.equal(a, b) for a, b in zip(parts, again))
    assert not torch.equal(parts[1], other[1])


def test_train_test_folder_takes_val_from_train_and_leaves_test_untouched(tmp_path):
    """With TRAIN and TEST only, validation comes out of TRAIN; TEST is the whole TEST file in file order."""
    g = torch.Generator().manual_seed(1)
    write_ts(tmp_path, "Pair_TRAIN", "a b", random_rows(20, 3, g))
    test_rows = random_rows(7, 3, g)
    write_ts(tmp_path, "Pair_TEST", "a b", test_rows)
    data = load_timeseries("Pair", data_dir=tmp_path)
    assert (len(data.train), len(data.val), len(data.test)) == (16, 4, 7)
    assert data.test.lengths.tolist() == [len(dims[0]) for dims, _ in test_rows]
    assert data.test.labels.tolist() == [0 if label == "a" else 1 for _, label in test_rows]
    resplit = load_timeseries("Pair", data_dir=tmp_path, split="resplit")
    assert len(resplit.train) + len(resplit.val) + len(resplit.test) == 27


def test_normalisation_uses_training_statistics_only(tmp_path):
    """Channel mean / std come from the real, observed steps of the training split alone.

    The TEST file is shifted by +1000 and validation cases are part of TRAIN: if either leaked into the fit,
    the normalised training split would not have mean 0 and std 1 per channel.
    """
    g = torch.Generator().manual_seed(2)
    write_ts(tmp_path, "Norm_TRAIN", "a b", random_rows(20, 2, g, offset=5.0, scale=3.0))
    write_ts(tmp_path, "Norm_TEST", "a b", random_rows(6, 2, g, offset=1000.0))
    data = load_timeseries("Norm", data_dir=tmp_path)
    real = data.train.real_steps()  # padding (0 after each case) must not enter the statistics
    values = data.train.values[real]  # (steps, C)
    assert torch.allclose(values.mean(0), torch.zeros(2), atol=1e-5)
    assert torch.allclose(values.std(0, unbiased=False), torch.ones(2), atol=1e-4)
    val_mean = data.val.values[data.val.real_steps()].mean(0)
    assert not torch.allclose(val_mean, torch.zeros(2), atol=1e-3)  # val was not part of the fit
    assert (data.test.values[data.test.real_steps()].mean(0) > 100).all()
    assert (data.train.values[~real] == 0).all()


def test_normaliser_fit_ignores_padding_and_missing_values():
    """Padding zeros and NaN never enter the per-channel mean / std."""
    values = torch.tensor([[[1.0], [3.0], [0.0]], [[math.nan], [5.0], [7.0]]])  # case 0 has length 2
    split = TimeSeriesSplit(values, torch.tensor([2, 3]), torch.tensor([0, 1]))
    norm = ChannelNormalizer.fit(split)
    observed = torch.tensor([1.0, 3.0, 5.0, 7.0])
    assert torch.allclose(norm.mean, observed.mean().view(1))
    assert torch.allclose(norm.std, observed.std(unbiased=False).view(1))


def test_impute_forward_fills_then_zero_and_marks_indicators(tmp_path):
    """missing='impute': a gap takes the last observed value of its channel; leading gaps become 0 (= train mean)."""
    values = torch.tensor([[[math.nan, 1.0], [2.0, math.nan], [math.nan, math.nan], [4.0, 3.0]]])
    split = TimeSeriesSplit(values, torch.tensor([4]), torch.tensor([0]))
    filled = impute_forward_fill(split).values[0]
    assert filled.tolist() == [[0.0, 1.0], [2.0, 1.0], [2.0, 1.0], [4.0, 3.0]]

    g = torch.Generator().manual_seed(3)
    rows = random_rows(12, 2, g)
    rows[0][0][1][1] = math.nan  # channel 1, step 1 of the first case
    write_ts(tmp_path, "Gap_TRAIN", "a b", rows, missing=True)
    write_ts(tmp_path, "Gap_TEST", "a b", random_rows(4, 2, g))
    with pytest.raises(ValueError, match="Gap_TRAIN.ts, line 7: dimension 2 has a missing value"):
        load_timeseries("Gap", data_dir=tmp_path)
    data = load_timeseries("Gap", data_dir=tmp_path, missing="impute", missing_indicators=True, split="resplit")
    assert data.input_channels == 4  # 2 channels + 2 observed-mask channels
    for part in (data.train, data.val, data.test):
        assert not torch.isnan(part.values).any()
    masks = torch.cat([p.values[..., 2:][p.real_steps()] for p in (data.train, data.val, data.test)])
    assert int((masks == 0).sum()) == 1  # exactly the one missing value is flagged


@needs_aeon
def test_aeon_basicmotions_loads_without_download():
    """The datasets aeon ships are found by name: BasicMotions has 6 channels, 100 steps, 4 classes."""
    data = load_timeseries("BasicMotions")
    assert (len(data.train), len(data.val), len(data.test)) == (32, 8, 40)
    assert (data.input_channels, data.max_length, data.num_classes) == (6, 100, 4)
    assert data.files["train"].endswith("BasicMotions_TRAIN.ts")


@needs_aeon
def test_parser_agrees_with_aeon_reader_on_every_shipped_file():
    """The `.ts` parser reads every file aeon ships as aeon's own reader (aeon.datasets.load_from_ts_file) does:
    the same values bit for bit in float32 (NaN where missing), lengths and labels; only the case of class labels
    differs (aeon lower-cases them, this parser keeps them). Time-stamped files are refused with a clear error."""
    import numpy as np
    from aeon.datasets import load_from_ts_file

    from hf_ssm.data.timeseries import load_ts_file

    checked = 0
    for path in sorted(aeon_data_dir().glob("*/*.ts")):
        values, targets, meta = load_from_ts_file(str(path), return_meta_data=True)
        if meta["timestamps"]:
            with pytest.raises(ValueError, match="not supported"):
                load_ts_file(path)
            continue
        ts = load_ts_file(path, missing="impute")
        assert len(ts) == len(values), path.name
        for i, case in enumerate(values):
            expected = torch.from_numpy(np.asarray(case, dtype=np.float32)).T  # (T, C)
            assert int(ts.lengths[i]) == expected.shape[0], (path.name, i)
            torch.testing.assert_close(ts.values[i, : expected.shape[0]], expected, rtol=0, atol=0, equal_nan=True)
        if meta["targetlabel"]:  # regression targets
            assert [float(label) for label in ts.labels] == targets.tolist(), path.name
        else:
            assert [label.lower() for label in ts.labels] == targets.tolist(), path.name
            assert [name.lower() for name in ts.class_names] == meta["class_values"], path.name
        checked += 1
    assert checked >= 20  # aeon 1.6 ships 28 readable files


def test_unknown_dataset_and_bad_options_raise(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_timeseries("NoSuchData", data_dir=tmp_path)
    with pytest.raises(ValueError, match="`split` must be one of"):
        load_timeseries("NoSuchData", data_dir=tmp_path, split="random")
    with pytest.raises(ValueError, match="`missing` must be one of"):
        load_timeseries("NoSuchData", data_dir=tmp_path, missing="drop")


# ------------------------------------------------------------------------------------------------ model


def tiny_config(mixer: str = "pd_ssm", **kw) -> HybridSSMConfig:
    options = dict(
        vocab_size=1, hidden_size=16, intermediate_size=32, num_hidden_layers=2, mixers=f"S{'A' if kw.pop('attn', False) else 'S'}",
        ssm_mixer=mixer, num_attention_heads=2, pd_ssm_head_state_size=4, pd_ssm_dict_size=4, lru_total_state_size=8,
        lrc_num_channels=8, input_channels=3, num_labels=4, classifier_pooling="mean",
    )  # fmt: skip
    options.update(kw)
    return HybridSSMConfig(**options)


@pytest.mark.parametrize("mixer", ["pd_ssm", "lrc_ssm", "diag_lru"])
def test_model_save_reload_and_padding_invariance(mixer, tmp_path):
    """A saved model reloads with identical logits, and right padding (masked) does not change a series' logits."""
    model = HybridSSMForTimeSeriesClassification(tiny_config(mixer, attn=True)).eval()
    x = torch.randn(2, 9, 3)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 5:] = 0
    x[1, 5:] = 0
    with torch.no_grad():
        logits = model(x, attention_mask=mask).logits
        alone = model(x[1:, :5]).logits
    assert logits.shape == (2, 4)
    torch.testing.assert_close(logits[1:], alone, atol=1e-5, rtol=1e-4)
    model.save_pretrained(tmp_path)
    reloaded = HybridSSMForTimeSeriesClassification.from_pretrained(tmp_path).eval()
    assert reloaded.config.input_channels == 3
    with torch.no_grad():
        torch.testing.assert_close(reloaded(x, attention_mask=mask).logits, logits)
    out = model(x, attention_mask=mask, labels=torch.tensor([0, 3]))
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)


def test_model_rejects_bad_input():
    """Wrong channel count, NaN (unimputed missing values) and a config without input_channels raise ValueError."""
    model = HybridSSMForTimeSeriesClassification(tiny_config("diag_lru"))
    with pytest.raises(ValueError, match=r"\(batch, seq_len, 3\)"):
        model(torch.randn(2, 5, 4))
    bad = torch.randn(2, 5, 3)
    bad[0, 1, 2] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        model(bad)
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.randn(2, 5, 3), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="`input_channels` must be set"):
        HybridSSMForTimeSeriesClassification(tiny_config("diag_lru", input_channels=None))
    with pytest.raises(ValueError, match="`input_channels` must be an integer >= 1"):
        tiny_config("diag_lru", input_channels=0)


# ------------------------------------------------------------------------------------------------ training


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
    import hf_ssm.training.timeseries as ts_training

    settings = resumable_run_settings(tmp_path / "data", max_epochs=6)
    full = train_timeseries(TimeSeriesSettings(**settings), tmp_path / "full")

    # validation of epoch 5: after the epoch-4 checkpoint
    restore_evaluate = die_at_evaluation(monkeypatch, ts_training, 5)
    with pytest.raises(KeyboardInterrupt):
        train_timeseries(TimeSeriesSettings(**settings), tmp_path / "part")
    restore_evaluate()
    assert sorted(p.name for p in (tmp_path / "part" / "checkpoints").iterdir()) == ["step_2", "step_4"]
    resumed = train_timeseries(TimeSeriesSettings(**settings), tmp_path / "part", resume=True)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(resumed["history"], full["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5, abs=1e-6)
        assert a["val_accuracy"] == b["val_accuracy"]
    assert resumed["test_accuracy"] == full["test_accuracy"] and resumed["best_epoch"] == full["best_epoch"]


def test_resume_with_changed_settings_is_refused_and_safe_ones_may_change(tmp_path):
    """train_timeseries(resume=True) compares the settings with the checkpoint's: a new hidden size is refused
    naming the field before settings.json is rewritten; patience (declared safe) may change."""
    from hf_ssm.training.timeseries import RESUME_SAFE_SETTINGS

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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mixer", "lstm"], "unknown mixer"),
        (["--dataset", "NoSuchData", "--data_dir", "."], "not found"),
        (["--pattern", "SX"], "unknown letters"),
        (["--split", "random"], "invalid choice"),
        (["--extra_config", '{"lru_blok_size": 2}'], "did you mean `lru_group_size`"),
        (["--extra_config", '{"hiden_size": 8}'], "did you mean `hidden_size`"),
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
