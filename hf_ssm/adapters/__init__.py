"""SSM adapters for frozen pretrained causal LMs (docs/design.md §10): attach, train, save, reload, generate."""

from .bases import NAMED_BASES, load_base, load_tokenizer, named_base_folder
from .config import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, SSMAdapterConfig
from .entity_tracking import EntityTrackingAdapter
from .layer import SSMAdapter
from .lora import add_lora, lora_rank_for_budget
from .model import SSMAdapterModel, attach_ssm_adapter, check_compatible, find_decoder_layers, load_ssm_adapter
from .transition_tokens import TRANSITION_POSITIONS, sentence_end_token_ids, transition_token_ids

__all__ = [
    "ADAPTER_CONFIG_NAME",
    "ADAPTER_WEIGHTS_NAME",
    "EntityTrackingAdapter",
    "NAMED_BASES",
    "SSMAdapter",
    "SSMAdapterConfig",
    "SSMAdapterModel",
    "TRANSITION_POSITIONS",
    "add_lora",
    "attach_ssm_adapter",
    "check_compatible",
    "find_decoder_layers",
    "load_base",
    "load_ssm_adapter",
    "load_tokenizer",
    "lora_rank_for_budget",
    "named_base_folder",
    "sentence_end_token_ids",
    "transition_token_ids",
]
