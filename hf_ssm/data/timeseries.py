"""UEA / UCR time-series classification data: `.ts` parser, splits, per-channel normalisation (docs/design.md §6.7).

The `.ts` format (timeseriesclassification.com, sktime, aeon): comment lines start with ``#`` (or ``%``), then
``@key value`` header lines (``@problemName``, ``@timeStamps``, ``@missing``, ``@univariate``, ``@dimensions``,
``@equalLength``, ``@seriesLength``, ``@classLabel true <labels...>`` or ``false``, ``@targetLabel``), then
``@data`` and one case per line: the dimensions separated by ``:``, the values of a dimension by ``,``, and the
class label last. Series may have unequal lengths (all dimensions of one case share its length); ``?`` or
``NaN`` marks a missing value. Time-stamped files (``@timeStamps true``) are refused.

Missing values are never handled silently (``missing``):

- ``"raise"`` (default): the parser raises a ValueError naming the file and line of the first missing value.
- ``"impute"``: after normalisation, a missing value takes the last observed value of its channel in the same
  case (forward fill); before the first observation it is 0, i.e. the training mean. ``missing_indicators=True``
  also appends the observed mask (1 observed, 0 imputed) as C extra input channels.

Splits (``split``), all seeded and stratified by class (each class contributes round(fraction x its count)):

- ``"auto"`` (default): ``<name>_TRAIN.ts`` + ``<name>_VALID.ts`` (or ``_VAL``) + ``<name>_TEST.ts`` are used as
  given; with only TRAIN and TEST, validation is ``val_fraction`` of TRAIN and TEST is untouched (so test
  accuracy stays comparable with the official split); a folder with a single ``.ts`` file is split
  70 / 15 / 15 (train / val / test).
- ``"resplit"``: every case of every file is pooled and split 70 / 15 / 15 afresh for each seed.

Per-channel normalisation: mean and standard deviation of each channel over the real (not padded), observed
steps of the training split only, applied to every split.

Synthetic data (`synthetic_timeseries`, `--dataset synthetic` in scripts/train_timeseries.py): series of a chosen
shape (length, channels, classes), e.g. UEA EigenWorms' 17,984 steps x 6 channels, 5 classes, generated from a
seed without any file, to check that a model trains at that length. Series i has class i mod `classes`; every
channel of a class-c series is a sine of frequency (c + 1) / (4 (classes + 1)) cycles per step (periods of 4.8 to
24 steps for 5 classes, whatever the length), with an amplitude drawn from U[0.5, 1.5] and a phase from
U[0, 2 pi) per series and channel, plus N(0, 0.5^2) noise at every step. The class is thus in the frequency
(learnable, e.g. from a spectrum, but not from a channel's mean). The series are pooled and split 70 / 15 / 15
(train / val / test, stratified) like a single file, then normalised with training statistics.

Why this module parses `.ts` itself instead of calling aeon's reader (`aeon.datasets.load_from_ts_file`, aeon
1.6.0, measured on the files aeon ships and on the malformed files of tests/data/test_data_timeseries.py):

- on the 28 files aeon ships that it can read both ways (the 29th is time-stamped), both readers give the same
  values (bit for bit in float32), lengths and labels (up to aeon's lower-casing, below), at the same speed (0.36 s
  for aeon, 0.32 s here, all 28 files in one process); tests/data/test_data_timeseries.py checks this agreement, so aeon's
  reader is the reference of this parser;
- aeon lower-cases every line, class labels included (BasicMotions' ``Standing`` becomes ``standing``), so the class
  names a run saves would no longer be the dataset's;
- aeon accepts, without an error, a class label that ``@classLabel`` does not declare, an infinite value, a
  non-numeric ``@dimensions``, and a time-stamped file (which it reads as empty series whose label is the whole
  line); this module refuses each with a ValueError;
- aeon raises OSError ("Inconsistent number of dimensions") on a blank line between or after the cases, and its
  errors (OSError, or float()'s bare ValueError for a non-number) give no line number; here every error is a
  ValueError naming the file and the line;
- aeon reads from a path only (``parse_ts`` takes text), and ``import aeon.datasets`` costs about 1.2 s per process
  (it imports numba and scikit-learn); this module only locates aeon's bundled data (`aeon_data_dir`).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "MISSING_POLICIES",
    "SPLIT_MODES",
    "SYNTHETIC",
    "ChannelNormalizer",
    "TSFile",
    "TimeSeriesData",
    "TimeSeriesSplit",
    "aeon_data_dir",
    "check_synthetic",
    "find_ts_files",
    "impute_forward_fill",
    "load_timeseries",
    "load_ts_file",
    "parse_ts",
    "shipped_datasets",
    "stratified_split",
    "synthetic_series",
    "synthetic_shape",
    "synthetic_timeseries",
]

MISSING_POLICIES = ("raise", "impute")
SPLIT_MODES = ("auto", "resplit")
MISSING_TOKENS = ("?", "nan")
SYNTHETIC = "synthetic"  # the dataset name of generated series (synthetic_timeseries)
_BOOLEAN_KEYS = ("timestamps", "missing", "univariate", "equallength")
_VALID_SUFFIXES = ("_valid", "_val", "_validation")


# ----------------------------------------------------------------------------------------------------------------
# Parsing


@dataclass
class TSFile:
    """The cases of one `.ts` file.

    values: (n, T_max, C) float32; NaN where a value is missing, 0 after the end of a shorter series.
    lengths: (n,) long, the real steps of each case.
    labels: n label strings (None when the file declares no labels).
    class_names: the labels `@classLabel true ...` declares, in header order (None for unlabelled / regression).
    header: the `@` fields, lower-case keys, raw string values.
    """

    values: torch.Tensor
    lengths: torch.Tensor
    labels: list[str] | None
    class_names: list[str] | None
    header: dict[str, str]
    source: str = "<string>"

    def __len__(self) -> int:
        return self.values.shape[0]

    @property
    def num_channels(self) -> int:
        return self.values.shape[2]


def _header_bool(key: str, value: str, where: str) -> bool:
    word = value.split()[0].lower() if value.split() else ""
    if word not in ("true", "false"):
        raise ValueError(f"{where}: @{key} must be true or false, got {value!r}")
    return word == "true"


def _header_int(key: str, value: str, where: str) -> int:
    try:
        number = int(value.split()[0])
    except (ValueError, IndexError):
        number = 0
    if number < 1:
        raise ValueError(f"{where}: @{key} must be an integer >= 1, got {value!r}")
    return number


def _parse_values(text: str, where: str, dim: int, missing: str) -> np.ndarray:
    """One dimension's comma-separated values -> float64 array with NaN at missing values."""
    items = text.split(",")
    try:
        out = np.array(items, dtype=np.float64)  # fast path: plain numbers (and "NaN")
    except ValueError:
        out = np.empty(len(items))
        for i, item in enumerate(items):
            token = item.strip()
            if token.lower() in MISSING_TOKENS:
                out[i] = math.nan
                continue
            try:
                out[i] = float(token)
            except ValueError:
                raise ValueError(f"{where}: dimension {dim + 1}, value {i + 1} is {token!r}, not a number") from None
    if np.isinf(out).any():
        raise ValueError(f"{where}: dimension {dim + 1} has an infinite value")
    if missing == "raise" and np.isnan(out).any():
        raise ValueError(
            f"{where}: dimension {dim + 1} has a missing value ('?' or NaN); pass missing='impute' "
            "(forward fill, documented in hf_ssm.data.timeseries) to load it"
        )
    return out


def parse_ts(text: str, source: str = "<string>", missing: str = "raise") -> TSFile:
    """Parse the text of a `.ts` file. Malformed input raises ValueError naming `source` and the line number.

    Long because the header, the class labels and the data rows are read in one pass over the lines that keeps its
    state (where it is, what the header declared) in locals; as separate steps they would hand all of it back and
    forth."""
    if missing not in MISSING_POLICIES:
        raise ValueError(f"`missing` must be one of {list(MISSING_POLICIES)}, got {missing!r}")
    header: dict[str, str] = {}
    class_names: list[str] | None = None
    has_target = False
    num_dims = series_length = None
    equal_length = None
    cases: list[np.ndarray] = []  # each (T, C)
    labels: list[str] = []
    in_data = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"{source}, line {lineno}"
        if not line or line.startswith(("#", "%")):
            continue
        if not in_data:
            if not line.startswith("@"):
                raise ValueError(f"{where}: expected an @ header field or @data before the cases, got {line[:40]!r}")
            key, _, value = line[1:].partition(" ")
            key, value = key.lower(), value.strip()
            if key == "data":
                in_data = True
                has_target = class_names is not None or has_target
                continue
            header[key] = value
            if key in _BOOLEAN_KEYS:
                flag = _header_bool(key, value, where)
                if key == "timestamps" and flag:
                    raise ValueError(f"{where}: time-stamped series (@timeStamps true) are not supported")
                if key == "equallength":
                    equal_length = flag
            elif key == "dimensions":
                num_dims = _header_int(key, value, where)
            elif key == "serieslength":
                series_length = _header_int(key, value, where)
            elif key == "classlabel":
                words = value.split()
                if _header_bool(key, value, where):
                    class_names = words[1:]
                    if not class_names:
                        raise ValueError(f"{where}: @classLabel true must list the class labels")
                    if len(set(class_names)) != len(class_names):
                        raise ValueError(f"{where}: @classLabel lists a label twice: {class_names}")
            elif key == "targetlabel":
                has_target = _header_bool(key, value, where)
            continue
        if line.startswith("@"):
            raise ValueError(f"{where}: header field {line.split()[0]!r} after @data")
        fields = line.split(":")
        if has_target:
            *fields, label = fields
            label = label.strip()
            if class_names is not None and label not in class_names:
                raise ValueError(f"{where}: class label {label!r} is not declared in @classLabel {class_names}")
            labels.append(label)
        if num_dims is None:
            num_dims = len(fields)  # no @dimensions: the first case fixes it
        if len(fields) != num_dims or not fields:
            raise ValueError(f"{where}: expected {num_dims} dimension(s) separated by ':', found {len(fields)}")
        dims = [_parse_values(f, where, d, missing) for d, f in enumerate(fields)]
        lengths = {len(d) for d in dims}
        if len(lengths) != 1:
            raise ValueError(f"{where}: the dimensions of one case have different lengths {[len(d) for d in dims]}")
        length = lengths.pop()
        if equal_length and series_length is not None and length != series_length:
            raise ValueError(f"{where}: series has {length} steps but @seriesLength is {series_length}")
        if equal_length and cases and length != cases[0].shape[0]:
            raise ValueError(
                f"{where}: series has {length} steps, the first case {cases[0].shape[0]} (@equalLength true)"
            )
        cases.append(np.stack(dims, axis=1))
    if not in_data:
        raise ValueError(f"{source}: no @data line")
    if not cases:
        raise ValueError(f"{source}: no cases after @data")
    lengths = torch.tensor([c.shape[0] for c in cases], dtype=torch.long)
    values = torch.zeros(len(cases), int(lengths.max()), num_dims, dtype=torch.float32)
    for i, case in enumerate(cases):
        values[i, : case.shape[0]] = torch.from_numpy(case)
    return TSFile(values, lengths, labels if has_target else None, class_names, header, source)


def load_ts_file(path: str | Path, missing: str = "raise") -> TSFile:
    """Read and parse one `.ts` file (see `parse_ts`)."""
    path = Path(path)
    # Comments in some UEA files are not UTF-8; the data part is plain ASCII either way.
    return parse_ts(path.read_text(encoding="utf-8", errors="replace"), source=str(path), missing=missing)


# ----------------------------------------------------------------------------------------------------------------
# Locating files


def aeon_data_dir() -> Path | None:
    """The folder of datasets the `aeon` package ships (e.g. BasicMotions), or None without aeon."""
    # find_spec locates the package without importing it (aeon's import pulls in numba and scikit-learn).
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"
    return folder if folder.is_dir() else None


def shipped_datasets() -> list[str]:
    """Names of the datasets with a `<name>_TRAIN.ts` that aeon ships ([] without aeon)."""
    root = aeon_data_dir()
    if root is None:
        return []
    return sorted(d.name for d in root.iterdir() if (d / f"{d.name}_TRAIN.ts").is_file())


def _roles_in_folder(folder: Path, name: str) -> dict[str, Path]:
    files = sorted(folder.glob("*.ts"))
    by_stem = {f.stem.lower(): f for f in files}
    stem = name.lower()
    roles = {}
    if f"{stem}_train" in by_stem:
        roles["train"] = by_stem[f"{stem}_train"]
    if f"{stem}_test" in by_stem:
        roles["test"] = by_stem[f"{stem}_test"]
    for suffix in _VALID_SUFFIXES:
        if f"{stem}{suffix}" in by_stem:
            roles["val"] = by_stem[f"{stem}{suffix}"]
            break
    if not roles:
        if stem in by_stem:
            return {"all": by_stem[stem]}
        if len(files) == 1:
            return {"all": files[0]}
        prefixes = {s[: -len("_train")] for s in by_stem if s.endswith("_train")}
        if len(prefixes) == 1 and prefixes != {stem}:  # a folder named otherwise, holding one <X>_TRAIN.ts
            return _roles_in_folder(folder, prefixes.pop())
        raise ValueError(
            f"no {name}_TRAIN.ts / {name}_TEST.ts (or single .ts file) in {folder}; .ts files there: "
            f"{[f.name for f in files]}"
        )
    if "train" not in roles or "test" not in roles:
        raise ValueError(
            f"{folder} has {sorted(r.name for r in roles.values())}: need both {name}_TRAIN.ts and {name}_TEST.ts"
        )
    return roles


def find_ts_files(dataset: str | Path, data_dir: str | Path | None = None) -> dict[str, Path]:
    """Where the data of `dataset` lies: {"train", "test"[, "val"]} or {"all"} -> path.

    `dataset` is a `.ts` file, a folder, or a name looked up in `data_dir/<name>/`, then `data_dir/`, or, without
    `data_dir`, among the datasets aeon ships.
    """
    path = Path(dataset)
    if path.is_file():
        return {"all": path}
    if path.is_dir():
        return _roles_in_folder(path, path.name)
    name = str(dataset)
    if data_dir is not None:
        candidates = [Path(data_dir) / name, Path(data_dir)]
    else:
        root = aeon_data_dir()
        if root is None:
            raise ValueError(
                f"dataset {name!r}: no data_dir given and the aeon package (which ships BasicMotions and others) "
                "is not installed; pip install 'hf-ssm[train]' or pass data_dir"
            )
        candidates = [root / name]
    for folder in candidates:
        if folder.is_dir() and any(f.stem.lower().startswith(name.lower()) for f in folder.glob("*.ts")):
            return _roles_in_folder(folder, name)
    shipped = f"; aeon ships {shipped_datasets()}" if data_dir is None else ""
    raise ValueError(f"dataset {name!r} not found in {[str(c) for c in candidates]}{shipped}")


# ----------------------------------------------------------------------------------------------------------------
# Splits, normalisation, imputation


@dataclass
class TimeSeriesSplit:
    """Cases of one split.

    values: (n, T, C) float32 (NaN = missing until imputed; 0 past each case's length).
    lengths: (n,) long. labels: (n,) long class ids. observed: (n, T, C) bool, False at missing values.
    """

    values: torch.Tensor
    lengths: torch.Tensor
    labels: torch.Tensor
    observed: torch.Tensor = field(default=None)

    def __post_init__(self):
        if self.observed is None:
            self.observed = ~torch.isnan(self.values)

    def __len__(self) -> int:
        return self.values.shape[0]

    def real_steps(self) -> torch.Tensor:
        """(n, T) bool, True at steps before each case's length."""
        return torch.arange(self.values.shape[1]) < self.lengths[:, None]

    def subset(self, index: torch.Tensor) -> TimeSeriesSplit:
        index = torch.as_tensor(index, dtype=torch.long)
        return TimeSeriesSplit(self.values[index], self.lengths[index], self.labels[index], self.observed[index])

    def batch(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """Model inputs of the cases `index`: past_values (b, T_b, C), attention_mask (b, T_b), labels (b,).

        T_b is the longest length in the batch (right padding), so short batches run short scans.
        """
        index = torch.as_tensor(index, dtype=torch.long)
        lengths = self.lengths[index]
        steps = int(lengths.max())
        mask = (torch.arange(steps) < lengths[:, None]).long()
        return {"past_values": self.values[index, :steps], "attention_mask": mask, "labels": self.labels[index]}


def _concat(splits: list[TimeSeriesSplit]) -> TimeSeriesSplit:
    steps = max(s.values.shape[1] for s in splits)

    def pad(x: torch.Tensor, value) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, 0, 0, steps - x.shape[1]), value=value)

    return TimeSeriesSplit(
        torch.cat([pad(s.values, 0.0) for s in splits]),
        torch.cat([s.lengths for s in splits]),
        torch.cat([s.labels for s in splits]),
        torch.cat([pad(s.observed, True) for s in splits]),
    )


def _trim(split: TimeSeriesSplit) -> TimeSeriesSplit:
    """Drop trailing steps that are padding in every case."""
    steps = int(split.lengths.max())
    return TimeSeriesSplit(split.values[:, :steps], split.lengths, split.labels, split.observed[:, :steps])


def stratified_split(labels: torch.Tensor, fractions: tuple[float, ...], seed: int) -> list[torch.Tensor]:
    """Seeded split of case indices into len(fractions) parts, stratified by class.

    Parts 2.. take round(fraction x count) cases of each class (at least one while the class has two or more
    cases left); part 1 keeps the rest. Returns sorted index tensors.
    """
    if not math.isclose(sum(fractions), 1.0, abs_tol=1e-6) or any(f <= 0 for f in fractions):
        raise ValueError(f"split fractions must be > 0 and sum to 1, got {fractions}")
    generator = torch.Generator().manual_seed(seed)
    parts: list[list[int]] = [[] for _ in fractions]
    for cls in torch.unique(labels).tolist():
        members = torch.nonzero(labels == cls).flatten()
        members = members[torch.randperm(len(members), generator=generator)].tolist()
        start = 0
        for p, fraction in enumerate(fractions[1:], start=1):
            take = math.floor(fraction * len(members) + 0.5)
            if take == 0 and len(members) - start >= 2:
                take = 1  # keep every class visible in small validation / test parts
            take = min(take, len(members) - start - 1)  # and at least one case in the training part
            parts[p].extend(members[start : start + take])
            start += take
        parts[0].extend(members[start:])
    return [torch.tensor(sorted(p), dtype=torch.long) for p in parts]


@dataclass
class ChannelNormalizer:
    """x -> (x - mean) / std per channel; mean, std (C,) fitted on the real, observed steps of one split."""

    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def fit(cls, split: TimeSeriesSplit) -> ChannelNormalizer:
        keep = split.observed & split.real_steps()[..., None]  # (n, T, C)
        counts = keep.sum(dim=(0, 1))
        if bool((counts == 0).any()):
            empty = torch.nonzero(counts == 0).flatten().tolist()
            raise ValueError(f"channel(s) {empty} have no observed value in the training split; cannot normalise")
        x = torch.where(keep, split.values.double(), 0.0)
        mean = x.sum(dim=(0, 1)) / counts
        var = (torch.where(keep, x - mean, 0.0) ** 2).sum(dim=(0, 1)) / counts
        std = var.sqrt()
        std = torch.where(std > 1e-8, std, torch.ones_like(std))  # a constant channel becomes all zeros
        return cls(mean.float(), std.float())

    def transform(self, split: TimeSeriesSplit) -> TimeSeriesSplit:
        if split.values.shape[-1] != self.mean.shape[0]:
            raise ValueError(f"split has {split.values.shape[-1]} channels, the normaliser {self.mean.shape[0]}")
        values = (split.values - self.mean) / self.std
        values = torch.where(split.real_steps()[..., None], values, 0.0)  # padding stays 0 (NaN stays NaN)
        return replace(split, values=values)

    def to_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, data: dict) -> ChannelNormalizer:
        return cls(torch.tensor(data["mean"]), torch.tensor(data["std"]))


def impute_forward_fill(split: TimeSeriesSplit) -> TimeSeriesSplit:
    """Missing value -> last observed value of its channel in the same case; before the first one: 0."""
    n, steps, channels = split.values.shape
    positions = torch.arange(steps).view(1, steps, 1).expand(n, steps, channels)
    last_seen = torch.where(split.observed, positions, -1).cummax(dim=1).values
    filled = split.values.gather(1, last_seen.clamp_min(0))
    filled = torch.where(last_seen >= 0, filled, 0.0)
    filled = torch.where(split.real_steps()[..., None], filled, 0.0)
    return replace(split, values=filled)


# ----------------------------------------------------------------------------------------------------------------
# Whole dataset


@dataclass
class TimeSeriesData:
    """Normalised train / val / test splits of one dataset, ready for the model."""

    name: str
    train: TimeSeriesSplit
    val: TimeSeriesSplit
    test: TimeSeriesSplit
    class_names: list[str]
    normalizer: ChannelNormalizer
    split_rule: str
    files: dict[str, str]

    @property
    def input_channels(self) -> int:
        return self.train.values.shape[-1]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def max_length(self) -> int:
        return max(int(s.lengths.max()) for s in (self.train, self.val, self.test))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "files": self.files,
            "split_rule": self.split_rule,
            "sizes": {"train": len(self.train), "val": len(self.val), "test": len(self.test)},
            "input_channels": self.input_channels,
            "max_length": self.max_length,
            "class_names": self.class_names,
            "normalizer": self.normalizer.to_dict(),
        }


def _to_split(ts: TSFile, class_names: list[str]) -> TimeSeriesSplit:
    index = {c: i for i, c in enumerate(class_names)}
    unknown = sorted({label for label in ts.labels if label not in index})
    if unknown:
        raise ValueError(f"{ts.source}: class labels {unknown} are not among {class_names}")
    labels = torch.tensor([index[label] for label in ts.labels], dtype=torch.long)
    return TimeSeriesSplit(ts.values, ts.lengths, labels)


def _check_preparation(missing: str, val_fraction: float, test_fraction: float, missing_indicators: bool) -> None:
    """The checks of the settings every loader shares: the missing-value policy and the split fractions."""
    if missing not in MISSING_POLICIES:
        raise ValueError(f"`missing` must be one of {list(MISSING_POLICIES)}, got {missing!r}")
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 0.5:
            raise ValueError(f"`{name}` must be in (0, 0.5), got {value}")
    if missing_indicators and missing != "impute":
        raise ValueError("`missing_indicators` needs missing='impute' (with 'raise' nothing is ever missing)")


def load_timeseries(
    dataset: str | Path,
    data_dir: str | Path | None = None,
    *,
    split: str = "auto",
    seed: int = 0,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    missing: str = "raise",
    missing_indicators: bool = False,
) -> TimeSeriesData:
    """Load, split, normalise (training statistics only) and impute a classification dataset.

    See the module docstring for the split rules and the missing-value policies; `seed` drives every split.
    """
    if split not in SPLIT_MODES:
        raise ValueError(f"`split` must be one of {list(SPLIT_MODES)}, got {split!r}")
    _check_preparation(missing, val_fraction, test_fraction, missing_indicators)
    paths = find_ts_files(dataset, data_dir)
    files = {role: load_ts_file(path, missing=missing) for role, path in paths.items()}
    first = files.get("train", files.get("all"))
    for ts in files.values():
        if ts.labels is None or ts.class_names is None:
            raise ValueError(f"{ts.source}: not a classification file (needs @classLabel true <labels>)")
        if ts.num_channels != first.num_channels:
            raise ValueError(f"{ts.source} has {ts.num_channels} channels, {first.source} {first.num_channels}")
    class_names = list(first.class_names)
    splits = {role: _to_split(ts, class_names) for role, ts in files.items()}
    name = first.header.get("problemname") or Path(first.source).stem.split("_")[0]
    main_fraction = 1 - val_fraction - test_fraction

    if split == "resplit" or "all" in splits:
        pooled = _concat(list(splits.values()))
        train_idx, val_idx, test_idx = stratified_split(
            pooled.labels, (main_fraction, val_fraction, test_fraction), seed
        )
        parts = [_trim(pooled.subset(i)) for i in (train_idx, val_idx, test_idx)]
        source = "all files pooled" if len(splits) > 1 else "the single file"
        rule = (
            f"{source} split {100 * main_fraction:.0f}/{100 * val_fraction:.0f}/{100 * test_fraction:.0f} "
            f"(train/val/test, stratified, seed {seed})"
        )
    elif "val" in splits:
        parts = [splits["train"], splits["val"], splits["test"]]
        rule = "train / val / test files as given"
    else:
        train_idx, val_idx = stratified_split(splits["train"].labels, (1 - val_fraction, val_fraction), seed)
        parts = [_trim(splits["train"].subset(train_idx)), _trim(splits["train"].subset(val_idx)), splits["test"]]
        rule = (
            f"val = {100 * val_fraction:.0f}% of the TRAIN file (stratified, seed {seed}); "
            "TEST file untouched (no validation file given)"
        )
    for part, role in zip(parts, ("train", "val", "test")):
        if len(part) == 0:
            raise ValueError(f"the {role} split of {name} is empty ({rule}); the dataset is too small")

    files = {role: str(p) for role, p in paths.items()}
    return _prepare(name, parts, class_names, rule, files, missing, missing_indicators)


def _prepare(
    name: str,
    parts: list[TimeSeriesSplit],
    class_names: list[str],
    rule: str,
    files: dict[str, str],
    missing: str,
    missing_indicators: bool,
) -> TimeSeriesData:
    """Normalise train / val / test `parts` with training statistics, then impute and add indicators."""
    normalizer = ChannelNormalizer.fit(parts[0])  # training statistics only
    parts = [normalizer.transform(p) for p in parts]
    if missing == "impute":
        parts = [impute_forward_fill(p) for p in parts]
    if missing_indicators:
        # 1 = observed, 0 = imputed; 0 past each case's length like every other channel.
        indicators = [(p.observed & p.real_steps()[..., None]).float() for p in parts]
        parts = [replace(p, values=torch.cat([p.values, ind], dim=-1)) for p, ind in zip(parts, indicators)]
        parts = [replace(p, observed=torch.ones_like(p.values, dtype=torch.bool)) for p in parts]
    return TimeSeriesData(
        name=name,
        train=parts[0],
        val=parts[1],
        test=parts[2],
        class_names=class_names,
        normalizer=normalizer,
        split_rule=rule,
        files=files,
    )


# ----------------------------------------------------------------------------------------------------------------
# Synthetic series


def synthetic_shape(text: str) -> tuple[int, int, int]:
    """The text LENGTH,CHANNELS,CLASSES (e.g. "17984,6,5") -> (length, channels, classes); ValueError naming
    `synthetic_shape` for anything else (length >= 2, channels >= 1, classes >= 2)."""
    items = [item.strip() for item in str(text).split(",")]
    try:
        length, channels, classes = (int(item) for item in items)
    except ValueError:
        raise ValueError(
            f"`synthetic_shape` must be LENGTH,CHANNELS,CLASSES as three integers (e.g. 17984,6,5), got {text!r}"
        ) from None
    if length < 2 or channels < 1 or classes < 2:
        raise ValueError(
            f"`synthetic_shape` {text!r}: needs length >= 2, channels >= 1 and classes >= 2, "
            f"got length {length}, channels {channels}, classes {classes}"
        )
    return length, channels, classes


def check_synthetic(shape: str | tuple[int, int, int], series: int) -> tuple[int, int, int]:
    """(length, channels, classes) of `shape` (a tuple or its "LENGTH,CHANNELS,CLASSES" text), after checking that
    `series` is an integer >= 3 x classes (a case of every class in train, val and test); ValueError otherwise."""
    length, channels, classes = synthetic_shape(",".join(map(str, shape)) if isinstance(shape, tuple) else shape)
    if isinstance(series, bool) or not isinstance(series, int) or series < 3 * classes:
        raise ValueError(
            f"`synthetic_series` must be an integer >= 3 x classes = {3 * classes} (a case of every class in "
            f"train, val and test), got {series!r}"
        )
    return length, channels, classes


def synthetic_series(length: int, channels: int, classes: int, series: int, seed: int) -> TimeSeriesSplit:
    """`series` generated cases (values (series, length, channels), labels i mod classes); the signal is described
    in the module docstring. The same arguments give the same values bit for bit."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(series) % classes
    amplitude = 0.5 + torch.rand(series, 1, channels, generator=generator)
    phase = 2 * math.pi * torch.rand(series, 1, channels, generator=generator)
    frequency = (labels + 1).double() / (4 * (classes + 1))  # cycles per step
    steps = torch.arange(length, dtype=torch.float64)
    angle = 2 * math.pi * frequency[:, None, None] * steps[None, :, None] + phase.double()  # exact for long T
    noise = 0.5 * torch.randn(series, length, channels, generator=generator)
    values = (amplitude * torch.sin(angle).float() + noise).contiguous()
    return TimeSeriesSplit(values, torch.full((series,), length, dtype=torch.long), labels)


def synthetic_timeseries(
    shape: str | tuple[int, int, int],
    series: int,
    *,
    seed: int = 0,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    missing: str = "raise",
    missing_indicators: bool = False,
) -> TimeSeriesData:
    """Generated series of `shape` (length, channels, classes), or its "LENGTH,CHANNELS,CLASSES" text, as a
    dataset: `series` cases from `seed` (module docstring), split like a single file (stratified, the same `seed`)
    and normalised with training statistics. `series` must be at least 3 x classes, so that every class has a case
    in each split."""
    length, channels, classes = check_synthetic(shape, series)
    _check_preparation(missing, val_fraction, test_fraction, missing_indicators)
    pooled = synthetic_series(length, channels, classes, series, seed)
    main_fraction = 1 - val_fraction - test_fraction
    index = stratified_split(pooled.labels, (main_fraction, val_fraction, test_fraction), seed)
    rule = (
        f"{series} synthetic series (seed {seed}) split {100 * main_fraction:.0f}/{100 * val_fraction:.0f}/"
        f"{100 * test_fraction:.0f} (train/val/test, stratified, seed {seed})"
    )
    name = f"{SYNTHETIC}_{length}x{channels}x{classes}"
    class_names = [f"class{c}" for c in range(classes)]
    parts = [pooled.subset(i) for i in index]
    return _prepare(name, parts, class_names, rule, {}, missing, missing_indicators)
