"""Causal-LM pretraining and fine-tuning with Accelerate (the library behind scripts/pretrain.py and finetune.py).

One loop serves both: packed fixed-length blocks (hf_ssm.data.lm_corpus), AdamW with linear warmup and cosine
decay, gradient clipping and accumulation, mixed precision where the device supports it, periodic evaluation
(loss, perplexity), crash-safe checkpoints and exact resume.

This module holds the loop's causal-LM parts (the token loss, the evaluation, one optimizer step) on the
skeleton every driver shares (hf_ssm.training.loop), and `pretrain`. The settings and the tokenizer / config /
data they build are in lm_settings, what a run writes (metrics, loss curve, sample, model card) in outputs, the
command-line pieces in training/cli.py.

Determinism / exact resume. Every optimizer step consumes `G = batch_size * gradient_accumulation_steps *
num_processes` blocks of the global block sequence: micro-batch a of process r reads blocks
[p + (a * W + r) * B, ... + B) where p is the data position (blocks consumed so far). The learning rate is a
function of the step number only. A checkpoint (`accelerator.save_state` plus metadata: step, data position,
reader state, loss history) therefore pins everything a later step depends on, and `resume=True` continues
with the same batches and the same learning rates: the resumed loss curve equals the uninterrupted one.

Loss. The loss of a step is the mean over all predicted tokens of the global batch (every micro-batch of every
process), computed as a sum divided by the global token count; gradients are scaled the same way, so
gradient accumulation and the number of processes do not change what a step computes.
"""

from __future__ import annotations

import math
import typing
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ...data.lm_corpus import IGNORE_INDEX, corpus_fingerprint, make_batch
from ..checkpointing import latest_checkpoint, read_metadata
from ..loop import Stopwatch, eval_mode, load_checkpoint, make_accelerator, open_run, run_training, save_checkpoint
from ..optimization import parameter_groups, warmup_cosine_factor
from .lm_settings import (
    RESUME_SAFE_SETTINGS,
    PretrainSettings,
    TrainSettings,
    build_config,
    load_tokenizer,
    open_block_sources,
)
from .outputs import closing_sample, model_summary, run_metrics, save_model_dir, write_run_files


def learning_rate_at(step: int, s: TrainSettings) -> float:
    """Linear warmup over `warmup_steps`, then cosine decay to `min_lr_ratio * learning_rate` at `max_steps`
    (optimization.warmup_cosine_factor)."""
    return s.learning_rate * warmup_cosine_factor(step, s.warmup_steps, s.max_steps, s.min_lr_ratio)


def _optimizer(model, settings) -> tuple[torch.optim.AdamW, list[float]]:
    """AdamW over hf_ssm.parameter_groups, and each group's rate as a multiple of the schedule's (a PD-SSM W_P's
    pd_ssm_transition_lr_scale), read here, before a resumed optimizer state overwrites the groups' rates."""
    groups = parameter_groups(model, settings.learning_rate, settings.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=settings.learning_rate, betas=(settings.adam_beta1, settings.adam_beta2))
    return optimizer, [group["lr"] / settings.learning_rate for group in optimizer.param_groups]


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of next-token cross-entropies, number of predicted tokens); labels == -100 are ignored."""
    targets = labels[:, 1:]
    loss = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )
    return loss, (targets != IGNORE_INDEX).sum()


def _forward(model, batch: dict, device) -> torch.Tensor:
    return model(
        input_ids=batch["input_ids"].to(device), position_ids=batch["position_ids"].to(device), use_cache=False
    ).logits


@torch.no_grad()
def evaluate(model, eval_data, settings, accelerator) -> dict:
    """Token-mean loss and perplexity over the evaluation blocks, split across processes.

    Every process runs the same number of forward passes (an FSDP model gathers its weights in each).
    """
    ids, starts = eval_data
    world, rank = accelerator.num_processes, accelerator.process_index
    mine = list(range(rank, len(ids), world))
    per_process = math.ceil(len(ids) / world) if len(ids) else 0
    batches = math.ceil(per_process / settings.batch_size) if per_process else 0
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    with eval_mode(model):  # the shared skeleton's eval mode only (training/loop.py says why)
        for b in range(batches):
            rows = mine[b * settings.batch_size : (b + 1) * settings.batch_size]
            batch = make_batch(ids[rows or [0]], starts[rows or [0]], settings.reset_at_boundaries)
            if not rows:  # this process has no block left: a dummy forward whose tokens do not count
                batch["labels"].fill_(IGNORE_INDEX)
            logits = _forward(model, batch, accelerator.device)
            loss, count = token_loss_sum(logits, batch["labels"].to(accelerator.device))
            total += torch.stack([loss.double(), count.double()])
    total = accelerator.reduce(total, "sum")
    loss_sum, count = float(total[0]), int(total[1])
    loss = loss_sum / count if count else float("nan")
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)) if count else float("nan"), "tokens": count}


@dataclass
class TrainState:
    step: int = 0
    blocks: int = 0  # data position: blocks of the global sequence consumed
    data: dict = field(default_factory=dict)  # reader state (streaming)
    history: list = field(default_factory=list)  # one entry per optimizer step
    eval_history: list = field(default_factory=list)
    train_seconds: float = 0.0
    # this process's CPU seconds of training, summed over resumes; None where a checkpoint written before they were
    # recorded was resumed (the total is then unknown, and stays so)
    train_cpu_seconds: float | None = 0.0
    resumed_from: list = field(default_factory=list)


def train_loop(
    model, tokenizer, train_source, eval_data, settings, run_dir: Path, accelerator, resume: bool, desc: str
):
    """Train `model` (already on the CPU, not yet prepared); returns (prepared model, TrainState)."""
    if settings.gradient_checkpointing:
        model.activation_checkpointing_enable()
    optimizer, multiples = _optimizer(model, settings)
    model, optimizer = accelerator.prepare(model, optimizer)
    device, world, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    B, A = settings.batch_size, settings.gradient_accumulation_steps
    per_step = B * A * world

    checkpoints = run_dir / "checkpoints"
    state = _resumed_state(checkpoints, train_source, accelerator, per_step, settings) if resume else TrainState()

    model.train()
    if state.step == 0 and not state.eval_history:
        state.eval_history.append({"step": 0, **evaluate(model, eval_data, settings, accelerator)})
    clock = Stopwatch(state.train_seconds, state.train_cpu_seconds or 0.0)

    def train_step(step: int) -> dict | None:
        lr = learning_rate_at(step, settings)
        for group, multiple in zip(optimizer.param_groups, multiples, strict=True):
            group["lr"] = lr * multiple
        micro = []
        for a in range(A):
            ids, starts = train_source.blocks(state.blocks + (a * world + rank) * B, B)
            micro.append(make_batch(ids, starts, settings.reset_at_boundaries))
        local_tokens = sum(int((m["labels"][:, 1:] != IGNORE_INDEX).sum()) for m in micro)
        global_tokens = accelerator.reduce(torch.tensor(float(local_tokens), device=device), "sum").item()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for a, batch in enumerate(micro):
            sync = a == A - 1
            with accelerator.no_sync(model) if not sync else nullcontext():
                loss, _ = token_loss_sum(_forward(model, batch, device), batch["labels"].to(device))
                # DDP / FSDP average gradients over processes: scale so the result is sum / global_tokens.
                accelerator.backward(loss * (world / max(global_tokens, 1.0)))
            loss_sum += loss.detach().double()
        grad_norm = None
        if settings.grad_clip > 0:
            grad_norm = float(accelerator.clip_grad_norm_(model.parameters(), settings.grad_clip))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.blocks += per_step
        train_source.advance_to(state.blocks)  # a streaming reader skips the other processes' blocks now
        step_loss = accelerator.reduce(loss_sum, "sum").item() / max(global_tokens, 1.0)
        state.train_seconds = clock.seconds
        if state.train_cpu_seconds is not None:
            state.train_cpu_seconds = clock.cpu_seconds
        state.history.append(
            {
                "step": state.step,
                "loss": step_loss,
                "lr": lr,
                "grad_norm": grad_norm,
                "tokens": state.blocks * settings.block_size,
                "seconds": round(state.train_seconds, 3),
                "cpu_seconds": None if state.train_cpu_seconds is None else round(state.train_cpu_seconds, 3),
            }
        )
        return {"loss": f"{step_loss:.3f}", "lr": f"{lr:.2e}"} if state.step % 10 == 0 else None

    def evaluation(step: int) -> dict:
        result = evaluate(model, eval_data, settings, accelerator)
        state.eval_history.append({"step": step, **result})
        loss = state.history[-1]["loss"]
        return {"loss": f"{loss:.3f}", "eval": f"{result['loss']:.3f}", "ppl": f"{result['perplexity']:.2f}"}

    def save(step: int) -> None:
        state.data = train_source.state()
        meta = _checkpoint_meta(state, per_step, world, settings)
        save_checkpoint(accelerator, checkpoints / f"step_{step}", meta, keep=settings.keep_checkpoints)

    run_training(
        accelerator, desc=desc, start=state.step, total=settings.max_steps, train_unit=train_step,
        evaluate=evaluation, eval_every=settings.eval_every, save=save, save_every=settings.save_every,
    )  # fmt: skip
    return model, state


def _checkpoint_meta(state: TrainState, per_step: int, world: int, settings) -> dict:
    """What a checkpoint records beside the accelerator state: the loop's state, the batch layout, the settings and
    the corpus fingerprint (a resume on another corpus is refused)."""
    meta = {**asdict(state), "blocks_per_step": per_step, "num_processes": world, "settings": asdict(settings)}
    return meta | {"corpus": corpus_fingerprint(settings.corpus_spec())}


def _resumed_state(checkpoints: Path, train_source, accelerator, per_step: int, settings) -> TrainState:
    """The TrainState of the latest complete checkpoint (its data position restored in `train_source`), or a
    fresh one where there is none. Raises ValueError when the checkpoint was trained on another built-in corpus
    (another Python's standard library) than `settings` reads."""
    corpus = corpus_fingerprint(settings.corpus_spec())
    found = latest_checkpoint(checkpoints)
    if found is None:
        accelerator.print(f"--resume: no complete checkpoint in {checkpoints}; starting from step 0")
        return TrainState()
    recorded = read_metadata(found).get("corpus")
    if recorded is not None and recorded != corpus:
        differ = sorted(k for k in set(recorded) | set(corpus or {}) if recorded.get(k) != (corpus or {}).get(k))
        raise ValueError(
            f"--resume: {found} was trained on another corpus than this run reads (they differ in {differ}: "
            f"{ {k: recorded.get(k) for k in differ} } -> { {k: (corpus or {}).get(k) for k in differ} }); "
            "resume with the Python whose standard library it trained on, or start a new run"
        )
    meta = load_checkpoint(accelerator, found)
    state = TrainState(**{k: meta[k] for k in asdict(TrainState()) if k in meta})
    if "train_cpu_seconds" not in meta:  # written before CPU seconds were recorded: the total is unknown
        state.train_cpu_seconds = None
    if meta.get("blocks_per_step") not in (None, per_step):
        accelerator.print(
            f"warning: the checkpoint took {meta['blocks_per_step']} blocks per step, this run takes "
            f"{per_step} (batch size / processes changed); data continues from block {state.blocks}"
        )
    train_source.load_state(state.data, state.blocks)
    state.resumed_from.append(state.step)
    accelerator.print(f"resumed from {found} (step {state.step}, data position {state.blocks} blocks)")
    return state


@dataclass
class Prepared:
    """What a run needs before training starts (built first so that bad arguments fail fast and clearly)."""

    tokenizer: typing.Any
    config: typing.Any
    train_source: typing.Any
    eval_data: tuple


def prepare_pretraining(settings: PretrainSettings, accelerator=None, validated: bool = False) -> Prepared:
    """Validate settings (unless the caller did: `validated`), build tokenizer and config, open the data. Raises
    ValueError with a clear message."""
    if not validated:
        settings.validate()
    tokenizer = load_tokenizer(settings.tokenizer, settings.trust_remote_code)
    config = build_config(settings, tokenizer)
    train_source, eval_data = open_block_sources(settings, tokenizer, accelerator)
    return Prepared(tokenizer, config, train_source, eval_data)


def pretrain(settings: PretrainSettings, run_dir, resume: bool = False, accelerator=None, prepared=None) -> dict:
    """Pretrain a hybrid model; writes run_dir/{settings.json, metrics.json, loss_curve.png, checkpoints/, model/}.

    Returns the metrics dict (also metrics.json). `model/` holds save_pretrained output (safetensors + the
    portable modeling code), the tokenizer and a model card (README.md).
    """
    from accelerate.utils import set_seed

    from ...modeling import HybridSSMForCausalLM

    accelerator = accelerator or make_accelerator(settings.mixed_precision)
    prepared = prepared or prepare_pretraining(settings, accelerator)
    run_dir = Path(run_dir)
    open_run(accelerator, settings, run_dir, resume, RESUME_SAFE_SETTINGS)
    if accelerator.is_main_process:
        (run_dir / "config.json").write_text(prepared.config.to_json_string())
    set_seed(settings.seed)
    model = HybridSSMForCausalLM(prepared.config)
    info = {
        "preset": settings.model_preset if settings.config is None else None,
        **model_summary(prepared.config, model),
    }
    model, state = train_loop(
        model, prepared.tokenizer, prepared.train_source, prepared.eval_data, settings, run_dir, accelerator, resume,
        desc=f"pretrain {settings.model_preset or Path(settings.config).name}",
    )  # fmt: skip
    extra = {"tokenizer": settings.tokenizer}
    if sample := closing_sample(settings, prepared.eval_data, prepared.tokenizer, model, accelerator):
        extra["sample"] = sample
    metrics = run_metrics("pretrain", settings, state, accelerator, info, extra)
    write_run_files(run_dir, metrics, accelerator)
    tokenizer = prepared.tokenizer
    if prepared.config.has_attention:
        tokenizer.model_max_length = prepared.config.max_position_embeddings
    name = settings.model_preset or Path(settings.config).stem
    save_model_dir(accelerator, model, tokenizer, run_dir / "model", metrics, {"model_name": f"hf-ssm-{name}"})
    return metrics
