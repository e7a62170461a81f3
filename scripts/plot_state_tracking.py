"""Learning curves of state-tracking runs from a summary.json (docs/design.md §8): validation accuracy vs step.

One panel per task; one colour per series. A series is a mixer, or a label given with --series LABEL=SUBSTRING
(the records whose run folder contains SUBSTRING, where * matches any text; one label may be given with several substrings). Every seed is
drawn as a thin line, the mean over seeds as a thick one (a seed that stopped early at its target counts with
its last value after it stopped). Reads only the records (their `validation_curve`), so the figure can be redrawn
from results/state_tracking/summary.json alone. Example:

    python scripts/plot_state_tracking.py --summary results/state_tracking/summary.json \\
        --series "PD-SSM=table_parity/" --series "diag_lru=narrow/*_diag_lru" \\
        --out results/state_tracking/learning_curves.png
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections import defaultdict
from pathlib import Path


def series_of(record: dict, series: list[tuple[str, str]]) -> str | None:
    """The series label of a record: the first --series whose substring is in its run folder, else (without any
    --series) its mixer; None when --series are given and none matches (the record is not drawn)."""
    if not series:
        return record["mixer"]
    run = record.get("run", "")
    return next((label for label, part in series if fnmatch.fnmatchcase(run, f"*{part}*")), None)


def mean_curve(runs: list[list], steps: list) -> tuple[list, list]:
    """The mean over seeds at `steps` (those of the series' longest run); a run that stopped early (it reached
    the target accuracy, and its kept weights are those of its last evaluation) counts with its last value from
    then on. Returns (steps, means)."""
    mean = []
    for step in steps:
        values = [next((acc for s, acc in reversed(curve) if s <= step), curve[0][1]) for curve in runs]
        mean.append(sum(values) / len(values))
    return steps, mean


def parse_series(text: str) -> tuple[str, str]:
    label, sep, part = text.partition("=")
    if not sep or not label or not part:
        raise argparse.ArgumentTypeError(f"--series must be LABEL=SUBSTRING, got {text!r}")
    return label, part


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", default="results/state_tracking/summary.json")
    parser.add_argument("--series", type=parse_series, action="append", default=[], help="LABEL=SUBSTRING")
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: every task drawn)")
    parser.add_argument("--out", required=True, help="PNG to write")
    args = parser.parse_args(argv)
    records = json.loads(Path(args.summary).read_text())
    wanted = None if args.tasks is None else [t.strip() for t in args.tasks.split(",") if t.strip()]
    curves: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        label = series_of(record, args.series)
        if label is None or (wanted is not None and record["task"] not in wanted) or not record.get("validation_curve"):
            continue
        curves[record["task"]][label].append(record["validation_curve"])
    if not curves:
        parser.error(f"no record of {args.summary} with a validation_curve matches the --series / --tasks given")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = wanted or sorted(curves)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    colours = {}
    for ax, task in zip(axes[0], tasks):
        for label, runs in curves.get(task, {}).items():
            colour = colours.setdefault(label, f"C{len(colours) % 10}")
            for curve in runs:  # each seed's evaluations, marked where it stopped
                ax.plot(*zip(*curve), color=colour, alpha=0.3, linewidth=0.8, marker=".", markevery=[-1])
            steps, mean = mean_curve(runs, [step for step, _ in max(runs, key=len)])
            # a marker at the mean's last point, so that a series whose seeds all stopped at once is visible
            ax.plot(
                steps, mean, color=colour, linewidth=2, marker="o", markevery=[-1], label=f"{label} ({len(runs)} seeds)"
            )
        ax.set(title=task, xlabel="training step", ylabel="validation accuracy (test lengths)", ylim=(0, 1.02))
        ax.legend(fontsize=8)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    plt.close(fig)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
