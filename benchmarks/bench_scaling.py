"""Cost against length: one layer of every mixer, forward + backward at T = 1k, 4k, 16k, 64k (BENCHMARKS.md).

One layer (the mixer alone: `block_type="mixer_only"`, built through `HybridSSMModel` so that it gets the model's
initialisation) of every SSM mixer in the registry, PD-SSM in bank and in dictionary mode (K = 8), the blocked
LRUs with m = 4, and softmax attention (`attn_implementation="sdpa"`, causal, RoPE), on random (B, T, d) input
with B = 1 and d = 128 by default. Every SSM mixer holds the same recurrent state width W = 2 d real numbers, the
way bench_pd.py matches PD-SSM and the LRUs (PD: one head of d complex states; LRUs: lru_total_state_size = 2 d;
LrcSSM / GRU / MGU: 2 d channels; LSTM: d channels of (c, h)); the registry's `width_matched_fields` picks the
fields. Attention: 4 heads of d / 4.

For every length T:
1. time: one untimed warm-up fwd+bwd per mixer, then `--rounds` interleaved rounds (every round runs every mixer
   once, in a rotating order, so that load from other processes hits all of them alike); the median per mixer;
2. memory: the rise of the peak during one more fwd+bwd; on CPU the process's resident high-water mark
   (bench_common.peak_rss_rise, the method of bench_pd.py), on CUDA torch.cuda.max_memory_allocated.

Attention's memory can grow as T^2: before each attention cell the bench estimates its peak from the backend
torch's sdpa dispatcher picks for these inputs (the math backend materialises the (B, heads, T, T) scores, their
softmax and both gradients; the flash / memory-efficient backends keep O(T) memory) and skips the cell, marked
"skipped: needs ~X GiB", when the estimate exceeds `--max_gib`. The estimate is written beside every measured
peak in the JSON, so its accuracy can be checked. Its time grows as T^2 whatever the backend: `--max_seconds`
skips a cell whose time, extrapolated from the previous length, would exceed that budget (none by default).

Targets (SSM mixers; printed with a verdict per row): the growth ratio t(T_max) / t(T_min) at most 1.25 x the
ideal T_max / T_min (80 for 1k -> 64k, ideal 64), and the peak memory rise at T_max at most 8 GiB.

    python benchmarks/bench_scaling.py --out results/bench_scaling.json
    python benchmarks/bench_scaling.py --smoke                 # T = 64, 128, 2 rounds: seconds
    python benchmarks/bench_scaling.py --lengths 1024,4096 --mixers diag_lru,attention --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch
from bench_common import load_average, peak_rss_rise, run_record
from torch.nn.attention import SDPBackend

from hf_ssm import HybridSSMConfig
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.modeling.mixer_registry import ATTENTION, mixer_names, mixer_spec, width_matched_fields
from hf_ssm.modeling.modeling_hybrid_ssm import HybridSSMModel
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS

DEFAULT_LENGTHS = (1024, 4096, 16384, 65536)
SMOKE_LENGTHS = (64, 128)
RATIO_SLACK = 1.25  # target growth ratio = 1.25 x ideal: 80 for T = 1k -> 64k
MEMORY_TARGET_GIB = 8.0  # peak memory rise of one SSM layer's fwd+bwd at the longest T
PD_DICT_SIZE = 8  # bench_pd.py's K
BLOCK_SIZE = 4  # m of bd_lru / h_lru
ATTENTION_LABEL = "attention (sdpa)"
GIB = 2**30


@dataclass
class Case:
    """One row of the tables: a mixer and the config fields that set its variant and state width."""

    label: str
    mixer: str
    fields: dict = field(default_factory=dict)
    state_width: int | None = None  # real numbers in one sequence's recurrent state (None: attention)


def build_cases(hidden_size: int, wanted: list[str] | None) -> list[Case]:
    """Every registered SSM mixer (PD-SSM twice: bank and dictionary) at state width 2 * hidden_size, then
    attention; `wanted` (mixer names or row labels) keeps only those."""
    width = 2 * hidden_size
    variants = {
        "pd_ssm": [
            ("pd_ssm bank", {"pd_ssm_transition": "bank", "pd_ssm_dict_size": PD_DICT_SIZE}),
            ("pd_ssm dictionary", {"pd_ssm_transition": "dictionary", "pd_ssm_dict_size": PD_DICT_SIZE}),
        ],
        "bd_lru": [(f"bd_lru m={BLOCK_SIZE}", {"lru_group_size": BLOCK_SIZE})],
        "h_lru": [(f"h_lru m={BLOCK_SIZE}", {"lru_group_size": BLOCK_SIZE})],
    }
    cases = []
    for name in mixer_names():
        for label, extra in variants.get(name, [(name, {})]):
            given = {"pd_ssm_num_heads": 1, **extra} if name == "pd_ssm" else dict(extra)
            fields = {**given, **width_matched_fields([name], width, given)}
            cases.append(Case(label, name, fields))
    cases.append(Case(ATTENTION_LABEL, ATTENTION))
    if wanted:
        known = {c.label for c in cases} | {c.mixer for c in cases}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ValueError(f"--mixers: unknown {unknown}; choose from {sorted(known)}")
        cases = [c for c in cases if c.label in wanted or c.mixer in wanted]
    return cases


def build_layer(case: Case, args: argparse.Namespace, max_length: int) -> HybridSSMModel:
    """A one-layer model around the mixer only (its embedding is not used), initialised like any model; PD-SSM as
    the paper's layer (PAPER_PD_SSM_LAYER) with the case's transition."""
    config = HybridSSMConfig(
        **{**PAPER_PD_SSM_LAYER, **case.fields},
        vocab_size=2,
        hidden_size=args.hidden_size,
        num_attention_heads=args.heads,
        num_hidden_layers=1,
        mixers=[case.mixer],
        block_type="mixer_only",
        max_position_embeddings=max_length,
        scan_backend=args.scan_backend,
        use_cache=False,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = HybridSSMModel(config).to(args.device)
    if case.mixer != ATTENTION:
        case.state_width = mixer_spec(case.mixer).state_width(config)
    return model


def fwd_bwd_fn(model: HybridSSMModel, u: torch.Tensor):
    """fn() running one forward + backward of the layer's mixer on u (B, T, d) (a scalar loss of its output)."""
    mixer = model.layers[0].mixer
    positions = torch.arange(u.shape[1], device=u.device)[None]

    def step():
        mixer.zero_grad(set_to_none=True)
        x = u.detach().requires_grad_()
        if model.layers[0].is_attention:
            # attention_mask None: the causal sdpa call the model makes for unpadded input
            y = mixer(x, model.rotary_emb(x, positions), None)[0]
        else:
            y, _ = mixer(x)
        y.pow(2).mean().backward()

    return step


def attention_peak_estimate(config: HybridSSMConfig, batch: int, steps: int, device: str) -> tuple[int, str]:
    """(bytes, backend): the estimated peak memory rise of one causal sdpa fwd+bwd, and the sdpa backend torch
    picks for such inputs. The math backend holds the (B, heads, T, T) scores, their softmax (kept for backward)
    and the gradients of both; the fused backends only O(T) tensors. Both hold the projections, rotated copies,
    output and their gradients (counted as 24 (B, T, d) tensors, an upper bound)."""
    heads, head_dim, elt = config.num_attention_heads, config.head_dim, 4  # float32
    probe = torch.zeros(batch, heads, 16, head_dim, device=device, requires_grad=True)
    choose = getattr(torch, "_fused_sdp_choice", None)  # private: without it, assume the math backend
    backend = SDPBackend(choose(probe, probe, probe, None, 0.0, True)) if choose else SDPBackend.MATH
    linear = 24 * batch * steps * config.hidden_size * elt
    quadratic = 4 * batch * heads * steps * steps * elt if backend == SDPBackend.MATH else 0
    return linear + quadratic, backend.name


def peak_bytes(step, device: str) -> int:
    """Rise of the peak memory during one call of step()."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    return peak_rss_rise(step)


def timed(step, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run_length(cases, models, steps: int, args, previous: dict | None = None) -> dict[str, dict]:
    """Times (interleaved rounds) and peak memory of every case at length `steps`: {label: cell}; `previous`: the
    cells of the last length, from which an attention cell's time is extrapolated for `--max_seconds`."""
    generator = torch.Generator().manual_seed(steps)
    u = torch.randn(args.batch, steps, args.hidden_size, generator=generator).to(args.device)
    cells, steps_fns = {}, []
    for case, model in zip(cases, models):
        cell: dict = {"T": steps}
        if case.mixer == ATTENTION:
            estimate, backend = attention_peak_estimate(model.config, args.batch, steps, args.device)
            cell.update(estimated_peak_bytes=estimate, sdpa_backend=backend)
            if estimate > args.max_gib * GIB:
                cell["skipped"] = f"needs ~{estimate / GIB:.3g} GiB"
            elif args.max_seconds and previous and "median_s" in previous.get(case.label, {}):
                # O(T^2) work: scale the last measured length's time
                before = previous[case.label]
                seconds = before["median_s"] * (steps / before["T"]) ** 2
                if seconds * (args.rounds + 2) > args.max_seconds:
                    cell["skipped"] = f"needs ~{seconds:.3g} s a call"
        cells[case.label] = cell
        if "skipped" not in cell:
            steps_fns.append((case.label, fwd_bwd_fn(model, u)))
    for _, step in steps_fns:  # warm-up at this length
        step()
    times: dict[str, list[float]] = {label: [] for label, _ in steps_fns}
    for r in range(args.rounds):
        for i in range(len(steps_fns)):
            label, step = steps_fns[(i + r) % len(steps_fns)]
            times[label].append(timed(step, args.device))
    for label, step in steps_fns:
        cells[label].update(
            median_s=statistics.median(times[label]), times_s=times[label], peak_bytes=peak_bytes(step, args.device)
        )
    return cells


def verdict(case: Case, cells: dict[int, dict], lengths: list[int]) -> dict:
    """Growth ratio t(T_max) / t(T_min) against its ideal and target, peak memory at T_max against its target."""
    first, last = cells[lengths[0]], cells[lengths[-1]]
    ideal = lengths[-1] / lengths[0]
    ratio = last["median_s"] / first["median_s"] if "median_s" in first and "median_s" in last else None
    peak = last.get("peak_bytes")
    out = {"growth_ratio": ratio, "ideal_ratio": ideal}
    if case.mixer == ATTENTION:
        return {**out, "verdict": "no target"}
    ratio_target = RATIO_SLACK * ideal
    ratio_met = ratio is not None and ratio <= ratio_target
    memory_met = peak is not None and peak <= MEMORY_TARGET_GIB * GIB
    return {
        **out,
        "ratio_target": ratio_target,
        "ratio_met": ratio_met,
        "memory_target_gib": MEMORY_TARGET_GIB,
        "memory_met": memory_met,
        "verdict": "met" if ratio_met and memory_met else "MISSED",
    }


def fmt_ms(cell: dict) -> str:
    return f"skipped: {cell['skipped']}" if "skipped" in cell else f"{1000 * cell['median_s']:.1f}"


def fmt_mib(cell: dict) -> str:
    return f"skipped: {cell['skipped']}" if "skipped" in cell else f"{cell['peak_bytes'] / 2**20:.1f}"


def print_tables(rows: list[dict], lengths: list[int]) -> None:
    first, last = lengths[0], lengths[-1]
    cols = " | ".join(f"T = {t}" for t in lengths)
    print("\nfwd+bwd median (ms)\n")
    print(f"| mixer | state width (reals) | {cols} | t({last}) / t({first}) | ideal |")
    print("|" + "---|" * (len(lengths) + 4))
    for row in rows:
        ratio = "—" if row["growth_ratio"] is None else f"{row['growth_ratio']:.1f}"
        width = row["state_width"] if row["state_width"] is not None else "—"
        times = " | ".join(fmt_ms(row["cells"][t]) for t in lengths)
        print(f"| {row['label']} | {width} | {times} | {ratio} | {row['ideal_ratio']:.0f} |")
    print("\npeak memory rise of one fwd+bwd (MiB)\n")
    print(f"| mixer | {cols} |")
    print("|" + "---|" * (len(lengths) + 1))
    for row in rows:
        print(f"| {row['label']} | " + " | ".join(fmt_mib(row["cells"][t]) for t in lengths) + " |")
    target = RATIO_SLACK * last / first
    print("\ntargets (SSM mixers)\n")
    print(
        f"| mixer | t({last}) / t({first}) | ratio <= {target:g} | peak at T = {last} (GiB) "
        f"| peak <= {MEMORY_TARGET_GIB:g} GiB | verdict |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        ratio = "—" if row["growth_ratio"] is None else f"{row['growth_ratio']:.1f}"
        cell = row["cells"][last]
        peak = cell["skipped"] if "skipped" in cell else f"{cell['peak_bytes'] / GIB:.2f}"
        if row["verdict"] == "no target":
            print(f"| {row['label']} | {ratio} | — | {peak} | — | no target |")
            continue
        ratio_ok = "met" if row["ratio_met"] else "MISSED"
        memory_ok = "met" if row["memory_met"] else "MISSED"
        print(f"| {row['label']} | {ratio} | {ratio_ok} | {peak} | {memory_ok} | {row['verdict']} |")


def int_list(text: str) -> list[int]:
    """An argparse type: "1024,4096" -> [1024, 4096]."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--lengths", type=int_list, default=list(DEFAULT_LENGTHS), help="comma-separated T (default 1024,...,65536)"
    )
    p.add_argument("--smoke", action="store_true", help=f"T = {SMOKE_LENGTHS}, 2 rounds: checks the bench runs")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds per length, after a warm-up")
    p.add_argument("--mixers", type=lambda s: [m.strip() for m in s.split(",") if m.strip()], default=None,
                   help="comma-separated mixer names or row labels (default: all)")  # fmt: skip
    p.add_argument("--batch", type=int, default=1, help="batch size B")
    p.add_argument("--hidden_size", type=int, default=128, help="model width d")
    p.add_argument("--heads", type=int, default=4, help="attention heads (head_dim = d / heads)")
    p.add_argument("--max_gib", type=float, default=8.0,
                   help="skip an attention cell whose estimated peak memory exceeds this (GiB)")  # fmt: skip
    p.add_argument("--max_seconds", type=float, default=0.0,
                   help="skip an attention cell whose time (extrapolated as T^2 from the previous length) for "
                   "warm-up, rounds and memory exceeds this (0: no limit)")  # fmt: skip
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--scan_backend", default="auto",
                   help="HybridSSMConfig.scan_backend (auto: Triton on CUDA, torch on CPU)")  # fmt: skip
    p.add_argument("--cpu_threads", type=int, default=0, help="torch threads (0: torch's default)")
    refuse_options(p, RENAMED_OPTIONS["bench_scaling"])
    p.add_argument("--out", default=None, help="also write the figures as JSON here")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.smoke:
        args.lengths, args.rounds = list(SMOKE_LENGTHS), min(args.rounds, 2)
    if len(args.lengths) < 2 or any(t < 1 for t in args.lengths) or sorted(set(args.lengths)) != args.lengths:
        p.error(f"--lengths must be at least two distinct positive integers in increasing order, got {args.lengths}")
    for name in ("rounds", "batch", "hidden_size", "heads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.hidden_size % args.heads:
        p.error(f"--hidden_size ({args.hidden_size}) must be divisible by --heads ({args.heads})")
    if args.max_seconds < 0:
        p.error(f"--max_seconds must be >= 0 (0: no limit), got {args.max_seconds}")
    if not args.max_gib > 0:
        p.error(f"--max_gib must be > 0, got {args.max_gib}")
    if args.cpu_threads < 0:
        p.error(f"--cpu_threads must be >= 0 (0: torch's default), got {args.cpu_threads}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    try:
        args.cases = build_cases(args.hidden_size, args.mixers)
    except ValueError as err:
        p.error(str(err))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cpu_threads > 0:
        torch.set_num_threads(args.cpu_threads)
    record = run_record()
    record["load_average_start"] = record.pop("load_average")
    settings = {k: v for k, v in vars(args).items() if k not in ("cases", "out", "cpu_threads")}
    settings["threads"] = args.cpu_threads  # the records' key from before --cpu_threads: old and new records read alike
    record.update(settings=settings, ratio_slack=RATIO_SLACK, memory_target_gib=MEMORY_TARGET_GIB)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
        f"load average {record['load_average_start']}; B = {args.batch}, d = {args.hidden_size}, "
        f"lengths {args.lengths}, {args.rounds} rounds",
        flush=True,
    )
    cases = args.cases
    models = [build_layer(case, args, args.lengths[-1]) for case in cases]
    by_length, previous = {}, None
    for steps in args.lengths:
        start = time.perf_counter()
        by_length[steps] = run_length(cases, models, steps, args, by_length.get(previous))
        previous = steps
        print(f"T = {steps}: {time.perf_counter() - start:.1f} s, load average {load_average()}", flush=True)
    rows = []
    for case in cases:
        cells = {t: by_length[t][case.label] for t in args.lengths}
        rows.append(
            dict(label=case.label, mixer=case.mixer, config_fields=case.fields, state_width=case.state_width,
                 cells=cells, **verdict(case, cells, args.lengths))
        )  # fmt: skip
    print_tables(rows, args.lengths)
    record["load_average_end"] = load_average()
    print(f"\nload average at the start {record['load_average_start']}, at the end {record['load_average_end']}")
    if args.out:
        record["results"] = [{**row, "cells": [row["cells"][t] for t in args.lengths]} for row in rows]
        with open(args.out, "w") as f:
            json.dump(record, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
