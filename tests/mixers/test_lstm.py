"""The `lstm` mixer (hf_ssm/modeling/mixer_lstm.py): one sequential torch.nn.LSTM layer, distinct from lstm_ssm.

The model-level invariants (cached decode, left padding, packing, reload, remote code) run for it in
tests/models/test_model_invariants.py like for every registered mixer; this file checks the mixer itself against
a plain LSTM loop and the rest of its contract.
"""

from __future__ import annotations

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_lstm import LSTMMixer
from hf_ssm.modeling.mixer_registry import mixer_class, mixer_names, mixer_spec, pattern_letters
from model_checks import hybrid_config, max_cached_decode_error, reload_is_bit_identical


def _mixer(hidden=8, lstm_hidden=6, seed=0):
    torch.manual_seed(seed)
    config = HybridSSMConfig(
        vocab_size=11, hidden_size=hidden, num_hidden_layers=1, mixers="T", lstm_hidden_size=lstm_hidden
    )
    return LSTMMixer(config, 0).eval()


def _reference(mixer, u, h, c, mask=None):
    """A plain Python loop of the LSTM equations with the mixer's weights (gate order i, f, g, o); a masked step
    keeps (h, c) and outputs the kept h."""
    lstm = mixer.lstm
    outs = []
    for t in range(u.shape[1]):
        z = u[:, t] @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
        i, f, g, o = z.chunk(4, dim=-1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        if mask is not None:
            keep = mask[:, t : t + 1]
            h_new, c_new = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
        h, c = h_new, c_new
        outs.append(h)
    return mixer.out_proj(torch.stack(outs, 1)), torch.stack([h, c], 1)


def test_registered_as_lstm_with_letter_t_and_distinct_from_lstm_ssm():
    """`lstm` is registered (letter T, its own field and LoRA group) next to, not instead of, `lstm_ssm`."""
    assert {"lstm", "lstm_ssm"} <= set(mixer_names())
    assert pattern_letters()["T"] == "lstm" and pattern_letters()["R"] == "lstm_ssm"
    assert mixer_class("lstm") is LSTMMixer and mixer_class("lstm_ssm") is not LSTMMixer
    spec = mixer_spec("lstm")
    assert spec.field_prefixes == ("lstm_",) and spec.lora_group == "lstm"
    config = hybrid_config("lstm", lstm_hidden_size=5)
    assert spec.state_shape(config) == (2, 5) and spec.state_width(config) == 10
    assert isinstance(LSTMMixer(config, 0).lstm, torch.nn.LSTM)


def test_forward_equals_the_lstm_equations_from_a_given_state():
    """Output and final (h, c) equal a loop of the LSTM equations started from the passed state."""
    mixer = _mixer()
    u, state = torch.randn(3, 7, 8), torch.randn(3, 2, 6)
    with torch.no_grad():
        y, final = mixer(u, state)
        ref_y, ref_final = _reference(mixer, u, state[:, 0], state[:, 1])
    torch.testing.assert_close(y, ref_y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, ref_final, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["right", "left", "gaps", "empty_row"])
def test_masked_steps_keep_the_state_and_output_the_kept_h(kind):
    """With any mask (right / left padding, gaps, a row with no real token) a masked step leaves (h, c) unchanged
    and outputs W_o of the kept h, exactly as the loop that skips it."""
    mixer = _mixer(seed=1)
    u, state = torch.randn(3, 9, 8), torch.randn(3, 2, 6)
    mask = torch.ones(3, 9, dtype=torch.bool)
    if kind == "right":
        mask[0, 5:], mask[2, 8:] = False, False
    elif kind == "left":
        mask[1, :4] = False
    elif kind == "gaps":
        mask[0, [1, 4, 5]], mask[1, [0, 8]] = False, False
    else:
        mask[2] = False
    with torch.no_grad():
        y, final = mixer(u, state, mask)
        ref_y, ref_final = _reference(mixer, u, state[:, 0], state[:, 1], mask)
    torch.testing.assert_close(y, ref_y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, ref_final, atol=1e-5, rtol=1e-5)
    if kind == "empty_row":
        assert torch.equal(final[2], state[2])


def test_decode_step_with_a_padded_row_keeps_its_state():
    """T = 1 with mask False leaves that row's state bit-identical; mask True makes one LSTM step."""
    mixer = _mixer(seed=2)
    u, state = torch.randn(2, 1, 8), torch.randn(2, 2, 6)
    with torch.no_grad():
        _, final = mixer(u, state, torch.tensor([[True], [False]]))
        _, ref = _reference(mixer, u, state[:, 0], state[:, 1])
    assert torch.equal(final[1], state[1])
    torch.testing.assert_close(final[0], ref[0], atol=1e-5, rtol=1e-5)


def test_model_cached_decode_equals_full_forward_and_reload_is_bit_identical(tmp_path):
    """In a T + attention model: prefill + cached one-token decoding gives the full forward's logits, and
    save_pretrained / from_pretrained reproduces the logits bit for bit."""
    config = hybrid_config("lstm")
    assert max_cached_decode_error(config) <= 1e-5
    assert reload_is_bit_identical(config, str(tmp_path))


def test_cache_holds_h_and_c():
    """The cache slot holds stack(h, c) (B, 2, H): its h is the last step's LSTM output."""
    model = HybridSSMForCausalLM(hybrid_config("lstm", lstm_hidden_size=5)).eval()
    ids = torch.randint(1, 37, (2, 6))
    seen = {}
    model.model.layers[0].mixer.lstm.register_forward_hook(lambda m, args, out: seen.update(h=out[1][0]))
    with torch.no_grad():
        state = model(ids, use_cache=True).cache.layers[0].recurrent_states[0]
    assert state.shape == (2, 2, 5) and state.dtype == torch.float32
    torch.testing.assert_close(state[:, 0], seen["h"][0])


def test_bad_hidden_size_is_refused():
    """lstm_hidden_size must be a positive int: ValueError naming it."""
    with pytest.raises(ValueError, match="lstm_hidden_size"):
        HybridSSMConfig(num_hidden_layers=1, mixers="T", lstm_hidden_size=0)
    with pytest.raises(ValueError, match="lstm_hiden_size"):
        HybridSSMConfig(num_hidden_layers=1, mixers="T", lstm_hiden_size=4)  # a misspelt field with its prefix


def test_init_sets_the_forget_bias_and_pytorch_ranges():
    """b_ih is 0 except the forget gate's 1; the other LSTM parameters lie in U(-1/sqrt(H), 1/sqrt(H))."""
    model = HybridSSMForCausalLM(hybrid_config("lstm", lstm_hidden_size=8))
    lstm = model.model.layers[0].mixer.lstm
    gates = lstm.bias_ih_l0.detach().view(4, 8)
    assert torch.equal(gates[1], torch.ones(8)) and not gates[[0, 2, 3]].any()
    for param in (lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_hh_l0):
        assert param.abs().max() <= 8**-0.5 and param.std() > 0.05
