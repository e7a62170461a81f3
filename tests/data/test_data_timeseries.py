"""UEA / UCR time series data (hf_ssm/data/timeseries.py): the `.ts` parser, splits, training-only normalisation,
imputation, agreement with aeon's reader, bad input, and the synthetic series. The model:
tests/models/test_model_timeseries.py; training and the script: tests/training/test_timeseries.py."""

from __future__ import annotations

import math

import pytest
import torch
from timeseries_files import needs_aeon, random_rows, write_ts

from hf_ssm.data.timeseries import (
    ChannelNormalizer,
    TimeSeriesSplit,
    aeon_data_dir,
    impute_forward_fill,
    load_timeseries,
    parse_ts,
    stratified_split,
    synthetic_series,
    synthetic_timeseries,
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


# ------------------------------------------------------------------------------------------------ synthetic series


def test_synthetic_series_are_deterministic_by_seed_with_balanced_labels():
    """The same seed gives the same values bit for bit, another seed other values; labels are i mod classes."""
    a = synthetic_series(64, 3, 2, 9, seed=1)
    b = synthetic_series(64, 3, 2, 9, seed=1)
    c = synthetic_series(64, 3, 2, 9, seed=2)
    assert a.values.shape == (9, 64, 3) and a.values.dtype == torch.float32
    assert torch.equal(a.values, b.values) and not torch.equal(a.values, c.values)
    assert a.labels.tolist() == [0, 1, 0, 1, 0, 1, 0, 1, 0] and a.lengths.tolist() == [64] * 9
    assert bool(torch.isfinite(a.values).all())


def test_synthetic_class_is_the_dominant_frequency_not_the_mean():
    """Every series' strongest frequency (summed over channels) is its class's (c + 1) / (4 (classes + 1)) cycles
    per step, so the class is learnable from the signal; the class means of the values do not tell it."""
    length, classes = 600, 5
    split = synthetic_series(length, 2, classes, 20, seed=0)
    power = torch.fft.rfft(split.values, dim=1).abs().pow(2).sum(-1)  # (n, length // 2 + 1)
    peak_cycles = power[:, 1:].argmax(1) + 1  # the strongest non-zero frequency bin, in cycles per series
    expected = (split.labels + 1) * length / (4 * (classes + 1))
    assert torch.equal(peak_cycles, expected.long())
    means = torch.stack([split.values[split.labels == c].mean() for c in range(classes)])
    assert float(means.abs().max()) < 0.05


def test_synthetic_dataset_is_split_stratified_and_normalised_on_train():
    """synthetic_timeseries: 70/15/15 stratified (every class in every split), channel statistics of the training
    split only, the shape in its name and no files."""
    data = synthetic_timeseries("64,3,2", 12, seed=0)
    assert data.name == "synthetic_64x3x2" and data.files == {} and data.class_names == ["class0", "class1"]
    assert data.input_channels == 3 and data.num_classes == 2 and data.max_length == 64
    for part in (data.train, data.val, data.test):
        assert set(part.labels.tolist()) == {0, 1}
    assert len(data.train) + len(data.val) + len(data.test) == 12
    train = data.train.values.reshape(-1, 3)
    torch.testing.assert_close(train.mean(0), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(train.std(0, unbiased=False), torch.ones(3), atol=1e-5, rtol=0)
    again = synthetic_timeseries((64, 3, 2), 12, seed=0)
    assert torch.equal(again.test.values, data.test.values)


@pytest.mark.parametrize(
    ("shape", "series", "message"),
    [
        ("64,3", 12, "LENGTH,CHANNELS,CLASSES"),
        ("64,3,x", 12, "three integers"),
        ("1,3,2", 12, "length >= 2"),
        ("64,0,2", 12, "channels >= 1"),
        ("64,3,1", 12, "classes >= 2"),
        ("64,3,2", 5, r"`synthetic_series` must be an integer >= 3 x classes = 6"),
        ("64,3,2", 6.0, "`synthetic_series` must be an integer"),
    ],
)
def test_synthetic_bad_shape_or_series_raise_naming_the_field(shape, series, message):
    """A malformed shape or too few series is a ValueError naming the field and what it accepts."""
    with pytest.raises(ValueError, match=message):
        synthetic_timeseries(shape, series)
