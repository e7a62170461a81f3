"""hf_ssm: hybrid attention / structured state-space models for Hugging Face transformers.

Importing the package registers the config and models with the Auto classes, and marks them so that
`save_pretrained` copies the modeling code next to the weights (loadable with `trust_remote_code=True`
where hf_ssm is not installed).
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .modeling import (
    HybridSSMConfig,
    HybridSSMForCausalLM,
    HybridSSMForSequenceClassification,
    HybridSSMForTimeSeriesClassification,
    HybridSSMForTokenClassification,
    HybridSSMModel,
    HybridSSMPreTrainedModel,
)

__version__ = "0.1.0"

AutoConfig.register(HybridSSMConfig.model_type, HybridSSMConfig, exist_ok=True)
AutoModel.register(HybridSSMConfig, HybridSSMModel, exist_ok=True)
AutoModelForCausalLM.register(HybridSSMConfig, HybridSSMForCausalLM, exist_ok=True)
AutoModelForSequenceClassification.register(HybridSSMConfig, HybridSSMForSequenceClassification, exist_ok=True)
AutoModelForTokenClassification.register(HybridSSMConfig, HybridSSMForTokenClassification, exist_ok=True)

HybridSSMConfig.register_for_auto_class()
HybridSSMModel.register_for_auto_class("AutoModel")
HybridSSMForCausalLM.register_for_auto_class("AutoModelForCausalLM")
HybridSSMForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
HybridSSMForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
# No Auto class reads time-series input; its checkpoints name it under AutoModelForSequenceClassification.
HybridSSMForTimeSeriesClassification.register_for_auto_class("AutoModelForSequenceClassification")

__all__ = [
    "HybridSSMConfig",
    "HybridSSMForCausalLM",
    "HybridSSMForSequenceClassification",
    "HybridSSMForTimeSeriesClassification",
    "HybridSSMForTokenClassification",
    "HybridSSMModel",
    "HybridSSMPreTrainedModel",
]
