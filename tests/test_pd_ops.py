"""PD-SSM ops (pd_ops.py): the fused dictionary op and the bank op equal plain-autograd references, values and
gradients; padding, decode, bf16 autocast and the bank mode at model level."""

from __future__ import annotations

import pytest
import torch

import hf_ssm.modeling.pd_ops as pd_ops
from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer
from hf_ssm.modeling.scan_pd import pd_scan
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config


def pd_inputs(batch, steps, heads, n, k, logits=False):
    sel = torch.randn(batch, steps, heads, k)
    sel = sel if logits else torch.softmax(sel, dim=-1)
    matrices = torch.randn(heads, k, n, n) * n**-0.5
    dv = torch.polar(torch.rand(batch, steps, heads, n) * 0.9 + 0.05, torch.rand(batch, steps, heads, n) * 6.283)
    b = torch.randn(batch, steps, heads, n, dtype=torch.complex64)
    x0 = torch.randn(batch, heads, n, dtype=torch.complex64)
    return [sel, matrices, dv, b, x0]


def run_with_grads(fn, inputs, mask, temperature, seed=1):
    leaves = [t.clone().requires_grad_() for t in inputs]
    states, final = fn(*leaves, mask=mask, temperature=temperature)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(states.shape, dtype=torch.complex64, generator=g)
    wf = torch.randn(final.shape, dtype=torch.complex64, generator=g)
    loss = (states * w.conj()).real.sum() + (final * wf.conj()).real.sum()
    return [states.detach(), final.detach(), *torch.autograd.grad(loss, leaves)]


NAMES = ["states", "final", "grad_selection", "grad_matrices", "grad_dv", "grad_b", "grad_x0"]


def assert_all_close(got, ref, atol=2e-5, rtol=1e-4):
    for name, g, r in zip(NAMES, got, ref):
        assert torch.allclose(g, r, atol=atol, rtol=rtol), f"{name}: max err {(g - r).abs().max().item()}"


def old_dictionary_path(sel, dictionary, dv, b, x0, mask=None, temperature=1.0):
    """The mixer's torch path before the fused op: dense M_t, argmax, column softmax as p_soft, scan_pd.pd_scan."""
    soft = torch.einsum("bthk,hkij->bthij", sel, dictionary)
    idx = soft.argmax(dim=-2)
    p_soft = torch.softmax(soft / temperature, dim=-2)
    if mask is not None:
        keep = mask.view(*mask.shape, 1, 1)
        idx = torch.where(keep, idx, torch.arange(idx.shape[-1]))
        dv = torch.where(keep, dv, torch.ones((), dtype=dv.dtype))
        b = torch.where(keep, b, torch.zeros((), dtype=b.dtype))
        p_soft = p_soft * keep.unsqueeze(-1)
    return pd_scan(idx, dv, b, x0, p_soft)


CASES = [(1, 1, 1, 4, 3), (2, 7, 2, 5, 3), (3, 40, 2, 6, 4)]


@pytest.mark.parametrize("batch,steps,heads,n,k", CASES)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_dictionary_op_equals_dense_reference_and_old_path(batch, steps, heads, n, k, masked, temperature, monkeypatch):
    """The fused, chunked dictionary op (chunks of 3 tokens forced) == the dense straight-through loop == the
    previous (B, T, H, N, N) path, in values and in the gradients of every input."""
    monkeypatch.setattr(pd_ops, "GEN_CHUNK_ELEMENTS", 3 * heads * n * n)
    inputs = pd_inputs(batch, steps, heads, n, k)
    mask = (torch.rand(batch, steps) > 0.3) if masked else None

    def op(*args, **kwargs):
        return pd_ops.pd_dictionary_scan(*args, **kwargs, backend="torch")

    got = run_with_grads(op, inputs, mask, temperature)
    assert_all_close(got, run_with_grads(pd_ops.pd_dictionary_reference, inputs, mask, temperature))
    assert_all_close(got, run_with_grads(old_dictionary_path, inputs, mask, temperature))


def test_dictionary_indices_take_the_first_of_tied_maxima(monkeypatch):
    """The chunked column argmax equals torch.argmax, ties included (0/1 matrices tie often)."""
    monkeypatch.setattr(pd_ops, "GEN_CHUNK_ELEMENTS", 5 * 2 * 6 * 6)
    sel = torch.randint(0, 2, (3, 11, 2, 4)).float()
    dictionary = torch.randint(0, 2, (2, 4, 6, 6)).float()
    expected = torch.einsum("bthk,hkij->bthij", sel, dictionary).argmax(dim=-2)
    assert torch.equal(pd_ops.dictionary_indices(sel, dictionary), expected)


def test_dictionary_op_under_bf16_autocast_equals_float32():
    """Called under bf16 autocast, the op still computes in float32 / complex64: same values and gradients."""
    inputs = pd_inputs(2, 9, 2, 5, 3)

    def op(*args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return pd_ops.pd_dictionary_scan(*args, **kwargs, backend="torch")

    assert_all_close(
        run_with_grads(op, inputs, None, 1.0), run_with_grads(old_dictionary_path, inputs, None, 1.0), atol=1e-6
    )


def test_dictionary_op_keeps_no_n_by_n_tensor_for_backward():
    """Memory: the autograd node saves only Theta(T H (N + K)) per step (idx, dv, states, selection), never a
    (B, T, H, N, N) tensor; the dictionary itself is the only N x N tensor."""
    batch, steps, heads, n, k = 2, 64, 2, 16, 4
    leaves = [t.requires_grad_() for t in pd_inputs(batch, steps, heads, n, k)]
    states, _ = pd_ops.pd_dictionary_scan(*leaves, backend="torch")
    saved = [t for t in states.grad_fn.saved_tensors if t is not None]
    per_step_limit = batch * steps * heads * max(n, k)
    assert all(t.numel() <= per_step_limit or t.shape == leaves[1].shape for t in saved), [t.shape for t in saved]


@pytest.mark.parametrize("batch,steps,heads,n,k", CASES)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_bank_op_equals_dense_reference(batch, steps, heads, n, k, masked, temperature):
    """Bank op (argmax selection, gather from the column argmax of each score matrix) == the dense loop with
    straight-through one-hots, in values and in the gradients of logits, scores, dv, b and x0."""
    inputs = pd_inputs(batch, steps, heads, n, k, logits=True)
    mask = (torch.rand(batch, steps) > 0.3) if masked else None

    def op(*args, **kwargs):
        return pd_ops.pd_bank_scan(*args, **kwargs, backend="torch")

    assert_all_close(
        run_with_grads(op, inputs, mask, temperature),
        run_with_grads(pd_ops.pd_bank_reference, inputs, mask, temperature),
    )


@pytest.mark.parametrize("op", [pd_ops.pd_dictionary_scan, pd_ops.pd_bank_scan])
def test_ops_reject_bad_input(op):
    sel, matrices, dv, b, x0 = pd_inputs(2, 3, 2, 4, 3)
    with pytest.raises(ValueError, match="matrices"):
        op(sel, matrices[:, :2], dv, b)
    with pytest.raises(ValueError, match="dv"):
        op(sel, matrices, dv[..., :3], b)
    with pytest.raises(ValueError, match="initial_state"):
        op(sel, matrices, dv, b, x0[:1])
    with pytest.raises(ValueError, match="mask"):
        op(sel, matrices, dv, b, mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="temperature"):
        op(sel, matrices, dv, b, temperature=0.0)
    with pytest.raises(ValueError, match="T >= 1"):
        op(sel[:, :0], matrices, dv[:, :0], b[:, :0])


# ---------------------------------------------------------------------------------------------------------------
# mixer and model level


def pd_mixer(transition, **overrides):
    torch.manual_seed(0)
    return PDSSMMixer(tiny_config("P", pd_ssm_transition=transition, **overrides), 0)


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
@torch.no_grad()
def test_mixer_decode_steps_equal_full_forward(transition):
    """Feeding one token at a time with the carried state (T = 1 steps) gives the full forward's outputs."""
    layer = pd_mixer(transition).eval()
    u = torch.randn(2, 9, 32)
    full, full_final = layer(u)
    state, pieces = None, []
    for t in range(9):
        y, state = layer(u[:, t : t + 1], state=state)
        pieces.append(y)
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-5)
    assert torch.allclose(state, full_final, atol=1e-5)


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
@torch.no_grad()
def test_decode_step_is_one_state_update_without_the_chunked_scan(transition, monkeypatch):
    """A T = 1 step without gradient is a single x = P D x + b update: the chunked scan is never entered."""

    def refuse(*args, **kwargs):
        raise AssertionError("the chunked scan ran for a single decode step")

    monkeypatch.setattr(pd_ops, "_scatter_scan_chunked", refuse)
    layer = pd_mixer(transition).eval()
    state = torch.randn(2, 2, 5, dtype=torch.complex64)
    u = torch.randn(2, 1, 32)
    y, new_state = layer(u, state=state)
    idx, dv = layer.transitions(u)
    b = torch.view_as_complex(layer.in_proj(u).view(2, 1, 2, 5, 2))
    expected = torch.zeros_like(state).scatter_add_(-1, idx[:, 0], dv[:, 0] * state) + b[:, 0]
    assert torch.allclose(new_state, expected, atol=1e-6)


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
def test_cached_decode_equals_full_forward(transition):
    assert max_cached_decode_error(tiny_config("PAP", pd_ssm_transition=transition)) < 1e-4


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
@torch.no_grad()
def test_padding_leaves_the_state_unchanged(transition):
    """Left padding: the padded row's outputs at real tokens and its final state equal the unpadded run's."""
    layer = pd_mixer(transition).eval()
    u = torch.randn(1, 6, 32)
    padded = torch.cat([torch.randn(1, 3, 32), u], dim=1)
    mask = torch.tensor([[False] * 3 + [True] * 6])
    alone, final_alone = layer(u)
    out, final = layer(padded, mask=mask)
    assert torch.allclose(out[:, 3:], alone, atol=1e-6) and torch.allclose(final, final_alone, atol=1e-6)


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
        y_dict, _ = pd_mixer("dictionary")(u)
        y_bank, _ = pd_mixer("bank")(u)
    assert not torch.allclose(y_dict, y_bank)


def test_bank_mode_trust_remote_code_loads_without_hf_ssm(tmp_path):
    """A bank-mode checkpoint loads with trust_remote_code where hf_ssm cannot be imported (pd_ops.py travels)."""
    model = HybridSSMForCausalLM(tiny_config("PA", pd_ssm_transition="bank"))
    assert "pd_ops.py" in assert_loads_without_hf_ssm(model, tmp_path / "bank")


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
def test_bf16_autocast_runs_projections_in_bf16_and_the_scan_in_complex64(transition, monkeypatch):
    """Under torch.autocast(bfloat16): every PD projection outputs bf16, the op gets float32 selection and
    complex64 dv / b / state, and the result is close to the float32 run."""
    layer = pd_mixer(transition, pd_ssm_initial_state="learned")
    u = torch.randn(2, 8, 32)
    seen, outputs = {}, {}
    projections = ["selection", "in_proj", "out_proj", "magnitude.up", "phase.up"]
    for name in projections:
        layer.get_submodule(name).register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o.dtype))
    real_op = pd_ops._IMPLS[transition, "torch"]

    def spy(selection, matrices, dv, b, x0, mask, temperature):
        seen["op"] = (selection.dtype, dv.dtype, b.dtype, x0.dtype)
        return real_op(selection, matrices, dv, b, x0, mask, temperature)

    monkeypatch.setitem(pd_ops._IMPLS, (transition, "torch"), spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs["bf16"], _ = layer(u)
    assert all(seen[name] == torch.bfloat16 for name in projections), seen
    assert seen["op"] == (torch.float32, torch.complex64, torch.complex64, torch.complex64)
    outputs["bf16"].float().sum().backward()
    assert layer.dictionary.grad is not None and layer.learned_initial_state.grad is not None
    outputs["fp32"], _ = layer(u)
    assert (outputs["bf16"].float() - outputs["fp32"]).abs().max() < 0.1
