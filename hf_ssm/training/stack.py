"""The model of the small classification drivers (state tracking, time series): their settings -> the
`HybridSSMConfig` keywords both build the same way.

Both settings dataclasses have `mixer` (what the pattern letter S stands for, or "attention" for the
attention-only baseline), `pattern` (one layer per letter), `hidden_size` d and PD-SSM's `num_heads`,
`state_size` (N per head) and `dict_size` (K). Each driver adds its own vocabulary, positions, labels and the
state widths of the other mixers.
"""

from __future__ import annotations

from ..modeling import HybridSSMConfig
from ..modeling.configuration_hybrid_ssm import ATTENTION


def stack_pattern(mixer: str, pattern: str) -> tuple[str, str]:
    """(mixers pattern, ssm_mixer) of a run: S = `mixer`; for the attention-only baseline every S becomes A
    (ssm_mixer then keeps the config's default, which no layer uses)."""
    if mixer == ATTENTION:
        return pattern.replace("S", "A"), HybridSSMConfig.ssm_mixer
    return pattern, mixer


def stack_config_fields(settings, pattern: str, ssm_mixer: str) -> dict:
    """The shared keywords: width d, SwiGLU width 2d, one layer per letter of `pattern`, d // 16 attention heads
    (at least 1), and PD-SSM's heads, per-head state size and dictionary size."""
    return dict(
        hidden_size=settings.hidden_size,
        intermediate_size=2 * settings.hidden_size,
        num_hidden_layers=len(pattern),
        num_attention_heads=max(1, settings.hidden_size // 16),
        mixers=pattern,
        ssm_mixer=ssm_mixer,
        pd_ssm_num_heads=settings.num_heads,
        pd_ssm_head_state_size=settings.state_size,
        pd_ssm_dict_size=settings.dict_size,
    )
