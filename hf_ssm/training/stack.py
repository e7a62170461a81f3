"""The model of the small classification drivers (state tracking, time series): their shared model settings
(`StackSettings`) -> the `HybridSSMConfig` keywords both build the same way.

Both settings dataclasses inherit `StackSettings`: `mixer` (what the pattern letter S stands for, or "attention"
for the attention-only baseline), `pattern` (one layer per letter), `hidden_size` d, PD-SSM's `num_heads` and
`state_size` (N per head), and `lru_group_size`. Any other HybridSSMConfig field (PD-SSM's dictionary size
`pd_ssm_dict_size`, ...) is an `extra_config` key. Each driver adds its own vocabulary, positions, labels and the
state widths of the other mixers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..modeling import PAPER_PD_SSM_LAYER, HybridSSMConfig
from ..modeling.configuration_hybrid_ssm import ATTENTION, PATTERN_LETTERS
from .cli import comma_list
from .settings_base import MixerSettings, help_field

PATTERN_HELP = "one layer per letter: S = the mixer, " + ", ".join(f"{k} {v}" for k, v in PATTERN_LETTERS.items())


@dataclass
class StackSettings(MixerSettings):
    """The model of a state-tracking or time-series run: a stack of mixer layers, one per pattern letter."""

    pattern: str = help_field(PATTERN_HELP, default="S")
    hidden_size: int = help_field("model width d", default=64)
    state_size: int = help_field(
        "PD-SSM: N, the state size of each head; the other mixers' state widths follow from it", default=8
    )
    num_heads: int = help_field("PD-SSM heads H (independent automata)", default=16)
    lru_group_size: int = help_field("m: the BD-LRU block size, the H-LRU order", default=4)


# The paper's PD-SSM layer without its heads and N, which are the settings' own (`num_heads`, `state_size`): what
# both drivers' models start from under their extra_config (the config's defaults when their recipes were written).
PAPER_PD_SSM_MODE = {
    k: v for k, v in PAPER_PD_SSM_LAYER.items() if k not in ("pd_ssm_num_heads", "pd_ssm_head_state_size")
}


def stack_pattern(mixer: str, pattern: str) -> tuple[str, str]:
    """(mixers pattern, ssm_mixer) of a run: S = `mixer`; for the attention-only baseline every S becomes A
    (ssm_mixer then keeps the config's default, which no layer uses)."""
    if mixer == ATTENTION:
        return pattern.replace("S", "A"), HybridSSMConfig.ssm_mixer
    return pattern, mixer


def stack_config_fields(settings, pattern: str, ssm_mixer: str) -> dict:
    """The shared keywords: width d, SwiGLU width 2d, one layer per letter of `pattern`, d // 16 attention heads
    (at least 1), and PD-SSM's heads and per-head state size."""
    return dict(
        hidden_size=settings.hidden_size,
        intermediate_size=2 * settings.hidden_size,
        num_hidden_layers=len(pattern),
        num_attention_heads=max(1, settings.hidden_size // 16),
        mixers=pattern,
        ssm_mixer=ssm_mixer,
        pd_ssm_num_heads=settings.num_heads,
        pd_ssm_head_state_size=settings.state_size,
    )


def check_ablations(text, mixers: list[str], block_type: str) -> None:
    """ValueError unless `test_ablations` names distinct mixers of the stack's layers (`mixers`: their names), in
    pre-norm residual blocks (elsewhere a zeroed mixer's output is the block's whole output, not a branch left
    out)."""
    if not isinstance(text, str):
        raise ValueError(f"`test_ablations` must be a comma-separated string of mixers, got {text!r}")
    names = comma_list(text)
    if not names:
        return
    if any(name not in mixers for name in names) or len(set(names)) != len(names):
        raise ValueError(f"`test_ablations` must name distinct mixers of the model's layers, {mixers}; got {text!r}")
    if block_type != "pre_norm_residual":
        raise ValueError(
            f"`test_ablations` zeroes a mixer's residual branch: it needs block_type 'pre_norm_residual', got "
            f"{block_type!r}"
        )
