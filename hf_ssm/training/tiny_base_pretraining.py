"""Next-token pretraining of the built-in tiny base (hf_ssm.adapters.tiny_base) before an adapter experiment."""

from __future__ import annotations

import torch

from . import loop
from .optimization import warmup_cosine_schedule


def pretrain_language_model(
    model,
    tokenizer,
    texts: list[str],
    steps: int,
    accelerator,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    max_seconds: float | None = None,
    desc: str = "pretrain base",
) -> dict:
    """Next-token training on `texts` (cycled in order); stops after `steps` or `max_seconds`.

    The shared loop skeleton (training/loop.py) with the package's warm-up + cosine schedule (warm-up over
    steps / 20). The model trains where it is (the tiny base is built on the CPU in every process, identically);
    `accelerator` (the run's) only shows the progress bar. Returns {"steps", "seconds", "loss"} (loss: mean of
    the last 20 steps).
    """
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    scheduler = warmup_cosine_schedule(optimizer, max(1, steps // 20), steps)
    clock, losses = loop.Stopwatch(), []

    def train_step(step: int) -> None:
        chunk = [texts[(step * batch_size + i) % len(texts)] for i in range(batch_size)]
        batch = tokenizer(chunk, return_tensors="pt", padding=True)
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        labels = ids.masked_fill(mask == 0, -100)
        position_ids = (mask.cumsum(-1) - 1).clamp_min(0)
        loss = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, labels=labels, use_cache=False).loss
        # A plain torch step: the base is not prepared by the accelerator (its device and precision stay).
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())

    model.train()
    outcome = loop.run_training(
        accelerator, desc=desc, start=0, total=steps, train_unit=train_step, evaluate=lambda step: None,
        eval_every=0, out_of_time=lambda: max_seconds is not None and clock.seconds > max_seconds,
    )  # fmt: skip
    model.eval()
    tail = losses[-20:]
    return {"steps": outcome.units, "seconds": clock.seconds, "loss": sum(tail) / max(1, len(tail))}


__all__ = ["pretrain_language_model"]
