"""BIG-Bench Hard's task files as published (`{"canary": ..., "examples": [{"input": ..., "target": "(C)"}, ...]}`):
read one, check its structure, and fingerprint it (sha256 of its bytes), for evaluation only (scripts/
eval_nl_state_tracking.py --bbh_file). The package never trains or selects on these files; tests use small files of
their own in the same format.

A multiple-choice item's input ends with its options, one per line after a line "Options:": "(A) Ulysses",
"(B) Frankenstein", ... with the letters in order from A; its target is one of them, "(B)". A file that is not JSON,
whose top level is not exactly {"canary", "examples"}, or one of whose items breaks these rules, is refused with a
ValueError naming the file, the item and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .nl_story import ANSWER_PROMPT

__all__ = ["BBHFile", "BBHItem", "ShuffleTrace", "adapter_prompt", "parse_bbh", "read_bbh_file", "shuffle_trace"]

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
OPTIONS_HEADER = "\nOptions:\n"
_OPTION_LINE = re.compile(r"^\(([A-Z])\) (\S.*)$")
_TARGET = re.compile(r"^\(([A-Z])\)$")


@dataclass(frozen=True)
class BBHItem:
    """One item: its position in the file, its `input` and `target` as published, the options' texts in order
    (A), (B), ... and the index of the target among them."""

    index: int
    input: str
    target: str
    options: tuple[str, ...]
    answer: int

    @property
    def letters(self) -> str:
        """The option letters of this item, "ABC" for three options."""
        return LETTERS[: len(self.options)]


@dataclass(frozen=True)
class BBHFile:
    """A checked task file: its path, sha256 (of the bytes read), canary string and items."""

    path: str
    sha256: str
    canary: str
    items: tuple[BBHItem, ...]

    @property
    def option_counts(self) -> list[int]:
        """The numbers of options its items have, sorted (one per file for tracking_shuffled_objects)."""
        return sorted({len(item.options) for item in self.items})


def _item(where: str, index: int, example) -> BBHItem:
    """One checked item of `examples`; ValueError naming `where`, the item and the problem."""
    here = f"{where}: examples[{index}]"
    if not isinstance(example, dict) or set(example) != {"input", "target"}:
        keys = sorted(example) if isinstance(example, dict) else type(example).__name__
        raise ValueError(f"{here} must be an object with exactly the keys 'input' and 'target', got {keys}")
    text, target = example["input"], example["target"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{here}.input must be a non-empty string, got {text!r}")
    if not isinstance(target, str) or not _TARGET.match(target):
        raise ValueError(f"{here}.target must look like '(A)' (a capital letter in brackets), got {target!r}")
    if text.count(OPTIONS_HEADER) != 1:
        raise ValueError(f"{here}.input must contain the line 'Options:' once, followed by its options")
    lines = text.split(OPTIONS_HEADER)[1].split("\n")
    options = []
    for k, line in enumerate(lines):
        found = _OPTION_LINE.match(line)
        if found is None or found.group(1) != LETTERS[k]:
            raise ValueError(
                f"{here}.input: option line {k + 1} must read '({LETTERS[k]}) <text>' (the letters in order from A), "
                f"got {line!r}"
            )
        options.append(found.group(2))
    if len(options) < 2:
        raise ValueError(f"{here}.input must list at least two options, got {len(options)}")
    letter = _TARGET.match(target).group(1)
    if letter not in LETTERS[: len(options)]:
        raise ValueError(f"{here}.target {target!r} is not one of its options (A)..({LETTERS[len(options) - 1]})")
    return BBHItem(index, text, target, tuple(options), LETTERS.index(letter))


def parse_bbh(data, where: str = "BIG-Bench Hard file") -> list[BBHItem]:
    """The checked items of a task file's decoded JSON `data` (the module docstring's rules)."""
    if not isinstance(data, dict) or set(data) != {"canary", "examples"}:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: the top level must be an object with exactly 'canary' and 'examples', got {keys}")
    if not isinstance(data["canary"], str):
        raise ValueError(f"{where}: 'canary' must be a string, got {type(data['canary']).__name__}")
    examples = data["examples"]
    if not isinstance(examples, list) or not examples:
        raise ValueError(f"{where}: 'examples' must be a non-empty list, got {examples!r:.80}")
    return [_item(where, index, example) for index, example in enumerate(examples)]


def read_bbh_file(path) -> BBHFile:
    """The task file at `path`, read as published and checked (ValueError naming what is wrong)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no BIG-Bench Hard file at {str(path)!r}")
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a JSON file ({err})") from None
    items = parse_bbh(data, str(path))
    return BBHFile(str(path), hashlib.sha256(raw).hexdigest(), data["canary"], tuple(items))


def adapter_prompt(item: BBHItem) -> str:
    """The prompt an adapter trained on the package's stories answers: the item's input, then a line "Answer:" (the
    generated stories' prompt, hf_ssm.data.shuffled_objects); its answer word is the option letter."""
    return f"{item.input}\n{ANSWER_PROMPT}"


# --- Error analysis of recorded predictions (scripts/analyze_bbh.py). No model or adapter reads any of this: it
# parses tracking_shuffled_objects' English to say which items a model got wrong and how.

# The benchmark's five scenarios, by a phrase of the introduction's first sentence.
SCENARIOS = {
    "square dance": "dance partners",
    "trade books": "books",
    "soccer match": "positions",
    "gift exchange": "presents",
    "playing a game": "balls",
}
_SWAP = re.compile(r"(?:First|Then|Finally), (\w+) and (\w+) (?:swap|switch|trade)")
_ASKED = re.compile(r"At the end of the \w+, (\w+) (?:is|has)")


@dataclass(frozen=True)
class ShuffleTrace:
    """A tracking_shuffled_objects item read for analysis: its scenario, the people in the introduction's order, the
    swaps (pairs of indices into `people`), the asked person's index, and `holders[t][i]`: the option index person i
    holds after t swaps (t = 0: the introduction, where person i holds option i, the benchmark's layout)."""

    scenario: str
    people: tuple[str, ...]
    swaps: tuple[tuple[int, int], ...]
    asked: int
    holders: tuple[tuple[int, ...], ...]

    @property
    def asked_swaps(self) -> int:
        """How many swaps the asked person took part in."""
        return sum(self.asked in pair for pair in self.swaps)

    @property
    def steps_since_asked_swap(self) -> int | None:
        """Swaps after the asked person's last one (0: it was the last swap; None: never swapped)."""
        for back, pair in enumerate(reversed(self.swaps)):
            if self.asked in pair:
                return back
        return None

    def error_kind(self, predicted: int) -> str:
        """What a predicted option is, for the asked person: "right"; "earlier" (what they held at the start or after
        an earlier swap: a later swap missed); else "other's" (what another person holds at the end)."""
        if predicted == self.holders[-1][self.asked]:
            return "right"
        if any(step[self.asked] == predicted for step in self.holders[:-1]):
            return "earlier"
        return "other's"


def shuffle_trace(item: BBHItem) -> ShuffleTrace:
    """The ShuffleTrace of a tracking_shuffled_objects item (ValueError naming the item where its text does not
    follow the benchmark's layout: the people listed before " are ", one "X and Y swap/switch/trade" per swap, the
    question "At the end of the ..., X is/has")."""
    story = item.input.split(OPTIONS_HEADER)[0]
    first = story.split(" are ", 1)[0]
    people = tuple(name.strip() for name in re.split(r", and |, | and ", first))
    scenario = next((name for phrase, name in SCENARIOS.items() if phrase in story.split(".")[0]), "other")
    index = {name: i for i, name in enumerate(people)}
    swaps = tuple((index.get(a), index.get(b)) for a, b in _SWAP.findall(story))
    asked = _ASKED.search(story)
    if len(people) != len(item.options) or not swaps or asked is None or asked.group(1) not in index:
        raise ValueError(f"item {item.index}: not in tracking_shuffled_objects' layout (people {people}, options "
                         f"{len(item.options)}, swaps {len(swaps)}, question {asked and asked.group(0)!r})")  # fmt: skip
    if any(i is None or j is None for i, j in swaps):
        raise ValueError(f"item {item.index}: a swap names someone outside the introduction {people}")
    holders = [tuple(range(len(people)))]
    for i, j in swaps:
        now = list(holders[-1])
        now[i], now[j] = now[j], now[i]
        holders.append(tuple(now))
    return ShuffleTrace(scenario, people, swaps, index[asked.group(1)], tuple(holders))
