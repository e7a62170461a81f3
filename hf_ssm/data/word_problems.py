"""Group word problems read from files in the formats of the "Illusion of State" paper (docs/design.md §8.6).

Two CSV layouts, told apart by their header: ``length,input,target`` (the layout the paper's README documents) and
``seed,input,target`` (what the authors' generator, jopetty/word-problem ``src/generate_data.py``, writes: no
``length`` column, the generator's seed on every row). ``input`` is a space-separated list of group-element
indices, ``target`` either their prefix products, one per input token (every prefix labelled: what the generator
writes), or a single entry, the final product (only the last position labelled); ``length``, where given, must be
the number of input tokens, and without it the length is that count. Columns other than these three (``seed``) are
ignored and named (``WordProblemDataset.ignored_fields``). JSON holds the same fields: one object per line (JSONL)
or one array of objects. Indices are >= 0 and name group elements (Z60, A4xZ5, A5, S5 or any other group: the file
fixes the numbering, this module only reads it). Files are UTF-8, a byte-order mark (Excel's "CSV UTF-8") allowed.

Token ids follow the package's convention (id 0 is padding): element index i is token id i + 1, and the class of
a target is its index. The vocabulary is shared by inputs and targets: ``num_elements`` = the largest index in the
run's files + 1, unless given (``num_classes``, at least that).

Malformed rows raise ValueError naming the file, the row (data rows counted from 1; in a CSV the header is line
1, so row r is line r + 1 unless a quoted value spans lines) and the column.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import re
from pathlib import Path

import torch

from .state_tracking import IGNORE_INDEX, Task, checked_index

__all__ = [
    "WORD_PROBLEM_FIELDS",
    "WORD_PROBLEM_TASK",
    "WordProblemDataset",
    "WordProblemTask",
    "load_word_problem_file",
    "word_problem_task",
]

WORD_PROBLEM_FIELDS = ("length", "input", "target")  # every field a file may give; `length` is optional
REQUIRED_FIELDS = ("input", "target")
WORD_PROBLEM_TASK = "word_problem_file"  # the task name of a run whose sequences come from files
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def _indices(path: Path, row: int, column: str, value) -> list[int]:
    """The element indices of one cell: a space-separated string (CSV, JSON) or a list of ints (JSON)."""
    pieces = value.split() if isinstance(value, str) else value
    if not isinstance(pieces, list):
        raise ValueError(f"{path}: row {row}, column `{column}`: expected space-separated indices, got {value!r}")
    out = []
    for position, piece in enumerate(pieces):
        try:
            if isinstance(piece, bool) or isinstance(piece, float):
                raise ValueError
            index = int(piece)
        except (TypeError, ValueError):
            raise ValueError(
                f"{path}: row {row}, column `{column}`: token {piece!r} (position {position}) is not an integer"
            ) from None
        if index < 0:
            raise ValueError(
                f"{path}: row {row}, column `{column}`: index {index} (position {position}) is negative (group "
                "element indices are >= 0)"
            )
        out.append(index)
    return out


def _length(path: Path, row: int, value) -> int:
    """The `length` cell as an int: a JSON integer or the digits of a string; never a float (3.7 is not read as
    3) or a boolean (true is not read as 1)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | str)
        or (isinstance(value, str) and not _INTEGER.fullmatch(value))
    ):
        raise ValueError(f"{path}: row {row}, column `length`: {value!r} is not an integer")
    return int(value)


def _json_records(path: Path, text: str):
    """(row number, record) of a JSON array of objects (row r: element r) or of JSONL (row r: line r)."""
    if text.lstrip().startswith("["):  # one JSON array of records (text opening with "[" decodes to a list or fails)
        try:
            numbered = enumerate(json.loads(text), start=1)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    else:
        numbered = _jsonl_lines(path, text)
    for row, record in numbered:
        if not isinstance(record, dict):
            raise ValueError(f"{path}: row {row}: not a JSON object with fields {list(WORD_PROBLEM_FIELDS)}")
        yield row, record


def _jsonl_lines(path: Path, text: str):
    """(line number, decoded value) of every non-blank line of JSONL text."""
    for row, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield row, json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: row {row}: not a JSON object ({err.msg})") from None


def _csv_records(path: Path, text: str):
    """(row number, record) of every data row of a CSV; a row with more values than the header is refused."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [f for f in REQUIRED_FIELDS if f not in header]
        if missing:
            raise ValueError(
                f"{path}: the header has no column `{missing[0]}` (a word-problem CSV needs the columns "
                f"{','.join(REQUIRED_FIELDS)}, `length` optional, e.g. length,input,target or seed,input,target; "
                f"found {','.join(header) or 'no header'})"
            )
        for row, record in enumerate(reader, start=1):
            if None in record:  # DictReader's key for the values past the header's columns
                raise ValueError(
                    f"{path}: row {row} (line {reader.line_num}): {len(header) + len(record[None])} values, but the "
                    f"header has {len(header)} columns ({','.join(header)}); quote a value that holds a comma"
                )
            yield row, record
    except csv.Error as err:
        raise ValueError(f"{path}: line {reader.line_num}: not readable as CSV ({err})") from None


def _parse(path: Path, text: str) -> tuple[list[list[int]], list[list[int]], tuple[str, ...]]:
    """(inputs, targets, the ignored fields in order of appearance) of a file's text."""
    is_json = path.suffix.lower() in (".jsonl", ".json")
    inputs, targets, ignored = [], [], {}
    for row, record in (_json_records if is_json else _csv_records)(path, text):
        ignored.update(dict.fromkeys(key for key in record if key not in WORD_PROBLEM_FIELDS))
        for column in REQUIRED_FIELDS:
            if record.get(column) is None:
                raise ValueError(f"{path}: row {row}, column `{column}`: missing")
        tokens = _indices(path, row, "input", record["input"])
        target = _indices(path, row, "target", record["target"])
        if not tokens:
            raise ValueError(f"{path}: row {row}, column `input`: no tokens")
        if "length" in record:  # a CSV with the column gives every row one (None: the row stopped short)
            if record["length"] is None:
                raise ValueError(f"{path}: row {row}, column `length`: missing")
            length = _length(path, row, record["length"])
            if length != len(tokens):
                raise ValueError(
                    f"{path}: row {row}, column `length`: {length}, but column `input` has {len(tokens)} tokens"
                )
        if len(target) not in (1, len(tokens)):
            raise ValueError(
                f"{path}: row {row}, column `target`: {len(target)} entries; need 1 (the final product) or "
                f"{len(tokens)} (the prefix products, one per input token)"
            )
        inputs.append(tokens)
        targets.append(target)
    if not inputs:
        raise ValueError(f"{path}: no data rows")
    return inputs, targets, tuple(ignored)


class WordProblemDataset(torch.utils.data.Dataset):
    """The rows of a word-problem file (or a subset of them), as ``StateTrackingDataset`` items:
    ``input_ids`` (L,) long (element index + 1), ``labels`` (L,) long (the prefix products where the file gives
    them, else -100 but at the last position), ``label`` (the final product: the last target) and ``length`` (L).

    Attributes: ``path``, ``inputs`` / ``targets`` (lists of index lists), ``lengths``, ``max_index`` (the
    largest index of an input or a target), ``ignored_fields`` (the file's columns other than length / input /
    target, e.g. ``("seed",)``: read past, never used), ``sha256`` and ``size`` (of the file's bytes: its
    ``fingerprint``; None for rows not read from a file).
    """

    def __init__(
        self,
        path,
        inputs: list[list[int]],
        targets: list[list[int]],
        ignored_fields: tuple[str, ...] = (),
        sha256: str | None = None,
        size: int | None = None,
    ):
        self.path = Path(path)
        self.inputs, self.targets = inputs, targets
        self.lengths = [len(tokens) for tokens in inputs]
        self.max_index = max((max(t) for t in (*inputs, *targets) if t), default=-1)
        self.ignored_fields = tuple(ignored_fields)
        self.sha256, self.size = sha256, size

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def dense(self) -> bool:
        """Whether every row gives its prefix products (a target per input token)."""
        return all(len(t) == len(x) for x, t in zip(self.inputs, self.targets))

    @property
    def fingerprint(self) -> dict:
        """{"path", "sha256", "size"} of the file the rows were read from (a resumed run compares them)."""
        return {"path": str(self.path), "sha256": self.sha256, "size": self.size}

    def subset(self, indices) -> WordProblemDataset:
        """The rows `indices`, in that order (the file's fingerprint and ignored fields kept)."""
        return WordProblemDataset(
            self.path,
            [self.inputs[i] for i in indices],
            [self.targets[i] for i in indices],
            self.ignored_fields,
            self.sha256,
            self.size,
        )

    def with_lengths(self, low: int, high: int) -> WordProblemDataset:
        """The rows with low <= length <= high, in file order."""
        return self.subset([i for i, n in enumerate(self.lengths) if low <= n <= high])

    def sample_raw(self, i: int) -> tuple[list[int], list[int]]:
        """``(token ids, labels)`` of row ``i`` as Python lists."""
        i = checked_index(i, len(self))
        tokens, target = self.inputs[i], self.targets[i]
        labels = list(target) if len(target) == len(tokens) else [IGNORE_INDEX] * (len(tokens) - 1) + target
        return [t + 1 for t in tokens], labels

    def __getitem__(self, i) -> dict:
        tokens, labels = self.sample_raw(i)
        return {
            "input_ids": torch.tensor(tokens, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
            "label": labels[-1],
            "length": len(tokens),
        }


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int) -> WordProblemDataset:  # keyed by the file's state: re-read on change
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")  # Excel's "CSV UTF-8" starts with a byte-order mark
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {data[err.start : err.start + 1]!r})") from None
    inputs, targets, ignored = _parse(Path(path), text)
    return WordProblemDataset(path, inputs, targets, ignored, hashlib.sha256(data).hexdigest(), len(data))


def load_word_problem_file(path) -> WordProblemDataset:
    """The rows of a word-problem CSV (header ``length,input,target`` or ``seed,input,target``), JSONL or JSON
    array file; ValueError naming the file, row and column of the first malformed row."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"word-problem file {str(path)!r} does not exist")
    stat = path.stat()
    return _load(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


class WordProblemTask(Task):
    """The `Task` of a file run: its vocabulary and classes (no generator: the sequences come from the files).

    ``num_elements`` group elements: tokens 1 .. num_elements (index + 1), classes 0 .. num_elements - 1.
    """

    name = WORD_PROBLEM_TASK

    def __init__(self, num_elements: int, labels_every_prefix: bool = True):
        self.num_elements = num_elements
        self.vocab_size = num_elements + 1
        self.num_classes = num_elements
        self.token_names = ["<pad>"] + [str(i) for i in range(num_elements)]
        self.labels_every_prefix = labels_every_prefix

    def sample(self, length, rng):
        raise ValueError("a word-problem file task has no generator: its sequences are the rows of its files")

    def labels(self, tokens):
        raise ValueError("a word-problem file task has no group table: its labels are the files' targets")


def word_problem_task(*files: WordProblemDataset, num_classes: int | None = None) -> WordProblemTask:
    """The task of a run on these files (training, test and any validation file): num_elements = the largest index
    in any of them + 1, or `num_classes` (ValueError when a file holds an index >= num_classes). Every position is
    labelled when every file gives prefix products."""
    largest = max(f.max_index for f in files)
    if num_classes is None:
        num_classes = largest + 1
    elif isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= largest:
        source = next(f.path for f in files if f.max_index == largest)
        raise ValueError(
            f"num_classes must be an int above every element index of the files; {source} holds index {largest}, "
            f"got num_classes={num_classes!r}"
        )
    return WordProblemTask(num_classes, labels_every_prefix=all(f.dense for f in files))
