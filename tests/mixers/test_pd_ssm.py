"""The PD-SSM mixer (mixer_pd_ssm.py, docs/design.md §4): the transition modes (dictionary, bank, direct) at the layer
and model level (decode steps, padding, reload, remote code, bf16 autocast, the Triton path), its options (one-hot /
head-basis / learned initial state, magnitude-only / unit diagonal, identity-leaning dictionary init, no input map,
the direct transition's norm, and the experimental fields: identity entry, shared selection, transition input size;
one section each at the end), and the expressivity claim: one layer with hand-set weights runs an automaton exactly.
Its scans and ops are tested in tests/ops/test_pd_scans.py."""

from __future__ import annotations

import pytest
import torch
from op_checks import DEVICE, needs_kernels

import hf_ssm.ops.pd.generated as pd_generated
import hf_ssm.ops.pd.parallel as pd_parallel
from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM, HybridSSMForTokenClassification
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from hf_ssm.modeling.pd_transitions import transition_names
from hf_ssm.ops.pd import bank_indices
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config

# the modes generated inside a dictionary-shaped op (ops/pd/generated.py): dictionary and bank; and every mode
TRANSITIONS = list(transition_names("has_dictionary"))
ALL_TRANSITIONS = list(transition_names())


def mixer(**overrides) -> PDSSMMixer:
    """A seeded one-layer PD-SSM mixer of tiny_config's sizes (2 heads of 5 states, width 32), in eval mode."""
    torch.manual_seed(0)
    return PDSSMMixer(tiny_config("S", **overrides), 0).eval()


@torch.no_grad()
def assert_left_padding_changes_nothing(layer: PDSSMMixer, pad: int) -> None:
    """`pad` masked random steps before 6 real ones: the outputs at the real steps and the final state equal those
    of the unpadded run."""
    u = torch.randn(1, 6, 32)
    padded = torch.cat([torch.randn(1, pad, 32), u], dim=1)
    mask = torch.tensor([[False] * pad + [True] * 6])
    alone, final_alone = layer(u)
    out, final = layer(padded, mask=mask)
    assert torch.allclose(out[:, pad:], alone, atol=1e-6) and torch.allclose(final, final_alone, atol=1e-6)


# ------------------------------------------------------------------------------------ options


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


def test_one_hot_initial_state_survives_left_padding():
    """Padding before the first token keeps x_0 = e_0: the padded row's outputs equal the unpadded ones."""
    assert_left_padding_changes_nothing(mixer(pd_ssm_initial_state="one_hot"), pad=4)


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
@pytest.mark.parametrize("transition", TRANSITIONS)
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


# ------------------------------------------------------------------------------------ the transition modes


@pytest.mark.parametrize("transition", ALL_TRANSITIONS)
@torch.no_grad()
def test_mixer_decode_steps_equal_full_forward(transition):
    """Feeding one token at a time with the carried state (T = 1 steps) gives the full forward's outputs."""
    layer = mixer(pd_ssm_transition=transition)
    u = torch.randn(2, 9, 32)
    full, full_final = layer(u)
    state, pieces = None, []
    for t in range(9):
        y, state = layer(u[:, t : t + 1], state=state)
        pieces.append(y)
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-5)
    assert torch.allclose(state, full_final, atol=1e-5)


@pytest.mark.parametrize("transition", ALL_TRANSITIONS)
@torch.no_grad()
def test_decode_step_is_one_state_update_without_the_chunked_scan(transition, monkeypatch):
    """A T = 1 step without gradient is a single x = P D x + b update: the chunked scan is never entered."""

    def refuse(*args, **kwargs):
        raise AssertionError("the chunked scan ran for a single decode step")

    for module in (pd_generated, pd_parallel):  # the generated ops' chunked scan, and the scan of given transitions
        monkeypatch.setattr(module, "_scatter_scan_chunked", refuse)
    layer = mixer(pd_ssm_transition=transition)
    state = torch.randn(2, 2, 5, dtype=torch.complex64)
    u = torch.randn(2, 1, 32)
    y, new_state = layer(u, state=state)
    idx, dv = layer.transitions(u)
    b = torch.view_as_complex(layer.in_proj(u).view(2, 1, 2, 5, 2))
    expected = torch.zeros_like(state).scatter_add_(-1, idx[:, 0], dv[:, 0] * state) + b[:, 0]
    assert torch.allclose(new_state, expected, atol=1e-6)


@pytest.mark.parametrize("transition", ALL_TRANSITIONS)
def test_cached_decode_equals_full_forward(transition):
    assert max_cached_decode_error(tiny_config("PAP", pd_ssm_transition=transition)) < 1e-4


@pytest.mark.parametrize("transition", ALL_TRANSITIONS)
def test_padding_leaves_the_state_unchanged(transition):
    """Left padding: the padded row's outputs at real tokens and its final state equal the unpadded run's."""
    assert_left_padding_changes_nothing(mixer(pd_ssm_transition=transition), pad=3)


def test_bank_mode_config_is_validated_and_reloads(tmp_path):
    with pytest.raises(ValueError, match="pd_ssm_transition.*dictionary.*bank"):
        tiny_config("P", pd_ssm_transition="mixture")
    config = tiny_config("PA", pd_ssm_transition="bank")
    assert reload_is_bit_identical(config, str(tmp_path))
    assert HybridSSMConfig.from_pretrained(tmp_path).pd_ssm_transition == "bank"


def test_bank_mode_differs_from_dictionary_mode():
    """The option changes the computation (same weights, other transition rule)."""
    u = torch.randn(2, 7, 32)
    with torch.no_grad():
        y_dict, _ = mixer(pd_ssm_transition="dictionary")(u)
        y_bank, _ = mixer(pd_ssm_transition="bank")(u)
    assert not torch.allclose(y_dict, y_bank)


def test_bank_mode_trust_remote_code_loads_without_hf_ssm(tmp_path):
    """A bank-mode checkpoint loads with trust_remote_code where hf_ssm cannot be imported: the PD family's torch
    modules travel with it, flattened (ops_pd_bank.py, which the Triton kernels share, too), the reference loops and
    the kernels do not."""
    model = HybridSSMForCausalLM(tiny_config("PA", pd_ssm_transition="bank"))
    saved = assert_loads_without_hf_ssm(model, tmp_path / "bank")
    assert {"ops_pd_generated.py", "ops_pd_bank.py", "ops_pd_parallel.py", "ops_dispatch.py"} <= saved, saved
    assert not {"ops_pd_reference.py", "ops_pd_triton.py", "ops_kernels.py", "ops_triton_common.py"} & saved, saved


# ------------------------------------------------------------------------------------ direct transitions


def test_direct_mode_has_a_transition_map_and_no_dictionary():
    """pd_ssm_transition="direct": W_P (d -> H N^2) starts N(0, s^2 / d) and there is no selection or dictionary."""
    layer = mixer(pd_ssm_transition="direct", pd_ssm_transition_init_scale=2.0)
    assert not hasattr(layer, "selection") and not hasattr(layer, "dictionary")
    weight = layer.transition_proj.weight
    assert tuple(weight.shape) == (2 * 5 * 5, 32)
    assert abs(weight.std().item() - 2.0 / 32**0.5) < 0.05


def test_direct_mode_gives_each_token_its_own_start_transition():
    """Through the model's init (HybridSSMPreTrainedModel), distinct tokens start with distinct random transitions:
    unit-RMS inputs give N(0, 1) logits, and the column argmaxes of two tokens differ."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(tiny_config("P", pd_ssm_transition="direct", pd_ssm_num_heads=4))
    layer = model.model.layers[0].mixer
    u = model.model.layers[0].input_layernorm(model.model.embed_tokens(torch.arange(1, 9)).unsqueeze(0))
    logits = layer.transition_logits(u)
    assert 0.7 < logits.std().item() < 1.3
    idx, _ = layer.transitions(u)
    assert all(not torch.equal(idx[0, 0], idx[0, t]) for t in range(1, 8))


def test_direct_mode_is_the_column_argmax_of_its_logits_with_a_straight_through_gradient():
    """Forward: P_t = column argmax of W_P u_t; backward: the column softmax's gradient, checked against a dense
    straight-through loop on the same logits."""
    layer = mixer(
        pd_ssm_transition="direct", pd_ssm_diagonal="unit", pd_ssm_input="none", pd_ssm_initial_state="one_hot"
    )
    u = torch.randn(2, 6, 32)
    y, final = layer(u)
    y.square().sum().backward()
    grad = layer.transition_proj.weight.grad.clone()
    layer.zero_grad()
    logits = layer.transition_logits(u)
    soft = torch.softmax(logits, dim=-2)
    hard = torch.zeros_like(soft).scatter_(-2, logits.argmax(-2, keepdim=True), 1.0)
    p = hard + soft - soft.detach()
    x = layer.initial_state(2).real
    states = []
    for t in range(6):
        x = (p[:, t] @ x.unsqueeze(-1)).squeeze(-1)
        states.append(x)
    states = torch.stack(states, 1)
    assert torch.allclose(final.real, x) and torch.equal(final.imag, torch.zeros_like(x))
    features = torch.cat([states, torch.zeros_like(states)], -1).flatten(2)  # per head [Re x, Im x]
    y_dense = layer.out_proj(features) + layer.skip * u
    assert torch.allclose(y_dense, y, atol=1e-5)
    y_dense.square().sum().backward()
    assert torch.allclose(layer.transition_proj.weight.grad, grad, atol=1e-4, rtol=1e-4)


def test_direct_mode_config_is_validated_and_reloads(tmp_path):
    with pytest.raises(ValueError, match="pd_ssm_transition.*dictionary.*bank.*direct"):
        tiny_config("P", pd_ssm_transition="table")
    for bad in (0.0, -1.0, float("inf"), "1"):
        with pytest.raises(ValueError, match="pd_ssm_transition_init_scale"):
            tiny_config("P", pd_ssm_transition="direct", pd_ssm_transition_init_scale=bad)
    config = tiny_config("PA", pd_ssm_transition="direct", pd_ssm_transition_init_scale=0.5)
    assert reload_is_bit_identical(config, str(tmp_path))
    loaded = HybridSSMConfig.from_pretrained(tmp_path)
    assert (loaded.pd_ssm_transition, loaded.pd_ssm_transition_init_scale) == ("direct", 0.5)


@pytest.mark.parametrize(
    "overrides",
    [{}, dict(pd_ssm_diagonal="unit", pd_ssm_input="none", pd_ssm_initial_state="one_hot")],
    ids=["paper_layer", "pure_automaton"],
)
def test_direct_mode_keeps_cached_decode_exact(overrides):
    assert max_cached_decode_error(tiny_config("PAP", pd_ssm_transition="direct", **overrides)) < 1e-4


def test_direct_mode_trust_remote_code_loads_without_hf_ssm(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("PA", pd_ssm_transition="direct"))
    assert_loads_without_hf_ssm(model, tmp_path / "direct")


# ------------------------------------------------------------------------ the identity entry


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
def test_identity_entry_starts_every_token_at_the_identity_and_the_other_entries_random(transition):
    """pd_ssm_identity_entry_logit = L: entry 0 starts as the identity scores and the selection bias at L for it, so
    with a large L every token's P_t is I at the start, while entries 1.. keep distinct random transitions. Both
    through the model's init and the mixer's own (the adapter builds the mixer alone)."""
    torch.manual_seed(0)
    config = tiny_config("S", pd_ssm_transition=transition, pd_ssm_identity_entry_logit=20.0, pd_ssm_num_heads=2)
    for layer in (HybridSSMForCausalLM(config).model.layers[0].mixer, mixer(pd_ssm_transition=transition,
                  pd_ssm_identity_entry_logit=20.0, pd_ssm_num_heads=2)):  # fmt: skip
        n, k = layer.head_state_size, layer.dict_size
        assert torch.equal(layer.dictionary[:, 0], torch.eye(n).expand(2, n, n))
        assert torch.equal(layer.selection.bias.view(2, k)[:, 0], torch.full((2,), 20.0))
        assert torch.count_nonzero(layer.selection.bias.view(2, k)[:, 1:]) == 0
        idx, _ = layer.transitions(torch.randn(1, 5, layer.selection.in_features))
        assert torch.equal(idx, torch.arange(n).expand_as(idx))
        entries = layer.dictionary[:, 1:].argmax(dim=-2)  # the other entries' column argmaxes
        assert len({tuple(e.tolist()) for e in entries.flatten(0, 1)}) > 1


def test_identity_entry_is_validated_reloads_and_decodes_exactly(tmp_path):
    for bad in (float("nan"), "3", True):
        with pytest.raises(ValueError, match="pd_ssm_identity_entry_logit"):
            tiny_config("P", pd_ssm_identity_entry_logit=bad)
    with pytest.raises(ValueError, match="pd_ssm_identity_entry_logit.*direct"):
        tiny_config("P", pd_ssm_transition="direct", pd_ssm_identity_entry_logit=3.0)
    assert not hasattr(mixer().selection, "bias") or mixer().selection.bias is None  # off by default: no bias
    config = tiny_config("PA", pd_ssm_transition="bank", pd_ssm_identity_entry_logit=2.0)
    assert reload_is_bit_identical(config, str(tmp_path / "reload"))
    assert HybridSSMConfig.from_pretrained(tmp_path / "reload").pd_ssm_identity_entry_logit == 2.0
    for transition in ("dictionary", "bank"):
        assert (
            max_cached_decode_error(tiny_config("PAP", pd_ssm_transition=transition, pd_ssm_identity_entry_logit=1.0))
            < 1e-4
        )
    model = HybridSSMForCausalLM(tiny_config("PA", pd_ssm_identity_entry_logit=2.0))
    assert_loads_without_hf_ssm(model, tmp_path / "remote")


@pytest.mark.parametrize("transition", TRANSITIONS)
def test_bf16_autocast_runs_projections_in_bf16_and_the_scan_in_complex64(transition, monkeypatch):
    """Under torch.autocast(bfloat16): every PD projection outputs bf16, the op gets float32 selection and
    complex64 dv / b / state, and the result is close to the float32 run."""
    layer = mixer(pd_ssm_transition=transition, pd_ssm_initial_state="learned")
    u = torch.randn(2, 8, 32)
    seen, outputs = {}, {}
    projections = ["selection", "in_proj", "out_proj", "magnitude.up", "phase.up"]
    for name in projections:
        layer.get_submodule(name).register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o.dtype))
    generated = {"dictionary": pd_generated.DICTIONARY_OP, "bank": pd_generated.BANK_OP}[transition]
    real_op = generated.torch_op

    def spy(selection, matrices, dv, b, x0, mask, temperature):
        seen["op"] = (selection.dtype, dv.dtype, b.dtype, x0.dtype)
        return real_op(selection, matrices, dv, b, x0, mask, temperature)

    monkeypatch.setattr(generated, "torch_op", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs["bf16"], _ = layer(u)
    assert all(seen[name] == torch.bfloat16 for name in projections), seen
    assert seen["op"] == (torch.float32, torch.complex64, torch.complex64, torch.complex64)
    outputs["bf16"].float().sum().backward()
    assert layer.dictionary.grad is not None and layer.learned_initial_state.grad is not None
    outputs["fp32"], _ = layer(u)
    assert (outputs["bf16"].float() - outputs["fp32"]).abs().max() < 0.1


@needs_kernels
@pytest.mark.parametrize("transition", TRANSITIONS)
def test_mixer_triton_path_equals_torch_path(transition):
    """The mixer bound to the Triton op gives the torch op's outputs, final state and parameter gradients, with
    padding; its cached T = 1 step equals the full forward."""
    outputs = []
    for backend in ("torch", "triton"):
        torch.manual_seed(0)
        layer = PDSSMMixer(tiny_config("P", pd_ssm_transition=transition, scan_backend=backend), 0).to(DEVICE)
        u = torch.randn(2, 7, 32, device=DEVICE)
        mask = torch.tensor([[False, False] + [True] * 5, [True] * 7], device=DEVICE)
        y, final = layer(u, mask=mask)
        y.square().sum().backward()
        with torch.no_grad():
            step, _ = layer(u[:, :1])
        grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
        outputs.append((y.detach(), final.detach(), grads, step))
    (y, final, grads, step), (y_t, final_t, grads_t, step_t) = outputs
    assert torch.allclose(y_t, y, atol=1e-5) and torch.allclose(final_t, final, atol=1e-5)
    assert torch.allclose(step_t, step, atol=1e-5)
    for name in grads:
        assert torch.allclose(grads_t[name], grads[name], atol=1e-4, rtol=1e-3), name


# ------------------------------------------------------------------------------------ a hand-set automaton
# Expressivity claim of docs/design.md §4 on the code: one PD-SSM layer with hand-set weights runs an automaton
# exactly.


START = 0  # token index of the start symbol (one-hot input channel 0)


def automaton_mixer(permutations: list[list[int]], transition: str = "dictionary") -> PDSSMMixer:
    """A one-head PD-SSM whose dictionary entry (bank mode: score matrix) k is the permutation matrix of symbol k,
    selected by a one-hot selection (logit 50 for the symbol's entry, 0 for the others).

    Input channel 0 is the start symbol (sets x = e_0 from x_0 = 0), channel k + 1 is symbol k. The output's
    first N channels read Re(x), so argmax of the output is the automaton state.
    """
    n, symbols = len(permutations[0]), len(permutations)
    d = max(8, symbols + 1, n)
    config = tiny_config(
        "P",
        hidden_size=d,
        pd_ssm_num_heads=1,
        pd_ssm_head_state_size=n,
        pd_ssm_dict_size=symbols,
        pd_ssm_transition=transition,
    )
    mixer = PDSSMMixer(config, layer_idx=0)
    with torch.no_grad():
        for p in mixer.parameters():
            p.zero_()
        for k in range(symbols):
            mixer.selection.weight[k, k + 1] = 50.0  # symbol k selects dictionary entry k
            for j, target in enumerate(permutations[k]):
                mixer.dictionary[0, k, target, j] = 1.0  # column j has its 1 in row target
        mixer.selection.weight[0, START] = 50.0  # the start symbol uses entry 0 (x_0 = 0, so any P works)
        mixer.magnitude.down_bias.fill_(30.0)  # |D| = sigmoid(30) = 1 in float32
        mixer.phase.down_bias.fill_(-30.0)  # arg D = 2 pi sigmoid(-30) ~ 6e-13
        mixer.in_proj.weight[0, START] = 1.0  # b = e_0 (real part of state 0) on the start symbol
        for i in range(n):
            mixer.out_proj.weight[i, i] = 1.0  # y[i] = Re x[i]
    return mixer


def run_automaton(permutations, symbols_seq):
    state, trace = 0, []
    for s in symbols_seq:
        state = permutations[s][state]
        trace.append(state)
    return trace


CYCLE5 = [[0, 1, 2, 3, 4], [1, 2, 3, 4, 0], [4, 0, 1, 2, 3]]  # stay, +1, -1 on a 5-cycle
PARITY = [[0, 1], [1, 0]]  # a keeps, b flips
S5 = [[1, 2, 3, 4, 0], [1, 0, 2, 3, 4]]  # a 5-cycle and a transposition generate S5 (non-abelian)


@pytest.mark.parametrize("transition", TRANSITIONS)
@pytest.mark.parametrize("permutations", [CYCLE5, PARITY, S5], ids=["cycle5", "parity", "s5"])
def test_hand_set_pd_ssm_tracks_automaton_for_1000_steps(permutations, transition):
    """argmax of the layer output equals the true automaton state at every one of 1000 steps, with unit margin, in
    both transition modes."""
    mixer = automaton_mixer(permutations, transition)
    n, symbols = len(permutations[0]), len(permutations)
    seq = torch.randint(0, symbols, (1000,))
    u = torch.zeros(1, 1001, mixer.skip.shape[0])
    u[0, 0, START] = 1.0
    u[0, torch.arange(1, 1001), seq + 1] = 1.0
    with torch.no_grad():
        y, _ = mixer(u)
    expected = torch.tensor(run_automaton(permutations, seq.tolist()))
    readout = y[0, 1:, :n]
    assert torch.equal(readout.argmax(-1), expected)
    assert torch.allclose(readout, torch.nn.functional.one_hot(expected, n).float(), atol=1e-4)


# ---- pd_ssm_shared_selection (experimental) --------------------------------------------------------------------------
# config.pd_ssm_shared_selection: in bank mode one choice of entry per token for every head. What it
# computes (every head applies its own entry k_t for the same k_t), W_s's size, the gradient reaching it, its config
# check, save / reload, cached decode (the fused decode step is skipped) and remote-code loading.

SHARED = dict(pd_ssm_transition="bank", pd_ssm_shared_selection=True)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pd_ssm_shared_selection": True}, "needs pd_ssm_transition='bank' (got 'dictionary'"),
        ({"pd_ssm_shared_selection": True, "pd_ssm_transition": "direct"}, "got 'direct'"),
        ({**SHARED, "pd_ssm_shared_selection": 1}, "must be True or False, got 1"),
    ],
)
def test_shared_selection_the_config_check_names_the_field_and_the_accepted_values(fields, message):
    with pytest.raises(ValueError, match="pd_ssm_shared_selection") as err:
        tiny_config("P", **fields)
    assert message in str(err.value)


@torch.no_grad()
def test_every_head_takes_its_own_entry_of_one_shared_choice():
    torch.manual_seed(0)
    config = tiny_config(
        "P", pd_ssm_dict_size=6, pd_ssm_diagonal="unit", pd_ssm_input="none", pd_ssm_initial_state="one_hot", **SHARED
    )
    layer = PDSSMMixer(config, 0)
    assert layer.selection.weight.shape == (6, 32)
    u = torch.randn(2, 7, 32)
    logits = layer.transition_logits(u)
    assert logits.shape == (2, 7, 2, 6) and torch.equal(logits[:, :, 0], logits[:, :, 1])
    choice = (u @ layer.selection.weight.T).argmax(-1)  # (B, T): the one symbol of each token
    bank = bank_indices(layer.dictionary)  # (H, K, N)
    state = torch.zeros(2, 2, dtype=torch.long)  # every head starts in state 0
    for t in range(7):
        state = torch.stack([bank[h, choice[:, t], state[:, h]] for h in range(2)], dim=1)
    _, final = layer(u)
    assert torch.equal(final.abs().argmax(-1), state)


def test_the_shared_selection_gets_a_gradient_and_keeps_its_identity_entry_bias():
    config = tiny_config("P", pd_ssm_identity_entry_logit=2.0, pd_ssm_dictionary_diagonal_init=0.0, **SHARED)
    torch.manual_seed(0)
    layer = PDSSMMixer(config, 0)
    assert torch.equal(layer.selection.bias, torch.tensor([2.0, 0.0, 0.0, 0.0]))
    out, _ = layer(torch.randn(2, 9, 32))
    out.square().sum().backward()
    assert layer.selection.weight.grad.abs().sum() > 0


def test_shared_selection_cached_decode_reload_and_remote_code(tmp_path):
    config = tiny_config("PAP", **SHARED)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path / "reload"))
    assert HybridSSMConfig.from_pretrained(tmp_path / "reload").pd_ssm_shared_selection is True
    assert_loads_without_hf_ssm(HybridSSMForCausalLM(tiny_config("PA", **SHARED)), tmp_path / "remote")


# ---- pd_ssm_transition_input_size (experimental) ---------------------------------------------------------------------
# config.pd_ssm_transition_input_size: the direct transition reads the first k features of u_t only. What it
# computes (the other features cannot move P_t), W_P's size and init, the pure automaton's training path with it, its
# config check, save / reload, cached decode and remote-code loading.

READS_FIVE = dict(pd_ssm_transition="direct", pd_ssm_transition_input_size=5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({**READS_FIVE, "pd_ssm_transition_input_size": 0}, "an int in [1, hidden_size = 32], got 0"),
        ({**READS_FIVE, "pd_ssm_transition_input_size": 33}, "an int in [1, hidden_size = 32], got 33"),
        ({**READS_FIVE, "pd_ssm_transition_input_size": 2.0}, "got 2.0"),
        ({**READS_FIVE, "pd_ssm_transition_input_size": True}, "got True"),
        ({"pd_ssm_transition_input_size": 5}, "needs pd_ssm_transition='direct' (got 'dictionary'"),
    ],
)
def test_input_size_the_config_check_names_the_field_and_the_accepted_values(fields, message):
    with pytest.raises(ValueError, match="pd_ssm_transition_input_size") as err:
        tiny_config("P", **fields)
    assert message in str(err.value)


@torch.no_grad()
def test_input_size_logits_are_w_p_of_the_first_k_features_and_the_rest_cannot_move_them():
    torch.manual_seed(0)
    layer = PDSSMMixer(tiny_config("P", pd_ssm_transition_init_scale=2.0, **READS_FIVE), 0)
    assert layer.transition_proj.weight.shape == (layer.num_heads * layer.head_state_size**2, 5)
    u = torch.randn(2, 7, 32)
    logits = layer.transition_logits(u)
    assert torch.equal(logits.flatten(2), u[..., :5] @ layer.transition_proj.weight.T)
    changed = u.clone()
    changed[..., 5:] = torch.randn(2, 7, 27)
    assert torch.equal(layer.transition_logits(changed), logits)
    wide = PDSSMMixer(tiny_config("P", pd_ssm_transition="direct"), 0)
    assert wide.transition_proj.weight.shape[1] == 32  # None: all d features, as before


def test_w_p_starts_at_the_init_scale_over_root_k_in_the_model_init():
    config = tiny_config("P", pd_ssm_transition_init_scale=3.0, pd_ssm_num_heads=4, **READS_FIVE)
    torch.manual_seed(0)
    weight = HybridSSMForCausalLM(config).model.layers[0].mixer.transition_proj.weight
    assert weight.std().item() == pytest.approx(3.0 / 5**0.5, rel=0.1)


def test_a_pure_automaton_reading_k_features_trains_on_the_fast_path_with_the_general_gradients():
    config = tiny_config("P", pd_ssm_diagonal="unit", pd_ssm_input="none", pd_ssm_initial_state="one_hot", **READS_FIVE)
    torch.manual_seed(0)
    layer = PDSSMMixer(config, 0)
    u = torch.randn(2, 9, 32)

    def gradient():
        layer.zero_grad()
        out, _ = layer(u)
        out.square().sum().backward()
        return layer.transition_proj.weight.grad.clone()

    fast = gradient()
    layer.is_pure_automaton = lambda: False
    torch.testing.assert_close(fast, gradient(), rtol=1e-4, atol=1e-6)


def test_input_size_cached_decode_reload_and_remote_code(tmp_path):
    config = tiny_config("PAP", **READS_FIVE)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path / "reload"))
    assert HybridSSMConfig.from_pretrained(tmp_path / "reload").pd_ssm_transition_input_size == 5
    assert_loads_without_hf_ssm(HybridSSMForCausalLM(tiny_config("PA", **READS_FIVE)), tmp_path / "remote")


# ---- pd_ssm_transition_norm ------------------------------------------------------------------------------------------
# config.pd_ssm_transition_norm: the direct transition reads RMSNorm(u_t) with its own gain. What it
# computes, its config check, save / reload, cached decode and remote-code loading; and the init of a direct mixer
# without D_skip (W_P and C were left at the generic init).

NORMED = dict(pd_ssm_transition="direct", pd_ssm_transition_norm=True)


def test_transition_norm_the_config_check_names_the_field():
    for bad in (1, "true", None):
        with pytest.raises(ValueError, match="pd_ssm_transition_norm"):
            tiny_config("P", pd_ssm_transition_norm=bad)


@torch.no_grad()
def test_logits_are_w_p_of_the_normed_input_whatever_its_scale():
    """P_t's logits = W_P (g * u_t / RMS(u_t)): a rescaled input gives the same logits (up to the norm's eps); the gain
    starts at 1 and trains; without the option the layer has no norm and its logits are W_P u_t."""
    torch.manual_seed(0)
    layer = PDSSMMixer(tiny_config("P", **NORMED), 0)
    norm = layer.transition_norm
    assert torch.equal(norm.weight, torch.ones(32)) and norm.weight.requires_grad
    u = torch.randn(2, 5, 32)
    expected = (u / u.pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt()) @ layer.transition_proj.weight.T
    logits = layer.transition_logits(u)
    torch.testing.assert_close(logits, expected.view(2, 5, *logits.shape[2:]))
    torch.testing.assert_close(layer.transition_logits(0.02 * u), logits, rtol=1e-2, atol=1e-2)
    plain = PDSSMMixer(tiny_config("P", pd_ssm_transition="direct"), 0)
    assert plain.transition_norm is None
    assert torch.equal(plain.transition_logits(u).flatten(2), u @ plain.transition_proj.weight.T)


def test_the_gain_is_in_the_model_init_and_trains(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("P", **NORMED))
    gain = model.model.layers[0].mixer.transition_norm.weight
    assert torch.equal(gain, torch.ones_like(gain))
    ids = torch.randint(1, 37, (2, 7))
    model(input_ids=ids, labels=ids).loss.backward()
    assert gain.grad is not None and gain.grad.abs().sum() > 0


def test_transition_norm_cached_decode_and_reload(tmp_path):
    config = tiny_config("PAP", **NORMED)
    assert max_cached_decode_error(config) < 1e-4
    assert reload_is_bit_identical(config, str(tmp_path))
    assert HybridSSMConfig.from_pretrained(tmp_path).pd_ssm_transition_norm is True


def test_transition_norm_trust_remote_code_loads_without_hf_ssm(tmp_path):
    model = HybridSSMForCausalLM(tiny_config("PA", **NORMED))
    with torch.no_grad():
        model.model.layers[0].mixer.transition_norm.weight.uniform_(0.5, 1.5)  # a trained gain travels too
    assert_loads_without_hf_ssm(model, tmp_path / "normed")


@pytest.mark.parametrize("cls", [HybridSSMForCausalLM, HybridSSMForTokenClassification])
def test_a_direct_mixer_without_skip_gets_its_own_init(cls, tmp_path):
    """Regression: a direct-transition mixer without D_skip owns no parameter itself (only W_P and C), and
    transformers took it for initialised, so W_P and C kept the generic N(0, 0.02^2) init. Now W_P ~ N(0, s^2 / d)
    and C is the identity, also after a reload that must keep the saved (trained) values instead."""
    config = tiny_config(
        "P", hidden_size=32, pd_ssm_num_heads=2, pd_ssm_head_state_size=8, pd_ssm_output_skip=False,
        pd_ssm_output_init="identity", pd_ssm_output_trainable=False, pd_ssm_transition_init_scale=3.0,
        block_type="post_norm_mixer", **NORMED,
    )  # fmt: skip
    torch.manual_seed(0)
    model = cls(config)
    mixer = model.model.layers[0].mixer
    assert torch.equal(mixer.out_proj.weight, torch.eye(32))
    assert mixer.transition_proj.weight.std().item() == pytest.approx(3.0 / 32**0.5, rel=0.1)
    with torch.no_grad():
        mixer.transition_proj.weight.mul_(2.0)
    model.save_pretrained(tmp_path)
    loaded = cls.from_pretrained(tmp_path).model.layers[0].mixer
    assert torch.equal(loaded.transition_proj.weight, mixer.transition_proj.weight)
