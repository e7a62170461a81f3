"""Tests for the state-tracking data generators (hf_ssm.data.state_tracking, docs/design.md §8).

Labels are checked against brute-force evaluators written here independently of the package code:
Python ``eval`` for arithmetic, permutation matrices for the group word problems, counting for parity.
"""

import itertools
import random

import numpy as np
import pytest
import torch

from hf_ssm.data import (
    TASK_NAMES,
    StateTrackingDataset,
    collate_state_tracking,
    get_task,
    to_hf_dataset,
)

LENGTHS = [1, 2, 3, 4, 5, 7, 16, 33, 255, 256, 257]


def _lengths_for(task):
    return [n for n in LENGTHS if task.valid_length(n)]


def _symbols(task, tokens):
    return [task.token_names[t] for t in tokens]


# --- independent reference evaluators ----------------------------------------------------------------------


def ref_parity(syms):
    return [syms[: t + 1].count("b") % 2 for t in range(len(syms))]


def ref_even_pairs(syms):
    # number of "ab" / "ba" adjacent pairs even <=> class 0
    out = []
    for t in range(len(syms)):
        pairs = sum(1 for i in range(t) if syms[i] != syms[i + 1])
        out.append(pairs % 2)
    return out


def ref_cycle(syms):
    step = {"stay": 0, "+1": 1, "-1": -1}
    return [sum(step[s] for s in syms[: t + 1]) % 5 for t in range(len(syms))]


def ref_arith_prefixes(syms):
    # value of every prefix ending on a digit, via Python's own parser; -100 elsewhere
    out = []
    for t, s in enumerate(syms):
        out.append(eval("".join(syms[: t + 1])) % 5 if s.isdigit() else -100)
    return out


def ref_arith_final(syms):
    return eval("".join(syms)) % 5


def perm_matrix(p):
    m = np.zeros((5, 5), dtype=np.int64)
    for i, j in enumerate(p):
        m[j, i] = 1  # e_i -> e_{p(i)}
    return m


def matrix_to_perm(m):
    return tuple(int(np.argmax(m[:, i])) for i in range(5))


def is_even(p):
    return np.linalg.det(perm_matrix(p)) > 0


def group_elements(name):
    perms = list(itertools.permutations(range(5)))
    return sorted(p for p in perms if name == "s5" or is_even(p))


def ref_group(task, tokens, elements):
    # state_t = g_t ∘ state_{t-1}: left-multiply matrices, earlier tokens act first.
    mats = {t: perm_matrix(task.generators[t - 1]) for t in set(tokens)}
    state = np.eye(5, dtype=np.int64)
    out = []
    for t in tokens:
        state = mats[t] @ state
        out.append(elements.index(matrix_to_perm(state)))
    return out


# --- label correctness -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["parity", "even_pairs", "cycle_navigation"])
def test_simple_tasks_match_brute_force(name):
    """Protects: every per-prefix label (and the final answer) of parity / even_pairs / cycle_navigation."""
    task = get_task(name)
    ref = {"parity": ref_parity, "even_pairs": ref_even_pairs, "cycle_navigation": ref_cycle}[name]
    rng = random.Random(123)
    assert task.labels_every_prefix
    for n in _lengths_for(task):
        assert n in LENGTHS  # all lengths valid for these tasks
        for _ in range(40 if n <= 5 else 8):
            tokens, labels = task.sample(n, rng)
            assert len(tokens) == len(labels) == n
            assert all(1 <= t < task.vocab_size for t in tokens)
            assert labels == ref(_symbols(task, tokens))
            assert all(0 <= y < task.num_classes for y in labels)


def test_even_pairs_first_equals_last():
    """Protects: even_pairs class 0 means first symbol == last symbol (the documented class meaning)."""
    task = get_task("even_pairs")
    rng = random.Random(5)
    for _ in range(200):
        tokens, labels = task.sample(rng.randint(1, 12), rng)
        assert labels[-1] == int(tokens[0] != tokens[-1])


def test_modular_arithmetic_matches_eval():
    """Protects: per-digit-position prefix values and the final value mod 5, with * binding tighter."""
    task = get_task("modular_arithmetic")
    assert task.token_names[1:] == ["0", "1", "2", "3", "4", "+", "-", "*"]
    rng = random.Random(7)
    for n in _lengths_for(task):
        for _ in range(40 if n <= 7 else 3):
            tokens, labels = task.sample(n, rng)
            syms = _symbols(task, tokens)
            assert len(tokens) == n
            assert all(s.isdigit() for s in syms[0::2]) and all(s in "+-*" for s in syms[1::2])
            assert labels == ref_arith_prefixes(syms)
            assert labels[-1] == ref_arith_final(syms)


def test_modular_arithmetic_precedence_examples():
    """Protects: * before +/-, left-to-right for - (hand-computed examples)."""
    task = get_task("modular_arithmetic")
    ids = {s: i for i, s in enumerate(task.token_names)}
    for expr, value in [("2+3*4", 14 % 5), ("4-3-2", -1 % 5), ("3*4-2*4", 4), ("1-2*3", -5 % 5)]:
        assert task.labels([ids[c] for c in expr])[-1] == value


def test_modular_arithmetic_brackets_matches_eval():
    """Protects: bracketed expressions are well formed, exactly the requested length, labelled only at the end
    with the value Python computes for the same string mod 5."""
    task = get_task("modular_arithmetic_brackets")
    assert not task.labels_every_prefix
    rng = random.Random(11)
    saw_nested = False
    for n in _lengths_for(task):
        for _ in range(60 if n <= 7 else 10):
            tokens, labels = task.sample(n, rng)
            syms = _symbols(task, tokens)
            assert len(tokens) == n
            assert labels[:-1] == [-100] * (n - 1)
            assert labels[-1] == ref_arith_final(syms)
            saw_nested |= "((" in "".join(syms)
    assert saw_nested


@pytest.mark.parametrize("name,order", [("a5", 60), ("s5", 120)])
def test_group_structure(name, order):
    """Protects: |A5| = 60, |S5| = 120, the specified k = 2 generators, that they generate the whole group,
    A5 generators are even, and the class index is the sorted-tuple position."""
    task = get_task(name)
    elements = group_elements(name)
    assert len(elements) == order == task.num_classes
    assert task.vocab_size == 3 and task.token_names[0] == "<pad>"
    expected = [(1, 2, 3, 4, 0), (1, 0, 3, 2, 4) if name == "a5" else (1, 0, 2, 3, 4)]
    assert [tuple(g) for g in task.generators] == expected
    if name == "a5":
        assert all(is_even(g) for g in task.generators)
    # closure: BFS from identity by left-multiplying generator matrices
    seen = {tuple(range(5))}
    frontier = list(seen)
    while frontier:
        nxt = []
        for p in frontier:
            for g in task.generators:
                q = matrix_to_perm(perm_matrix(g) @ perm_matrix(p))
                if q not in seen:
                    seen.add(q)
                    nxt.append(q)
        frontier = nxt
    assert sorted(seen) == elements


@pytest.mark.parametrize("name,k", [("a5", 2), ("s5", 2), ("a5", 3), ("s5", 5), ("a5", 59), ("s5", 119)])
def test_group_labels_match_brute_force(name, k):
    """Protects: running-product labels (state_t = g_t ∘ state_{t-1}) for every prefix, for several k."""
    task = get_task(name, num_generators=k)
    elements = group_elements(name)
    assert task.vocab_size == k + 1 and task.labels_every_prefix
    gens = [tuple(g) for g in task.generators]
    assert len(set(gens)) == k and tuple(range(5)) not in gens and all(g in elements for g in gens)
    assert gens == [tuple(g) for g in get_task(name, num_generators=k).generators]  # deterministic
    rng = random.Random(k)
    for n in _lengths_for(task):
        for _ in range(10 if n <= 5 else 2):
            tokens, labels = task.sample(n, rng)
            assert all(1 <= t <= k for t in tokens)
            assert labels == ref_group(task, tokens, elements)


def test_group_composition_order():
    """Protects: earlier symbols act first (g2 ∘ g1, not g1 ∘ g2) — checked on a pair that does not commute."""
    task = get_task("s5")
    elements = group_elements("s5")
    c, t = task.generators  # c = (0 1 2 3 4), t = (0 1)
    # sequence [c, t]: apply c then t: i -> t(c(i))
    expected = tuple(t[c[i]] for i in range(5))
    assert expected != tuple(c[t[i]] for i in range(5))
    assert task.labels([1, 2])[-1] == elements.index(expected)


# --- datasets ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TASK_NAMES)
def test_dataset_deterministic_and_random_access(name):
    """Protects: same seed -> identical items regardless of access order; different seed -> different data;
    lengths stay inside [min_length, max_length] and valid for the task (for a task whose size is not its length,
    e.g. mqar's number of pairs, the fixed length of that size); label == labels[-1]."""
    task = get_task(name)
    low = max(3, task.size_range()[0])  # selective copying needs >= 2 x its data tokens
    high = low + 37
    a = StateTrackingDataset(task, 50, low, high, seed=1)
    b = StateTrackingDataset(get_task(name), 50, low, high, seed=1)
    c = StateTrackingDataset(task, 50, low, high, seed=2)
    forward = [a[i] for i in range(50)]
    backward = [b[i] for i in reversed(range(50))][::-1]
    for x, y in zip(forward, backward):
        assert torch.equal(x["input_ids"], y["input_ids"]) and torch.equal(x["labels"], y["labels"])
        assert x["label"] == y["label"] == int(x["labels"][-1])
        assert x["length"] == x["input_ids"].shape[0]
        if task.size_name == "length":
            assert low <= x["length"] <= high and task.valid_length(x["length"])
        else:
            assert x["length"] == task.num_tokens(low)
        assert x["input_ids"].dtype == torch.long and x["labels"].dtype == torch.long
    assert any(not torch.equal(x["input_ids"], c[i]["input_ids"]) for i, x in enumerate(forward))
    assert torch.equal(a[-1]["input_ids"], forward[-1]["input_ids"])
    with pytest.raises(IndexError):
        a[50]


def test_dataset_lengths_cover_valid_range():
    """Protects: lengths are drawn from all valid lengths in the range (odd only for arithmetic)."""
    ds = StateTrackingDataset(get_task("modular_arithmetic"), 400, 3, 9, seed=0)
    assert {ds[i]["length"] for i in range(len(ds))} == {3, 5, 7, 9}
    ds = StateTrackingDataset(get_task("parity"), 400, 3, 6, seed=0)
    assert {ds[i]["length"] for i in range(len(ds))} == {3, 4, 5, 6}


def test_collate_mixed_lengths():
    """Protects: right padding with 0, attention mask, -100 labels at pads, label / length vectors."""
    ds = StateTrackingDataset(get_task("cycle_navigation"), 40, 1, 12, seed=3)
    items = [ds[i] for i in range(8)]
    lengths = [it["length"] for it in items]
    assert len(set(lengths)) > 1
    out = collate_state_tracking(items)
    lmax = max(lengths)
    assert out["input_ids"].shape == out["attention_mask"].shape == out["labels"].shape == (8, lmax)
    for k in ("input_ids", "attention_mask", "labels", "label", "length"):
        assert out[k].dtype == torch.long
    assert out["length"].tolist() == lengths
    assert out["label"].tolist() == [it["label"] for it in items]
    for b, it in enumerate(items):
        n = it["length"]
        assert torch.equal(out["input_ids"][b, :n], it["input_ids"])
        assert torch.equal(out["labels"][b, :n], it["labels"])
        assert out["attention_mask"][b, :n].eq(1).all() and out["attention_mask"][b, n:].eq(0).all()
        assert out["input_ids"][b, n:].eq(0).all() and out["labels"][b, n:].eq(-100).all()
        assert out["labels"][b, n - 1] == it["label"]


def test_to_hf_dataset_round_trip():
    """Protects: the datasets.Dataset has the same rows as the torch dataset."""
    ds = StateTrackingDataset(get_task("modular_arithmetic"), 30, 1, 21, seed=9)
    hf = to_hf_dataset(ds)
    assert len(hf) == 30
    assert set(hf.column_names) == {"input_ids", "labels", "label", "length"}
    for i in range(30):
        row, it = hf[i], ds[i]
        assert row["input_ids"] == it["input_ids"].tolist()
        assert row["labels"] == it["labels"].tolist()
        assert row["label"] == it["label"] and row["length"] == it["length"]
    batch = collate_state_tracking(
        [{k: torch.tensor(v) if isinstance(v, list) else v for k, v in hf[i].items()} for i in range(4)]
    )
    assert torch.equal(batch["input_ids"], collate_state_tracking([ds[i] for i in range(4)])["input_ids"])


def test_decode_readable():
    """Protects: decode renders the token names and skips padding."""
    task = get_task("modular_arithmetic")
    ids = {s: i for i, s in enumerate(task.token_names)}
    assert task.decode([ids["2"], ids["+"], ids["3"], 0, 0]) == "2+3"
    assert get_task("parity").decode(torch.tensor([1, 2, 2, 0])) == "abb"


# --- argument validation -----------------------------------------------------------------------------------


def test_bad_arguments_raise():
    """Protects: clear ValueErrors naming the offending field; nothing silently adjusted."""
    with pytest.raises(ValueError, match="parity"):  # lists accepted names
        get_task("parityy")
    for name, bad in [("a5", 1), ("a5", 60), ("s5", 120), ("s5", 0)]:
        with pytest.raises(ValueError, match=r"num_generators.*\[2, " + str(len(group_elements(name)) - 1)):
            get_task(name, num_generators=bad)
    with pytest.raises(ValueError, match="num_generators"):
        get_task("parity", num_generators=3)
    task = get_task("parity")
    with pytest.raises(ValueError, match="min_length"):
        StateTrackingDataset(task, 10, 5, 4, seed=0)
    with pytest.raises(ValueError, match="min_length"):
        StateTrackingDataset(task, 10, 0, 4, seed=0)
    for name in ("modular_arithmetic", "modular_arithmetic_brackets"):
        arith = get_task(name)
        assert not arith.valid_length(4) and arith.valid_length(5)
        with pytest.raises(ValueError, match="length"):
            arith.sample(4, random.Random(0))
        with pytest.raises(ValueError, match="length"):
            StateTrackingDataset(arith, 10, 4, 4, seed=0)
    with pytest.raises(ValueError, match="length"):
        task.sample(0, random.Random(0))
