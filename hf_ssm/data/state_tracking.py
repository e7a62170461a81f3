"""Synthetic state-tracking tasks (docs/design.md §8).

Every task turns a random sequence of input symbols into token ids (``1 .. vocab_size - 1``; id 0 is
padding everywhere) plus per-position labels: ``labels[t]`` is the answer for the prefix ``tokens[: t + 1]``
where that prefix has a defined answer and ``-100`` otherwise. ``labels[-1]`` is always defined: it is the
answer for the whole sequence.

Tasks (``TASK_NAMES``):

- ``parity``: symbols {a, b}; class 0 = the count of b is even, 1 = odd. Every prefix labelled.
- ``even_pairs``: symbols {a, b}; class 0 = first symbol equals last symbol (i.e. an even number of ab / ba
  pairs), 1 = they differ. Every prefix labelled.
- ``cycle_navigation``: {stay, +1, -1} on a 5-cycle starting at 0; class = position. Every prefix labelled.
- ``modular_arithmetic``: digits 0-4 and + - *, alternating digit / operator (so lengths are odd); ``*``
  binds tighter than + and -, otherwise left to right; class = value mod 5. Labelled at every digit
  position (the value of the prefix expression ending there), -100 at operator positions.
- ``modular_arithmetic_brackets``: the same with randomly nested brackets ( ), exactly the requested (odd)
  length; only the final position is labelled.
- ``a5`` / ``s5``: group word problems with ``num_generators`` = k generators (default 2). Tokens 1..k are
  the generators; the class is the index of the running product in the sorted list of the group's
  permutation tuples. ``state_t = g_t ∘ state_{t-1}`` (earlier symbols act first), ``state_0`` = identity.

Lengths: the arithmetic tasks only have odd lengths (every valid expression over this grammar has odd
length). ``Task.sample`` raises ``ValueError`` for a length the task cannot produce, and
``StateTrackingDataset`` draws lengths uniformly from the *valid* lengths in ``[min_length, max_length]``
(it raises if there are none); no requested length is ever silently changed.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import torch

__all__ = [
    "TASK_NAMES",
    "CycleNavigationTask",
    "EvenPairsTask",
    "ModularArithmeticBracketsTask",
    "ModularArithmeticTask",
    "ParityTask",
    "PermutationGroupTask",
    "SUPERVISIONS",
    "StateTrackingDataset",
    "Task",
    "collate_state_tracking",
    "get_task",
    "last_token_correct",
    "supervised_labels",
    "to_hf_dataset",
]

IGNORE_INDEX = -100
PAD_ID = 0

TASK_NAMES: tuple[str, ...] = (
    "parity",
    "even_pairs",
    "cycle_navigation",
    "modular_arithmetic",
    "modular_arithmetic_brackets",
    "a5",
    "s5",
)


def _check_length(length, name: str = "length") -> int:
    if isinstance(length, bool) or not isinstance(length, int):
        raise ValueError(f"{name} must be an int, got {length!r}")
    if length < 1:
        raise ValueError(f"{name} must be >= 1, got {length}")
    return length


class Task:
    """Common interface of all state-tracking tasks.

    Attributes:
        name: the task name (one of ``TASK_NAMES``).
        vocab_size: number of token ids including the pad id 0; real tokens are ``1 .. vocab_size - 1``.
        num_classes: number of answer classes.
        token_names: ``token_names[id]`` is a readable name; ``token_names[0] == "<pad>"``.
        labels_every_prefix: True when every prefix that is itself a valid input gets a label
            (for ``modular_arithmetic`` these are the digit positions; operator positions are -100).
    """

    name: str = ""
    vocab_size: int = 0
    num_classes: int = 0
    token_names: list[str] = []
    labels_every_prefix: bool = True
    _separator: str = " "

    def valid_length(self, length: int) -> bool:
        """Whether ``sample`` can produce a sequence of exactly this length."""
        return isinstance(length, int) and not isinstance(length, bool) and length >= 1

    def _check_sample_length(self, length) -> int:
        _check_length(length)
        if not self.valid_length(length):
            raise ValueError(f"length {length} is not valid for task {self.name!r}: {self._length_rule()}")
        return length

    def _length_rule(self) -> str:
        return "lengths must be >= 1"

    def sample(self, length: int, rng: random.Random) -> tuple[list[int], list[int]]:
        """Draw one sequence of exactly ``length`` tokens; returns ``(tokens, labels)``."""
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


class _FreeStringTask(Task):
    """A task whose inputs are all strings over its symbols (ids 1 .. vocab_size - 1), each symbol drawn
    uniformly and independently; every prefix is labelled."""

    labels_every_prefix = True

    def sample(self, length, rng):
        self._check_sample_length(length)
        tokens = rng.choices(range(1, self.vocab_size), k=length)
        return tokens, self.labels(tokens)


class _BinaryStringTask(_FreeStringTask):
    """Strings over a (id 1) and b (id 2), shown without separators, with two classes."""

    vocab_size = 3
    num_classes = 2
    token_names = ["<pad>", "a", "b"]
    _separator = ""


class ParityTask(_BinaryStringTask):
    """Symbols a (id 1), b (id 2); class = count of b mod 2 (0 = even)."""

    name = "parity"

    def labels(self, tokens):
        out, p = [], 0
        for t in tokens:
            p ^= t == 2
            out.append(int(p))
        return out


class EvenPairsTask(_BinaryStringTask):
    """Symbols a (id 1), b (id 2); class 0 = first symbol equals last symbol, 1 = they differ."""

    name = "even_pairs"

    def labels(self, tokens):
        if not tokens:
            return []
        first = tokens[0]
        return [int(t != first) for t in tokens]


class CycleNavigationTask(_FreeStringTask):
    """Moves stay (id 1), +1 (id 2), -1 (id 3) on a 5-cycle from position 0; class = position."""

    name = "cycle_navigation"
    vocab_size = 4
    num_classes = 5
    token_names = ["<pad>", "stay", "+1", "-1"]
    _STEP = (0, 0, 1, 4)  # indexed by token id; -1 == +4 (mod 5)

    def labels(self, tokens):
        out, pos, step = [], 0, self._STEP
        for t in tokens:
            pos = (pos + step[t]) % 5
            out.append(pos)
        return out


# --- modular arithmetic ------------------------------------------------------------------------------------

_MOD = 5
_DIGIT_IDS = (1, 2, 3, 4, 5)  # token id d + 1 is digit d
_PLUS, _MINUS, _TIMES, _LPAR, _RPAR = 6, 7, 8, 9, 10
_OP_IDS = (_PLUS, _MINUS, _TIMES)
_ARITH_NAMES = ["<pad>", "0", "1", "2", "3", "4", "+", "-", "*", "(", ")"]


def _eval_arith(tokens: Sequence[int]) -> list[int]:
    """Evaluate a (possibly bracketed) expression mod 5 with a single left-to-right pass.

    Returns per-position values: at each position where the prefix is a complete expression at bracket
    depth 0 (a digit or a closing bracket), its value mod 5; -100 elsewhere. ``*`` binds tighter than
    ``+``/``-``; equal precedence associates left to right. Raises ValueError on a malformed expression.
    """
    # One frame per open bracket: [sum of finished terms, sign of current term, current term, pending '*'].
    frames = [[0, 1, None, False]]
    expect_operand = True
    out = []
    for t in tokens:
        value = None
        if 1 <= t <= 5:
            if not expect_operand:
                raise ValueError("malformed expression: two operands in a row")
            value = t - 1
        elif t == _LPAR:
            if not expect_operand:
                raise ValueError("malformed expression: '(' after an operand")
            frames.append([0, 1, None, False])
        elif t == _RPAR:
            if expect_operand or len(frames) == 1:
                raise ValueError("malformed expression: unexpected ')'")
            total, sign, term, _ = frames.pop()
            value = (total + sign * term) % _MOD
        elif t in _OP_IDS:
            if expect_operand:
                raise ValueError("malformed expression: operator without a left operand")
            f = frames[-1]
            if t == _TIMES:
                f[3] = True
            else:
                f[0] = (f[0] + f[1] * f[2]) % _MOD
                f[1] = 1 if t == _PLUS else -1
                f[2] = None
            expect_operand = True
        else:
            raise ValueError(f"token id {t} is not an arithmetic token")
        if value is not None:
            f = frames[-1]
            f[2] = f[2] * value % _MOD if f[3] else value
            f[3] = False
            expect_operand = False
        if value is not None and len(frames) == 1:
            f = frames[0]
            out.append((f[0] + f[1] * f[2]) % _MOD)
        else:
            out.append(IGNORE_INDEX)
    if expect_operand or len(frames) != 1:
        raise ValueError("malformed expression: incomplete")
    return out


class ModularArithmeticTask(Task):
    """Digits 0-4 (ids 1-5) and + - * (ids 6-8) alternating; class = value mod 5.

    Lengths must be odd. Labels at every digit position (value of the prefix expression), -100 at operators.
    """

    name = "modular_arithmetic"
    vocab_size = 9
    num_classes = 5
    token_names = _ARITH_NAMES[:9]
    labels_every_prefix = True
    _separator = ""

    def valid_length(self, length):
        return super().valid_length(length) and length % 2 == 1

    def _length_rule(self):
        return "expressions alternate digit / operator, so lengths must be odd and >= 1"

    def labels(self, tokens):
        return _eval_arith(tokens)

    def sample(self, length, rng):
        self._check_sample_length(length)
        n_ops = length // 2
        digits = rng.choices(_DIGIT_IDS, k=n_ops + 1)
        ops = rng.choices(_OP_IDS, k=n_ops)
        tokens = [0] * length
        tokens[0::2] = digits
        tokens[1::2] = ops
        return tokens, _eval_arith(tokens)


class ModularArithmeticBracketsTask(Task):
    """Like ``modular_arithmetic`` plus brackets ( ) (ids 9, 10), randomly nested; only the final position
    is labelled. Lengths must be odd (every expression of this grammar has odd length).

    Generation of an expression of length n: n == 1 → a digit; otherwise with probability ``bracket_prob``
    ``( E )`` with |E| = n - 2, else ``E op E`` with the left length drawn uniformly from the odd lengths
    1 .. n - 2. The answer is the value under the usual precedence (``*`` first, then left to right),
    computed by parsing the emitted tokens, not from the generation tree.
    """

    name = "modular_arithmetic_brackets"
    vocab_size = 11
    num_classes = 5
    token_names = list(_ARITH_NAMES)
    labels_every_prefix = False
    _separator = ""
    bracket_prob = 0.3

    def valid_length(self, length):
        return super().valid_length(length) and length % 2 == 1

    def _length_rule(self):
        return "every expression of digits, binary operators and bracket pairs has odd length, so lengths must be odd and >= 1"

    def labels(self, tokens):
        per_pos = _eval_arith(tokens)
        return [IGNORE_INDEX] * (len(tokens) - 1) + [per_pos[-1]]

    def _generate(self, length: int, rng: random.Random) -> list[int]:
        # Iterative (explicit stack) so very long / deep expressions cannot hit the recursion limit.
        # Stack entries: ("e", n) = an expression of length n still to generate, ("t", id) = a literal token.
        tokens: list[int] = []
        stack = [("e", length)]
        while stack:
            kind, v = stack.pop()
            if kind == "t":
                tokens.append(v)
            elif v == 1:
                tokens.append(_DIGIT_IDS[int(rng.random() * 5)])
            elif rng.random() < self.bracket_prob:
                stack.extend((("t", _RPAR), ("e", v - 2), ("t", _LPAR)))
            else:
                left = 2 * int(rng.random() * ((v - 1) // 2)) + 1  # odd, 1 .. v - 2
                op = _OP_IDS[int(rng.random() * 3)]
                stack.extend((("e", v - 1 - left), ("t", op), ("e", left)))
        return tokens

    def sample(self, length, rng):
        self._check_sample_length(length)
        tokens = self._generate(length, rng)
        return tokens, self.labels(tokens)


# --- permutation groups ------------------------------------------------------------------------------------


def _perm_sign_even(p: tuple[int, ...]) -> bool:
    inversions = sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j])
    return inversions % 2 == 0


def permutation_cycles(p: tuple[int, ...]) -> list[list[int]]:
    """The non-trivial cycles of a permutation, each starting at its smallest point: (1, 2, 0) -> [[0, 1, 2]]."""
    seen, cycles = set(), []
    for start in range(len(p)):
        if start in seen or p[start] == start:
            continue
        cyc, i = [], start
        while i not in seen:
            seen.add(i)
            cyc.append(i)
            i = p[i]
        cycles.append(cyc)
    return cycles


def _cycle_notation(p: tuple[int, ...]) -> str:
    cycles = ["(" + " ".join(map(str, cyc)) + ")" for cyc in permutation_cycles(p)]
    return "".join(cycles) if cycles else "e"


_GROUP_SPECS = {
    # name: (elements filter, the two default generators); permutations as tuples, p[i] = image of i.
    "a5": (True, [(1, 2, 3, 4, 0), (1, 0, 3, 2, 4)]),  # (0 1 2 3 4), (0 1)(2 3)
    "s5": (False, [(1, 2, 3, 4, 0), (1, 0, 2, 3, 4)]),  # (0 1 2 3 4), (0 1)
}


class PermutationGroupTask(_FreeStringTask):
    """Word problem in A5 or S5 with ``num_generators`` generators.

    ``elements`` is the sorted list of permutation tuples (``p[i]`` = image of ``i``); the class of a
    permutation is its index in ``elements``. ``generators[j]`` is token ``j + 1``: the first two are fixed
    (A5: (0 1 2 3 4) and (0 1)(2 3); S5: (0 1 2 3 4) and (0 1)), further ones are the non-identity elements
    not yet used, in sorted order. ``mult[g][s]`` is the class of ``g ∘ s`` (``(g ∘ s)(i) = g(s(i))``).
    The state after a prefix is ``g_t ∘ ... ∘ g_1`` (earlier tokens act first).
    """

    _separator = ", "

    def __init__(self, name: str, num_generators: int = 2):
        if name not in _GROUP_SPECS:
            raise ValueError(f"unknown group task {name!r}; accepted: {sorted(_GROUP_SPECS)}")
        even_only, base = _GROUP_SPECS[name]
        elements = sorted(p for p in itertools.permutations(range(5)) if not even_only or _perm_sign_even(p))
        order = len(elements)
        if (
            isinstance(num_generators, bool)
            or not isinstance(num_generators, int)
            or not 2 <= num_generators <= order - 1
        ):
            raise ValueError(f"num_generators for {name!r} must be an int in [2, {order - 1}], got {num_generators!r}")
        identity = tuple(range(5))
        gens = list(base)
        for p in elements:
            if len(gens) >= num_generators:
                break
            if p != identity and p not in gens:
                gens.append(p)
        self.name = name
        self.num_generators = num_generators
        self.elements: list[tuple[int, ...]] = elements
        self.generators: list[tuple[int, ...]] = gens
        self.identity_class = elements.index(identity)
        index = {p: i for i, p in enumerate(elements)}
        self.mult: list[list[int]] = [[index[tuple(g[s[i]] for i in range(5))] for s in elements] for g in elements]
        # Per token id: a row of the table mapping the current state class to the next one.
        self._token_rows: list[list[int] | None] = [None] + [self.mult[index[g]] for g in gens]
        self.vocab_size = num_generators + 1
        self.num_classes = order
        self.token_names = ["<pad>"] + [_cycle_notation(g) for g in gens]

    def labels(self, tokens):
        rows, state, out = self._token_rows, self.identity_class, []
        for t in tokens:
            state = rows[t][state]
            out.append(state)
        return out


_SIMPLE_TASKS = {
    "parity": ParityTask,
    "even_pairs": EvenPairsTask,
    "cycle_navigation": CycleNavigationTask,
    "modular_arithmetic": ModularArithmeticTask,
    "modular_arithmetic_brackets": ModularArithmeticBracketsTask,
}


def get_task(name: str, **kwargs) -> Task:
    """Build a task by name. ``num_generators`` (default 2) is accepted for ``a5`` / ``s5`` only; passing it
    (other than ``None``) to another task raises ValueError rather than being ignored."""
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task name {name!r}; accepted task names: {', '.join(TASK_NAMES)}")
    num_generators = kwargs.pop("num_generators", None)
    if kwargs:
        raise ValueError(f"unexpected arguments for task {name!r}: {sorted(kwargs)}")
    if name in _GROUP_SPECS:
        return PermutationGroupTask(name, 2 if num_generators is None else num_generators)
    if num_generators is not None:
        raise ValueError(f"num_generators only applies to the group tasks a5 / s5, not {name!r}")
    return _SIMPLE_TASKS[name]()


# --- datasets ----------------------------------------------------------------------------------------------


def checked_index(i: int, size: int) -> int:
    """Item index `i` of a dataset of `size` items, negative counting from the end; clear errors otherwise."""
    if isinstance(i, bool) or not isinstance(i, int):
        raise TypeError(f"index must be an int, got {type(i).__name__}")
    if i < 0:
        i += size
    if not 0 <= i < size:
        raise IndexError(f"index out of range for a dataset of {size} items")
    return i


class StateTrackingDataset(torch.utils.data.Dataset):
    """``num_samples`` sequences with lengths uniform over the task's valid lengths in
    ``[min_length, max_length]`` (for the arithmetic tasks: the odd ones).

    Item ``i`` is generated from ``random.Random`` seeded with a string derived from ``(seed, i)``
    (SHA-512-based, independent of PYTHONHASHSEED), so items are deterministic and random-access.
    """

    def __init__(self, task: Task, num_samples: int, min_length: int, max_length: int, seed: int):
        if not isinstance(task, Task):
            raise ValueError(f"task must be a Task (see get_task), got {type(task).__name__}")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 0:
            raise ValueError(f"num_samples must be an int >= 0, got {num_samples!r}")
        _check_length(min_length, "min_length")
        if isinstance(max_length, bool) or not isinstance(max_length, int):
            raise ValueError(f"max_length must be an int, got {max_length!r}")
        if min_length > max_length:
            raise ValueError(f"min_length ({min_length}) must be <= max_length ({max_length})")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        lengths = [n for n in range(min_length, max_length + 1) if task.valid_length(n)]
        if not lengths:
            raise ValueError(
                f"no valid length for task {task.name!r} in [min_length={min_length}, max_length={max_length}]: "
                f"{task._length_rule()}"
            )
        self.task = task
        self.num_samples = num_samples
        self.min_length = min_length
        self.max_length = max_length
        self.seed = seed
        self.lengths = lengths

    def __len__(self) -> int:
        return self.num_samples

    def sample_raw(self, i: int) -> tuple[list[int], list[int]]:
        """``(tokens, labels)`` of item ``i`` as Python lists."""
        i = checked_index(i, self.num_samples)
        rng = random.Random(f"hf_ssm.state_tracking:{self.seed}:{i}")
        length = self.lengths[int(rng.random() * len(self.lengths))]
        return self.task.sample(length, rng)

    def __getitem__(self, i) -> dict:
        tokens, labels = self.sample_raw(i)
        return {
            "input_ids": torch.tensor(tokens, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
            "label": labels[-1],
            "length": len(tokens),
        }


def collate_state_tracking(batch: list[dict], pad_id: int = PAD_ID) -> dict:
    """Right-pad a list of ``StateTrackingDataset`` items.

    Returns ``input_ids`` (B, Lmax) long padded with ``pad_id``, ``attention_mask`` (B, Lmax) long (1 real,
    0 pad), ``labels`` (B, Lmax) long with -100 at padding, ``label`` (B,) long, ``length`` (B,) long.
    """
    if len(batch) == 0:
        raise ValueError("batch must contain at least one item")
    lengths = [int(item["input_ids"].shape[0]) for item in batch]
    bsz, lmax = len(batch), max(lengths)
    input_ids = torch.full((bsz, lmax), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((bsz, lmax), dtype=torch.long)
    labels = torch.full((bsz, lmax), IGNORE_INDEX, dtype=torch.long)
    for b, (item, n) in enumerate(zip(batch, lengths)):
        if int(item["labels"].shape[0]) != n:
            raise ValueError(f"labels length {int(item['labels'].shape[0])} != input_ids length {n} in item {b}")
        input_ids[b, :n] = item["input_ids"]
        attention_mask[b, :n] = 1
        labels[b, :n] = item["labels"]
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "label": torch.tensor([int(item["label"]) for item in batch], dtype=torch.long),
        "length": torch.tensor(lengths, dtype=torch.long),
    }


def to_hf_dataset(dataset: StateTrackingDataset):
    """Materialise a ``StateTrackingDataset`` as an in-memory ``datasets.Dataset`` with columns
    ``input_ids`` (list of int64), ``labels`` (list of int64), ``label`` (int64), ``length`` (int64)."""
    import datasets

    list_feature = getattr(datasets, "List", datasets.Sequence)
    cols = {"input_ids": [], "labels": [], "label": [], "length": []}
    for i in range(len(dataset)):
        tokens, labels = dataset.sample_raw(i)
        cols["input_ids"].append(tokens)
        cols["labels"].append(labels)
        cols["label"].append(labels[-1])
        cols["length"].append(len(tokens))
    features = datasets.Features(
        {
            "input_ids": list_feature(datasets.Value("int64")),
            "labels": list_feature(datasets.Value("int64")),
            "label": datasets.Value("int64"),
            "length": datasets.Value("int64"),
        }
    )
    return datasets.Dataset.from_dict(cols, features=features)


# Which positions a training batch supervises: every labelled prefix (the package's dense signal), or only the
# last real token of each sequence (the PD-SSM authors' protocol, docs/design.md §8.3).
SUPERVISIONS = ("every", "last")


def supervised_labels(batch: dict, supervision: str) -> torch.Tensor:
    """The (B, T) training labels of a collated batch: ``batch["labels"]`` for ``"every"``; for ``"last"``,
    IGNORE_INDEX everywhere except the last real token of each row, which holds the sequence's answer."""
    if supervision not in SUPERVISIONS:
        raise ValueError(f"`supervision` must be one of {list(SUPERVISIONS)}, got {supervision!r}")
    if supervision == "every":
        return batch["labels"]
    labels = torch.full_like(batch["labels"], IGNORE_INDEX)
    rows = torch.arange(labels.shape[0])
    labels[rows, batch["length"] - 1] = batch["label"]
    return labels


def last_token_correct(predictions: torch.Tensor, batch: dict) -> int:
    """How many rows of (B, T) predictions are right at their last real token (the rest is never read)."""
    rows = torch.arange(predictions.shape[0])
    return int((predictions[rows, batch["length"] - 1] == batch["label"]).sum())
