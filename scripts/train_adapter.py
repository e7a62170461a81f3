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
import shlex
import sys

from hf_ssm.training.adapter_experiment import check_resume_settings, run_experiment
from hf_ssm.training.adapter_records import results_table, summary_records, update_summary_json
from hf_ssm.training.adapter_settings import AdapterExperimentSettings
from hf_ssm.training.cli import FlagAction, run_folder, settings_from_args, settings_parser


def build_parser() -> argparse.ArgumentParser:
    parser = settings_parser(AdapterExperimentSettings, description=__doc__)
    parser.add_argument("--output_dir", default=None, help="run folder (default runs/adapter/<task>-<time>)")
    parser.add_argument("--resume", action="store_true", help="reuse the base and finished methods, resume checkpoints")
    parser.add_argument(
        "--summary",
        "--summary_json",
        action=FlagAction,
        deprecated=("--summary_json",),
        default="",
        help="also merge one record per method into this JSON list (e.g. results/adapter/summary.json); "
        "--summary_json: its deprecated spelling",
    )
    parser.add_argument(
        "--model_card_dir",
        default="",
        help="also publish the adapter's model card into this folder, e.g. model_cards (default: only the run "
        "folder's copy, <output_dir>/<method>/adapter/README.md; publishing overwrites a card of the same name)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = settings_from_args(AdapterExperimentSettings, args)
    out = run_folder(args.output_dir, f"runs/adapter/{settings.task}-")
    try:
        settings.validate()
        if args.resume:  # a changed setting is refused, naming it, before the run folder is touched
            check_resume_settings(settings, out)
    except ValueError as err:
        parser.error(str(err))
    summary = run_experiment(
        settings, out, resume=args.resume, model_card_dir=args.model_card_dir or None, validated=True
    )
    if args.summary:
        command = shlex.join(["python", "scripts/train_adapter.py", *(sys.argv[1:] if argv is None else argv)])
        update_summary_json(args.summary, summary_records(summary, str(out), command))
    print(f"\n{settings.task}: answer accuracy (%) by number of transitions; written to {out}")
    print(results_table(summary["results"], summary["num_classes"]))
    print(
        f"wall time of this call {summary['wall_seconds']:.0f} s; base pretraining + training + evaluation of the "
        f"methods listed {summary['compute_seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
