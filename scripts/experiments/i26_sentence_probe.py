"""Do a frozen LLM's features at a sentence's last token name the sentence's transition? (issue 26)

1. For decoder layers 1, 3, 6, 10 of the base (`--layers`; the last, 29, is where an LM-head adapter reads): the output at every sentence-ending token
   (`hf_ssm.adapters.sentence_end_token_ids`) of 160 cycle-navigation stories of 1-10 transitions; a linear
   probe (z-scored features, Adam, L2 1e-3) trained on 70 % of the transition sentences names the transition
   symbol (stay / forward / back) of the other 30 %.
2. Layer 3, the reference's cached features (`i26_sentence_reference.py`, run it first): the probe trained on the
   512 training stories of 1-10 transitions names the symbol of every transition sentence of the 40- and
   80-transition test stories (drift with position shows up here).

    OMP_NUM_THREADS=1 python scripts/experiments/i26_sentence_probe.py --json results/adapter/issue26/sentence_probe.json
    OMP_NUM_THREADS=1 python scripts/experiments/i26_sentence_probe.py --layers 3,20,29 --skip_long_stories \
        --json results/adapter/issue26/sentence_probe_deep.json
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from hf_ssm.adapters import load_base, sentence_end_token_ids
from hf_ssm.data.nl_state_tracking import get_nl_task, token_ends


def fit_probe(x: torch.Tensor, y: torch.Tensor, l2: float, steps: int = 500):
    """(W, b) of a linear softmax probe on features x (n, d), symbols y (n,)."""
    w = torch.zeros(x.shape[1], int(y.max()) + 1, requires_grad=True)
    b = torch.zeros(int(y.max()) + 1, requires_grad=True)
    optimizer = torch.optim.Adam([w, b], 1e-2)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(x @ w + b, y) + l2 * w.pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return w.detach(), b.detach()


def held_out_by_layer(layers: list[int], stories: int) -> dict:
    model, tokenizer = load_base("smollm2-135m")
    ends = torch.tensor(sentence_end_token_ids(tokenizer))
    task = get_nl_task("cycle_navigation")
    rng = random.Random(0)
    features, symbols = {layer: [] for layer in layers}, []
    for _ in range(stories):
        story = task.sample(rng.randint(1, 10), rng)
        ids, positions = token_ends(tokenizer, story.prompt, story.transition_ends)
        x = torch.tensor([ids])
        assert int(torch.isin(x[0], ends).sum()) == len(positions) + 2  # intro, transitions, question
        with torch.no_grad():
            hidden = model(x, output_hidden_states=True).hidden_states
        for layer in layers:
            features[layer].append(hidden[layer + 1][0, positions])
        symbols += story.symbols
    y = torch.tensor(symbols)
    cut = int(0.7 * len(y))
    out = {}
    for layer in layers:
        x = torch.cat(features[layer])
        x = (x - x[:cut].mean(0)) / (x[:cut].std(0) + 1e-6)
        w, b = fit_probe(x[:cut], y[:cut], 1e-3, steps=300)
        out[str(layer)] = ((x[cut:] @ w + b).argmax(1) == y[cut:]).float().mean().item()
    return {"held_out_sentences": len(y) - cut, "accuracy_by_layer": out}


def cycle_symbols(data: dict):
    """Per transition sentence: features (n, d), the symbol (the change of the answer mod 5), the story's length."""
    x, y, n = [], [], []
    for f, labels, count in zip(data["features"], data["labels"], data["transitions"]):
        answers = torch.cat([torch.tensor([0]), labels[1:-1]])
        x.append(f[1:-1])
        y.append((answers[1:] - answers[:-1]) % 5)
        n += [count] * count
    return torch.cat(x), torch.cat(y), torch.tensor(n)


def transfer_to_long_stories(cache: Path) -> dict:
    train = torch.load(cache / "smollm2-135m_L3_cycle_navigation_train_512.pt")
    test = torch.load(cache / "smollm2-135m_L3_cycle_navigation_test_256.pt")
    x, y, _ = cycle_symbols(train)
    xt, yt, nt = cycle_symbols(test)
    mean, std = x.mean(0), x.std(0) + 1e-6
    w, b = fit_probe((x - mean) / std, y, 1e-4)
    pred = ((xt - mean) / std @ w + b).argmax(1)
    return {f"{n}_transitions": (pred[nt == n] == yt[nt == n]).float().mean().item() for n in (40, 80)} | {
        "train_sentences": len(y)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default="runs/i26_sentence_features")
    parser.add_argument("--json", default=None)
    parser.add_argument("--layers", default="1,3,6,10", help="decoder layers of part 1, comma-separated")
    parser.add_argument("--skip_long_stories", action="store_true", help="part 1 only (no reference cache needed)")
    args = parser.parse_args()
    began = time.process_time()
    result = {"held_out": held_out_by_layer([int(layer) for layer in args.layers.split(",")], 160)}
    if not args.skip_long_stories:
        result["layer3_probe_on_long_stories"] = transfer_to_long_stories(Path(args.cache))
    result["cpu_s"] = time.process_time() - began
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
