"""BD-LRU, H-LRU and diag_lru (mixer_lru.py, docs/design.md §5): each mixer's recurrence written out as a literal
loop, the normalisations and the state bound, a hand-set automaton, padding, cache, dtype, init, settings and
checkpoints. The three share one module and most tests run on all three (diag_lru is BD-LRU with m = 1); the block
scans they run are tested in tests/ops/test_block_scans.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_ssm import HybridSSMForCausalLM
from hf_ssm.modeling.config_values import LRU_NORMALIZATIONS
from hf_ssm.modeling.mixer_lru import (
    BlockDiagonalLRUMixer,
    DiagonalLRUMixer,
    HigherOrderLRUMixer,
    normalize_gates,
)
from hf_ssm.ops.block import block_scan, companion_matrices
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config

BOUNDED = [n for n in LRU_NORMALIZATIONS if n != "none"]


def lru_config(mixer: str, **overrides):
    """A one-layer config whose only layer is `mixer` (bd_lru / h_lru / diag_lru)."""
    settings = dict(hidden_size=8, lru_total_state_size=12, lru_group_size=3)
    settings.update(overrides)
    return tiny_config([mixer], **settings)


MIXER_CLASSES = {"bd_lru": BlockDiagonalLRUMixer, "h_lru": HigherOrderLRUMixer, "diag_lru": DiagonalLRUMixer}


def make_mixer(mixer: str, **overrides):
    return MIXER_CLASSES[mixer](lru_config(mixer, **overrides), 0)


# --------------------------------------------------------------------------------- recurrences as written


@pytest.mark.parametrize("m", [2, 3])
def test_h_lru_literal_loop_equals_companion_scan(m):
    """H-LRU output == h_t = sum_k a_{t,k} h_{t-k} + beta_t v_t written as a loop over past values (h_<=0 = 0),
    read out as W_o [h_t; ...; h_{t-m+1}]. Guards the companion matrix orientation: its transpose must differ."""
    mixer = make_mixer("h_lru", lru_group_size=m, lru_total_state_size=4 * m, lru_normalization="tanh_l1")
    nn.init.normal_(mixer.gate_proj.weight, std=1.0)
    u = torch.randn(2, 11, 8)
    p, v = mixer.gates(u)
    history = [torch.zeros(2, 4) for _ in range(m)]  # h_{t-1}, h_{t-2}, ... (most recent first)
    features = []
    for t in range(u.shape[1]):
        h = sum(p[:, t, :, k - 1] * history[k - 1] for k in range(1, m + 1)) + p[:, t, :, m] * v[:, t]
        history = [h, *history[:-1]]
        features.append(torch.stack(history, dim=-1))  # (B, N, m): lag 0 .. m-1 per channel
    expected = mixer.out_proj(torch.stack(features, dim=1).flatten(2))
    torch.testing.assert_close(mixer(u)[0], expected, atol=1e-5, rtol=1e-5)

    a, v = mixer.scan_inputs(u)
    wrong, _ = block_scan(companion_matrices(a).transpose(-1, -2), nn.functional.pad(v.unsqueeze(-1), (0, m - 1)))
    assert not torch.allclose(mixer.out_proj(wrong.flatten(2)), expected, atol=1e-3)


def test_bd_lru_literal_loop_equals_scan():
    """BD-LRU output == h_t[i] = sum_j A_t[i, j] h_{t-1}[j] + beta_t[i] v_t[i] per block, row i = output i,
    written element by element; y_t = W_o vec(h_t). Guards the row/column orientation of the blocks."""
    mixer = make_mixer("bd_lru", lru_normalization="sigmoid_l1")
    nn.init.normal_(mixer.gate_proj.weight, std=1.0)
    u = torch.randn(1, 9, 8)
    p, v = mixer.gates(u)
    n, m = mixer.num_groups, mixer.group_size
    h = torch.zeros(n, m)
    features = []
    for t in range(u.shape[1]):
        new = torch.zeros(n, m)
        for blk in range(n):
            for i in range(m):
                row = sum(p[0, t, blk, i, j] * h[blk, j] for j in range(m))
                new[blk, i] = row + p[0, t, blk, i, m] * v[0, t, blk, i]
        h = new
        features.append(h.flatten())
    expected = mixer.out_proj(torch.stack(features)).unsqueeze(0)
    torch.testing.assert_close(mixer(u)[0], expected, atol=1e-5, rtol=1e-5)


def test_m1_is_the_diagonal_lru():
    """diag_lru is BD-LRU with m = 1 (a subclass, not a copy), and with m = 1 BD-LRU and H-LRU both compute
    h_t = a_t h_{t-1} + (1 - a_t) v_t (softmax gates), so with the same weights all three agree."""
    assert issubclass(DiagonalLRUMixer, BlockDiagonalLRUMixer)
    assert "forward" not in vars(DiagonalLRUMixer) and "scan_inputs" not in vars(DiagonalLRUMixer)
    diag = make_mixer("diag_lru", lru_total_state_size=6)
    assert (diag.num_groups, diag.group_size) == (6, 1)
    bd = make_mixer("bd_lru", lru_total_state_size=6, lru_group_size=1)
    h = make_mixer("h_lru", lru_total_state_size=6, lru_group_size=1)
    nn.init.normal_(diag.gate_proj.weight, std=1.0)
    for other in (bd, h):
        other.load_state_dict(diag.state_dict())
    u = torch.randn(2, 10, 8)
    y = diag(u)[0]
    torch.testing.assert_close(bd(u)[0], y)
    torch.testing.assert_close(h(u)[0], y)

    g = diag.gate_proj(u).view(2, 10, 6, 2)
    a, v = torch.sigmoid(g[..., 0] - g[..., 1]), diag.in_proj(u)
    state, states = torch.zeros(2, 6), []
    for t in range(10):
        state = a[:, t] * state + (1 - a[:, t]) * v[:, t]
        states.append(state)
    torch.testing.assert_close(y, diag.out_proj(torch.stack(states, dim=1)), atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------------------- normalisations


def test_normalizations():
    """Each normalisation makes a row's |gates| sum to one: softmax / sigmoid_l1 / relu_l1 non-negative,
    tanh_l1 signed; an all-negative relu row and an all-zero tanh row give zeros (no NaN); `none` is the identity;
    an unknown name raises ValueError naming the field."""
    g = torch.randn(5, 7) * 3
    for kind in BOUNDED:
        p = normalize_gates(g, kind)
        torch.testing.assert_close(p.abs().sum(-1), torch.ones(5))
        assert (p >= 0).all() == (kind != "tanh_l1")
    assert torch.equal(normalize_gates(-g.abs() - 1, "relu_l1"), torch.zeros(5, 7))
    assert torch.equal(normalize_gates(torch.zeros(5, 7), "tanh_l1"), torch.zeros(5, 7))
    assert torch.equal(normalize_gates(g, "none"), g)
    with pytest.raises(ValueError, match="lru_normalization"):
        normalize_gates(g, "l2")


def test_softmax_gates_equal_torch_softmax_down_the_last_axis():
    """The softmax normalisation (computed down the gate axis moved first, for speed) equals torch.softmax over the
    last axis, values and gradients, on the (B, T, N, m, m + 1) layout of the gates."""
    g = torch.randn(3, 5, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 5, 4, 2, 3, dtype=torch.float64)
    fast = normalize_gates(g, "softmax")
    reference = torch.softmax(g, dim=-1)
    torch.testing.assert_close(fast, reference, atol=1e-15, rtol=0)
    (grad_fast,) = torch.autograd.grad((fast * weights).sum(), g)
    (grad_reference,) = torch.autograd.grad((reference * weights).sum(), g)
    torch.testing.assert_close(grad_fast, grad_reference, atol=1e-15, rtol=0)


def _state_and_value_peaks(mixer, steps=10_000):
    u = 3 * torch.randn(1, steps, 8)
    with torch.no_grad():
        _, v = mixer.gates(u)
        states, _ = mixer.states(u)
    return states.abs().max().item(), v.abs().max().item()


@pytest.mark.parametrize("normalization", BOUNDED)
@pytest.mark.parametrize("mixer", ["bd_lru", "h_lru", "diag_lru"])
def test_state_bounded_by_largest_input(mixer, normalization):
    """docs/design.md §5 stability: over 10 000 steps of random input, max |h_t| <= max |v_t| (up to rounding)."""
    lru = make_mixer(mixer, lru_group_size=4, lru_total_state_size=16, lru_normalization=normalization)
    nn.init.normal_(lru.gate_proj.weight, std=1.0)  # gates far from uniform: near-one-hot and signed rows
    nn.init.normal_(lru.gate_proj.bias, std=1.0)
    state_peak, value_peak = _state_and_value_peaks(lru)
    assert state_peak <= value_peak * (1 + 1e-5), (state_peak, value_peak)


@pytest.mark.parametrize("mixer", ["bd_lru", "h_lru"])
def test_none_normalization_is_unbounded(mixer):
    """`none` (raw gates) has no such bound: the same check fails, so the bound above is not vacuous."""
    lru = make_mixer(mixer, lru_group_size=4, lru_total_state_size=16, lru_normalization="none")
    nn.init.normal_(lru.gate_proj.weight, std=1.0)
    state_peak, value_peak = _state_and_value_peaks(lru, steps=500)
    assert not state_peak <= value_peak, (state_peak, value_peak)


# ------------------------------------------------------------------------------------- automaton example


def _parity_block(normalization: str, scale: float) -> BlockDiagonalLRUMixer:
    """One BD-LRU block (N = 1, m = 2) over one-hot inputs {0: start, 1: a, 2: b} with hand-set gates:
    start writes e_0 through the input gate, a keeps the state (identity), b swaps the two entries."""
    mixer = make_mixer(
        "bd_lru", hidden_size=3, lru_total_state_size=2, lru_group_size=2, lru_normalization=normalization
    )
    logits = torch.zeros(1, 2, 3, 3)  # (block, row i, [A[i, 0], A[i, 1], beta_i], token)
    logits[0, 0, 2, 0] = logits[0, 1, 2, 0] = 1  # start: both rows take the input
    logits[0, 0, 0, 1] = logits[0, 1, 1, 1] = 1  # a: identity
    logits[0, 0, 1, 2] = logits[0, 1, 0, 2] = 1  # b: swap
    with torch.no_grad():
        mixer.gate_proj.weight.copy_(scale * logits.view(6, 3))
        mixer.gate_proj.bias.zero_()
        mixer.in_proj.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    return mixer


@pytest.mark.parametrize("normalization, scale, atol", [("relu_l1", 1.0, 0.0), ("softmax", 40.0, 1e-6)])
def test_bd_lru_block_runs_a_two_state_automaton(normalization, scale, atol):
    """A hand-set one-block BD-LRU (m = 2) tracks parity: after `start w` its state is e_(#b in w mod 2), over a
    long word through the parallel scan. The swap needs the off-diagonal entries of the block: a diagonal LRU
    (diag_lru) with any gates never moves the mark from h[0] to h[1] when the input is zero."""
    mixer = _parity_block(normalization, scale)
    word = torch.randint(1, 3, (1, 300))
    tokens = torch.cat([torch.zeros(1, 1, dtype=torch.long), word], dim=1)
    with torch.no_grad():
        states, _ = mixer.states(nn.functional.one_hot(tokens, 3).float())
    parity = torch.cat([torch.zeros(1, 1, dtype=torch.long), (word == 2).cumsum(1) % 2], dim=1)
    torch.testing.assert_close(states[0, :, 0, 0], (parity[0] == 0).float(), atol=atol, rtol=0)
    torch.testing.assert_close(states[0, :, 0, 1], (parity[0] == 1).float(), atol=atol, rtol=0)

    diag = make_mixer("diag_lru", hidden_size=3, lru_total_state_size=2)
    with torch.no_grad():
        nn.init.normal_(diag.gate_proj.weight, std=5.0)
        diag.in_proj.weight.copy_(mixer.in_proj.weight)
        diag_states, _ = diag.states(nn.functional.one_hot(torch.tensor([[0, 2, 2, 1, 2]]), 3).float())
    assert diag_states[0, 0, 0, 0] > 0 and (diag_states[0, :, 1, 0] == 0).all()  # h[1] can never become non-zero


# ----------------------------------------------------------------------------- masks, cache, dtype, init


@pytest.mark.parametrize("mixer", ["bd_lru", "h_lru", "diag_lru"])
def test_padding_leaves_state_unchanged(mixer):
    """Masked-out steps (padding, anywhere in the sequence) are identity transitions with zero input: outputs at
    real positions and the final state equal those of the same sequence with the padding removed."""
    lru = make_mixer(mixer)
    u = torch.randn(2, 12, 8)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, :4] = False  # left padding
    mask[1, [2, 7, 8]] = False  # holes
    start = torch.randn(2, lru.num_groups, lru.group_size)
    y, final = lru(u, state=start, mask=mask)
    for row in range(2):
        y_ref, final_ref = lru(u[row : row + 1, mask[row]], state=start[row : row + 1])
        torch.testing.assert_close(y[row, mask[row]], y_ref[0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(final[row], final_ref[0], atol=1e-6, rtol=1e-5)


@torch.no_grad()
def test_left_padded_batch_matches_unpadded():
    """In a full model, a left-padded row gives the logits of the same tokens without padding: the LRU layers skip
    masked positions exactly (the masked tokens are arbitrary ids, so nothing relies on the pad embedding)."""
    model = HybridSSMForCausalLM(tiny_config("BAHD", lru_total_state_size=12, lru_group_size=3)).eval()
    ids = torch.randint(1, 37, (2, 9))
    attention_mask = torch.ones(2, 9, dtype=torch.long)
    attention_mask[0, :4] = 0
    padded = model(ids, attention_mask=attention_mask).logits
    alone = model(ids[:1, 4:]).logits
    torch.testing.assert_close(padded[0, 4:], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pattern", ["AB", "HA", "ADA", "BAHD"])
@pytest.mark.parametrize("normalization", ["softmax", "tanh_l1"])
def test_cached_decode_matches_full_forward(pattern, normalization):
    """Prefill + one-token-at-a-time decode with the cache gives the full-sequence logits."""
    config = tiny_config(pattern, lru_total_state_size=12, lru_group_size=3, lru_normalization=normalization)
    assert max_cached_decode_error(config) < 1e-5


def test_cached_state_has_fixed_size():
    """Each LRU layer caches one float32 tensor (B, N, m), whatever the sequence length."""
    config = tiny_config("BAHD", lru_total_state_size=12, lru_group_size=3)
    model = HybridSSMForCausalLM(config).eval()
    expected = {0: (2, 4, 3), 2: (2, 4, 3), 3: (2, 12, 1)}
    for steps in (3, 40):
        with torch.no_grad():
            cache = model(torch.randint(1, 37, (2, steps)), use_cache=True).cache
        for layer, shape in expected.items():
            state = cache.layers[layer].recurrent_states[0]
            assert tuple(state.shape) == shape and state.dtype == torch.float32


@pytest.mark.parametrize("mixer", ["bd_lru", "h_lru"])
def test_bf16_autocast_keeps_scan_in_float32(mixer):
    """Under bf16 autocast the gates and the scan stay float32 (the state is float32) and the output matches the
    float32 forward to bf16 precision."""
    lru = make_mixer(mixer)
    u = torch.randn(2, 20, 8)
    y32, final32 = lru(u)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y16, final16 = lru(u.bfloat16())
    assert final16.dtype == torch.float32 and y16.dtype == torch.bfloat16
    torch.testing.assert_close(final16, final32, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(y16.float(), y32, atol=2e-2, rtol=2e-2)


def test_init_follows_design():
    """Projections ~ N(0, initializer_range = 0.02), zero gate bias (docs/design.md §5), after the model's post_init."""
    model = HybridSSMForCausalLM(tiny_config("BHD", hidden_size=64, lru_total_state_size=64, lru_group_size=4))
    for layer in model.model.layers:
        mixer = layer.mixer
        assert torch.equal(mixer.gate_proj.bias, torch.zeros_like(mixer.gate_proj.bias))
        for proj in (mixer.gate_proj, mixer.in_proj, mixer.out_proj):
            assert abs(proj.weight.std().item() - 0.02) < 0.003, (type(mixer).__name__, proj.weight.std())


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(lru_group_size=0), "lru_group_size"),
        (dict(lru_group_size=2.0), "lru_group_size"),
        (dict(lru_total_state_size=0), "lru_total_state_size"),
        (dict(lru_normalization="l2"), "lru_normalization"),
        (dict(lru_total_state_size=10, lru_group_size=4), "lru_total_state_size"),
    ],
)
@pytest.mark.parametrize("pattern", ["AB", "H"])
def test_invalid_settings_raise(overrides, field, pattern):
    """Invalid LRU settings raise ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        tiny_config(pattern, **overrides)


def test_valid_settings_pass():
    """diag_lru ignores the block size (m = 1), so a width not divisible by it is fine; non-LRU configs never
    check the lru_ fields."""
    assert tiny_config("DA", lru_total_state_size=10, lru_group_size=4).mixers == ["diag_lru", "attention"]
    tiny_config("PA", lru_group_size=0)


# ----------------------------------------------------------------------------------------- checkpoints


def test_save_reload_is_bit_identical(tmp_path):
    """save_pretrained -> from_pretrained reproduces the logits exactly, safetensors only."""
    assert reload_is_bit_identical(tiny_config("BAHD", lru_total_state_size=12, lru_group_size=3), str(tmp_path))


def test_trust_remote_code_loads_without_hf_ssm(tmp_path):
    """A checkpoint with every LRU mixer loads with trust_remote_code where hf_ssm cannot be imported (the exported
    code must carry mixer_lru.py and the block scans, ops_block_parallel.py) and gives identical logits."""
    model = HybridSSMForCausalLM(tiny_config("BAHD", lru_total_state_size=12, lru_group_size=3))
    assert {"mixer_lru.py", "ops_block_parallel.py"} <= assert_loads_without_hf_ssm(model, tmp_path / "lru")
