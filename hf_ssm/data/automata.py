"""Each state-tracking task as a finite automaton, and the size of its minimal DFA (docs/design.md §8.2).

A task's automaton is a Moore machine over the task's token ids: a start state, a transition `step(state, token)`
(None for a token the task never produces there, e.g. two digits in a row) and an `output(state)`, the label of
a prefix that ends in that state (None where the task gives none, e.g. after an operator). `task_automaton`
builds it from the same tables the generator uses; a test checks that running it reproduces `Task.labels`.

`minimal_dfa_size` counts the states of the smallest Moore machine that gives the same label after every prefix
(the label read from the state after the token, as a readout of an SSM state does): breadth-first search of
the reachable states, then Moore's partition refinement, starting from the blocks of equal output. The start
state's output is the empty word's answer where the task has one (parity: even, cycle: position 0, groups: the
identity), so it merges with the state that behaves like it (parity: 2 states); even pairs and modular
arithmetic have none, so their start state counts on its own. Malformed continuations go to a rejecting sink,
which is not counted. It is a hypothesis aid: a one-hot PD-SSM state needs N at least this size.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from .state_tracking import (
    _DIGIT_IDS,
    _MINUS,
    _MOD,
    _PLUS,
    _TIMES,
    CycleNavigationTask,
    EvenPairsTask,
    ModularArithmeticTask,
    ParityTask,
    PermutationGroupTask,
    Task,
)

_SINK = ("<sink>",)  # where a malformed continuation goes


@dataclass(frozen=True)
class Automaton:
    """start state, step(state, token) -> state or None (malformed), output(state) -> label or None."""

    start: Hashable
    tokens: tuple[int, ...]
    step: Callable[[Hashable, int], Hashable | None]
    output: Callable[[Hashable], int | None]

    def run(self, tokens) -> list[int]:
        """Per-position labels of a token sequence, -100 where the task gives none (as `Task.labels`)."""
        state, out = self.start, []
        for t in tokens:
            state = self.step(state, int(t))
            if state is None:
                raise ValueError(f"token {t} cannot follow the prefix before it")
            label = self.output(state)
            out.append(-100 if label is None else label)
        return out


def _parity() -> Automaton:  # state: count of b mod 2; a = 1, b = 2
    return Automaton(0, (1, 2), lambda s, t: (s + (t == 2)) % 2, lambda s: s)


def _even_pairs() -> Automaton:  # state: (first symbol, last symbol), None before the first
    def step(s, t):
        return (t, t) if s is None else (s[0], t)

    return Automaton(None, (1, 2), step, lambda s: None if s is None else int(s[0] != s[1]))


def _cycle_navigation() -> Automaton:  # stay = 1, +1 = 2, -1 = 3 on a 5-cycle
    moves = {1: 0, 2: 1, 3: -1}
    return Automaton(0, (1, 2, 3), lambda s, t: (s + moves[t]) % 5, lambda s: s)


def _modular_arithmetic() -> Automaton:
    """State (sum of finished terms, sign of the current term, current term or None, pending '*', expecting a
    digit): one bracket-free frame of the generator's evaluator."""

    def step(s, t):
        total, sign, term, times, expect = s
        if t in _DIGIT_IDS:
            if not expect:
                return None
            value = t - 1
            return (total, sign, term * value % _MOD if times else value, False, False)
        if expect:
            return None
        if t == _TIMES:
            return (total, sign, term, True, True)
        return ((total + sign * term) % _MOD, 1 if t == _PLUS else -1, None, False, True)

    def output(s):
        total, sign, term, _, expect = s
        return None if expect else (total + sign * term) % _MOD

    return Automaton((0, 1, None, False, True), (*_DIGIT_IDS, _PLUS, _MINUS, _TIMES), step, output)


def _group(task: PermutationGroupTask) -> Automaton:
    rows = task._token_rows
    return Automaton(task.identity_class, tuple(range(1, task.vocab_size)), lambda s, t: rows[t][s], lambda s: s)


def task_automaton(task: Task) -> Automaton:
    """The task's Moore machine; ValueError for modular_arithmetic_brackets (nesting needs a stack: no DFA) and the
    memory tasks (their state is the context they hold, not a fixed automaton)."""
    if isinstance(task, PermutationGroupTask):
        return _group(task)
    builders = {
        ParityTask: _parity,
        EvenPairsTask: _even_pairs,
        CycleNavigationTask: _cycle_navigation,
        ModularArithmeticTask: _modular_arithmetic,
    }
    if type(task) not in builders:
        raise ValueError(
            f"task {task.name!r} has no finite automaton here (accepted: parity, even_pairs, cycle_navigation, "
            "modular_arithmetic and the group tasks); bracket nesting of unbounded depth needs a stack, and the memory "
            "tasks hold their context, not an automaton's state"
        )
    return builders[type(task)]()


def minimal_dfa_size(task: Task) -> int:
    """States of the minimal automaton giving the task's label after every prefix (the sink not counted)."""
    machine = task_automaton(task)
    states, frontier = {machine.start}, [machine.start]
    while frontier:  # breadth-first search of the reachable states
        nxt = []
        for s in frontier:
            for t in machine.tokens:
                r = machine.step(s, t)
                if r is not None and r not in states:
                    states.add(r)
                    nxt.append(r)
        frontier = nxt
    order = [*states, _SINK]

    def successor(s, t):
        r = None if s == _SINK else machine.step(s, t)
        return _SINK if r is None else r

    def out(s):
        return "<reject>" if s == _SINK else machine.output(s)

    outputs: dict = {}
    block = {s: outputs.setdefault(out(s), len(outputs)) for s in order}  # Moore: start from equal outputs
    while True:
        signature = {s: tuple(block[successor(s, t)] for t in machine.tokens) for s in order}
        ids: dict = {}
        refined = {s: ids.setdefault((block[s], signature[s]), len(ids)) for s in order}
        if len(ids) == len(set(block.values())):
            break
        block = refined
    sink_block = block[_SINK]
    return len({block[s] for s in order if block[s] != sink_block})
