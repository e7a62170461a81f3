"""Train hybrid models on state-tracking tasks and test length generalisation (docs/design.md §8).

With no arguments: the README's main job (parity and cycle navigation, one-layer PD-SSM against the diagonal
selective LRU), offline, about 3 minutes on a 2-core CPU, written to runs/state_tracking/<time>/ (open
comparison.md). Every published figure is one command (RESULTS.md):

    python scripts/train_state_tracking.py
    python scripts/train_state_tracking.py --task a5 --seeds 0-4
    python scripts/train_state_tracking.py --task modular_arithmetic --seed 0
    python scripts/train_state_tracking.py --tasks parity,a5 --mixers diag_lru,attention --recipe residual_narrow
    python scripts/train_state_tracking.py --task mqar --task_vocab_size 64 --sequence_length 64 --mixer bd_lru \
        --train_min_length 2 --train_max_length 8 --test_min_length 8 --test_max_length 20
    accelerate launch scripts/train_state_tracking.py --task parity

Recipes (hf_ssm/training/state_tracking/recipes.py, one table). A PD-SSM run takes its task's recipe: `table` (the minimal
automaton's free per-token transition table as the layer, 16 heads of N = 8), `table_wide` for s5 (32 heads) and
`table_curriculum` for modular_arithmetic (8 heads of N = 64, a length curriculum); every other mixer takes
`residual` (one pre-norm residual block with SwiGLU, d = 64, AdamW + cosine, 1,000 steps). --recipe NAME applies
NAME to every run. A flag given on the command line always wins over the recipe's value, which wins over the
default; the epilog lists every setting and where each recipe differs.

--pattern gives one layer per letter, HybridSSMConfig's letters with S = --mixer (e.g. --pattern SA: the mixer,
then attention; --pattern BA: bd_lru then attention). --num_generators applies to the group tasks a5 / s5 / s3 / s4
only; --task_vocab_size, --sequence_length, --num_queries (mqar) and --num_data_tokens (selective_copying) to the
memory tasks (docs/design.md §8.5). For mqar the train / test lengths count key-value pairs at the fixed
--sequence_length, and its accuracy (like selective_copying's and compression's) is over every queried position.
Each memory task runs on its own published lengths (recipes.TASK_SETTINGS, listed in the epilog), which win over
the recipe's; a flag given explicitly wins over both.

Task mixtures: --task mqar+a5 trains one model on both tasks, each sequence one task, half of every batch each
(hf_ssm/data/task_mixture.py: the tasks side by side in one vocabulary and label space). Every setting is the
run's, but a task's data (its lengths, buckets, far lengths, curriculum), which --component_settings sets per task
('mqar={"train_max_length": 32, "far_lengths": ""}'); the task arguments go to the task that takes them.
Validation selects on the mean of the tasks' accuracies; the test, the table and the summary report each task on
its own (one record per task, naming the mixture). --test_ablations attention,pd_ssm tests again with those layers'
outputs zeroed, one mixer at a time (results.json "ablations"; the records' ablation_mean_accuracy): which layer does
which job.

Each run writes <output_dir>/[s<seed>/][<task>_<mixer>/] with settings.json, results.json, accuracy_vs_length.png,
the model (save_pretrained) and resumable checkpoints; a suite also writes comparison.{md,json,png}. Every seed
trained is merged into <output_dir>/summary.json and, with --summary PATH, into PATH. --resume keeps every run that
finished (its results.json and model/) and continues every other one from its last checkpoint, with the settings it
was trained with (a changed setting is refused, naming it, apart from those that only decide
when it evaluates, checkpoints or stops, how many restarts it tries and the test size).

Word-problem files (the "Illusion of State" paper's CSV `length,input,target`, or `seed,input,target` as the
authors' generator writes it, JSONL or a JSON array with those fields; hf_ssm/data/word_problems.py) replace the
generated task: --data_file TRAIN --test_data_file TEST (any group: Z60, A4xZ5, A5, S5, ...), under any recipe.
The classes are the largest element index in the files + 1 (--num_classes N to give more); the training and test
lengths are the files' own (length flags are refused), the test buckets the test file's distinct lengths (or
--num_buckets ranges of them), and there is no far test (--far_lengths is refused). Validation is on the training
file's longest lengths, held out from training (--val_samples_per_bucket rows of each), or on --validation_file, or
with --validation_lengths train on the training file's last rows; the log and results.json say which. --resume
refuses files whose bytes changed:

    python scripts/train_state_tracking.py --data_file S5_train.csv --test_data_file S5_test.csv --mixer pd_ssm

Model selection: every --eval_every steps the model is scored on held-out validation sequences at the test lengths,
and the best weights are kept. --restarts R trains seeds s, s + 1000, ... in seed_<s>/ folders and keeps the best
by validation; baselines train --baseline_restarts seeds (default 1). The test sequences use their own seed and are
scored once, at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields, replace
from pathlib import Path

from hf_ssm.data import TASK_NAMES, get_task
from hf_ssm.data.automata import minimal_dfa_size
from hf_ssm.data.task_mixture import MIXTURE_SEPARATOR, TaskMixture
from hf_ssm.data.word_problems import WORD_PROBLEM_TASK
from hf_ssm.training.checkpointing import check_run_folder_arguments
from hf_ssm.training.cli import (
    NOT_GIVEN,
    add_mixers_argument,
    add_seeds_argument,
    add_suite_folder_arguments,
    chosen_mixers,
    comma_list,
    defer_settings_defaults,
    given_settings,
    group_options,
    run_folder,
    settings_parser,
)
from hf_ssm.training.state_tracking.driver import check_resume_runs, train_with_restarts
from hf_ssm.training.state_tracking.recipes import (
    MODEL_DEFAULTS,
    RECIPES,
    TASK_SETTINGS,
    default_recipe,
    resolve_settings,
)
from hf_ssm.training.state_tracking.results import (
    plot_accuracy_vs_length,
    results_table,
    run_records,
    seeds_table,
    update_summary_json,
)
from hf_ssm.training.state_tracking.settings import RESUME_SAFE_SETTINGS, StateTrackingSettings, file_lengths

DEFAULT_TASKS = ["parity", "cycle_navigation"]
FILE_LENGTH_SETTINGS = ("train_min_length", "train_max_length", "test_min_length", "test_max_length")
DEFAULT_MIXERS = ["pd_ssm", "diag_lru"]


def recipe_values() -> str:
    """The --help epilog: every setting's `residual` value (the settings' defaults), and the value of each other
    recipe where it differs."""
    defaults = StateTrackingSettings()
    others = [name for name in RECIPES if name != "residual"]
    lines = [f"settings (residual recipe; {', '.join(others)} where they differ):"]
    for f in fields(StateTrackingSettings):
        # not given: DEFAULT_TASKS x DEFAULT_MIXERS, default_recipe(mixer, task)
        if f.name in ("task", "mixer", "recipe"):
            continue
        differing = "".join(f"; {name} {RECIPES[name][f.name]!r}" for name in others if f.name in RECIPES[name])
        lines.append(f"  --{f.name} {getattr(defaults, f.name)!r}{differing}")
    lines.append(f"--extra_config keys every recipe starts from (the PD-SSM layer): {MODEL_DEFAULTS}")
    lines.append("task settings (over any recipe's, under explicit flags):")
    lines += [f"  {task}: {values}" for task, values in TASK_SETTINGS.items()]
    return "\n".join(lines)


# --help's option groups, the common ones first (cli.group_options): every option of the parser is in one.
OPTION_GROUPS = {
    "run": ("task", "tasks", "num_generators", "mixer", "mixers", "suite", "recipe", "seed", "seeds"),
    "word-problem files (instead of a generated task)": (
        "data_file",
        "test_data_file",
        "validation_file",
        "num_classes",
    ),
    "memory tasks (mqar, selective_copying, compression)": (
        "task_vocab_size",
        "sequence_length",
        "num_queries",
        "num_data_tokens",
    ),
    "output and checkpointing": ("output_dir", "resume", "summary", "save_every"),
    "data": (
        "train_min_length",
        "train_max_length",
        "test_min_length",
        "test_max_length",
        "num_buckets",
        "eval_samples_per_bucket",
        "far_lengths",
        "far_samples_per_bucket",
        "supervision",
        "component_settings",
        "test_ablations",
    ),
    "model": (
        "pattern",
        "hidden_size",
        "state_size",
        "num_heads",
        "lru_group_size",
        "block_type",
        "block_dropout",
        "extra_config",
    ),
    "optimisation": (
        "batch_size",
        "max_steps",
        "learning_rate",
        "weight_decay",
        "decay_embedding",
        "warmup_steps",
        "lr_schedule",
        "min_learning_rate",
        "grad_clip",
        "length_curriculum_steps",
        "length_curriculum_start",
    ),
    "model selection": (
        "eval_every",
        "validation_lengths",
        "val_samples_per_bucket",
        "target_accuracy",
        "min_steps",
        "restarts",
        "baseline_restarts",
    ),
    # The embedding's and W_P's knobs that the recipes set (hf_ssm/training/state_tracking/recipes.py; the PD-SSM
    # layer's own are --extra_config keys); a run that changes one by hand is an experiment.
    "experimental (set by the recipes)": (
        "embedding_init",
        "freeze_embedding",
        "teacher_forcing_steps",
        "attention_frozen_steps",
        "mlp_frozen_steps",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = settings_parser(StateTrackingSettings, description=__doc__)
    parser.epilog = recipe_values()
    # A settings flag not given is NOT_GIVEN in the namespace; one given explicitly overrides the recipe.
    defer_settings_defaults(parser, StateTrackingSettings)
    parser.set_defaults(task=None, mixer=None)  # not given: DEFAULT_TASKS, DEFAULT_MIXERS (unless --tasks, --mixers)
    parser.add_argument("--tasks", type=comma_list, help="comma-separated tasks (a suite)")
    add_mixers_argument(parser)
    parser.add_argument("--suite", action="store_true", help="run every task x mixer and write one comparison")
    add_seeds_argument(
        parser, "several seeds, one after another, each in <output_dir>/s<seed>/: 0-4 or 0,2,5 (instead of --seed)"
    )
    add_suite_folder_arguments(parser, "runs/state_tracking/<time>", RESUME_SAFE_SETTINGS)
    parser.add_argument("--summary", default=None, help="also merge every seed's record into this summary.json")
    parser.add_argument(
        "--baseline_restarts",
        type=int,
        default=1,
        help="restarts of the runs whose mixer is not pd_ssm (--restarts applies to pd_ssm; default 1)",
    )
    group_options(parser, OPTION_GROUPS)
    return parser


def plan_runs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Path, list[tuple]]:
    """The run folder and the (settings, run folder) of every run the arguments ask for, validated, in the order
    they train: seed by seed, then task by task, then mixer by mixer. A refusal is a `parser.error`."""
    file_run = args.data_file is not NOT_GIVEN and bool(args.data_file)
    if file_run:  # the files are the task
        if args.tasks or args.task not in (None, WORD_PROBLEM_TASK):
            parser.error(f"--data_file makes the task {WORD_PROBLEM_TASK!r}: drop --task / --tasks")
        given = [name for name in FILE_LENGTH_SETTINGS if getattr(args, name) is not NOT_GIVEN]
        if given:
            parser.error(f"--{given[0]}: a word-problem file run takes its lengths from the files")
    tasks = [WORD_PROBLEM_TASK] if file_run else args.tasks or ([args.task] if args.task else DEFAULT_TASKS)
    for task in tasks:
        if not file_run and any(part not in TASK_NAMES for part in task.split(MIXTURE_SEPARATOR)):
            parser.error(
                f"unknown task {task!r}; choose from {', '.join(TASK_NAMES)}, or several joined by "
                f"{MIXTURE_SEPARATOR!r} (a mixture, e.g. mqar+a5)"
            )
    mixers = chosen_mixers(parser, args, DEFAULT_MIXERS)
    if args.seeds is not None and args.seed is not NOT_GIVEN:
        parser.error("give --seed or --seeds, not both")
    seeds = args.seeds or [None]
    suite = args.suite or len(tasks) * len(mixers) > 1
    explicit = {k: v for k, v in given_settings(StateTrackingSettings, args).items() if k not in ("task", "mixer")}
    out = run_folder(args.output_dir, "runs/state_tracking/")
    runs = []
    for seed in seeds:
        seed_dir = out if seed is None else out / f"s{seed}"
        chosen = explicit if seed is None else {**explicit, "seed": seed}
        for task in tasks:
            for mixer in mixers:
                recipe = chosen.get("recipe", default_recipe(mixer, task))  # --recipe has choices
                resolved = resolve_settings(recipe, chosen, task=task)  # the task's settings over the recipe's
                values = {k: v for k, v in resolved.items() if k not in ("task", "mixer")}
                settings = StateTrackingSettings(task=task, mixer=mixer, **{**values, **_restarts(mixer, args)})
                runs.append((settings, seed_dir / f"{task}_{mixer}" if suite else seed_dir))
    try:
        if file_run:  # the lengths of the files (a malformed file is refused here, naming its row and column)
            runs = [(replace(settings, **file_lengths(settings)), run_dir) for settings, run_dir in runs]
        plans = [settings.validate() for settings, _ in runs]  # validated once, here: train_with_restarts is told so
        check_run_folder_arguments(args.resume, args.output_dir)
        for (settings, run_dir), plan in zip(runs, plans):
            if args.resume:  # refuse changed settings or files before any run trains or rewrites its settings.json
                check_resume_runs(settings, run_dir, plan.fingerprints)
    except ValueError as err:
        parser.error(str(err))
    return out, runs


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out, runs = plan_runs(parser, args)
    suite = args.suite or len({(s.task, s.mixer) for s, _ in runs}) > 1
    results_by_folder: dict[Path, list[dict]] = {}
    for settings, run_dir in runs:
        results = train_with_restarts(settings, run_dir, resume=args.resume, validated=True)
        results_by_folder.setdefault(run_dir.parent if suite else run_dir, []).append(results)
        records = run_records(results, run_dir, settings.recipe)
        for path in (out / "summary.json", args.summary):
            if path is not None:
                update_summary_json(path, records)
        print(f"\n{settings.task} / {settings.mixer} (recipe {settings.recipe}): written to {run_dir}")
        print(
            f"best validation accuracy {100 * results['validation']['accuracy']:.2f}%, "
            f"{_chance_note(results)}"
            f"CPU {results['cpu_seconds']:.0f} s; {_dfa_note(settings)}"
        )
        print(results_table([results]))
    if suite:
        for folder, folder_results in results_by_folder.items():
            table = results_table(folder_results)
            (folder / "comparison.md").write_text(table + "\n")
            (folder / "comparison.json").write_text(json.dumps(folder_results, indent=2))
            plot_accuracy_vs_length(folder_results, folder / "comparison.png")
            print(f"\nLast-position accuracy (%) by test length; written to {folder}/comparison.{{md,json,png}}\n")
            print(table)
    if args.seeds is not None:
        all_results = [r for folder_results in results_by_folder.values() for r in folder_results]
        print(f"\nTest mean accuracy (%) over seeds {args.seeds}:\n")
        print(seeds_table(all_results))
    return 0


def _restarts(mixer: str, args) -> dict:
    """{"restarts": R} of one run: --restarts (or the recipe's) for PD-SSM, --baseline_restarts for the others."""
    if mixer == "pd_ssm":
        return {}
    return {"restarts": args.baseline_restarts}


def _chance_note(results: dict) -> str:
    """The task's chance level, which positions the accuracy reads and what the buckets count ("" for a results.json
    written before they were recorded)."""
    if "chance_accuracy" not in results:
        return ""
    where = "every labelled position" if results["scored_positions"] == "labelled" else "the last position"
    return f"chance {100 * results['chance_accuracy']:.2f}% (scored at {where}; buckets by {results['size_name']}), "


def _dfa_note(settings: StateTrackingSettings) -> str:
    if settings.data_file:
        return f"word-problem files, {settings.build_task().num_classes} group elements"
    task = get_task(settings.task, **settings.task_kwargs())
    notes = []
    for part in [c.task for c in task.components] if isinstance(task, TaskMixture) else [task]:
        try:
            notes.append(f"minimal DFA of {part.name}: {minimal_dfa_size(part)} states")
        except ValueError as err:  # bracketed arithmetic: no finite automaton
            notes.append(f"minimal DFA of {part.name}: none ({err})")
    return "; ".join(notes)


if __name__ == "__main__":
    sys.exit(main())
