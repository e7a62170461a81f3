"""What a causal-LM run writes besides its checkpoints: metrics.json, the loss curve, a greedy sample, and the
exported model folder (save_pretrained + tokenizer + model card)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch

from ...data.lm_corpus import corpus_fingerprint
from ..checkpointing import atomic_save_dir
from ..distributed import plain_class, process_layout
from ..reports import pyplot, save_figure


def default_prompt(settings, eval_data, tokenizer) -> str:
    """The prompt of the closing sample: --sample_prompt, a fixed opening for the built-in corpora, else the
    start of the first evaluation block."""
    if settings.sample_prompt is not None:
        return settings.sample_prompt
    if (settings.dataset or "").startswith("builtin") and not settings.train_files:
        return "Question: Mia has three apples." if settings.dataset.endswith("dialogues") else "Once upon a time,"
    ids = eval_data[0][0][:24].tolist() if len(eval_data[0]) else []
    return tokenizer.decode(ids, skip_special_tokens=True)


@torch.no_grad()
def greedy_sample(model, tokenizer, prompt: str, max_new_tokens: int) -> str:
    """`prompt` and its greedy continuation of `max_new_tokens` tokens, decoded."""
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


def closing_sample(settings, eval_data, tokenizer, model, accelerator) -> dict | None:
    """{"prompt", "text"} of the greedy sample written at the end of a run (main process; none under FSDP,
    whose sharded weights cannot generate on one process, or with sample_tokens = 0)."""
    if not settings.sample_tokens or accelerator.distributed_type == "FSDP" or not accelerator.is_main_process:
        return None
    prompt = default_prompt(settings, eval_data, tokenizer)
    text = greedy_sample(accelerator.unwrap_model(model), tokenizer, prompt, settings.sample_tokens)
    return {"prompt": prompt, "text": text}


def plot_loss_curve(metrics: dict, path: str | Path, title: str | None = None) -> None:
    """Training loss per step (and a moving average), evaluation loss, and the learning rate."""
    plt = pyplot()

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
    save_figure(fig, path, dpi=110)


def _count_parameters(model) -> tuple[int, int]:
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def run_metrics(kind, settings, state, accelerator, model_info: dict, extra: dict | None = None) -> dict:
    """metrics.json of a finished run (`state`: the loop's TrainState): settings, model, the process layout
    (distributed.process_layout), batch sizes, histories."""
    per_step = settings.batch_size * settings.gradient_accumulation_steps * accelerator.num_processes
    return {
        "kind": kind,
        "settings": asdict(settings),
        "dataset": settings.corpus_spec().describe(),
        "corpus": corpus_fingerprint(settings.corpus_spec()),
        "model": model_info,
        **process_layout(accelerator),  # num_processes, distributed_type, mixed_precision, device (+ FSDP settings)
        "global_batch_blocks": per_step,
        "global_batch_tokens": per_step * settings.block_size,
        "steps": state.step,
        "tokens_seen": state.blocks * settings.block_size,
        "train_seconds": state.train_seconds,
        "train_cpu_seconds": state.train_cpu_seconds,
        "resumed_from": state.resumed_from,
        "initial_eval": state.eval_history[0] if state.eval_history else None,
        "final_eval": state.eval_history[-1] if state.eval_history else None,
        "history": state.history,
        "eval_history": state.eval_history,
        **(extra or {}),
    }


def model_summary(config, model) -> dict:
    """Parameter counts and the config's main sizes (metrics.json's "model")."""
    total, trainable = _count_parameters(model)
    info = {"parameters": total, "trainable_parameters": trainable, "model_type": getattr(config, "model_type", None)}
    for key in ("mixers", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "max_position_embeddings"):  # fmt: skip
        if hasattr(config, key):
            info[key] = getattr(config, key)
    return info


def write_run_files(run_dir: Path, metrics: dict, accelerator) -> None:
    """metrics.json and loss_curve.png (main process)."""
    if accelerator.is_main_process:
        (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
        plot_loss_curve(metrics, run_dir / "loss_curve.png")


def save_model_dir(accelerator, model, tokenizer, target: Path, metrics: dict, card_kwargs: dict) -> None:
    """save_pretrained (safetensors + modeling code) + tokenizer + model card, atomically. Under FSDP the sharded
    weights are gathered into one state dict first (all processes), and the model is written under its own class
    (distributed.plain_class)."""
    from ...model_card import render_model_card

    state_dict = accelerator.get_state_dict(model)  # collective under FSDP
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)

        def write(tmp: Path) -> None:
            with plain_class(unwrapped) as plain:
                plain.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            (tmp / "README.md").write_text(render_model_card(unwrapped.config, metrics, **card_kwargs))

        atomic_save_dir(target, write)  # an exported model: no checkpoint marker
    accelerator.wait_for_everyone()
