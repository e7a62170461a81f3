"""Show a trained SSM adapter at work: one long story, the base model's own answer and the adapted model's answer.

Loads the base (a named base such as `smollm2-135m`, a local folder or a hub id; by default the base recorded in the
adapter's config), writes one story of `--transitions` transition sentences, and prints it with the correct
answer, the base's greedy answer after a few-shot prompt of solved short stories, and the adapted model's answer:

    python scripts/demo_adapter.py --adapter runs/experiments/parity_h16/s0/ssm_classifier/adapter --task parity
    python scripts/demo_adapter.py --adapter <dir> --base_model Qwen/Qwen2.5-1.5B --task cycle_navigation \\
        --transitions 80

An adapter with the classifier readout answers through its classifier (the answer word of its class at the last
position); one with the LM-head readout answers through the frozen model's own head (`generate`, greedy). About a
minute on one CPU core with SmolLM2-135M.
"""

from __future__ import annotations

import argparse
import random
import sys
import textwrap
import time
from pathlib import Path

import torch
from eval_nl_state_tracking import first_word

from hf_ssm.adapters import SSMAdapterConfig, load_ssm_adapter
from hf_ssm.adapters.bases import DTYPES, load_base
from hf_ssm.data.nl_state_tracking import NL_TASK_NAMES, get_nl_task
from hf_ssm.training.adapter.scoring import fewshot_text
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS


@torch.no_grad()
def greedy_word(model, tokenizer, text: str, max_new_tokens: int = 3) -> str:
    """The first word `model` generates greedily after `text`."""
    inputs = tokenizer(text, return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return first_word(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))


@torch.no_grad()
def classifier_word(adapted, tokenizer, task, text: str) -> str:
    """The answer word of the adapter's class at the last position (the classifier readout)."""
    inputs = tokenizer(text, return_tensors="pt")
    scores = adapted(**inputs).adapter_logits[0, -1]
    return task.answer_words[int(scores.argmax())]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", required=True, help="an SSM adapter folder (SSMAdapterModel.save_pretrained)")
    parser.add_argument(
        "--base_model", default=None, help="base: named, local folder or hub id (default: the adapter's)"
    )
    parser.add_argument("--task", default="parity", choices=NL_TASK_NAMES)
    parser.add_argument("--transitions", type=int, default=60, help="transition sentences in the story (default 60)")
    parser.add_argument(
        "--fewshot_examples", type=int, default=4, help="solved stories of 1-10 transitions before the base's"
    )
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES))
    parser.add_argument("--seed", type=int, default=0, help="picks the story and the few-shot examples")
    # the spellings before the options took the names of the adapter settings they mean
    refuse_options(parser, RENAMED_OPTIONS["demo_adapter"])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.transitions < 1 or args.fewshot_examples < 0:
        parser.error("--transitions must be >= 1 and --fewshot_examples >= 0")
    config = SSMAdapterConfig.from_pretrained(args.adapter)
    task = get_nl_task(args.task)
    if config.num_labels is not None and config.num_labels != task.num_classes:
        parser.error(
            f"the adapter's classifier has {config.num_labels} classes and task {args.task!r} has "
            f"{task.num_classes}: pass the --task it was trained on"
        )
    base_name = args.base_model or config.base_model_name_or_path
    if not base_name:
        parser.error("the adapter config records no base model: pass --base_model")
    began = time.perf_counter()
    model, tokenizer = load_base(base_name, dtype=args.dtype)
    story = task.sample(args.transitions, random.Random(f"hf_ssm.demo:{args.task}:{args.seed}"))
    prefix = fewshot_text(task, args.fewshot_examples, args.seed + 1, 1, 10) if args.fewshot_examples else ""
    base_answer = greedy_word(model, tokenizer, prefix + story.prompt)
    adapted = load_ssm_adapter(model, args.adapter)
    if config.readout == "classifier":
        adapted_answer, how = classifier_word(adapted, tokenizer, task, story.prompt), "its classifier"
    else:
        adapted_answer, how = greedy_word(adapted, tokenizer, story.prompt), "the base's own LM head"
    print(textwrap.fill(story.prompt, width=110))
    print()
    print(f"correct answer:          {story.answer_word}")
    print(f"base {Path(base_name).name}, {args.fewshot_examples}-shot: {base_answer or '(no word)'}")
    print(f"with the adapter ({how}): {adapted_answer}")
    print(f"({story.num_transitions} transitions; {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
