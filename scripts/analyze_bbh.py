"""Which BIG-Bench Hard tracking_shuffled_objects items a model gets wrong, and how: the error analysis of records
written by `eval_nl_state_tracking.py --bbh_file` (their per-item predictions), item by item against the published
file (read again and checked against the record's sha256; evaluation only, nothing here trains or selects).

For each record: accuracy by scenario (dance partners, books, positions, presents, balls), by how many swaps the asked
person took part in, by how many swaps came after the asked person's last one, and the kind of each wrong answer —
"earlier" (what the asked person held at the start or after an earlier swap: a later swap missed) or "other's"
(what someone else holds at the end). Every item's story is replayed from its text (hf_ssm.data.nl_bbh.shuffle_trace)
and must give the published target, else the record is refused.

    python scripts/analyze_bbh.py --records results/bbh/tracking_shuffled_objects_*_adapter-*.json \\
        --out results/bbh/analysis_entity.json

Prints one Markdown table per file (a column per record, then the mean over records) and writes the tables as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from hf_ssm.data.nl_bbh import LETTERS, read_bbh_file, shuffle_trace
from hf_ssm.training.reports import write_json_atomic


def _bucket(value: int | None, top: int = 3) -> str:
    return "never" if value is None else (f"{top}+" if value >= top else str(value))


def analyze_record(record: dict, answer: str) -> dict:
    """{"file", "label", "items", "accuracy", "by": {table: {row: [right, items]}}, "errors": {kind: count}} of one
    record, its predictions under `answer` ("classifier", "loglik" or "greedy")."""
    bbh = read_bbh_file(record["file"])
    if bbh.sha256 != record["sha256"]:
        raise ValueError(f"{record['file']}: sha256 {bbh.sha256} differs from the record's {record['sha256']}")
    by: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    errors: dict[str, int] = defaultdict(int)
    for prediction in record["predictions"]:
        if answer not in prediction:
            raise ValueError(f"{record['file']}: item {prediction['index']} has no {answer!r} prediction")
        item = bbh.items[prediction["index"]]
        trace = shuffle_trace(item)
        if trace.holders[-1][trace.asked] != item.answer:
            raise ValueError(f"{record['file']}: item {item.index}'s replayed swaps do not give its target")
        letter = prediction[answer]
        kind = trace.error_kind(LETTERS.index(letter)) if letter in item.letters else "no option"
        errors[kind] += kind != "right"
        rows = {
            "scenario": trace.scenario,
            "asked person's swaps": _bucket(trace.asked_swaps),
            "swaps after the asked person's last": _bucket(trace.steps_since_asked_swap),
        }
        for table, row in rows.items():
            by[table][row][0] += kind == "right"
            by[table][row][1] += 1
    right = sum(cell[0] for cell in by["scenario"].values())
    return {
        "file": Path(record["file"]).name, "label": record["label"], "items": len(record["predictions"]),
        "accuracy": right / len(record["predictions"]), "by": {t: dict(rows) for t, rows in by.items()},
        "errors": {k: v for k, v in errors.items() if v},
    }  # fmt: skip


def markdown(analyses: list[dict]) -> list[str]:
    """One table per file: a row per (table, row), a column per record (accuracy % and items), the mean %."""
    lines = []
    for file in sorted({a["file"] for a in analyses}):
        group = [a for a in analyses if a["file"] == file]
        lines += [f"### {file}", "", "| | " + " | ".join(a["label"] for a in group) + " | mean |"]
        lines.append("|---" * (len(group) + 2) + "|")
        lines.append("| all | " + " | ".join(f"{100 * a['accuracy']:.1f}" for a in group) + " | " + _mean(
            [a["accuracy"] for a in group]) + " |")  # fmt: skip
        for table in group[0]["by"]:
            for row in sorted({r for a in group for r in a["by"][table]}):
                cells = [a["by"][table].get(row, [0, 0]) for a in group]
                shown = [f"{100 * r / n:.1f} ({n})" if n else "—" for r, n in cells]
                lines.append(f"| {table}: {row} | " + " | ".join(shown) + " | " + _mean(
                    [r / n for r, n in cells if n]) + " |")  # fmt: skip
        kinds = sorted({k for a in group for k in a["errors"]})
        for kind in kinds:
            lines.append(f"| wrong: {kind} | " + " | ".join(str(a["errors"].get(kind, 0)) for a in group) + " | |")
        lines.append("")
    return lines


def _mean(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", nargs="+", required=True, help="records of eval_nl_state_tracking.py --bbh_file")
    parser.add_argument(
        "--answer", default="classifier", choices=["classifier", "loglik", "greedy"], help="which prediction to score"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the analyses here as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    analyses = []
    for path in args.records:
        try:
            analyses.append(analyze_record(json.loads(Path(path).read_text()), args.answer))
        except (OSError, ValueError, KeyError) as err:
            parser.error(f"--records {path}: {err}")
    print("\n".join(markdown(analyses)))
    if args.out:
        write_json_atomic(args.out, {"answer": args.answer, "records": args.records, "analyses": analyses})
    return 0


if __name__ == "__main__":
    sys.exit(main())
