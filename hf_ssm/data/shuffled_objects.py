"""BIG-Bench Hard's `tracking_shuffled_objects` format as a task of the natural-language suite (docs/adapter.md).

n people (3, 5 or 7, the benchmark's sizes) each start with one object; a list of swap sentences ("First, Carol
and Bob swap books. Then, ... Finally, ...") exchanges the objects of two people each; the question asks what
one person holds at the end, with the n initial objects as options (A) .. in the order of the people:

    Alice, Bob, and Carol are friends and avid readers who occasionally trade books. At the start of the
    semester, they each buy one new book: Alice gets Dracula, Bob gets Walden, and Carol gets Ivanhoe. As the
    semester proceeds, they start trading around the new books. First, Carol and Bob swap books. Then, Bob and
    Alice swap books. Finally, Carol and Bob swap books. At the end of the semester, Bob has
    Options:
    (A) Dracula
    (B) Walden
    (C) Ivanhoe

The benchmark scores the option, "(B)" (`NLStory.choice`); `NLStory.free_answer` is its text ("Walden"). The
generator is this package's own: scenario families books, balls, dance partners, positions on a soccer team and
presents with the format's fixed phrases, its own names and object lists, and any number of swaps (one swap:
"First, ..."; two: "First, ... Finally, ..."; more: "Then, ..." repeated in between).

For the adapter (docs/adapter.md) every swap sentence is one transition (`transition_ends`: the character offset
where it ends); the prompt is the benchmark's text followed by a line "Answer:", and the answer word is the option
letter (" B" is the next token). The class is the option index, i.e. which of the n initial objects the asked
person holds. A task mixing n = 3, 5, 7 has 7 classes (the largest n): a story of n objects uses classes 0 .. n-1,
the same letters A .. for the same option positions, and classes n .. 6 are never its answer. The state after a
swap does not yet say which person the question will ask about, so the stories have no answer after each
transition: `prefix_answers` are -100 (dense supervision reduces to the final answer).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from .nl_story import ANSWER_PROMPT, NLStory

__all__ = [
    "FAMILIES",
    "OBJECT_COUNTS",
    "SHUFFLED_OBJECTS_TASK_NAMES",
    "ScenarioFamily",
    "ShuffledObjectsTask",
    "bbh_fewshot_prefix",
    "bbh_fewshot_prompt",
    "object_buckets",
    "shuffled_objects_story",
]

OBJECT_COUNTS = (3, 5, 7)  # BIG-Bench Hard's three_objects, five_objects and seven_objects subtasks
_COUNT_WORDS = {3: "three", 5: "five", 7: "seven"}
SHUFFLED_OBJECTS_TASK_NAMES: tuple[str, ...] = (
    "tracking_shuffled_objects",  # n = 3, 5 or 7 per story
    *(f"tracking_shuffled_objects_{_COUNT_WORDS[n]}_objects" for n in OBJECT_COUNTS),
)
LETTERS = "ABCDEFG"
IGNORE_INDEX = -100
PEOPLE = ("Alice", "Bob", "Carol", "Dave", "Emma", "Frank", "Grace", "Henry", "Ivy", "Jack")
# Sentences that change nothing (only with distractor_prob / preamble_sentences; the benchmark has none).
DISTRACTORS = ("{name} checks the time.", "{name} hums a quiet tune.", "Somebody laughs nearby.", "{name} yawns.")


@dataclass(frozen=True)
class ScenarioFamily:
    """One scenario: `intro` with {people} and {holdings}, `holding` ("{person} gets {object}"), `swap` ("{a} and
    {b} swap books."), `question` ("At the end of the semester, {person} has") and the objects it draws from;
    `option` renders an object as an option ("{object}" or e.g. "{object} ball")."""

    name: str
    intro: str
    holding: str
    swap: str
    question: str
    objects: tuple[str, ...]
    option: str = "{object}"


FAMILIES: dict[str, ScenarioFamily] = {
    family.name: family
    for family in (
        ScenarioFamily(
            "books",
            "{people} are friends and avid readers who occasionally trade books. At the start of the semester, they "
            "each buy one new book: {holdings}. As the semester proceeds, they start trading around the new books.",
            "{person} gets {object}",
            "{a} and {b} swap books.",
            "At the end of the semester, {person} has",
            (
                "Dracula",
                "Walden",
                "Ivanhoe",
                "Middlemarch",
                "Persuasion",
                "Beloved",
                "Rebecca",
                "Kidnapped",
                "Jane Eyre",
                "The Hobbit",
                "Candide",
                "Siddhartha",
                "Robinson Crusoe",
                "Little Women",
            ),
        ),  # fmt: skip
        ScenarioFamily(
            "balls",
            "{people} are playing a game. At the start of the game, they are each holding a ball: {holdings}. As "
            "the game progresses, pairs of players trade balls.",
            "{person} has a {object} ball",
            "{a} and {b} swap balls.",
            "At the end of the game, {person} has the",
            (
                "crimson",
                "teal",
                "silver",
                "golden",
                "maroon",
                "lavender",
                "navy",
                "coral",
                "turquoise",
                "beige",
                "magenta",
                "scarlet",
            ),
            "{object} ball",
        ),  # fmt: skip
        ScenarioFamily(
            "dance_partners",
            "{people} are dancers at a square dance. At the start of a song, they each have a partner: {holdings}. "
            "Throughout the song, the dancers often trade partners.",
            "{person} is dancing with {object}",
            "{a} and {b} switch partners.",
            "At the end of the dance, {person} is dancing with",
            (
                "Quentin",
                "Rosalind",
                "Tobias",
                "Ursula",
                "Valentina",
                "Winston",
                "Xavier",
                "Yolanda",
                "Zelda",
                "Octavia",
                "Percival",
                "Beatrix",
            ),
        ),  # fmt: skip
        ScenarioFamily(
            "positions",
            "{people} are on the same team in a soccer match. At the start of the match, they are each assigned to "
            "a position: {holdings}. As the game progresses, pairs of players occasionally swap positions.",
            "{person} is playing {object}",
            "{a} and {b} trade positions.",
            "At the end of the match, {person} is playing",
            (
                "goalkeeper",
                "sweeper",
                "left back",
                "right back",
                "centre back",
                "playmaker",
                "left wing",
                "right wing",
                "centre forward",
                "holding midfielder",
                "substitute",
            ),
        ),  # fmt: skip
        ScenarioFamily(
            "presents",
            "{people} are holding a white elephant gift exchange. At the start of the event, they are each holding "
            "a present: {holdings}. As the event progresses, pairs of people swap gifts.",
            "{person} has a {object}",
            "{a} and {b} swap their gifts.",
            "At the end of the event, {person} has the",
            (
                "scarf",
                "teapot",
                "puzzle",
                "kite",
                "candle",
                "notebook",
                "lantern",
                "mug",
                "compass",
                "harmonica",
                "snow globe",
                "wallet",
            ),
        ),  # fmt: skip
    )
}


def _check_int(name: str, value, low: int) -> int:
    """ValueError naming `name` unless `value` is an int (not a bool) >= low."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def check_num_objects(num_objects) -> int:
    """`num_objects` if it is one of OBJECT_COUNTS; ValueError naming the field and the accepted values otherwise."""
    if isinstance(num_objects, bool) or not isinstance(num_objects, int):
        raise ValueError(f"num_objects must be an int, one of {list(OBJECT_COUNTS)}; got {num_objects!r}")
    if num_objects < 2:
        raise ValueError(f"num_objects must be >= 2 (a swap needs two people); accepted: {list(OBJECT_COUNTS)}, "
                         f"got {num_objects}")  # fmt: skip
    if num_objects not in OBJECT_COUNTS:
        raise ValueError(
            f"num_objects must be one of {list(OBJECT_COUNTS)} (BIG-Bench Hard's sizes), got {num_objects}"
        )
    return num_objects


def _listing(items: list[str]) -> str:
    """ "A, B, and C" (the format's serial comma); "A and B" for two."""
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + f", and {items[-1]}"


def _opener(k: int, count: int) -> str:
    """The word before the k-th of `count` swaps: First, Then, ..., Finally (one swap: First)."""
    if k == 0:
        return "First,"
    return "Finally," if k == count - 1 else "Then,"


def _pick(rng: random.Random, pool, k: int) -> list:
    """k distinct items of `pool` in random order (drawn with rng.random only, stable across Python versions)."""
    pool, out = list(pool), []
    for _ in range(k):
        out.append(pool.pop(int(rng.random() * len(pool))))
    return out


def shuffled_objects_story(
    num_objects: int,
    num_swaps: int,
    rng: random.Random,
    family: str | None = None,
    distractor_prob: float = 0.0,
    with_question: bool = True,
    preamble_sentences: int = 0,
) -> NLStory:
    """One story of `num_objects` people (3, 5 or 7) and `num_swaps` >= 0 swaps, in scenario `family` (None: drawn).

    `symbols[k]` codes the k-th swap as `i * num_objects + j` (people i < j in the order they are introduced);
    the answer is the option index of the object the asked person holds at the end.
    """
    check_num_objects(num_objects)
    _check_int("num_swaps", num_swaps, 0)
    _check_int("preamble_sentences", preamble_sentences, 0)
    if not 0.0 <= distractor_prob < 1.0:
        raise ValueError(f"distractor_prob must be in [0, 1), got {distractor_prob!r}")
    if family is None:
        family = sorted(FAMILIES)[int(rng.random() * len(FAMILIES))]
    if family not in FAMILIES:
        raise ValueError(f"unknown scenario family {family!r}; accepted: {', '.join(sorted(FAMILIES))}")
    spec = FAMILIES[family]
    people = _pick(rng, PEOPLE, num_objects)
    objects = _pick(rng, spec.objects, num_objects)
    holdings = [spec.holding.format(person=p, object=o) for p, o in zip(people, objects)]
    text = spec.intro.format(people=_listing(people), holdings=_listing(holdings))

    def distractor() -> str:
        return DISTRACTORS[int(rng.random() * len(DISTRACTORS))].format(name=people[int(rng.random() * num_objects)])

    for _ in range(preamble_sentences):
        text += " " + distractor()
    holder = list(range(num_objects))  # holder[p] = the option index of the object person p holds
    symbols, ends = [], []
    for k in range(num_swaps):
        i, j = sorted(_pick(rng, range(num_objects), 2))
        if distractor_prob and rng.random() < distractor_prob:
            text += " " + distractor()
        a, b = (people[i], people[j]) if rng.random() < 0.5 else (people[j], people[i])
        text += f" {_opener(k, num_swaps)} {spec.swap.format(a=a, b=b)}"
        holder[i], holder[j] = holder[j], holder[i]
        symbols.append(i * num_objects + j)
        ends.append(len(text))
    asked = int(rng.random() * num_objects)
    answer = holder[asked]
    options = [spec.option.format(object=o) for o in objects]
    benchmark_input = ""
    if with_question:
        lines = "\n".join(f"({LETTERS[m]}) {option}" for m, option in enumerate(options))
        benchmark_input = f"{text} {spec.question.format(person=people[asked])}\nOptions:\n{lines}"
        text = f"{benchmark_input}\n{ANSWER_PROMPT}"
    return NLStory(
        text, answer, LETTERS[answer], symbols, num_swaps, ends, [IGNORE_INDEX] * num_swaps,
        benchmark_input=benchmark_input, choice=f"({LETTERS[answer]})", free_answer=options[answer],
        num_objects=num_objects,
    )  # fmt: skip


class ShuffledObjectsTask:
    """tracking_shuffled_objects for the natural-language suite: the interface of NLStateTrackingTask (`name`,
    `num_classes`, `answer_words`, `sample`, `all_templates`) over stories of `object_counts` people.

    `name` picks the counts: "tracking_shuffled_objects" mixes 3, 5 and 7 (drawn per story), the BIG-Bench Hard
    subtask names fix one ("..._three_objects"); `object_counts` overrides it. `num_classes` is the largest count
    (the option letters A .. of the largest story); `families` restricts the scenarios.
    """

    def __init__(
        self,
        name: str = "tracking_shuffled_objects",
        object_counts: tuple[int, ...] | None = None,
        families: tuple[str, ...] | None = None,
        num_classes: int | None = None,
    ):
        if name not in SHUFFLED_OBJECTS_TASK_NAMES:
            raise ValueError(
                f"unknown shuffled-objects task {name!r}; accepted: {', '.join(SHUFFLED_OBJECTS_TASK_NAMES)}"
            )
        if object_counts is None:
            named = [n for n in OBJECT_COUNTS if name == f"tracking_shuffled_objects_{_COUNT_WORDS[n]}_objects"]
            object_counts = tuple(named) or OBJECT_COUNTS
        if not isinstance(object_counts, (tuple, list)) or not object_counts:
            raise ValueError(f"object_counts must be a non-empty tuple of {list(OBJECT_COUNTS)}, got {object_counts!r}")
        self.object_counts = tuple(sorted({check_num_objects(n) for n in object_counts}))
        families = tuple(sorted(FAMILIES)) if families is None else tuple(families)
        unknown = [f for f in families if f not in FAMILIES]
        if unknown or not families:
            raise ValueError(f"families must be a non-empty subset of {sorted(FAMILIES)}, got {list(families)}")
        self.families = families
        self.name = name
        largest = max(self.object_counts)
        self.num_classes = largest if num_classes is None else num_classes
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < largest:
            raise ValueError(f"num_classes must be an int >= the largest object count {largest}, got {num_classes!r}")
        self.answer_words: tuple[str, ...] = tuple(LETTERS[: self.num_classes])

    def with_objects(self, num_objects: int) -> ShuffledObjectsTask:
        """This task restricted to stories of `num_objects` people, with the same classes (a test bucket of one n)."""
        check_num_objects(num_objects)
        if num_objects not in self.object_counts:
            raise ValueError(f"task {self.name!r} has stories of {list(self.object_counts)} objects, not {num_objects}")
        name = f"tracking_shuffled_objects_{_COUNT_WORDS[num_objects]}_objects"
        return ShuffledObjectsTask(name, (num_objects,), self.families, self.num_classes)

    def sample(
        self,
        num_transitions: int,
        rng: random.Random,
        distractor_prob: float = 0.0,
        with_question: bool = True,
        preamble_sentences: int = 0,
    ) -> NLStory:
        """A story of exactly `num_transitions` >= 1 swaps; its number of people and its scenario drawn from rng."""
        _check_int("num_transitions", num_transitions, 1)
        n = self.object_counts[int(rng.random() * len(self.object_counts))]
        family = self.families[int(rng.random() * len(self.families))]
        return shuffled_objects_story(n, num_transitions, rng, family, distractor_prob, with_question,
                                      preamble_sentences)  # fmt: skip

    def all_templates(self) -> list[str]:
        """Every phrase, name and object a story can contain (for a word-level tokenizer's vocabulary)."""
        out = [
            " ".join(PEOPLE),
            ANSWER_PROMPT,
            "Options:",
            " ".join(f"({c})" for c in LETTERS),
            "First, Then, Finally,",
            "Q: A:",  # the BBH few-shot prompt's (bbh_fewshot_prompt)
        ]
        out += [d.format(name="") for d in DISTRACTORS]
        for family in FAMILIES.values():
            out += [family.intro.format(people="", holdings=""), family.holding.format(person="", object="")]
            out += [family.swap.format(a="", b=""), family.question.format(person=""), " ".join(family.objects)]
            out += [family.option.format(object="")]
        return out

    def __repr__(self) -> str:
        return f"ShuffledObjectsTask(name={self.name!r}, object_counts={self.object_counts}, num_classes={self.num_classes})"


def bbh_fewshot_prefix(shots: list[NLStory]) -> str:
    """The solved examples every prompt of BIG-Bench Hard's few-shot format starts with: each shot as
    "Q: <input>\\nA: (B)" and a blank line ("" for no shots)."""
    if any(not s.benchmark_input for s in shots):
        raise ValueError("bbh_fewshot_prompt needs multiple-choice stories (benchmark_input set) with their question")
    return "".join(f"Q: {s.benchmark_input}\nA: {s.choice}\n\n" for s in shots)


def bbh_fewshot_prompt(story: NLStory, shots: list[NLStory]) -> str:
    """The prompt the untrained base answers in BIG-Bench Hard's few-shot format: `bbh_fewshot_prefix(shots)`, then
    "Q: <the story's input>\\nA:"."""
    if not story.benchmark_input:
        raise ValueError("bbh_fewshot_prompt needs multiple-choice stories (benchmark_input set) with their question")
    return f"{bbh_fewshot_prefix(shots)}Q: {story.benchmark_input}\nA:"


_BOUND = re.compile(r"^(\d*)n$|^(\d+)$")


def object_buckets(text: str, object_counts, name: str = "test_buckets") -> list[tuple[int, int, int]]:
    """Test buckets (low, high, n) of swap counts for every n in `object_counts`: "1-7,n,4n,8n" with counts (3, 5)
    -> [(1, 7, 3), (3, 3, 3), (12, 12, 3), (24, 24, 3), (1, 7, 5), (5, 5, 5), ...]. An item is a count, a range
    "low-high", or "Kn" (K times the number of objects; "n" alone is 1n), also as a range bound ("n-2n").
    ValueError naming the option `name` for anything else."""
    counts = [check_num_objects(n) for n in object_counts]
    parts = [p.strip() for p in text.split(",")]
    out = []
    for n in counts:
        for part in parts:
            bounds = []
            for piece in part.split("-"):
                found = _BOUND.match(piece.strip())
                if found is None:
                    bounds = []
                    break
                multiple, plain = found.groups()
                bounds.append(int(plain) if plain is not None else int(multiple or 1) * n)
            if len(bounds) not in (1, 2):
                raise ValueError(
                    f"`{name}` must look like '1-7,n,4n,8n' (swap counts, ranges, or multiples Kn of the number of "
                    f"objects), got {text!r}"
                )
            low, high = bounds[0], bounds[-1]
            if not 1 <= low <= high:
                raise ValueError(f"`{name}` item {part!r} must give 1 <= low <= high swaps, got {low}-{high} for n={n}")
            out.append((low, high, n))
    return out
