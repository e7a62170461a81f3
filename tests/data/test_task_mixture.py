"""Task mixtures (hf_ssm/data/task_mixture.py): the components share one vocabulary and label space without
overlapping, each component's sequences and labels are its task's, and the mixture dataset interleaves them."""

from __future__ import annotations

import random

import pytest

from hf_ssm.data import StateTrackingDataset, get_task
from hf_ssm.data.task_base import IGNORE_INDEX, PAD_ID
from hf_ssm.data.task_mixture import MixtureDataset, TaskMixture


def _mixture() -> TaskMixture:
    return get_task("mqar+a5", vocab_size=16, sequence_length=24)


def test_components_take_disjoint_ids_and_classes():
    """Each component's real tokens and classes occupy their own range: a token or answer of one task is never
    another's, and the mixture's sizes are the sums (the pad id shared)."""
    mixture = _mixture()
    mqar, a5 = mixture.components
    assert (mixture.vocab_size, mixture.num_classes) == (1 + 15 + 2, 7 + 60)
    assert len(mixture.token_names) == mixture.vocab_size and mixture.token_names[0] == "<pad>"
    rng = random.Random(0)
    seen = {}
    for component, size in ((mqar, 5), (a5, 30)):
        tokens, labels = [], []
        for _ in range(50):
            t, y = component.sample(size, rng)
            tokens += t
            labels += [v for v in y if v != IGNORE_INDEX]
        seen[component.name] = (set(tokens) - {PAD_ID}, set(labels))
    assert seen["mqar"][0] <= set(range(1, 16)) and seen["a5"][0] <= {16, 17}
    assert seen["mqar"][1] <= set(range(7)) and seen["a5"][1] <= set(range(7, 67))
    assert mixture.token_names[16] == "a5:" + get_task("a5").token_names[1]


@pytest.mark.parametrize("name,size", [("mqar", 6), ("a5", 25)])
def test_a_component_is_its_task_shifted(name, size):
    """A component's sequence is its task's sequence from the same random draw, tokens and classes shifted by its
    offsets; its labels read back from the shifted tokens; its sizes and chance are the task's own."""
    mixture = _mixture()
    component = mixture.component(name)
    task = component.task
    tokens, labels = component.sample(size, random.Random(3))
    own_tokens, own_labels = task.sample(size, random.Random(3))
    assert tokens == [t + component.token_offset for t in own_tokens]
    assert labels == [y + component.class_offset if y != IGNORE_INDEX else y for y in own_labels]
    assert component.labels(tokens) == labels
    assert (component.size_range(), component.chance_accuracy) == (task.size_range(), task.chance_accuracy)
    assert (component.vocab_size, component.num_classes) == (mixture.vocab_size, mixture.num_classes)


def test_a_token_of_another_component_is_refused():
    mqar, a5 = _mixture().components
    with pytest.raises(ValueError, match="not a token of component 'a5'"):
        a5.labels([16, 3])


def test_task_arguments_go_to_the_components_that_take_them():
    """--task_vocab_size / --sequence_length reach mqar and not a5; an argument none of the components takes, an
    unknown name, a repeated task or a mixture of one are refused by name."""
    mixture = get_task("a5+mqar", vocab_size=16, sequence_length=24, num_generators=3)
    a5, mqar = mixture.components
    assert (mqar.task.vocab_size, mqar.task.sequence_length, a5.task.vocab_size) == (16, 24, 4)
    with pytest.raises(ValueError, match="`num_data_tokens` applies to the tasks selective_copying, none of them"):
        get_task("mqar+a5", num_data_tokens=4)
    with pytest.raises(ValueError, match="unknown task name 'a6' in the mixture 'mqar\\+a6'"):
        get_task("mqar+a6")
    with pytest.raises(ValueError, match="must differ"):
        get_task("a5+a5")
    with pytest.raises(ValueError, match="at least 2 tasks"):
        TaskMixture([get_task("a5")])
    with pytest.raises(ValueError, match="'s5' is not a component of 'mqar\\+a5'"):
        _mixture().component("s5")


def test_mixture_dataset_interleaves_the_components_in_equal_shares():
    """Item 2 j is item j of the first component's dataset and item 2 j + 1 item j of the second's, so every batch
    holds both tasks equally; its length is 2 x the shorter dataset's."""
    mqar, a5 = _mixture().components
    first, second = StateTrackingDataset(mqar, 5, 2, 6, seed=1), StateTrackingDataset(a5, 7, 3, 20, seed=1)
    mixed = MixtureDataset([first, second])
    assert len(mixed) == 10
    for j in range(5):
        assert mixed[2 * j]["input_ids"].tolist() == first[j]["input_ids"].tolist()
        assert mixed[2 * j + 1]["input_ids"].tolist() == second[j]["input_ids"].tolist()
    assert mixed[-1]["input_ids"].tolist() == second[4]["input_ids"].tolist()
    with pytest.raises(IndexError):
        mixed[10]
    with pytest.raises(ValueError, match="at least 2 datasets"):
        MixtureDataset([first])
