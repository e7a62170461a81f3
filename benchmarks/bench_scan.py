"""PD-SSM scan and model benchmarks (CPU or CUDA), printed as Markdown tables and written as JSON.

Three measurements (issue "Foundation", BENCHMARKS.md):
1. parallel PD scan vs the sequential loop, forward + backward, at B=4, T=4096, H=4, N=64;
2. PD scan vs a chunked scan over dense N x N transitions of the same sequence at N=128: forward time and
   peak memory (peak resident memory of a fresh subprocess running only that scan);
3. training throughput (tokens/s, forward + backward + AdamW step) of a 4-layer "SASA" hybrid vs
   transformers' Qwen2ForCausalLM of the same width and depth, at T=1024 and T=4096.

    python benchmarks/bench_scan.py --out bench_scan.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys

import torch
from bench_common import print_table_head, wall_times

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.ops.checks import default_chunk_size
from hf_ssm.ops.pd import pd_scan, reference
from hf_ssm.ops.pd.reference import pd_to_dense


def timed(fn, repeats: int) -> float:
    """Median wall time of fn() in seconds over `repeats` runs, after one warm-up."""
    return statistics.median(wall_times(fn, repeats))


def pd_inputs(batch, steps, heads, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (batch, steps, heads, n), generator=g)
    dv = torch.polar(torch.rand(batch, steps, heads, n, generator=g), torch.rand(batch, steps, heads, n, generator=g))
    b = torch.randn(batch, steps, heads, n, dtype=torch.complex64, generator=g)
    return idx, dv, b


def scan_forward_backward(scan, idx, dv, b):
    dv, b = dv.clone().requires_grad_(), b.clone().requires_grad_()
    states, _ = scan(idx, dv, b)
    states.abs().sum().backward()


def bench_parallel_vs_sequential(batch, steps, heads, n, repeats):
    idx, dv, b = pd_inputs(batch, steps, heads, n)
    parallel = timed(lambda: scan_forward_backward(pd_scan, idx, dv, b), repeats)
    sequential = timed(lambda: scan_forward_backward(reference.pd_scan, idx, dv, b), 1)
    return {
        "shape": dict(B=batch, T=steps, H=heads, N=n),
        "parallel_fwd_bwd_s": parallel,
        "sequential_fwd_bwd_s": sequential,
        "speedup": sequential / parallel,
    }


def dense_scan(a: torch.Tensor, b: torch.Tensor, chunk: int) -> torch.Tensor:
    """Chunked scan x_t = A_t x_{t-1} + b_t over dense (B, T, H, N, N) transitions (what a dense SSM needs)."""
    batch, steps, heads, n, _ = a.shape
    chunks = -(-steps // chunk)
    pad = chunks * chunk - steps
    if pad:
        eye = torch.eye(n, dtype=a.dtype).expand(batch, pad, heads, n, n)
        a = torch.cat([a, eye], dim=1)
        b = torch.cat([b, b.new_zeros(batch, pad, heads, n)], dim=1)
    a = a.view(batch, chunks, chunk, heads, n, n)
    b = b.view(batch, chunks, chunk, heads, n)
    cum = torch.eye(n, dtype=a.dtype).expand(batch, chunks, heads, n, n)
    loc = torch.zeros_like(b[:, :, 0])
    cums, locs = [], []
    for step in range(chunk):
        cum = a[:, :, step] @ cum
        loc = (a[:, :, step] @ loc.unsqueeze(-1)).squeeze(-1) + b[:, :, step]
        cums.append(cum)
        locs.append(loc)
    carry = torch.zeros_like(loc[:, 0])
    starts = []
    for c in range(chunks):
        starts.append(carry)
        carry = (cums[-1][:, c] @ carry.unsqueeze(-1)).squeeze(-1) + locs[-1][:, c]
    starts = torch.stack(starts, dim=1).unsqueeze(2)
    states = (torch.stack(cums, dim=2) @ starts.unsqueeze(-1)).squeeze(-1) + torch.stack(locs, dim=2)
    return states.view(batch, chunks * chunk, heads, n)[:, :steps]


def _peak_rss_bytes() -> int:
    """This process's resident-set high-water mark (VmHWM). Unlike ru_maxrss it is not inherited from a large
    parent across fork + exec, so a child measures only its own work."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmHWM not found in /proc/self/status (Linux only)")


def _memory_child(kind: str, batch: int, steps: int, heads: int, n: int) -> None:
    """Runs in a fresh process: prints the peak RSS growth (bytes) of building the inputs and one forward scan."""
    torch.set_num_threads(1)
    before = _peak_rss_bytes()
    idx, dv, b = pd_inputs(batch, steps, heads, n)
    with torch.no_grad():
        if kind == "pd":
            pd_scan(idx, dv, b)
        else:
            dense_scan(pd_to_dense(idx, dv), b, default_chunk_size(steps))
    print(_peak_rss_bytes() - before)


def peak_memory(kind, batch, steps, heads, n) -> int:
    cmd = [sys.executable, __file__, "--memory_child", kind, str(batch), str(steps), str(heads), str(n)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def bench_pd_vs_dense(batch, steps, heads, n, repeats):
    idx, dv, b = pd_inputs(batch, steps, heads, n)
    with torch.no_grad():
        dense_inputs = pd_to_dense(idx, dv)
        ref = dense_scan(dense_inputs, b, default_chunk_size(steps))
        got, _ = pd_scan(idx, dv, b)
        err = (ref - got).abs().max().item()
        pd_time = timed(lambda: pd_scan(idx, dv, b), repeats)
        dense_time = timed(lambda: dense_scan(pd_to_dense(idx, dv), b, default_chunk_size(steps)), max(1, repeats // 2))
    del dense_inputs, ref
    pd_mem, dense_mem = peak_memory("pd", batch, steps, heads, n), peak_memory("dense", batch, steps, heads, n)
    return {
        "shape": dict(B=batch, T=steps, H=heads, N=n),
        "max_abs_difference": err,
        "pd_forward_s": pd_time,
        "dense_forward_s": dense_time,
        "speedup": dense_time / pd_time,
        "pd_peak_bytes": pd_mem,
        "dense_peak_bytes": dense_mem,
        "memory_ratio": dense_mem / max(pd_mem, 1),
    }


def training_tokens_per_second(model, batch, steps, repeats, vocab):
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(1, vocab, (batch, steps))

    def step():
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return batch * steps / timed(step, repeats)


def bench_models(steps_list, batch, repeats):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    width, layers, heads, vocab = 256, 4, 4, 256
    # Both models get the same sizes, positions and attention kernel (a fair comparison).
    common = dict(
        vocab_size=vocab,
        hidden_size=width,
        intermediate_size=688,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        max_position_embeddings=8192,
        attn_implementation="sdpa",
    )
    hybrid_cfg = HybridSSMConfig(**common, **PAPER_PD_SSM_LAYER, mixers="SASA")
    qwen_cfg = Qwen2Config(**common, num_key_value_heads=heads)
    rows = []
    for steps in steps_list:
        torch.manual_seed(0)
        hybrid = HybridSSMForCausalLM(hybrid_cfg)
        qwen = Qwen2ForCausalLM(qwen_cfg)
        h = training_tokens_per_second(hybrid, batch, steps, repeats, vocab)
        q = training_tokens_per_second(qwen, batch, steps, repeats, vocab)
        rows.append(
            {
                "T": steps,
                "B": batch,
                "hybrid_SASA_tokens_per_s": h,
                "qwen2_tokens_per_s": q,
                "ratio": h / q,
                "hybrid_params": sum(p.numel() for p in hybrid.parameters()),
                "qwen2_params": sum(p.numel() for p in qwen.parameters()),
                "pd_ssm": dict(
                    H=hybrid_cfg.pd_ssm_num_heads, N=hybrid_cfg.pd_ssm_head_state_size, K=hybrid_cfg.pd_ssm_dict_size
                ),
            }
        )
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench_scan.json", help="JSON results file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the script runs")
    parser.add_argument(
        "--sections",
        default="sequential,dense,models",
        help="comma-separated subset of: sequential (parallel vs loop), dense (PD vs dense), models (throughput)",
    )
    return parser


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--memory_child":
        kind, *dims = sys.argv[2:]
        _memory_child(kind, *map(int, dims))
        return
    args = build_parser().parse_args()

    if args.quick:
        seq_shape, dense_shape, model_steps, model_batch = (1, 256, 2, 16), (1, 128, 1, 32), [64], 1
    else:
        seq_shape, dense_shape, model_steps, model_batch = (4, 4096, 4, 64), (1, 4096, 2, 128), [1024, 4096], 2

    results = {
        "machine": dict(platform=platform.platform(), processor=platform.processor(), threads=torch.get_num_threads()),
        "torch": torch.__version__,
    }
    sections = set(args.sections.split(","))
    if "sequential" in sections:
        print_sequential(results, seq_shape, args.repeats)
    if "dense" in sections:
        print_dense(results, dense_shape, args.repeats)
    if "models" in sections:
        print_models(results, model_steps, model_batch, args.repeats)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nwrote {args.out}")


def print_sequential(results, seq_shape, repeats):
    results["parallel_vs_sequential"] = r = bench_parallel_vs_sequential(*seq_shape, repeats)
    print_table_head(
        "PD scan: parallel vs sequential loop (forward + backward)",
        ["B", "T", "H", "N", "parallel (s)", "sequential loop (s)", "speedup"],
    )
    s = r["shape"]
    print(
        f"| {s['B']} | {s['T']} | {s['H']} | {s['N']} | {r['parallel_fwd_bwd_s']:.3f} | "
        f"{r['sequential_fwd_bwd_s']:.2f} | {r['speedup']:.1f}x |"
    )


def print_dense(results, dense_shape, repeats):
    results["pd_vs_dense"] = r = bench_pd_vs_dense(*dense_shape, repeats)
    print_table_head(
        "PD scan vs dense N x N transition scan (forward)",
        ["B", "T", "H", "N", "PD (s)", "dense (s)", "speedup", "PD peak MiB", "dense peak MiB", "memory ratio"],
    )
    s = r["shape"]
    print(
        f"| {s['B']} | {s['T']} | {s['H']} | {s['N']} | {r['pd_forward_s']:.3f} | {r['dense_forward_s']:.3f} | "
        f"{r['speedup']:.1f}x | {r['pd_peak_bytes'] / 2**20:.1f} | {r['dense_peak_bytes'] / 2**20:.1f} | "
        f"{r['memory_ratio']:.1f}x |"
    )


def print_models(results, model_steps, model_batch, repeats):
    results["models"] = rows = bench_models(model_steps, model_batch, repeats)
    print_table_head(
        "Training throughput: 4-layer SASA hybrid vs Qwen2ForCausalLM (d=256, fwd+bwd+AdamW)",
        ["T", "B", "hybrid SASA tokens/s", "Qwen2 tokens/s", "ratio"],
    )
    for row in rows:
        print(
            f"| {row['T']} | {row['B']} | {row['hybrid_SASA_tokens_per_s']:.0f} | "
            f"{row['qwen2_tokens_per_s']:.0f} | {row['ratio']:.2f} |"
        )


if __name__ == "__main__":
    main()
