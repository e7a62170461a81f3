"""Portable Hugging Face modeling code (copied next to checkpoints for trust_remote_code loading)."""

from .configuration_hybrid_ssm import PAPER_PD_SSM_LAYER, HybridSSMConfig
from .mixer_registry import MixerSpec, mixer_names, mixer_spec, register_mixer, unregister_mixer
from .modeling_hybrid_ssm import (
    SSM_MIXER_CLASSES,
    HybridSSMForCausalLM,
    HybridSSMForSequenceClassification,
    HybridSSMForTokenClassification,
    HybridSSMModel,
    HybridSSMPreTrainedModel,
)
from .modeling_timeseries import HybridSSMForTimeSeriesClassification

__all__ = [
    "PAPER_PD_SSM_LAYER",
    "SSM_MIXER_CLASSES",
    "HybridSSMConfig",
    "HybridSSMForCausalLM",
    "HybridSSMForSequenceClassification",
    "HybridSSMForTimeSeriesClassification",
    "HybridSSMForTokenClassification",
    "HybridSSMModel",
    "HybridSSMPreTrainedModel",
    "MixerSpec",
    "mixer_names",
    "mixer_spec",
    "register_mixer",
    "unregister_mixer",
]
