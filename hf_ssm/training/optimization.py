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

from ..modeling.attention import HybridSSMAttention, HybridSSMMLP

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


def parameter_groups(model, learning_rate: float, weight_decay: float = 0.0, decays=None) -> list[dict]:
    """Optimizer parameter groups of `model`'s trained parameters (requires_grad False ones are left out), each group
    with its own "lr" and "weight_decay": every parameter at `learning_rate`, except those a layer trains at its own
    multiple of it — a PD-SSM layer's W_P at learning_rate * config.pd_ssm_transition_lr_scale (the layer's
    `learning_rate_scales`) — and `weight_decay` on the parameters `decays(name, parameter)` picks (default: the
    matrices, dim >= 2, as transformers' Trainer: no decay on biases, norm gains or D_skip), 0 on the others.

    In a plain loop, or handed to transformers' Trainer:

        optimizer = torch.optim.AdamW(hf_ssm.parameter_groups(model, 1e-3, weight_decay=0.1))
        trainer = Trainer(model=model, args=args, train_dataset=data, optimizers=(optimizer, None))

    The groups come in a fixed order: decayed, not decayed, then each scaled rate (ascending)."""
    scales = {}
    for prefix, module in model.named_modules():
        own = getattr(module, "learning_rate_scales", None)
        if callable(own):
            scales.update({f"{prefix}.{name}" if prefix else name: scale for name, scale in own().items()})
    if decays is None:
        decays = _decays_matrices
    groups: dict[tuple[float, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay, scale = bool(decays(name, p)), scales.get(name, 1.0)
        group = groups.setdefault(
            (scale, decay), {"params": [], "lr": learning_rate * scale, "weight_decay": weight_decay if decay else 0.0}
        )
        group["params"].append(p)
    return [groups[key] for key in sorted(groups, key=lambda k: (k[0] != 1.0, k[0], not k[1]))]


class SublayerDelay:
    """A hybrid's attention and SwiGLU (MLP) sublayers held back while its SSM layers start learning (docs/design.md
    §8.8): `silence()` zeroes each delayed sublayer's output projection (o_proj / down_proj, no bias: the sublayer
    adds nothing to the residual stream), and `before_step(step)` lets a delayed kind's parameters take gradients
    only from its step on (`attention` / `mlp`: that step; 0 leaves the kind alone). AdamW skips a parameter without
    a gradient, so until then neither its moments nor weight decay touch it. Parameters frozen before the delay was
    made stay frozen.

        delay = hf_ssm.SublayerDelay(model, attention=200, mlp=200).silence()   # once, on the fresh model
        for step in range(max_steps):
            delay.before_step(step)
            ...                                                                # forward, backward, optimizer step

    Make the optimizer before the first `before_step` (parameter_groups leaves out parameters that take no
    gradient). On a model resumed from a checkpoint, make the delay without `silence()` (the sublayers keep what they
    learnt). With transformers' Trainer, pass `callbacks=[delay.trainer_callback()]` instead of the loop's call."""

    KINDS = {"attention": (HybridSSMAttention, "o_proj"), "mlp": (HybridSSMMLP, "down_proj")}

    def __init__(self, model: torch.nn.Module, attention: int = 0, mlp: int = 0):
        self.delays = []  # (kind, first step, its modules, its trained parameters)
        for kind, steps in (("attention", attention), ("mlp", mlp)):
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
                raise ValueError(f"`{kind}` must be an int >= 0 (the step its sublayers start learning), got {steps!r}")
            if not steps:
                continue
            modules = [m for m in model.modules() if isinstance(m, self.KINDS[kind][0])]
            if not modules:
                raise ValueError(f"`{kind}` = {steps}: the model has no {kind} sublayer to hold back")
            trained = [p for m in modules for p in m.parameters() if p.requires_grad]
            self.delays.append((kind, steps, modules, trained))

    def silence(self) -> SublayerDelay:
        """Zero the output projection of every delayed sublayer; returns the delay."""
        with torch.no_grad():
            for kind, _, modules, _ in self.delays:
                for module in modules:
                    getattr(module, self.KINDS[kind][1]).weight.zero_()
        return self

    def before_step(self, step: int) -> None:
        """Before optimizer step `step` (0-based): each delayed kind learns from its step on."""
        for _, first, _, parameters in self.delays:
            for p in parameters:
                p.requires_grad_(step >= first)

    def trainer_callback(self):
        """A transformers TrainerCallback that calls `before_step(state.global_step)` as each optimizer step begins
        (before its first micro-batch's forward), so that a Trainer holds the sublayers back as the loop above does."""
        from transformers import TrainerCallback

        delay = self

        class SublayerDelayCallback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                delay.before_step(state.global_step)

        return SublayerDelayCallback()


def _decays_matrices(name: str, parameter) -> bool:
    return parameter.dim() >= 2


def build_optimizer(model, settings) -> torch.optim.Optimizer:
    """AdamW over parameter_groups at settings.learning_rate: every trained parameter decays by settings.weight_decay
    (the state-tracking recipes' rule), except the input embedding when settings.decay_embedding is False (the PD-SSM
    authors' setting)."""
    embedding = {id(p) for p in model.get_input_embeddings().parameters()}

    def decays(name, parameter) -> bool:
        return settings.decay_embedding or id(parameter) not in embedding

    groups = parameter_groups(model, settings.learning_rate, settings.weight_decay, decays)
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
