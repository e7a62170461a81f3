"""Several synthetic tasks in one vocabulary and one label space (docs/design.md §8.1): a model trained on a
mixture sees sequences of every component task, each sequence one task, and is tested on each task on its own.

`TaskMixture(tasks)` lays the components side by side: the pad id 0 is shared; component c's real tokens
``1 .. V_c - 1`` become ``token_offset_c + 1 .. token_offset_c + V_c - 1`` and its classes ``0 .. K_c - 1`` become
``class_offset_c + 0 .. class_offset_c + K_c - 1``, in the order the tasks are given. So the model's vocabulary is
``1 + sum(V_c - 1)`` and its classifier has ``sum(K_c)`` outputs; a component's answer is never another's class.

`MixtureTask` is one component seen through the mixture's ids: a `Task` like any other (its sizes, lengths,
scored positions and chance level are the component's own), so the driver's datasets and tests take it unchanged.
`MixtureDataset` interleaves one dataset per component: item i is item i // k of component i % k (k components),
so every batch holds the tasks in equal shares and item i is the same sequence at every step.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from .task_base import IGNORE_INDEX, PAD_ID, Task, checked_index

MIXTURE_SEPARATOR = "+"  # "mqar+a5": the components of a mixture's name, in id order


class MixtureTask(Task):
    """Component `task` of a mixture, in the mixture's token ids and classes (`TaskMixture` builds them).

    Everything about sizes is the component's (`size_range`, `valid_length`, `num_tokens`, `size_name`,
    `scored_positions`, `labels_every_prefix`); `vocab_size` and `num_classes` are the mixture's, so a model of the
    mixture reads every component's sequences. `chance_accuracy` is the component's (a guess among its own
    classes), which is what a model that has learnt which task it reads is compared with."""

    def __init__(self, task: Task, token_offset: int, class_offset: int, mixture: TaskMixture):
        self.task = task
        self.name = task.name
        self.token_offset, self.class_offset = token_offset, class_offset
        self.vocab_size, self.num_classes = mixture.vocab_size, mixture.num_classes
        self.token_names = mixture.token_names
        self.labels_every_prefix = task.labels_every_prefix
        self.size_name = task.size_name
        self.scored_positions = task.scored_positions

    @property
    def chance_accuracy(self) -> float:
        return self.task.chance_accuracy

    def size_range(self):
        return self.task.size_range()

    def num_tokens(self, size: int) -> int:
        return self.task.num_tokens(size)

    def valid_length(self, length: int) -> bool:
        return self.task.valid_length(length)

    def _length_rule(self) -> str:
        return self.task._length_rule()

    def sample(self, length: int, rng: random.Random) -> tuple[list[int], list[int]]:
        tokens, labels = self.task.sample(length, rng)
        return self._to_mixture(tokens), self._labels_to_mixture(labels)

    def labels(self, tokens: Sequence[int]) -> list[int]:
        """The component's labels of a sequence in the mixture's ids (a token of another component: ValueError)."""
        own = []
        for t in tokens:
            t = int(t)
            if t != PAD_ID and not self.token_offset < t < self.token_offset + self.task.vocab_size:
                raise ValueError(f"token id {t} is not a token of component {self.name!r} of this mixture")
            own.append(t - self.token_offset if t != PAD_ID else PAD_ID)
        return self._labels_to_mixture(self.task.labels(own))

    def _to_mixture(self, tokens: list[int]) -> list[int]:
        return [t + self.token_offset if t != PAD_ID else PAD_ID for t in tokens]

    def _labels_to_mixture(self, labels: list[int]) -> list[int]:
        return [y + self.class_offset if y != IGNORE_INDEX else IGNORE_INDEX for y in labels]


class TaskMixture:
    """Tasks side by side in one vocabulary and label space (module docstring).

    Args:
        tasks: at least two `Task`s with distinct names (a word-problem file run cannot take part: its classes
            come from its files).

    Attributes:
        name: the components' names joined by ``+``, in order.
        components: one `MixtureTask` per task, in order.
        vocab_size: ``1 + sum(V_c - 1)`` (the pad id shared). num_classes: ``sum(K_c)``.
        token_names: ``"<pad>"``, then each component's token names prefixed with ``"name:"``.
    """

    def __init__(self, tasks: Sequence[Task]):
        tasks = list(tasks)
        if len(tasks) < 2:
            raise ValueError(f"a task mixture needs at least 2 tasks, got {len(tasks)}")
        for task in tasks:
            if not isinstance(task, Task):
                raise TypeError(f"a task mixture's tasks must be Tasks (see get_task), got {type(task).__name__}")
        names = [task.name for task in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"a task mixture's tasks must differ, got {names}")
        self.name = MIXTURE_SEPARATOR.join(names)
        self.vocab_size = 1 + sum(task.vocab_size - 1 for task in tasks)
        self.num_classes = sum(task.num_classes for task in tasks)
        self.token_names = ["<pad>"] + [f"{task.name}:{name}" for task in tasks for name in task.token_names[1:]]
        self.components: tuple[MixtureTask, ...] = ()
        token_offset = class_offset = 0
        for task in tasks:
            self.components += (MixtureTask(task, token_offset, class_offset, self),)
            token_offset += task.vocab_size - 1
            class_offset += task.num_classes

    def component(self, name: str) -> MixtureTask:
        """The component named `name` (ValueError naming the mixture's components otherwise)."""
        for component in self.components:
            if component.name == name:
                return component
        raise ValueError(f"{name!r} is not a component of {self.name!r}: {[c.name for c in self.components]}")

    def __repr__(self) -> str:
        return f"TaskMixture(name={self.name!r}, vocab_size={self.vocab_size}, num_classes={self.num_classes})"


class MixtureDataset(torch.utils.data.Dataset):
    """One dataset per component (each drawing its component's sequences: a `StateTrackingDataset` over a
    `MixtureTask`), interleaved: item i is item i // k of dataset i % k, k = len(datasets). Its length is k times
    the shortest dataset's, so that every item is a fresh sequence and the shares stay equal."""

    def __init__(self, datasets: Sequence[torch.utils.data.Dataset]):
        self.datasets = list(datasets)
        if len(self.datasets) < 2:
            raise ValueError(f"a mixture dataset interleaves at least 2 datasets, got {len(self.datasets)}")
        self.num_samples = len(self.datasets) * min(len(d) for d in self.datasets)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i):
        i = checked_index(i, self.num_samples)
        k = len(self.datasets)
        return self.datasets[i % k][i // k]


__all__ = ["MIXTURE_SEPARATOR", "MixtureDataset", "MixtureTask", "TaskMixture"]
