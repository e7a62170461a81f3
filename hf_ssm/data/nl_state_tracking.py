"""Natural-language versions of the state-tracking automata (docs/design.md §8): short stories whose sentences are
the automaton's transitions, ending in a question whose answer is one short word.

Each story is built from a formal task of ``state_tracking.py`` (so the answer is computed by the same code):

- ``parity``: a lamp starts off; "flip the switch" sentences toggle it, the others leave it alone.
  Question: is the light on or off? Answers: ``off`` / ``on``.
- ``cycle_navigation``: a train on a circle of five stations starts at station zero and moves forward, back
  or stays. Answers: ``zero`` .. ``four``.
- ``s5`` / ``a5`` ("cups"): five cups in a row, a coin under the first; every sentence permutes the cups (the
  group's generators: a rotation of the row and a swap, or a double swap for A5). Question: under which cup
  is the coin? Answers: ``first`` .. ``fifth``. The state is the whole permutation; the answer is where it
  sends position 0, which already needs non-abelian state tracking.

Every transition is rendered by one of several templates of different length and wording, with random names
and openers ("Then", "A moment later,"); distractor sentences that change nothing can be mixed in. The prompt
ends with ``"Answer:"`` and the answer word follows it (``" off"``). Tokenisation uses the base model's
tokenizer; the model is asked for the first token of the answer word (``answer_token_ids`` checks that the
classes' first tokens differ).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import torch

from .state_tracking import PermutationGroupTask, checked_index, get_task, permutation_cycles

__all__ = [
    "NL_TASK_NAMES",
    "NLStateTrackingDataset",
    "NLStateTrackingTask",
    "NLStory",
    "answer_token_ids",
    "check_sentence_tokenization",
    "collate_nl_state_tracking",
    "get_nl_task",
    "narrative_corpus",
    "sentence_token_mismatches",
    "task_vocabulary",
    "token_ends",
    "words_of",
]

NL_TASK_NAMES: tuple[str, ...] = ("parity", "cycle_navigation", "s5", "a5")
ANSWER_PROMPT = "Answer:"

NAMES = ("Alice", "Bob", "Carol", "Dave", "Emma", "Frank", "Grace", "Henry", "Ivy", "Jack")
OPENERS = ("Then", "After that,", "A moment later,", "Suddenly,", "Later,")
# Sentences that change no state; they avoid every answer word and every transition keyword of the tasks.
DISTRACTORS = (
    "Outside, the weather is sunny.",
    "{name} drinks a glass of water.",
    "A bird sings somewhere far away.",
    "{name} checks the time.",
    "Somebody laughs in another room.",
    "{name} hums a quiet song while thinking about dinner.",
)
ORDINALS = ("first", "second", "third", "fourth", "fifth")
NUMBERS = ("zero", "one", "two", "three", "four")

_PARITY = {
    "intro": (
        "The light in the room is off.",
        "A lamp stands in the corner of the room, and at the start it is off.",
        "At the beginning of the evening the lamp is switched off.",
    ),
    2: (  # b: toggle
        "{name} flips the switch.",
        "{name} presses the light switch once.",
        "{name} toggles the lamp.",
        "{name} walks to the wall and flips the switch.",
        "Without a word, {name} presses the switch by the door.",
        "{name} reaches over and toggles the light.",
        "The switch is flipped by {name}.",
    ),
    1: (  # a: no change
        "{name} looks at the lamp.",
        "{name} sits down on the sofa.",
        "{name} opens the window.",
        "{name} walks past the lamp and leaves it alone.",
        "For a while {name} reads a book next to the lamp.",
        "{name} smiles at the lamp.",
        "{name} waves at a friend across the room.",
    ),
    "question": ("Is the light on or off?", "Is the lamp on or off now?", "Right now, is the lamp on or off?"),
    "answers": ("off", "on"),
}

_CYCLE = {
    "intro": (
        "Five stations stand in a circle, numbered zero to four, and a train starts at station zero.",
        "A toy train runs on a round track with five stations, zero to four; it starts at station zero.",
    ),
    2: (  # +1
        "The train moves forward one station.",
        "{name} drives the train ahead to the next station.",
        "The train rolls on to the next station.",
        "{name} pushes the train one stop forward.",
        "Slowly, the train advances by one station.",
    ),
    3: (  # -1
        "The train moves back one station.",
        "{name} drives the train back to the previous station.",
        "The train rolls back to the previous station.",
        "{name} pulls the train one stop backward.",
        "Slowly, the train reverses by one station.",
    ),
    1: (  # stay
        "The train waits at its station.",
        "{name} keeps the train where it is.",
        "The train stays at the same station for a while.",
        "{name} looks at the train, which does not move.",
    ),
    "question": ("At which station is the train now?", "Which station is the train at?"),
    "answers": NUMBERS,
}

_CUPS = {
    "intro": (
        "Five cups stand upside down in a row, and a coin is hidden under the first cup.",
        "{name} puts a coin under the first of five cups standing in a row.",
    ),
    "question": ("Under which cup is the coin now?", "Which cup hides the coin?"),
    "answers": ORDINALS,
}


def cup_templates(perm: tuple[int, ...]) -> tuple[str, ...]:
    """Sentences for the cup permutation `perm` (the cup at position i moves to position perm[i])."""
    n = len(perm)
    if perm == tuple((i + 1) % n for i in range(n)):
        return (
            "Every cup slides one place to the right, and the last cup moves to the front.",
            "{name} shifts all the cups one place to the right, putting the last cup at the front.",
            "The cups rotate: each moves one place right and the last one goes to the front.",
        )
    if perm == tuple((i - 1) % n for i in range(n)):
        return (
            "Every cup slides one place to the left, and the front cup moves to the end.",
            "{name} shifts all the cups one place to the left, putting the front cup last.",
        )
    cycles = permutation_cycles(perm)
    if all(len(c) == 2 for c in cycles) and len(cycles) == 1:
        ((i, j),) = cycles
        a, b = ORDINALS[i], ORDINALS[j]
        return (
            f"{{name}} swaps the {a} and {b} cups.",
            f"The {a} cup and the {b} cup trade places.",
            f"{{name}} quickly exchanges the {a} cup with the {b} cup.",
        )
    if all(len(c) == 2 for c in cycles) and len(cycles) == 2:
        (i, j), (k, m) = cycles
        a, b, c, d = ORDINALS[i], ORDINALS[j], ORDINALS[k], ORDINALS[m]
        return (
            f"{{name}} swaps the {a} and {b} cups, and also the {c} and {d} cups.",
            f"The {a} and {b} cups trade places, and so do the {c} and {d} cups.",
        )
    moves = ", ".join(f"the {ORDINALS[i]} cup goes to the {ORDINALS[perm[i]]} place" for c in cycles for i in c)
    return (f"{{name}} moves the cups: {moves}.",)


def _check_count(name: str, value) -> None:
    """ValueError naming `name` unless `value` is an int >= 0 (a bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


@dataclass
class NLStory:
    """One rendered story. `prompt` ends with "Answer:"; `answer` is the class, `answer_word` its word.

    `transition_ends[k]` is the character offset in `prompt` where the k-th transition sentence ends and
    `prefix_answers[k]` the answer class after it (a dense training signal, like every-prefix labels).
    """

    prompt: str
    answer: int
    answer_word: str
    symbols: list[int]
    num_transitions: int
    transition_ends: list[int] = field(default_factory=list)
    prefix_answers: list[int] = field(default_factory=list)


class NLStateTrackingTask:
    """A formal task (``get_task(name)``) with English templates for every input symbol.

    Attributes: ``name``, ``task`` (the formal Task), ``answer_words`` (one per answer class),
    ``num_classes``, ``transition_templates`` (token id -> templates).
    """

    def __init__(self, name: str, num_generators: int = 2):
        if name not in NL_TASK_NAMES:
            raise ValueError(f"unknown natural-language task {name!r}; accepted: {', '.join(NL_TASK_NAMES)}")
        self.name = name
        self.task = get_task(name, **({"num_generators": num_generators} if name in ("a5", "s5") else {}))
        if isinstance(self.task, PermutationGroupTask):
            spec = dict(_CUPS)
            for token, perm in enumerate(self.task.generators, start=1):
                spec[token] = cup_templates(perm)
        else:
            spec = _PARITY if name == "parity" else _CYCLE
        self.intro_templates: tuple[str, ...] = spec["intro"]
        self.question_templates: tuple[str, ...] = spec["question"]
        self.answer_words: tuple[str, ...] = spec["answers"]
        self.transition_templates: dict[int, tuple[str, ...]] = {t: spec[t] for t in range(1, self.task.vocab_size)}
        self.num_classes = len(self.answer_words)

    def answer_class(self, label: int) -> int:
        """Answer class of the formal task's state class `label` (for the cups: the coin's position)."""
        if isinstance(self.task, PermutationGroupTask):
            return self.task.elements[label][0]
        return label

    @staticmethod
    def _fill(template: str, rng: random.Random, opener_prob: float = 0.0) -> str:
        text = template.replace("{name}", NAMES[int(rng.random() * len(NAMES))])
        if opener_prob and rng.random() < opener_prob:
            if not template.startswith("{name}"):
                text = text[0].lower() + text[1:]
            text = f"{OPENERS[int(rng.random() * len(OPENERS))]} {text}"
        return text

    def sample(
        self,
        num_transitions: int,
        rng: random.Random,
        distractor_prob: float = 0.0,
        with_question: bool = True,
        preamble_sentences: int = 0,
    ) -> NLStory:
        """A story of exactly `num_transitions` transition sentences (plus distractors with probability
        `distractor_prob` before each transition), after `preamble_sentences` distractors that open the story."""
        if isinstance(num_transitions, bool) or not isinstance(num_transitions, int) or num_transitions < 1:
            raise ValueError(f"num_transitions must be an int >= 1, got {num_transitions!r}")
        if not 0.0 <= distractor_prob < 1.0:
            raise ValueError(f"distractor_prob must be in [0, 1), got {distractor_prob!r}")
        _check_count("preamble_sentences", preamble_sentences)
        symbols, labels = self.task.sample(num_transitions, rng)
        text = self._fill(self.intro_templates[int(rng.random() * len(self.intro_templates))], rng)
        for _ in range(preamble_sentences):
            text += " " + self._fill(DISTRACTORS[int(rng.random() * len(DISTRACTORS))], rng, 0.3)
        ends = []
        for symbol in symbols:
            if distractor_prob and rng.random() < distractor_prob:
                text += " " + self._fill(DISTRACTORS[int(rng.random() * len(DISTRACTORS))], rng, 0.3)
            options = self.transition_templates[symbol]
            text += " " + self._fill(options[int(rng.random() * len(options))], rng, 0.3)
            ends.append(len(text))
        if with_question:
            question = self.question_templates[int(rng.random() * len(self.question_templates))]
            text += f" Question: {question} {ANSWER_PROMPT}"
        answers = [self.answer_class(label) for label in labels]
        return NLStory(text, answers[-1], self.answer_words[answers[-1]], list(symbols), num_transitions, ends, answers)

    def all_templates(self) -> list[str]:
        out = list(self.intro_templates) + list(self.question_templates) + list(DISTRACTORS)
        for options in self.transition_templates.values():
            out.extend(options)
        return out + [f"Question: {ANSWER_PROMPT}", " ".join(self.answer_words), " ".join(OPENERS)]

    def __repr__(self) -> str:
        return f"NLStateTrackingTask(name={self.name!r}, num_classes={self.num_classes})"


def get_nl_task(name: str, **kwargs) -> NLStateTrackingTask:
    return NLStateTrackingTask(name, **kwargs)


_WORD = re.compile(r"\w+|[^\w\s]+")


def words_of(text: str) -> list[str]:
    """Lower-cased word / punctuation pieces, the split a word-level tokenizer of these stories uses."""
    return _WORD.findall(text.lower())


def task_vocabulary(tasks) -> list[str]:
    """Every word any story of `tasks` can contain (sorted), for building a word-level tokenizer."""
    words = set(words_of(" ".join(NAMES)))
    for task in tasks:
        for template in task.all_templates():
            words.update(words_of(template.replace("{name}", "")))
    return sorted(words)


def answer_token_ids(task: NLStateTrackingTask, tokenizer) -> list[int]:
    """Token id the model must produce after "Answer:" for each class: the first token of " <word>"."""
    ids = []
    for word in task.answer_words:
        pieces = tokenizer.encode(" " + word, add_special_tokens=False)
        if not pieces:
            raise ValueError(f"the tokenizer maps the answer word {word!r} to no token")
        ids.append(pieces[0])
    if len(set(ids)) != len(ids):
        raise ValueError(
            f"answer words {list(task.answer_words)} of task {task.name!r} share first tokens {ids} with this "
            "tokenizer; the answer class would be ambiguous"
        )
    return ids


class NLStateTrackingDataset(torch.utils.data.Dataset):
    """``num_samples`` tokenised stories, the number of transitions uniform in ``[min_transitions,
    max_transitions]``, each opened by a number of distractor sentences uniform in ``[0, max_preamble_sentences]``
    (training stories whose transitions also come late, at the positions of longer test stories). Item ``i`` is
    generated from a ``random.Random`` seeded by ``(seed, i)``, so items are deterministic and random-access.

    Items: ``input_ids`` (L,) long (the prompt, ending with "Answer:"), ``label`` (answer class),
    ``answer_token`` (the token id to predict next), ``num_transitions``, ``length`` (L), and
    ``supervised_positions`` / ``supervised_labels`` (num_transitions + 1,): the last token of every transition
    sentence with the answer after it, then the final position with the answer.
    """

    def __init__(
        self,
        task: NLStateTrackingTask,
        tokenizer,
        num_samples: int,
        min_transitions: int,
        max_transitions: int,
        seed: int,
        distractor_prob: float = 0.0,
        max_preamble_sentences: int = 0,
    ):
        if not isinstance(task, NLStateTrackingTask):
            raise ValueError(f"task must be an NLStateTrackingTask (see get_nl_task), got {type(task).__name__}")
        _check_count("num_samples", num_samples)
        if not (isinstance(min_transitions, int) and isinstance(max_transitions, int)):
            raise ValueError(
                f"min_transitions / max_transitions must be ints, got {min_transitions!r}, {max_transitions!r}"
            )
        if not 1 <= min_transitions <= max_transitions:
            raise ValueError(
                f"need 1 <= min_transitions <= max_transitions, got min_transitions={min_transitions}, "
                f"max_transitions={max_transitions}"
            )
        if not 0.0 <= distractor_prob < 1.0:
            raise ValueError(f"distractor_prob must be in [0, 1), got {distractor_prob!r}")
        _check_count("max_preamble_sentences", max_preamble_sentences)
        self.task = task
        self.tokenizer = tokenizer
        self.num_samples = num_samples
        self.min_transitions = min_transitions
        self.max_transitions = max_transitions
        self.seed = seed
        self.distractor_prob = distractor_prob
        self.max_preamble_sentences = max_preamble_sentences
        self.answer_ids = answer_token_ids(task, tokenizer)

    def __len__(self) -> int:
        return self.num_samples

    def story(self, i: int) -> NLStory:
        i = checked_index(i, self.num_samples)
        rng = random.Random(f"hf_ssm.nl_state_tracking:{self.task.name}:{self.seed}:{i}")
        count = self.min_transitions + int(rng.random() * (self.max_transitions - self.min_transitions + 1))
        # drawn only when asked for, so that the stories without a preamble stay those of earlier releases
        preamble = int(rng.random() * (self.max_preamble_sentences + 1)) if self.max_preamble_sentences else 0
        return self.task.sample(count, rng, self.distractor_prob, preamble_sentences=preamble)

    def __getitem__(self, i) -> dict:
        story = self.story(i)
        ids, ends = token_ends(self.tokenizer, story.prompt, story.transition_ends)
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "label": story.answer,
            "answer_token": self.answer_ids[story.answer],
            "num_transitions": story.num_transitions,
            "length": len(ids),
            # Dense signal: the answer after every transition, at the last token of its sentence, then the final one.
            "supervised_positions": torch.tensor(ends + [len(ids) - 1], dtype=torch.long),
            "supervised_labels": torch.tensor(story.prefix_answers + [story.answer], dtype=torch.long),
        }


def token_ends(tokenizer, text: str, char_ends: list[int]) -> tuple[list[int], list[int]]:
    """Token ids of `text` and, for each character offset in `char_ends`, the index of the last token that
    starts before it (the token ending that sentence). Uses offset mappings where the tokenizer has them."""
    try:
        encoded = tokenizer(text, return_offsets_mapping=True)
        ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    except (NotImplementedError, TypeError, KeyError):
        ids = tokenizer.encode(text)
        return ids, [len(tokenizer.encode(text[:end])) - 1 for end in char_ends]
    starts = [start if end > start else -1 for start, end in offsets]  # special tokens: (0, 0)
    out, k = [], 0
    for end in char_ends:
        while k + 1 < len(starts) and starts[k + 1] < end:
            k += 1
        out.append(k)
    return ids, out


def sentence_token_mismatches(tokenizer, story: NLStory) -> list[str]:
    """The transition sentences of `story` that do not tokenise on their own boundaries: cutting the prompt at
    every transition end, the tokens of the pieces, concatenated, must be the tokens of the whole prompt (so no
    token straddles two sentences and a sentence's tokens do not depend on what precedes it). Returns the
    offending pieces (empty when every boundary holds)."""
    cuts = [0, *story.transition_ends, len(story.prompt)]
    pieces = [story.prompt[a:b] for a, b in zip(cuts, cuts[1:])]
    whole = tokenizer.encode(story.prompt, add_special_tokens=False)
    bad, at = [], 0
    for piece in pieces:
        ids = tokenizer.encode(piece, add_special_tokens=False)
        if whole[at : at + len(ids)] != ids:
            bad.append(piece)
        at += len(ids)
    if at != len(whole) and not bad:
        bad.append(pieces[-1])
    return bad


def check_sentence_tokenization(task: NLStateTrackingTask, tokenizer, num_stories: int = 64, seed: int = 0) -> dict:
    """Check `sentence_token_mismatches` on `num_stories` stories of 1-20 transitions (with distractors);
    ValueError naming a sentence that breaks. Returns {"stories", "transitions", "tokens"} of the stories seen."""
    rng = random.Random(f"hf_ssm.nl_tokenization:{task.name}:{seed}")
    transitions = tokens = 0
    for _ in range(num_stories):
        story = task.sample(1 + int(rng.random() * 20), rng, distractor_prob=0.3)
        bad = sentence_token_mismatches(tokenizer, story)
        if bad:
            raise ValueError(
                f"task {task.name!r}: with tokenizer {type(tokenizer).__name__} the sentence {bad[0]!r} does not "
                "tokenise on its own boundaries (its tokens change with the text around it), so the end of a "
                "transition is not a token boundary"
            )
        transitions += story.num_transitions
        tokens += len(tokenizer.encode(story.prompt, add_special_tokens=False))
    return {"stories": num_stories, "transitions": transitions, "tokens": tokens}


def collate_nl_state_tracking(batch: list[dict], pad_id: int, padding_side: str = "left") -> dict:
    """Pad a list of dataset items (left by default, so every prompt ends at the last position).

    Returns ``input_ids`` (B, L) long, ``attention_mask`` (B, L) long (1 real, 0 pad), ``position_ids`` (B, L)
    long counting real tokens from 0, ``label``, ``answer_token``, ``num_transitions``, ``length`` (B,) long, and
    ``supervised_positions`` / ``supervised_labels`` (B, S) long (padded with -1 / -100): the end of every
    transition sentence and the final position, with the answer class there.
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    if not batch:
        raise ValueError("batch must contain at least one item")
    lengths = [int(item["input_ids"].shape[0]) for item in batch]
    width = max(lengths)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (item, n) in enumerate(zip(batch, lengths)):
        cols = slice(width - n, width) if padding_side == "left" else slice(0, n)
        input_ids[row, cols] = item["input_ids"]
        mask[row, cols] = 1
    out = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp_min(0),
        "length": torch.tensor(lengths, dtype=torch.long),
    }
    for key in ("label", "answer_token", "num_transitions"):
        out[key] = torch.tensor([int(item[key]) for item in batch], dtype=torch.long)
    if all("supervised_positions" in item for item in batch):
        # (B, S) positions in the padded batch (-1 where a row has fewer) and their labels (-100 there).
        most = max(int(item["supervised_positions"].shape[0]) for item in batch)
        positions = torch.full((len(batch), most), -1, dtype=torch.long)
        labels = torch.full((len(batch), most), -100, dtype=torch.long)
        for row, (item, n) in enumerate(zip(batch, lengths)):
            count = int(item["supervised_positions"].shape[0])
            shift = width - n if padding_side == "left" else 0
            positions[row, :count] = item["supervised_positions"] + shift
            labels[row, :count] = item["supervised_labels"]
        out["supervised_positions"], out["supervised_labels"] = positions, labels
    return out


def narrative_corpus(
    tasks,
    num_texts: int,
    min_transitions: int,
    max_transitions: int,
    seed: int,
    distractor_prob: float = 0.2,
    group_size: int = 1,
) -> list[str]:
    """Stories without question or answer (language-modelling text that teaches no answer), cycling over `tasks`.

    Consecutive groups of `group_size` texts share one number of transitions, so a batch of one group needs
    little padding.
    """
    if not 1 <= min_transitions <= max_transitions:
        raise ValueError(f"need 1 <= min_transitions <= max_transitions, got [{min_transitions}, {max_transitions}]")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    rng = random.Random(f"hf_ssm.nl_corpus:{seed}")
    out = []
    for i in range(num_texts):
        if i % group_size == 0:
            count = min_transitions + int(rng.random() * (max_transitions - min_transitions + 1))
        out.append(tasks[i % len(tasks)].sample(count, rng, distractor_prob, with_question=False).prompt)
    return out
