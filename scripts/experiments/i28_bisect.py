"""Issue 28 bisection harness: the reference automaton and the package's layer, one difference at a time.

Trains either
- `--model reference`: scripts/reference_automaton.py's model, optionally with one of the layer's pieces in place of
  its own: `--table linear` (P_t's logits = W_P RMSNorm(Embedding(v)), W_P ~ N(0, 1/d), the embedding N(0, 0.02^2),
  as the layer's pd_ssm_transition="direct" in a pre-norm block) and/or `--readout block` (the layer's readout path:
  C [x, 0] + D_skip u into the residual stream, the SwiGLU MLP, the final norm, the classifier; sizes of the default
  recipe), or
- `--model layer`: the package's model exactly as scripts/train_state_tracking.py builds it (default recipe sizes,
  `--config` JSON for HybridSSMConfig fields, `--block_type`),
with `--opt adam` (the reference's: Adam, constant lr, no clipping) or `--opt recipe` (the default recipe's: AdamW
without weight decay, 50 warm-up steps then cosine to 0 over --steps, gradient clipping at 1). Fresh training batches
as the package's (same data seed = --seed); no model selection; at the end the last-position test accuracy per
length bucket (the package's buckets and test seed). Prints one line and appends a JSON record to --json.

    OMP_NUM_THREADS=1 python scripts/experiments/i28_bisect.py --model reference --table linear --seed 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path

import torch
from torch import nn

from hf_ssm.data.state_tracking import StateTrackingDataset, collate_state_tracking, get_task
from hf_ssm.modeling import HybridSSMConfig
from hf_ssm.modeling.modeling_hybrid_ssm import HybridSSMMLP, HybridSSMRMSNorm
from hf_ssm.training.optimization import warmup_cosine_schedule
from hf_ssm.training.state_tracking import StateTrackingSettings, build_model, length_buckets

_spec = importlib.util.spec_from_file_location(
    "reference_automaton", Path(__file__).resolve().parents[1] / "reference_automaton.py"
)
reference_automaton = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_automaton)


# The readout of the states: the reference's linear map; the layer's whole block path ("block"); the block without
# the token embedding in the residual stream and the mixer's skip ("block_noembed"); the block without the SwiGLU MLP
# ("block_nomlp"); C, the final norm and the classifier only ("proj_norm"); C and the classifier, no norm ("proj");
# the reference's linear map at the layer's init, N(0, 0.02^2) and a zero bias ("linear_small").
# "eye_norm": "proj_norm" with C the identity (d = H N): the final norm and the classifier on the states themselves.
# "eye": C the identity, then the classifier, no norm; "norm": the final norm on the states, then the classifier (no C).
# "layernorm": the layer's post-norm block with C = the identity and no skip: LayerNorm over [x, Im x = 0] (2 H N
# features, eps 1e-6), then the classifier. "statenorm": "norm" at any --hidden (the RMSNorm over the H N states;
# "norm" sizes its norm by --hidden, so it needs --hidden = H N).
READOUTS = (
    "linear",
    "block",
    "block_noembed",
    "block_nomlp",
    "proj_norm",
    "proj",
    "linear_small",
    "eye_norm",
    "eye",
    "norm",
    "layernorm",
    "statenorm",
)


class Variant(reference_automaton.ReferenceAutomaton):
    """The reference automaton with the layer's transition parametrisation and / or readout path swapped in."""

    def __init__(self, vocab_size, num_classes, heads, states, table: str, readout: str, hidden: int = 64):
        super().__init__(vocab_size, num_classes, heads, states)
        self.table, self.readout_kind = table, readout
        if table == "linear" or readout not in ("linear", "linear_small"):
            self.embed = nn.Embedding(vocab_size, hidden, padding_idx=0)
            nn.init.normal_(self.embed.weight, std=0.02)
            self.norm_in = HybridSSMRMSNorm(hidden)
        if table == "linear":
            del self.logits
            self.proj = nn.Linear(hidden, heads * states * states, bias=False)
            nn.init.normal_(self.proj.weight, std=hidden**-0.5)
        if readout == "linear_small":
            nn.init.normal_(self.readout.weight, std=0.02)
            nn.init.zeros_(self.readout.bias)
        if readout in ("layernorm", "statenorm"):
            features = 2 * heads * states if readout == "layernorm" else heads * states
            self.norm_out = nn.LayerNorm(features, eps=1e-6) if readout == "layernorm" else HybridSSMRMSNorm(features)
            self.readout = nn.Linear(features, num_classes)
            nn.init.normal_(self.readout.weight, std=0.02)
            nn.init.zeros_(self.readout.bias)
        elif readout not in ("linear", "linear_small"):
            config = HybridSSMConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1)
            self.out_proj = nn.Linear(heads * states, hidden, bias=False)  # C on Re x (Im x = 0 here)
            nn.init.normal_(self.out_proj.weight, std=0.02)
            if readout in ("eye_norm", "eye"):
                with torch.no_grad():
                    self.out_proj.weight.copy_(torch.eye(hidden, heads * states))
            self.skip = nn.Parameter(torch.ones(hidden))
            self.norm_mid, self.norm_out = HybridSSMRMSNorm(hidden), HybridSSMRMSNorm(hidden)
            self.mlp = HybridSSMMLP(config)
            for lin in (self.mlp.gate_proj, self.mlp.up_proj, self.mlp.down_proj):
                nn.init.normal_(lin.weight, std=0.02)
            self.readout = nn.Linear(hidden, num_classes)
            nn.init.normal_(self.readout.weight, std=0.02)
            nn.init.zeros_(self.readout.bias)

    def transitions(self) -> torch.Tensor:
        """P of every token id (V, H, N, N), straight-through; id 0 (padding) the identity. With --table linear the
        logits of token v are W_P RMSNorm(E[v]), the layer's direct map applied to its (normed) embedding."""
        if self.table == "linear":
            u = self.norm_in(self.embed.weight)
            logits = self.proj(u).view(-1, self.heads, self.states, self.states)
        else:
            logits = self.logits
        soft = torch.softmax(logits, dim=-2)
        hard = torch.zeros_like(soft).scatter_(-2, logits.argmax(dim=-2, keepdim=True), 1.0)
        p = hard + soft - soft.detach()
        return torch.cat([torch.eye(self.states).expand(1, self.heads, -1, -1), p[1:]])

    def forward(self, input_ids):
        p = self.transitions()
        x = torch.zeros(input_ids.shape[0], self.heads, self.states, 1)
        x[:, :, 0] = 1.0
        outs = []
        for t in range(input_ids.shape[1]):
            x = p[input_ids[:, t]] @ x
            outs.append(x.flatten(1))
        states = torch.stack(outs, dim=1)
        if self.readout_kind in ("linear", "linear_small"):
            return self.readout(states)
        if self.readout_kind in ("norm", "statenorm"):
            return self.readout(self.norm_out(states))
        if self.readout_kind == "layernorm":
            return self.readout(self.norm_out(torch.cat([states, torch.zeros_like(states)], dim=-1)))
        h = self.out_proj(states)
        if self.readout_kind in ("proj_norm", "eye_norm"):
            return self.readout(self.norm_out(h))
        if self.readout_kind in ("proj", "eye"):
            return self.readout(h)
        if self.readout_kind in ("block", "block_nomlp"):
            e = self.embed(input_ids)
            h = e + h + self.skip * self.norm_in(e)
        if self.readout_kind in ("block", "block_noembed"):
            h = h + self.mlp(self.norm_mid(h))
        return self.readout(self.norm_out(h))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("reference", "layer"), default="reference")
    parser.add_argument("--table", choices=("free", "linear"), default="free")
    parser.add_argument("--readout", choices=READOUTS, default="linear")
    parser.add_argument("--hidden", type=int, default=64, help="--model reference: d of the layer's pieces")
    parser.add_argument(
        "--freeze_embed", action="store_true", help="--table linear: the embedding is not trained (W_P only)"
    )
    parser.add_argument(
        "--freeze_norm",
        action="store_true",
        help="--table linear: the gain of RMSNorm(embedding) in front of W_P is not trained either",
    )
    parser.add_argument(
        "--table_lr", type=float, default=None, help="--table linear: W_P's learning rate (default --lr)"
    )
    parser.add_argument(
        "--norm_lr",
        type=float,
        default=None,
        help="--table linear: the learning rate of RMSNorm(embedding)'s gain in front of W_P (default --lr)",
    )
    parser.add_argument("--config", type=json.loads, default={}, help="--model layer: HybridSSMConfig fields")
    parser.add_argument("--block_type", default="pre_norm_residual")
    parser.add_argument("--opt", choices=("adam", "recipe"), default="adam")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--task", default="a5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--eval_samples", type=int, default=256)
    parser.add_argument("--json", default="runs/i28/bisect.jsonl")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    task = get_task(args.task)
    settings = StateTrackingSettings(task=args.task, seed=args.seed, max_steps=args.steps, block_type=args.block_type)
    if args.model == "layer":
        settings.extra_config = args.config
        model = build_model(settings)  # seeds torch with settings.seed
        forward = lambda ids: model(input_ids=ids, attention_mask=(ids != 0).long()).logits  # noqa: E731
    else:
        torch.manual_seed(args.seed)
        model = Variant(task.vocab_size, task.num_classes, 16, 8, args.table, args.readout, args.hidden)
        forward = model
        if args.freeze_embed:
            model.embed.weight.requires_grad_(False)
        if args.freeze_norm:
            model.norm_in.weight.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    own_lr = {}  # parameter -> its learning rate, where not --lr
    if args.table_lr is not None:
        own_lr[model.proj.weight] = args.table_lr
    if args.norm_lr is not None:
        own_lr[model.norm_in.weight] = args.norm_lr
    if own_lr:
        params = [{"params": [p for p in params if p not in own_lr]}] + [
            {"params": [p], "lr": lr} for p, lr in own_lr.items()
        ]
    if args.opt == "adam":
        optimizer, scheduler, clip = torch.optim.Adam(params, lr=args.lr), None, 0.0
    else:
        optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
        scheduler, clip = warmup_cosine_schedule(optimizer, 50, args.steps), 1.0
    train = StateTrackingDataset(task, args.steps * 64, 3, 40, seed=args.seed)
    cpu0, curve = time.process_time(), []
    model.train()
    for step in range(args.steps):
        batch = collate_state_tracking([train[step * 64 + i] for i in range(64)])
        loss = nn.functional.cross_entropy(forward(batch["input_ids"]).flatten(0, 1), batch["labels"].flatten())
        optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if step % 100 == 0 or step == args.steps - 1:
            curve.append((step, round(loss.item(), 4)))
    train_cpu = time.process_time() - cpu0
    model.eval()
    test = reference_automaton.evaluate(
        lambda ids: forward(ids), task, length_buckets(40, 256, 6), args.eval_samples
    )  # (B, T) ids -> logits
    mean = sum(b["accuracy"] for b in test) / len(test)
    label = f"{args.model} table={args.table} readout={args.readout} hidden={args.hidden} opt={args.opt} lr={args.lr}"
    label += " frozen_embedding" if args.freeze_embed else ""
    label += " frozen_norm" if args.freeze_norm else ""
    label += f" table_lr={args.table_lr}" if args.table_lr is not None else ""
    label += f" norm_lr={args.norm_lr}" if args.norm_lr is not None else ""
    if args.model == "layer":
        label = f"layer config={json.dumps(args.config)} block={args.block_type} opt={args.opt} lr={args.lr}"
    cells = " ".join(f"{100 * b['accuracy']:.1f}" for b in test)
    print(f"{label} | {args.task} seed {args.seed} steps {args.steps}: mean {100 * mean:.1f} [{cells}] "
          f"final loss {curve[-1][1]} train CPU {train_cpu:.0f} s")  # fmt: skip
    record = {"label": label, "args": vars(args), "test": test, "test_mean_accuracy": mean, "curve": curve,
              "train_cpu_seconds": train_cpu}  # fmt: skip
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    with open(args.json, "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
