"""PD-SSM options: one-hot initial state, magnitude-only / unit diagonal, identity-leaning dictionary init."""

from __future__ import annotations

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from model_checks import max_cached_decode_error, reload_is_bit_identical, tiny_config


def mixer(**overrides) -> PDSSMMixer:
    torch.manual_seed(0)
    return PDSSMMixer(tiny_config("S", **overrides), 0).eval()


@torch.no_grad()
def test_one_hot_initial_state_equals_passing_e0():
    """state=None with pd_ssm_initial_state="one_hot" is exactly the run started from e_0 in every head."""
    layer = mixer(pd_ssm_initial_state="one_hot")
    u = torch.randn(3, 11, 32)
    e0 = torch.zeros(3, 2, 5, dtype=torch.complex64)
    e0[..., 0] = 1
    implicit_out, implicit_state = layer(u)
    explicit_out, explicit_state = layer(u, state=e0)
    assert torch.equal(implicit_out, explicit_out) and torch.equal(implicit_state, explicit_state)
    assert torch.equal(layer.initial_state(3), e0)
    zeros_out, _ = mixer(pd_ssm_initial_state="zeros")(u)
    assert not torch.allclose(zeros_out, implicit_out)  # the option changes the computation


@torch.no_grad()
def test_head_basis_initial_state_starts_head_h_at_e_h():
    """pd_ssm_initial_state="head_basis": head h starts at e_(h mod N); the run equals passing that state."""
    layer = PDSSMMixer(
        tiny_config("S", pd_ssm_initial_state="head_basis", pd_ssm_num_heads=3, pd_ssm_head_state_size=2), 0
    )
    basis = torch.zeros(4, 3, 2, dtype=torch.complex64)
    basis[:, 0, 0] = basis[:, 1, 1] = basis[:, 2, 0] = 1  # head 2 wraps around to e_0 (N = 2)
    assert torch.equal(layer.initial_state(4), basis)
    u = torch.randn(4, 7, 32)
    assert torch.equal(layer(u)[0], layer(u, state=basis)[0])
    one_hot = PDSSMMixer(
        tiny_config("S", pd_ssm_initial_state="one_hot", pd_ssm_num_heads=3, pd_ssm_head_state_size=2), 0
    )
    one_hot.load_state_dict(layer.state_dict())
    assert not torch.allclose(one_hot(u)[0], layer(u)[0])  # head 1 starts elsewhere, so the outputs differ


@torch.no_grad()
def test_one_hot_initial_state_survives_left_padding():
    """Padding before the first token keeps x_0 = e_0: the padded row's outputs equal the unpadded ones."""
    layer = mixer(pd_ssm_initial_state="one_hot")
    u = torch.randn(1, 6, 32)
    padded = torch.cat([torch.randn(1, 4, 32), u], dim=1)
    mask = torch.tensor([[False] * 4 + [True] * 6])
    alone, final_alone = layer(u)
    out, final = layer(padded, mask=mask)
    assert torch.allclose(out[:, 4:], alone, atol=1e-6) and torch.allclose(final, final_alone, atol=1e-6)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(pd_ssm_initial_state="one_hot"),
        dict(pd_ssm_diagonal="magnitude"),
        dict(pd_ssm_diagonal="unit", pd_ssm_initial_state="one_hot"),
        dict(pd_ssm_initial_state="learned"),
        dict(pd_ssm_initial_state="head_basis"),
        dict(pd_ssm_input="none", pd_ssm_initial_state="one_hot", pd_ssm_diagonal="magnitude"),
        dict(pd_ssm_input="none", pd_ssm_initial_state="learned", pd_ssm_transition="bank"),
    ],
)
def test_options_keep_cached_decode_and_reload_exact(overrides, tmp_path):
    """Cached decoding equals the full forward and save -> load is bit-identical with every option."""
    assert max_cached_decode_error(tiny_config("SA", **overrides)) <= 1e-4
    assert reload_is_bit_identical(tiny_config("SA", **overrides), str(tmp_path))


def test_learned_initial_state_starts_at_e0_and_trains():
    """A fresh learned x_0 gives the one-hot run exactly; the loss then reaches it through the scan."""
    learned, one_hot = mixer(pd_ssm_initial_state="learned"), mixer(pd_ssm_initial_state="one_hot")
    u = torch.randn(2, 9, 32)
    with torch.no_grad():
        assert torch.equal(learned(u)[0], one_hot(u)[0])
    learned(u)[0].square().sum().backward()
    grad = learned.learned_initial_state.grad
    assert grad is not None and grad.shape == (2, 5, 2) and grad.abs().sum() > 0


def test_learned_initial_state_is_reinitialised_only_when_fresh(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("S", pd_ssm_initial_state="learned"))
    x0 = model.model.layers[0].mixer.learned_initial_state
    assert torch.equal(x0, model.model.layers[0].mixer.one_hot_initial_state())
    with torch.no_grad():
        x0.add_(torch.randn_like(x0))
    model.save_pretrained(tmp_path)
    assert torch.equal(HybridSSMForCausalLM.from_pretrained(tmp_path).model.layers[0].mixer.learned_initial_state, x0)


@torch.no_grad()
def test_magnitude_diagonal_has_zero_phase_and_no_phase_parameters():
    layer = mixer(pd_ssm_diagonal="magnitude")
    d = layer.diagonal(torch.randn(2, 7, 32))
    assert torch.equal(d.imag, torch.zeros_like(d.imag)) and bool((d.real > 0).all() and (d.real < 1).all())
    names = [n for n, _ in layer.named_parameters()]
    assert not any(n.startswith("phase.") for n in names) and any(n.startswith("magnitude.") for n in names)


@torch.no_grad()
def test_unit_diagonal_is_one_and_has_no_diagonal_parameters():
    layer = mixer(pd_ssm_diagonal="unit")
    d = layer.diagonal(torch.randn(2, 7, 32))
    assert torch.equal(d, torch.ones_like(d))
    assert not any(n.startswith(("phase.", "magnitude.")) for n, _ in layer.named_parameters())


@torch.no_grad()
def test_unit_diagonal_with_one_hot_start_is_a_pure_permutation_automaton():
    """With D = 1, x_0 = e_0 and B = 0 the state stays one-hot: the product of the hard permutations."""
    layer = mixer(pd_ssm_diagonal="unit", pd_ssm_initial_state="one_hot")
    layer.in_proj.weight.zero_()
    u = torch.randn(1, 9, 32)
    idx, _ = layer.transitions(u)
    _, final = layer(u)
    for head in range(2):
        where = 0
        for t in range(9):
            where = int(idx[0, t, head, where])
        expected = torch.zeros(5, dtype=torch.complex64)
        expected[where] = 1
        assert torch.equal(final[0, head], expected)


@torch.no_grad()
def test_dictionary_diagonal_init_starts_every_transition_at_the_identity():
    """A large diagonal added to every dictionary matrix makes P = I for any input at initialisation."""
    model = HybridSSMForCausalLM(tiny_config("S", pd_ssm_dictionary_diagonal_init=10.0))
    layer = model.model.layers[0].mixer
    idx, _ = layer.transitions(torch.randn(2, 8, 32))
    assert torch.equal(idx, torch.arange(5).expand_as(idx))
    default = HybridSSMForCausalLM(tiny_config("S")).model.layers[0].mixer
    assert not torch.equal(default.transitions(torch.randn(2, 8, 32))[0], idx)


def test_loaded_dictionary_is_not_shifted_again(tmp_path):
    """from_pretrained keeps the saved dictionary: the diagonal init applies to fresh weights only."""
    model = HybridSSMForCausalLM(tiny_config("S", pd_ssm_dictionary_diagonal_init=1.0))
    model.save_pretrained(tmp_path)
    reloaded = HybridSSMForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(reloaded.model.layers[0].mixer.dictionary, model.model.layers[0].mixer.dictionary)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(pd_ssm_diagonal="real"), "pd_ssm_diagonal"),
        (dict(pd_ssm_initial_state="random"), "pd_ssm_initial_state"),
        (dict(pd_ssm_dictionary_diagonal_init=float("nan")), "pd_ssm_dictionary_diagonal_init"),
        (dict(pd_ssm_magnitude_bias_init="4"), "pd_ssm_magnitude_bias_init"),
    ],
)
def test_invalid_options_raise_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        HybridSSMConfig(num_hidden_layers=1, mixers="S", **overrides)


@torch.no_grad()
@pytest.mark.parametrize("transition", ["dictionary", "bank"])
def test_no_input_map_runs_the_automaton_from_x0(transition):
    """pd_ssm_input="none": the layer has no B, and from e_0 with real D every state is a scaled basis vector
    (exactly one non-zero entry per head), the state the automaton A_t ... A_1 e_0 reaches."""
    layer = mixer(
        pd_ssm_input="none", pd_ssm_initial_state="one_hot", pd_ssm_diagonal="magnitude", pd_ssm_transition=transition
    )
    assert not hasattr(layer, "in_proj") and "in_proj.weight" not in layer.state_dict()
    u = torch.randn(3, 17, 32)
    _, final = layer(u)
    assert ((final.abs() > 0).sum(-1) == 1).all()
    idx, dv = layer.transitions(u)
    expected = layer.initial_state(3)
    for t in range(17):  # x_t = P_t D_t x_{t-1}: column j of P_t has its 1 in row idx[..., j]
        expected = torch.zeros_like(expected).scatter_add_(-1, idx[:, t], dv[:, t] * expected)
    assert torch.allclose(final, expected, atol=1e-6)
    with_b = mixer(pd_ssm_initial_state="one_hot", pd_ssm_diagonal="magnitude", pd_ssm_transition=transition)
    assert hasattr(with_b, "in_proj")


def test_no_input_map_needs_a_nonzero_start_state():
    """From x_0 = 0 with no input the state would stay 0: the config is refused, naming both fields."""
    with pytest.raises(ValueError, match="pd_ssm_input='none'.*pd_ssm_initial_state"):
        tiny_config("S", pd_ssm_input="none", pd_ssm_initial_state="zeros")
    with pytest.raises(ValueError, match="pd_ssm_input"):
        tiny_config("S", pd_ssm_input="linear", pd_ssm_initial_state="one_hot")
