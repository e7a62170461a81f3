"""Issue 26: a formal stand-in for the adapter's stories. Every move of a state-tracking task (hf_ssm.data.state_tracking)
is followed by 0..F filler tokens drawn from V filler ids, as every transition sentence of a story carries about ten
words that must leave the state alone. One PD-SSM layer of the adapter's kind (RMSNorm -> mixer -> classifier at
the last position, 16 pure-automaton heads of N = 8) trains on 1..10 moves and is tested at 40 and 80 moves, so
that an adapter option can be tried in minutes instead of a SmolLM2 run:

    python scripts/experiments/i26_filler_proxy.py --task cycle_navigation --transition bank \
        --config '{"pd_ssm_identity_entry_logit": 3.0}' --seed 0 --json runs/i26/proxy.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch
from torch import nn

from hf_ssm.adapters import SSMAdapterConfig
from hf_ssm.adapters.layer import SSMAdapter
from hf_ssm.data.state_tracking import get_task


def batch(task, rng: random.Random, size: int, low: int, high: int, fillers: int, vocab: int):
    """(ids (B, L) left-padded with 0, mask (B, L), answer (B,)): moves 1..task.vocab_size-1, fillers above them."""
    rows, answers = [], []
    for _ in range(size):
        moves, labels = task.sample(rng.randint(low, high), rng)
        ids = []
        for m in moves:
            ids.append(m)
            ids.extend(task.vocab_size + rng.randrange(vocab) for _ in range(rng.randint(0, fillers)))
        rows.append(ids)
        answers.append(labels[-1])
    width = max(map(len, rows))
    ids = torch.zeros(size, width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
    return ids, ids != 0, torch.tensor(answers)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cycle_navigation")
    p.add_argument("--transition", default="bank")
    p.add_argument("--diagonal_init", type=float, default=0.0)
    p.add_argument("--config", default="{}", help="extra HybridSSMConfig fields of the mixer (JSON)")
    p.add_argument("--fillers", type=int, default=10, help="at most this many filler tokens after each move")
    p.add_argument("--filler_vocab", type=int, default=64)
    p.add_argument("--width", type=int, default=64, help="embedding width (the base's hidden size)")
    p.add_argument(
        "--common_scale", type=float, default=0.0,
        help="add this many times one shared random vector to every embedding (an LLM's anisotropic features)",
    )  # fmt: skip
    p.add_argument("--center", action="store_true", help="subtract the embeddings' mean (a centred adapter input)")
    p.add_argument("--selection_init_scale", type=float, default=1.0, help="multiply W_s's initial weights by this")
    p.add_argument(
        "--selection_lr_scale", type=float, default=1.0,
        help="W_s's learning rate is lr x this (the other weights keep lr): e.g. 64 / width, so that a step moves a "
        "token's selection logits as far at every width (issue 28's transition_lr_scale)",
    )  # fmt: skip
    p.add_argument(
        "--classifier_lr_scale", type=float, default=1.0,
        help="the classifier's learning rate is lr x this (like --selection_lr_scale; the adapter's readout_learning_rate)",
    )  # fmt: skip
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--test_samples", type=int, default=256)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    task = get_task(args.task)
    settings = {
        "pd_ssm_num_heads": 16, "pd_ssm_head_state_size": 8, "pd_ssm_dict_size": 16, "pd_ssm_diagonal": "unit",
        "pd_ssm_input": "none", "pd_ssm_initial_state": "one_hot", "pd_ssm_transition": args.transition,
        "pd_ssm_dictionary_diagonal_init": args.diagonal_init, **json.loads(args.config),
    }  # fmt: skip
    config = SSMAdapterConfig(mixer_settings=settings, readout="classifier", num_labels=task.num_classes)
    embed = nn.Embedding(task.vocab_size + args.filler_vocab, args.width)  # frozen, as the base's features are
    embed.requires_grad_(False)
    with torch.no_grad():
        # its own generator, so that the adapter's init is the same whatever common_scale is
        common = torch.randn(args.width, generator=torch.Generator().manual_seed(10_000 + args.seed))
        embed.weight.add_(args.common_scale * common)
        if args.center:
            embed.weight.sub_(embed.weight.mean(0))
    adapter = SSMAdapter(config, args.width)
    with torch.no_grad():
        adapter.mixer.selection.weight.mul_(args.selection_init_scale)
    selection = [q for q in adapter.mixer.selection.parameters() if q.requires_grad]
    classifier = [q for q in adapter.classifier.parameters() if q.requires_grad]
    chosen = {id(q) for q in selection + classifier}
    rest = [q for q in adapter.parameters() if q.requires_grad and id(q) not in chosen]
    groups = [
        {"params": rest},
        {"params": selection, "lr": args.lr * args.selection_lr_scale},
        {"params": classifier, "lr": args.lr * args.classifier_lr_scale},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0)
    began, curve = time.process_time(), []
    for step in range(1, args.steps + 1):
        ids, mask, answer = batch(task, rng, 32, 1, 10, args.fillers, args.filler_vocab)
        logits = adapter(embed(ids), mask=mask)[0][:, -1]
        loss = nn.functional.cross_entropy(logits, answer)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(adapter.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0:
            curve.append((step, round(loss.item(), 4)))
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    test_rng, accuracy = random.Random(f"test:{args.seed}"), {}
    with torch.no_grad():
        for moves in ((1, 10), (40, 40), (80, 80)):
            ids, mask, answer = batch(task, test_rng, args.test_samples, *moves, args.fillers, args.filler_vocab)
            pred = adapter(embed(ids), mask=mask)[0][:, -1].argmax(-1)
            accuracy[f"{moves[0]}-{moves[1]}"] = (pred == answer).float().mean().item()
    record = {"args": vars(args), "accuracy": accuracy, "curve": curve, "cpu_s": time.process_time() - began}
    print(json.dumps(record))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
