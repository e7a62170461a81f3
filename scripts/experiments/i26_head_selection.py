"""Issue 26: can a per-head adapter's good heads be told apart without the long test stories?

A `--classifier_per_head` adapter answers with the product of its heads' answers. On cycle navigation some seeds
hold at 40 transitions and others fall (RESULTS.md §2); docs/adapter.md traces the fall to heads whose transition
choice drifts on long stories. This script reads the saved adapters of a run (RESULTS.md's i26_sent_cyc_ph) and
scores, on the very test stories train_adapter.py used (seed 20_000 + the bucket's low end), every head alone and
the product of the heads each rule keeps:

- all heads (the adapter's own answer; reproduces the recorded accuracy),
- the k heads with the highest mean log-probability of the right answer on held-out stories of the training
  lengths (1-10 transitions, seed 30_001), k in 1, 2, 4, 8,
- the same ranking on held-out stories of 20 transitions (2x the training length; a longer validation set),
- the best head at the test length itself (an oracle, not a rule: what a perfect choice of one head would give).

    python scripts/experiments/i26_head_selection.py --run_dir runs/experiments/i26_sent_cyc_ph --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from hf_ssm.adapters import load_base, load_ssm_adapter
from hf_ssm.adapters.feature_cache import FrozenPrefix
from hf_ssm.data.nl_state_tracking import NLStateTrackingDataset, collate_nl_state_tracking, get_nl_task
from hf_ssm.training.evaluation import batch_ranges
from hf_ssm.training.progress import evaluation_progress

TEST_SEED, HELD_OUT_SEED = 20_000, 30_000  # train_adapter.py's test stories; fresh ones for the ranking


@torch.no_grad()
def head_log_probs(adapted, tokenizer, task, count: int, low: int, high: int, seed: int, batch_size: int):
    """Every head's log-probabilities of the classes at the question, (S, H, C), and the labels (S,)."""
    data = NLStateTrackingDataset(task, tokenizer, count, low, high, seed, 0.0)
    log_probs, labels = [], []
    batches = batch_ranges(len(data), batch_size)
    for indices in evaluation_progress(batches, f"{task.name} {low}-{high}", total=-(-len(data) // batch_size)):
        batch = collate_nl_state_tracking([data[i] for i in indices], tokenizer.pad_token_id)
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
        hidden = FrozenPrefix(adapted).features(**inputs)  # layer k's output: the layers above never run
        mask = inputs["attention_mask"].bool()
        logits, _ = adapted.ssm_adapter.head_logits(
            hidden, mask=None if bool(mask.all()) else mask, input_ids=inputs["input_ids"]
        )
        log_probs.append(logits[:, -1].float().log_softmax(-1))
        labels.append(batch["label"])
    return torch.cat(log_probs), torch.cat(labels)


def accuracy(log_probs: torch.Tensor, labels: torch.Tensor, heads: list[int]) -> float:
    """Accuracy of the product of `heads`' answers (their log-probabilities summed)."""
    return float((log_probs[:, heads].sum(1).argmax(-1) == labels).float().mean())


def ranking(log_probs: torch.Tensor, labels: torch.Tensor) -> list[int]:
    """Heads by mean log-probability of the right class, best first."""
    right = log_probs.gather(-1, labels[:, None, None].expand(-1, log_probs.shape[1], 1)).squeeze(-1)  # (S, H)
    return right.mean(0).argsort(descending=True).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run_dir", required=True, help="folder holding s<seed>/ssm_classifier/adapter")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--task", default="cycle_navigation")
    parser.add_argument("--stories", type=int, default=256, help="stories per bucket (test and held out)")
    parser.add_argument("--test_transitions", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--out", default="results/adapter/issue26/head_selection.json")
    args = parser.parse_args()
    task = get_nl_task(args.task)
    records = []
    for seed in args.seeds:
        began = time.process_time()
        adapter_dir = Path(args.run_dir) / f"s{seed}" / "ssm_classifier" / "adapter"
        if not adapter_dir.is_dir():
            raise SystemExit(f"no saved adapter at {adapter_dir}")
        base, tokenizer = load_base("smollm2-135m")
        adapted = load_ssm_adapter(base, adapter_dir).eval()
        if not adapted.ssm_adapter.config.classifier_per_head:
            raise SystemExit(f"{adapter_dir} is not a classifier_per_head adapter")
        n = args.test_transitions
        test, test_labels = head_log_probs(adapted, tokenizer, task, args.stories, n, n, TEST_SEED + n, args.batch_size)
        short, short_labels = head_log_probs(
            adapted, tokenizer, task, args.stories, 1, 10, HELD_OUT_SEED + 1, args.batch_size
        )
        long, long_labels = head_log_probs(
            adapted, tokenizer, task, args.stories, 20, 20, HELD_OUT_SEED + 20, args.batch_size
        )
        heads = list(range(test.shape[1]))
        per_head = [accuracy(test, test_labels, [h]) for h in heads]
        by_short, by_long = ranking(short, short_labels), ranking(long, long_labels)
        record = {
            "task": args.task,
            "seed": seed,
            "adapter": str(adapter_dir),
            "test_transitions": n,
            "stories": args.stories,
            "all_heads": accuracy(test, test_labels, heads),
            "per_head_at_test": per_head,
            "per_head_held_out_1_10": [accuracy(short, short_labels, [h]) for h in heads],
            "per_head_held_out_20": [accuracy(long, long_labels, [h]) for h in heads],
            "top_k_by_1_10": {k: accuracy(test, test_labels, by_short[:k]) for k in (1, 2, 4, 8)},
            "top_k_by_20": {k: accuracy(test, test_labels, by_long[:k]) for k in (1, 2, 4, 8)},
            "best_single_head_oracle": max(per_head),
            "cpu_seconds": time.process_time() - began,
        }
        records.append(record)
        print(
            f"seed {seed}: all heads {100 * record['all_heads']:.1f}, "
            f"top-k by 1-10 {[round(100 * v, 1) for v in record['top_k_by_1_10'].values()]}, "
            f"top-k by 20 {[round(100 * v, 1) for v in record['top_k_by_20'].values()]}, "
            f"best head {100 * record['best_single_head_oracle']:.1f} ({record['cpu_seconds']:.0f} CPU s)",
            flush=True,
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
