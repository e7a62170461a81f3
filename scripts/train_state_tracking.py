"""Train hybrid models on state-tracking tasks and test length generalisation (docs/design.md §8).

With no arguments: the default comparison (parity and cycle navigation, one-layer PD-SSM vs the diagonal
selective LRU), offline, a few minutes on a 2-core CPU. Examples:

    python scripts/train_state_tracking.py
    python scripts/train_state_tracking.py --task a5 --num_generators 2 --mixer pd_ssm --max_steps 3000
    python scripts/train_state_tracking.py --suite --tasks parity,even_pairs --mixers pd_ssm,bd_lru,attention
    python scripts/train_state_tracking.py --recipe paper --task parity --max_steps 2000 --batch_size 64
    accelerate launch scripts/train_state_tracking.py --task parity

--pattern gives one layer per letter, HybridSSMConfig's letters with S = --mixer (e.g. --pattern SA: the mixer,
then attention; --pattern BA: bd_lru then attention). --num_generators applies to a5 / s5 only.

Each run writes <output_dir>/<task>_<mixer>/ with settings.json, results.json, accuracy_vs_length.png, the
model (save_pretrained) and resumable checkpoints; a suite also writes comparison.{md,json,png}. --resume
continues every run with the settings it was trained with (changed ones are refused, naming them, apart from
those declared safe: how often it evaluates / checkpoints, when it stops, how many restarts, the test size).

Word-problem files (the "Illusion of State" paper's CSV format `length,input,target`, or JSONL with those fields;
hf_ssm/data/word_problems.py) replace the generated task: --data_file TRAIN --test_data_file TEST (any group: Z60,
A4xZ5, A5, S5, ...). The classes are the largest element index in both files + 1 (--num_classes N to give more);
the training and test lengths are the files' own (length flags are refused), the test buckets the test file's
distinct lengths (or --num_buckets ranges of them), validation the last --val_samples_per_bucket training rows,
held out from training:

    python scripts/train_state_tracking.py --data_file S5_train.csv --test_data_file S5_test.csv --mixer pd_ssm

Model selection (hf_ssm/training/state_tracking.py): every --eval_every steps the model is scored on held-out
validation sequences at the test lengths (--validation_lengths test, the default; "train" selects on the
training lengths instead), and the best-scoring weights are kept. --restarts R trains seeds seed, seed + 1000, ...,
seed + 1000 (R - 1) in seed_<s>/ folders (runs of consecutive seeds share no restart) and keeps the restart with the
best validation accuracy; it applies to the PD-SSM runs, the baselines (every other mixer) train
--baseline_restarts seeds (default 1: a baseline gets no second chance that would only cost time). The test
sequences use their own seed and are scored once, at the end.

Recipes (hf_ssm/training/recipes.py). Without --recipe, PD-SSM runs take `table` (the minimal automaton's free
per-token transition table as the layer, on a frozen one-hot embedding, the one-hot states read through an RMSNorm;
d = 256, Adam at a constant 1e-2, stop at 100 % validation after step 300, up to 2,000 steps and 3 restarts) and
every other mixer takes `residual` (one pre-norm residual block with SwiGLU, d = 64, AdamW + cosine, 1,000 steps:
the values shown below; PD-SSM's default before issue 28, then called `default`). --recipe NAME applies NAME to
every run: table, residual, direct (issue 28: transitions W_P RMSNorm(frozen embedding) at lr / d, a frozen random
C) or paper (the PD-SSM authors' protocol: two post-norm PD-SSM blocks, d = N = 128, last-token labels, ...).
Precedence: a flag given on the command line always wins over the recipe's value, which wins over the default.
Every seed trained is also merged into <output_dir>/summary.json and, with --summary PATH, into PATH (e.g.
results/state_tracking/summary.json). Extra HybridSSMConfig fields: --extra_config '{"pd_ssm_transition": "bank"}'
(or KEY=VALUE items; --config is its deprecated spelling, kept for one release).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields, replace

from hf_ssm.data import TASK_NAMES, get_task
from hf_ssm.data.automata import minimal_dfa_size
from hf_ssm.data.word_problems import WORD_PROBLEM_TASK
from hf_ssm.training.checkpointing import check_run_folder_arguments
from hf_ssm.training.cli import add_suite_folder_arguments, chosen_mixers, comma_list, run_folder, settings_parser
from hf_ssm.training.recipes import RECIPES, default_recipe, resolve_settings
from hf_ssm.training.state_tracking import (
    RESUME_SAFE_SETTINGS,
    StateTrackingSettings,
    check_resume_runs,
    plot_accuracy_vs_length,
    results_table,
    train_with_restarts,
)
from hf_ssm.training.state_tracking_settings import file_lengths
from hf_ssm.training.summary import merge_summary, run_records

DEFAULT_TASKS = ["parity", "cycle_navigation"]
FILE_LENGTH_SETTINGS = ("train_min_length", "train_max_length", "test_min_length", "test_max_length")
DEFAULT_MIXERS = ["pd_ssm", "diag_lru"]


class NotGiven:
    """The default of every settings flag: a flag not given takes the recipe's value (or the settings' default),
    one given always wins. (argparse.SUPPRESS, the usual "no default", cannot be set through `set_defaults`: it
    would land in the namespace as the string '==SUPPRESS==' and be parsed as the flag's value.)"""

    def __repr__(self) -> str:
        return "the recipe's"


NOT_GIVEN = NotGiven()


def recipe_values() -> str:
    """The --help epilog: every setting's `residual` value (the settings' defaults), and the value of each other
    recipe where it differs."""
    defaults = StateTrackingSettings()
    others = [name for name in RECIPES if name != "residual"]
    lines = [f"settings (residual recipe; {', '.join(others)} where they differ):"]
    for f in fields(StateTrackingSettings):
        if f.name in ("task", "mixer", "recipe"):  # not given: DEFAULT_TASKS x DEFAULT_MIXERS, default_recipe(mixer)
            continue
        differing = "".join(f"; {name} {RECIPES[name][f.name]!r}" for name in others if f.name in RECIPES[name])
        lines.append(f"  --{f.name} {getattr(defaults, f.name)!r}{differing}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = settings_parser(StateTrackingSettings, description=__doc__)
    parser.epilog = recipe_values()
    # A settings flag not given is NOT_GIVEN in the namespace; one given explicitly overrides the recipe.
    parser.set_defaults(**{f.name: NOT_GIVEN for f in fields(StateTrackingSettings)})
    parser.set_defaults(task=None, mixer=None)  # not given: DEFAULT_TASKS, DEFAULT_MIXERS (unless --tasks, --mixers)
    parser.add_argument("--tasks", type=comma_list, help="comma-separated tasks (a suite)")
    parser.add_argument("--mixers", type=comma_list, help="comma-separated mixers (a suite)")
    parser.add_argument("--suite", action="store_true", help="run every task x mixer and write one comparison")
    add_suite_folder_arguments(parser, "runs/state_tracking/<time>", RESUME_SAFE_SETTINGS)
    parser.add_argument("--summary", default=None, help="also merge every seed's record into this summary.json")
    parser.add_argument(
        "--baseline_restarts",
        type=int,
        default=1,
        help="restarts of the runs whose mixer is not pd_ssm (--restarts applies to pd_ssm; default 1)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    file_run = args.data_file is not NOT_GIVEN and bool(args.data_file)
    if file_run:  # the files are the task
        if args.tasks or args.task not in (None, WORD_PROBLEM_TASK):
            parser.error(f"--data_file makes the task {WORD_PROBLEM_TASK!r}: drop --task / --tasks")
        given = [name for name in FILE_LENGTH_SETTINGS if getattr(args, name) is not NOT_GIVEN]
        if given:
            parser.error(f"--{given[0]}: a word-problem file run takes its lengths from the files")
    tasks = [WORD_PROBLEM_TASK] if file_run else args.tasks or ([args.task] if args.task else DEFAULT_TASKS)
    for task in tasks:
        if task not in TASK_NAMES and not file_run:
            parser.error(f"unknown task {task!r}; choose from {', '.join(TASK_NAMES)}")
    mixers = chosen_mixers(parser, args, DEFAULT_MIXERS)
    suite = args.suite or len(tasks) * len(mixers) > 1
    skip = ("task", "mixer")
    explicit = {f.name: getattr(args, f.name) for f in fields(StateTrackingSettings)}
    explicit = {k: v for k, v in explicit.items() if v is not NOT_GIVEN}
    if file_run:  # validation on held-out training rows, unless asked otherwise (then refused by validate)
        explicit.setdefault("validation_lengths", "train")
    runs = [
        StateTrackingSettings(task=t, mixer=m, **{**_recipe_settings(m, explicit, skip), **_restarts(m, args)})
        for t in tasks
        for m in mixers
    ]
    out = run_folder(args.output_dir, "runs/state_tracking/")
    run_dirs = [out / f"{settings.task}_{settings.mixer}" if suite else out for settings in runs]
    try:
        if file_run:  # the lengths of the files (a malformed file is refused here, naming its row and column)
            runs = [replace(settings, **file_lengths(settings)) for settings in runs]
        for settings in runs:  # validated once, here: train_with_restarts is told so
            settings.validate()
        check_run_folder_arguments(args.resume, args.output_dir)
        for settings, run_dir in zip(runs, run_dirs):
            if args.resume:  # refuse changed settings before any run trains or rewrites its settings.json
                check_resume_runs(settings, run_dir)
    except ValueError as err:
        parser.error(str(err))

    all_results = []
    for settings, run_dir in zip(runs, run_dirs):
        all_results.append(train_with_restarts(settings, run_dir, resume=args.resume, validated=True))
        records = run_records(all_results[-1], run_dir, settings.recipe)
        for path in (out / "summary.json", args.summary):
            if path is not None:
                merge_summary(path, records)
        print(f"\n{settings.task} / {settings.mixer} (recipe {settings.recipe}): written to {run_dir}")
        print(
            f"best validation accuracy {100 * all_results[-1]['validation']['accuracy']:.2f}%, "
            f"CPU {all_results[-1]['cpu_seconds']:.0f} s; {_dfa_note(settings)}"
        )
        print(results_table(all_results[-1:]))
    if suite:
        table = results_table(all_results)
        (out / "comparison.md").write_text(table + "\n")
        (out / "comparison.json").write_text(json.dumps(all_results, indent=2))
        plot_accuracy_vs_length(all_results, out / "comparison.png")
        print(f"\nLast-position accuracy (%) by test length; written to {out}/comparison.{{md,json,png}}\n")
        print(table)
    return 0


def _recipe_settings(mixer: str, explicit: dict, skip: tuple[str, ...]) -> dict:
    """The settings of one run of `mixer`: --recipe's values (or default_recipe(mixer)'s) under the explicit flags."""
    values = resolve_settings(explicit.get("recipe", default_recipe(mixer)), explicit)  # --recipe has choices
    return {k: v for k, v in values.items() if k not in skip}


def _restarts(mixer: str, args) -> dict:
    """{"restarts": R} of one run: --restarts (or the recipe's) for PD-SSM, --baseline_restarts for the others."""
    if mixer == "pd_ssm":
        return {}
    return {"restarts": args.baseline_restarts}


def _dfa_note(settings: StateTrackingSettings) -> str:
    if settings.data_file:
        return f"word-problem files, {settings.build_task().num_classes} group elements"
    try:
        return f"minimal DFA of {settings.task}: {minimal_dfa_size(get_task(settings.task, **settings.task_kwargs()))} states"
    except ValueError as err:  # bracketed arithmetic: no finite automaton
        return f"minimal DFA: none ({err})"


if __name__ == "__main__":
    sys.exit(main())
