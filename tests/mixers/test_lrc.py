"""LrcSSM and its diagonal GRU / MGU / LSTM variants (docs/design.md §6) as mixers of the hybrid model: cached
decode, reload, padding, cache states, the sequential solver, bf16 autocast, pattern letters, config checks and
remote-code loading. Their scans are tested in tests/ops/test_diag_scans.py, the DEER solver on their cells in
tests/ops/test_deer.py."""

from __future__ import annotations

import pytest
import torch

import hf_ssm.modeling.mixer_lrc as mixer_lrc
from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_lrc import LRC_MIXER_CLASSES
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config

MIXERS = list(LRC_MIXER_CLASSES)


@pytest.mark.parametrize("name", MIXERS)
def test_cached_decode_equals_full_forward(name):
    """Prefill (DEER) + token-by-token decoding (exact single steps) == the full forward, in an "SA" hybrid."""
    config = tiny_config("SA", ssm_mixer=name, lrc_num_channels=8)
    assert max_cached_decode_error(config, steps=17, prefill=9) <= 1e-4


def test_cached_decode_without_eps_input_term():
    """`lrc_input_term=False` (eps without W_eps u) also decodes exactly and projects only f and z."""
    config = tiny_config("SL", ssm_mixer="lrc_ssm", lrc_num_channels=8, lrc_input_term=False)
    assert HybridSSMForCausalLM(config).model.layers[1].mixer.in_proj.out_features == 2 * 8
    assert max_cached_decode_error(config) <= 1e-4


def test_save_reload_is_bit_identical(tmp_path):
    """save_pretrained -> from_pretrained reproduces the logits of every LrcSSM-family mixer exactly."""
    assert reload_is_bit_identical(tiny_config("LGMRA", lrc_num_channels=8), str(tmp_path))


def test_reload_keeps_trained_cell_parameters(tmp_path):
    """Loading does not re-initialise the cells' own parameters (gate biases, gains, leaks)."""
    model = HybridSSMForCausalLM(tiny_config("LR", lrc_num_channels=8))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    model.save_pretrained(tmp_path)
    again = HybridSSMForCausalLM.from_pretrained(tmp_path)
    for (name, p), q in zip(model.named_parameters(), again.parameters()):
        assert torch.equal(p, q), name


def test_padding_leaves_state_unchanged():
    """Left padding of any token values leaves every LrcSSM-family final state where no padding leaves it."""
    model = HybridSSMForCausalLM(tiny_config("LGMR", lrc_num_channels=8)).eval()
    seq = torch.randint(1, 37, (1, 7))
    padded = torch.cat([torch.randint(1, 37, (1, 5)), seq], dim=1)
    mask = torch.cat([torch.zeros(1, 5), torch.ones(1, 7)], dim=1).long()
    with torch.no_grad():
        c1, c2 = model(seq, use_cache=True).cache, model(padded, attention_mask=mask, use_cache=True).cache
    for i in range(4):
        s1, s2 = c1.layers[i].recurrent_states[0], c2.layers[i].recurrent_states[0]
        assert torch.allclose(s1, s2, atol=1e-6), i


def test_state_shapes_solve_info_and_bad_state():
    """Cache states are (B, D) ((B, 2, D) for the LSTM, planar); a DEER forward exposes its SolveInfo; a wrong state raises."""
    model = HybridSSMForCausalLM(tiny_config("LR", lrc_num_channels=8)).eval()
    with torch.no_grad():
        cache = model(torch.randint(1, 37, (3, 20)), use_cache=True).cache
    assert cache.layers[0].recurrent_states[0].shape == (3, 8)
    assert cache.layers[1].recurrent_states[0].shape == (3, 2, 8)
    info = model.model.layers[0].mixer.last_solve_info
    assert info.converged and 1 <= info.iterations <= 20 and info.residual < 1e-4
    with pytest.raises(ValueError, match="`state`"):
        model.model.layers[1].mixer(torch.randn(3, 4, 32), state=torch.zeros(3, 8))


def test_sequential_solver_gives_same_model_outputs_and_gradients():
    """lrc_solver="sequential" and "deer" give the same logits and parameter gradients for a whole hybrid model."""
    ids = torch.randint(1, 37, (2, 30))
    results = []
    for solver in ("deer", "sequential"):
        torch.manual_seed(0)
        model = HybridSSMForCausalLM(tiny_config("LAGMR", lrc_num_channels=8, lrc_solver=solver))
        out = model(ids, labels=ids, use_cache=False)
        out.loss.backward()
        results.append((out.logits, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (logits_a, grads_a), (logits_b, grads_b) = results
    assert torch.allclose(logits_a, logits_b, atol=1e-5)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], atol=1e-5, rtol=1e-4), name


def test_bfloat16_autocast_keeps_solver_in_float32(monkeypatch):
    """Under bf16 autocast the DEER solver receives float32 inputs, weights and state; logits stay close to fp32."""
    model = HybridSSMForCausalLM(tiny_config("LAR", lrc_num_channels=8)).eval()
    ids = torch.randint(1, 37, (2, 25))
    seen = []
    real = mixer_lrc.deer_solve

    def spy(cell, inputs, weights, x0, mask=None, options=None):
        seen.append({t.dtype for t in (*inputs, *weights, x0)})
        return real(cell, inputs, weights, x0, mask, options)

    monkeypatch.setattr(mixer_lrc, "deer_solve", spy)
    with torch.no_grad():
        ref = model(ids).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(ids).logits
    assert seen and all(s == {torch.float32} for s in seen)
    assert torch.allclose(low.float(), ref, atol=5e-2)


def test_pattern_letters_name_the_mixers():
    """Pattern letters L, G, M, R are lrc_ssm, gru_ssm, mgu_ssm, lstm_ssm; S stands for `ssm_mixer`."""
    config = tiny_config("LGMRS", ssm_mixer="gru_ssm")
    assert config.mixers == ["lrc_ssm", "gru_ssm", "mgu_ssm", "lstm_ssm", "gru_ssm"]


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"lrc_num_channels": 0}, "lrc_num_channels"),
        ({"deer_max_iter": 0}, "deer_max_iter"),
        ({"deer_tol": -1e-3}, "deer_tol"),
        ({"deer_damping": 0.0}, "deer_damping"),
        ({"deer_damping": 1.5}, "deer_damping"),
        ({"deer_max_growth": 1.0}, "deer_max_growth"),
        ({"lrc_solver": "newton"}, "lrc_solver"),
        ({"lrc_input_term": "yes"}, "lrc_input_term"),
    ],
)
def test_invalid_config_raises_naming_the_field(overrides, field):
    """Bad LrcSSM / DEER settings raise a ValueError that names the field."""
    with pytest.raises(ValueError, match=f"`{field}`"):
        HybridSSMConfig(mixers="LA", num_hidden_layers=2, num_attention_heads=2, hidden_size=16, **overrides)


def test_trust_remote_code_loads_lrc_mixers_without_hf_ssm(tmp_path):
    """A checkpoint with every LrcSSM-family mixer loads with trust_remote_code where hf_ssm cannot be imported
    (the DEER solver, the diagonal scan and mixer_lrc.py are exported with it) and gives identical logits."""
    model = HybridSSMForCausalLM(tiny_config("LGMRA", lrc_num_channels=8))
    files = {"ops_deer_parallel.py", "ops_deer_reference.py", "ops_diag_parallel.py", "mixer_lrc.py"}
    assert files <= assert_loads_without_hf_ssm(model, tmp_path / "lrc")
