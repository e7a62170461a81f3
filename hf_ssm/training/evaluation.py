"""The evaluation skeleton the training drivers share: the model in eval mode for the evaluation (its training
flag restored after), the batches of an evaluation set, and the accuracy by bucket of the state-tracking drivers
(formal tasks: training/state_tracking.py; natural-language stories: training/adapter_evaluation.py).

What is kept apart, and why: the time-series driver scores one split (accuracy and loss, no buckets), so it
uses `eval_mode` and `batch_ranges` but not `bucket_accuracy`; the causal-LM evaluation (training/lm.py) sums
token losses across processes, where every process must run the same number of forward passes (dummy batches
included), so it shares only `eval_mode`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


@contextmanager
def eval_mode(model: torch.nn.Module):
    """`model.eval()` inside the block; the model's training flag as it was afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def batch_ranges(count: int, batch_size: int) -> Iterator[range]:
    """The item indices of each batch of an evaluation set of `count` items: [0, B), [B, 2B), ... (the last one
    shorter)."""
    for start in range(0, count, batch_size):
        yield range(start, min(count, start + batch_size))


@torch.no_grad()
def bucket_accuracy(model: torch.nn.Module, buckets, score_bucket: Callable[[int, int], dict]) -> dict:
    """{"buckets": one record per (low, high) bucket, "mean_accuracy": the mean of their "accuracy"}.

    `score_bucket(low, high, *rest)` scores the bucket's sequences and returns its record (its bounds, "accuracy"
    and whatever else the driver reports); it runs with `model` in eval mode and without gradients. A bucket is
    (low, high) or (low, high, *rest) (the stories of the shuffled-objects task: (low, high, number of objects))."""
    with eval_mode(model):
        records = [score_bucket(*bucket) for bucket in buckets]
    return {"buckets": records, "mean_accuracy": sum(r["accuracy"] for r in records) / len(records)}
