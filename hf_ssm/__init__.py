"""hf_ssm: hybrid attention / structured state-space models for Hugging Face transformers.

Importing the package registers the config and models with the Auto classes, and marks them so that
`save_pretrained` writes the model's code (hf_ssm/modeling and the torch side of hf_ssm/ops, flattened by
hf_ssm/modeling/portable.py) next to the weights, loadable with `trust_remote_code=True` where hf_ssm is not
installed.
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
from .training.optimization import SublayerDelay, parameter_groups
from .version import __version__ as __version__

# Each model class, the Auto class its saved auto_map names (trust_remote_code), and whether that Auto class
# also builds it here from a HybridSSMConfig: no Auto class reads time-series input, so its checkpoints name it
# under AutoModelForSequenceClassification, where HybridSSMForSequenceClassification is registered.
_AUTO_CLASSES = (
    (HybridSSMModel, AutoModel, True),
    (HybridSSMForCausalLM, AutoModelForCausalLM, True),
    (HybridSSMForSequenceClassification, AutoModelForSequenceClassification, True),
    (HybridSSMForTokenClassification, AutoModelForTokenClassification, True),
    (HybridSSMForTimeSeriesClassification, AutoModelForSequenceClassification, False),
)

AutoConfig.register(HybridSSMConfig.model_type, HybridSSMConfig, exist_ok=True)
HybridSSMConfig.register_for_auto_class()
for _model_class, _auto_class, _local in _AUTO_CLASSES:
    if _local:
        _auto_class.register(HybridSSMConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)
del _model_class, _auto_class, _local

__all__ = [
    "HybridSSMConfig",
    "HybridSSMPreTrainedModel",
    "parameter_groups",
    "SublayerDelay",
    *(entry[0].__name__ for entry in _AUTO_CLASSES),
]
