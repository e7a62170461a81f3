"""Tests for the memory tasks (hf_ssm/data/memory_tasks.py, docs/design.md §8.5) and the S3 / S4 word problems.

Labels are checked against evaluators written here from the readable token names alone (`Task.token_names`),
independently of the package's generators and `labels` methods.
"""

import itertools
import random

import pytest

from hf_ssm.data import StateTrackingDataset, collate_state_tracking, get_task
from hf_ssm.data.automata import minimal_dfa_size

# --- independent reference evaluators (from token names) ---------------------------------------------------


def ref_mqar(names):
    """Context = the leading k/v pairs; every later key name is a query answered by its value's number."""
    memory, out, i = {}, [], 0
    while i + 1 < len(names) and names[i].startswith("k") and names[i + 1].startswith("v"):
        memory[names[i]] = int(names[i + 1][1:])
        out += [-100, -100]
        i += 2
    out += [memory[n] if n.startswith("k") else -100 for n in names[i:]]
    return out


def ref_copy(names, marker):
    """The i-th `marker` after the data asks for the i-th data token (names d<j>) before the first marker."""
    first = names.index(marker)
    data = [int(n[1:]) for n in names[:first] if n.startswith("d")]
    out, k = [-100] * first, 0
    for n in names[first:]:
        out.append(data[k] if n == marker else -100)
        k += n == marker
    return out


def ref_compression(names):
    """Data names before the marker "|", then the i-th "?" asks for the i-th data token."""
    first = names.index("|")
    data = [int(n[1:]) for n in names[:first]]
    rest = [data[i] for i in range(len(names) - first - 1)]
    return [-100] * (first + 1) + rest


def parse_cycles(name, degree):
    """A permutation tuple from the cycle notation the task prints ("(0 1 2)(3 4)", "e")."""
    p = list(range(degree))
    for cycle in name.replace(")", "").split("(")[1:]:
        points = [int(x) for x in cycle.split()]
        for a, b in zip(points, points[1:] + points[:1]):
            p[a] = b
    return tuple(p)


def ref_group(task, tokens, degree):
    """Running product from the generators' printed cycles, earlier tokens acting first, classed by sorted order."""
    elements = sorted(itertools.permutations(range(degree)))
    state, out = tuple(range(degree)), []
    for t in tokens:
        g = parse_cycles(task.token_names[t], degree)
        state = tuple(g[state[i]] for i in range(degree))
        out.append(elements.index(state))
    return out


def _names(task, tokens):
    return [task.token_names[t] for t in tokens]


# --- labels ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_queries", [None, 1, 3])
def test_mqar_labels_match_reference(num_queries):
    """Every query's label is the value its key had in the context; the sequence has exactly sequence_length
    tokens, num_queries (or all) distinct keys are asked, the last position always asks."""
    task = get_task("mqar", vocab_size=40, sequence_length=30, num_queries=num_queries)
    rng = random.Random(1)
    low, high = task.size_range()
    for _ in range(200):
        n = rng.randint(low, high)
        tokens, labels = task.sample(n, rng)
        names = _names(task, tokens)
        assert len(tokens) == 30 and labels == ref_mqar(names) == task.labels(tokens)
        asked = [name for name, label in zip(names, labels) if label != -100]
        assert len(asked) == (n if num_queries is None else num_queries) and len(set(asked)) == len(asked)
        assert labels[-1] != -100 and all(t == 1 for t, lab in zip(tokens[2 * n :], labels[2 * n :]) if lab == -100)
        assert len({n for n in names[: 2 * n : 2]}) == n and len(set(names[1 : 2 * n : 2])) == n  # distinct keys/values


def test_selective_copying_labels_match_reference():
    """The markers ask for the data tokens in order; the length is exact and the data sit in the context."""
    task = get_task("selective_copying", vocab_size=10, num_data_tokens=4)
    rng = random.Random(2)
    for length in [8, 9, 20, 64]:
        for _ in range(50):
            tokens, labels = task.sample(length, rng)
            names = _names(task, tokens)
            assert len(tokens) == length and labels == ref_copy(names, "=") == task.labels(tokens)
            assert names[-4:] == ["="] * 4 and sum(n.startswith("d") for n in names) == 4


def test_compression_labels_match_reference():
    """n data tokens, the marker, n recall tokens: the i-th recall token asks for the i-th data token."""
    task = get_task("compression", vocab_size=12)
    rng = random.Random(3)
    for length in [3, 5, 21, 101]:
        for _ in range(50):
            tokens, labels = task.sample(length, rng)
            names = _names(task, tokens)
            assert len(tokens) == length and labels == ref_compression(names) == task.labels(tokens)
            assert names[length // 2] == "|" and names[length // 2 + 1 :] == ["?"] * (length // 2)


@pytest.mark.parametrize(("name", "degree", "order"), [("s3", 3, 6), ("s4", 4, 24)])
@pytest.mark.parametrize("k", [2, 3])
def test_small_symmetric_groups_match_reference(name, degree, order, k):
    """S3 / S4 word problems: the running product of the printed generators, classes = the sorted permutations;
    the minimal automaton has one state per group element."""
    task = get_task(name, num_generators=k)
    assert task.num_classes == order and task.vocab_size == k + 1 and task.degree == degree
    rng = random.Random(4)
    for length in [1, 7, 40]:
        tokens, labels = task.sample(length, rng)
        assert labels == ref_group(task, tokens, degree)
    assert minimal_dfa_size(task) == order


def test_s3_and_s4_generators_are_the_cycle_and_a_transposition():
    """The two default generators are the n-cycle (0 .. n-1) and (0 1), as for S5."""
    assert get_task("s3").token_names[1:] == ["(0 1 2)", "(0 1)"]
    assert get_task("s4").token_names[1:] == ["(0 1 2 3)", "(0 1)"]


# --- sizes, chance levels, datasets --------------------------------------------------------------------------


def test_sizes_classes_and_chance_levels():
    """vocab_size counts pad and specials; classes are the value / data tokens; chance = 1 / classes."""
    mqar = get_task("mqar", vocab_size=42, sequence_length=64)
    assert (mqar.num_keys, mqar.num_values, mqar.num_classes) == (20, 20, 20)
    assert mqar.chance_accuracy == pytest.approx(1 / 20) and mqar.size_name == "num_pairs"
    assert mqar.size_range() == (1, 20) and mqar.num_tokens(5) == 64
    assert get_task("mqar", vocab_size=8192, sequence_length=64, num_queries=4).size_range() == (4, 30)
    copy = get_task("selective_copying", vocab_size=19, num_data_tokens=16)
    assert copy.num_classes == 16 and copy.chance_accuracy == pytest.approx(1 / 16) and copy.size_range()[0] == 32
    comp = get_task("compression", vocab_size=7)
    assert comp.num_classes == 4 and comp.chance_accuracy == pytest.approx(0.25)
    assert get_task("s4").chance_accuracy == pytest.approx(1 / 24) and get_task("parity").chance_accuracy == 0.5
    for task in (mqar, copy, comp):
        assert task.scored_positions == "labelled" and not task.labels_every_prefix
    assert get_task("parity").scored_positions == "last"


def test_mqar_dataset_buckets_by_number_of_pairs():
    """A dataset of mqar draws the number of pairs in [min_length, max_length] at the fixed sequence length, and
    collates to (B, sequence_length) with a label at every query only."""
    task = get_task("mqar", vocab_size=40, sequence_length=32)
    data = StateTrackingDataset(task, 64, 2, 6, seed=7)
    pairs = set()
    for i in range(len(data)):
        item = data[i]
        assert item["length"] == 32
        asked = int((item["labels"] != -100).sum())
        pairs.add(asked)  # every pair is queried: queries = pairs
    assert pairs == {2, 3, 4, 5, 6}
    batch = collate_state_tracking([data[i] for i in range(4)])
    assert batch["input_ids"].shape == (4, 32) and (batch["label"] == batch["labels"][:, -1]).all()


def test_dataset_is_deterministic_for_memory_tasks():
    """Item i depends on (seed, i) only: the same dataset twice gives the same sequences, another seed others."""
    task = get_task("selective_copying", vocab_size=8, num_data_tokens=3)
    a, b, c = (StateTrackingDataset(task, 8, 6, 30, seed=s) for s in (0, 0, 1))
    assert [a.sample_raw(i) for i in range(8)] == [b.sample_raw(i) for i in range(8)]
    assert [a.sample_raw(i) for i in range(8)] != [c.sample_raw(i) for i in range(8)]


# --- bad arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("mqar", {"vocab_size": 3}, r"`vocab_size` must be an int >= 5, got 3"),
        ("mqar", {"sequence_length": 2}, r"`sequence_length` must be an int >= 3"),
        ("mqar", {"num_queries": 0}, r"`num_queries` must be an int >= 1"),
        ("mqar", {"vocab_size": 6, "sequence_length": 9, "num_queries": 4}, r"admits no number of pairs"),
        ("selective_copying", {"num_data_tokens": 0}, r"`num_data_tokens` must be an int >= 1"),
        ("compression", {"vocab_size": 2.5}, r"`vocab_size` must be an int >= 5"),
        ("compression", {"num_data_tokens": 4}, r"`num_data_tokens` applies to the tasks selective_copying only"),
        ("parity", {"sequence_length": 10}, r"`sequence_length` applies to the tasks mqar only, not 'parity'"),
        ("mqar", {"num_generators": 3}, r"num_generators only applies to the group tasks"),
        ("s3", {"num_generators": 6}, r"num_generators for 's3' must be an int in \[2, 5\]"),
    ],
)
def test_bad_task_arguments_are_refused(name, kwargs, message):
    """A bad value, or an argument the task does not take, is a ValueError naming it (and the accepted range)."""
    with pytest.raises(ValueError, match=message):
        get_task(name, **kwargs)


@pytest.mark.parametrize("name", ["mqar", "selective_copying", "compression"])
def test_a_vocabulary_with_one_answer_class_is_refused(name):
    """vocab_size 4 left each memory task one value / data token: a 1-class task whose chance level is 100 %. It is
    refused naming the smallest vocabulary, 5, which gives 2 classes (chance 50 %)."""
    with pytest.raises(ValueError, match=r"`vocab_size` must be an int >= 5, got 4: .*leave 1 class \(chance 100 %\)"):
        get_task(name, vocab_size=4)
    smallest = get_task(name, vocab_size=5)
    assert smallest.num_classes == 2 and smallest.chance_accuracy == 0.5


def test_sizes_outside_the_task_range_are_refused():
    """More pairs than the keys / values / sequence length allow, a length the task cannot make, or a dataset
    range outside the task's: ValueError naming the size and the accepted range."""
    mqar = get_task("mqar", vocab_size=12, sequence_length=40)  # 5 keys, 5 values
    with pytest.raises(ValueError, match=r"num_pairs 6 is not valid .*\[1, 5\]"):
        mqar.sample(6, random.Random(0))
    with pytest.raises(ValueError, match=r"max_length=9.*\[1, 5\]"):
        StateTrackingDataset(mqar, 4, 2, 9, seed=0)
    short = get_task("mqar", vocab_size=100, sequence_length=12)
    with pytest.raises(ValueError, match=r"num_pairs must lie in \[1, 4\]"):
        short.sample(5, random.Random(0))
    with pytest.raises(ValueError, match=r"lengths must be >= 2 num_data_tokens = 8"):
        get_task("selective_copying", num_data_tokens=4).sample(7, random.Random(0))
    with pytest.raises(ValueError, match=r"min_length=3.*\[8, no limit\]"):
        StateTrackingDataset(get_task("selective_copying", num_data_tokens=4), 4, 3, 20, seed=0)
    with pytest.raises(ValueError, match=r"odd and >= 3"):
        get_task("compression").sample(6, random.Random(0))
