"""PEFT LoRA on the same base, as a baseline to the SSM adapter or trained alongside it.

`lora_rank_for_budget` picks the rank whose LoRA parameter count is closest to a given budget (e.g. the SSM
adapter's), so the two are compared at a similar number of trainable parameters.
"""

from __future__ import annotations

from torch import nn

from .model import find_decoder_layers

# The projections of Qwen2 / Llama / Mistral / Qwen3 decoder blocks.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_parameters_per_rank(model: nn.Module, target_modules=LORA_TARGETS) -> int:
    """LoRA parameters per unit of rank: sum of (in + out features) over the targeted Linear layers."""
    _, layers, _ = find_decoder_layers(model)
    total = 0
    for name, module in layers.named_modules():
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in target_modules:
            total += module.in_features + module.out_features
    if total == 0:
        raise ValueError(f"`target_modules` {list(target_modules)} match no nn.Linear in the decoder layers")
    return total


def lora_rank_for_budget(model: nn.Module, budget: int, target_modules=LORA_TARGETS) -> int:
    """The rank >= 1 whose LoRA parameter count is closest to `budget`."""
    return max(1, round(budget / lora_parameters_per_rank(model, target_modules)))


def add_lora(
    model: nn.Module, rank: int, target_modules=LORA_TARGETS, alpha: float | None = None, dropout: float = 0.0
):
    """Inject LoRA (rank `rank`, alpha default 2*rank) into `model` in place; returns the PeftModel.

    Only LoRA parameters train; parameters outside `model` (an SSM adapter hooked onto it) are left as they are.
    """
    from peft import LoraConfig, get_peft_model

    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"`rank` must be an int >= 1, got {rank!r}")
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank if alpha is None else alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


__all__ = ["LORA_TARGETS", "add_lora", "lora_parameters_per_rank", "lora_rank_for_budget"]
