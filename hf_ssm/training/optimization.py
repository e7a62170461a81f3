"""Optimizer and learning-rate schedule of the state-tracking driver, from its settings (DESIGN §8.3)."""

from __future__ import annotations

import math

import torch

LR_SCHEDULES = ("cosine", "cosine_with_min_lr")


def parameter_groups(model, weight_decay: float, decay_embedding: bool) -> list[dict]:
    """AdamW groups: every parameter decays by `weight_decay`, except the input embedding when
    `decay_embedding` is False (the PD-SSM authors' setting)."""
    embedding = {id(p) for p in model.get_input_embeddings().parameters()}
    groups = [{"params": [], "weight_decay": weight_decay}, {"params": [], "weight_decay": 0.0}]
    for p in model.parameters():
        groups[int(not decay_embedding and id(p) in embedding)]["params"].append(p)
    return [g for g in groups if g["params"]]


def build_optimizer(model, settings) -> torch.optim.Optimizer:
    groups = parameter_groups(model, settings.weight_decay, settings.decay_embedding)
    return torch.optim.AdamW(groups, lr=settings.learning_rate)


def build_scheduler(optimizer, settings):
    """`"cosine"`: the package's schedule ((step + 1) / warmup_steps, then cosine to 0 at max_steps);
    `"cosine_with_min_lr"`: transformers' linear warm-up then cosine down to `min_learning_rate`."""
    if settings.lr_schedule == "cosine_with_min_lr":
        from transformers import get_cosine_with_min_lr_schedule_with_warmup

        return get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, settings.warmup_steps, settings.max_steps, min_lr=settings.min_learning_rate
        )

    def schedule(step: int) -> float:
        if step < settings.warmup_steps:
            return (step + 1) / settings.warmup_steps
        progress = (step - settings.warmup_steps) / max(1, settings.max_steps - settings.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
