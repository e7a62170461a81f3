"""The language-modelling benchmark's report: results/lm/summary.json, the Markdown tables and the figures, from the
records benchmarks/bench_lm.py wrote (`python benchmarks/bench_lm.py --phase report`)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

MULTIPLES = ("1x", "2x", "4x", "8x")


def _load(results: Path, phase: str) -> list[dict]:
    folder = results / phase
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def sweep_table(records: list[dict]) -> list[str]:
    """Validation bits per byte of every model at every swept rate (the selected rate in bold)."""
    by_model = defaultdict(dict)
    for r in records:
        key = (r["run"]["model"], r["run"]["size"], r["run"]["tokenizer"])
        by_model[key][r["learning_rate"]] = r["validation_bpb"]
    rates = sorted({lr for rows in by_model.values() for lr in rows})
    lines = ["| model | size | tokenizer | " + " | ".join(f"lr {lr:g}" for lr in rates) + " |"]
    lines.append("|---|---|---|" + "---|" * len(rates))
    for (model, size, tok), rows in sorted(by_model.items()):
        best = min(rows, key=rows.get)
        cells = [("**{:.4f}**" if lr == best else "{:.4f}").format(rows[lr]) if lr in rows else "—" for lr in rates]
        lines.append(f"| {model} | {size} | {tok} | " + " | ".join(cells) + " |")
    return lines


def full_rows(records: list[dict]) -> dict:
    """{(model, size, tokenizer): summary} over seeds: every seed's test bits per byte at each multiple."""
    groups = defaultdict(list)
    for r in records:
        groups[(r["run"]["model"], r["run"]["size"], r["run"]["tokenizer"])].append(r)
    out = {}
    for key, rows in sorted(groups.items()):
        rows.sort(key=lambda r: r["seed"])
        out[key] = {
            "parameters": rows[0]["model"]["parameters"],
            "learning_rate": rows[0]["learning_rate"],
            "seeds": [r["seed"] for r in rows],
            "test_best": {m: [r["test_best"][m] for r in rows] for m in MULTIPLES},
            "test_as_is": {m: [r["test"][m] for r in rows] for m in MULTIPLES},
            "tokens_per_second": [r["tokens_per_second"] for r in rows],
            "train_seconds": [r["train_seconds"] for r in rows],
            "train_cpu_seconds": [_cpu_seconds(r) for r in rows],
            "peak_rss_mib": [r["peak_rss_mib"] for r in rows],
            "sample": rows[0]["sample"],
        }
    return out


def _cpu_seconds(record: dict) -> str:
    """A run's training CPU seconds as the table gives them: the total over its resumes; a run resumed from a
    checkpoint that did not record them gives this process's share and the steps it covers."""
    total = record.get("train_cpu_seconds")
    if total is not None or not record["resumed_from"]:
        return f"{total if total is not None else record['train_cpu_seconds_this_process']:,.0f}"
    first, steps = record["resumed_from"][-1], record["protocol"]["steps"]
    return f"{record['train_cpu_seconds_this_process']:,.0f} (steps {first:,}-{steps:,})"


def full_table(rows: dict) -> list[str]:
    lines = [
        "| model | size | tokenizer | params | lr | seeds | test bpb 1x | 2x | 4x | 8x | tokens/s | train s | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, size, tok), row in rows.items():
        cells = []
        for m in MULTIPLES:
            values = row["test_best"][m]
            each = " / ".join(f"{v:.4f}" for v in values)
            cells.append(each if len(values) == 1 else f"{each} ({_mean_std(values)})")
        speed = statistics.mean(row["tokens_per_second"])
        seconds = " / ".join(f"{s:.0f}" for s in row["train_seconds"])
        cpu = " / ".join(row["train_cpu_seconds"])
        seeds = ",".join(str(s) for s in row["seeds"])
        lines.append(
            f"| {model} | {size} | {tok} | {row['parameters']:,} | {row['learning_rate']:g} | {seeds} | "
            + " | ".join(cells)
            + f" | {speed:,.0f} | {seconds} | {cpu} |"
        )
    return lines


def plot_curves(records: list[dict], path: Path) -> None:
    """Test bits per byte (the learning-curve blocks) against training bytes, wall-clock training seconds and
    training CPU seconds (the runs that recorded them at every step; the others are named in that panel's title)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 4.5))
    without_cpu = []
    for i, r in enumerate(sorted(records, key=lambda r: (r["run"]["model"], r["seed"]))):
        curve = [c for c in r["curve"] if c["step"] > 0]
        style = {"label": f"{r['run']['model']} s{r['seed']}", "color": f"C{i % 10}"}  # one colour a run, every panel
        bpb = [c["bpb"] for c in curve]
        axes[0].plot([c["training_tokens"] / 1e6 for c in curve], bpb, **style)
        axes[1].plot([c["train_seconds"] for c in curve], bpb, **style)
        if all(c.get("train_cpu_seconds") is not None for c in curve):
            axes[2].plot([c["train_cpu_seconds"] for c in curve], bpb, **style)
        else:
            without_cpu.append(style["label"])
    axes[0].set_xlabel("training bytes (millions)")
    axes[1].set_xlabel("training seconds, wall clock (one thread, two jobs on two cores)")
    axes[2].set_xlabel("training CPU seconds (one thread)")
    if without_cpu:
        axes[2].set_title("not recorded per step: " + ", ".join(without_cpu), fontsize=7)
    for ax in axes:
        ax.set_ylabel("test bits per byte (64 blocks)")
        ax.grid(alpha=0.3)
    for ax in axes[1:]:
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: Path) -> None:
    sweep, full = _load(results, "sweep"), _load(results, "full")
    rows = full_rows(full)
    summary = {
        "sweep": [
            {k: r[k] for k in ("learning_rate", "seed", "validation_bpb")} | {"model": r["run"]["model"]} for r in sweep
        ],
        "full": [
            {"model": m, "size": s, "tokenizer": t, **{k: v for k, v in row.items() if k != "sample"}}
            for (m, s, t), row in rows.items()
        ],
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("### Learning-rate sweep (validation bits per byte)\n")
    print("\n".join(sweep_table(sweep)) if sweep else "no sweep records")
    print("\n### Full runs (test bits per byte)\n")
    print("\n".join(full_table(rows)) if rows else "no full records")
    if full:
        plot_curves(full, results / "curves.png")
        print(f"\nfigure: {results / 'curves.png'}")
    for (model, _, _), row in rows.items():
        print(f"\n{model}: {row['sample']['text']!r}")
