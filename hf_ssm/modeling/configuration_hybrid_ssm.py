"""Configuration of the hybrid attention / state-space model (DESIGN §7)."""

from __future__ import annotations

from transformers import PretrainedConfig
from transformers.modeling_rope_utils import RopeParameters

ATTENTION = "attention"
# Every SSM mixer the modeling code implements. A layer's mixer is one of these or ATTENTION.
SSM_MIXERS = ("pd_ssm",)
# Short pattern letters: "A" is attention, "S" the config's `ssm_mixer`; the rest name a mixer directly.
PATTERN_LETTERS = {"A": ATTENTION, "P": "pd_ssm"}

# Cache layer type of each mixer kind, as transformers' DynamicCache(config=...) understands them:
# attention keeps keys/values, an SSM layer only its recurrent state.
ATTENTION_LAYER_TYPE = "full_attention"
SSM_LAYER_TYPE = "linear_attention"


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")


class HybridSSMConfig(PretrainedConfig):
    r"""Configuration of a decoder whose layers are attention blocks and structured SSM mixers in any order.

    Args:
        vocab_size: number of tokens.
        hidden_size: model width d.
        intermediate_size: SwiGLU hidden width.
        num_hidden_layers: number of decoder blocks.
        num_attention_heads / num_key_value_heads / head_dim: attention heads (grouped-query when
            `num_key_value_heads < num_attention_heads`); `head_dim` defaults to `hidden_size // num_attention_heads`.
        max_position_embeddings: longest sequence (prompt + cache) the model accepts when it has attention
            layers; longer input raises a ValueError instead of running RoPE past the trained range.
        rope_parameters: RoPE settings, e.g. `{"rope_type": "default", "rope_theta": 10000.0}`.
        mixers: the mixer of every layer, as a list of names (`"attention"`, `"pd_ssm"`, ...) or a pattern
            string with one letter per layer: `A` attention, `S` the `ssm_mixer`, `P` pd_ssm. Default: all `S`.
        ssm_mixer: the mixer that `S` stands for.
        pd_ssm_num_heads: PD-SSM heads H (each with its own state of size N).
        pd_ssm_state_size: PD-SSM state size N per head.
        pd_ssm_dict_size: PD-SSM dictionary size K of the transition generator.
        pd_ssm_temperature: straight-through softmax temperature tau of the P generator.
        pd_ssm_mlp_width: hidden width of the magnitude and phase MLPs (default 2N).
    """

    model_type = "hybrid_ssm"
    keys_to_ignore_at_inference = ["cache"]

    vocab_size: int = 256
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = True
    tie_word_embeddings: bool = False
    rope_parameters: RopeParameters | dict | None = None
    attention_bias: bool = False
    attention_dropout: float | int = 0.0
    mixers: list[str] | str | None = None
    ssm_mixer: str = "pd_ssm"
    layer_types: list[str] | None = None
    pd_ssm_num_heads: int = 1
    pd_ssm_state_size: int = 16
    pd_ssm_dict_size: int = 32
    pd_ssm_temperature: float = 1.0
    pd_ssm_mlp_width: int | None = None
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        if self.rope_parameters is None:
            self.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.pd_ssm_mlp_width is None:
            self.pd_ssm_mlp_width = 2 * self.pd_ssm_state_size
        self.mixers = self._resolve_mixers(self.mixers)
        # layer_types is derived from mixers (it tells DynamicCache which layers keep KV and which a state).
        self.layer_types = [ATTENTION_LAYER_TYPE if m == ATTENTION else SSM_LAYER_TYPE for m in self.mixers]
        self._validate()
        super().__post_init__(**kwargs)

    def _resolve_mixers(self, mixers) -> list[str]:
        if self.ssm_mixer not in SSM_MIXERS:
            raise ValueError(f"`ssm_mixer` must be one of {list(SSM_MIXERS)}, got {self.ssm_mixer!r}")
        _positive_int("num_hidden_layers", self.num_hidden_layers)
        if mixers is None:
            return [self.ssm_mixer] * self.num_hidden_layers
        if isinstance(mixers, str):
            letters = {**PATTERN_LETTERS, "S": self.ssm_mixer}
            unknown = sorted({ch for ch in mixers if ch not in letters})
            if unknown:
                raise ValueError(
                    f"`mixers` pattern {mixers!r} has unknown letters {unknown}; accepted letters: {sorted(letters)}"
                )
            mixers = [letters[ch] for ch in mixers]
        mixers = list(mixers)
        accepted = (ATTENTION, *SSM_MIXERS)
        for i, name in enumerate(mixers):
            if name not in accepted:
                raise ValueError(f"`mixers[{i}]` = {name!r} is not a known mixer; accepted: {list(accepted)}")
        if len(mixers) != self.num_hidden_layers:
            raise ValueError(
                f"`mixers` names {len(mixers)} layers but `num_hidden_layers` is {self.num_hidden_layers}; "
                "give exactly one mixer per layer"
            )
        return mixers

    def _validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "max_position_embeddings"):
            _positive_int(name, getattr(self, name))
        if ATTENTION in self.mixers:
            for name in ("num_attention_heads", "num_key_value_heads", "head_dim"):
                _positive_int(name, getattr(self, name))
            if self.num_attention_heads % self.num_key_value_heads:
                raise ValueError(
                    f"`num_attention_heads` ({self.num_attention_heads}) must be a multiple of "
                    f"`num_key_value_heads` ({self.num_key_value_heads})"
                )
            if self.head_dim % 2:
                raise ValueError(f"`head_dim` must be even for RoPE, got {self.head_dim}")
        if "pd_ssm" in self.mixers:
            for name in ("pd_ssm_num_heads", "pd_ssm_state_size", "pd_ssm_dict_size", "pd_ssm_mlp_width"):
                _positive_int(name, getattr(self, name))
            if not self.pd_ssm_temperature > 0:
                raise ValueError(f"`pd_ssm_temperature` must be > 0, got {self.pd_ssm_temperature!r}")

    @property
    def ssm_layer_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.mixers) if m != ATTENTION]

    @property
    def has_attention(self) -> bool:
        return ATTENTION in self.mixers


__all__ = ["HybridSSMConfig"]
