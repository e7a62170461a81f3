"""Hybrid decoder: pre-norm residual blocks whose mixer is attention or a structured SSM (DESIGN §7).

    x = x + Mixer(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x))

Inference cache: transformers' `DynamicCache(config=...)` reads `config.layer_types`; attention layers get a
key/value layer, SSM layers a recurrent-state layer that holds one tensor of fixed size (never growing with T).

This folder is copied next to saved weights (trust_remote_code), so it imports only torch, transformers and
its own siblings.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, LinearAttentionCacheLayerMixin
from transformers.generation import GenerationMixin
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.modeling_utils import PreTrainedModel

from .attention import HybridSSMAttention, HybridSSMMLP, HybridSSMRMSNorm, HybridSSMRotaryEmbedding
from .configuration_hybrid_ssm import ATTENTION, HybridSSMConfig
from .mixer_lrc import LRC_MIXER_CLASSES, DiagonalRNNMixer
from .mixer_lru import BlockDiagonalLRUMixer, DiagonalLRUMixer, HigherOrderLRUMixer
from .mixer_pd_ssm import HeadwiseMLP, PDSSMMixer
from .packing import PackedDocuments

# Mixer name -> class. Every SSM mixer takes (config, layer_idx) and implements
#   forward(hidden_states (B, T, d), state=None, mask=None) -> (output (B, T, d), final_state)
# where `state` is the mixer's own fixed-size recurrent state (None = the mixer's initial state, zeros unless its
# config says otherwise) and `mask` (B, T) bool
# marks real tokens; padding must leave the state unchanged.
SSM_MIXER_CLASSES: dict[str, type[nn.Module]] = {
    "pd_ssm": PDSSMMixer,
    **LRC_MIXER_CLASSES,  # lrc_ssm, gru_ssm, mgu_ssm, lstm_ssm
    "bd_lru": BlockDiagonalLRUMixer,
    "h_lru": HigherOrderLRUMixer,
    "diag_lru": DiagonalLRUMixer,  # BD-LRU with m = 1: the same code path
}


class HybridSSMDecoderLayer(GradientCheckpointingLayer):
    """One pre-norm residual block: mixer (attention or SSM), then SwiGLU MLP."""

    def __init__(self, config: HybridSSMConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.is_attention = config.mixers[layer_idx] == ATTENTION
        if self.is_attention:
            self.mixer = HybridSSMAttention(config, layer_idx)
        else:
            self.mixer = SSM_MIXER_CLASSES[config.mixers[layer_idx]](config, layer_idx)
        self.input_layernorm = HybridSSMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_mixer_layernorm = HybridSSMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = HybridSSMMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        ssm_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        packed: PackedDocuments | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """hidden_states (B, T, d); attention_mask: the 4D causal mask (attention layers); ssm_mask (B, T) bool;
        packed: documents packed into rows, run by SSM layers one document per row (see packing.py)."""
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        if self.is_attention:
            hidden_states = self.mixer(hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs)
        elif packed is not None:
            rows, _ = self.mixer(packed.unpack(hidden_states), mask=packed.mask)
            hidden_states = packed.pack(rows)
        else:
            state = None
            if cache is not None:
                slot = cache.layers[self.layer_idx]
                state = slot.recurrent_states[0] if slot.is_recurrent_states_initialized[0] else None
            hidden_states, final_state = self.mixer(hidden_states, state=state, mask=ssm_mask)
            if cache is not None:
                cache.update_recurrent_state(final_state, self.layer_idx)
        hidden_states = residual + hidden_states
        return hidden_states + self.mlp(self.post_mixer_layernorm(hidden_states))


class HybridSSMPreTrainedModel(PreTrainedModel):
    config: HybridSSMConfig
    config_class = HybridSSMConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["HybridSSMDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, PDSSMMixer):
            # One guarded copy (init.copy_ skips weights loaded from a checkpoint): N(0, 1/N) plus the diagonal.
            eye = torch.eye(module.state_size, device=module.dictionary.device, dtype=module.dictionary.dtype)
            start = torch.randn_like(module.dictionary) * module.state_size**-0.5
            init.copy_(module.dictionary, start + module.dictionary_diagonal_init * eye)
            if module.initial_state_kind == "learned":
                init.copy_(module.learned_initial_state, module.one_hot_initial_state(module.dictionary.device))
            init.ones_(module.skip)
        elif isinstance(module, HeadwiseMLP):
            init.normal_(module.down_weight, mean=0.0, std=self.config.initializer_range)
            init.constant_(module.down_bias, module.bias_init)
        elif isinstance(module, DiagonalRNNMixer):  # cell gains, leak terms and gate biases (mixer_lrc.py)
            module.reset_cell_parameters(init)


def _check_input_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(f"`input_ids` must be an integer tensor (torch.long), got dtype {input_ids.dtype}")
    if input_ids.dim() != 2:
        raise ValueError(f"`input_ids` must have shape (batch, seq_len), got {tuple(input_ids.shape)}")
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab_size):
        raise ValueError(
            f"`input_ids` must lie in [0, {vocab_size}) (config.vocab_size); got values in "
            f"[{int(input_ids.min())}, {int(input_ids.max())}]"
        )


class HybridSSMModel(HybridSSMPreTrainedModel):
    """Embeddings, the hybrid decoder stack and the final norm. Returns last hidden states (B, T, d)."""

    def __init__(self, config: HybridSSMConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(HybridSSMDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = HybridSSMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = HybridSSMRotaryEmbedding(config) if config.has_attention else None
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def _check_cache(self, cache: Cache) -> None:
        for i in self.config.ssm_layer_indices:
            if i >= len(cache.layers) or not isinstance(cache.layers[i], LinearAttentionCacheLayerMixin):
                raise ValueError(
                    f"`cache` has no recurrent-state slot for SSM layer {i}; build it with DynamicCache(config=model.config)"
                )

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """
        input_ids (B, T) or inputs_embeds (B, T, d); attention_mask (B, past + T) with 1 for real tokens
        (left padding allowed; padding never changes an SSM state). Packed documents: leave attention_mask
        None and restart position_ids (B, T) at 0 at each document; no token then sees another document.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of `input_ids` and `inputs_embeds`")
        if input_ids is not None:
            _check_input_ids(input_ids, self.config.vocab_size)
            inputs_embeds = self.embed_tokens(input_ids)
        elif inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.hidden_size:
            raise ValueError(
                f"`inputs_embeds` must have shape (batch, seq_len, {self.config.hidden_size}), got {tuple(inputs_embeds.shape)}"
            )
        batch, steps = inputs_embeds.shape[:2]
        if steps == 0:
            raise ValueError("the input sequence is empty (seq_len = 0)")
        # Packed documents (no attention mask, position_ids restarting inside a row): see packing.py.
        packed = None
        if attention_mask is None and position_ids is not None and steps > 1:
            packed = PackedDocuments.from_position_ids(position_ids, batch)
        if packed is not None:
            if cache is not None or use_cache:
                raise ValueError(
                    "packed documents (position_ids restarting inside a row) cannot be combined with a cache; "
                    "pass use_cache=False"
                )
            use_cache = False
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        if cache is not None:
            self._check_cache(cache)
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )

        ssm_mask = None
        if attention_mask is not None and attention_mask.dim() == 2:
            ssm_mask = attention_mask[:, -steps:].bool()
            if bool(ssm_mask.all()):
                ssm_mask = None  # nothing to mask: skip the per-step selects

        causal_mask = position_embeddings = None
        if self.config.has_attention:
            past = cache.get_seq_length() if cache is not None else 0
            if past + steps > self.config.max_position_embeddings:
                raise ValueError(
                    f"sequence length {past + steps} (cached {past} + new {steps}) exceeds "
                    f"config.max_position_embeddings = {self.config.max_position_embeddings}"
                )
            if position_ids is None:
                position_ids = torch.arange(past, past + steps, device=inputs_embeds.device).unsqueeze(0)
            causal_mask = create_causal_mask(
                config=self.config,
                inputs_embeds=inputs_embeds,
                attention_mask=attention_mask,
                cache=cache,
                position_ids=position_ids,
            )
            position_embeddings = self.rotary_emb(inputs_embeds, position_ids)

        hidden_states = inputs_embeds
        all_hidden_states = [] if output_hidden_states else None
        for layer in self.layers:
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
            hidden_states = layer(
                hidden_states,
                attention_mask=causal_mask,
                ssm_mask=ssm_mask,
                position_embeddings=position_embeddings,
                cache=cache,
                packed=packed,
                **kwargs,
            )
        hidden_states = self.norm(hidden_states)
        if all_hidden_states is not None:
            all_hidden_states.append(hidden_states)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            cache=cache if use_cache else None,
            hidden_states=tuple(all_hidden_states) if all_hidden_states is not None else None,
        )


class HybridSSMForCausalLM(HybridSSMPreTrainedModel, GenerationMixin):
    """Hybrid decoder with a language-modelling head (optionally tied to the input embeddings)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: HybridSSMConfig):
        super().__init__(config)
        self.model = HybridSSMModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """labels (B, T): next-token targets are labels shifted by one inside the loss; -100 is ignored."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden_states = hidden_states[:, -logits_to_keep:]
        elif isinstance(logits_to_keep, torch.Tensor):
            hidden_states = hidden_states[:, logits_to_keep]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, cache=outputs.cache, hidden_states=outputs.hidden_states
        )


def _pool(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """(B, T, d) -> (B, d): the last real token (any padding side) or the mean over real tokens."""
    if attention_mask is None:
        return hidden_states[:, -1] if pooling == "last" else hidden_states.mean(dim=1)
    mask = attention_mask[:, -hidden_states.shape[1] :].to(hidden_states.dtype)
    if pooling == "mean":
        return (hidden_states * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
    positions = torch.arange(hidden_states.shape[1], device=hidden_states.device)
    last = (positions * mask.long()).argmax(dim=1)  # index of the last real token in each row
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), last]


class _HybridSSMWithScoreHead(HybridSSMPreTrainedModel):
    """The hybrid stack plus a linear `score` head; subclasses decide where the head reads (pooled or per token)."""

    def __init__(self, config: HybridSSMConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = HybridSSMModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=True)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def _encode(self, input_ids, attention_mask, inputs_embeds, output_hidden_states, **kwargs):
        return self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            use_cache=False,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )


class HybridSSMForSequenceClassification(_HybridSSMWithScoreHead):
    """One label per sequence from a pooled hidden state (`config.classifier_pooling`: "last" or "mean").

    labels (B,) class ids (or floats when `config.num_labels == 1`, regression).
    """

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutputWithPast:
        outputs = self._encode(input_ids, attention_mask, inputs_embeds, output_hidden_states, **kwargs)
        logits = self.score(_pool(outputs.last_hidden_state, attention_mask, self.config.classifier_pooling))
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = nn.functional.cross_entropy(logits.float(), labels.long())
        return SequenceClassifierOutputWithPast(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


class HybridSSMForTokenClassification(_HybridSSMWithScoreHead):
    """One label per position (e.g. the automaton state after every prefix); labels (B, T), -100 is ignored."""

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        outputs = self._encode(input_ids, attention_mask, inputs_embeds, output_hidden_states, **kwargs)
        logits = self.score(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.long().flatten(), ignore_index=-100)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


__all__ = [
    "SSM_MIXER_CLASSES",
    "HybridSSMPreTrainedModel",
    "HybridSSMModel",
    "HybridSSMForCausalLM",
    "HybridSSMForSequenceClassification",
    "HybridSSMForTokenClassification",
]
