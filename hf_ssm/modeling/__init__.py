"""Portable Hugging Face modeling code (copied next to checkpoints for trust_remote_code loading)."""

from .configuration_hybrid_ssm import HybridSSMConfig
from .modeling_hybrid_ssm import (
    SSM_MIXER_CLASSES,
    HybridSSMForCausalLM,
    HybridSSMModel,
    HybridSSMPreTrainedModel,
)

__all__ = [
    "SSM_MIXER_CLASSES",
    "HybridSSMConfig",
    "HybridSSMForCausalLM",
    "HybridSSMModel",
    "HybridSSMPreTrainedModel",
]
