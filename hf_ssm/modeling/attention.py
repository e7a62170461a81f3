"""Causal self-attention with RoPE and grouped-query heads, plus the RMSNorm and SwiGLU MLP of every block.

Attention goes through transformers' attention-function registry, so `attn_implementation="sdpa"`,
`"eager"` (and `"flash_attention_2"` where installed) all work with the same weights. Only `"eager"` returns
attention weights (`output_attentions=True`), as in transformers' own models.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.activations import ACT2FN
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


class HybridSSMRMSNorm(nn.Module):
    """RMSNorm over the last axis, computed in float32."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        if dtype == torch.float32 and self.weight.dtype == torch.float32:
            # torch's fused kernel: the same values as the lines below in float32 (tested), one op instead of six
            return nn.functional.rms_norm(hidden_states, self.weight.shape, self.weight, self.eps)
        h = hidden_states.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class HybridSSMMLP(nn.Module):
    """SwiGLU: down(act(gate(x)) * up(x))."""

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class HybridSSMRotaryEmbedding(nn.Module):
    """cos/sin tables for RoPE at given positions: (B, T) -> two (B, T, head_dim) tensors.

    Every rope type of transformers' `ROPE_INIT_FUNCTIONS` is accepted; `"dynamic"` (NTK) and `"longrope"`
    recompute the frequencies from the positions through transformers' `dynamic_rope_update`.
    """

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        self.config = config
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        accepted = ("default", *ROPE_INIT_FUNCTIONS)
        if self.rope_type not in accepted:
            raise ValueError(f"`rope_parameters['rope_type']` must be one of {list(accepted)}, got {self.rope_type!r}")
        # The config refuses these when it is built or changed; a dict edited in place reaches the model unchecked.
        theta = config.rope_parameters.get("rope_theta")
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 0 < theta < float("inf"):
            raise ValueError(f"`rope_parameters['rope_theta']` must be a finite number > 0, got {theta!r}")
        # Read by dynamic_rope_update: the length the current frequencies were computed for, and the trained one.
        self.max_seq_len_cached = self.original_max_seq_len = config.max_position_embeddings
        init_fn: Callable = self.compute_default_rope_parameters
        if self.rope_type != "default":
            init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = init_fn(config)
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config: PretrainedConfig, **kwargs) -> tuple[torch.Tensor, float]:
        base = config.rope_parameters["rope_theta"]
        dim = config.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv_freq, 1.0

    # No torch.no_grad() here: inv_freq is a buffer and position_ids never need a gradient, so nothing is
    # recorded anyway, and entering the context at every forward costs more than these few ops at decode.
    @dynamic_rope_update  # rescales inv_freq for "dynamic" / "longrope"; a no-op for the other rope types
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, heads, T, head_dim) by position tables (B, T, head_dim)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + _rotate_half(x) * sin


def eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Plain softmax attention; (B, heads, T, hd) inputs with KV heads repeated to the query heads."""
    groups = module.num_key_value_groups
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


class HybridSSMAttention(nn.Module):
    """Causal grouped-query self-attention with RoPE; keys/values are cached in the layer's DynamicCache slot."""

    def __init__(self, config: PretrainedConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = True
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache=None, **kwargs):
        """hidden_states (B, T, d) -> output (B, T, d), attention weights (B, heads, T, past + T) or None.

        The weights come from the eager implementation only (sdpa / flash attention return None)."""
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        query = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        attention_fn = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention)
        out, weights = attention_fn(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.config.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            sliding_window=self.config.sliding_window,  # flash attention's window; sdpa / eager read it in the mask
            **kwargs,
        )
        return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1).contiguous()), weights
