"""Eager vs torch.compile for the 4-layer SASA hybrid and Qwen2 of equal size, in one process, interleaved.

1. One-token decode on a static cache (`StaticCache`, what compiled generation uses): ms per token over
   `--new_tokens` greedy steps after a prompt of `--context` tokens, B = 1. Eager runs `model.forward`, compiled
   runs `torch.compile(model.forward)` (inductor, fullgraph). The first compiled call compiles; it is timed apart
   (`compile_s`) and not counted.
2. Training (forward + backward + AdamW step) tokens/s at T = `--train_length`, B = 2: `model` against
   `torch.compile(model)`.

Every round runs the four variants (hybrid / Qwen2, eager / compiled), alternating their order between rounds;
medians over rounds and the median of per-round ratios (min-max). The models are those of bench_hybrid.py (same
builder). Reported ratios: compiled / eager time per token for each model, and hybrid / Qwen2 compiled.

    python benchmarks/bench_compile.py --out results/bench_compile.json      # also writes .md next to it
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from bench_common import load_average, run_record
from bench_hybrid import VOCAB, _ratios, build_models, cpu_clock, interleaved, training_step_fn
from transformers import StaticCache

from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS


def decode_fn(model, forward, context: int, new_tokens: int):
    """() -> (wall s per token, CPU s per token) of greedy one-token steps of `forward` after an eager prefill."""
    prompt = torch.randint(1, VOCAB, (1, context), generator=torch.Generator().manual_seed(context))

    @torch.no_grad()
    def run() -> tuple[float, float]:
        cache = StaticCache(config=model.config, max_cache_len=context + new_tokens)
        token = model(prompt, cache=cache, use_cache=True).logits[:, -1:].argmax(-1)
        start, cpu = time.perf_counter(), cpu_clock()
        for _ in range(new_tokens):
            token = forward(token, cache=cache, use_cache=True).logits[:, -1:].argmax(-1)
        return (time.perf_counter() - start) / new_tokens, (cpu_clock() - cpu) / new_tokens

    return run


def timed_first_call(fn) -> float:
    """Seconds of fn()'s first call (for a compiled variant: compilation plus one run)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def summary(times: dict, per_unit: float, unit: str) -> dict:
    """Medians per variant (in `unit`) and the ratios the benchmark reports."""
    wall = {name: [t[0] for t in runs] for name, runs in times.items()}
    cpu = {name: [t[1] for t in runs] for name, runs in times.items()}
    out = {f"{name}_{unit}": per_unit * statistics.median(w) for name, w in wall.items()}
    out.update({f"{name}_cpu_{unit}": per_unit * statistics.median(c) for name, c in cpu.items()})
    for model in ("hybrid", "qwen2"):
        out[f"{model}_compiled_over_eager"] = _ratios(wall[f"{model}_compiled"], wall[f"{model}_eager"])
    out["hybrid_over_qwen2_compiled"] = _ratios(wall["hybrid_compiled"], wall["qwen2_compiled"])
    out["hybrid_over_qwen2_eager"] = _ratios(wall["hybrid_eager"], wall["qwen2_eager"])
    out["rounds_wall_s"] = wall
    return out


def _fmt(r: dict) -> str:
    low, high = r["median_ci95"]
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}; median 95 % interval {low:.2f}-{high:.2f})"


def markdown(results: dict) -> str:
    lines = [
        f"4-layer SASA hybrid vs Qwen2ForCausalLM (bench_hybrid.py's models), torch {results['torch']}, "
        f"{results['threads']} torch threads, load average {results['load_average']} -> {results['load_average_end']}. "
        "Ratios of times: median over interleaved rounds (min-max; the median's bootstrap interval).",
        "",
    ]
    d = results.get("decode")
    if d:
        lines += [
            f"Decode on a static cache, context {d['context']}, {d['new_tokens']} new tokens, {d['rounds']} rounds:",
            "",
            "| model | eager ms/token | compiled ms/token | compiled / eager | compile s |",
            "|---|---|---|---|---|",
        ]
        for m in ("hybrid", "qwen2"):
            lines.append(
                f"| {m} | {d[f'{m}_eager_ms']:.2f} | {d[f'{m}_compiled_ms']:.2f} | "
                f"{_fmt(d[f'{m}_compiled_over_eager'])} | {d['compile_s'][m]:.0f} |"
            )
        lines += ["", f"hybrid / Qwen2, compiled: {_fmt(d['hybrid_over_qwen2_compiled'])}; "
                  f"eager: {_fmt(d['hybrid_over_qwen2_eager'])}", ""]  # fmt: skip
    t = results.get("training")
    if t:
        lines += [
            f"Training step (fwd + bwd + AdamW), T = {t['T']}, B = {t['B']}, {t['rounds']} rounds:",
            "",
            "| model | eager tokens/s | compiled tokens/s | compiled / eager time | compile s |",
            "|---|---|---|---|---|",
        ]
        tokens = t["B"] * t["T"]
        for m in ("hybrid", "qwen2"):
            lines.append(
                f"| {m} | {tokens / t[f'{m}_eager_s']:.0f} | {tokens / t[f'{m}_compiled_s']:.0f} | "
                f"{_fmt(t[f'{m}_compiled_over_eager'])} | {t['compile_s'][m]:.0f} |"
            )
        lines += ["", f"hybrid / Qwen2 step time, compiled: {_fmt(t['hybrid_over_qwen2_compiled'])}", ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/bench_compile.json", help="JSON file (the Markdown goes next to it)")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--decode_rounds", type=int, default=9)
    parser.add_argument("--train_length", type=int, default=1024, help="0: no training section")
    parser.add_argument("--train_rounds", type=int, default=5)
    parser.add_argument("--cpu_threads", type=int, default=0, help="torch threads (0 = torch's default)")
    refuse_options(parser, RENAMED_OPTIONS["bench_compile"])
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    models = build_models()
    results = {
        **run_record(),
    }
    fns, compile_s = {}, {}
    for name, model in models.items():
        model.eval()
        fns[f"{name}_eager"] = decode_fn(model, model.forward, args.context, args.new_tokens)
        fns[f"{name}_compiled"] = decode_fn(
            model, torch.compile(model.forward, fullgraph=True), args.context, args.new_tokens
        )
        compile_s[name] = timed_first_call(fns[f"{name}_compiled"])
        print(f"decode: {name} compiled in {compile_s[name]:.0f} s", flush=True)
    decode = summary(interleaved(fns, args.decode_rounds), 1e3, "ms")
    results["decode"] = dict(
        context=args.context, new_tokens=args.new_tokens, rounds=args.decode_rounds, compile_s=compile_s, **decode
    )
    if args.train_length:
        fns, compile_s = {}, {}
        for name, model in models.items():
            model.train()
            fns[f"{name}_eager"] = training_step_fn(model, 2, args.train_length)
            fns[f"{name}_compiled"] = training_step_fn(model, 2, args.train_length, forward=torch.compile(model))
            compile_s[name] = timed_first_call(fns[f"{name}_compiled"])
            print(f"training: {name} compiled in {compile_s[name]:.0f} s", flush=True)
        training = summary(interleaved(fns, args.train_rounds), 1.0, "s")
        results["training"] = dict(T=args.train_length, B=2, rounds=args.train_rounds, compile_s=compile_s, **training)
    results["load_average_end"] = load_average()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    table = markdown(results)
    out.with_suffix(".md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
