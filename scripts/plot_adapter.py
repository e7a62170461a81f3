"""Answer accuracy by story length of adapter runs, from results/adapter/summary.json (docs/adapter.md).

One panel per task; x = the test buckets of transition counts (as recorded, e.g. "1-10", "40-40", "80-80"), y =
accuracy. One colour per series: a label given with --series LABEL=SUBSTRING collects the records of one base
whose "<run_dir>:<method>" contains SUBSTRING (e.g. "sent_par_ph/" or ":probe"; a label may be given
several times). Every run is a dot, the mean over runs a line, and the legend gives the seed count (and the run
count where a seed has several runs). Reads only the records, so the figure can be redrawn from the summary alone.
Example:

    python scripts/plot_adapter.py --base smollm2-135m --tasks parity,cycle_navigation \\
        --series "PD-SSM, per-head=sent_par_ph/" --series "PD-SSM, per-head=sent_cyc_pre30/" \\
        --out results/adapter/accuracy_by_transitions.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from plot_state_tracking import parse_series  # scripts/ is on the path of a script run


def series_of(record: dict, series: list[tuple[str, str]]) -> str | None:
    """The label of the first --series whose substring is in the record's "<run_dir>:<method>" (None: not drawn)."""
    key = f"{record.get('run_dir', '')}:{record.get('method', '')}"
    return next((label for label, part in series if part in key), None)


def seed_count(runs: list[dict]) -> str:
    """The legend's count: distinct seeds, and the records too where a seed was measured in several runs (e.g. one
    run for its long bucket alone)."""
    seeds = len({r.get("seed") for r in runs})
    text = f"{seeds} seed" + ("s" if seeds != 1 else "")
    return text if seeds == len(runs) else f"{text}, {len(runs)} runs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", default="results/adapter/summary.json")
    parser.add_argument("--base", default="smollm2-135m", help="the `base` of the records to draw")
    parser.add_argument("--tasks", default="parity,cycle_navigation", help="comma-separated, one panel each")
    parser.add_argument("--series", type=parse_series, action="append", required=True, metavar="LABEL=SUBSTRING")
    parser.add_argument("--out", default="results/adapter/accuracy_by_transitions.png")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in json.loads(Path(args.summary).read_text()) if r.get("base") == args.base]
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    labels = list(dict.fromkeys(label for label, _ in args.series))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.2), squeeze=False)
    drawn = 0
    for ax, task in zip(axes[0], tasks):
        grouped: dict[str, list[dict]] = defaultdict(list)
        for r in records:
            label = series_of(r, args.series) if r["task"] == task else None
            if label is not None:
                grouped[label].append(r)
        buckets = list(dict.fromkeys(b for rs in grouped.values() for r in rs for b in r["accuracy_by_transitions"]))
        for i, label in enumerate(labels):
            runs = grouped.get(label, [])
            if not runs:
                continue
            colour = f"C{i}"
            xs, means = [], []
            for x, bucket in enumerate(buckets):
                values = [
                    100 * r["accuracy_by_transitions"][bucket] for r in runs if bucket in r["accuracy_by_transitions"]
                ]
                if values:
                    ax.scatter([x] * len(values), values, color=colour, alpha=0.45, s=18)
                    xs.append(x)
                    means.append(sum(values) / len(values))
            ax.plot(xs, means, color=colour, lw=2, marker="o", label=f"{label} ({seed_count(runs)})")
            drawn += len(runs)
        ax.set_xticks(
            range(len(buckets)), [b if b.split("-")[0] != b.split("-")[-1] else b.split("-")[0] for b in buckets]
        )
        ax.set_xlabel("transitions in the test story (trained on 1-10)")
        ax.set_ylabel("answer accuracy (%)")
        ax.set_ylim(-2, 102)
        ax.set_title(f"{task} on frozen {args.base}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    if not drawn:
        print(f"no record of base {args.base!r} matches any --series in {args.summary}", file=sys.stderr)
        return 1
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out} ({drawn} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
