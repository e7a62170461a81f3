"""One rendered natural-language state-tracking story (`NLStory`), the record every story generator of the
natural-language suite returns (nl_state_tracking.py: the automaton stories; shuffled_objects.py: BIG-Bench Hard's
tracking_shuffled_objects format)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ANSWER_PROMPT", "NLStory"]

ANSWER_PROMPT = "Answer:"


@dataclass
class NLStory:
    """One rendered story. `prompt` ends with "Answer:"; `answer` is the class, `answer_word` its word.

    `transition_ends[k]` is the character offset in `prompt` where the k-th transition sentence ends and
    `prefix_answers[k]` the answer class after it (a dense training signal, like every-prefix labels; -100 where
    the story defines none, e.g. when the question names what it asks about only after the transitions).

    Multiple-choice stories (tracking_shuffled_objects) also fill `benchmark_input` (the story in the benchmark's
    own format, options included, without "Answer:"), `choice` (the answer as the benchmark scores it, "(B)"),
    `free_answer` (the chosen option's text, "Frankenstein"), `num_objects` and `roles`: (start, end, role) character
    spans of `prompt` with the part each piece of text plays (shuffled_objects.ROLES: a person's name, an object in
    the introduction, a swap's full stop, an option's letter and text), the training labels of the entity-tracking
    adapter's tagger (docs/adapter.md); the other stories leave them empty.
    """

    prompt: str
    answer: int
    answer_word: str
    symbols: list[int]
    num_transitions: int
    transition_ends: list[int] = field(default_factory=list)
    prefix_answers: list[int] = field(default_factory=list)
    benchmark_input: str = ""
    choice: str = ""
    free_answer: str = ""
    num_objects: int = 0
    roles: list[tuple[int, int, int]] = field(default_factory=list)
