"""Hybrid decoder: blocks whose mixer is attention or a structured SSM (docs/design.md §7).

    pre_norm_residual (default):  x = x + Mixer(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x))
    post_norm_mixer:              x = LayerNorm(Dropout(Mixer(x)) + D_skip * x)
    mixer_mlp:                    x = Mixer(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x))
    mixer_only:                   x = Mixer(x)

Inference cache: transformers' `DynamicCache(config=...)` reads `config.layer_types`; attention layers get a
key/value layer, SSM layers a recurrent-state layer that holds one tensor of fixed size (never growing with T).

This folder is copied next to saved weights (trust_remote_code), so it imports only torch, transformers and
its own siblings.
"""

from __future__ import annotations

import inspect
import warnings

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, LinearAttentionCacheLayerMixin
from transformers.generation import GenerationMixin, GenerationMode
from transformers.masking_utils import (
    create_causal_mask,
    create_recurrent_attention_mask,
    create_sliding_window_causal_mask,
)
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.modeling_utils import PreTrainedModel, slice_logits_to_keep
from transformers.utils import can_return_tuple, logging
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.output_capturing import capture_outputs

from .attention import HybridSSMAttention, HybridSSMMLP, HybridSSMRMSNorm, HybridSSMRotaryEmbedding
from .configuration_hybrid_ssm import ATTENTION, HybridSSMConfig
from .legacy_names import LEGACY_KEY_MAPPING, RENAMED_PARAMETERS
from .mixer_registry import SSM_MIXER_CLASSES, init_hook, mixer_class, mixer_spec
from .packing import PackedDocuments
from .portable import write_portable_code

logger = logging.get_logger(__name__)

# Every SSM mixer is declared once in mixer_registry.py (docs/design.md §12): SSM_MIXER_CLASSES is a live
# {name: class} view of it. A mixer class takes (config, layer_idx) and implements
#   forward(hidden_states (B, T, d), state=None, mask=None) -> (output (B, T, d), final_state)
# where `state` is the mixer's own fixed-size recurrent state (None = the mixer's initial state, zeros unless its
# config says otherwise) and `mask` (B, T) bool marks real tokens; padding must leave the state unchanged.


class HybridSSMDecoderLayer(GradientCheckpointingLayer):
    """One decoder block around a mixer (attention or SSM); `config.block_type` says which (docs/design.md §7.1):

        pre_norm_residual:  x <- x + Mixer(RMSNorm(x));  x <- x + SwiGLU(RMSNorm(x))
        post_norm_mixer:    x <- LayerNorm(Dropout(Mixer(x)) + D_skip * x)   (no residual, no MLP)
        mixer_mlp:          x <- Mixer(RMSNorm(x));  x <- x + SwiGLU(RMSNorm(x))   (no residual around the mixer)
        mixer_only:         x <- Mixer(x)   (nothing around the mixer; the model's final RMSNorm follows the stack)

    In the post-norm block a pd_ssm mixer's own D_skip * u is the skip (only Re(C x_t) is dropped out); every
    other mixer gets the block's `skip` parameter.
    """

    def __init__(self, config: HybridSSMConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.is_attention = config.mixers[layer_idx] == ATTENTION
        if self.is_attention:
            self.mixer = HybridSSMAttention(config, layer_idx)
        else:
            self.mixer = mixer_class(config.mixers[layer_idx])(config, layer_idx)
        block_type = getattr(config, "block_type", "pre_norm_residual")
        self.post_norm = block_type == "post_norm_mixer"
        self.mixer_alone = block_type == "mixer_only"  # no norm, residual or MLP: no parameters of the block's own
        if self.post_norm:
            self.dropout = nn.Dropout(getattr(config, "block_dropout", 0.0))
            self.output_layernorm = nn.LayerNorm(config.hidden_size, eps=config.rms_norm_eps)
            # A mixer declared with output_has_skip (pd_ssm) returns Re(C x) + D_skip * u already; the others get
            # a D_skip here.
            self.mixer_has_skip = not self.is_attention and mixer_spec(config.mixers[layer_idx]).output_has_skip
            # a pd_ssm mixer without its output skip (pd_ssm_output_skip=False): no skip in this block at all
            self.mixer_has_skip = self.mixer_has_skip or getattr(self.mixer, "skip", 0) is None
            self.skip = None if self.mixer_has_skip else nn.Parameter(torch.ones(config.hidden_size))
        elif not self.mixer_alone:
            self.input_layernorm = HybridSSMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.post_mixer_layernorm = HybridSSMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.mlp = HybridSSMMLP(config)
            self.mixer_only_stream = block_type == "mixer_mlp"

    def _mix(self, hidden_states, attention_mask, ssm_mask, position_embeddings, cache, packed, **kwargs):
        """The mixer on (B, T, d) -> (B, T, d), reading and updating this layer's cache slot."""
        if self.is_attention:
            return self.mixer(hidden_states, position_embeddings, attention_mask, cache=cache, **kwargs)[0]
        if packed is not None:
            rows, _ = self.mixer(packed.unpack(hidden_states), mask=packed.mask)
            return packed.pack(rows)
        state = None
        if cache is not None:
            slot = cache.layers[self.layer_idx]
            state = slot.recurrent_states[0] if slot.is_recurrent_states_initialized[0] else None
            if state is not None and torch.is_grad_enabled():
                # the cache update below writes the final state into this buffer in place, and the backward of a
                # forward that carries a state (truncated backpropagation, teacher forcing) reads it: a copy
                state = state.clone()
        hidden_states, final_state = self.mixer(hidden_states, state=state, mask=ssm_mask)
        if cache is not None:
            # A complex state (PD-SSM's) is cached as its real (..., 2) view: inductor generates no code for complex
            # operators, and a compiled decode step that reads and writes pairs has none (docs/design.md §7.3).
            pairs = torch.view_as_real(final_state) if final_state.is_complex() else final_state
            cache.update_recurrent_state(pairs, self.layer_idx)
            _count_tokens(slot, hidden_states.shape[1])
        return hidden_states

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
        mix_args = (attention_mask, ssm_mask, position_embeddings, cache, packed)
        if self.mixer_alone:
            return self._mix(hidden_states, *mix_args, **kwargs)
        if self.post_norm:
            return self._post_norm_forward(hidden_states, mix_args, **kwargs)
        mixed = self._mix(self.input_layernorm(hidden_states), *mix_args, **kwargs)
        hidden_states = mixed if self.mixer_only_stream else hidden_states + mixed
        return hidden_states + self.mlp(self.post_mixer_layernorm(hidden_states))

    def _post_norm_forward(self, u: torch.Tensor, mix_args, **kwargs) -> torch.Tensor:
        y = self._mix(u, *mix_args, **kwargs)
        if not self.mixer_has_skip:
            y = self.dropout(y) + self.skip * u
        elif self.training and self.dropout.p > 0:  # drop out Re(C x) only, not the mixer's D_skip * u
            if self.mixer.skip is None:  # pd_ssm_output_skip=False: y is Re(C x) alone
                return self.output_layernorm(self.dropout(y))
            skip_term = (self.mixer.skip * u.to(self.mixer.skip.dtype)).to(y.dtype)
            y = self.dropout(y - skip_term) + skip_term
        return self.output_layernorm(y)


# trust_remote_code: the Auto classes a saved token-model checkpoint names in its auto_map (file.class), so that
# AutoModel / AutoModelForCausalLM / ...ForSequenceClassification / ...ForTokenClassification all load it.
TOKEN_MODEL_AUTO_MAP = {
    "AutoModel": "modeling_hybrid_ssm.HybridSSMModel",
    "AutoModelForCausalLM": "modeling_hybrid_ssm.HybridSSMForCausalLM",
    "AutoModelForSequenceClassification": "modeling_hybrid_ssm.HybridSSMForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_hybrid_ssm.HybridSSMForTokenClassification",
}


def _count_tokens(slot, steps: int) -> None:
    """Add `steps` tokens to a recurrent-state slot's length, where the slot keeps one.

    From transformers 5.25 a linear-attention slot has a length of its own (`get_seq_length`), which generate reads
    on layer 0 and which transformers counts only when a convolution state is written; these mixers keep none.
    transformers 5.24's slots have no length (the cache then reads its first attention layer's)."""
    length = getattr(slot, "cumulative_length_linear", None)
    if length is not None:
        length.add_(steps)


class HybridSSMPreTrainedModel(PreTrainedModel):
    config: HybridSSMConfig
    config_class = HybridSSMConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["HybridSSMDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True
    # An SSM state cannot be rolled back to an earlier token, so generate refuses assisted decoding and prompt
    # lookup up front (they verify draft tokens and then rewind the cache): transformers 5.24 reads this flag,
    # 5.25 no longer does and HybridSSMForCausalLM._prepare_cache_for_generation refuses them itself.
    _is_stateful = True
    # output_hidden_states / output_attentions are collected by transformers' output-capturing hooks.
    _can_record_outputs = {"hidden_states": HybridSSMDecoderLayer, "attentions": HybridSSMAttention}
    # The auto_map entries save_pretrained writes for this class (see save_pretrained).
    _auto_map_entries: dict[str, str] = TOKEN_MODEL_AUTO_MAP

    def _initialize_weights(self, module, is_custom_code: bool = False):
        """transformers' per-module init, except for a module that has an init hook (mixer_registry) but no parameter
        or buffer of its own, only child maps (a direct-transition PD-SSM mixer without D_skip): transformers' rule for
        code outside the library takes such a module for initialised without calling `_init_weights`, which left W_P
        and an identity C at the generic N(0, initializer_range^2) init. Its hook runs here like any other
        (its init functions skip the weights a checkpoint loaded)."""
        if (
            is_custom_code
            and init_hook(module) is not None
            and next(module.parameters(recurse=False), None) is None
            and all(b is None for b in module.buffers(recurse=False))
        ):
            is_custom_code = False
        return super()._initialize_weights(module, is_custom_code)

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, HybridSSMDecoderLayer) and module.post_norm and module.skip is not None:
            init.ones_(module.skip)
        hook = init_hook(module)  # a mixer's (or mixer part's) own parameters, as its registry entry declares
        if hook is not None:
            hook(module, init, self.config)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, key_mapping=None, **kwargs):
        """transformers' from_pretrained. A checkpoint saved before parameters were renamed (legacy_names.py)
        loads through transformers' `key_mapping`, tensors unchanged, with a FutureWarning; saved again, it is
        written under the current names (docs/design.md §9.1)."""
        key_mapping = {**LEGACY_KEY_MAPPING, **(key_mapping or {})}
        result = super().from_pretrained(pretrained_model_name_or_path, *model_args, key_mapping=key_mapping, **kwargs)
        model = result[0] if isinstance(result, tuple) else result
        # transformers keeps the renamings a load used, to write the checkpoint's own layout again on save; a
        # deprecated name should not be written again, so the legacy ones are dropped.
        used = getattr(model, "_weight_conversions", None) or []
        legacy = [c for c in used if getattr(c, "source_patterns", [None])[0] in LEGACY_KEY_MAPPING]
        if legacy:
            model._weight_conversions = [c for c in used if c not in legacy]
            warnings.warn(
                f"{pretrained_model_name_or_path}: the checkpoint names mixer parameters as before their renaming "
                f"({RENAMED_PARAMETERS}); loaded under the new names, and save_pretrained writes those",
                FutureWarning,
                stacklevel=2,
            )
        return result

    def save_pretrained(self, save_directory, is_main_process: bool = True, *args, **kwargs):
        """transformers' save_pretrained; where the classes are registered for remote code (`import hf_ssm`),
        auto_map names every Auto class that can load this checkpoint, not only the saved class's own, and the
        model's torch code is exported flat next to the weights (portable.py: the checkpoint loads with
        trust_remote_code where hf_ssm is not installed). push_to_hub=True is refused there, since transformers would
        upload before the export: `model.push_to_hub(repo_id)` saves through this method first."""
        remote = self.is_remote_code()
        if remote and kwargs.get("push_to_hub"):
            raise ValueError(
                "save_pretrained(push_to_hub=True) would upload the model code before it is made portable; "
                "call model.push_to_hub(repo_id), which saves through save_pretrained first"
            )
        if remote:
            self.config.auto_map = dict(self._auto_map_entries)  # the config adds its AutoConfig entry on save
        result = super().save_pretrained(save_directory, is_main_process, *args, **kwargs)
        if remote and self.should_save_on_this_rank(is_main_process):
            write_portable_code(type(self).__module__, save_directory)
        return result


def _check_is_tensor(name: str, value) -> None:
    """TypeError naming the argument unless `value` is a torch.Tensor (a list gave AttributeError: no 'dtype')."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(value).__name__}; wrap it: torch.tensor(...)")


def _is_integer(values: torch.Tensor) -> bool:
    """Whether `values` holds integers: any integer dtype (int8 ... int64, uint8 ...), not bool."""
    return not (values.is_floating_point() or values.is_complex() or values.dtype == torch.bool)


def _long_labels(labels: torch.Tensor) -> torch.Tensor:
    """Integer `labels` of any integer dtype (int32 from numpy, uint8, ...) as torch.long, the dtype transformers'
    losses (cross-entropy) take; other dtypes unchanged (the callers check them). Before any range check too: a
    bound compared with a narrow tensor is cast to its dtype (300 is 44 as uint8, -100 is 156)."""
    return labels.long() if _is_integer(labels) else labels


def _long_input_ids(input_ids: torch.Tensor) -> torch.Tensor:
    """`input_ids` (B, T) of any integer dtype as torch.long, which the embedding takes (it refuses int16 / uint8);
    TypeError for another dtype (floats, bool), ValueError for another shape."""
    _check_is_tensor("input_ids", input_ids)
    if not _is_integer(input_ids):
        raise TypeError(
            f"`input_ids` must be an integer tensor (torch.long, or any integer dtype), got dtype {input_ids.dtype}"
        )
    if input_ids.dim() != 2:
        raise ValueError(f"`input_ids` must have shape (batch, seq_len), got {tuple(input_ids.shape)}")
    return input_ids.long()


def _reads_values() -> bool:
    """Whether input checks may read tensor values on the host: not while torch.compile traces the forward (a host
    read there is a graph break; the compiled model, like transformers' own, trusts its inputs)."""
    return not torch.compiler.is_compiling()


def _check_token_range(name: str, values: torch.Tensor, size: int, size_name: str, ignore_index=None) -> None:
    """Every entry of `values` lies in [0, size) (or equals ignore_index). One host read, skipped under compile."""
    if not _reads_values():
        return
    bad = (values < 0) | (values >= size)
    if ignore_index is not None:
        bad &= values != ignore_index
    if bool(bad.any()):
        allowed = f"[0, {size}) ({size_name})" + ("" if ignore_index is None else f" or {ignore_index}")
        raise ValueError(f"`{name}` must lie in {allowed}; got values in [{int(values.min())}, {int(values.max())}]")


def _long_position_ids(position_ids, batch: int, steps: int) -> torch.Tensor:
    """position_ids: an integer tensor of shape (B or 1, T), returned as torch.long (its values are checked where
    they may be read)."""
    _check_is_tensor("position_ids", position_ids)
    if position_ids.dim() != 2 or position_ids.shape[0] not in (1, batch) or position_ids.shape[1] != steps:
        raise ValueError(
            f"`position_ids` must have shape (batch or 1, seq_len) = ({batch} or 1, {steps}), "
            f"got {tuple(position_ids.shape)}"
        )
    if not _is_integer(position_ids):
        raise TypeError(f"`position_ids` must be an integer tensor (torch.long), got dtype {position_ids.dtype}")
    return position_ids.long()


class HybridSSMModel(HybridSSMPreTrainedModel):
    """Embeddings, the hybrid decoder stack and the final norm. Returns last hidden states (B, T, d).

    Input checks that read tensor values on the host (token ids in range, finite `inputs_embeds`, whether the
    mask holds any padding) run on every forward except a decode step (one new token on a cache), so generation
    makes no host synchronisation per token beyond transformers' own.
    """

    def __init__(self, config: HybridSSMConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(HybridSSMDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        # The post-norm block already ends in a LayerNorm: embedding -> blocks -> head, no final norm.
        post_norm = getattr(config, "block_type", "pre_norm_residual") == "post_norm_mixer"
        self.norm = nn.Identity() if post_norm else HybridSSMRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
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
                    f"`cache` has no recurrent-state slot for SSM layer {i}; build it with "
                    "DynamicCache(config=model.config)"
                )

    def _past_length(self, cache: Cache | None) -> int | torch.Tensor | None:
        """Tokens already in `cache` (a 0-d tensor for a static cache, which counts on the device); None where only
        SSM layers hold it (a recurrent state has no length)."""
        if cache is None:
            return 0
        if self.config.has_attention:  # the first attention layer's length: an int, or a static cache's tensor
            return cache.get_seq_length(self.config.mixers.index(ATTENTION))
        started = any(cache.layers[i].is_recurrent_states_initialized[0] for i in self.config.ssm_layer_indices)
        return None if started else 0

    def _check_attention_mask(
        self, attention_mask, batch: int, steps: int, past: int | torch.Tensor | None, read_values: bool
    ) -> None:
        """Shape (and, with `read_values`, one host read: every entry 0 or 1) of the padding mask."""
        # per-layer-type masks: transformers builds them for static caches, this model does not
        # (create_masks_for_generate)
        if isinstance(attention_mask, dict):
            raise ValueError(
                "`attention_mask` must be the 2-D padding mask (batch, past + seq_len), not a per-layer-type dict"
            )
        if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4:
            if self.config.ssm_layer_indices:
                raise ValueError(
                    "`attention_mask` must be the 2-D padding mask (batch, past + seq_len): a 4-D "
                    "mask cannot tell the SSM layers which tokens are padding. For packed documents pass no mask "
                    "and position_ids restarting at 0 at each document."
                )
            return  # attention-only stack: the mask goes to the attention layers as in any transformers model
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
            shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask)
            raise ValueError(f"`attention_mask` must be a 2-D tensor (batch, past + seq_len), got {shape}")
        # Unknown past (a cache of SSM layers only), or one that is a static cache's tensor where no value may be
        # read: the mask must at least cover the input.
        if past is None or (isinstance(past, torch.Tensor) and not read_values):
            if attention_mask.shape[0] != batch or attention_mask.shape[1] < steps:
                raise ValueError(
                    f"`attention_mask` must have shape (batch, past + seq_len) with batch = {batch} and at least "
                    f"seq_len = {steps} columns, got {tuple(attention_mask.shape)}"
                )
        elif tuple(attention_mask.shape) != (batch, int(past) + steps):
            raise ValueError(
                f"`attention_mask` must have shape (batch, past + seq_len) = ({batch}, {int(past)} + {steps}), "
                f"got {tuple(attention_mask.shape)}"
            )
        if read_values and attention_mask.dtype != torch.bool:
            bad = (attention_mask != 0) & (attention_mask != 1)
            if bool(bad.any()):
                raise ValueError(
                    "`attention_mask` must hold only 1 (a real token) and 0 (padding), got the value "
                    f"{attention_mask[bad][0].item()!r}"
                )

    def _checked_input(self, input_ids, inputs_embeds) -> tuple[torch.Tensor | None, int, int]:
        """(input_ids as torch.long or None, batch, steps), after the checks that need no host read: exactly one of
        input_ids (B, T) (any integer dtype) and inputs_embeds (B, T, d) (floating point), neither empty."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of `input_ids` and `inputs_embeds`")
        if input_ids is not None:
            input_ids = _long_input_ids(input_ids)
            batch, steps = input_ids.shape
        else:
            _check_is_tensor("inputs_embeds", inputs_embeds)
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.hidden_size:
                raise ValueError(
                    f"`inputs_embeds` must have shape (batch, seq_len, {self.config.hidden_size}), "
                    f"got {tuple(inputs_embeds.shape)}"
                )
            if not inputs_embeds.is_floating_point():
                raise TypeError(f"`inputs_embeds` must be a floating-point tensor, got dtype {inputs_embeds.dtype}")
            batch, steps = inputs_embeds.shape[:2]
        if batch == 0:
            raise ValueError("the batch is empty (batch size 0 in `input_ids` / `inputs_embeds`)")
        if steps == 0:
            raise ValueError("the input sequence is empty (seq_len = 0)")
        return input_ids, batch, steps

    def _embed(self, input_ids, inputs_embeds, position_ids, read_values: bool) -> torch.Tensor:
        """The layers' input (B, T, d): the token embeddings of input_ids, or inputs_embeds; with `read_values` the
        checks that read values on the host first (position_ids >= 0, ids in the vocabulary, finite embeddings)."""
        if position_ids is not None and read_values and bool((position_ids < 0).any()):
            raise ValueError(f"`position_ids` must be >= 0, got a minimum of {int(position_ids.min())}")
        if input_ids is not None:
            if read_values:
                _check_token_range("input_ids", input_ids, self.config.vocab_size, "config.vocab_size")
            return self.embed_tokens(input_ids)
        if read_values and not bool(torch.isfinite(inputs_embeds).all()):
            raise ValueError("`inputs_embeds` contains NaN or inf")
        return inputs_embeds

    def _prepare_cache(self, cache: Cache | None, use_cache: bool | None, packed: bool):
        """(cache, use_cache) of this call: packed documents take no cache; use_cache None means the config's; a
        new DynamicCache where one is wanted and none was passed; a passed cache must have every SSM layer's slot."""
        if packed:
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
        return cache, use_cache

    def _ssm_mask(self, attention_mask, inputs_embeds: torch.Tensor, steps: int) -> torch.Tensor | None:
        """The SSM layers' (B, T) bool mask of real tokens, or None where nothing is padded (they then skip the
        per-step selects) or the mask is not a 2-D padding mask."""
        if not (isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2):
            return None
        if steps > 1:  # None where the mask holds no padding
            ssm_mask = create_recurrent_attention_mask(self.config, inputs_embeds, attention_mask)
        else:  # one token: select without reading the mask on the host
            ssm_mask = attention_mask[:, -1:]
        return ssm_mask.bool() if ssm_mask is not None else None

    def _attention_inputs(self, inputs_embeds, attention_mask, position_ids, cache, past, read_values: bool):
        """(causal mask, RoPE (cos, sin)) of the attention layers, after refusing a sequence past
        max_position_embeddings (except under dynamic NTK RoPE, which exists to run past the trained length)."""
        steps = inputs_embeds.shape[1]
        # A static cache counts its past in a tensor: read it only where values may be read.
        known_past = past if isinstance(past, int) else int(past) if read_values else None
        too_long = known_past is not None and known_past + steps > self.config.max_position_embeddings
        if too_long and self.rotary_emb.rope_type != "dynamic":
            raise ValueError(
                f"sequence length {known_past + steps} (cached {known_past} + new {steps}) exceeds "
                f"config.max_position_embeddings = {self.config.max_position_embeddings}"
            )
        if position_ids is None:  # arange + past: no host read when past is a static cache's tensor
            position_ids = (torch.arange(steps, device=inputs_embeds.device) + past).unsqueeze(0)
        make_mask = create_causal_mask if self.config.sliding_window is None else create_sliding_window_causal_mask
        causal_mask = make_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            cache=cache,
            position_ids=position_ids,
        )
        return causal_mask, self.rotary_emb(inputs_embeds, position_ids)

    @capture_outputs
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """
        input_ids (B, T) or inputs_embeds (B, T, d); attention_mask (B, past + T) with 1 for real tokens
        (left padding allowed; padding never changes an SSM state). Packed documents: leave attention_mask
        None and restart position_ids (B, T) at 0 at each document; no token then sees another document.
        output_hidden_states / output_attentions / return_dict as in transformers (attention maps come from
        the attention layers under attn_implementation="eager"; SSM layers have none).
        """
        # Ids and positions of a narrow integer dtype (int16, uint8, ...) become torch.long here: the embedding
        # refuses them, and a bound compared with a narrow tensor is cast to its dtype (300 is 44 as uint8).
        input_ids, batch, steps = self._checked_input(input_ids, inputs_embeds)
        if position_ids is not None:
            position_ids = _long_position_ids(position_ids, batch, steps)
        # A decode step, and a forward traced by torch.compile, read no tensor value on the host (class docstring).
        decode_step = steps == 1 and cache is not None
        read_values = not decode_step and _reads_values()
        inputs_embeds = self._embed(input_ids, inputs_embeds, position_ids, read_values)
        # Packed documents (no attention mask, position_ids restarting inside a row): see packing.py.
        packed = None
        if attention_mask is None and position_ids is not None and steps > 1:
            packed = PackedDocuments.from_position_ids(position_ids, batch)
        cache, use_cache = self._prepare_cache(cache, use_cache, packed is not None)
        past = self._past_length(cache)
        if attention_mask is not None:
            self._check_attention_mask(attention_mask, batch, steps, past, read_values=read_values)
        ssm_mask = self._ssm_mask(attention_mask, inputs_embeds, steps)
        causal_mask = position_embeddings = None
        if self.config.has_attention:
            causal_mask, position_embeddings = self._attention_inputs(
                inputs_embeds, attention_mask, position_ids, cache, past, read_values
            )

        hidden_states = inputs_embeds
        for layer in self.layers:
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
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, cache=cache if use_cache else None)


class HybridSSMForCausalLM(HybridSSMPreTrainedModel, GenerationMixin):
    """Hybrid decoder with a language-modelling head (optionally tied to the input embeddings)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    # The caches generate may build for this model. Every one of them holds a recurrent-state slot
    # (LinearAttentionLayer) for each SSM layer and a key/value slot for each attention layer: dynamic slots grow,
    # static ones ("static", for torch.compile) are allocated once at prompt + max_new_tokens. Refused: "quantized"
    # (key/value quantization, needs a backend) and the offloaded caches (CUDA streams; untested with this model).
    _cache_implementations = (None, "dynamic", "static")

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

    def create_masks_for_generate(self, config, inputs_embeds, attention_mask, cache, position_ids, **kwargs):
        """The mask generate passes to forward when its cache is static: the 2-D padding mask, unchanged.

        transformers would pre-build one 4-D causal mask per layer type here (`masking_utils`), which cannot tell
        the SSM layers which tokens are padding. The forward builds the attention layers' causal mask from the
        2-D mask and the cache itself, static or dynamic, and reads no tensor value on a decode step."""
        return attention_mask

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, generation_mode, *args, **kwargs):
        """Refuse, before generate builds a cache or runs the model, what this model cannot run: the cache
        implementations outside `_cache_implementations`, and assisted decoding / prompt lookup (they rewind the
        cache after rejected draft tokens, and an SSM state keeps no earlier token's value)."""
        if generation_mode == GenerationMode.ASSISTED_GENERATION:
            raise ValueError(
                f"assisted decoding and prompt lookup are not supported by the stateful {type(self).__name__}: its "
                "SSM layers' recurrent state cannot be rewound to drop rejected draft tokens; call generate without "
                "`assistant_model` / `prompt_lookup_num_tokens`"
            )
        if generation_config.cache_implementation not in self._cache_implementations:
            raise ValueError(
                f"`cache_implementation` must be one of {list(self._cache_implementations)} for "
                f"{type(self).__name__} (caches with a recurrent-state slot for every SSM layer), got "
                f"{generation_config.cache_implementation!r}"
            )
        return super()._prepare_cache_for_generation(generation_config, model_kwargs, generation_mode, *args, **kwargs)

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """labels (B, T): next-token targets are labels shifted by one inside the loss; -100 is ignored."""
        if labels is not None:
            _check_is_tensor("labels", labels)
            if not _is_integer(labels):
                raise TypeError(f"`labels` must be integer token ids (torch.long), got dtype {labels.dtype}")
            inputs = input_ids if input_ids is not None else inputs_embeds
            if isinstance(inputs, torch.Tensor) and tuple(labels.shape) != tuple(inputs.shape[:2]):
                raise ValueError(
                    f"`labels` must have the shape of the input (batch, seq_len) = {tuple(inputs.shape[:2])}, "
                    f"got {tuple(labels.shape)}"
                )
            labels = _long_labels(labels)
            _check_token_range("labels", labels, self.config.vocab_size, "config.vocab_size", ignore_index=-100)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        logits = self.lm_head(slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# generate's prepare_inputs_for_generation asks remote-code models (as this one is once saved or registered for an
# Auto class) for inspect.signature(self.forward) at every step; through the decorators that means unwrapping and
# rebuilding the signature each time. The signature is fixed, so it is computed once here.
HybridSSMForCausalLM.forward.__signature__ = inspect.signature(HybridSSMForCausalLM.forward)


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


def check_sequence_labels(labels: torch.Tensor, batch: int, config) -> None:
    """labels for transformers' ForSequenceClassificationLoss: (B,) class ids, (B, num_labels) floats for
    multi-label, (B,) / (B, num_labels) floats for regression. Its problem-type rule decides which."""
    _check_is_tensor("labels", labels)
    num_labels = config.num_labels
    problem_type = config.problem_type
    if problem_type is None:  # the rule ForSequenceClassificationLoss applies (and records in the config)
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    where = f"(config.problem_type = {problem_type!r}, num_labels = {num_labels})"
    if labels.dim() == 0 or labels.shape[0] != batch:
        raise ValueError(f"`labels` must have one entry per sequence (batch = {batch}), got {tuple(labels.shape)}")
    if problem_type == "single_label_classification":
        if labels.is_floating_point() or tuple(labels.shape) != (batch,):
            raise ValueError(
                f"`labels` must be integer class ids of shape ({batch},) {where}, got {labels.dtype} "
                f"{tuple(labels.shape)}"
            )
        _check_token_range("labels", labels, num_labels, "config.num_labels", ignore_index=-100)
    elif problem_type == "multi_label_classification":
        if not labels.is_floating_point() or tuple(labels.shape) != (batch, num_labels):
            raise ValueError(
                f"`labels` must be floats of shape ({batch}, {num_labels}) {where}, "
                f"got {labels.dtype} {tuple(labels.shape)}"
            )
    elif not labels.is_floating_point() or not (
        tuple(labels.shape) == (batch, num_labels) or (num_labels == 1 and tuple(labels.shape) == (batch,))
    ):
        raise ValueError(
            f"`labels` must be floats of shape ({batch}, {num_labels})"
            + (f" or ({batch},)" if num_labels == 1 else "")
            + f" {where}, got {labels.dtype} {tuple(labels.shape)}"
        )


def sequence_classification_loss(model, labels: torch.Tensor | None, logits: torch.Tensor, **kwargs):
    """The loss of a sequence-level head: None without `labels`; else the labels are checked
    (`check_sequence_labels`) and scored by the model's transformers loss (ForSequenceClassification) against
    the pooled `logits` (B, num_labels)."""
    if labels is None:
        return None
    _check_is_tensor("labels", labels)
    labels = _long_labels(labels)  # an int32 class id is a class id (transformers' rule takes only long / int)
    check_sequence_labels(labels, logits.shape[0], model.config)
    return model.loss_function(labels=labels, pooled_logits=logits, config=model.config, **kwargs)


class _HybridSSMWithScoreHead(HybridSSMPreTrainedModel):
    """The hybrid stack plus a linear `score` head, and the forward both heads share. Each subclass defines
    `_head(outputs, input_ids, attention_mask, inputs_embeds, labels, **kwargs)`: where the head reads (pooled or
    per token), its label checks and loss, and its output class.

    Not transformers' `GenericForSequenceClassification` / `GenericForTokenClassification` (5.24): their `score`
    has no bias where ours has one since the first release (saved classifiers would no longer load as they
    were), their sequence pooling reads padding from `pad_token_id` only (not the attention mask, no
    `classifier_pooling="mean"`) and they check no labels, so only their `__init__` would be left to reuse. The
    losses are theirs: `self.loss_function` (ForSequenceClassificationLoss / ForTokenClassification)."""

    def __init__(self, config: HybridSSMConfig):
        super().__init__(config)
        if config.input_channels is not None:
            raise ValueError(
                f"this config has `input_channels` = {config.input_channels} (continuous input): it belongs to "
                "HybridSSMForTimeSeriesClassification, not to a token model"
            )
        self.num_labels = config.num_labels
        self.model = HybridSSMModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=True)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutputWithPast | TokenClassifierOutput:
        """input_ids (B, T) or inputs_embeds (B, T, d), attention_mask (B, T); `labels` as the head's class
        docstring says. The stack builds no cache of its own (`use_cache` may be False or None; a `cache` passed in
        is read and updated, which starts the sequence from a carried state); `_head` turns its output into logits
        and the loss."""
        if use_cache:
            raise ValueError(
                "`use_cache`=True: the classification heads return no cache; pass `cache=` to start from a carried "
                "state, or use HybridSSMForCausalLM for cached decoding"
            )
        if input_ids is not None:  # long before the head compares ids with pad_token_id
            input_ids = _long_input_ids(input_ids)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            use_cache=False,
            return_dict=True,
            **kwargs,
        )
        return self._head(outputs, input_ids, attention_mask, inputs_embeds, labels, **kwargs)


class HybridSSMForSequenceClassification(_HybridSSMWithScoreHead):
    """One label per sequence from a pooled hidden state (`config.classifier_pooling`: "last" or "mean").

    Without an attention_mask, padding is found from `config.pad_token_id` as in transformers' sequence
    classifiers (the last non-pad token of each row). The loss is transformers' ForSequenceClassificationLoss:
    `config.problem_type` regression, single-label (labels (B,) class ids) or multi-label (labels (B, num_labels)
    floats); unset, it follows from num_labels and the label dtype.
    """

    def _pooling_mask(self, input_ids, attention_mask, inputs_embeds) -> torch.Tensor | None:
        if attention_mask is not None:
            return attention_mask
        pad = self.config.pad_token_id
        batch = (input_ids if input_ids is not None else inputs_embeds).shape[0]
        if pad is None:
            if batch != 1:
                raise ValueError(
                    "a batch of more than one sequence needs `attention_mask` or `config.pad_token_id` to find "
                    "each row's padding"
                )
            return None
        if input_ids is None:
            logger.warning_once(
                f"{type(self).__name__} cannot find padding in `inputs_embeds` without an attention_mask; "
                "it pools every position"
            )
            return None
        return input_ids != pad

    def _head(
        self, outputs, input_ids, attention_mask, inputs_embeds, labels, **kwargs
    ) -> SequenceClassifierOutputWithPast:
        pooling_mask = self._pooling_mask(input_ids, attention_mask, inputs_embeds)
        logits = self.score(_pool(outputs.last_hidden_state, pooling_mask, self.config.classifier_pooling))
        return SequenceClassifierOutputWithPast(
            loss=sequence_classification_loss(self, labels, logits, **kwargs),
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class HybridSSMForTokenClassification(_HybridSSMWithScoreHead):
    """One label per position (e.g. the automaton state after every prefix); labels (B, T), -100 is ignored.

    The loss is transformers' ForTokenClassification (cross-entropy, `num_items_in_batch` honoured)."""

    def _head(self, outputs, input_ids, attention_mask, inputs_embeds, labels, **kwargs) -> TokenClassifierOutput:
        logits = self.score(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            _check_is_tensor("labels", labels)
            if not _is_integer(labels) or tuple(labels.shape) != tuple(logits.shape[:2]):
                raise ValueError(
                    f"`labels` must be integer class ids of shape (batch, seq_len) = {tuple(logits.shape[:2])}, "
                    f"got {labels.dtype} {tuple(labels.shape)}"
                )
            labels = _long_labels(labels)
            _check_token_range("labels", labels, self.num_labels, "config.num_labels", ignore_index=-100)
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = [
    "SSM_MIXER_CLASSES",
    "HybridSSMPreTrainedModel",
    "HybridSSMModel",
    "HybridSSMForCausalLM",
    "HybridSSMForSequenceClassification",
    "HybridSSMForTokenClassification",
]
