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

Varieties of the task (`ShuffledObjectsTask(variety=...)`): "plain" (the stories above: ten names, options in the
order of the introduction, one paragraph), "varied" (the entity-tracking adapter's training stories: n of seventy
names in random order, options shuffled against the introduction in half of the stories, BIG-Bench Hard's line break
after the introduction in half, six more scenarios, EXTRA_FAMILIES), "heldout" (its held-out test: twenty names never
used in training, options always shuffled, and scenarios whose phrases no training story uses, HELDOUT_FAMILIES) and
"heldout_names" (the same with the benchmark's scenarios, FAMILIES); "mixed_roles" ("varied" plus ROLE_FAMILIES:
partners who are names of the same pool as the people, titles that hold names and articles) and "heldout_roles" (its
held-out test: HELDOUT_NAMES in HELDOUT_ROLE_FAMILIES). Every story records the role of each piece of
its text (`NLStory.roles`, ROLES), the labels the adapter's tagger trains on; the adapter itself reads only the frozen
model's features.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from .nl_story import ANSWER_PROMPT, NLStory

__all__ = [
    "EXTRA_FAMILIES",
    "FAMILIES",
    "HELDOUT_FAMILIES",
    "HELDOUT_ROLE_FAMILIES",
    "HELDOUT_NAMES",
    "LAYOUTS",
    "OBJECT_COUNTS",
    "OPTION_ORDERS",
    "ROLE",
    "ROLE_FAMILIES",
    "ROLES",
    "TRAINING_FAMILIES",
    "TRAIN_NAMES",
    "VARIETIES",
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
# The "varied" stories' names: PEOPLE and sixty more, common and rare (a rare name is several tokens long in a BPE
# vocabulary, which the tagger must learn to read as one name); none of them a dance partner of the scenarios.
TRAIN_NAMES = PEOPLE + (
    "Oliver", "Sophia", "Liam", "Mia", "Noah", "Olivia", "Lucas", "Amelia", "Mason", "Harper", "Ethan", "Chloe", "Logan",
    "Zoe", "James", "Lily", "Daniel", "Nora", "Samuel", "Hannah", "Isaac", "Ruby", "Leo", "Stella", "Owen", "Violet",
    "Hugo", "Maya", "Felix", "Iris", "Ayla", "Bodhi", "Cosima", "Darius", "Esme", "Florian", "Gideon", "Ines", "Jovan",
    "Keanu", "Linnea", "Milo", "Niamh", "Orla", "Rowan", "Saoirse", "Thiago", "Wren", "Xiomara", "Zara", "Anouk",
    "Bjorn", "Caius", "Delphine", "Evander", "Fenna", "Ottilie", "Soren", "Tamsin", "Wilhelmina",
)  # fmt: skip
# The "heldout" stories' names: none of them in TRAIN_NAMES (most are several tokens long in SmolLM2's tokenizer).
# The scenarios' names are both kept apart from BIG-Bench Hard's (its Claire, Eve, Fred and Gertrude are in neither).
HELDOUT_NAMES = (
    "Aisha", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ingrid", "Jonas", "Kavya", "Lorenzo",
    "Mateo", "Nadia", "Oskar", "Priya", "Rafael", "Sakura", "Tariq", "Yusuf",
)  # fmt: skip
# What each piece of a story's text is (NLStory.roles): a person's name (wherever it appears: the introduction, a
# swap, the question, a sentence that changes nothing), an object in a holding clause (the option's text as it
# appears there), a swap sentence's full stop, an option's letter, an option's text. Everything else is "none".
ROLES = ("none", "name", "object", "swap_end", "option", "option_text")
ROLE = {name: i for i, name in enumerate(ROLES)}
OPTION_ORDERS = ("introduction", "shuffled")  # the options in the people's order (BIG-Bench Hard's) or shuffled
LAYOUTS = ("space", "newline")  # the sentence after the introduction follows it on the same line, or on the next
VARIETIES = ("plain", "varied", "heldout", "heldout_names", "mixed_roles", "heldout_roles")
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
    # True: the objects are people too, drawn from the story's name pool (never one of its people), so that a name is
    # a holder or an object by its place in the sentence alone; `objects` is then empty.
    objects_are_names: bool = False


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


# More scenarios for the "varied" training stories only (the "plain" stories keep FAMILIES): other verbs, nouns and
# multi-word objects, so that the tagger meets more than the benchmark's five phrasings.
EXTRA_FAMILIES: dict[str, ScenarioFamily] = {
    family.name: family
    for family in (
        ScenarioFamily(
            "cards",
            "{people} are playing a card game. At the start of the game, each of them is dealt one card: {holdings}. "
            "As the game goes on, pairs of players trade cards.",
            "{person} holds the {object}",
            "{a} and {b} trade cards.",
            "At the end of the game, {person} holds the",
            (
                "ace of spades",
                "king of hearts",
                "queen of clubs",
                "jack of diamonds",
                "ten of hearts",
                "two of spades",
                "seven of clubs",
                "nine of diamonds",
                "three of hearts",
                "five of spades",
                "eight of clubs",
                "four of diamonds",
            ),
        ),  # fmt: skip
        ScenarioFamily(
            "rooms",
            "{people} are staying at a hotel. On arrival, each of them is given a room: {holdings}. During their stay, "
            "pairs of guests swap rooms.",
            "{person} gets the {object} room",
            "{a} and {b} swap rooms.",
            "At the end of the stay, {person} is in the",
            (
                "garden",
                "ocean",
                "mountain",
                "forest",
                "river",
                "desert",
                "meadow",
                "harbour",
                "island",
                "valley",
                "canyon",
                "lagoon",
            ),
            "{object} room",
        ),  # fmt: skip
        ScenarioFamily(
            "seats",
            "{people} are watching a film at the cinema. As the film starts, they each sit in a seat: {holdings}. "
            "During the film, pairs of friends switch seats.",
            "{person} has the {object} seat",
            "{a} and {b} switch seats.",
            "At the end of the film, {person} has the",
            (
                "aisle",
                "window",
                "middle",
                "corner",
                "front",
                "back row",
                "balcony",
                "centre",
                "end",
                "side",
                "upper",
                "lower",
            ),
            "{object} seat",
        ),  # fmt: skip
        ScenarioFamily(
            "umbrellas",
            "{people} are walking home in the rain. When they set off, each of them carries an umbrella: {holdings}. "
            "On the way, pairs of friends switch umbrellas.",
            "{person} carries the {object} umbrella",
            "{a} and {b} switch umbrellas.",
            "At the end of the walk, {person} carries the",
            (
                "polka-dot",
                "checked",
                "black",
                "yellow",
                "floral",
                "clear",
                "tartan",
                "navy",
                "green",
                "rainbow",
                "white",
                "purple",
            ),
            "{object} umbrella",
        ),  # fmt: skip
        ScenarioFamily(
            "pets",
            "{people} are pet sitters for a weekend. On Friday, each of them looks after one pet: {holdings}. Over "
            "the weekend, pairs of sitters trade pets.",
            "{person} looks after the {object}",
            "{a} and {b} trade pets.",
            "On Sunday evening, {person} looks after the",
            (
                "parrot",
                "kitten",
                "puppy",
                "hamster",
                "tortoise",
                "rabbit",
                "goldfish",
                "lizard",
                "ferret",
                "guinea pig",
                "canary",
                "hedgehog",
            ),
        ),  # fmt: skip
        ScenarioFamily(
            "desks",
            "{people} work in a shared office. On Monday, each of them is given a desk: {holdings}. During the week, "
            "pairs of colleagues swap desks.",
            "{person} sits at the {object} desk",
            "{a} and {b} swap desks.",
            "On Friday, {person} sits at the",
            (
                "corner",
                "window",
                "door",
                "kitchen",
                "printer",
                "plant",
                "stairs",
                "lift",
                "heater",
                "bookshelf",
                "whiteboard",
                "sofa",
            ),
            "{object} desk",
        ),  # fmt: skip
    )
}
TRAINING_FAMILIES = {**FAMILIES, **EXTRA_FAMILIES}
# Scenarios whose phrases no training story uses (the "heldout" variety): another verb for the swap ("exchange"),
# another question ("When the party ends, ...", "After the rehearsal, ..."), other objects.
# Scenarios where a name is an object or part of one (the "mixed_roles" variety adds them to TRAINING_FAMILIES): the
# partners are names of the same pool as the people, the titles hold names and articles. BIG-Bench Hard's dance
# partners and books are names and titles the other training scenarios never show as objects; none of these titles
# is one of the benchmark's.
ROLE_FAMILIES: dict[str, ScenarioFamily] = {
    family.name: family
    for family in (
        ScenarioFamily(
            "named_dance_partners",
            "{people} are dancers at a square dance. At the start of a song, they each have a partner: {holdings}. "
            "Throughout the song, the dancers often trade partners.",
            "{person} is dancing with {object}",
            "{a} and {b} switch partners.",
            "At the end of the dance, {person} is dancing with",
            (),
            objects_are_names=True,
        ),
        ScenarioFamily(
            "doubles_partners",
            "{people} are playing in a doubles tournament. Before the first round, each of them is paired with a "
            "partner: {holdings}. Between rounds, pairs of players swap partners.",
            "{person} plays with {object}",
            "{a} and {b} swap partners.",
            "At the end of the tournament, {person} plays with",
            (),
            objects_are_names=True,
        ),
        ScenarioFamily(
            "titled_books",
            "{people} are friends and avid readers who occasionally trade books. At the start of the semester, they "
            "each buy one new book: {holdings}. As the semester proceeds, they start trading around the new books.",
            "{person} gets {object}",
            "{a} and {b} swap books.",
            "At the end of the semester, {person} has",
            (
                "The Time Machine",
                "Jane Eyre",
                "Vanity Fair",
                "Great Expectations",
                "Treasure Island",
                "Oliver Twist",
                "Little Women",
                "Robinson Crusoe",
                "Don Quixote",
                "The Jungle Book",
                "Wuthering Heights",
                "The Secret Garden",
                "Heart of Darkness",
                "Anna Karenina",
                "The Three Musketeers",
                "Peter Pan",
                "Silas Marner",
                "The Count of Monte Cristo",
                "David Copperfield",
                "Daniel Deronda",
            ),
        ),  # fmt: skip
    )
}
# Held-out scenarios of the same kind (the "heldout_roles" variety, with HELDOUT_NAMES): opponents that are names,
# plays whose titles hold names; no phrase of theirs is in a training scenario.
HELDOUT_ROLE_FAMILIES: dict[str, ScenarioFamily] = {
    family.name: family
    for family in (
        ScenarioFamily(
            "chess_opponents",
            "{people} meet at a chess club. When the evening starts, each of them faces an opponent: {holdings}. "
            "Between games, the players exchange opponents.",
            "{person} faces {object}",
            "{a} and {b} exchange opponents.",
            "When the evening is over, {person} faces",
            (),
            objects_are_names=True,
        ),
        ScenarioFamily(
            "plays",
            "{people} act in a theatre company. At the start of the season, each of them is cast in a play: "
            "{holdings}. During the season, the actors exchange roles.",
            "{person} is cast in {object}",
            "{a} and {b} exchange roles.",
            "After the season, {person} is cast in",
            (
                "The Tempest",
                "King Lear",
                "Hedda Gabler",
                "Uncle Vanya",
                "The Seagull",
                "Hamlet",
                "Othello",
                "Macbeth",
                "Peer Gynt",
                "Cyrano de Bergerac",
                "The Cherry Orchard",
                "Julius Caesar",
            ),
        ),  # fmt: skip
    )
}
HELDOUT_FAMILIES: dict[str, ScenarioFamily] = {
    family.name: family
    for family in (
        ScenarioFamily(
            "hats",
            "{people} are guests at a costume party. When the party begins, each of them is wearing a hat: "
            "{holdings}. During the party, the guests keep exchanging hats.",
            "{person} wears the {object} hat",
            "{a} and {b} exchange hats.",
            "When the party ends, {person} wears the",
            (
                "straw",
                "felt",
                "cowboy",
                "bowler",
                "woollen",
                "paper",
                "pirate",
                "bucket",
                "wizard",
                "velvet",
                "leather",
                "striped",
            ),
            "{object} hat",
        ),  # fmt: skip
        ScenarioFamily(
            "instruments",
            "{people} play in a small band. At the first rehearsal, each of them picks an instrument: {holdings}. "
            "Between songs, pairs of musicians hand their instruments to each other.",
            "{person} plays the {object}",
            "{a} and {b} exchange instruments.",
            "After the rehearsal, {person} plays the",
            (
                "violin",
                "cello",
                "flute",
                "trumpet",
                "clarinet",
                "banjo",
                "harp",
                "oboe",
                "tuba",
                "ukulele",
                "accordion",
                "saxophone",
            ),
        ),  # fmt: skip
    )
}
ALL_FAMILIES = {**TRAINING_FAMILIES, **HELDOUT_FAMILIES, **ROLE_FAMILIES, **HELDOUT_ROLE_FAMILIES}


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
    return _listing_with_starts(items)[0]


def _listing_with_starts(items: list[str]) -> tuple[str, list[int]]:
    """(`_listing(items)`, the character offset of every item in it)."""
    joints = [" and "] if len(items) == 2 else [", "] * (len(items) - 2) + [", and "]
    text, starts = items[0], [0]
    for joint, item in zip(joints, items[1:]):
        text += joint
        starts.append(len(text))
        text += item
    return text, starts


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


def _check_choice(name: str, value, accepted) -> None:
    """ValueError naming `name` and the accepted values unless `value` is one of them."""
    if value not in accepted:
        raise ValueError(f"{name} must be one of {list(accepted)}, got {value!r}")


def _introduction(spec: ScenarioFamily, people: list[str], objects: list[str], layout: str):
    """(the introduction's text, its role spans): the people, then who holds which of `objects` (each holding clause
    contains its object's option text verbatim, the span marked "object"), then the sentence after it, on the same
    line (`layout` "space") or the next ("newline", BIG-Bench Hard's layout)."""
    before, after = spec.intro.split("{holdings}")
    if layout == "newline":
        if not after.startswith(". "):
            raise ValueError(f"scenario {spec.name!r}: the newline layout needs '{{holdings}}. ' in its introduction")
        after = ".\n" + after[2:]
    head = before.format(people=_listing(people))
    where = before.index("{people}")
    roles = [(where + at, where + at + len(p), ROLE["name"]) for p, at in zip(people, _listing_with_starts(people)[1])]
    holdings = [spec.holding.format(person=p, object=o) for p, o in zip(people, objects)]
    listing, starts = _listing_with_starts(holdings)
    for person, obj, holding, start in zip(people, objects, holdings, starts):
        option = spec.option.format(object=obj)
        at = len(head) + start
        roles.append((at, at + len(person), ROLE["name"]))
        found = holding.find(option, len(person))
        if not holding.startswith(person) or found < 0:
            raise ValueError(f"scenario {spec.name!r}: a holding must start with the person and contain the option")
        roles.append((at + found, at + found + len(option), ROLE["object"]))
    return head + listing + after, roles


def _swap_sentence(spec: ScenarioFamily, opener: str, a: str, b: str, at: int):
    """(" First, Carol and Bob swap books.", the role spans of its two names and its full stop), the sentence
    starting at character `at` of the story."""
    sentence = f" {opener} {spec.swap.format(a=a, b=b)}"
    start = at + len(opener) + 2
    first, second = spec.swap.index("{a}"), spec.swap.index("{b}")
    if not first < second or not sentence.endswith("."):
        raise ValueError(f"scenario {spec.name!r}: a swap must name {{a}} before {{b}} and end with '.'")
    b_at = start + second - len("{a}") + len(a)
    end = at + len(sentence)
    roles = [(start + first, start + first + len(a), ROLE["name"]), (b_at, b_at + len(b), ROLE["name"])]
    return sentence, [*roles, (end - 1, end, ROLE["swap_end"])]


def _question(spec: ScenarioFamily, asked: str, options: list[str], at: int):
    """(" At the end of the semester, Bob has\\nOptions:\\n(A) ...", its role spans) for a story of `at` characters."""
    question = spec.question.format(person=asked)
    where = at + 1 + spec.question.index("{person}")
    roles = [(where, where + len(asked), ROLE["name"])]
    text = f" {question}\nOptions:"
    for m, option in enumerate(options):
        line = at + len(text) + 1
        roles += [(line + 1, line + 2, ROLE["option"]), (line + 4, line + 4 + len(option), ROLE["option_text"])]
        text += f"\n({LETTERS[m]}) {option}"
    return text, roles


def _draw_objects(spec: ScenarioFamily, names, people: list[str], rng: random.Random) -> list[str]:
    """One object per person of `people`, in random order: of `spec.objects`, or names of `names` that are not
    `people` where the scenario's objects are people too."""
    if not spec.objects_are_names:
        return _pick(rng, spec.objects, len(people))
    others = [name for name in names if name not in people]
    if len(others) < len(people):
        raise ValueError(f"scenario {spec.name!r} draws its objects from `names` too: it needs 2 x num_objects = "
                         f"{2 * len(people)} distinct names, got {len(set(names))}")  # fmt: skip
    return _pick(rng, others, len(people))


def shuffled_objects_story(
    num_objects: int,
    num_swaps: int,
    rng: random.Random,
    family: str | None = None,
    distractor_prob: float = 0.0,
    with_question: bool = True,
    preamble_sentences: int = 0,
    names: tuple[str, ...] = PEOPLE,
    option_order: str = "introduction",
    layout: str = "space",
) -> NLStory:
    """One story of `num_objects` people (3, 5 or 7) and `num_swaps` >= 0 swaps, in scenario `family` (None: drawn
    from FAMILIES; any of ALL_FAMILIES), the people drawn from `names` in random order.

    `option_order` "introduction" lists the options in the order of the people (the benchmark's), "shuffled" in a
    random order (drawn last, so the story's other draws are those of the introduction's order); `layout` "newline"
    puts BIG-Bench Hard's line break after the introduction. `symbols[k]` codes the k-th swap as `i * num_objects + j`
    (people i < j in the order they are introduced); the answer is the option index of the object the asked person
    holds at the end; `roles` marks every name, object, swap end and option (ROLES).
    """
    check_num_objects(num_objects)
    _check_int("num_swaps", num_swaps, 0)
    _check_int("preamble_sentences", preamble_sentences, 0)
    if not 0.0 <= distractor_prob < 1.0:
        raise ValueError(f"distractor_prob must be in [0, 1), got {distractor_prob!r}")
    _check_choice("option_order", option_order, OPTION_ORDERS)
    _check_choice("layout", layout, LAYOUTS)
    if not isinstance(names, (tuple, list)) or len(set(names)) < num_objects:
        raise ValueError(f"names must be a tuple of at least num_objects = {num_objects} distinct names, got {names!r}")
    if family is None:
        family = sorted(FAMILIES)[int(rng.random() * len(FAMILIES))]
    if family not in ALL_FAMILIES:
        raise ValueError(f"unknown scenario family {family!r}; accepted: {', '.join(sorted(ALL_FAMILIES))}")
    spec = ALL_FAMILIES[family]
    people = _pick(rng, names, num_objects)
    objects = _draw_objects(spec, names, people, rng)
    texts = [spec.option.format(object=o) for o in objects]  # the option text of each person's first object
    text, roles = _introduction(spec, people, objects, layout)

    def distractor() -> str:
        """A sentence that changes nothing, its name (if it has one) marked in `roles`."""
        template = DISTRACTORS[int(rng.random() * len(DISTRACTORS))]
        person = people[int(rng.random() * num_objects)]
        if "{name}" in template:
            at = len(text) + 1 + template.index("{name}")
            roles.append((at, at + len(person), ROLE["name"]))
        return template.format(name=person)

    for _ in range(preamble_sentences):
        text += " " + distractor()
    holder = list(range(num_objects))  # holder[p] = the index of the object person p holds
    symbols, ends = [], []
    for k in range(num_swaps):
        i, j = sorted(_pick(rng, range(num_objects), 2))
        if distractor_prob and rng.random() < distractor_prob:
            text += " " + distractor()
        a, b = (people[i], people[j]) if rng.random() < 0.5 else (people[j], people[i])
        sentence, spans = _swap_sentence(spec, _opener(k, num_swaps), a, b, len(text))
        text, roles = text + sentence, roles + spans
        holder[i], holder[j] = holder[j], holder[i]
        symbols.append(i * num_objects + j)
        ends.append(len(text))
    asked = int(rng.random() * num_objects)
    # order[m]: the object option m shows
    order = list(range(num_objects)) if option_order == "introduction" else _pick(rng, range(num_objects), num_objects)
    answer = order.index(holder[asked])
    options = [texts[m] for m in order]
    benchmark_input = ""
    if with_question:
        question, spans = _question(spec, people[asked], options, len(text))
        benchmark_input, roles = text + question, roles + spans
        text = f"{benchmark_input}\n{ANSWER_PROMPT}"
    return NLStory(
        text, answer, LETTERS[answer], symbols, num_swaps, ends, [IGNORE_INDEX] * num_swaps,
        benchmark_input=benchmark_input, choice=f"({LETTERS[answer]})", free_answer=options[answer],
        num_objects=num_objects, roles=roles,
    )  # fmt: skip


# Per variety: (the names, the scenarios, P(options shuffled), P(BIG-Bench Hard's line break)).
_VARIETY = {
    "plain": (PEOPLE, FAMILIES, 0.0, 0.0),
    "varied": (TRAIN_NAMES, TRAINING_FAMILIES, 0.5, 0.5),
    "heldout": (HELDOUT_NAMES, HELDOUT_FAMILIES, 1.0, 0.5),
    "heldout_names": (HELDOUT_NAMES, FAMILIES, 1.0, 0.5),
    "mixed_roles": (TRAIN_NAMES, {**TRAINING_FAMILIES, **ROLE_FAMILIES}, 0.5, 0.5),
    "heldout_roles": (HELDOUT_NAMES, HELDOUT_ROLE_FAMILIES, 1.0, 0.5),
}


class ShuffledObjectsTask:
    """tracking_shuffled_objects for the natural-language suite: the interface of NLStateTrackingTask (`name`,
    `num_classes`, `answer_words`, `sample`, `all_templates`) over stories of `object_counts` people.

    `name` picks the counts: "tracking_shuffled_objects" mixes 3, 5 and 7 (drawn per story), the BIG-Bench Hard
    subtask names fix one ("..._three_objects"); `object_counts` overrides it. `num_classes` is the largest count
    (the option letters A .. of the largest story); `families` restricts the scenarios (of the variety's). `variety`
    (module docstring): "plain" (the default), "varied" (the entity-tracking adapter's training stories), "heldout"
    (its held-out test: unseen names, shuffled options, unseen scenarios) or "heldout_names" (unseen names, shuffled
    options, the benchmark's scenarios).
    """

    def __init__(
        self,
        name: str = "tracking_shuffled_objects",
        object_counts: tuple[int, ...] | None = None,
        families: tuple[str, ...] | None = None,
        num_classes: int | None = None,
        variety: str = "plain",
    ):
        if name not in SHUFFLED_OBJECTS_TASK_NAMES:
            raise ValueError(
                f"unknown shuffled-objects task {name!r}; accepted: {', '.join(SHUFFLED_OBJECTS_TASK_NAMES)}"
            )
        _check_choice("variety", variety, VARIETIES)
        self.variety = variety
        self.names, pool, self.shuffle_prob, self.newline_prob = _VARIETY[variety]
        if object_counts is None:
            named = [n for n in OBJECT_COUNTS if name == f"tracking_shuffled_objects_{_COUNT_WORDS[n]}_objects"]
            object_counts = tuple(named) or OBJECT_COUNTS
        if not isinstance(object_counts, (tuple, list)) or not object_counts:
            raise ValueError(f"object_counts must be a non-empty tuple of {list(OBJECT_COUNTS)}, got {object_counts!r}")
        self.object_counts = tuple(sorted({check_num_objects(n) for n in object_counts}))
        families = tuple(sorted(pool)) if families is None else tuple(families)
        unknown = [f for f in families if f not in pool]
        if unknown or not families:
            raise ValueError(
                f"families must be a non-empty subset of {sorted(pool)} (variety {variety!r}), got {list(families)}"
            )
        self.families = families
        self.name = name
        largest = max(self.object_counts)
        self.num_classes = largest if num_classes is None else num_classes
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < largest:
            raise ValueError(f"num_classes must be an int >= the largest object count {largest}, got {num_classes!r}")
        self.answer_words: tuple[str, ...] = tuple(LETTERS[: self.num_classes])

    @property
    def stream_name(self) -> str:
        """The name that seeds this task's stories in a dataset: `name`, and the variety unless it is "plain" (so a
        held-out bucket draws other stories than the training variety's bucket of the same lengths)."""
        return self.name if self.variety == "plain" else f"{self.name}/{self.variety}"

    def with_objects(self, num_objects: int) -> ShuffledObjectsTask:
        """This task restricted to stories of `num_objects` people, with the same classes (a test bucket of one n)."""
        check_num_objects(num_objects)
        if num_objects not in self.object_counts:
            raise ValueError(f"task {self.name!r} has stories of {list(self.object_counts)} objects, not {num_objects}")
        name = f"tracking_shuffled_objects_{_COUNT_WORDS[num_objects]}_objects"
        return ShuffledObjectsTask(name, (num_objects,), self.families, self.num_classes, self.variety)

    def with_variety(self, variety: str) -> ShuffledObjectsTask:
        """This task's counts and classes with the stories of another `variety` (its own scenarios)."""
        return ShuffledObjectsTask(self.name, self.object_counts, None, self.num_classes, variety)

    def sample(
        self,
        num_transitions: int,
        rng: random.Random,
        distractor_prob: float = 0.0,
        with_question: bool = True,
        preamble_sentences: int = 0,
    ) -> NLStory:
        """A story of exactly `num_transitions` >= 1 swaps; its number of people and its scenario drawn from rng (and,
        outside the "plain" variety, its order of options and layout, drawn after them)."""
        _check_int("num_transitions", num_transitions, 1)
        n = self.object_counts[int(rng.random() * len(self.object_counts))]
        family = self.families[int(rng.random() * len(self.families))]
        order, layout = "introduction", "space"
        if self.variety != "plain":
            order = "shuffled" if rng.random() < self.shuffle_prob else "introduction"
            layout = "newline" if rng.random() < self.newline_prob else "space"
        return shuffled_objects_story(n, num_transitions, rng, family, distractor_prob, with_question,
                                      preamble_sentences, self.names, order, layout)  # fmt: skip

    def all_templates(self) -> list[str]:
        """Every phrase, name and object a story can contain (for a word-level tokenizer's vocabulary); outside the
        "plain" variety also those of the other varieties (a tiny base trained on one knows the held-out words)."""
        out = [
            " ".join(PEOPLE),
            ANSWER_PROMPT,
            "Options:",
            " ".join(f"({c})" for c in LETTERS),
            "First, Then, Finally,",
            "Q: A:",  # the BBH few-shot prompt's (bbh_fewshot_prompt)
        ]
        out += [d.format(name="") for d in DISTRACTORS]
        families = FAMILIES if self.variety == "plain" else ALL_FAMILIES
        if self.variety != "plain":
            out += [" ".join(TRAIN_NAMES), " ".join(HELDOUT_NAMES)]
        for family in families.values():
            out += [family.intro.format(people="", holdings=""), family.holding.format(person="", object="")]
            out += [family.swap.format(a="", b=""), family.question.format(person=""), " ".join(family.objects)]
            out += [family.option.format(object="")]
        return out

    def __repr__(self) -> str:
        variety = "" if self.variety == "plain" else f", variety={self.variety!r}"
        return (
            f"ShuffledObjectsTask(name={self.name!r}, object_counts={self.object_counts}, "
            f"num_classes={self.num_classes}{variety})"
        )


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
