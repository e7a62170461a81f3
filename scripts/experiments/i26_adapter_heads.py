"""What each head of a trained cycle-navigation bank adapter does with sentences (issue 26).

Loads a saved adapter (`--transitions_at sentence_ends --transition bank`, e.g. from
`adapter_smollm2_sentences.sh`) onto SmolLM2-135M, reads 4 stories of 10 and 2 of 40 transitions, and per head
reports: which bank entry it picks for each transition symbol (stay / forward / back) in the first 10 sentences
of a story and after them; whether the majority choices form the true automaton on the states reached after the
intro (forward a 5-cycle, back its inverse, stay the identity).

    python scripts/experiments/i26_adapter_heads.py runs/experiments/NAME/s0/ssm_classifier/adapter --json OUT
"""

from __future__ import annotations

import argparse
import collections
import json
import random

import torch

from hf_ssm.adapters import load_base, load_ssm_adapter
from hf_ssm.adapters.feature_cache import FrozenPrefix
from hf_ssm.data.nl_state_tracking import get_nl_task, token_ends
from hf_ssm.modeling.pd_bank import bank_indices

SYMBOLS = {1: "stay", 2: "forward", 3: "back"}


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("adapter")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    base, tokenizer = load_base("smollm2-135m")
    model = load_ssm_adapter(base, args.adapter)
    adapter, mixer = model.ssm_adapter, model.ssm_adapter.mixer
    bank = bank_indices(mixer.dictionary)  # (H, K, N): column j of entry k sends state j to bank[h, k, j]
    ids_of_ends = torch.tensor(adapter.config.transition_token_ids)
    task, rng = get_nl_task("cycle_navigation"), random.Random(5)
    picks = collections.defaultdict(collections.Counter)  # (head, symbol, "early" / "late") -> entry counts
    for count in (10, 10, 10, 10, 40, 40):
        story = task.sample(count, rng)
        ids, ends = token_ends(tokenizer, story.prompt, story.transition_ends)
        x = torch.tensor([ids])
        inputs = {"input_ids": x, "attention_mask": torch.ones_like(x), "position_ids": torch.arange(len(ids))[None]}
        hidden = FrozenPrefix(model).features(**inputs)
        u = adapter.norm((hidden - adapter.input_mean) / adapter.input_scale)
        choice = mixer.selection_logits(u).argmax(-1)[0]  # (T, H)
        intro = int(torch.isin(x[0], ids_of_ends).nonzero()[0])
        for head in range(mixer.num_heads):
            picks[(head, "intro", "")][int(choice[intro, head])] += 1
            for k, (end, symbol) in enumerate(zip(ends, story.symbols)):
                picks[(head, symbol, "early" if k < 10 else "late")][int(choice[end, head])] += 1
    heads = []
    for head in range(mixer.num_heads):
        major = {s: picks[(head, s, "early")].most_common(1)[0][0] for s in SYMBOLS}
        state = int(bank[head, picks[(head, "intro", "")].most_common(1)[0][0], 0])
        orbit = [state]
        for _ in range(5):
            orbit.append(int(bank[head, major[2], orbit[-1]]))
        reached = set(orbit)
        record = {
            "head": head,
            "forward_orbit": orbit,
            "forward_is_5_cycle": len(set(orbit[:5])) == 5 and orbit[5] == orbit[0],
            "back_inverts_forward": all(int(bank[head, major[3], int(bank[head, major[2], q])]) == q for q in reached),
            "stay_is_identity": all(int(bank[head, major[1], q]) == q for q in reached),
        }
        for symbol, name in SYMBOLS.items():
            for part in ("early", "late"):
                counts = picks[(head, symbol, part)]
                record[f"{name}_{part}_majority_share"] = round(counts[major[symbol]] / max(1, sum(counts.values())), 3)
        heads.append(record)
        print(json.dumps(record))
    exact = [
        h["head"] for h in heads if h["forward_is_5_cycle"] and h["back_inverts_forward"] and h["stay_is_identity"]
    ]
    print(f"heads that are exactly the cycle-navigation automaton: {exact}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"adapter": args.adapter, "exact_heads": exact, "heads": heads}, f, indent=1)


if __name__ == "__main__":
    main()
