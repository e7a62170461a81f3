"""Issue 28: the table of i28_default_recipe.sh runs, one row per recipe seed: every restart (seed, best validation
accuracy, steps), the kept model's test mean over 40-256 and far-length accuracies, CPU seconds summed over the
restarts; then mean ± std (sample std) of the kept test means over the seeds, and how many reach 99 %.

    python scripts/experiments/i28_default_table.py i28_exact_a5 i28_exact_cyc ...
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path("runs/experiments")


def restart_cells(results: dict) -> str:
    restarts = results.get("restarts") or [
        {"seed": results["seed"], "validation_accuracy": results["validation"]["accuracy"], "steps": results["steps"]}
    ]
    return ", ".join(f"{r['seed']}: {100 * r['validation_accuracy']:.1f} @ {r['steps']}" for r in restarts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", help="run names under runs/experiments/")
    args = parser.parse_args()
    print(
        "| run | task | recipe seed | restarts (seed: val % @ steps) | kept | test mean % | far 1000 / 4000 % | CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.names:
        means = []
        for run in sorted((ROOT / name).glob("s*/results.json"), key=lambda p: int(p.parent.name[1:])):
            r = json.loads(run.read_text())
            far = " / ".join(f"{100 * b['accuracy']:.2f}" for b in r.get("far", {}).get("buckets", [])) or "-"
            means.append(100 * r["test"]["mean_accuracy"])
            print(f"| {name} | {r['task']} | {run.parent.name[1:]} | {restart_cells(r)} | {r['seed']} | "
                  f"{means[-1]:.2f} | {far} | {r['cpu_seconds']:.0f} |")  # fmt: skip
        if means:
            std = statistics.stdev(means) if len(means) > 1 else 0.0
            hits = sum(m >= 99 for m in means)
            print(f"| {name} | mean ± std | {len(means)} seeds | | | {statistics.mean(means):.2f} ± {std:.2f} "
                  f"({hits}/{len(means)} >= 99) | | |")  # fmt: skip


if __name__ == "__main__":
    main()
