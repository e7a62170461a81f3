"""Causal-LM pretraining and fine-tuning with Accelerate (the library behind scripts/pretrain.py and finetune.py).

One loop serves both: packed fixed-length blocks (hf_ssm.data.lm_corpus), AdamW with linear warmup and cosine
decay, gradient clipping and accumulation, mixed precision where the device supports it, periodic evaluation
(loss, perplexity), crash-safe checkpoints and exact resume.

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

import argparse
import dataclasses
import json
import math
import os
import time
import typing
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data.lm_corpus import IGNORE_INDEX, CorpusSpec, build_block_sources, make_batch
from .checkpointing import (
    atomic_save_dir,
    check_resume,
    check_run_folder_arguments,
    latest_checkpoint,
    prune_checkpoints,
    read_metadata,
)
from .progress import training_progress

MIXED_PRECISION = ("auto", "no", "bf16", "fp16")
# Settings a resumed run may change (checkpointing.check_resume): they change neither the model, the data nor the
# learning rate of any step, only when it evaluates / checkpoints, what it keeps, and the sample written at the end
# (gradient checkpointing recomputes the same activations). Everything else must match the checkpoint's run.
RESUME_SAFE_SETTINGS = frozenset(
    {"eval_every", "save_every", "keep_checkpoints", "sample_prompt", "sample_tokens", "gradient_checkpointing"}
)


def _help(text: str, **kwargs):
    return field(metadata={"help": text}, **kwargs)


# --------------------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------------------


@dataclass
class DataSettings:
    dataset: str | None = _help(
        "`builtin` (generated stories, offline), `builtin:dialogues`, a Hub dataset name or a local dataset folder",
        default="builtin",
    )
    dataset_config: str | None = _help("the dataset's configuration name (Hub datasets)", default=None)
    train_files: list[str] = _help(
        "local .txt / .jsonl / .json / .parquet files (instead of --dataset)", default_factory=list
    )
    eval_files: list[str] = _help("local evaluation files (default: hold out --eval_documents)", default_factory=list)
    text_column: str = _help("the column holding the text (json / parquet / Hub data)", default="text")
    train_split: str = _help("training split of a Hub / folder dataset", default="train")
    eval_split: str | None = _help("evaluation split (default: validation or test when present)", default=None)
    text_sample_by: str = _help(
        "for .txt files: one document per line, paragraph or document (file)", default="paragraph"
    )
    streaming: bool = _help("read the training data lazily (large corpora); exact resume still holds", default=False)
    builtin_documents: int = _help("number of generated training documents (built-in corpus)", default=4000)
    eval_documents: int = _help(
        "documents for evaluation (held out from training when there is no eval split)", default=200
    )
    block_size: int = _help("tokens per packed training block", default=128)
    reset_at_boundaries: bool = _help(
        "restart position_ids (so every SSM state, and attention) at each document inside a block", default=True
    )
    eval_blocks: int = _help("most blocks used for evaluation", default=64)

    def corpus_spec(self) -> CorpusSpec:
        names = {f.name for f in dataclasses.fields(CorpusSpec)}
        return CorpusSpec(**{k: v for k, v in asdict(self).items() if k in names})


@dataclass
class TrainSettings:
    batch_size: int = _help("blocks per micro-batch and process", default=8)
    gradient_accumulation_steps: int = _help("micro-batches per optimizer step", default=1)
    max_steps: int = _help("optimizer steps", default=300)
    learning_rate: float = _help("peak learning rate", default=3e-3)
    min_lr_ratio: float = _help("final learning rate / peak (cosine decay)", default=0.1)
    warmup_steps: int = _help("linear warmup steps", default=30)
    weight_decay: float = _help("AdamW weight decay (matrices only; not norms, biases, gains)", default=0.1)
    adam_beta1: float = _help("AdamW beta1", default=0.9)
    adam_beta2: float = _help("AdamW beta2", default=0.95)
    grad_clip: float = _help("clip the global gradient norm to this (0 = off)", default=1.0)
    mixed_precision: str = _help(
        "auto (bf16 on GPUs that support it, else what `accelerate launch` sets, else fp32), no, bf16, fp16",
        default="auto",
    )
    gradient_checkpointing: bool = _help("recompute activations in the backward pass (saves memory)", default=False)
    eval_every: int = _help("evaluate every N steps (and at the start and the end); 0 = start and end only", default=50)
    save_every: int = _help("checkpoint (accelerator.save_state) every N steps; 0 = never", default=100)
    keep_checkpoints: int = _help("keep the newest N checkpoints", default=2)
    seed: int = _help("seed of the model init and the data order", default=0)
    sample_prompt: str | None = _help(
        "prompt of the greedy sample written at the end (default: from the data)", default=None
    )
    sample_tokens: int = _help("tokens generated for the final sample (0 = none)", default=160)


@dataclass
class PretrainSettings(DataSettings, TrainSettings):
    preset: str | None = _help("model preset, <family>-<size> (see --list_presets)", default="hybrid-pd_ssm-tiny")
    config: str | None = _help("HybridSSMConfig JSON file (instead of --preset)", default=None)
    override: dict = _help(
        "config fields to change, KEY=VALUE (JSON values), e.g. hidden_size=256", default_factory=dict
    )
    tokenizer: str = _help(
        "`byte` (built-in byte-level tokenizer, no files) or any AutoTokenizer name / path", default="byte"
    )
    trust_remote_code: bool = _help("allow tokenizer code shipped with the tokenizer (AutoTokenizer)", default=False)

    def validate(self) -> None:
        _validate_common(self)
        if self.config is None and self.preset is None:
            raise ValueError("pass --preset or --config")
        if self.config is not None and not Path(self.config).is_file():
            raise ValueError(f"--config: file not found: {self.config}")
        if self.config is None:
            from ..presets import get_preset

            get_preset(self.preset)
        from ..modeling.configuration_hybrid_ssm import check_config_keys

        check_config_keys(self.override, "--override")  # a misspelt key would otherwise be an ignored extra


def _validate_common(s) -> None:
    for name in ("batch_size", "gradient_accumulation_steps", "max_steps", "keep_checkpoints"):
        if getattr(s, name) < 1:
            raise ValueError(f"`{name}` must be >= 1, got {getattr(s, name)}")
    for name in ("warmup_steps", "eval_every", "save_every", "eval_blocks", "sample_tokens"):
        if getattr(s, name) < 0:
            raise ValueError(f"`{name}` must be >= 0, got {getattr(s, name)}")
    if not s.learning_rate > 0:
        raise ValueError(f"`learning_rate` must be > 0, got {s.learning_rate}")
    if not 0 <= s.min_lr_ratio <= 1:
        raise ValueError(f"`min_lr_ratio` must be in [0, 1], got {s.min_lr_ratio}")
    if s.mixed_precision not in MIXED_PRECISION:
        raise ValueError(f"`mixed_precision` must be one of {list(MIXED_PRECISION)}, got {s.mixed_precision!r}")
    if s.block_size < 2:
        raise ValueError(f"`block_size` must be >= 2, got {s.block_size}")
    s.corpus_spec().validate()


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def _parse_override(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--override expects KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a bare string, e.g. mixers=SASA
    return out


def add_settings_arguments(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    """One --option per dataclass field of `cls` (help from the field metadata, default from the field)."""
    hints = typing.get_type_hints(cls)
    defaults = cls()
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        hint, default = hints[f.name], getattr(defaults, f.name)
        text = f.metadata.get("help", "")
        shown = f" (default: {default})" if default not in (None, [], {}) else ""
        if hint is bool:
            parser.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, default=default, help=text)
        elif f.name == "override":
            parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE", help=text)
        elif typing.get_origin(hint) is list:
            parser.add_argument(f"--{f.name}", nargs="+", default=list(default), help=text)
        else:
            base = next((t for t in typing.get_args(hint) if t is not type(None)), hint)
            parser.add_argument(f"--{f.name}", type=base, default=default, help=text + shown)


def settings_from_args(cls, args: argparse.Namespace):
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    if "override" in values:
        values["override"] = _parse_override(values["override"])
    return cls(**values)


# --------------------------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------------------------


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    """`byte` -> the built-in ByteTokenizer; a folder saved with it -> ByteTokenizer (no remote code needed);
    anything else -> AutoTokenizer."""
    from ..tokenization import ByteTokenizer

    if name_or_path == "byte":
        return ByteTokenizer()
    config = Path(name_or_path) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") == "ByteTokenizer":
        return ByteTokenizer.from_pretrained(name_or_path)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except Exception as err:  # OSError, ValueError, ... from a missing / unreadable tokenizer
        raise ValueError(f"could not load tokenizer {name_or_path!r}: {err}") from err


def build_config(settings: PretrainSettings, tokenizer):
    """The HybridSSMConfig of a pretraining run: preset or JSON, overrides, vocabulary from the tokenizer."""
    from ..modeling import HybridSSMConfig
    from ..modeling.configuration_hybrid_ssm import check_config_keys
    from ..presets import get_preset

    if settings.config is not None:
        fields = json.loads(Path(settings.config).read_text())
        model_type = fields.pop("model_type", HybridSSMConfig.model_type)
        if model_type != HybridSSMConfig.model_type:
            raise ValueError(f"--config: model_type {model_type!r} is not {HybridSSMConfig.model_type!r}")
        for key in ("architectures", "auto_map", "transformers_version", "dtype", "torch_dtype", "layer_types"):
            fields.pop(key, None)
        check_config_keys(fields, f"--config {settings.config}")
    else:
        fields = get_preset(settings.preset)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else getattr(tokenizer, "sep_token_id", None)
    if eos is None:
        raise ValueError("the tokenizer has no eos_token (needed between packed documents)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    fields.update(vocab_size=len(tokenizer), eos_token_id=eos, pad_token_id=pad, bos_token_id=tokenizer.bos_token_id)
    fields.update(settings.override)
    config = HybridSSMConfig(**fields)
    if config.vocab_size < len(tokenizer):
        raise ValueError(f"vocab_size {config.vocab_size} is smaller than the tokenizer ({len(tokenizer)} tokens)")
    check_block_size(settings.block_size, config)
    return config


def check_block_size(block_size: int, config) -> None:
    """ValueError when the blocks are longer than the model accepts (attention layers: max_position_embeddings)."""
    limit = getattr(config, "max_position_embeddings", None)
    has_attention = getattr(config, "has_attention", True)  # any non-hybrid model is limited by its positions
    if limit is not None and has_attention and block_size > limit:
        raise ValueError(
            f"--block_size {block_size} is above the model's limit: max_position_embeddings = {limit}; "
            f"use --block_size <= {limit} (or, for a new model, --override max_position_embeddings={block_size})"
        )


def make_accelerator(mixed_precision: str = "auto"):
    from accelerate import Accelerator

    if mixed_precision == "auto":
        if "ACCELERATE_MIXED_PRECISION" in os.environ:
            mixed_precision = None  # what `accelerate launch` / its config file chose
        elif torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            mixed_precision = "bf16"
        else:
            mixed_precision = "no"
    # Without CUDA, cpu=True is what makes several launched processes (WORLD_SIZE > 1) join as MULTI_CPU (gloo);
    # with cpu=False accelerate would run each of them alone.
    return Accelerator(mixed_precision=mixed_precision, cpu=not torch.cuda.is_available())


def print_eval_summary(metrics: dict) -> None:
    """The closing lines of a training script: eval loss and perplexity before -> after, and the sample."""
    first, final = metrics["initial_eval"], metrics["final_eval"]
    print(
        f"eval loss {first['loss']:.4f} -> {final['loss']:.4f}; "
        f"perplexity {first['perplexity']:.2f} -> {final['perplexity']:.2f}"
    )
    if "sample" in metrics:
        print(f"sample: {metrics['sample']['text']!r}")


def add_run_folder_arguments(parser, default_output: str) -> None:
    """--output_dir, --resume and --cpu_threads, the run-folder arguments of the training scripts."""
    parser.add_argument("--output_dir", default=None, help=f"run folder (default {default_output})")
    parser.add_argument("--resume", action="store_true", help="continue from the run folder's latest checkpoint")
    parser.add_argument(
        "--cpu_threads",
        type=int,
        default=0,
        help="torch threads per process on a CPU; 0 = OMP_NUM_THREADS if set, else 1 (add processes for more cores)",
    )


def configure_cpu_threads(threads: int = 0) -> int:
    """Set torch's intra-op threads for a CPU run and return the number used (no-op with a GPU: returns 0).

    0 means: OMP_NUM_THREADS when set, else 1. One thread per process is what `accelerate launch` gives each CPU
    process, the fastest setting for tiny models, and far faster on a shared machine, where OpenMP threads that
    wait for busy cores make every step several times slower. Use more processes (scripts/configs/cpu_ddp.yaml) or
    a larger value here for bigger models on an idle many-core CPU.
    """
    if torch.cuda.is_available():
        return 0
    if threads < 0:
        raise ValueError(f"--cpu_threads must be >= 0, got {threads}")
    threads = threads or int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    torch.set_num_threads(threads)
    return threads


def learning_rate_at(step: int, s: TrainSettings) -> float:
    """Linear warmup over `warmup_steps`, then cosine decay to `min_lr_ratio * learning_rate` at `max_steps`."""
    if step < s.warmup_steps:
        return s.learning_rate * (step + 1) / s.warmup_steps
    progress = min(1.0, (step - s.warmup_steps) / max(1, s.max_steps - s.warmup_steps))
    return s.learning_rate * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


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
    was_training = model.training
    model.eval()
    for b in range(batches):
        rows = mine[b * settings.batch_size : (b + 1) * settings.batch_size]
        batch = make_batch(ids[rows or [0]], starts[rows or [0]], settings.reset_at_boundaries)
        if not rows:  # this process has no block left: a dummy forward whose tokens do not count
            batch["labels"].fill_(IGNORE_INDEX)
        loss, count = token_loss_sum(_forward(model, batch, accelerator.device), batch["labels"].to(accelerator.device))
        total += torch.stack([loss.double(), count.double()])
    model.train(was_training)
    total = accelerator.reduce(total, "sum")
    loss_sum, count = float(total[0]), int(total[1])
    loss = loss_sum / count if count else float("nan")
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)) if count else float("nan"), "tokens": count}


def _save_checkpoint(accelerator, target: Path, metadata: dict) -> None:
    """Collective crash-safe save: every process writes its part of accelerator.save_state into the main
    process's temporary folder, which is then renamed into place (see checkpointing.atomic_save_dir)."""
    from accelerate.utils import broadcast_object_list

    if accelerator.is_main_process:

        def write(tmp: Path) -> None:
            broadcast_object_list([str(tmp)])
            accelerator.save_state(str(tmp))
            accelerator.wait_for_everyone()

        atomic_save_dir(target, write, metadata)
    else:
        holder = [None]
        broadcast_object_list(holder)
        accelerator.save_state(holder[0])
        accelerator.wait_for_everyone()
    accelerator.wait_for_everyone()  # nobody goes on before the folder has its final name


@dataclass
class TrainState:
    step: int = 0
    blocks: int = 0  # data position: blocks of the global sequence consumed
    data: dict = field(default_factory=dict)  # reader state (streaming)
    history: list = field(default_factory=list)  # one entry per optimizer step
    eval_history: list = field(default_factory=list)
    train_seconds: float = 0.0
    resumed_from: list = field(default_factory=list)


def train_loop(
    model, tokenizer, train_source, eval_data, settings, run_dir: Path, accelerator, resume: bool, desc: str
):
    """Train `model` (already on the CPU, not yet prepared); returns (prepared model, TrainState)."""
    if settings.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(
        _param_groups(model, settings.weight_decay),
        lr=settings.learning_rate,
        betas=(settings.adam_beta1, settings.adam_beta2),
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    device, world, rank = accelerator.device, accelerator.num_processes, accelerator.process_index
    B, A = settings.batch_size, settings.gradient_accumulation_steps
    per_step = B * A * world

    checkpoints = run_dir / "checkpoints"
    state = TrainState()
    if resume:
        found = latest_checkpoint(checkpoints)
        if found is None:
            accelerator.print(f"--resume: no complete checkpoint in {checkpoints}; starting from step 0")
        else:
            accelerator.load_state(str(found))
            meta = read_metadata(found)
            state = TrainState(**{k: meta[k] for k in asdict(TrainState()) if k in meta})
            if meta.get("blocks_per_step") not in (None, per_step):
                accelerator.print(
                    f"warning: the checkpoint took {meta['blocks_per_step']} blocks per step, this run takes "
                    f"{per_step} (batch size / processes changed); data continues from block {state.blocks}"
                )
            train_source.load_state(state.data, state.blocks)
            state.resumed_from.append(state.step)
            accelerator.print(f"resumed from {found} (step {state.step}, data position {state.blocks} blocks)")

    model.train()
    if state.step == 0 and not state.eval_history:
        state.eval_history.append({"step": 0, **evaluate(model, eval_data, settings, accelerator)})
    progress = training_progress(accelerator, desc, settings.max_steps, state.step)
    began = time.perf_counter() - state.train_seconds
    while state.step < settings.max_steps:
        lr = learning_rate_at(state.step, settings)
        for group in optimizer.param_groups:
            group["lr"] = lr
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
        state.train_seconds = time.perf_counter() - began
        state.history.append(
            {
                "step": state.step,
                "loss": step_loss,
                "lr": lr,
                "grad_norm": grad_norm,
                "tokens": state.blocks * settings.block_size,
                "seconds": round(state.train_seconds, 3),
            }
        )
        progress.update(1)
        if settings.eval_every and state.step % settings.eval_every == 0 or state.step == settings.max_steps:
            result = evaluate(model, eval_data, settings, accelerator)
            state.eval_history.append({"step": state.step, **result})
            progress.set_postfix(
                loss=f"{step_loss:.3f}", eval=f"{result['loss']:.3f}", ppl=f"{result['perplexity']:.2f}"
            )
        elif state.step % 10 == 0:
            progress.set_postfix(loss=f"{step_loss:.3f}", lr=f"{lr:.2e}")
        if settings.save_every and state.step % settings.save_every == 0 and state.step < settings.max_steps:
            state.data = train_source.state()
            meta = {**asdict(state), "blocks_per_step": per_step, "num_processes": world, "settings": asdict(settings)}
            _save_checkpoint(accelerator, checkpoints / f"step_{state.step}", meta)
            if accelerator.is_main_process:
                prune_checkpoints(checkpoints, keep=settings.keep_checkpoints)
    progress.close()
    return model, state


def _default_prompt(settings, eval_data, tokenizer) -> str:
    if settings.sample_prompt is not None:
        return settings.sample_prompt
    if (settings.dataset or "").startswith("builtin") and not settings.train_files:
        return "Question: Mia has three apples." if settings.dataset.endswith("dialogues") else "Once upon a time,"
    ids = eval_data[0][0][:24].tolist() if len(eval_data[0]) else []
    return tokenizer.decode(ids, skip_special_tokens=True)


@torch.no_grad()
def greedy_sample(model, tokenizer, prompt: str, max_new_tokens: int) -> str:
    device = next(model.parameters()).device
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"].to(device)
    was_training = model.training
    model.eval()
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    model.train(was_training)
    return tokenizer.decode(out[0], skip_special_tokens=True)


def plot_loss_curve(metrics: dict, path: str | Path, title: str | None = None) -> None:
    """Training loss per step (and a moving average), evaluation loss, and the learning rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in metrics["history"]]
    losses = [h["loss"] for h in metrics["history"]]
    window = max(1, len(losses) // 30)
    smooth = [
        sum(losses[max(0, i - window + 1) : i + 1]) / len(losses[max(0, i - window + 1) : i + 1])
        for i in range(len(losses))
    ]
    fig, (ax, ax_lr) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot(steps, losses, color="tab:blue", alpha=0.3, lw=0.8, label="train loss (step)")
    ax.plot(steps, smooth, color="tab:blue", lw=1.6, label=f"train loss (mean of {window})")
    ev = metrics["eval_history"]
    ax.plot([e["step"] for e in ev], [e["loss"] for e in ev], "o-", color="tab:red", label="eval loss")
    final = ev[-1]
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title(title or f"final eval loss {final['loss']:.3f}, perplexity {final['perplexity']:.2f}")
    ax.legend()
    ax.grid(alpha=0.3)
    ax_lr.plot(steps, [h["lr"] for h in metrics["history"]], color="tab:green")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _count_parameters(model) -> tuple[int, int]:
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def _metrics(kind, settings, state: TrainState, accelerator, model_info: dict, extra: dict | None = None) -> dict:
    per_step = settings.batch_size * settings.gradient_accumulation_steps * accelerator.num_processes
    return {
        "kind": kind,
        "settings": asdict(settings),
        "dataset": settings.corpus_spec().describe(),
        "model": model_info,
        "num_processes": accelerator.num_processes,
        "mixed_precision": accelerator.mixed_precision,
        "device": str(accelerator.device),
        "global_batch_blocks": per_step,
        "global_batch_tokens": per_step * settings.block_size,
        "steps": state.step,
        "tokens_seen": state.blocks * settings.block_size,
        "train_seconds": state.train_seconds,
        "resumed_from": state.resumed_from,
        "initial_eval": state.eval_history[0] if state.eval_history else None,
        "final_eval": state.eval_history[-1] if state.eval_history else None,
        "history": state.history,
        "eval_history": state.eval_history,
        **(extra or {}),
    }


def model_summary(config, model) -> dict:
    total, trainable = _count_parameters(model)
    info = {"parameters": total, "trainable_parameters": trainable, "model_type": getattr(config, "model_type", None)}
    for key in ("mixers", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "max_position_embeddings"):  # fmt: skip
        if hasattr(config, key):
            info[key] = getattr(config, key)
    return info


def _write_run_files(run_dir: Path, metrics: dict, accelerator) -> None:
    if accelerator.is_main_process:
        (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
        plot_loss_curve(metrics, run_dir / "loss_curve.png")


def _save_model_dir(accelerator, model, tokenizer, target: Path, metrics: dict, card_kwargs: dict) -> None:
    """save_pretrained (safetensors + modeling code) + tokenizer + model card, atomically."""
    from ..model_card import render_model_card

    state_dict = accelerator.get_state_dict(model)  # collective under FSDP
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)

        def write(tmp: Path) -> None:
            unwrapped.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            (tmp / "README.md").write_text(render_model_card(unwrapped.config, metrics, **card_kwargs))

        atomic_save_dir(target, write)  # an exported model: no checkpoint marker
    accelerator.wait_for_everyone()


# --------------------------------------------------------------------------------------------------------------
# Pretraining
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    """What a run needs before training starts (built first so that bad arguments fail fast and clearly)."""

    tokenizer: typing.Any
    config: typing.Any
    train_source: typing.Any
    eval_data: tuple


def prepare_pretraining(settings: PretrainSettings, accelerator=None) -> Prepared:
    """Validate settings, build tokenizer and config, open the data. Raises ValueError with a clear message."""
    settings.validate()
    tokenizer = load_tokenizer(settings.tokenizer, settings.trust_remote_code)
    config = build_config(settings, tokenizer)
    train_source, eval_data = open_block_sources(settings, tokenizer, accelerator)
    return Prepared(tokenizer, config, train_source, eval_data)


def open_block_sources(settings, tokenizer, accelerator=None):
    """(train source, eval blocks) of the settings' corpus; the main process reads (and caches) it first.

    Raises ValueError when the evaluation data holds no complete block."""
    context = accelerator.main_process_first() if accelerator is not None else nullcontext()
    with context:
        train_source, eval_data = build_block_sources(
            settings.corpus_spec(), tokenizer, settings.block_size, settings.eval_blocks
        )
    if len(eval_data[0]) == 0:
        raise ValueError("the evaluation data yields no complete block: add eval data or lower --block_size")
    return train_source, eval_data


def pretrain(settings: PretrainSettings, run_dir, resume: bool = False, accelerator=None, prepared=None) -> dict:
    """Pretrain a hybrid model; writes run_dir/{settings.json, metrics.json, loss_curve.png, checkpoints/, model/}.

    Returns the metrics dict (also metrics.json). `model/` holds save_pretrained output (safetensors + the
    portable modeling code), the tokenizer and a model card (README.md).
    """
    from accelerate.utils import set_seed

    from ..modeling import HybridSSMForCausalLM

    accelerator = accelerator or make_accelerator(settings.mixed_precision)
    prepared = prepared or prepare_pretraining(settings, accelerator)
    run_dir = Path(run_dir)
    if resume:
        check_resume(settings, run_dir, RESUME_SAFE_SETTINGS)  # before settings.json is rewritten
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "settings.json").write_text(json.dumps(asdict(settings), indent=2))
        (run_dir / "config.json").write_text(prepared.config.to_json_string())
    accelerator.wait_for_everyone()
    set_seed(settings.seed)
    model = HybridSSMForCausalLM(prepared.config)
    info = {"preset": settings.preset if settings.config is None else None, **model_summary(prepared.config, model)}
    model, state = train_loop(
        model, prepared.tokenizer, prepared.train_source, prepared.eval_data, settings, run_dir, accelerator, resume,
        desc=f"pretrain {settings.preset or Path(settings.config).name}",
    )  # fmt: skip
    extra = {"tokenizer": settings.tokenizer}
    if settings.sample_tokens and accelerator.distributed_type != "FSDP" and accelerator.is_main_process:
        prompt = _default_prompt(settings, prepared.eval_data, prepared.tokenizer)
        text = greedy_sample(accelerator.unwrap_model(model), prepared.tokenizer, prompt, settings.sample_tokens)
        extra["sample"] = {"prompt": prompt, "text": text}
    metrics = _metrics("pretrain", settings, state, accelerator, info, extra)
    _write_run_files(run_dir, metrics, accelerator)
    tokenizer = prepared.tokenizer
    if prepared.config.has_attention:
        tokenizer.model_max_length = prepared.config.max_position_embeddings
    name = settings.preset or Path(settings.config).stem
    _save_model_dir(accelerator, model, tokenizer, run_dir / "model", metrics, {"model_name": f"hf-ssm-{name}"})
    return metrics


__all__ = [
    "RESUME_SAFE_SETTINGS",
    "DataSettings",
    "PretrainSettings",
    "TrainSettings",
    "add_settings_arguments",
    "build_config",
    "check_block_size",
    "check_run_folder_arguments",
    "configure_cpu_threads",
    "evaluate",
    "learning_rate_at",
    "load_tokenizer",
    "make_accelerator",
    "plot_loss_curve",
    "prepare_pretraining",
    "pretrain",
    "settings_from_args",
    "token_loss_sum",
    "train_loop",
]
