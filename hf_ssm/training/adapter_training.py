"""Training of one method of the adapter experiment (`train_method`), with checkpoints of the trainable parameters
only: the frozen base is never copied."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..adapters.feature_cache import FeatureStore, FrozenPrefix, batch_features
from ..data.nl_state_tracking import (
    NLStateTrackingDataset,
    answer_token_ids,
    check_sentence_tokenization,
    collate_nl_state_tracking,
    get_nl_task,
)
from . import loop
from .adapter_baselines import build_method, load_base, parameter_groups
from .adapter_evaluation import evaluate, fewshot_prefix, score_batch
from .adapter_settings import CACHED_METHODS, READOUT_OF_METHOD, SSM_ADAPTER_METHODS
from .checkpointing import atomic_save_dir, latest_checkpoint, prune_checkpoints, read_metadata
from .optimization import warmup_cosine_schedule


def _trainable_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def _evaluate_untrained(settings, base, tokenizer, task, method_dir: Path, device) -> dict:
    """Method "fewshot": the base as it is, answering after `fewshot_examples` solved stories."""
    began, cpu_began = time.perf_counter(), time.process_time()
    test = evaluate("fewshot", base, task, tokenizer, settings.bucket_list(), settings, 20_000, device, progress=True)
    result = {
        "method": "fewshot",
        "readout": READOUT_OF_METHOD["fewshot"],
        "task": settings.task,
        "trainable_parameters": 0,
        "steps": 0,
        "train_seconds": 0.0,
        "eval_seconds": time.perf_counter() - began,
        "cpu_seconds": time.process_time() - cpu_began,
        "history": [],
        "test": test,
        "fewshot_prefix_tokens": len(fewshot_prefix(task, tokenizer, settings)),
        "settings": asdict(settings),
    }
    method_dir.mkdir(parents=True, exist_ok=True)
    (method_dir / "results.json").write_text(json.dumps(result, indent=2))
    return result


STATISTICS_STORIES = 64  # training stories whose features set a standardize_input adapter's mean and scale


@torch.no_grad()
def _fit_input_statistics(model, train_data, tokenizer, device) -> int:
    """Set the adapter's `input_mean` / `input_scale` (standardize_input) from the base features of the first
    STATISTICS_STORIES training stories at the positions where its state moves (every real token, or only its
    `transition_token_ids`). Deterministic, so a resumed run recomputes the same values. Returns the count of
    feature vectors used."""
    adapter = model.ssm_adapter
    stories = [train_data[i] for i in range(min(STATISTICS_STORIES, len(train_data)))]
    batch = collate_nl_state_tracking(stories, tokenizer.pad_token_id)
    inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids")}
    features = FrozenPrefix(model).features(adapter_input_only=True, **inputs)
    steps = adapter.step_mask(inputs["attention_mask"].bool(), inputs["input_ids"])
    adapter.set_input_statistics(features[steps])
    return int(steps.sum())


def _save_trainable_checkpoint(target: Path, model, optimizer, scheduler, metadata: dict) -> None:
    """A checkpoint of the trainable parameters only (trainable.safetensors) and the optimizer and schedule
    states (optimizer.pt): the frozen base is never copied. Crash-safe (checkpointing.atomic_save_dir)."""
    from safetensors.torch import save_file

    def write(tmp: Path):
        save_file(_trainable_state(model), str(tmp / "trainable.safetensors"))
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "optimizer.pt")

    atomic_save_dir(target, write, metadata)
    prune_checkpoints(target.parent, keep=2)


def _load_trainable_checkpoint(folder: Path, model, optimizer, scheduler, device) -> dict:
    """Restore what `_save_trainable_checkpoint` wrote into `model`, `optimizer`, `scheduler`; returns its
    metadata."""
    from safetensors.torch import load_file

    named = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in load_file(str(folder / "trainable.safetensors")).items():
            named[name].copy_(value)
    state = torch.load(folder / "optimizer.pt", map_location=device)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return read_metadata(folder)


def train_method(method, settings, base_source, run_dir: Path, accelerator, resume: bool = False) -> dict:
    """Train and evaluate one method on a fresh copy of the base; writes run_dir/<method>/.

    The loop is the shared skeleton (training/loop.py), one unit per optimizer step: validation on the training
    lengths every `eval_every` steps, after the last and when `max_minutes_per_method` has run out; an early stop
    at `target_accuracy` from `min_steps` on; a checkpoint every `save_every` steps (`_save_trainable_checkpoint`).
    """
    from safetensors.torch import save_file

    method_dir = run_dir / method
    if resume and (method_dir / "results.json").is_file():
        return json.loads((method_dir / "results.json").read_text())
    task = get_nl_task(settings.task)
    base, tokenizer = load_base(base_source, settings.dtype, accelerator.device)
    if method == "fewshot":
        return _evaluate_untrained(settings, base, tokenizer, task, method_dir, accelerator.device)
    torch.manual_seed(settings.seed)
    model, params, info = build_method(method, settings, base, task.num_classes, tokenizer)
    model.to(accelerator.device)
    optimizer = torch.optim.AdamW(parameter_groups(method, model, settings), weight_decay=settings.weight_decay)
    scheduler = warmup_cosine_schedule(optimizer, settings.warmup_steps, settings.max_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    answer_ids = torch.tensor(answer_token_ids(task, tokenizer), device=accelerator.device)
    tokenization = check_sentence_tokenization(task, tokenizer)  # ValueError when a sentence end is inside a token
    pool = settings.train_examples or settings.max_steps * settings.batch_size
    train_data = NLStateTrackingDataset(
        task,
        tokenizer,
        pool,
        settings.train_min_transitions,
        settings.train_max_transitions,
        settings.seed,
        settings.distractor_prob,
        settings.train_max_preamble_sentences,
    )
    checkpoints = method_dir / "checkpoints"
    start, history = 0, []
    if resume and (found := latest_checkpoint(checkpoints)) is not None:
        unwrapped = accelerator.unwrap_model(model)
        meta = _load_trainable_checkpoint(found, unwrapped, optimizer, scheduler, accelerator.device)
        start, history = meta["step"], meta["history"]
    trainable = sum(p.numel() for p in params)
    unwrapped = accelerator.unwrap_model(model)
    if method in SSM_ADAPTER_METHODS and unwrapped.adapter_config.standardize_input:
        info["input_statistics_vectors"] = _fit_input_statistics(unwrapped, train_data, tokenizer, accelerator.device)
    prefix = store = None
    if method in CACHED_METHODS and settings.feature_cache != "off" and settings.train_examples:
        prefix = unwrapped if method == "probe" else FrozenPrefix(unwrapped)
        store = FeatureStore(
            int(settings.feature_cache_max_mb * 2**20),
            settings.feature_cache_dtype,
            path=method_dir / "feature_cache.bin" if settings.feature_cache == "disk" else None,
        )
    val_bucket = [(settings.train_min_transitions, settings.train_max_transitions)]
    clock = loop.Stopwatch()  # this call's time only: a resumed method counts from the resume
    last = {}  # the loss of the latest step

    def train_step(step: int) -> None:
        indices = [(step * settings.batch_size + i) % pool for i in range(settings.batch_size)]
        batch = collate_nl_state_tracking([train_data[i] for i in indices], tokenizer.pad_token_id)
        features = None if store is None else batch_features(prefix, store, indices, batch, accelerator.device)
        loss, _ = score_batch(
            method,
            model,
            batch,
            answer_ids,
            accelerator.device,
            dense=settings.supervision == "dense",
            vocab_loss=settings.answer_loss == "vocab",
            features=features,
        )
        loop.optimizer_step(accelerator, loss, optimizer, scheduler, params, settings.grad_clip)
        last["loss"] = loss.detach()

    def validation(step: int) -> dict:
        val = evaluate(method, model, task, tokenizer, val_bucket, settings, 10_000 + step, accelerator.device)
        loss = last["loss"].item()
        history.append({"step": step, "loss": loss, "val_accuracy": val["mean_accuracy"]})
        return {"loss": f"{loss:.3f}", "val": f"{val['mean_accuracy']:.3f}"}

    def reached_target(step: int) -> bool:
        return history[-1]["val_accuracy"] >= settings.target_accuracy and step >= settings.min_steps

    def out_of_time() -> bool:
        return bool(settings.max_minutes_per_method) and clock.seconds > 60 * settings.max_minutes_per_method

    def save(step: int) -> None:
        if accelerator.is_main_process:  # the trainable weights are the same in every process
            target = checkpoints / f"step_{step}"
            meta = {"step": step, "history": history}
            _save_trainable_checkpoint(target, accelerator.unwrap_model(model), optimizer, scheduler, meta)

    model.train()
    loop.run_training(
        accelerator, desc=f"{settings.task}/{method}", start=start, total=settings.max_steps,
        train_unit=train_step, evaluate=validation, eval_every=settings.eval_every, should_stop=reached_target,
        out_of_time=out_of_time, save=save, save_every=settings.save_every,
    )  # fmt: skip
    train_seconds = clock.seconds
    if store is not None and store.path is not None:
        store.path.unlink()  # a cache, not a result: it can be hundreds of MB
    steps_done = history[-1]["step"] if history else start

    eval_began = time.perf_counter()
    test = evaluate(
        method,
        model,
        task,
        tokenizer,
        settings.bucket_list(),
        settings,
        20_000,
        accelerator.device,
        progress=accelerator.is_local_main_process,
    )
    result = {
        "method": method,
        "readout": READOUT_OF_METHOD[method],
        "task": settings.task,
        "trainable_parameters": trainable,
        "steps": steps_done,
        "train_seconds": train_seconds,
        "eval_seconds": time.perf_counter() - eval_began,
        # CPU time of this process (all its threads) for training + evaluation; with OMP_NUM_THREADS=1 it is
        # what the method cost, whatever else shared the machine.
        "cpu_seconds": clock.cpu_seconds,
        "history": history,
        "test": test,
        "train_examples": pool,
        "tokenization_check": tokenization,
        "feature_cache": None
        if store is None
        else {
            "dtype": settings.feature_cache_dtype,
            "examples": len(store),
            "bytes": store.nbytes,
            "skipped": store.skipped,
        },
        **info,
        "settings": asdict(settings),
    }
    unwrapped = accelerator.unwrap_model(model)
    method_dir.mkdir(parents=True, exist_ok=True)
    if method in SSM_ADAPTER_METHODS:
        unwrapped.save_pretrained(method_dir / "adapter")
        if method == "ssm_lora":
            # The LoRA weights sit inside the base; PEFT's own state-dict helper extracts them.
            from peft import get_peft_model_state_dict

            lora_state = {k: v.contiguous() for k, v in get_peft_model_state_dict(unwrapped.base_model).items()}
            save_file(lora_state, str(method_dir / "adapter" / "lora_weights.safetensors"))
    elif method == "lora":
        unwrapped.save_pretrained(method_dir / "adapter")
    elif method == "lora_classifier":
        unwrapped.peft.save_pretrained(method_dir / "adapter")  # the LoRA weights and their PEFT config
        head = {f"head.{k}": v.contiguous() for k, v in unwrapped.head.state_dict().items()}
        save_file(head, str(method_dir / "classifier.safetensors"))
    else:
        save_file(
            {k: v.contiguous() for k, v in unwrapped.head.state_dict().items()}, str(method_dir / "probe.safetensors")
        )
    (method_dir / "results.json").write_text(json.dumps(result, indent=2))
    return result
