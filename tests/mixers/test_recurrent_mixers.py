"""Layer-level properties the LRU mixers (bd_lru, h_lru, diag_lru) and the LrcSSM-family mixers (lrc, gru, mgu,
lstm) share: token-by-token decode steps equal one full forward, a T = 1 step runs neither the chunked scans nor the
DEER solver, and under bf16 autocast the projections compute in bf16 while the scan stays in float32. (The PD-SSM
mixer's counterparts are in test_pd_ssm.py; the model-level invariants in tests/models/test_model_invariants.py.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hf_ssm.modeling.mixer_lrc as mixer_lrc
from hf_ssm.modeling.configuration_hybrid_ssm import HybridSSMConfig
from hf_ssm.modeling.mixer_lrc import LRC_MIXER_CLASSES
from hf_ssm.modeling.mixer_lru import BlockDiagonalLRUMixer, DiagonalLRUMixer, HigherOrderLRUMixer
from hf_ssm.ops import dispatch


@pytest.fixture(autouse=True)
def _no_backend_override(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)


LRU_MIXERS = {"bd_lru": BlockDiagonalLRUMixer, "h_lru": HigherOrderLRUMixer, "diag_lru": DiagonalLRUMixer}
ALL_MIXERS = [*LRU_MIXERS, *LRC_MIXER_CLASSES]


def _mixer(name):
    config = HybridSSMConfig(
        hidden_size=8, num_hidden_layers=1, mixers=[name], lru_total_state_size=6, lru_group_size=3, lrc_num_channels=5
    )
    cls = LRU_MIXERS.get(name) or LRC_MIXER_CLASSES[name]
    mixer = cls(config, 0)
    for module in mixer.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.5)
    return mixer


@pytest.mark.parametrize("name", ALL_MIXERS)
def test_decode_steps_equal_the_full_forward(name):
    """Feeding T tokens one at a time, each call T = 1 with the previous final state, gives the outputs and final
    state of one full forward, for every non-PD SSM mixer (a masked token keeps the state in both)."""
    mixer = _mixer(name)
    u = torch.randn(2, 9, 8)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :3] = False
    with torch.no_grad():
        y, final = mixer(u, mask=mask)
        state, outputs = None, []
        for t in range(9):
            y_t, state = mixer(u[:, t : t + 1], state=state, mask=mask[:, t : t + 1])
            outputs.append(y_t)
    torch.testing.assert_close(torch.cat(outputs, dim=1), y, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(state, final, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ALL_MIXERS)
def test_decode_step_runs_no_chunk_machinery(name, monkeypatch):
    """With T = 1 a mixer does one state update: neither the chunked scans nor the DEER solver run."""

    def fail(*args, **kwargs):
        raise AssertionError("chunk machinery ran for T = 1")

    for name_ in ("torch_block_scan", "torch_companion_scan", "torch_diag_scan"):
        monkeypatch.setattr(dispatch, name_, fail)
    monkeypatch.setattr(mixer_lrc, "deer_solve", fail)
    mixer = _mixer(name)
    state = mixer.initial_state(2) + 0.1
    y, final = mixer(torch.randn(2, 1, 8), state=state)
    assert y.shape == (2, 1, 8) and final.shape == state.shape


@pytest.mark.parametrize("name", ALL_MIXERS)
def test_autocast_runs_projections_in_bf16_and_scan_in_float32(name, monkeypatch):
    """Under torch.autocast(bfloat16) every projection of an LRU / LRC mixer computes in bf16, while the scan (or
    the DEER solve) receives float32 inputs and returns a float32 state."""
    mixer = _mixer(name)
    seen_linear, seen_scan = {}, []
    for proj_name, module in mixer.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda mod, args, out, n=proj_name: seen_linear.__setitem__(n, out.dtype))
    real_ops = dispatch.ScanOps

    class SpyOps(real_ops):
        def _record(self, tensors):
            seen_scan.append({t.dtype for t in tensors if t is not None})

        def block_scan(self, A, b, initial_state=None, mask=None, **kw):
            self._record((A, b, initial_state))
            return super().block_scan(A, b, initial_state, mask, **kw)

        def companion_scan(self, a, v, initial_state=None, mask=None, **kw):
            self._record((a, v, initial_state))
            return super().companion_scan(a, v, initial_state, mask, **kw)

    monkeypatch.setattr(dispatch, "_bound_ops", {})
    monkeypatch.setattr(dispatch, "ScanOps", SpyOps)
    real_solve = mixer_lrc.deer_solve

    def spy_solve(cell, inputs, weights, x0, mask=None, options=None):
        seen_scan.append({t.dtype for t in (*inputs, *weights, x0)})
        return real_solve(cell, inputs, weights, x0, mask, options)

    monkeypatch.setattr(mixer_lrc, "deer_solve", spy_solve)
    u = torch.randn(2, 12, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, final = mixer(u)
    assert seen_linear and set(seen_linear.values()) == {torch.bfloat16}, seen_linear
    assert seen_scan and all(s == {torch.float32} for s in seen_scan), seen_scan
    assert final.dtype == torch.float32
    y32, final32 = mixer(u)
    torch.testing.assert_close(final, final32, atol=5e-2, rtol=5e-2)
