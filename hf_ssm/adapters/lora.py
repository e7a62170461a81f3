"""PEFT LoRA on the same base, as a baseline to the SSM adapter or trained alongside it.

`lora_rank_for_budget` picks the rank whose LoRA parameter count is closest to a given budget (e.g. the SSM
adapter's), so the two are compared at a similar number of trainable parameters.
"""

from __future__ import annotations

from torch import nn

from .model import find_decoder_layers

# The projections of Qwen2 / Llama / Mistral / Qwen3 decoder blocks.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# The attention projections only (the LoRA baseline the adapter is compared with).
ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _checked_layers(model: nn.Module, layers) -> list[int] | None:
    """`layers` (None = every decoder layer) as a sorted list of valid 0-based layer indices."""
    if layers is None:
        return None
    count = len(find_decoder_layers(model)[1])
    chosen = sorted(set(layers))
    if not chosen or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count for i in chosen):
        raise ValueError(f"`layers` must be decoder layer indices in [0, {count - 1}], got {list(layers)!r}")
    return chosen


def lora_parameters_per_rank(model: nn.Module, target_modules=LORA_TARGETS, layers=None) -> int:
    """LoRA parameters per unit of rank: sum of (in + out features) over the targeted Linear layers of the decoder
    layers `layers` (None: all)."""
    _, decoder_layers, _ = find_decoder_layers(model)
    chosen = _checked_layers(model, layers)
    total = 0
    for index, layer in enumerate(decoder_layers):
        if chosen is not None and index not in chosen:
            continue
        for name, module in layer.named_modules():
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in target_modules:
                total += module.in_features + module.out_features
    if total == 0:
        raise ValueError(f"`target_modules` {list(target_modules)} match no nn.Linear in the decoder layers")
    return total


def lora_rank_for_budget(model: nn.Module, budget: int, target_modules=LORA_TARGETS, layers=None) -> int:
    """The rank >= 1 whose LoRA parameter count is closest to `budget`."""
    return max(1, round(budget / lora_parameters_per_rank(model, target_modules, layers)))


def add_lora(
    model: nn.Module,
    rank: int,
    target_modules=LORA_TARGETS,
    alpha: float | None = None,
    dropout: float = 0.0,
    layers=None,
):
    """Inject LoRA (rank `rank`, alpha default 2*rank) into `model` in place; returns the PeftModel.

    `layers`: the decoder layer indices that get LoRA (None: all). Only LoRA parameters train; parameters outside
    `model` (an SSM adapter hooked onto it) are left as they are.
    """
    from peft import LoraConfig, get_peft_model

    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"`rank` must be an int >= 1, got {rank!r}")
    chosen = _checked_layers(model, layers)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank if alpha is None else alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
        layers_to_transform=chosen,
        layers_pattern=None if chosen is None else find_decoder_layers(model)[2].rsplit(".", 1)[-1],
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


__all__ = ["ATTENTION_TARGETS", "LORA_TARGETS", "add_lora", "lora_parameters_per_rank", "lora_rank_for_budget"]
