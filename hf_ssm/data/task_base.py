"""The interface every synthetic sequence task implements (docs/design.md §8.1): `Task`, the pad id, the ignored
label. The state-tracking tasks (state_tracking.py) and the memory tasks (memory_tasks.py) both build on it, and
`StateTrackingDataset` / the driver read nothing else of a task.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

IGNORE_INDEX = -100
PAD_ID = 0
SCORED_POSITIONS = ("last", "labelled")


def check_length(length, name: str = "length") -> int:
    if isinstance(length, bool) or not isinstance(length, int):
        raise ValueError(f"{name} must be an int, got {length!r}")
    if length < 1:
        raise ValueError(f"{name} must be >= 1, got {length}")
    return length


def checked_index(i: int, size: int) -> int:
    """Item index `i` of a dataset of `size` items, negative counting from the end; clear errors otherwise."""
    if isinstance(i, bool) or not isinstance(i, int):
        raise TypeError(f"index must be an int, got {type(i).__name__}")
    if i < 0:
        i += size
    if not 0 <= i < size:
        raise IndexError(f"index out of range for a dataset of {size} items")
    return i


class Task:
    """Common interface of all synthetic sequence tasks.

    A task draws a sequence for a *size*: for most tasks the sequence length itself; for a task whose sequences have
    a fixed length (multi-query associative recall) the quantity its test buckets sweep (the number of key-value
    pairs), named by ``size_name``. ``StateTrackingDataset`` draws the sizes and never changes one.

    Attributes:
        name: the task name (one of ``TASK_NAMES``).
        vocab_size: number of token ids including the pad id 0; real tokens are ``1 .. vocab_size - 1``.
        num_classes: number of answer classes.
        token_names: ``token_names[id]`` is a readable name; ``token_names[0] == "<pad>"``.
        labels_every_prefix: True when every prefix that is itself a valid input gets a label
            (for ``modular_arithmetic`` these are the digit positions; operator positions are -100).
        size_name: what the size passed to ``sample`` counts ("length", or e.g. "num_pairs").
        scored_positions: which positions the test's accuracy reads: ``"last"`` (the answer for the whole
            sequence, the state-tracking tasks) or ``"labelled"`` (every labelled position: each query of a recall
            sequence, each copied token).
    """

    name: str = ""
    vocab_size: int = 0
    num_classes: int = 0
    token_names: list[str] = []
    labels_every_prefix: bool = True
    size_name: str = "length"
    scored_positions: str = "last"
    _separator: str = " "

    @property
    def chance_accuracy(self) -> float:
        """The expected accuracy of a uniform random guess over the classes at a scored position: 1 / num_classes
        (the driver records it next to the test accuracy)."""
        return 1.0 / self.num_classes

    def size_range(self) -> tuple[int, int | None]:
        """The smallest and largest size ``sample`` accepts (None: no upper limit). Sizes between them may still be
        invalid (``valid_length``: the arithmetic tasks only have odd lengths)."""
        return 1, None

    def num_tokens(self, size: int) -> int:
        """The length in tokens of a sequence of this size (the size itself unless ``size_name`` says otherwise)."""
        return size

    def valid_length(self, length: int) -> bool:
        """Whether ``sample`` can produce a sequence of exactly this size."""
        if isinstance(length, bool) or not isinstance(length, int):
            return False
        low, high = self.size_range()
        return low <= length and (high is None or length <= high)

    def _check_sample_length(self, length) -> int:
        check_length(length, self.size_name)
        if not self.valid_length(length):
            raise ValueError(f"{self.size_name} {length} is not valid for task {self.name!r}: {self._length_rule()}")
        return length

    def _length_rule(self) -> str:
        return "lengths must be >= 1"

    def sample(self, length: int, rng: random.Random) -> tuple[list[int], list[int]]:
        """Draw one sequence of size ``length``; returns ``(tokens, labels)``."""
        raise NotImplementedError

    def labels(self, tokens: Sequence[int]) -> list[int]:
        """Per-position labels of a token sequence (no padding), -100 where undefined."""
        raise NotImplementedError

    def decode(self, tokens) -> str:
        """Human-readable form of a token sequence (pad tokens are skipped)."""
        out = []
        for t in tokens:
            t = int(t)
            if t == PAD_ID:
                continue
            if not 0 < t < self.vocab_size:
                raise ValueError(f"token id {t} out of range for task {self.name!r} (vocab_size={self.vocab_size})")
            out.append(self.token_names[t])
        return self._separator.join(out)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, vocab_size={self.vocab_size}, num_classes={self.num_classes})"
        )


__all__ = ["IGNORE_INDEX", "PAD_ID", "SCORED_POSITIONS", "Task", "check_length", "checked_index"]
