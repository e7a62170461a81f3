"""scripts/eval_nl_state_tracking.py: any causal LM's own greedy answer to English state-tracking stories, with or
without an SSM adapter, scored by number of transitions; run here on a tiny offline base."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

from hf_ssm.adapters import SSMAdapterConfig, attach_ssm_adapter
from hf_ssm.adapters.tiny_base import build_tiny_qwen2, build_word_tokenizer
from hf_ssm.data import nl_state_tracking as nl
from hf_ssm.training.legacy_settings import upgrade_argv
from model_checks import ROOT, load_script, run_script

EVAL = [
    "--task", "parity", "--test_buckets", "1-3,8", "--eval_samples_per_bucket", "6", "--eval_batch_size", "4",
    "--fewshot_examples", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A saved tiny Qwen2 (random weights) with the story words' tokenizer, as an adapter run leaves in <run>/base."""
    folder = tmp_path_factory.mktemp("base")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([nl.get_nl_task("parity")]))
    model = build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=1, num_heads=2)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def test_scores_a_base_and_an_adapted_base_by_transitions(tiny_base, tmp_path):
    folder, model = tiny_base
    out = tmp_path / "base.json"
    result = run_script("eval_nl_state_tracking", "--base_model", str(folder), *EVAL, "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert [(b["min_transitions"], b["max_transitions"], b["stories"]) for b in record["buckets"]] == [
        (1, 3, 6), (8, 8, 6),
    ]  # fmt: skip
    assert all(0.0 <= b["accuracy"] <= 1.0 and b["mean_tokens"] > 0 for b in record["buckets"])
    assert record["num_classes"] == 2 and record["cpu_seconds"] > 0 and out.with_suffix(".png").is_file()
    assert "1-3:" in result.stdout and "--test_buckets 1-3,8" in record["command"]
    assert "parity 8-8" in result.stderr  # every bucket shows its progress

    adapter_dir = tmp_path / "adapter"
    config = SSMAdapterConfig(layer_index=0, mixer_settings={"pd_ssm_head_state_size": 4, "pd_ssm_dict_size": 4})
    attach_ssm_adapter(model, config).save_pretrained(adapter_dir)
    out = tmp_path / "adapted.json"
    result = run_script(
        "eval_nl_state_tracking", "--base_model", str(folder), "--adapter", str(adapter_dir), *EVAL, "--out", str(out),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(out.read_text())["adapter"] == str(adapter_dir)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--test_buckets", "1-3,x"], "`test_buckets` must look like '1-10,40,80'"),
        (["--test_buckets", "5-2"], "must satisfy 1 <= low <= high"),
        (["--eval_samples_per_bucket", "0"], "--eval_samples_per_bucket must be >= 1"),
        (["--eval_batch_size", "0"], "--eval_batch_size must be >= 1"),
        (["--fewshot_examples", "-1"], "--fewshot_examples must be >= 0"),
        (["--task", "dyck"], "invalid choice: 'dyck'"),
        (
            ["--task", "tracking_shuffled_objects", "--test_buckets", "n,2x"],
            "`test_buckets` must look like '1-7,n,4n,8n'",
        ),
    ],
)
def test_bad_arguments_exit_with_a_clear_message(args, message, capsys):
    script = load_script("eval_nl_state_tracking")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--base_model", "unused", *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("--model", "--base_model"),
        ("--num_stories", "--eval_samples_per_bucket"),
        ("--fewshot", "--fewshot_examples"),
        ("--transitions", "--test_buckets"),
        ("--batch_size", "--eval_batch_size"),
    ],
)
def test_an_old_option_spelling_is_refused_naming_the_new_one(old, new, capsys):
    """The options are named as the adapter settings they mean (AdapterExperimentSettings); the old spellings are
    hidden from --help and refused with a usage error naming the new one, before anything loads."""
    script = load_script("eval_nl_state_tracking")
    parser = script.build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--base_model", "unused", old, "1"])
    assert exit_info.value.code == 2 and f"{old} was renamed: use {new}" in capsys.readouterr().err
    visible = {o for a in parser._actions if a.help is not argparse.SUPPRESS for o in a.option_strings}
    assert old not in visible and new in visible


def test_first_word_reads_the_answer_out_of_a_continuation():
    script = load_script("eval_nl_state_tracking")
    assert (
        script.first_word(" On.\n") == "on"
        and script.first_word(" the lamp") == "the"
        and script.first_word("\n") == ""
    )


def test_an_adapter_alone_is_scored_on_its_recorded_base_with_the_adapter_defaults(tiny_base, tmp_path, capsys):
    """With --adapter and no --base_model the base is the one the adapter's config records, with no few-shot prefix
    and at 40 transitions (the defaults of an adapter's own answer); an adapter recording no base needs
    --base_model."""
    from transformers import AutoModelForCausalLM

    folder, _ = tiny_base
    model = AutoModelForCausalLM.from_pretrained(folder)  # the fixture's copy has an adapter attached already
    adapter_dir = tmp_path / "adapter"
    config = SSMAdapterConfig(
        layer_index=0,
        mixer_settings={"pd_ssm_head_state_size": 4, "pd_ssm_dict_size": 4},
        base_model_name_or_path=str(folder),
    )
    attach_ssm_adapter(model, config).save_pretrained(adapter_dir)
    out = tmp_path / "adapted.json"
    result = run_script(
        "eval_nl_state_tracking", "--adapter", str(adapter_dir), "--task", "parity", "--eval_samples_per_bucket", "2",
        "--out", str(out), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert (record["model"], record["adapter"], record["fewshot"]) == (str(folder), str(adapter_dir), 0)
    assert [(b["min_transitions"], b["max_transitions"]) for b in record["buckets"]] == [(40, 40)]

    anonymous = tmp_path / "anonymous"
    SSMAdapterConfig(layer_index=0).save_pretrained(anonymous)
    script = load_script("eval_nl_state_tracking")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--adapter", str(anonymous)])
    assert exit_info.value.code == 2 and "--base_model is required" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((ROOT / "results" / "adapter" / "generate").glob("*.json")))
def test_the_published_greedy_answers_are_product_commands(path, tmp_path):
    """Every published greedy-answer record (RESULTS.md §2, the LM-head adapters' own answer at 40) was made by a
    command whose every option is now a default: `--adapter DIR --task TASK --out FILE` resolves to the same
    arguments (the base read from an adapter config that records smollm2-135m, as the published adapters do). The
    records' commands use the options' old spellings (--model, --num_stories, ...): they read in the new ones."""
    recorded = shlex.split(json.loads(path.read_text())["command"])
    assert recorded[:2] == ["python", "scripts/eval_nl_state_tracking.py"]
    recorded = [*recorded[:2], *upgrade_argv("eval_nl_state_tracking", recorded[2:])]
    adapter = tmp_path / "adapter"  # the run folders are not in the repository: the same flags on a stand-in
    SSMAdapterConfig(layer_index=3, base_model_name_or_path="smollm2-135m").save_pretrained(adapter)
    argv = recorded[2:]
    argv[argv.index("--adapter") + 1] = str(adapter)
    task, out = argv[argv.index("--task") + 1], argv[argv.index("--out") + 1]
    script = load_script("eval_nl_state_tracking")
    parser = script.build_parser()
    published = script.resolve_defaults(parser, parser.parse_args(argv))
    product = script.resolve_defaults(
        parser, parser.parse_args(["--adapter", str(adapter), "--task", task, "--out", out])
    )
    assert vars(product) == vars(published)


def test_option_letter_reads_the_choice_out_of_a_continuation():
    """BBH's exact match on the option letter: " (B)", " B)" and " B" give B, "( c )" (a lower-casing tokenizer)
    C; a name starting with B, the article "a" and a letter past G give none."""
    script = load_script("eval_nl_state_tracking")
    texts = (" (B) Walden", " C)", " G\n", " Bob has", "\n(A)", " (H)", "( c )", " a red ball", " (D")
    assert [script.option_letter(t) for t in texts] == ["B", "C", "G", "", "A", "", "C", "", "D"]


def test_option_letter_counts_a_letter_only_in_the_forms_the_prompt_asks_for():
    """A capital letter is an answer only in the forms the BBH prompt ("A: (B)") asks for: "(A)", "A)", "A.", or
    "A" alone, before a line break or before punctuation. A continuation that starts a sentence with the article
    "A" ("A crimson ball", the option's own text) or with a word of one capital letter and more gives none."""
    script = load_script("eval_nl_state_tracking")
    answers = [" (A)", " (A) Dracula", "(A", " A)", " A.", " A", "A", " A  ", " A\n\nQ:", " A, the ball", " A:"]
    assert [script.option_letter(t) for t in answers] == ["A"] * len(answers)
    assert [script.option_letter(t) for t in (" E.", " F)", "\n\nG")] == ["E", "F", "G"]
    not_answers = [" A crimson ball", " A red present", "A ball", " A\tball", " A's", " Alice has", " A-ha", " I"]
    assert [script.option_letter(t) for t in not_answers] == [""] * len(not_answers)


@pytest.fixture(scope="module")
def tracking_base(tmp_path_factory):
    """A saved tiny Qwen2 (random weights) whose tokenizer knows the shuffled-objects stories' words."""
    folder = tmp_path_factory.mktemp("tracking_base")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([nl.get_nl_task("tracking_shuffled_objects")]))
    build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=1, num_heads=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_scores_tracking_shuffled_objects_by_objects_and_swaps(tracking_base, tmp_path, monkeypatch):
    """The BBH-style run: buckets per n (here n and 2n swaps), three solved shots of the same n before each
    question, the generation's option letter scored against the answer's: a model that always continues with the
    right "(X)" scores 100 %, one that always says "(A)" scores 100 % only where (A) is right."""
    import torch
    from transformers import GenerationMixin, PreTrainedTokenizerFast

    from hf_ssm.data import shuffled_objects as so

    script = load_script("eval_nl_state_tracking")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tracking_base)  # as the script loads a word-level one
    tail = tokenizer.encode("\nA:", add_special_tokens=False)
    asked = {}  # token ids of each story's benchmark input -> its choice
    real_story = so.shuffled_objects_story

    def recording_story(*args, **kwargs):
        story = real_story(*args, **kwargs)
        asked[tuple(tokenizer.encode(story.benchmark_input, add_special_tokens=False))] = story.choice
        return story

    seen = {"rows": 0, "right_is_a": 0}

    def fake_generate(self, input_ids, attention_mask, **kwargs):
        """Finds the story each prompt ends with and continues with its choice (or with "(A)")."""
        rows = []
        for ids, mask in zip(input_ids, attention_mask):
            real = ids[mask.bool()].tolist()
            assert real[-len(tail) :] == tail and real.count(tokenizer.encode("Q", add_special_tokens=False)[0]) == 4
            choice = next(c for key, c in asked.items() if real[-len(tail) - len(key) : -len(tail)] == list(key))
            seen["rows"] += 1
            seen["right_is_a"] += choice == "(A)"
            rows.append(tokenizer.encode(" " + (choice if mode == "right" else "(A)"), add_special_tokens=False))
        width = max(len(r) for r in rows)
        extra = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, extra], dim=1)

    monkeypatch.setattr(so, "shuffled_objects_story", recording_story)
    monkeypatch.setattr(GenerationMixin, "generate", fake_generate)
    args = ["--base_model", str(tracking_base), "--task", "tracking_shuffled_objects", "--test_buckets", "n,2n",
            "--eval_samples_per_bucket", "4", "--eval_batch_size", "4"]  # fmt: skip
    mode = "right"
    assert script.main([*args, "--out", str(tmp_path / "right.json")]) == 0
    record = json.loads((tmp_path / "right.json").read_text())
    assert [(b["objects"], b["min_transitions"], b["stories"]) for b in record["buckets"]] == [
        (3, 3, 4), (3, 6, 4), (5, 5, 4), (5, 10, 4), (7, 7, 4), (7, 14, 4),
    ]  # fmt: skip
    assert record["fewshot"] == 3 and record["scoring"] == "option letter (BBH exact match)"
    assert all(b["accuracy"] == 1.0 and b["chance"] == 1 / b["objects"] for b in record["buckets"])
    assert seen["rows"] == 24
    mode, seen["right_is_a"] = "always_a", 0
    assert script.main([*args, "--out", str(tmp_path / "a.json")]) == 0
    record = json.loads((tmp_path / "a.json").read_text())
    assert sum(b["accuracy"] * b["stories"] for b in record["buckets"]) == seen["right_is_a"] < 24


def test_few_shot_prefix_cache_gives_the_answers_of_the_whole_prompts():
    """Scoring BIG-Bench Hard's format runs the shared 3-shot prefix once and continues every story from a copy of
    its KV cache (left-padded between prefix and story): the greedy continuations equal those of generating from
    each whole prompt on its own."""
    import torch

    from hf_ssm.data.shuffled_objects import bbh_fewshot_prefix, bbh_fewshot_prompt

    script = load_script("eval_nl_state_tracking")
    task = nl.get_nl_task("tracking_shuffled_objects")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([task]))
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    model = build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=2, num_heads=2).eval()
    rng = __import__("random").Random(0)
    shots = script.bbh_shots(task, 5, 3, 1)
    stories = [task.with_objects(5).sample(rng.randint(1, 12), rng) for _ in range(5)]  # different lengths
    prompts = [bbh_fewshot_prompt(s, shots) for s in stories]
    prefix = bbh_fewshot_prefix(shots)
    prefix_ids, cache = script.shared_prefix_cache(model, tokenizer, prefix)
    cached = script.generate_after_prefix(model, tokenizer, prompts, prefix_ids, cache, max_new_tokens=3)
    for prompt, (row, length) in zip(prompts, cached):
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        whole = model.generate(input_ids=ids, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        assert row.tolist() == whole[0, ids.shape[1] :].tolist() and length == ids.shape[1]
    with pytest.raises(ValueError, match="shared few-shot prefix"):
        script.generate_after_prefix(model, tokenizer, ["Q: nothing"], prefix_ids, cache, max_new_tokens=1)


def own_bbh_file(folder, objects: int = 3, count: int = 5):
    """A task file in BIG-Bench Hard's published format made of the package's own stories (the benchmark's files are
    for evaluation only)."""
    import random

    from hf_ssm.data import shuffled_objects as so

    rng = random.Random(3)
    stories = [so.shuffled_objects_story(objects, objects, rng, "balls", layout="newline") for _ in range(count)]
    path = folder / f"own_{objects}.json"
    examples = [{"input": s.benchmark_input, "target": s.choice} for s in stories]
    path.write_text(json.dumps({"canary": "the tests' own", "examples": examples}))
    return path


def test_scores_a_bbh_file_item_by_item_and_logs_every_evaluation(tracking_base, tmp_path, capsys):
    """--bbh_file: every item scored by the option letter's log-likelihood (the arg-max of its options' log-probs)
    and by the greedy answer's letter, the accuracies those of the per-item predictions, the file's sha256 in the
    record and in a line appended to the log; a record is never overwritten (the second run is refused, nothing
    logged), and a malformed file is refused naming what is wrong before any model is loaded."""
    import hashlib

    script = load_script("eval_nl_state_tracking")
    path, log, out = own_bbh_file(tmp_path), tmp_path / "log.jsonl", tmp_path / "record.json"
    args = ["--base_model", str(tracking_base), "--bbh_file", str(path), "--bbh_log", str(log), "--eval_batch_size",
            "2"]  # fmt: skip
    assert script.main([*args, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() and record["items"] == 5
    assert (record["prompt"], record["fewshot"], set(record["accuracy"])) == ("qa", 3, {"loglik", "greedy"})
    targets = [example["target"] for example in json.loads(path.read_text())["examples"]]
    assert [(p["index"], p["target"]) for p in record["predictions"]] == list(enumerate(targets))
    for p in record["predictions"]:
        assert p["loglik"] == "ABC"[max(range(3), key=p["logprobs"].__getitem__)]
        assert p["greedy"] == script.option_letter(p["text"])
    for scoring in ("loglik", "greedy"):
        right = sum(p[scoring] == p["target"][1] for p in record["predictions"])
        assert record["accuracy"][scoring] == right / 5
    assert script.main([*args, "--out", str(tmp_path / "again.json"), "--fewshot_examples", "0"]) == 0
    first, second = [json.loads(text) for text in log.read_text().splitlines()]
    assert (first["sha256"], first["out"], first["accuracy"]) == (record["sha256"], str(out), record["accuracy"])
    assert (second["out"], second["fewshot"]) == (str(tmp_path / "again.json"), 0)
    with pytest.raises(SystemExit) as exit_info:
        script.main([*args, "--out", str(out)])
    assert exit_info.value.code == 2 and "is never overwritten" in capsys.readouterr().err
    assert len(log.read_text().splitlines()) == 2
    broken = tmp_path / "broken.json"
    data = json.loads(path.read_text())
    data["examples"][2]["target"] = "(D)"
    broken.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--base_model", "no/such/model", "--bbh_file", str(broken), "--bbh_log", str(log)])
    assert exit_info.value.code == 2 and "examples[2].target '(D)' is not one of its options" in capsys.readouterr().err


def test_log_likelihood_after_a_cached_prefix_equals_the_whole_prompt():
    """The letters' logits after the shared few-shot prefix's cache (left-padded prompts of different lengths) equal
    those of each whole prompt run on its own."""
    import torch

    from hf_ssm.data.shuffled_objects import bbh_fewshot_prefix, bbh_fewshot_prompt

    script = load_script("eval_nl_state_tracking")
    task = nl.get_nl_task("tracking_shuffled_objects")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([task]))
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    model = build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=2, num_heads=2).eval()
    shots = script.bbh_shots(task, 3, 3, 1)
    rng = __import__("random").Random(1)
    prompts = [bbh_fewshot_prompt(task.with_objects(3).sample(rng.randint(1, 9), rng), shots) + " (" for _ in range(4)]
    prefix_ids, cache = script.shared_prefix_cache(model, tokenizer, bbh_fewshot_prefix(shots))
    cached = script.logits_after_prefix(model, tokenizer, prompts, prefix_ids, cache)
    for prompt, row in zip(prompts, cached):
        whole = model(**tokenizer(prompt, return_tensors="pt")).logits[0, -1]
        # tight: the random tiny model's logits (|l| < 0.4) move by ~3e-5 when the padded rows' positions are off
        torch.testing.assert_close(row, whole, atol=1e-6, rtol=0)


def test_an_entity_tracker_is_scored_by_its_classifier_and_asked_as_it_was_trained(
    tracking_base, tmp_path, monkeypatch, capsys
):
    """An entity tracker with the classifier readout, on a BIG-Bench Hard file: scored by its classifier (no
    generation), the prompt "<input>\\nAnswer:" and no shots. With the LM-head readout, on generated stories of the
    "varied" variety: generate() gets the stories as the adapter was trained, each ending with "\\nAnswer:", no Q/A
    shots, and its answer word (the bare letter) is read."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationMixin

    script = load_script("eval_nl_state_tracking")
    folders = {}
    for readout in ("classifier", "lm_head"):
        base = AutoModelForCausalLM.from_pretrained(tracking_base)
        config = SSMAdapterConfig(kind="entity_tracking", readout=readout, num_labels=7, layer_index=0,
                                  base_model_name_or_path=str(tracking_base))  # fmt: skip
        folders[readout] = tmp_path / readout
        attach_ssm_adapter(base, config).save_pretrained(folders[readout])
    out = tmp_path / "classifier.json"
    path = own_bbh_file(tmp_path, objects=5, count=3)
    argv = ["--adapter", str(folders["classifier"]), "--bbh_file", str(path), "--bbh_log", str(tmp_path / "log")]
    assert script.main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert (record["prompt"], record["fewshot"], list(record["accuracy"])) == ("answer", 0, ["classifier"])
    assert all(len(p["scores"]) == 5 and p["classifier"] in "ABCDE" for p in record["predictions"])

    prompts = []

    def fake_generate(self, input_ids, attention_mask, **kwargs):
        tokenizer = __import__("transformers").PreTrainedTokenizerFast.from_pretrained(tracking_base)
        prompts.extend(tokenizer.decode(row[mask.bool()]) for row, mask in zip(input_ids, attention_mask))
        answer = torch.tensor(tokenizer.encode(" b", add_special_tokens=False)).expand(len(input_ids), -1)
        return torch.cat([input_ids, answer], 1)

    monkeypatch.setattr(GenerationMixin, "generate", fake_generate)
    out = tmp_path / "lm_head.json"
    argv = ["--adapter", str(folders["lm_head"]), "--task", "tracking_shuffled_objects", "--story_variety", "varied",
            "--test_buckets", "n", "--eval_samples_per_bucket", "2", "--out", str(out)]  # fmt: skip
    assert script.main(argv) == 0
    record = json.loads(out.read_text())
    # (the word-level tokenizer decodes "\nAnswer:" as " answer :")
    assert len(prompts) == 6 and all(p.endswith(" answer :") and "q :" not in p for p in prompts)
    assert record["story_variety"] == "varied" and record["fewshot"] == 0
    assert [b["answers"] for b in record["buckets"]] == [{"B": 2}] * 3  # the bare letter " b" read as B
    with pytest.raises(SystemExit) as exit_info:  # shots would be read as the story's people
        script.main([*argv, "--fewshot_examples", "2"])
    assert exit_info.value.code == 2 and "use --fewshot_examples 0" in capsys.readouterr().err


def test_a_classifier_tracker_answers_generated_stories_by_its_classifier(tracking_base, tmp_path, monkeypatch):
    """On generated stories an adapter with the classifier readout answers by its classifier (the frozen head's
    generated tokens would be the base's answer, not the adapter's): generate() is never called, and each bucket's
    accuracy is that of the classifier's best option among the story's n."""
    from transformers import AutoModelForCausalLM, GenerationMixin

    from hf_ssm.adapters.bases import load_base
    from hf_ssm.data.shuffled_objects import ShuffledObjectsTask

    script = load_script("eval_nl_state_tracking")
    base = AutoModelForCausalLM.from_pretrained(tracking_base)
    config = SSMAdapterConfig(kind="entity_tracking", readout="classifier", num_labels=7, layer_index=0,
                              base_model_name_or_path=str(tracking_base))  # fmt: skip
    folder = tmp_path / "classifier"
    attach_ssm_adapter(base, config).save_pretrained(folder)

    def no_generate(*args, **kwargs):
        raise AssertionError("a classifier-readout adapter must not be scored by generation")

    monkeypatch.setattr(GenerationMixin, "generate", no_generate)
    out = tmp_path / "generated.json"
    argv = ["--adapter", str(folder), "--task", "tracking_shuffled_objects", "--story_variety", "heldout_roles",
            "--test_buckets", "n", "--eval_samples_per_bucket", "3", "--out", str(out)]  # fmt: skip
    assert script.main(argv) == 0
    record = json.loads(out.read_text())
    model, tokenizer = load_base(str(tracking_base))
    tokenizer.padding_side = "left"
    model = script.load_ssm_adapter(model, str(folder))
    task = ShuffledObjectsTask(variety="heldout_roles")
    for bucket, objects in zip(record["buckets"], (3, 5, 7)):
        rng = __import__("random").Random(f"hf_ssm.eval_nl:{task.stream_name}:0:{objects}:{objects}-{objects}")
        stories = [task.with_objects(objects).sample(rng.randint(objects, objects), rng) for _ in range(3)]
        scores = script.classifier_scores(model, tokenizer, [s.prompt for s in stories])[:, :objects]
        expected = sum(int(row.argmax()) == s.answer for row, s in zip(scores, stories)) / 3
        assert bucket["objects"] == objects and bucket["accuracy"] == expected


def test_a_classifier_adapter_answers_by_its_classifier_on_every_task(tiny_base, tmp_path, monkeypatch):
    """A mixer adapter with the classifier readout on parity stories: answered by its classifier's best class word
    (never by generate(), whose answer would be the frozen base's)."""
    from transformers import AutoModelForCausalLM, GenerationMixin

    folder, _ = tiny_base
    model = AutoModelForCausalLM.from_pretrained(folder)  # a fresh base: the fixture's may carry an adapter already
    adapter_dir = tmp_path / "adapter"
    config = SSMAdapterConfig(layer_index=0, readout="classifier", num_labels=2,
                              mixer_settings={"pd_ssm_head_state_size": 4, "pd_ssm_dict_size": 4})  # fmt: skip
    attach_ssm_adapter(model, config).save_pretrained(adapter_dir)

    def no_generate(*args, **kwargs):
        raise AssertionError("a classifier-readout adapter must not be scored by generation")

    monkeypatch.setattr(GenerationMixin, "generate", no_generate)
    out = tmp_path / "adapted.json"
    argv = ["--base_model", str(folder), "--adapter", str(adapter_dir), *EVAL, "--out", str(out)]
    assert load_script("eval_nl_state_tracking").main(argv) == 0
    buckets = json.loads(out.read_text())["buckets"]
    assert all(set(b["answers"]) <= {"off", "on"} and sum(b["answers"].values()) == b["stories"] for b in buckets)
