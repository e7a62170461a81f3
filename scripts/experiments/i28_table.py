"""Issue 28: one markdown table of every run recorded under runs/i28/ (the reference JSONs, the bisection JSONL
records, the layer runs' summary.json), test accuracy per length bucket, CPU seconds."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path("runs/i28")


def cells(buckets) -> str:
    return " ".join(f"{100 * b['accuracy']:.1f}" for b in buckets)


def main() -> None:
    print("| variant | task | seed | steps | test acc. per bucket 40-75 ... 221-256 | mean | CPU s | samples/bucket |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted((ROOT / "reference").glob("*.json")):
        r = json.loads(path.read_text())
        a = r["args"]
        print(f"| reference_automaton.py | {a['task']} | {a['seed']} | {a['steps']} | {cells(r['test'])} | "
              f"{100 * r['test_mean_accuracy']:.1f} | {r['cpu_seconds']:.0f} | {a['eval_samples']} |")  # fmt: skip
    for path in sorted(ROOT.glob("bisect_round*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            a = r["args"]
            print(f"| {path.stem}: {r['label']} | {a['task']} | {a['seed']} | {a['steps']} | {cells(r['test'])} | "
                  f"{100 * r['test_mean_accuracy']:.1f} | {r['train_cpu_seconds']:.0f} (train) | {a['eval_samples']} |")  # fmt: skip
    summary = ROOT / "summary.json"
    if summary.is_file():
        for r in json.loads(summary.read_text()):
            accs = " ".join(f"{100 * a:.1f}" for a in r["test_accuracy_by_bucket"].values()) if isinstance(
                r["test_accuracy_by_bucket"], dict) else " ".join(f"{100 * a:.1f}" for a in r["test_accuracy_by_bucket"])  # fmt: skip
            print(f"| layer {r['run']} {json.dumps(r.get('overrides', {}))} | {r['task']} | {r['seed']} | {r['steps']} | "
                  f"{accs} | {100 * r['test_mean_accuracy']:.1f} | {r['cpu_seconds']:.0f} | 1024 |")  # fmt: skip


if __name__ == "__main__":
    main()
