"""Train an SSM adapter on a frozen causal LM for natural-language state tracking (docs/design.md §10).

With no arguments: offline, on the built-in tiny Qwen2 (word-level tokenizer, a few minutes of language-model
pretraining on question-free stories), task `parity`, comparing the frozen base + linear probe, LoRA and the
PD-SSM adapter; trained on 1-10 transitions, tested up to 80. Examples:

    python scripts/train_adapter.py
    python scripts/train_adapter.py --task cycle_navigation --base_model runs/adapter/parity/base
    python scripts/train_adapter.py --base_model smollm2-135m --task parity --seeds 0-4   # real LLM, offline
    python scripts/train_adapter.py --base_model smollm2-135m --task parity --preset lm_head --seed 0
    python scripts/train_adapter.py --base_model smollm2-135m --task tracking_shuffled_objects --preset entity --seeds 0-2
    accelerate launch scripts/train_adapter.py --base_model Qwen/Qwen2.5-1.5B --dtype bfloat16 --task s5

Presets (hf_ssm/training/adapter/experiment_settings.py): on `smollm2-135m` a run takes the task's best validated recipe of
RESULTS.md §2 unless --preset names another row's (listed below) or `none` (the plain defaults shown by each
option). Precedence: the settings' defaults, then the preset's values, then every flag given, which always wins.
--seeds 0-4 trains the seeds one after another into <output_dir>/s<seed>/ (--seed S: one run into <output_dir>).

The run folder holds settings.json, results.json / results.md, accuracy_vs_transitions.png, base/ (tiny base
only), and per method its weights (<method>/adapter, the SSM adapter with a model card README.md). The card goes
into a shared folder such as model_cards/ only when asked: --model_card_dir model_cards.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path

from hf_ssm.training.adapter.experiment import check_resume_settings, run_experiment
from hf_ssm.training.adapter.experiment_settings import (
    DEFAULT_PRESETS,
    NO_PRESET,
    PRESETS,
    AdapterExperimentSettings,
    preset_values,
    resolve_preset,
)
from hf_ssm.training.adapter.records import results_table, summary_records, update_summary_json
from hf_ssm.training.cli import (
    add_output_arguments,
    add_seeds_argument,
    defer_settings_defaults,
    given_settings,
    group_options,
    run_folder,
    settings_parser,
)

# The settings some preset sets.
PRESET_FIELDS = {
    name for tasks in PRESETS.values() for presets in tasks.values() for v in presets.values() for name in v
}
# --help's sections, common options first. "experimental": options that served one study and that no preset nor
# documented recipe uses (kept, so that the runs recorded with them can be repeated).
OPTION_GROUPS = {
    "task and data": (
        "task", "preset", "seed", "seeds", "train_min_transitions", "train_max_transitions", "train_examples",
        "train_max_preamble_sentences", "distractor_prob", "supervision", "answer_loss", "story_variety",
    ),
    "model": (
        "base_model", "dtype", "methods", "mixer", "extra_config", "layer_index", "write_layer_index",
        "transitions_at", "standardize_input", "classifier_per_head", "frozen_mixer_parameters", "adapter_kind",
        "entity_slots", "entity_tagger_width", "entity_story_ends_at_options",
        "role_loss_weight",
        "tiny_hidden_size", "tiny_layers", "tiny_heads", "pretrain_steps", "pretrain_batch_size",
        "pretrain_max_minutes",
    ),
    "optimisation": (
        "learning_rate", "batch_size", "max_steps", "min_steps", "target_accuracy", "warmup_steps", "weight_decay",
        "grad_clip", "selection_learning_rate", "write_learning_rate", "lora_learning_rate", "max_minutes_per_method",
        "feature_cache", "feature_cache_dtype", "feature_cache_max_mb",
    ),
    "evaluation": (
        "test_buckets", "heldout_buckets", "heldout_varieties", "eval_samples_per_bucket", "eval_batch_size",
        "eval_every", "fewshot_examples",
    ),
    "checkpointing and output": ("output_dir", "resume", "save_every", "summary", "model_card_dir"),
    "experimental": ("readout_learning_rate",),
}  # fmt: skip


def _shown_default(field: dataclasses.Field) -> str:
    """What --help shows as a settings option's default: its own, and whether a preset may replace it."""
    if field.name == "preset":
        return "the base and task's default preset"
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    if field.name in PRESET_FIELDS:
        return f"{default!r}; a preset may set it"
    return repr(default)


def presets_epilog() -> str:
    """The --help epilog: the presets of every base and task, the default one first."""
    lines = [
        "presets (hf_ssm/training/adapter/experiment_settings.py; the first of each task is its default, else `none`):"
    ]
    for base, tasks in PRESETS.items():
        for task, names in tasks.items():
            default = DEFAULT_PRESETS[base].get(task)
            ordered = [default, *(name for name in names if name != default)] if default else ["none", *names]
            lines.append(f"  --base_model {base} --task {task}: {', '.join(ordered)}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = settings_parser(AdapterExperimentSettings, description=__doc__)
    parser.epilog = presets_epilog()
    # A settings flag not given is a NotGiven in the namespace: the preset's value or the settings' default applies.
    defer_settings_defaults(parser, AdapterExperimentSettings, _shown_default)
    add_seeds_argument(
        parser,
        "train these seeds one after another, each into <output_dir>/s<seed> (e.g. 0-4 or 0,2,5; not with --seed)",
    )
    add_output_arguments(
        parser, "runs/adapter/<task>-<time>", "reuse the base and finished methods, resume checkpoints"
    )
    parser.add_argument(
        "--summary",
        default="",
        help="also merge one record per method into this JSON list (e.g. results/adapter/summary.json)",
    )
    parser.add_argument(
        "--model_card_dir",
        default="",
        help="also publish the adapter's model card into this folder, e.g. model_cards (default: only the run "
        "folder's copy, <output_dir>/<method>/adapter/README.md; publishing overwrites a card of the same name)",
    )
    group_options(parser, OPTION_GROUPS)
    return parser


def resolved_settings(args: argparse.Namespace) -> AdapterExperimentSettings:
    """The settings of the parsed `args`: the defaults, under the preset's values (--preset, or the base and task's
    default preset), under every flag given (--extra_config: its keys over the preset's). Raises ValueError for a
    preset the base and task do not have."""
    given = given_settings(AdapterExperimentSettings, args)
    defaults = AdapterExperimentSettings()
    base, task = given.get("base_model", defaults.base_model), given.get("task", defaults.task)
    preset = resolve_preset(base, task, given.get("preset"))
    values = preset_values(base, task, preset)
    # extra_config merges key by key: the keys given over the preset's
    config = {**values.get("extra_config", {}), **given.get("extra_config", {})}
    return AdapterExperimentSettings(**{**values, **given, "preset": preset, "extra_config": config})


def seed_runs(parser, args, settings: AdapterExperimentSettings) -> list[tuple[AdapterExperimentSettings, Path]]:
    """(settings, run folder) of every run: one per --seeds seed in <output_dir>/s<seed>, else one in <output_dir>."""
    out = run_folder(args.output_dir, f"runs/adapter/{settings.task}-")
    if args.seeds is None:
        return [(settings, out)]
    if "seed" in given_settings(AdapterExperimentSettings, args):
        parser.error("give --seed (one run) or --seeds (several), not both")
    return [(dataclasses.replace(settings, seed=seed), out / f"s{seed}") for seed in args.seeds]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = resolved_settings(args)
        settings.validate()
    except ValueError as err:
        parser.error(str(err))
    runs = seed_runs(parser, args, settings)
    try:
        for run_settings, out in runs if args.resume else []:
            # a changed setting is refused, naming it, before any run folder is touched
            check_resume_settings(run_settings, out)
    except ValueError as err:
        parser.error(str(err))
    if settings.preset != NO_PRESET:  # where the values not given come from
        print(
            f"preset {settings.preset} for {settings.base_model} / {settings.task} (hf_ssm/training/adapter/experiment_settings.py)"
        )
    command = shlex.join(["python", "scripts/train_adapter.py", *(sys.argv[1:] if argv is None else argv)])
    for run_settings, out in runs:
        summary = run_experiment(
            run_settings, out, resume=args.resume, model_card_dir=args.model_card_dir or None, validated=True
        )
        if args.summary:
            update_summary_json(args.summary, summary_records(summary, str(out), command))
        seed = run_settings.seed
        print(f"\n{run_settings.task}, seed {seed}: answer accuracy (%) by number of transitions; written to {out}")
        print(results_table(summary["results"], summary["num_classes"]))
        print(
            f"wall time of this call {summary['wall_seconds']:.0f} s; base pretraining + training + evaluation of the "
            f"methods listed {summary['compute_seconds']:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
