"""4-layer SASA hybrid vs transformers' Qwen2ForCausalLM of equal width and depth: training and decode speed.

One process, interleaved repetitions (the two models alternate inside every round, and which one goes first
alternates between rounds), medians over rounds and the median of the per-round ratios:
1. training tokens/s (forward + backward + AdamW step, B = 2) at T = 1024 and T = 4096, and beside them the hybrid
   with its SSM mixers replaced by the identity ("free-mixer floor"): the tokens/s no SSM layer in this block can
   beat, so the ratio the target asks of the hybrid is out of reach wherever the floor's ratio falls short of it;
2. greedy decoding with `model.generate` (KV / recurrent-state cache, B = 1): a fixed number of new tokens after a
   prompt of 256 and of 4096 tokens. A logits processor stamps the time of every generation step, so prefill (up to
   the first step) and decode (ms per token over the remaining steps) are reported separately.

The hybrid uses HybridSSMConfig's default PD-SSM settings; Qwen2 is built from a Qwen2Config of the same width,
depth, heads (no grouping), MLP width and vocabulary; both with attn_implementation="sdpa".

Every time is taken twice: wall clock and this process's CPU time. The default is one torch thread: on a machine
shared with other jobs the CPU-time ratio then stays put while wall times swing with the load (with two threads
each parallel region also waits for a descheduled thread). `--cpu_threads 0` keeps torch's default, for a quiet machine.

    python benchmarks/bench_hybrid.py --decode_rounds 15 --out results/bench_hybrid.json   (also writes .md next to it)
    python benchmarks/bench_hybrid.py --train_lengths --decode_rounds 15 --out /tmp/decode.json   (decode only)
    python benchmarks/bench_hybrid.py --profile 1024 --cpu_threads 0     (where a training step's time goes; no JSON)
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import time

import torch
from bench_common import load_average, run_record
from torch import nn
from transformers import LogitsProcessor, LogitsProcessorList, Qwen2Config, Qwen2ForCausalLM

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS

WIDTH, LAYERS, HEADS, VOCAB, MLP = 256, 4, 4, 256, 688


def cpu_clock() -> float:
    """CPU seconds of this process: with one torch thread, the work done, whatever else shares the machine."""
    return time.process_time()


def build_models(seed: int = 0):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        intermediate_size=MLP,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=8192,
        attn_implementation="sdpa",
        pad_token_id=0,
        eos_token_id=None,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    hybrid = HybridSSMForCausalLM(HybridSSMConfig(mixers="SASA", **PAPER_PD_SSM_LAYER, **common))
    torch.manual_seed(seed)
    qwen = Qwen2ForCausalLM(Qwen2Config(**common))
    return {"hybrid": hybrid, "qwen2": qwen}


class _FreeMixer(nn.Module):
    """An SSM mixer that costs nothing: (B, T, d) -> the same (B, T, d), no state (training calls only)."""

    def forward(self, hidden_states, state=None, mask=None):
        return hidden_states, None


def free_mixer_floor(hybrid):
    """A copy of `hybrid` whose SSM layers mix nothing (identity mixer); norms, MLPs, attention layers unchanged."""
    floor = copy.deepcopy(hybrid)
    for layer in floor.model.layers:
        if not layer.is_attention:
            layer.mixer = _FreeMixer()
    return floor


def interleaved(fns: dict, rounds: int, warmup: int = 1) -> dict:
    """{name: [result per round]} for fns {name: () -> result}, alternating the order between rounds."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            times[name].append(fns[name]())
    return times


def training_step_fn(model, batch: int, steps: int, forward=None):
    """() -> (wall s, CPU s) of one forward + backward + AdamW step of `model`, run through `forward` (default
    the model itself; bench_compile.py passes its compiled twin)."""
    model.train()
    forward = model if forward is None else forward
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(1, VOCAB, (batch, steps), generator=torch.Generator().manual_seed(steps))

    def step() -> tuple[float, float]:
        """(wall s, CPU s) of one step."""
        start, cpu = time.perf_counter(), cpu_clock()
        loss = forward(input_ids=ids, labels=ids, use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start, cpu_clock() - cpu

    return step


class _StepClock(LogitsProcessor):
    """Records (perf_counter, CPU clock) at every generation step (called once per step, after its forward)."""

    def __init__(self):
        self.stamps, self.cpu = [], []

    def __call__(self, input_ids, scores):
        self.stamps.append(time.perf_counter())
        self.cpu.append(cpu_clock())
        return scores


def decode_fn(model, context: int, new_tokens: int):
    model.eval()
    prompt = torch.randint(1, VOCAB, (1, context), generator=torch.Generator().manual_seed(context))
    mask = torch.ones_like(prompt)

    def run() -> tuple[float, float, float]:
        """(prefill wall s, decode wall s per token, decode CPU s per token)."""
        clock = _StepClock()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=prompt,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                logits_processor=LogitsProcessorList([clock]),
                use_cache=True,
            )
        if out.shape[1] != context + new_tokens or len(clock.stamps) != new_tokens:
            raise RuntimeError(f"generate made {out.shape[1] - context} tokens in {len(clock.stamps)} steps")
        prefill = clock.stamps[0] - start
        # steps 2..n: one cached forward each (the stamp of step i is taken after its forward)
        decode = (clock.stamps[-1] - clock.stamps[0]) / (new_tokens - 1)
        return prefill, decode, (clock.cpu[-1] - clock.cpu[0]) / (new_tokens - 1)

    return run


def _ratios(a: list, b: list) -> dict:
    """Per-round a / b: median, min, max, and the median's 95 % bootstrap interval."""
    r = [x / y for x, y in zip(a, b, strict=True)]
    return {"median": statistics.median(r), "min": min(r), "max": max(r), "median_ci95": median_interval(r)}


def median_interval(values: list, resamples: int = 2000, seed: int = 0) -> list:
    """95 % bootstrap interval [low, high] of the median of `values` (fixed seed): on this shared 2-core machine a
    round's ratio wanders by +-30 %, and the interval tells a median that differs from 1 from one that does not."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return [medians[round(0.025 * resamples)], medians[round(0.975 * resamples) - 1]]


def bench_training(models, steps_list, batch, rounds):
    """One row per T: the hybrid, Qwen2 and the hybrid's free-mixer floor, interleaved in every round."""
    rows = []
    models = {**models, "floor": free_mixer_floor(models["hybrid"])}
    for steps in steps_list:
        fns = {name: training_step_fn(m, batch, steps) for name, m in models.items()}
        times = interleaved(fns, rounds)
        (h, hc), (q, qc), (f, fc) = (list(zip(*times[name])) for name in ("hybrid", "qwen2", "floor"))
        rows.append(
            {
                "T": steps,
                "B": batch,
                "rounds": rounds,
                "hybrid_tokens_per_s": batch * steps / statistics.median(h),
                "qwen2_tokens_per_s": batch * steps / statistics.median(q),
                # tokens/s ratio hybrid / Qwen2 = Qwen2 time / hybrid time, per round
                "ratio_wall": _ratios(q, h),
                "ratio_cpu": _ratios(qc, hc),
                # the most any SSM mixer could give: Qwen2 time / the free-mixer floor's time, per round
                "floor_tokens_per_s": batch * steps / statistics.median(f),
                "floor_ratio_wall": _ratios(q, f),
                "floor_ratio_cpu": _ratios(qc, fc),
                "hybrid_step_s": h,
                "qwen2_step_s": q,
                "hybrid_step_cpu_s": hc,
                "qwen2_step_cpu_s": qc,
                "floor_step_s": f,
                "floor_step_cpu_s": fc,
            }
        )
    return rows


def bench_decode(models, contexts, new_tokens, rounds):
    rows = []
    for context in contexts:
        fns = {name: decode_fn(m, context, new_tokens) for name, m in models.items()}
        results = interleaved(fns, rounds)  # after one warm-up round, not recorded
        (hp, h, hc), (qp, q, qc) = (list(zip(*results[name])) for name in ("hybrid", "qwen2"))
        rows.append(
            {
                "context": context,
                "new_tokens": new_tokens,
                "rounds": rounds,
                "hybrid_decode_ms_per_token": 1e3 * statistics.median(h),
                "qwen2_decode_ms_per_token": 1e3 * statistics.median(q),
                "hybrid_decode_cpu_ms_per_token": 1e3 * statistics.median(hc),
                "qwen2_decode_cpu_ms_per_token": 1e3 * statistics.median(qc),
                # hybrid / Qwen2 time per token, per round; <= 1 is the target
                "ratio_wall": _ratios(h, q),
                "ratio_cpu": _ratios(hc, qc),
                "hybrid_prefill_s": statistics.median(hp),
                "qwen2_prefill_s": statistics.median(qp),
                "hybrid_decode_s_per_token": h,
                "qwen2_decode_s_per_token": q,
            }
        )
    return rows


TRAINING_TARGET = 1.5  # hybrid tokens/s >= 1.5 x Qwen2's


def _training_verdict(row: dict) -> str:
    """met / MISSED for the hybrid, and whether any SSM mixer could meet it (the floor's ratio)."""
    if row["ratio_wall"]["median"] >= TRAINING_TARGET:
        return "met"
    if row["floor_ratio_wall"]["median"] < TRAINING_TARGET:
        return "MISSED; out of reach (floor below)"
    return "MISSED"


def profile_training(models, steps: int, batch: int, rows: int = 12) -> None:
    """Print the torch profiler's table of self CPU time by op for two training steps (after two untimed ones) of
    each model at length `steps`: where the hybrid's time goes against Qwen2's."""
    from torch.profiler import ProfilerActivity, profile

    for name, model in {**models, "floor": free_mixer_floor(models["hybrid"])}.items():
        step = training_step_fn(model, batch, steps)
        for _ in range(2):  # untimed: first-call allocations and the optimizer's state
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                step()
        print(f"\n{name}, T = {steps}, B = {batch}: two training steps, self CPU time by op")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48))


def _fmt(r: dict) -> str:
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def markdown(results) -> str:
    lines = [
        f"4-layer SASA hybrid vs Qwen2ForCausalLM, d={WIDTH}, heads={HEADS}, MLP={MLP}, vocab={VOCAB}; "
        f"torch {results['torch']}, {results['threads']} torch threads, load average {results['load_average']} "
        f"-> {results['load_average_end']}. Ratios: median over interleaved rounds (min-max); CPU = process CPU time.",
        "",
        "### Training (fwd + bwd + AdamW): hybrid tokens/s / Qwen2 tokens/s",
        "",
        "| T | B | rounds | hybrid tokens/s | Qwen2 tokens/s | ratio, wall | ratio, CPU | free-mixer floor tokens/s "
        "| floor ratio, wall | target 1.5x |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.get("training", []):
        lines.append(
            f"| {r['T']} | {r['B']} | {r['rounds']} | {r['hybrid_tokens_per_s']:.0f} | {r['qwen2_tokens_per_s']:.0f} "
            f"| {_fmt(r['ratio_wall'])} | {_fmt(r['ratio_cpu'])} | {r['floor_tokens_per_s']:.0f} "
            f"| {_fmt(r['floor_ratio_wall'])} | {_training_verdict(r)} |"
        )
    lines += [
        "",
        "### Greedy decode (generate, B = 1): ms per new token after the prefill; ratio = hybrid / Qwen2",
        "",
        "| context | new tokens | rounds | hybrid ms/token | Qwen2 ms/token | ratio, wall | hybrid CPU ms/token "
        "| Qwen2 CPU ms/token | ratio, CPU | hybrid prefill (s) | Qwen2 prefill (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.get("decode", []):
        lines.append(
            f"| {r['context']} | {r['new_tokens']} | {r['rounds']} | {r['hybrid_decode_ms_per_token']:.2f} "
            f"| {r['qwen2_decode_ms_per_token']:.2f} | {_fmt(r['ratio_wall'])} "
            f"| {r['hybrid_decode_cpu_ms_per_token']:.2f} | {r['qwen2_decode_cpu_ms_per_token']:.2f} "
            f"| {_fmt(r['ratio_cpu'])} | {r['hybrid_prefill_s']:.3f} | {r['qwen2_prefill_s']:.3f} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/bench_hybrid.json", help="JSON file (the Markdown goes next to it)")
    parser.add_argument(
        "--train_lengths", type=int, nargs="*", default=[1024, 4096], help="none given: no training section"
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--train_rounds", type=int, default=5)
    parser.add_argument("--contexts", type=int, nargs="*", default=[256, 4096], help="none given: no decode section")
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--decode_rounds", type=int, default=5, help="after one warm-up round")
    parser.add_argument(
        "--cpu_threads",
        type=int,
        default=1,
        help="torch threads (default 1: on a shared machine the CPU-time ratio is then the robust figure; 0 = torch's)",
    )
    refuse_options(parser, RENAMED_OPTIONS["bench_hybrid"])
    parser.add_argument(
        "--profile", type=int, default=None, metavar="T", help="only print an op profile of training steps at T"
    )
    return parser


def main():
    parser = build_parser()
    args = parser.parse_args()
    if args.new_tokens < 2:
        parser.error("--new_tokens must be >= 2 (decode time is measured between generation steps)")
    if args.cpu_threads:
        torch.set_num_threads(args.cpu_threads)
    if torch.get_num_threads() > 1:
        print("note: with more than one thread the CPU time includes the thread pool's waiting; compare wall times")

    models = build_models()
    if args.profile:
        profile_training(models, args.profile, args.batch)
        return
    results = {
        **run_record(),
        "hybrid_pd_ssm": {
            k: getattr(models["hybrid"].config, k)
            for k in ("pd_ssm_num_heads", "pd_ssm_head_state_size", "pd_ssm_dict_size", "pd_ssm_transition")
        },
        "params": {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()},
    }
    if args.train_lengths:
        results["training"] = bench_training(models, args.train_lengths, args.batch, args.train_rounds)
    if args.contexts:
        results["decode"] = bench_decode(models, args.contexts, args.new_tokens, args.decode_rounds)
    results["load_average_end"] = load_average()
    table = markdown(results)
    print(table)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(table + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
