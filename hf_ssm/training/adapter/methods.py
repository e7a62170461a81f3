"""The frozen base of the adapter experiment and the methods trained on it: the SSM adapter, LoRA, the prefix-LoRA
classifier and the last-hidden-state probe (`build_method`), and their optimizer groups; and the next-token
pretraining of the built-in tiny base (hf_ssm.adapters.tiny_base) before an experiment on it
(`pretrain_language_model`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from torch import nn

from ...adapters.bases import NAMED_BASES
from ...adapters.bases import load_base as _load_base
from ...adapters.layer import SSMAdapter
from ...adapters.lora import ATTENTION_TARGETS, add_lora, lora_parameters_per_rank, lora_rank_for_budget
from ...adapters.model import attach_ssm_adapter, find_decoder_layers, run_to_layer
from ...adapters.tiny_base import build_tiny_qwen2, build_word_tokenizer
from ...data.nl_state_tracking import (
    NL_TASK_NAMES,
    get_nl_task,
    narrative_corpus,
    task_vocabulary,
)
from .. import loop
from ..optimization import warmup_cosine_schedule
from .experiment_settings import METHODS, SSM_ADAPTER_METHODS, TINY_BASE, AdapterExperimentSettings

# --- the base model ----------------------------------------------------------------------------------------


def prepare_base(settings: AdapterExperimentSettings, task, run_dir: Path, accelerator) -> tuple[str, dict]:
    """Where the base loads from, and how it was made. The tiny base is built and pretrained once into
    run_dir/base (reused by a resumed run); any other `base_model` is a hub id or local path. `task`: the run's
    natural-language task (its words join the tiny base's vocabulary)."""
    if settings.base_model in NAMED_BASES:
        named = NAMED_BASES[settings.base_model]
        info = {"base_model": settings.base_model, "description": named.description, "gguf_file": named.gguf_file}
        return settings.base_model, info
    if settings.base_model != TINY_BASE:
        return settings.base_model, {"base_model": settings.base_model}
    path = run_dir / "base"
    info_path = run_dir / "base_info.json"
    if (path / "config.json").is_file() and info_path.is_file():
        return str(path), json.loads(info_path.read_text())
    # The automata's words, and the task's own where it is another (so the automaton runs keep their vocabulary).
    tasks = [get_nl_task(name) for name in NL_TASK_NAMES]
    if settings.task not in NL_TASK_NAMES:
        tasks.append(task)
    tokenizer = build_word_tokenizer(task_vocabulary(tasks))
    longest = max(bucket[1] for bucket in settings.bucket_list())
    model = build_tiny_qwen2(
        len(tokenizer),
        hidden_size=settings.tiny_hidden_size,
        num_layers=settings.tiny_layers,
        num_heads=settings.tiny_heads,
        max_positions=32 * longest + 512,
        seed=settings.seed,
    )
    info = {
        "base_model": "tiny Qwen2 (built in)",
        "hidden_size": settings.tiny_hidden_size,
        "layers": settings.tiny_layers,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
    }
    if settings.pretrain_steps:
        # Narratives of every task and of every test length, but never a question or an answer.
        texts = narrative_corpus(
            tasks,
            settings.pretrain_steps * settings.pretrain_batch_size,
            1,
            longest,
            settings.seed + 7,
            group_size=settings.pretrain_batch_size,
        )
        info["pretraining"] = pretrain_language_model(
            model,
            tokenizer,
            texts,
            settings.pretrain_steps,
            accelerator,
            batch_size=settings.pretrain_batch_size,
            max_seconds=60 * settings.pretrain_max_minutes if settings.pretrain_max_minutes else None,
        )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    info_path.write_text(json.dumps(info, indent=2))
    return str(path), info


def load_base(source: str, dtype: str, device):
    """A fresh copy of the base (model in eval mode, left-padding tokenizer). The first call for a source loads it
    (`hf_ssm.adapters.bases.load_base`: named base, local path or hub id); later calls in this process copy it,
    so the methods of one run do not each pay the load (about 20 s to a minute for a GGUF base)."""
    key = (source, dtype, str(device))
    if key not in _LOADED_BASES:
        _LOADED_BASES.clear()  # one base at a time in memory
        _LOADED_BASES[key] = _load_base(source, dtype, device)
    model, tokenizer = _LOADED_BASES[key]
    return copy.deepcopy(model), copy.deepcopy(tokenizer)


_LOADED_BASES: dict = {}


# --- methods -----------------------------------------------------------------------------------------------


class LastHiddenStateProbe(nn.Module):
    """A linear classifier on the frozen base's last hidden state (after its final norm).

    forward(input_ids, attention_mask, position_ids, logits_to_keep (K,) positions) -> class logits (B, K, C).
    """

    def __init__(self, base: nn.Module, num_classes: int):
        super().__init__()
        self.base = base
        self.decoder = find_decoder_layers(base)[0]
        width = base.config.get_text_config().hidden_size
        self.head = nn.Linear(width, num_classes)
        base.requires_grad_(False)

    @torch.no_grad()
    def features(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        """The frozen base's last hidden state (B, T, d): what the probe reads (cacheable, see feature_cache)."""
        return self.decoder(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep):
        with torch.no_grad():
            hidden = self.decoder(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state[:, logits_to_keep]
        return self.head(hidden.float())


class PrefixLoRAClassifier(nn.Module):
    """LoRA on the attention projections of decoder layers 0..k, and a linear classifier on the normalised hidden
    state after layer k (k = `layer_index`): the LoRA baseline with the `ssm_classifier` method's readout, depth
    and trainable-parameter budget. The layers above k are never run.

    forward(input_ids, attention_mask, position_ids, logits_to_keep (K,) positions) -> class logits (B, K, C).
    """

    def __init__(self, base: nn.Module, layer_index: int, num_classes: int, rank: int):
        super().__init__()
        base.requires_grad_(False)
        layers = self.prefix_layers(base, layer_index)
        self.k = layers[-1]
        self.peft = add_lora(base, rank, ATTENTION_TARGETS, layers=layers)
        self.layers = find_decoder_layers(self.peft)[1]
        width = base.config.get_text_config().hidden_size
        self.norm = nn.RMSNorm(width, elementwise_affine=False)
        self.head = nn.Linear(width, num_classes)

    @staticmethod
    def prefix_layers(base: nn.Module, layer_index: int) -> range:
        """The decoder layers 0..k that get LoRA, k = `layer_index` (negative counts from the end)."""
        count = len(find_decoder_layers(base)[1])
        if not -count <= layer_index < count:
            raise ValueError(f"`layer_index` must be in [{-count}, {count - 1}] for this base, got {layer_index}")
        return range(layer_index % count + 1)

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        hidden = run_to_layer(self.peft, self.layers[self.k], **inputs)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        return self.head(self.norm(hidden[:, logits_to_keep].float()))


def build_method(method: str, settings: AdapterExperimentSettings, base, num_classes: int, tokenizer=None):
    """(model to train, its trainable parameters, extra info) for one method on a fresh copy of the base.
    `tokenizer` (the base's) resolves the SSM adapter's `transitions_at` (required unless "every_token")."""
    info = {}
    if method == "probe":
        model = LastHiddenStateProbe(base, num_classes)
    elif method == "lora":
        base.requires_grad_(False)
        # the budget is the adapter's parameter count, which its transition token ids do not change
        adapter = SSMAdapter(settings.adapter_config_for_ids(None), base.config.hidden_size)
        budget = sum(p.numel() for p in adapter.parameters() if p.requires_grad)
        rank = lora_rank_for_budget(base, budget)
        info = {"lora_rank": rank, "lora_parameters_per_rank": lora_parameters_per_rank(base)}
        model = add_lora(base, rank)
    elif method == "lora_classifier":
        config = settings.classifier_adapter_config(None, num_classes)
        adapter = SSMAdapter(config, base.config.get_text_config().hidden_size)
        budget = sum(p.numel() for p in adapter.parameters() if p.requires_grad)  # frozen D MLPs do not count
        layers = PrefixLoRAClassifier.prefix_layers(base, settings.layer_index)
        rank = lora_rank_for_budget(base, budget, ATTENTION_TARGETS, layers=layers)
        info = {
            "lora_rank": rank,
            "lora_parameters_per_rank": lora_parameters_per_rank(base, ATTENTION_TARGETS, layers),
        }
        model = PrefixLoRAClassifier(base, settings.layer_index, num_classes, rank)
    elif method == "ssm_classifier":
        config = settings.classifier_adapter_config(tokenizer, num_classes)
        model = attach_ssm_adapter(base, config)
    elif method == "ssm":
        model = attach_ssm_adapter(base, settings.lm_head_adapter_config(tokenizer, num_classes))
    elif method == "ssm_lora":
        model = attach_ssm_adapter(base, settings.adapter_config(tokenizer))
        rank = lora_rank_for_budget(base, sum(p.numel() for p in model.adapter_parameters()))
        info = {"lora_rank": rank}
        add_lora(model.base_model, rank)
    else:
        raise ValueError(f"unknown method {method!r}; accepted: {list(METHODS)}")
    params = [p for p in model.parameters() if p.requires_grad]
    return model, params, info


def parameter_groups(method: str, model, settings: AdapterExperimentSettings) -> list[dict]:
    """AdamW parameter groups of a method's trainable parameters: the LM-head adapter's write map (out_proj) at
    `write_learning_rate`, the SSM adapter's readout (classifier or out_proj) at `readout_learning_rate` and its
    PD-SSM transition choice (mixer.selection / mixer.transition_proj) at `selection_learning_rate` when they are
    set (a parameter in the first group that claims it), everything else at `learning_rate` (LoRA:
    `lora_learning_rate`)."""
    lr = settings.lora_learning_rate if method in ("lora", "lora_classifier") else settings.learning_rate
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if method not in SSM_ADAPTER_METHODS:
        return [{"params": [p for _, p in named], "lr": lr}]
    special = {
        "write_learning_rate": ("ssm_adapter.out_proj.",),
        "readout_learning_rate": ("ssm_adapter.classifier.", "ssm_adapter.out_proj."),
        "selection_learning_rate": ("ssm_adapter.mixer.selection.", "ssm_adapter.mixer.transition_proj."),
    }
    groups, taken = [], set()
    for option, prefixes in special.items():
        rate = getattr(settings, option)
        if not rate:
            continue
        params = [p for n, p in named if n.startswith(prefixes) and id(p) not in taken]
        if not params:
            raise ValueError(f"`{option}`: found none of {list(prefixes)} in {[n for n, _ in named]}")
        groups.append({"params": params, "lr": rate})
        taken |= {id(p) for p in params}
    return [{"params": [p for _, p in named if id(p) not in taken], "lr": lr}, *groups]


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
