"""Named model presets: one place for the tiny / small / base sizes of every mixer family and hybrid pattern.

A preset name is `<family>-<size>`:

- a pure stack of one mixer: `pd_ssm`, `bd_lru`, `h_lru`, `diag_lru`, `lrc_ssm`, `gru_ssm`, `mgu_ssm`,
  `lstm_ssm`, or `attention` (a plain Transformer baseline);
- a hybrid of one SSM mixer with attention layers: `hybrid-<mixer>`, e.g. `hybrid-pd_ssm`. The pattern puts an
  attention layer after every SSM layer in `tiny` ("SASA"), and after every three SSM layers in `small` and
  `base` ("SSSA" repeated), the usual ratio of hybrid SSM language models;

and the size is `tiny` (d = 128, 4 layers, CPU experiments and tests), `small` (d = 512, 8 layers) or `base`
(d = 768, 12 layers). The vocabulary size and the special-token ids are not part of a preset: the training
script takes them from the tokenizer.

    >>> from hf_ssm.presets import preset_config
    >>> config = preset_config("hybrid-pd_ssm-tiny", vocab_size=260)
    >>> config.mixers
    ['pd_ssm', 'attention', 'pd_ssm', 'attention']
"""

from __future__ import annotations

from .modeling import HybridSSMConfig
from .modeling.configuration_hybrid_ssm import ATTENTION, SSM_MIXERS

SIZES: dict[str, dict] = {
    "tiny": dict(
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        pd_ssm_num_heads=1,
        pd_ssm_head_state_size=16,
        pd_ssm_dict_size=16,
        lru_total_state_size=128,
        lru_group_size=4,
        lrc_num_channels=128,
    ),
    "small": dict(
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        pd_ssm_num_heads=8,
        pd_ssm_head_state_size=32,
        pd_ssm_dict_size=32,
        lru_total_state_size=512,
        lru_group_size=4,
        lrc_num_channels=512,
    ),
    "base": dict(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        pd_ssm_num_heads=12,
        pd_ssm_head_state_size=64,
        pd_ssm_dict_size=64,
        lru_total_state_size=768,
        lru_group_size=4,
        lrc_num_channels=768,
    ),
}

# The layer pattern of a hybrid ("S" = the family's SSM mixer, "A" = attention) for each size.
HYBRID_PATTERNS = {"tiny": "SASA", "small": "SSSASSSA", "base": "SSSASSSASSSA"}

FAMILIES: tuple[str, ...] = (*SSM_MIXERS, ATTENTION, *(f"hybrid-{m}" for m in SSM_MIXERS))


def _build_presets() -> dict[str, dict]:
    presets = {}
    for size, dims in SIZES.items():
        layers = dims["num_hidden_layers"]
        for family in FAMILIES:
            fields = dict(dims)
            if family == ATTENTION:
                fields.update(mixers="A" * layers)
            elif family.startswith("hybrid-"):
                fields.update(mixers=HYBRID_PATTERNS[size], ssm_mixer=family.removeprefix("hybrid-"))
            else:
                fields.update(mixers="S" * layers, ssm_mixer=family)
            presets[f"{family}-{size}"] = fields
    return presets


PRESETS: dict[str, dict] = _build_presets()


def preset_names() -> list[str]:
    return sorted(PRESETS)


def get_preset(name: str) -> dict:
    """The config fields of preset `name` (a copy); ValueError naming the close matches for an unknown name."""
    if name not in PRESETS:
        import difflib

        close = difflib.get_close_matches(name, PRESETS, n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown preset {name!r}{hint} Presets are <family>-<size> with size in {list(SIZES)} and family in "
            f"{list(FAMILIES)} (list them with `scripts/pretrain.py --list_presets`)"
        )
    return dict(PRESETS[name])


def preset_config(name: str, **overrides) -> HybridSSMConfig:
    """A HybridSSMConfig from preset `name`, with `overrides` (e.g. vocab_size, eos_token_id) applied on top."""
    return HybridSSMConfig(**{**get_preset(name), **overrides})


__all__ = ["FAMILIES", "HYBRID_PATTERNS", "PRESETS", "SIZES", "get_preset", "preset_config", "preset_names"]
