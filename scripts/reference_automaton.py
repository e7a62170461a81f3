"""A minimal straight-through automaton in plain PyTorch, the reference beside the PD-SSM layer.

Per head h and per token id v a free N x N logit table L[h, v] (N(0, 1) init, so different tokens start with
different random transitions). Forward: P_t = the column-one-hot matrix with its 1 at argmax_i L[h, v_t][i, j] in
column j; x_t = P_t x_{t-1}, x_0 = e_0 (a one-hot state in every head, at every step). Backward: straight-through,
the gradient of the column softmax of L[h, v_t] (temperature 1) in place of the argmax. A linear readout of the H N
concatenated one-hot states gives the class at every position; per-position labels (every labelled prefix); Adam,
no schedule, fresh training sequences every step (the package's task generators,
`hf_ssm.data.state_tracking.get_task`).

Evaluation as the package's (hf_ssm/training/state_tracking/evaluation.py `evaluate`): last-position accuracy in length buckets
of the test range, `--eval_samples_per_bucket` sequences per bucket drawn with data seed 20,000 + the bucket's low end.

    OMP_NUM_THREADS=1 python scripts/reference_automaton.py --task a5 --seed 2
    python scripts/reference_automaton.py --task parity --seed 0 --json runs/ref_parity_0.json

--teacher_forcing_steps S (with --fixed_readout and one head): for the first S steps each position starts from the
state its previous label names instead of the model's own state, so every labelled position trains one table entry,
P[v_t] e_(label t-1) -> e_(label t), with no credit to assign through time; the test always runs free. With the
group's order as N this learns S5 with 32 generators (docs/design.md §8.7):

    OMP_NUM_THREADS=1 python scripts/reference_automaton.py --task s5 --num_generators 32 --num_heads 1 \
        --state_size 120 --fixed_readout --teacher_forcing_steps 2000 --seed 0

--beside_layer DIR also trains the package's PD-SSM layer on the same task and seed with the driver's default
recipe (`table`, one run: restarts 1) and the same heads, batch, lengths, test size and at most the same steps, in
DIR, and prints the two side by side (the layer's record in the JSON under "layer"):

    OMP_NUM_THREADS=1 python scripts/reference_automaton.py --task s5 --num_heads 32 --seed 0 --beside_layer runs/s5_pair
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn

from hf_ssm.data.state_tracking import StateTrackingDataset, collate_state_tracking, get_task
from hf_ssm.training.cli import refuse_options
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS
from hf_ssm.training.state_tracking.driver import length_buckets
from hf_ssm.training.state_tracking.evaluation import TEST_SEED


def straight_through(logits: torch.Tensor) -> torch.Tensor:
    """(..., N, N) logits -> the column-one-hot P (1 at each column's argmax; max().indices: the same first-of-tied
    index, faster) in value, the column softmax (temperature 1) in gradient."""
    soft = torch.softmax(logits, dim=-2)  # down each column
    hard = torch.zeros_like(soft).scatter_(-2, logits.max(dim=-2, keepdim=True).indices, 1.0)
    return hard + soft - soft.detach()


FIXED_READOUT_SCALE = 10.0  # the logit of the state's own class: softmax 1 - 1e-4 at 120 classes


class ReferenceAutomaton(nn.Module):
    """H heads of an N-state automaton with a free transition table per token, and a linear readout: trained, or
    with `fixed_readout` the frozen map "state k of the H N concatenated states is class k" (needs H N >= classes),
    which names every state by its class, so each transition has one right target (the DFA whose states are the
    classes; with one head of N = |G| the group's regular representation)."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        heads: int = 16,
        states: int = 8,
        fixed_readout: bool = False,
        detach_state: bool = False,
        teacher_forcing: bool = False,
    ):
        super().__init__()
        if teacher_forcing and not (fixed_readout and heads == 1):
            raise ValueError("teacher_forcing needs fixed_readout and heads == 1 (the label then names the state)")
        self.heads, self.states = heads, states
        self.detach_state = detach_state  # backpropagate one step only: P_t learns from position t's label alone
        self.teacher_forcing = teacher_forcing  # training steps start from the labelled state, not the model's own
        self.logits = nn.Parameter(torch.randn(vocab_size, heads, states, states))  # [v, h, i, j]: row i, column j
        self.readout = nn.Linear(heads * states, num_classes)
        if fixed_readout:
            if heads * states < num_classes:
                raise ValueError(f"fixed_readout needs heads * states >= {num_classes} classes, got {heads * states}")
            with torch.no_grad():
                self.readout.weight.copy_(FIXED_READOUT_SCALE * torch.eye(num_classes, heads * states))
                self.readout.bias.zero_()
            self.readout.requires_grad_(False)

    def transitions(self) -> torch.Tensor:
        """P of every token id (V, H, N, N): column one-hot in value, column softmax in gradient. Id 0 (padding)
        is the identity, so a padded step keeps the state."""
        p = straight_through(self.logits)
        eye = torch.eye(self.states, device=p.device).expand(1, self.heads, -1, -1)
        return torch.cat([eye, p[1:]])

    def head_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) ids (0 = padding) -> the one-hot states (B, T, H, N) after every token."""
        p = self.transitions()
        x = torch.zeros(input_ids.shape[0], self.heads, self.states, 1, device=p.device)
        x[:, :, 0] = 1.0  # e_0
        outs = []
        for t in range(input_ids.shape[1]):
            x = p[input_ids[:, t]] @ (x.detach() if self.detach_state else x)  # x_t = P_t x_{t-1}, every head
            outs.append(x[..., 0])
        return torch.stack(outs, dim=1)

    def teacher_forced_states(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(B, T) ids and labels -> (B, T, 1, N): the state after each token when the state before it is the one the
        previous label names (e_0 at t = 0; a padded or unlabelled position keeps its token's column from the last
        labelled state; the loss skips those). Every position is then one table entry: column `previous` of P[v_t]."""
        previous = torch.zeros_like(labels)
        previous[:, 1:] = labels[:, :-1].clamp(min=0)  # an unlabelled (-100) position: state 0, its loss skipped
        p = self.transitions()[:, 0]  # (V, N, N), one head
        return p[input_ids, :, previous].unsqueeze(2)  # (B, T, N): column previous of P[v_t]

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) ids (0 = padding) -> (B, T, classes) logits; with `labels` and teacher forcing in training, each
        step starts from the labelled state."""
        if self.teacher_forcing and self.training and labels is not None:
            return self.readout(self.teacher_forced_states(input_ids, labels).flatten(2))
        return self.readout(self.head_states(input_ids).flatten(2))


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of (B, T, classes) logits against (B, T) labels, -100 ignored (every labelled prefix)."""
    return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def curriculum_batch(task, args, step: int, size: int | None = None, seed_offset: int = 0) -> dict:
    """A fresh collated batch for `step` of the length curriculum that the experiments beside this script use: the
    longest length grows linearly from 5 to args.train_max_length over the first args.curriculum steps (0: that
    length from the start); data seed seed_offset + args.seed * 10**6 + step. size defaults to args.batch_size."""
    size = args.batch_size if size is None else size
    grown = 5 + (args.train_max_length - 5) * step / args.curriculum if args.curriculum else args.train_max_length
    longest = max(args.train_min_length + 2, min(args.train_max_length, int(grown)))
    data = StateTrackingDataset(task, size, args.train_min_length, longest, seed=seed_offset + args.seed * 10**6 + step)
    return {**collate_state_tracking([data[i] for i in range(size)]), "longest": longest}


def train_layer(args, task_kwargs: dict) -> dict:
    """The package's PD-SSM layer on the reference's task and seed: the driver's default recipe (`table`), one run,
    the reference's heads, states, batch, training and test lengths, test size and step budget (at most --steps,
    the recipe's early stop at 100 % validation); trained in args.beside_layer (results.json there)."""
    from hf_ssm.training.state_tracking.driver import train_state_tracking
    from hf_ssm.training.state_tracking.recipes import resolve_settings
    from hf_ssm.training.state_tracking.settings import StateTrackingSettings

    explicit = dict(
        task=args.task,
        mixer="pd_ssm",
        seed=args.seed,
        restarts=1,
        num_heads=args.num_heads,
        state_size=args.state_size,
        batch_size=args.batch_size,
        train_min_length=args.train_min_length,
        train_max_length=args.train_max_length,
        max_steps=args.max_steps,
        min_steps=min(args.max_steps, resolve_settings("table", {})["min_steps"]),
        test_min_length=args.test_min_length,
        test_max_length=args.test_max_length,
        num_buckets=args.num_buckets,
        eval_samples_per_bucket=args.eval_samples_per_bucket,
        **task_kwargs,
    )
    return train_state_tracking(StateTrackingSettings(**resolve_settings("table", explicit)), args.beside_layer)


@torch.no_grad()
def evaluate(model, task, buckets, samples: int, batch_size: int = 256) -> list[dict]:
    """Last-position accuracy per (low, high) length bucket, data seed TEST_SEED + low (as the package)."""
    out = []
    for low, high in buckets:
        data = StateTrackingDataset(task, samples, low, high, seed=TEST_SEED + low)
        correct = 0
        for start in range(0, samples, batch_size):
            batch = collate_state_tracking([data[i] for i in range(start, min(samples, start + batch_size))])
            pred = model(batch["input_ids"]).argmax(-1)
            last = pred[torch.arange(len(pred)), batch["length"] - 1]
            correct += int((last == batch["label"]).sum())
        out.append({"min_length": low, "max_length": high, "accuracy": correct / samples, "samples": samples})
    return out


def test_record(name, model, task, buckets, args, losses, cpu0, train_cpu) -> dict:
    """Score `model` on `buckets` (args.eval_samples_per_bucket sequences each) and return the run's record: `name`, the
    arguments, CPU seconds since cpu0, the loss curve and the test buckets with their mean."""
    test = evaluate(model, task, buckets, args.eval_samples_per_bucket)
    return {
        "model": name,
        "args": vars(args),
        "train_cpu_seconds": train_cpu,
        "cpu_seconds": time.process_time() - cpu0,
        "final_loss": losses[-1]["loss"],
        "loss_curve": losses,
        "test": test,
        "test_mean_accuracy": sum(b["accuracy"] for b in test) / len(test),
    }


def bucket_cells(buckets: list[dict]) -> str:
    """'40-75:100.0 76-111:99.8 ...': each bucket's lengths and accuracy %."""
    return " ".join(f"{b['min_length']}-{b['max_length']}:{100 * b['accuracy']:.1f}" for b in buckets)


def write_record(path: str, record: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=2))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="a5")
    parser.add_argument("--num_generators", type=int, default=None, help="a5 / s5 only (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_steps", type=int, default=2000, help="Adam steps")
    parser.add_argument("--num_heads", type=int, default=16, help="heads H (independent automata)")
    parser.add_argument("--state_size", type=int, default=8, help="N, states per head")
    parser.add_argument("--learning_rate", type=float, default=1e-2, help="Adam's learning rate (constant)")
    parser.add_argument(
        "--detach_state", action="store_true", help="no gradient into x_{t-1}: each P_t learns from its position alone"
    )
    parser.add_argument(
        "--fixed_readout", action="store_true", help="state k is class k, frozen (needs heads * states >= classes)"
    )
    parser.add_argument(
        "--teacher_forcing_steps",
        type=int,
        default=0,
        help="the first this many steps start every position from the labelled state (needs --fixed_readout, 1 head)",
    )
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--train_min_length", type=int, default=3)
    parser.add_argument("--train_max_length", type=int, default=40)
    parser.add_argument("--test_min_length", type=int, default=40)
    parser.add_argument("--test_max_length", type=int, default=256)
    parser.add_argument("--num_buckets", type=int, default=6)
    parser.add_argument("--eval_samples_per_bucket", type=int, default=1024, help="test sequences per length bucket")
    parser.add_argument("--cpu_threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", default=None, help="write the record here")
    parser.add_argument(
        "--beside_layer", default=None, help="also train the PD-SSM layer (recipe table) in this folder"
    )
    # the options' spellings before they took the names of the settings they mirror (StateTrackingSettings)
    refuse_options(parser, RENAMED_OPTIONS["reference_automaton"])
    return parser


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)

    torch.set_num_threads(args.cpu_threads)
    torch.manual_seed(args.seed)
    kwargs = {} if args.num_generators is None else {"num_generators": args.num_generators}
    task = get_task(args.task, **kwargs)
    model = ReferenceAutomaton(
        task.vocab_size,
        task.num_classes,
        args.num_heads,
        args.state_size,
        fixed_readout=args.fixed_readout,
        detach_state=args.detach_state,
        teacher_forcing=args.teacher_forcing_steps > 0,
    )
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate)
    train = StateTrackingDataset(
        task, args.max_steps * args.batch_size, args.train_min_length, args.train_max_length, seed=args.seed
    )
    cpu0 = time.process_time()
    losses = []
    for step in range(args.max_steps):
        batch = collate_state_tracking([train[step * args.batch_size + i] for i in range(args.batch_size)])
        forced = batch["labels"] if step < args.teacher_forcing_steps else None
        loss = sequence_loss(model(batch["input_ids"], forced), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0 or step == args.max_steps - 1:
            losses.append({"step": step, "loss": loss.item()})
    train_cpu = time.process_time() - cpu0
    buckets = length_buckets(args.test_min_length, args.test_max_length, args.num_buckets)
    record = test_record("reference_automaton", model, task, buckets, args, losses, cpu0, train_cpu)
    mean = record["test_mean_accuracy"]
    cells = bucket_cells(record["test"])
    print(
        f"{args.task} seed {args.seed} steps {args.max_steps}: mean {100 * mean:.1f}% [{cells}] "
        f"loss {losses[-1]['loss']:.4f} train CPU {train_cpu:.1f} s, total CPU {record['cpu_seconds']:.1f} s"
    )
    if args.beside_layer:
        record["layer"] = train_layer(args, kwargs)
        layer_cells = bucket_cells(record["layer"]["test"]["buckets"])
        print(f"reference: mean {100 * mean:.1f}% [{cells}], {train_cpu:.0f} train CPU s")
        print(
            f"layer:     mean {100 * record['layer']['test']['mean_accuracy']:.1f}% [{layer_cells}], "
            f"{record['layer']['cpu_seconds']:.0f} CPU s, {record['layer']['steps']} steps"
        )
    if args.json:
        write_record(args.json, record)
    return record


if __name__ == "__main__":
    main()
