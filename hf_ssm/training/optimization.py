"""Optimizers and learning-rate schedules of the training drivers (docs/design.md §8.3: the state-tracking recipes).

Every driver warms up linearly and then decays on a cosine: the package's schedule (`warmup_cosine_factor`),
or, for the state-tracking `cosine_with_min_lr` recipe, transformers' own.

Why the package's schedule is not one of transformers': it starts the warm-up at `lr / warmup_steps` (step 0
already trains) and still starts the decay from the peak at step `warmup_steps`, reaching the floor at
`total_steps`. `get_cosine_schedule_with_warmup` and `get_cosine_with_min_lr_schedule_with_warmup` warm up
from 0 (`step / warmup_steps`: the first step would train at lr 0); `get_cosine_with_min_lr_schedule_with_warmup
_lr_rate` warms up from `lr / warmup_steps` but moves the whole decay one step earlier (progress
`(step - warmup + 1) / (total - warmup)`: the floor at `total_steps - 1`). Switching would change the learning
rate of every step of every run recorded so far (and of checkpoints being resumed), so the schedule stays, in
this one place.
"""

from __future__ import annotations

import math
from functools import partial

import torch

LR_SCHEDULES = ("cosine", "cosine_with_min_lr", "constant")


def warmup_cosine_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """The package's schedule, as a multiple of the peak learning rate at (0-based) `step`: `(step + 1) /
    warmup_steps` during the warm-up, then a cosine from 1 at `warmup_steps` down to `min_ratio` at
    `total_steps` (and `min_ratio` after)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def warmup_cosine_schedule(optimizer, warmup_steps: int, total_steps: int, min_ratio: float = 0.0):
    """`warmup_cosine_factor` as a LambdaLR on `optimizer` (step it once per optimizer step)."""
    factor = partial(warmup_cosine_factor, warmup_steps=warmup_steps, total_steps=total_steps, min_ratio=min_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def parameter_groups(
    model, weight_decay: float, decay_embedding: bool, lr: float | None = None, transition_lr_scale: float = 1.0
) -> list[dict]:
    """AdamW groups of the trained parameters (frozen ones, requires_grad False, are left out): every parameter
    decays by `weight_decay`, except the input embedding when `decay_embedding` is False (the PD-SSM authors'
    setting); with `transition_lr_scale` != 1 the weights of PD-SSM's direct transition maps (`transition_proj`)
    get their own groups at lr * transition_lr_scale."""
    embedding = {id(p) for p in model.get_input_embeddings().parameters()}
    scaled = set()
    if transition_lr_scale != 1:
        scaled = {id(p) for name, p in model.named_parameters() if ".transition_proj." in f".{name}"}
    # (embedding without decay, scaled lr) -> group; the scaled one last, the others in their earlier order
    groups = {}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        key = (not decay_embedding and id(p) in embedding, id(p) in scaled)
        group = groups.setdefault(key, {"params": [], "weight_decay": 0.0 if key[0] else weight_decay})
        group["params"].append(p)
        if key[1]:
            group["lr"] = lr * transition_lr_scale
    return [groups[key] for key in sorted(groups, key=lambda k: (k[1], k[0]))]


def build_optimizer(model, settings) -> torch.optim.Optimizer:
    groups = parameter_groups(
        model,
        settings.weight_decay,
        settings.decay_embedding,
        settings.learning_rate,
        getattr(settings, "transition_lr_scale", 1.0),
    )
    return torch.optim.AdamW(groups, lr=settings.learning_rate)


def warmup_constant_factor(step: int, warmup_steps: int) -> float:
    """`(step + 1) / warmup_steps` during the warm-up (as `warmup_cosine_factor`), then 1: the peak rate for good."""
    return (step + 1) / warmup_steps if step < warmup_steps else 1.0


def build_scheduler(optimizer, settings):
    """The state-tracking schedule: `"cosine"`, the package's (`warmup_cosine_factor`, down to 0 at max_steps);
    `"cosine_with_min_lr"`, transformers' linear warm-up from 0 then cosine down to `min_learning_rate`;
    `"constant"`, the package's warm-up, then the peak rate to the end (the minimal automaton's Adam)."""
    if settings.lr_schedule == "constant":
        factor = partial(warmup_constant_factor, warmup_steps=settings.warmup_steps)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    if settings.lr_schedule == "cosine_with_min_lr":
        from transformers import get_cosine_with_min_lr_schedule_with_warmup

        return get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, settings.warmup_steps, settings.max_steps, min_lr=settings.min_learning_rate
        )
    return warmup_cosine_schedule(optimizer, settings.warmup_steps, settings.max_steps)
