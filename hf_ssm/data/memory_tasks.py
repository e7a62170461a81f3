"""Memory tasks of the BD-LRU / H-LRU paper's synthetic suite (docs/design.md §8.5): multi-query associative recall,
selective copying and compression.

They follow the state-tracking tasks' conventions (task_base.py, docs/design.md §8.1): token 0 is padding, a
sequence comes with per-position labels, -100 where nothing is asked, and the last position always carries a label.
Unlike the state-tracking tasks only some positions are asked (the queries, the copy positions), so the test scores
every labelled position (``scored_positions = "labelled"``), and training on every label (``supervision="every"``)
supervises exactly those positions. The class of an answer is the index of the answer token among the task's
value / data tokens.

- ``mqar`` (multi-query associative recall, the Zoology format of Arora et al. 2023): ``num_pairs`` key-value pairs
  ``k v k v ...`` (distinct keys, distinct values), then a query region of blanks holding ``num_queries`` of the
  keys (each key at most once); the label at a query is the index of its value. The sequence length is fixed
  (``sequence_length``) and the size the test buckets sweep is the number of pairs. Keys are the first half of the
  non-special tokens, values the second half.
- ``selective_copying`` (the Mamba paper's format, Gu & Dao 2023): ``num_data_tokens`` data tokens at random
  positions of a context of noise tokens, in order, then as many copy markers; the label at the i-th marker is the
  i-th data token. Size = the whole length (context + markers).
- ``compression``: n data tokens, a compress marker, then n recall tokens; the label at the i-th recall token is
  the i-th data token (length 2 n + 1, odd). docs/design.md §8.5 says how this reads the paper's task.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .task_base import IGNORE_INDEX, Task


def _check_int(name: str, value, low: int, high: int | None = None) -> int:
    """`value` as an int in [low, high] (high None: no upper limit); ValueError naming `name` and the range."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        accepted = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"`{name}` must be an int {accepted}, got {value!r}")
    return value


# Two answer classes at least: with vocab_size 4 each task has one value / data token, so every answer is the same
# class and chance is 100 % (no task at all).
MIN_VOCAB_SIZE = 5


def _check_vocab_size(vocab_size, specials: str) -> int:
    """`vocab_size` as an int >= MIN_VOCAB_SIZE, refused naming the smallest and why (`specials`: the task's
    non-answer tokens)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"`vocab_size` must be an int >= {MIN_VOCAB_SIZE}, got {vocab_size!r}: it counts the pad id, {specials} "
            "and the answer tokens, and fewer than 2 answer tokens leave 1 class (chance 100 %)"
        )
    return vocab_size


class _MemoryTask(Task):
    labels_every_prefix = False
    scored_positions = "labelled"


class MultiQueryAssociativeRecallTask(_MemoryTask):
    """Multi-query associative recall (MQAR). Tokens: 0 pad, 1 blank ``_``, keys ``k0 ..`` (ids 2 .. K + 1),
    values ``v0 ..`` (ids K + 2 .. vocab_size - 1), K = (vocab_size - 2) // 2 and V = vocab_size - 2 - K values.

    ``sample(num_pairs, rng)`` returns ``sequence_length`` tokens: the pairs (2 num_pairs tokens), then a query
    region of ``sequence_length - 2 num_pairs`` positions, all blank except ``q`` queries (``q = num_queries``, or
    every pair when None), each a different key of the context; the last position is always a query, the others are
    uniform among the rest of the region. Classes: the value index (V classes; chance 1 / V).
    Accepted numbers of pairs: ``size_range()``; more pairs than distinct keys, distinct values or the sequence
    length allow are refused.

    Differences from Zoology's generator, on purpose: the query region is blank apart from the queries (Zoology
    fills it with random tokens and follows each query with its value, as language-model data), and query
    positions are uniform (Zoology draws gaps from a power law).
    """

    name = "mqar"
    size_name = "num_pairs"
    _separator = " "

    def __init__(self, vocab_size: int = 8192, sequence_length: int = 256, num_queries: int | None = None):
        _check_vocab_size(vocab_size, "the blank and the keys (half the rest)")
        _check_int("sequence_length", sequence_length, 3)
        if num_queries is not None:
            _check_int("num_queries", num_queries, 1)
        self.vocab_size = vocab_size
        self.sequence_length = sequence_length
        self.num_queries = num_queries
        self.num_keys = (vocab_size - 2) // 2
        self.num_values = vocab_size - 2 - self.num_keys
        self.key_offset, self.value_offset = 2, 2 + self.num_keys
        self.num_classes = self.num_values
        self.token_names = (
            ["<pad>", "_"] + [f"k{i}" for i in range(self.num_keys)] + [f"v{i}" for i in range(self.num_values)]
        )
        low, high = self.size_range()
        if high < low:
            raise ValueError(
                f"mqar with vocab_size={vocab_size}, sequence_length={sequence_length}, num_queries={num_queries} "
                f"admits no number of pairs: it needs num_pairs >= {low} but allows at most {high}"
            )

    def size_range(self) -> tuple[int, int]:
        """num_pairs in [q, min(K, V, pairs that leave room for the queries)] (q = num_queries, or 1 when every pair
        is queried)."""
        q = self.num_queries
        room = (self.sequence_length - q) // 2 if q is not None else self.sequence_length // 3
        return (q or 1), min(self.num_keys, self.num_values, room)

    def num_tokens(self, size: int) -> int:
        return self.sequence_length

    def _length_rule(self) -> str:
        low, high = self.size_range()
        return (
            f"num_pairs must lie in [{low}, {high}] (at least num_queries, 1 when every pair is queried; at most the "
            f"{self.num_keys} keys, the {self.num_values} values and what sequence_length={self.sequence_length} "
            "holds with the queries)"
        )

    def sample(self, length: int, rng: random.Random) -> tuple[list[int], list[int]]:
        n = self._check_sample_length(length)
        keys = rng.sample(range(self.num_keys), n)
        values = rng.sample(range(self.num_values), n)
        tokens, labels = [], []
        for k, v in zip(keys, values):
            tokens += [self.key_offset + k, self.value_offset + v]
            labels += [IGNORE_INDEX, IGNORE_INDEX]
        region = self.sequence_length - 2 * n
        q = n if self.num_queries is None else self.num_queries
        asked = rng.sample(range(n), q)  # which pairs are queried, in query order
        positions = sorted(rng.sample(range(region - 1), q - 1)) + [region - 1]
        query_tokens, query_labels = [1] * region, [IGNORE_INDEX] * region
        for pos, pair in zip(positions, asked):
            query_tokens[pos] = self.key_offset + keys[pair]
            query_labels[pos] = values[pair]
        return tokens + query_tokens, labels + query_labels

    def labels(self, tokens: Sequence[int]) -> list[int]:
        """Labels read off the tokens: the context is the leading run of (key, value) pairs; after it every key
        token is a query answered by its value's index."""
        memory, out, i = {}, [], 0
        is_key = lambda t: self.key_offset <= t < self.value_offset  # noqa: E731
        while i + 1 < len(tokens) and is_key(tokens[i]) and tokens[i + 1] >= self.value_offset:
            memory[tokens[i]] = tokens[i + 1] - self.value_offset
            out += [IGNORE_INDEX, IGNORE_INDEX]
            i += 2
        for t in tokens[i:]:
            out.append(memory[t] if is_key(t) else IGNORE_INDEX)
        return out


class SelectiveCopyingTask(_MemoryTask):
    """Selective copying. Tokens: 0 pad, 1 noise ``.``, 2 copy marker ``=``, data ``d0 ..`` (ids 3 ..
    vocab_size - 1, D = vocab_size - 3 of them).

    ``sample(length, rng)``: a context of ``length - num_data_tokens`` positions, noise except ``num_data_tokens``
    data tokens (uniform, with repetition) at uniform distinct positions, then ``num_data_tokens`` markers; the
    label at the i-th marker is the i-th data token's index (D classes; chance 1 / D). Lengths >= 2 num_data_tokens.
    """

    name = "selective_copying"
    _separator = " "

    def __init__(self, vocab_size: int = 19, num_data_tokens: int = 16):
        _check_vocab_size(vocab_size, "the noise token and the copy marker")
        _check_int("num_data_tokens", num_data_tokens, 1)
        self.vocab_size = vocab_size
        self.num_data_tokens = num_data_tokens
        self.num_classes = vocab_size - 3
        self.token_names = ["<pad>", ".", "="] + [f"d{i}" for i in range(self.num_classes)]

    def size_range(self) -> tuple[int, None]:
        return 2 * self.num_data_tokens, None

    def _length_rule(self) -> str:
        return f"lengths must be >= 2 num_data_tokens = {2 * self.num_data_tokens} (a context that holds the data, then the markers)"

    def sample(self, length: int, rng: random.Random) -> tuple[list[int], list[int]]:
        self._check_sample_length(length)
        n = self.num_data_tokens
        context = length - n
        data = [int(rng.random() * self.num_classes) for _ in range(n)]
        tokens = [1] * context
        for pos, d in zip(sorted(rng.sample(range(context), n)), data):
            tokens[pos] = 3 + d
        return tokens + [2] * n, [IGNORE_INDEX] * context + data

    def labels(self, tokens: Sequence[int]) -> list[int]:
        """The i-th marker's label is the i-th data token before the first marker."""
        first = tokens.index(2) if 2 in tokens else len(tokens)
        data = [t - 3 for t in tokens[:first] if t >= 3]
        out, copied = [IGNORE_INDEX] * first, 0
        for t in tokens[first:]:
            out.append(data[copied] if t == 2 else IGNORE_INDEX)
            copied += t == 2
        return out


class CompressionTask(_MemoryTask):
    """Compression. Tokens: 0 pad, 1 compress marker ``|``, 2 recall ``?``, data ``d0 ..`` (ids 3 ..
    vocab_size - 1, D = vocab_size - 3 of them).

    ``sample(length, rng)`` with length = 2 n + 1: n data tokens (uniform, with repetition), the marker, n recall
    tokens; the label at the i-th recall token is the i-th data token's index (D classes; chance 1 / D). Everything
    the answers need has to pass through the state at the marker: the test buckets sweep n, the amount to hold.
    """

    name = "compression"
    _separator = " "

    def __init__(self, vocab_size: int = 19):
        _check_vocab_size(vocab_size, "the compress marker and the recall token")
        self.vocab_size = vocab_size
        self.num_classes = vocab_size - 3
        self.token_names = ["<pad>", "|", "?"] + [f"d{i}" for i in range(self.num_classes)]

    def size_range(self) -> tuple[int, None]:
        return 3, None

    def valid_length(self, length) -> bool:
        return super().valid_length(length) and length % 2 == 1

    def _length_rule(self) -> str:
        return "a sequence is n data tokens, a marker and n recall tokens: lengths must be odd and >= 3"

    def sample(self, length: int, rng: random.Random) -> tuple[list[int], list[int]]:
        self._check_sample_length(length)
        n = length // 2
        data = [int(rng.random() * self.num_classes) for _ in range(n)]
        return [3 + d for d in data] + [1] + [2] * n, [IGNORE_INDEX] * (n + 1) + data

    def labels(self, tokens: Sequence[int]) -> list[int]:
        """The i-th recall token's label is the i-th data token before the marker."""
        first = tokens.index(1) if 1 in tokens else len(tokens)
        data = [t - 3 for t in tokens[:first]]
        out, recalled = [IGNORE_INDEX] * (first + 1 if first < len(tokens) else first), 0
        for t in tokens[first + 1 :]:
            out.append(data[recalled] if t == 2 else IGNORE_INDEX)
            recalled += t == 2
        return out


MEMORY_TASKS = {
    "mqar": (MultiQueryAssociativeRecallTask, ("vocab_size", "sequence_length", "num_queries")),
    "selective_copying": (SelectiveCopyingTask, ("vocab_size", "num_data_tokens")),
    "compression": (CompressionTask, ("vocab_size",)),
}

__all__ = [
    "MEMORY_TASKS",
    "MIN_VOCAB_SIZE",
    "CompressionTask",
    "MultiQueryAssociativeRecallTask",
    "SelectiveCopyingTask",
]
