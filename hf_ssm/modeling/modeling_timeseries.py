"""Time-series classification with the hybrid stack (LrcSSM / PD-SSM UEA setting, docs/design.md §6.7).

    past_values (B, T, C) -> Linear(C, d) -> HybridSSMModel(inputs_embeds) (B, T, d)
                          -> pool over real steps (B, d) -> Linear(d, num_labels)

The papers classify every step and average the per-step logits over time; with a linear classifier that is
the same as classifying the mean hidden state, which is what `classifier_pooling = "mean"` does here.

Portable like the rest of this folder: imports only torch, transformers and its own siblings.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import can_return_tuple

from .modeling_hybrid_ssm import HybridSSMModel, HybridSSMPreTrainedModel, _pool, sequence_classification_loss


class HybridSSMForTimeSeriesClassification(HybridSSMPreTrainedModel):
    """One label per multivariate series. Needs `config.input_channels` (C) and `config.num_labels`.

    Pools with `config.classifier_pooling` ("mean" over real steps as in the papers, or "last").
    Unequal lengths: right-pad `past_values` and pass `attention_mask` (B, T) with 1 at real steps; padded
    steps change no SSM state and are left out of the pooling.
    The loss is transformers' ForSequenceClassificationLoss (`config.problem_type`, as for
    HybridSSMForSequenceClassification). trust_remote_code loads it with AutoModelForSequenceClassification.
    """

    _auto_map_entries = {
        "AutoModelForSequenceClassification": "modeling_timeseries.HybridSSMForTimeSeriesClassification"
    }

    def __init__(self, config):
        super().__init__(config)
        if config.input_channels is None:
            raise ValueError("`input_channels` must be set in the config (the number of channels C of past_values)")
        self.num_labels = config.num_labels
        self.encoder = nn.Linear(config.input_channels, config.hidden_size, bias=True)
        self.model = HybridSSMModel(config)
        # Continuous input: the token table of HybridSSMModel is never used, so drop it (no dead weights in the
        # checkpoint, no unused parameters under DDP).
        self.model.embed_tokens = None
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=True)
        self.post_init()
        self.loss_type = "ForSequenceClassification"  # the class name names no transformers loss

    def get_input_embeddings(self):
        return self.encoder

    def set_input_embeddings(self, value):
        self.encoder = value

    def _check_inputs(self, past_values: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
        channels = self.config.input_channels
        if past_values.dim() != 3 or past_values.shape[-1] != channels:
            raise ValueError(
                f"`past_values` must have shape (batch, seq_len, {channels}) (config.input_channels), "
                f"got {tuple(past_values.shape)}"
            )
        if not past_values.is_floating_point():
            raise ValueError(f"`past_values` must be a floating-point tensor, got dtype {past_values.dtype}")
        # Missing values must be imputed (or refused) by the data pipeline, never reach the scans as NaN.
        if not bool(torch.isfinite(past_values).all()):
            raise ValueError(
                "`past_values` contains NaN or inf; impute missing values first (see hf_ssm.data.timeseries)"
            )
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(past_values.shape[:2]):
            raise ValueError(
                f"`attention_mask` must have shape (batch, seq_len) = {tuple(past_values.shape[:2])}, "
                f"got {tuple(attention_mask.shape)}"
            )

    @can_return_tuple
    def forward(
        self,
        past_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        """past_values (B, T, C) float; attention_mask (B, T) 1 = real step; labels (B,) class ids.

        Returns logits (B, num_labels) and, with labels, the loss (cross-entropy for class ids).
        """
        self._check_inputs(past_values, attention_mask)
        embeds = self.encoder(past_values.to(self.encoder.weight.dtype))
        outputs = self.model(
            inputs_embeds=embeds,
            attention_mask=attention_mask,
            use_cache=False,
            return_dict=True,
            **kwargs,
        )
        pooled = _pool(outputs.last_hidden_state, attention_mask, self.config.classifier_pooling)
        logits = self.score(pooled)
        return SequenceClassifierOutput(
            loss=sequence_classification_loss(self, labels, logits, **kwargs),
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


__all__ = ["HybridSSMForTimeSeriesClassification"]
