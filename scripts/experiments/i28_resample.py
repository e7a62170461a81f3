"""Issue 28, item 3: dead-head resampling in the reference automaton, on modular arithmetic (no brackets).

The reference (scripts/reference_automaton.py: a free logit table per head and token, straight-through column
argmax) stays at chance on modular arithmetic with one head of N = 64: its training loss never leaves ln 5, so no
head ever carries information. Hypothesis: many heads of N = 64, each re-drawn when it carries none, turn the one
search into many. Every --resample_every steps a fresh batch of training lengths measures each head's use: the
rise of the loss when that head's features are replaced by their batch mean (mean ablation). A head whose rise is
below --dead_threshold nats gets a new N(0, 1) table, zero readout columns and zero Adam moments for both, so it
starts a new search while the others keep theirs. --curriculum S grows the longest training length linearly from 5
to --train_max_length over the first S steps (as scripts/experiments/i28_cascade.py). Evaluation: the reference's
(1,024 sequences per bucket over 40-256).

    OMP_NUM_THREADS=1 python scripts/experiments/i28_resample.py --seed 0 --resample_every 250
    OMP_NUM_THREADS=1 python scripts/experiments/i28_resample.py --seed 0 --resample_every 0   # no resampling
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import torch

from hf_ssm.data.state_tracking import get_task
from hf_ssm.training.state_tracking import length_buckets

_spec = importlib.util.spec_from_file_location(
    "reference_automaton", Path(__file__).resolve().parents[1] / "reference_automaton.py"
)
reference_automaton = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_automaton)


@torch.no_grad()
def head_use(model, batch) -> torch.Tensor:
    """(H,) rise of the loss (nats) when each head's one-hot state features are replaced by their mean over the
    batch and positions (mean ablation)."""
    states = model.head_states(batch["input_ids"])  # (B, T, H, N)
    base = reference_automaton.sequence_loss(model.readout(states.flatten(2)), batch["labels"])
    rises = []
    for h in range(model.heads):
        ablated = states.clone()
        ablated[:, :, h] = states[:, :, h].mean(dim=(0, 1))
        rises.append(reference_automaton.sequence_loss(model.readout(ablated.flatten(2)), batch["labels"]) - base)
    return torch.stack(rises)


@torch.no_grad()
def resample(model, optimizer, heads: list[int]) -> None:
    """New N(0, 1) tables, zero readout columns and zero Adam moments for `heads`."""
    n = model.states
    for h in heads:
        model.logits[:, h] = torch.randn_like(model.logits[:, h])
        model.readout.weight[:, h * n : (h + 1) * n] = 0.0
        columns = (slice(None), slice(h * n, (h + 1) * n))
        for param, index in ((model.logits, (slice(None), h)), (model.readout.weight, columns)):
            for moment in ("exp_avg", "exp_avg_sq"):
                if moment in optimizer.state[param]:
                    optimizer.state[param][moment][index] = 0.0


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="modular_arithmetic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--states", type=int, default=64)
    parser.add_argument("--resample_every", type=int, default=250, help="0: never")
    parser.add_argument("--dead_threshold", type=float, default=0.01, help="nats of loss rise under mean ablation")
    parser.add_argument("--curriculum", type=int, default=1500, help="steps over which the longest length grows")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--train_min_length", type=int, default=3)
    parser.add_argument("--train_max_length", type=int, default=40)
    parser.add_argument("--eval_samples", type=int, default=1024)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    task = get_task(args.task)
    model = reference_automaton.ReferenceAutomaton(task.vocab_size, task.num_classes, args.heads, args.states)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    cpu0 = time.process_time()
    losses, events = [], []
    for step in range(args.steps):
        batch = reference_automaton.curriculum_batch(task, args, step)
        longest = batch["longest"]
        loss = reference_automaton.sequence_loss(model(batch["input_ids"]), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.resample_every and step > 0 and step % args.resample_every == 0:
            probe = reference_automaton.curriculum_batch(task, args, step, size=256, seed_offset=10**9)
            use = head_use(model, probe)
            dead = [h for h in range(args.heads) if use[h] < args.dead_threshold]
            resample(model, optimizer, dead)
            events.append({"step": step, "use": [round(float(u), 4) for u in use], "resampled": dead})
            print(f"step {step} loss {loss.item():.3f} longest {longest} use {[round(float(u), 3) for u in use]} "
                  f"resampled {dead}", flush=True)  # fmt: skip
        if step % 100 == 0 or step == args.steps - 1:
            losses.append({"step": step, "loss": loss.item(), "longest": longest})
    train_cpu = time.process_time() - cpu0
    buckets = length_buckets(40, 256, 6)
    record = reference_automaton.test_record("resample_automaton", model, task, buckets, args, losses, cpu0, train_cpu)
    record["resample_events"] = events
    mean = record["test_mean_accuracy"]
    cells = reference_automaton.bucket_cells(record["test"])
    print(f"resample {args.task} seed {args.seed} every {args.resample_every} curriculum {args.curriculum}: "
          f"mean {100 * mean:.1f}% [{cells}] loss {losses[-1]['loss']:.4f} train CPU {train_cpu:.1f} s")  # fmt: skip
    if args.json:
        reference_automaton.write_record(args.json, record)
    return record


if __name__ == "__main__":
    main()
