"""The time-series classifier (HybridSSMForTimeSeriesClassification, modeling_timeseries.py): reload and padding
invariance for several mixers, and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForTimeSeriesClassification


def tiny_config(mixer: str = "pd_ssm", **kw) -> HybridSSMConfig:
    options = dict(
        vocab_size=1, hidden_size=16, intermediate_size=32, num_hidden_layers=2, mixers=f"S{'A' if kw.pop('attn', False) else 'S'}",
        ssm_mixer=mixer, num_attention_heads=2, pd_ssm_head_state_size=4, pd_ssm_dict_size=4, lru_total_state_size=8,
        lrc_num_channels=8, input_channels=3, num_labels=4, classifier_pooling="mean",
    )  # fmt: skip
    options.update(kw)
    return HybridSSMConfig(**options)


@pytest.mark.parametrize("mixer", ["pd_ssm", "lrc_ssm", "diag_lru"])
def test_model_save_reload_and_padding_invariance(mixer, tmp_path):
    """A saved model reloads with identical logits, and right padding (masked) does not change a series' logits."""
    model = HybridSSMForTimeSeriesClassification(tiny_config(mixer, attn=True)).eval()
    x = torch.randn(2, 9, 3)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 5:] = 0
    x[1, 5:] = 0
    with torch.no_grad():
        logits = model(x, attention_mask=mask).logits
        alone = model(x[1:, :5]).logits
    assert logits.shape == (2, 4)
    torch.testing.assert_close(logits[1:], alone, atol=1e-5, rtol=1e-4)
    model.save_pretrained(tmp_path)
    reloaded = HybridSSMForTimeSeriesClassification.from_pretrained(tmp_path).eval()
    assert reloaded.config.input_channels == 3
    with torch.no_grad():
        torch.testing.assert_close(reloaded(x, attention_mask=mask).logits, logits)
    out = model(x, attention_mask=mask, labels=torch.tensor([0, 3]))
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)


def test_model_rejects_bad_input():
    """Wrong channel count, NaN (unimputed missing values) and a config without input_channels raise ValueError."""
    model = HybridSSMForTimeSeriesClassification(tiny_config("diag_lru"))
    with pytest.raises(ValueError, match=r"\(batch, seq_len, 3\)"):
        model(torch.randn(2, 5, 4))
    bad = torch.randn(2, 5, 3)
    bad[0, 1, 2] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        model(bad)
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.randn(2, 5, 3), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="`input_channels` must be set"):
        HybridSSMForTimeSeriesClassification(tiny_config("diag_lru", input_channels=None))
    with pytest.raises(ValueError, match="`input_channels` must be an integer >= 1"):
        tiny_config("diag_lru", input_channels=0)
