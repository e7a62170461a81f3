"""The smallest sentence-level automaton on a frozen LLM's features, the reference beside the adapter.

The frozen base (SmolLM2-135M by default) reads each story once; its decoder-layer-`--layer` features at the
tokens that end a sentence (`hf_ssm.adapters.sentence_end_token_ids`: the intro, every transition, the question)
are kept, so a story becomes a sequence of 1 + n + 1 feature vectors. On them: H heads of an N-state automaton
whose column logits are W_P RMSNorm(f) (a factored table: W_P (H N^2, d), N(0, s^2 / d)), a column argmax forward
and a column-softmax straight-through backward (`scripts/reference_automaton.py`), x_0 = e_0, and a linear readout
of the one-hot states with the answer after every transition sentence as the label (the adapter's dense
supervision). Adam without schedule; W_P at `--lr / --wp_lr_divisor` (the state-tracking bisection, docs/design.md
§8.7: a factored table learns once one step moves each logit about as much as in a free table).

The figures in docs/adapter.md were measured before the data seed label lost its tracker prefix, so a re-run
draws other stories of the same lengths. Features are cached in `--cache` (one .pt per base, layer, task, split), so a sweep pays for the base once.

    OMP_NUM_THREADS=1 python experiments/sentence_reference.py --task cycle_navigation --seed 0
    python experiments/sentence_reference.py --task parity --wp_lr_divisor 1 --json runs/sentence_reference.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
from torch import nn

from hf_ssm.adapters import load_base, sentence_end_token_ids
from hf_ssm.adapters.model import find_decoder_layers, run_to_layer
from hf_ssm.data.nl_state_tracking import get_nl_task, token_ends
from hf_ssm.training.optimization import warmup_cosine_schedule


@torch.no_grad()
def sentence_features(args, split: str, lengths: list[int], count: int) -> dict:
    """{"features": list of (S, d) tensors (S = sentence ends), "labels": list of (S,) answer after each (-100 at
    the intro), "transitions": list of n} for `count` stories per entry of `lengths` ((lo, hi) ranges)."""
    path = Path(args.cache) / f"{args.base}_L{args.layer}_{args.task}_{split}_{count}.pt"
    if path.is_file():
        return torch.load(path)
    model, tokenizer = load_base(args.base)
    layer = find_decoder_layers(model)[1][args.layer]
    ends_ids = torch.tensor(sentence_end_token_ids(tokenizer))
    task = get_nl_task(args.task)
    rng = random.Random(f"sentence_reference:{args.task}:{split}")
    out = {"features": [], "labels": [], "transitions": []}
    for lo, hi in lengths:
        for _ in range(count):
            story = task.sample(rng.randint(lo, hi), rng)
            ids, ends = token_ends(tokenizer, story.prompt, story.transition_ends)
            x = torch.tensor([ids])
            where = torch.isin(x[0], ends_ids).nonzero().squeeze(1)
            if where[1:-1].tolist() != ends:  # intro, transitions, question: nothing else ends a sentence here
                raise ValueError(f"unexpected sentence ends in {story.prompt!r}")
            hidden = run_to_layer(model, layer, input_ids=x)  # the adapter's input: layer `--layer`'s output
            hidden = (hidden[0] if isinstance(hidden, tuple) else hidden)[0]
            labels = [-100, *story.prefix_answers, story.answer]
            out["features"].append(hidden[where].clone())
            out["labels"].append(torch.tensor(labels))
            out["transitions"].append(story.num_transitions)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, path)
    return out


def pad(items: list[torch.Tensor], value: float) -> torch.Tensor:
    return nn.utils.rnn.pad_sequence(items, batch_first=True, padding_value=value)


def straight_through(logits: torch.Tensor, dim: int) -> torch.Tensor:
    """One-hot at the arg-max along `dim` in value, the softmax along `dim` in gradient."""
    soft = torch.softmax(logits, dim=dim)
    hard = torch.zeros_like(soft).scatter_(dim, logits.argmax(dim=dim, keepdim=True), 1.0)
    return hard + soft - soft.detach()


class SentenceAutomaton(nn.Module):
    """`sentence_classes` = 0: column logits W_P RMSNorm(f) per head (a factored table). K > 0: a hard choice of
    one of K sentence classes, argmax W_P RMSNorm(f) (straight-through), each class with a free N x N logit
    table per head (N(0, 1)), as the reference automaton's table per token id."""

    def __init__(
        self,
        width: int,
        classes: int,
        heads: int,
        states: int,
        scale: float,
        readout: str,
        sentence_classes: int,
        per_head: bool = False,
        table_std: float = 1.0,
    ):
        super().__init__()
        self.heads, self.states, self.sentence_classes, self.per_head = heads, states, sentence_classes, per_head
        self.norm = nn.RMSNorm(width)
        outputs = sentence_classes * (heads if per_head else 1) or heads * states * states
        self.w_p = nn.Linear(width, outputs, bias=False)
        nn.init.normal_(self.w_p.weight, 0.0, scale / width**0.5)
        if sentence_classes:
            self.tables = nn.Parameter(torch.randn(sentence_classes, heads, states, states) * table_std)
        self.head_readout = readout == "per_head"
        if self.head_readout:  # every head its own linear readout of its one-hot state, trained on its own
            self.readout = nn.Parameter(torch.randn(heads, states, classes) / states**0.5)
            self.readout_bias = nn.Parameter(torch.zeros(heads, classes))
        else:
            self.readout_norm = nn.RMSNorm(heads * states) if readout == "norm" else nn.Identity()
            self.readout = nn.Linear(heads * states, classes)

    def forward(self, features: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """features (B, S, d), valid (B, S) bool -> class logits (B, S, classes); with the per-head readout each
        head's logits (B, S, H, classes) (`answer_logits` combines them)."""
        b, s, _ = features.shape
        if self.sentence_classes and self.per_head:  # every head its own choice, as the package's bank mode
            choice = straight_through(self.w_p(self.norm(features)).view(b, s, self.heads, -1), -1)  # (B, S, H, K)
            p = torch.einsum("bshk,khij->bshij", choice, straight_through(self.tables, -2))
        elif self.sentence_classes:
            choice = straight_through(self.w_p(self.norm(features)), -1)  # (B, S, K)
            p = torch.einsum("bsk,khij->bshij", choice, straight_through(self.tables, -2))
        else:
            logits = self.w_p(self.norm(features)).view(b, s, self.heads, self.states, self.states)
            p = straight_through(logits, -2)
        x = torch.zeros(b, self.heads, self.states)
        x[..., 0] = 1.0
        states = []
        for t in range(s):
            moved = torch.einsum("bhij,bhj->bhi", p[:, t], x)
            x = torch.where(valid[:, t, None, None], moved, x)
            states.append(x.flatten(1) if not self.head_readout else x)
        if self.head_readout:
            return torch.einsum("bshn,hnc->bshc", torch.stack(states, 1), self.readout) + self.readout_bias
        return self.readout(self.readout_norm(torch.stack(states, 1)))

    def answer_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, S, classes): the per-head readout's heads vote as a product of experts (summed log-probabilities),
        so a head that learnt the automaton outvotes the unsure ones."""
        return logits.log_softmax(-1).sum(-2) if self.head_readout else logits


def accuracy(model, data: dict, transitions: tuple[int, int]) -> float:
    rows = [i for i, n in enumerate(data["transitions"]) if transitions[0] <= n <= transitions[1]]
    feats = pad([data["features"][i] for i in rows], 0.0)
    labels = pad([data["labels"][i] for i in rows], -100)
    last = torch.tensor([len(data["labels"][i]) - 1 for i in rows])
    with torch.no_grad():
        logits = model.answer_logits(model(feats, (labels != -100) | (torch.arange(labels.shape[1]) == 0)))
    pred = logits[torch.arange(len(rows)), last].argmax(-1)
    return (pred == labels[torch.arange(len(rows)), last]).float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--task", default="cycle_navigation")
    parser.add_argument("--layer", type=int, default=3)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--states", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0, help="W_P init std x sqrt(d)")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--wp_lr_divisor", type=float, default=576.0)
    parser.add_argument(
        "--readout",
        choices=["linear", "norm", "per_head"],
        default="norm",
        help="per_head: a linear readout per head, each head's own cross-entropy, the heads' log-probs summed",
    )
    parser.add_argument("--weight_decay", type=float, default=0.0, help="AdamW's decoupled weight decay on W_P")
    parser.add_argument("--standardize", action="store_true", help="z-score every feature (training mean / std)")
    parser.add_argument("--per_head", action="store_true", help="with --sentence_classes: a choice per head")
    parser.add_argument("--sentence_classes", type=int, default=0, help="K > 0: a hard choice of K sentence classes")
    parser.add_argument("--stats_stories", type=int, default=0, help="> 0: z-score statistics of the first N stories")
    parser.add_argument("--train_features_bf16", action="store_true", help="round the training features to bfloat16")
    parser.add_argument("--table_std", type=float, default=1.0, help="init std of the tables (the adapter: N^-1/2)")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument(
        "--schedule",
        choices=["constant", "warmup_cosine"],
        default="constant",
        help="warmup_cosine: the adapter's schedule (30 warm-up steps, cosine to 0 at --steps)",
    )
    parser.add_argument("--grad_clip", type=float, default=0.0, help="> 0: clip the gradient norm, as the adapter")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--train_stories", type=int, default=512)
    parser.add_argument("--test_stories", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default="runs/sentence_features")
    parser.add_argument("--json", default=None, help="append the record to this JSONL file")
    args = parser.parse_args()
    start = time.process_time()
    train = sentence_features(args, "train", [(1, 10)], args.train_stories)
    buckets = [(1, 10), (40, 40), (80, 80)]
    test = sentence_features(args, "test", buckets, args.test_stories)
    feature_cpu = time.process_time() - start
    if args.train_features_bf16:  # as the adapter's frozen-prefix cache stores them; test features stay float32
        train["features"] = [f.to(torch.bfloat16).float() for f in train["features"]]
    if args.standardize:  # per-feature z-scores with the training sentences' statistics (the base has outlier dims)
        stacked = torch.cat(train["features"][: args.stats_stories or None])
        mean, std = stacked.mean(0), stacked.std(0) + 1e-6
        for data in (train, test):
            data["features"] = [(f - mean) / std for f in data["features"]]
    torch.manual_seed(args.seed)
    width = train["features"][0].shape[-1]
    model = SentenceAutomaton(
        width,
        get_nl_task(args.task).num_classes,
        args.heads,
        args.states,
        args.scale,
        args.readout,
        args.sentence_classes,
        args.per_head,
        args.table_std,
    )
    w_p = [model.w_p.weight]
    rest = [p for n, p in model.named_parameters() if n != "w_p.weight"]
    optimizer = torch.optim.AdamW(
        [
            {"params": w_p, "lr": args.lr / args.wp_lr_divisor, "weight_decay": args.weight_decay},
            {"params": rest, "lr": args.lr, "weight_decay": 0.0},
        ]
    )
    schedule = None
    if args.schedule == "warmup_cosine":
        schedule = warmup_cosine_schedule(optimizer, 30, args.steps)
    generator = torch.Generator().manual_seed(args.seed)
    curve, train_start = [], time.process_time()
    for step in range(1, args.steps + 1):
        rows = torch.randint(len(train["features"]), (args.batch,), generator=generator).tolist()
        feats = pad([train["features"][i] for i in rows], 0.0)
        labels = pad([train["labels"][i] for i in rows], -100)
        valid = (labels != -100) | (torch.arange(labels.shape[1]) == 0)
        logits = model(feats, valid)
        if model.head_readout:  # (B, S, H, C): every head answers on its own
            labels = labels.unsqueeze(-1).expand(-1, -1, args.heads)
        loss = nn.functional.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        if args.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        if schedule is not None:
            schedule.step()
        if step % 100 == 0:
            curve.append([step, round(loss.item(), 4)])
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    result = {
        "args": vars(args),
        "accuracy": {f"{lo}-{hi}": accuracy(model, test, (lo, hi)) for lo, hi in buckets},
        "curve": curve,
        "train_cpu_s": time.process_time() - train_start,
        "feature_cpu_s": feature_cpu,
    }
    print(json.dumps({k: result[k] for k in ("accuracy", "train_cpu_s")}))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
