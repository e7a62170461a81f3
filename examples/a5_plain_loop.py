"""The README's hybrid, with HybridSSMConfig's defaults, trained on A5 by a plain PyTorch loop (docs/training.md,
"The default hybrid on A5 in a plain loop"), then tested as the state-tracking driver tests: 1,024 sequences per
length bucket over 40-256 and 256 of exactly 1,000 steps.

    python examples/a5_plain_loop.py --seeds 0-2 --out results/state_tracking/plain_loop_a5.json

`train` is the loop the docs show, line for line (tests/docs check it); everything else here scores and records.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import hf_ssm
from hf_ssm.data.state_tracking import StateTrackingDataset, collate_state_tracking, get_task


def train(seed: int, steps: int = 800) -> hf_ssm.HybridSSMForTokenClassification:
    task = get_task("a5")  # words over A5's two generators; every prefix labelled with its product (60 classes)
    torch.manual_seed(seed)
    config = hf_ssm.HybridSSMConfig(
        vocab_size=task.vocab_size,
        hidden_size=512,
        num_hidden_layers=2,
        mixers="PA",  # the default PD-SSM layer, then attention
        num_labels=task.num_classes,
    )
    model = hf_ssm.HybridSSMForTokenClassification(config)
    with torch.no_grad():  # token v starts as e_v (then trains)
        model.get_input_embeddings().weight.copy_(torch.eye(task.vocab_size, config.hidden_size))
    delay = hf_ssm.SublayerDelay(model, attention=200, mlp=200).silence()  # the heads search first
    optimizer = torch.optim.AdamW(hf_ssm.parameter_groups(model, 1e-2))  # W_P at 1e-2 / sqrt(d)
    data = StateTrackingDataset(task, steps * 32, min_length=3, max_length=40, seed=seed)
    for step in range(steps):
        delay.before_step(step)
        batch = collate_state_tracking([data[step * 32 + i] for i in range(32)])
        inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "labels")}
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def test(model) -> dict:
    """The state-tracking driver's test of a trained model: length buckets over 40-256 and the far length 1,000."""
    from hf_ssm.training.state_tracking.driver import length_buckets
    from hf_ssm.training.state_tracking.evaluation import TEST_SEED, evaluate, evaluate_far_lengths
    from hf_ssm.training.state_tracking.settings import StateTrackingSettings

    settings = StateTrackingSettings(task="a5", batch_size=64)
    task, device = get_task("a5"), torch.device("cpu")
    near = evaluate(model, settings, task, length_buckets(40, 256, 6), TEST_SEED, device, 1024)
    far = evaluate_far_lengths(model, settings, task, (1000,), device)
    return {
        "test_accuracy_by_bucket": {f"{b['min_length']}-{b['max_length']}": b["accuracy"] for b in near["buckets"]},
        "test_mean_accuracy": near["mean_accuracy"],
        "far_accuracy_by_length": {str(b["min_length"]): b["accuracy"] for b in far["buckets"]},
    }


def main() -> None:
    from hf_ssm.training.cli import seed_list
    from hf_ssm.training.reports import write_json_atomic

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0", help="seeds, e.g. 0-2 or 0,2")
    parser.add_argument("--steps", type=int, default=800, help="optimizer steps of 32 sequences")
    parser.add_argument("--out", default=None, help="JSON record: one entry per seed, merged by seed")
    args = parser.parse_args()
    records = json.loads(Path(args.out).read_text()) if args.out and Path(args.out).is_file() else []
    for seed in seed_list(args.seeds):
        start = time.process_time()
        model = train(seed, args.steps)
        record = {"seed": seed, "steps": args.steps, **test(model), "cpu_seconds": time.process_time() - start}
        record["command"] = f"python examples/a5_plain_loop.py --seeds {seed} --steps {args.steps}"
        print(json.dumps(record), flush=True)
        records = [r for r in records if r["seed"] != seed] + [record]
        if args.out:
            write_json_atomic(args.out, sorted(records, key=lambda r: r["seed"]))


if __name__ == "__main__":
    main()
