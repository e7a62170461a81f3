"""Group word problems read from files in the format the "Illusion of State" paper distributes (docs/design.md §8).

A file is CSV with the header ``length,input,target`` (or JSONL with the same three fields per line): ``input`` is
a space-separated list of group-element indices, ``target`` either their prefix products, one per input token
(the paper's files: dense supervision, every prefix labelled), or a single entry, the final product (only the
last position labelled); ``length`` is the number of input tokens. Indices are >= 0 and name group elements
(Z60, A4xZ5, A5, S5 or any other group: the file fixes the numbering, this module only reads it).

Token ids follow the package's convention (id 0 is padding): element index i is token id i + 1, and the class of
a target is its index. The vocabulary is shared by inputs and targets: ``num_elements`` = the largest index in the
training and test files + 1, unless given (``num_classes``, at least that).

Malformed rows raise ValueError naming the file, the row (data rows counted from 1; in a CSV the header is line
1, so row r is line r + 1) and the column.
"""

from __future__ import annotations

import csv
import functools
import json
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

WORD_PROBLEM_FIELDS = ("length", "input", "target")
WORD_PROBLEM_TASK = "word_problem_file"  # the task name of a run whose sequences come from files


def _indices(path: Path, row: int, column: str, value) -> list[int]:
    """The element indices of one cell: a space-separated string (CSV, JSONL) or a list of ints (JSONL)."""
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


def _raw_rows(path: Path):
    """(row number, {field: value}) of every data row of a CSV or JSONL file (JSONL: a `.jsonl` / `.json` suffix)."""
    if path.suffix in (".jsonl", ".json"):
        with path.open(encoding="utf-8") as handle:
            for row, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}: row {row}: not a JSON object ({err.msg})") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{path}: row {row}: not a JSON object with fields {list(WORD_PROBLEM_FIELDS)}")
                yield row, record
        return
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [f for f in WORD_PROBLEM_FIELDS if f not in header]
        if missing:
            raise ValueError(
                f"{path}: the header has no column `{missing[0]}` (a word-problem CSV needs the columns "
                f"{','.join(WORD_PROBLEM_FIELDS)}; found {','.join(header) or 'no header'})"
            )
        for row, record in enumerate(reader, start=1):
            yield row, record


def _parse(path: Path) -> tuple[list[list[int]], list[list[int]]]:
    inputs, targets = [], []
    for row, record in _raw_rows(path):
        for column in WORD_PROBLEM_FIELDS:
            if record.get(column) is None:
                raise ValueError(f"{path}: row {row}, column `{column}`: missing")
        tokens = _indices(path, row, "input", record["input"])
        target = _indices(path, row, "target", record["target"])
        try:
            length = int(record["length"])
        except (TypeError, ValueError):
            raise ValueError(f"{path}: row {row}, column `length`: {record['length']!r} is not an integer") from None
        if not tokens:
            raise ValueError(f"{path}: row {row}, column `input`: no tokens")
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
    return inputs, targets


class WordProblemDataset(torch.utils.data.Dataset):
    """The rows of a word-problem file (or a subset of them), as ``StateTrackingDataset`` items:
    ``input_ids`` (L,) long (element index + 1), ``labels`` (L,) long (the prefix products where the file gives
    them, else -100 but at the last position), ``label`` (the final product) and ``length`` (L).

    Attributes: ``path``, ``inputs`` / ``targets`` (lists of index lists), ``lengths``, ``max_index`` (the
    largest index of an input or a target).
    """

    def __init__(self, path, inputs: list[list[int]], targets: list[list[int]]):
        self.path = Path(path)
        self.inputs, self.targets = inputs, targets
        self.lengths = [len(tokens) for tokens in inputs]
        self.max_index = max((max(t) for t in (*inputs, *targets) if t), default=-1)

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def dense(self) -> bool:
        """Whether every row gives its prefix products (a target per input token)."""
        return all(len(t) == len(x) for x, t in zip(self.inputs, self.targets))

    def subset(self, indices) -> WordProblemDataset:
        """The rows `indices`, in that order."""
        return WordProblemDataset(self.path, [self.inputs[i] for i in indices], [self.targets[i] for i in indices])

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
    inputs, targets = _parse(Path(path))
    return WordProblemDataset(path, inputs, targets)


def load_word_problem_file(path) -> WordProblemDataset:
    """The rows of a word-problem CSV (header ``length,input,target``) or JSONL file; ValueError naming the file,
    row and column of the first malformed row."""
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


def word_problem_task(train: WordProblemDataset, test: WordProblemDataset, num_classes: int | None = None):
    """The task of a run on these files: num_elements = the largest index in either file + 1, or `num_classes`
    (ValueError when a file holds an index >= num_classes)."""
    largest = max(train.max_index, test.max_index)
    if num_classes is None:
        num_classes = largest + 1
    elif isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes <= largest:
        source = train.path if train.max_index == largest else test.path
        raise ValueError(
            f"num_classes must be an int above every element index of the files; {source} holds index {largest}, "
            f"got num_classes={num_classes!r}"
        )
    return WordProblemTask(num_classes, labels_every_prefix=train.dense and test.dense)
