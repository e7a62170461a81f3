"""The records of one experiment in results/state_tracking/summary.json, a row per seed: test mean over the buckets,
far-length accuracies, steps, train and CPU seconds; then mean ± std (sample std) of the test means and how many
seeds reach THRESHOLD %.

    python scripts/experiments/summary_seeds.py runs/experiments/i28_modarith_d16/ --threshold 90
"""

from __future__ import annotations

import argparse
import json
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_prefix", help="records whose `run` starts with this (e.g. runs/experiments/NAME/)")
    parser.add_argument("--summary", default="results/state_tracking/summary.json")
    parser.add_argument("--threshold", type=float, default=99.0, help="test mean % a seed must reach to count")
    args = parser.parse_args()
    records = [r for r in json.load(open(args.summary)) if r["run"].startswith(args.run_prefix)]
    if not records:
        raise SystemExit(f"no record in {args.summary} has a run starting with {args.run_prefix!r}")
    print("| seed | test mean % | far % | steps | train s | CPU s |\n|---|---|---|---|---|---|")
    means = []
    for r in sorted(records, key=lambda r: r["seed"]):
        means.append(100 * r["test_mean_accuracy"])
        far = " / ".join(f"{k}: {100 * v:.1f}" for k, v in (r.get("far_accuracy_by_length") or {}).items()) or "-"
        print(
            f"| {r['seed']} | {means[-1]:.2f} | {far} | {r['steps']} | {r['train_seconds']:.0f} | {r['cpu_seconds']:.0f} |"
        )
    std = statistics.stdev(means) if len(means) > 1 else 0.0
    reached = sum(m >= args.threshold for m in means)
    print(
        f"\nmean {statistics.mean(means):.2f} ± {std:.2f} over {len(means)} seeds; {reached}/{len(means)} >= {args.threshold}"
    )


if __name__ == "__main__":
    main()
