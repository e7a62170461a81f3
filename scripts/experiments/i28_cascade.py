"""Issue 28, item 3: a cascade of two straight-through automaton layers on modular arithmetic (no brackets).

The one-layer reference (scripts/reference_automaton.py) stays at chance on modular arithmetic: its 50-state minimal
DFA does not fit a head of N = 8, and the value (sum + term mod 5) is no linear function of heads that track sum
and term apart. A cascade product (Krohn-Rhodes) splits it: a first layer of heads driven by the token alone (it can
track the current term and the last operator, 12 states), and a second layer whose transition at step t is chosen by
the pair (token v_t, state of one first-layer head at t - 1), which can then track the value itself as translations
of Z_5 (v + d after "+ d", v - d after "- d", v + t (d - 1) after "* d" with t the term so far).

Layer 1: H1 heads of N1 states, a free logit table per token, exactly the reference's. Layer 2: H2 heads of N2
states; head j reads first-layer head j mod H1; its logits at step t are sum_q x1_{t-1}[q] L2[v_t, q, j] (exact
in the forward, where x1 is one-hot; the straight-through gradient reaches layer 1 through x1). Both layers:
column argmax forward, column softmax backward, x_0 = e_0, padding the identity. Readout: a linear map of the
concatenated one-hot states of both layers. Adam, batch 64, fresh sequences every step; --curriculum S grows the
longest training length linearly from 5 to --train_max_length over the first S steps (0: lengths 3-40 from the
start). Evaluation: the reference's (`evaluate`, 1,024 sequences per bucket over 40-256).

    OMP_NUM_THREADS=1 python scripts/experiments/i28_cascade.py --seed 0 --json runs/i28/cascade/s0.json
    OMP_NUM_THREADS=1 python scripts/experiments/i28_cascade.py --seed 0 --curriculum 1000
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import torch
from torch import nn

from hf_ssm.data.state_tracking import get_task
from hf_ssm.training.state_tracking import length_buckets

_spec = importlib.util.spec_from_file_location(
    "reference_automaton", Path(__file__).resolve().parents[1] / "reference_automaton.py"
)
reference_automaton = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_automaton)


class CascadeAutomaton(nn.Module):
    """Two straight-through automaton layers, the second driven by (token, first layer's previous state)."""

    def __init__(self, vocab_size, num_classes, heads=16, states=16, heads2=16, states2=8):
        super().__init__()
        self.vocab, self.h1, self.n1, self.h2, self.n2 = vocab_size, heads, states, heads2, states2
        self.table1 = nn.Parameter(torch.randn(vocab_size, heads, states, states))
        # (H2, V * N1, N2 * N2): head j's logits for every (token, first-layer state) pair
        self.table2 = nn.Parameter(torch.randn(heads2, vocab_size * states, states2 * states2))
        self.readout = nn.Linear(heads * states + heads2 * states2, num_classes)
        self.source = torch.arange(heads2) % heads  # the first-layer head each second-layer head reads

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) ids (0 = padding) -> (B, T, classes) logits."""
        batch = input_ids.shape[0]
        p1 = reference_automaton.straight_through(self.table1)
        p1[0] = torch.eye(self.n1)  # padding keeps the state
        x1 = torch.zeros(batch, self.h1, self.n1, 1)
        x1[:, :, 0] = 1.0
        x2 = torch.zeros(batch, self.h2, self.n2, 1)
        x2[:, :, 0] = 1.0
        eye2 = torch.eye(self.n2)
        outs = []
        for t in range(input_ids.shape[1]):
            ids = input_ids[:, t]
            token = nn.functional.one_hot(ids, self.vocab).float()  # (B, V)
            read = x1[:, self.source, :, 0]  # (B, H2, N1): the chosen first-layer head's state at t - 1
            pair = (token[:, None, :, None] * read[:, :, None, :]).flatten(2)  # (B, H2, V N1), one-hot
            logits2 = torch.einsum("bjp,jpk->bjk", pair, self.table2).view(batch, self.h2, self.n2, self.n2)
            p2 = torch.where((ids == 0).view(batch, 1, 1, 1), eye2, reference_automaton.straight_through(logits2))
            x2 = p2 @ x2
            x1 = p1[ids] @ x1
            outs.append(torch.cat([x1.flatten(1), x2.flatten(1)], dim=1))
        return self.readout(torch.stack(outs, dim=1))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="modular_arithmetic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--states", type=int, default=16)
    parser.add_argument("--heads2", type=int, default=16)
    parser.add_argument("--states2", type=int, default=8)
    parser.add_argument("--curriculum", type=int, default=0, help="steps over which the longest length grows to max")
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
    model = CascadeAutomaton(task.vocab_size, task.num_classes, args.heads, args.states, args.heads2, args.states2)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    cpu0 = time.process_time()
    losses = []
    for step in range(args.steps):
        batch = reference_automaton.curriculum_batch(task, args, step)
        loss = reference_automaton.sequence_loss(model(batch["input_ids"]), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == args.steps - 1:
            losses.append({"step": step, "loss": loss.item(), "longest": batch["longest"]})
    train_cpu = time.process_time() - cpu0
    buckets = length_buckets(40, 256, 6)
    record = reference_automaton.test_record("cascade_automaton", model, task, buckets, args, losses, cpu0, train_cpu)
    mean = record["test_mean_accuracy"]
    cells = reference_automaton.bucket_cells(record["test"])
    print(f"cascade {args.task} seed {args.seed} curriculum {args.curriculum}: mean {100 * mean:.1f}% [{cells}] "
          f"loss {losses[-1]['loss']:.4f} train CPU {train_cpu:.1f} s")  # fmt: skip
    if args.json:
        reference_automaton.write_record(args.json, record)
    return record


if __name__ == "__main__":
    main()
