"""Train hybrid models on UEA / UCR multivariate time-series classification (LrcSSM / PD-SSM setting).

With no arguments: BasicMotions (shipped by the `aeon` package, no download), one PD-SSM layer, seeds 0, 1, 2;
a few minutes on a 2-core CPU. Examples:

    python scripts/train_timeseries.py
    python scripts/train_timeseries.py --dataset BasicMotions --mixers pd_ssm,bd_lru,lrc_ssm,diag_lru --seeds 0,1,2
    python scripts/train_timeseries.py --dataset Heartbeat --data_dir ~/data/Multivariate_ts --pattern SS
    python scripts/train_timeseries.py --dataset path/to/folder_or_file.ts --missing impute
    python scripts/train_timeseries.py --dataset synthetic --synthetic_shape 17984,6,5 --synthetic_series 32
    accelerate launch scripts/train_timeseries.py --mixer lrc_ssm

Splits: TRAIN / VALID / TEST files are used as given; with only TRAIN and TEST, 15% of TRAIN (stratified, seeded)
is the validation split and TEST is untouched; a single file is split 70/15/15. `--split resplit` pools every file
and splits 70/15/15 per seed. `--dataset synthetic` generates `--synthetic_series` series of `--synthetic_shape`
LENGTH,CHANNELS,CLASSES from the seed (a class-dependent frequency, hf_ssm/data/timeseries.py), split 70/15/15, to
check without any file that a model trains at a given length. Channels are normalised with training-split statistics
only. Early stopping on validation accuracy; test accuracy is measured with the best-validation weights (details in
hf_ssm/data/timeseries.py and hf_ssm/training/timeseries/classification.py).

Each run writes <output_dir>/<dataset>_<model>/seed_<s>/ with settings.json, data.json, results.json, curves.png,
the best model (save_pretrained + normalizer.json) and resumable checkpoints; the whole call writes
<output_dir>/summary.{md,json,png} with test accuracy mean ± std over seeds and time per run.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from hf_ssm.training.checkpointing import check_resume, check_run_folder_arguments
from hf_ssm.training.cli import (
    add_mixers_argument,
    add_seeds_argument,
    add_suite_folder_arguments,
    chosen_mixers,
    run_folder,
    settings_parser,
)
from hf_ssm.training.timeseries.classification import (
    RESUME_SAFE_SETTINGS,
    TimeSeriesSettings,
    load_data,
    plot_curves,
    results_table,
    summarize,
    train_timeseries,
)

DEFAULT_MIXERS = ["pd_ssm"]
DEFAULT_SEEDS = [0, 1, 2]


def build_parser() -> argparse.ArgumentParser:
    parser = settings_parser(TimeSeriesSettings, description=__doc__)
    parser.set_defaults(mixer=None, seed=None)  # not given: DEFAULT_MIXERS, DEFAULT_SEEDS
    add_mixers_argument(parser)
    add_seeds_argument(parser, f"seeds, each run over every mixer: 0-2 or 0,3 (default {DEFAULT_SEEDS})")
    add_suite_folder_arguments(parser, "runs/timeseries/<time>", RESUME_SAFE_SETTINGS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    mixers = chosen_mixers(parser, args, DEFAULT_MIXERS)
    seeds = args.seeds or ([args.seed] if args.seed is not None else DEFAULT_SEEDS)
    common = {f.name: getattr(args, f.name) for f in fields(TimeSeriesSettings) if f.name not in ("mixer", "seed")}
    runs = [TimeSeriesSettings(mixer=m, seed=s, **common) for m in mixers for s in seeds]
    try:
        for settings in runs:
            settings.validate()
        check_run_folder_arguments(args.resume, args.output_dir)
    except ValueError as err:
        parser.error(str(err))
    try:  # fail before any training when the data cannot be found or parsed
        name = load_data(runs[0]).name
    except ValueError as err:
        parser.error(str(err))

    out = run_folder(args.output_dir, "runs/timeseries/")
    run_dirs = [out / f"{name}_{s.label.replace(':', '_')}" / f"seed_{s.seed}" for s in runs]
    if args.resume:  # refuse changed settings before any run trains or rewrites its settings.json
        try:
            for settings, run_dir in zip(runs, run_dirs):
                check_resume(settings, run_dir, RESUME_SAFE_SETTINGS)
        except ValueError as err:
            parser.error(str(err))
    all_results = []
    for settings, run_dir in zip(runs, run_dirs):
        data = load_data(settings)  # the split (and so the normalisation) depends on the seed
        result = train_timeseries(settings, run_dir, resume=args.resume, data=data, validated=True)
        all_results.append(result)
        print(
            f"{data.name} / {settings.label} / seed {settings.seed}: test accuracy {100 * result['test_accuracy']:.1f}% "
            f"(best epoch {result['best_epoch']} of {result['epochs']}, {result['train_seconds']:.0f} s) -> {run_dir}"
        )
    rows = summarize(all_results)
    table = results_table(rows)
    (out / "summary.md").write_text(table + "\n")
    (out / "summary.json").write_text(json.dumps({"summary": rows, "runs": all_results}, indent=2))
    plot_curves(all_results, out / "summary.png")
    print(
        f"\nTest accuracy at the best validation epoch, mean ± std over seeds; written to {out}/summary.{{md,json,png}}"
    )
    print(f"split: {all_results[0]['split_rule']}\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
