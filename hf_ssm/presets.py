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

from .modeling import PAPER_PD_SSM_LAYER, HybridSSMConfig
from .modeling.configuration_hybrid_ssm import ATTENTION, SSM_MIXERS

# size: (d, SwiGLU width, layers, attention heads, key-value heads, positions, PD-SSM heads, PD-SSM N per head)
_SIZE_ROWS = {
    "tiny": (128, 352, 4, 4, 4, 1024, 1, 16),
    "small": (512, 1376, 8, 8, 4, 2048, 8, 32),
    "base": (768, 2048, 12, 12, 4, 4096, 12, 64),
}


def _size_fields(d, mlp, layers, heads, kv_heads, positions, pd_heads, pd_state) -> dict:
    """The config fields of one size. The rules every size follows: PD-SSM is the paper's layer
    (PAPER_PD_SSM_LAYER: it models text better than the config's default, the state tracker; RESULTS.md §4) with a
    dictionary of K = N matrices, the LRU and LRC mixers keep a state of d real numbers, the block LRUs in groups
    of 4."""
    return {
        **PAPER_PD_SSM_LAYER,
        "hidden_size": d,
        "intermediate_size": mlp,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": positions,
        "pd_ssm_num_heads": pd_heads,
        "pd_ssm_head_state_size": pd_state,
        "pd_ssm_dict_size": pd_state,
        "lru_total_state_size": d,
        "lru_group_size": 4,
        "lrc_num_channels": d,
    }


SIZES: dict[str, dict] = {size: _size_fields(*row) for size, row in _SIZE_ROWS.items()}

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
