"""Scoring a state-tracking model (docs/design.md §8.3): the accuracy by length bucket, and at far lengths; a task
mixture's components one by one; the test with a kind of layer zeroed (`zeroed_mixers`)."""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from dataclasses import replace

import torch

from ...data import StateTrackingDataset, collate_state_tracking
from ...data.state_tracking import last_token_correct
from ...modeling.modeling_hybrid_ssm import HybridSSMDecoderLayer
from ..loop import batch_ranges, bucket_accuracy

TEST_SEED, FAR_SEED = 20_000, 30_000  # data seeds of the test and the far-length sequences (validation: 10,000)
# Tokens per far-length batch (length x sequences): at 4,000 steps a batch of 4, so that an attention baseline's
# (B, heads, T, T) scores stay near a gigabyte.
FAR_BATCH_TOKENS = 16_384


@torch.no_grad()
def evaluate(model, settings, task, buckets, seed: int, device, samples_per_bucket: int, rows=None) -> dict:
    """Accuracy for each length bucket of a StateTrackingSettings' task, `settings.batch_size` sequences at a time:
    at the final position (the state-tracking tasks), or over every labelled position for a task whose
    `scored_positions` is "labelled" (each query / copied token of the memory tasks, which also report
    `sequence_accuracy`, the share of sequences with every labelled position right). `prefix_accuracy` is always the
    accuracy over every labelled position.

    Bucket (low, high) holds `samples_per_bucket` sequences drawn with data seed `seed + low` (for mqar low and
    high count key-value pairs: `Task.size_name`); with `rows` (a WordProblemDataset: the rows of a word-problem
    file) it holds every row of a length in [low, high] instead, scored at the final position. `task`: the run's
    Task, resolved once by the driver (`RunPlan.task`).
    """
    every_label = rows is None and task.scored_positions == "labelled"

    def score_bucket(low: int, high: int) -> dict:
        if rows is None:
            data = StateTrackingDataset(task, samples_per_bucket, low, high, seed=seed + low)
        else:
            data = rows.with_lengths(low, high)
            if not len(data):
                raise ValueError(f"{rows.path} has no row of a length in [{low}, {high}] to score")
        correct = total = prefix_correct = prefix_total = whole = 0
        for indices in batch_ranges(len(data), settings.batch_size):
            batch = collate_state_tracking([data[i] for i in indices])
            logits = model(
                input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)
            ).logits
            pred = logits.argmax(-1).cpu()
            correct += last_token_correct(pred, batch)
            total += len(pred)
            labelled = batch["labels"] != -100
            right = (pred == batch["labels"]) & labelled
            prefix_correct += int(right.sum())
            prefix_total += int(labelled.sum())
            whole += int((right | ~labelled).all(dim=1).sum())
        scored = {
            "min_length": low,
            "max_length": high,
            "accuracy": prefix_correct / prefix_total if every_label else correct / total,
            "prefix_accuracy": prefix_correct / max(prefix_total, 1),
            "samples": total,
        }
        if every_label:
            scored.update(scored_positions=prefix_total, sequence_accuracy=whole / total)
        return scored

    return bucket_accuracy(model, buckets, score_bucket)


def evaluate_far_lengths(model, settings, task, lengths, device) -> dict | None:
    """The test report's far part: `settings.far_samples_per_bucket` fresh sequences of each far length in
    `lengths` (RunPlan.far_lengths) exactly (None when there are none), in batches of about FAR_BATCH_TOKENS tokens."""
    if not lengths:
        return None
    buckets = []
    for length in lengths:
        batch = max(1, min(settings.batch_size, FAR_BATCH_TOKENS // task.num_tokens(length)))
        scored = evaluate(model, replace(settings, batch_size=batch), task, [(length, length)], FAR_SEED, device,
                          settings.far_samples_per_bucket)  # fmt: skip
        buckets += scored["buckets"]
    return {"buckets": buckets, "mean_accuracy": sum(b["accuracy"] for b in buckets) / len(buckets)}


def evaluate_components(model, components, buckets, seed: int, device, samples_per_bucket: int, rows=None) -> dict:
    """`evaluate` of each of a run's `components` (RunPlan.components) on its buckets (`buckets`: one list of (low,
    high) per component), `samples_per_bucket` sequences a bucket. One component: its report itself. A mixture: the
    mean of the components' mean accuracies, every bucket tagged with its task ("task"), and each component's own
    report under "components"."""
    own_rows = {} if rows is None else {"rows": rows}  # a word-problem file run's rows (one component)
    reports = {
        c.task.name: evaluate(model, c.settings, c.task, b, seed, device, samples_per_bucket, **own_rows)
        for c, b in zip(components, buckets)
    }
    if len(components) == 1:
        return next(iter(reports.values()))
    return {
        "buckets": [{**bucket, "task": name} for name, report in reports.items() for bucket in report["buckets"]],
        "mean_accuracy": statistics.mean(report["mean_accuracy"] for report in reports.values()),
        "components": reports,
    }


def far_components(model, components, device) -> dict | None:
    """`evaluate_far_lengths` of each component with far lengths (None when none has any); for a mixture every
    bucket tagged with its task and the mean over them."""
    reports = {c.task.name: evaluate_far_lengths(model, c.settings, c.task, c.far_lengths, device) for c in components}
    reports = {name: report for name, report in reports.items() if report is not None}
    if len(components) == 1 or not reports:
        return next(iter(reports.values()), None)
    buckets = [{**bucket, "task": name} for name, report in reports.items() for bucket in report["buckets"]]
    return {"buckets": buckets, "mean_accuracy": statistics.mean(b["accuracy"] for b in buckets)}


@contextmanager
def zeroed_mixers(model, mixer: str):
    """Within the block, every decoder layer of `model` whose mixer is `mixer` (its config.mixers entry) outputs
    zeros from its mixer: in a pre-norm residual block the mixer's branch adds nothing to the stream, the layer's
    SwiGLU still runs. The hooks go when the block ends, whatever happens in it."""

    def zero(module, args, output):
        return (torch.zeros_like(output[0]), *output[1:])  # every mixer returns (output, its state or weights)

    layers = [m for m in model.modules() if isinstance(m, HybridSSMDecoderLayer)]
    hooks = [m.mixer.register_forward_hook(zero) for m in layers if model.config.mixers[m.layer_idx] == mixer]
    if not hooks:
        raise ValueError(f"the model has no {mixer!r} layer to zero; its layers are {list(model.config.mixers)}")
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


__all__ = [
    "FAR_SEED",
    "TEST_SEED",
    "evaluate",
    "evaluate_components",
    "evaluate_far_lengths",
    "far_components",
    "zeroed_mixers",
]
