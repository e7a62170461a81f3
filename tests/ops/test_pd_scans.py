"""PD-SSM scans (docs/design.md §4, §9), from the plain scan to the ops the mixer calls:

- ops/pd/parallel.py: the chunked parallel scan of x_t = P_t D_t x_{t-1} + b_t equals the sequential loop and the
  dense recurrence (hf_ssm.ops.pd.reference), values and gradients, and PD composition is what it claims;
- ops/pd/generated.py, through hf_ssm.ops.dispatch.ScanOps: the fused dictionary op and the bank op equal their
  plain-autograd references,
  values and gradients; a T = 1 step without gradient is the one torch step on either backend;
- the Triton kernels (hf_ssm.ops.pd.triton) equal those torch scans and ops, values and gradients, in float32
  and bfloat16, with padding (in the interpreter on a CPU).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from op_checks import DEVICE, TOL, assert_close, compare, kernels, leaf, needs_kernels, rand, scan_loss

import hf_ssm.ops.pd.generated as pd_generated
import hf_ssm.ops.pd.parallel as pd_parallel
from hf_ssm.ops.dispatch import scan_ops
from hf_ssm.ops.pd import bank_indices, gather_bank, pd_scan, reference
from hf_ssm.ops.pd.reference import pd_compose, pd_to_dense

TORCH_OPS = scan_ops("torch", "cpu")

# ------------------------------------------------------------------------------------ pd_scan: scan == loop


def random_pd_inputs(batch, steps, heads, n, generator=None):
    idx = torch.randint(0, n, (batch, steps, heads, n), generator=generator)
    dv = torch.polar(torch.rand(batch, steps, heads, n) * 0.98 + 0.01, torch.rand(batch, steps, heads, n) * 6.283)
    b = torch.randn(batch, steps, heads, n, dtype=torch.complex64)
    x0 = torch.randn(batch, heads, n, dtype=torch.complex64)
    p_soft = torch.softmax(torch.randn(batch, steps, heads, n, n), dim=-2)
    return idx, dv, b, x0, p_soft


def outputs_and_grads(scan, idx, dv, b, x0, p_soft, grad_states, grad_final):
    leaves = [t.clone().requires_grad_() for t in (dv, b, x0, p_soft)]
    states, final = scan(idx, *leaves)
    loss = (states * grad_states.conj()).real.sum() + (final * grad_final.conj()).real.sum()
    return (states, final, *torch.autograd.grad(loss, leaves))


@pytest.mark.parametrize("steps", [1, 7, 64, 1000])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("n", [1, 5, 16])
def test_parallel_scan_matches_sequential(steps, batch, heads, n):
    """Outputs, final state and gradients w.r.t. dv, b, x0 and the soft P agree with the plain loop."""
    inputs = random_pd_inputs(batch, steps, heads, n)
    grad_states = torch.randn(batch, steps, heads, n, dtype=torch.complex64)
    grad_final = torch.randn(batch, heads, n, dtype=torch.complex64)
    ref = outputs_and_grads(reference.pd_scan, *inputs, grad_states, grad_final)
    got = outputs_and_grads(pd_scan, *inputs, grad_states, grad_final)
    names = ["states", "final", "grad_dv", "grad_b", "grad_x0", "grad_p_soft"]
    for name, r, g in zip(names, ref, got):
        assert torch.allclose(g, r, atol=2e-5, rtol=1e-4), f"{name}: max err {(g - r).abs().max().item()}"


@pytest.mark.parametrize("chunk", [1, 3, 8, 64])
def test_chunk_size_does_not_change_result(chunk):
    """Any chunk size, including ones that do not divide T, gives the same states."""
    idx, dv, b, x0, _ = random_pd_inputs(2, 37, 2, 6)
    ref, _ = reference.pd_scan(idx, dv, b, x0)
    got, _ = pd_scan(idx, dv, b, x0, chunk_size=chunk)
    assert torch.allclose(got, ref, atol=1e-5)


def test_states_match_dense_matrix_recurrence():
    """The sparse scan computes x_t = (P_t D_t) x_{t-1} + b_t with the dense P D built from (idx, dv)."""
    idx, dv, b, x0, _ = random_pd_inputs(2, 50, 2, 7)
    dense = pd_to_dense(idx, dv)
    x, expected = x0, []
    for t in range(idx.shape[1]):
        x = (dense[:, t] @ x.unsqueeze(-1)).squeeze(-1) + b[:, t]
        expected.append(x)
    states, _ = pd_scan(idx, dv, b, x0)
    assert torch.allclose(states, torch.stack(expected, dim=1), atol=1e-5)


def test_composition_matches_dense_product_and_is_associative():
    """compose(A2, A1) is the dense product A2 @ A1, is again column-one-hot times diagonal, and is associative."""
    n = 9
    mats = [random_pd_inputs(4, 1, 3, n)[:2] for _ in range(3)]
    mats = [(i[:, 0], d[:, 0]) for i, d in mats]
    a1, a2, a3 = mats
    composed = pd_compose(a2, a1)
    assert torch.allclose(pd_to_dense(*composed), pd_to_dense(*a2) @ pd_to_dense(*a1), atol=1e-6)
    nonzeros_per_column = (pd_to_dense(*composed).abs() > 0).sum(dim=-2)
    assert (nonzeros_per_column <= 1).all()
    left = pd_compose(pd_compose(a3, a2), a1)
    right = pd_compose(a3, pd_compose(a2, a1))
    assert torch.equal(left[0], right[0])
    assert torch.allclose(left[1], right[1], atol=1e-6)


def test_bad_scan_inputs_raise_clear_errors():
    """Bad shapes are rejected with a clear error instead of being broadcast."""
    idx, dv, b, x0, p_soft = random_pd_inputs(1, 4, 1, 3)
    with pytest.raises(ValueError, match="initial_state"):
        pd_scan(idx, dv, b, x0[:, :, :2])
    with pytest.raises(ValueError, match="p_soft"):
        pd_scan(idx, dv, b, x0, p_soft=p_soft[..., :2])
    with pytest.raises(TypeError, match="complex"):
        pd_scan(idx, dv.real, b, x0)
    with pytest.raises(ValueError, match="chunk_size"):
        pd_scan(idx, dv, b, x0, chunk_size=0)


# ------------------------------------------------------------------------------------ ScanOps' PD ops: op == reference


def pd_inputs(batch, steps, heads, n, k, logits=False, device="cpu"):
    """Selection weights (B, T, H, K) (softmax, or raw logits for the bank op), K matrices (H, K, N, N) per head,
    dv (B, T, H, N) with |dv| in (0.05, 0.95), b (B, T, H, N) and x0 (B, H, N)."""
    sel = torch.randn(batch, steps, heads, k)
    sel = sel if logits else torch.softmax(sel, dim=-1)
    matrices = torch.randn(heads, k, n, n) * n**-0.5
    dv = torch.polar(torch.rand(batch, steps, heads, n) * 0.9 + 0.05, torch.rand(batch, steps, heads, n) * 6.283)
    b = torch.randn(batch, steps, heads, n, dtype=torch.complex64)
    x0 = torch.randn(batch, heads, n, dtype=torch.complex64)
    return [t.to(device) for t in (sel, matrices, dv, b, x0)]


def run_with_grads(fn, inputs, mask, temperature, seed=1):
    """fn(*leaves, mask=, temperature=) -> (states, final): those and the gradients of every input of one fixed
    complex-weighted loss (weights drawn from `seed`)."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    states, final = fn(*leaves, mask=mask, temperature=temperature)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(states.shape, dtype=torch.complex64, generator=g).to(states.device)
    wf = torch.randn(final.shape, dtype=torch.complex64, generator=g).to(states.device)
    loss = (states * w.conj()).real.sum() + (final * wf.conj()).real.sum()
    return [states.detach(), final.detach(), *torch.autograd.grad(loss, leaves)]


NAMES = ["states", "final", "grad_selection", "grad_matrices", "grad_dv", "grad_b", "grad_x0"]


def assert_all_close(got, ref, atol=2e-5, rtol=1e-4):
    for name, g, r in zip(NAMES, got, ref):
        assert torch.allclose(g, r, atol=atol, rtol=rtol), f"{name}: max err {(g - r).abs().max().item()}"


def old_dictionary_path(sel, dictionary, dv, b, x0, mask=None, temperature=1.0):
    """The mixer's torch path before the fused op: dense M_t, argmax, column softmax as p_soft, pd_scan.pd_scan."""
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
    monkeypatch.setattr(pd_generated, "GEN_CHUNK_ELEMENTS", 3 * heads * n * n)
    inputs = pd_inputs(batch, steps, heads, n, k)
    mask = (torch.rand(batch, steps) > 0.3) if masked else None

    got = run_with_grads(TORCH_OPS.pd_dictionary_scan, inputs, mask, temperature)
    assert_all_close(got, run_with_grads(reference.pd_dictionary_scan, inputs, mask, temperature))
    assert_all_close(got, run_with_grads(old_dictionary_path, inputs, mask, temperature))


def test_dictionary_indices_take_the_first_of_tied_maxima(monkeypatch):
    """The chunked column argmax equals torch.argmax, ties included (0/1 matrices tie often)."""
    monkeypatch.setattr(pd_generated, "GEN_CHUNK_ELEMENTS", 5 * 2 * 6 * 6)
    sel = torch.randint(0, 2, (3, 11, 2, 4)).float()
    dictionary = torch.randint(0, 2, (2, 4, 6, 6)).float()
    expected = torch.einsum("bthk,hkij->bthij", sel, dictionary).argmax(dim=-2)
    assert torch.equal(pd_generated.dictionary_indices(sel, dictionary), expected)


def test_dictionary_op_under_bf16_autocast_equals_float32():
    """Called under bf16 autocast, the op still computes in float32 / complex64: same values and gradients."""
    inputs = pd_inputs(2, 9, 2, 5, 3)

    def op(*args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return TORCH_OPS.pd_dictionary_scan(*args, **kwargs)

    assert_all_close(
        run_with_grads(op, inputs, None, 1.0), run_with_grads(old_dictionary_path, inputs, None, 1.0), atol=1e-6
    )


def test_dictionary_op_keeps_no_n_by_n_tensor_for_backward():
    """Memory: the autograd node saves only Theta(T H (N + K)) per step (idx, dv, states, selection), never a
    (B, T, H, N, N) tensor; the dictionary itself is the only N x N tensor."""
    batch, steps, heads, n, k = 2, 64, 2, 16, 4
    leaves = [t.requires_grad_() for t in pd_inputs(batch, steps, heads, n, k)]
    states, _ = TORCH_OPS.pd_dictionary_scan(*leaves)
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

    assert_all_close(
        run_with_grads(TORCH_OPS.pd_bank_scan, inputs, mask, temperature),
        run_with_grads(reference.pd_bank_scan, inputs, mask, temperature),
    )


@pytest.mark.parametrize("op", [TORCH_OPS.pd_dictionary_scan, TORCH_OPS.pd_bank_scan])
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


# ------------------------------------------------------------------------------------ T = 1: the one decoding step


def _step_case(kind, batch=3, heads=2, n=5, k=3):
    """(op on the torch ScanOps name, its inputs of one step, the transition idx (B, H, N) they choose)."""
    sel, matrices, dv, b, x0 = pd_inputs(batch, 1, heads, n, k, logits=kind == "bank")
    if kind == "dictionary":
        idx = torch.einsum("bhk,hkij->bhij", sel[:, 0], matrices).argmax(dim=-2)
        return "pd_dictionary_scan", (sel, matrices, dv, b, x0), idx
    if kind == "bank":
        idx = gather_bank(bank_indices(matrices), sel[:, 0].argmax(dim=-1))
        return "pd_bank_scan", (sel, matrices, dv, b, x0), idx
    idx = torch.randint(0, n, (batch, 1, heads, n))
    return "pd_scan", (idx, dv, b, x0), idx[:, 0]


@pytest.mark.parametrize("kind", ["dictionary", "bank", "given"])
def test_single_step_without_gradient_is_the_one_update(kind, monkeypatch):
    """T = 1 without gradient (decoding) is one x = P D x0 + b update for every PD op (pd.parallel.is_decode_step,
    pd.parallel.pd_step): the chunked scan is never entered, and a masked row keeps its state exactly. With a gradient
    the same step runs the scan, with the same values."""
    name, inputs, idx = _step_case(kind)
    dv, b, x0 = inputs[-3:]
    expected = torch.zeros_like(x0).scatter_add_(-1, idx, dv[:, 0] * x0) + b[:, 0]
    with_grad = getattr(TORCH_OPS, name)(*(leaf(t) if t.is_floating_point() or t.is_complex() else t for t in inputs))

    def refuse(*args, **kwargs):
        raise AssertionError("the chunked scan ran for a decoding step")

    for module in (pd_generated, pd_parallel):
        monkeypatch.setattr(module, "_scatter_scan_chunked", refuse)
    with torch.no_grad():
        states, final = getattr(TORCH_OPS, name)(*inputs)
        assert torch.allclose(final, expected, atol=1e-6) and torch.equal(states[:, 0], final)
        assert torch.allclose(final, with_grad[1].detach(), atol=1e-6)
        if kind != "given":  # the generated ops take a mask; the direct transition pads its own inputs
            mask = torch.tensor([[True], [False], [True]])
            _, masked = getattr(TORCH_OPS, name)(*inputs, mask)
            assert torch.equal(masked[1], x0[1]) and torch.equal(masked[0], final[0])


def test_compiled_step_in_pairs_equals_the_scatter_step():
    """The step torch.compile runs (pd_scan._pd_step_in_pairs: real pairs, P D x0 as a one-hot sum) equals the
    eager complex scatter-add step where several columns land in one row (they add) and where a row is masked out
    (it keeps x0)."""
    batch, heads, n = 3, 2, 5
    gen = torch.Generator().manual_seed(3)
    idx = torch.randint(0, n, (batch, heads, n), generator=gen)
    idx[0, 0] = torch.tensor([1, 1, 1, 4, 0])  # three columns into row 1, rows 2 and 3 empty
    dv, b = (torch.randn(batch, 1, heads, n, dtype=torch.complex64, generator=gen) for _ in range(2))
    x0 = torch.randn(batch, heads, n, dtype=torch.complex64, generator=gen)
    mask = torch.tensor([[True], [False], [True]])
    expected = torch.where(mask.view(-1, 1, 1), b[:, 0].clone().scatter_add_(-1, idx, dv[:, 0] * x0), x0)
    pairs = [torch.view_as_real(t) for t in (dv, b, x0)]
    states, final = pd_parallel._pd_step_in_pairs(idx, *pairs, mask)
    assert final.shape == (batch, heads, n, 2) and torch.equal(states[:, 0], final)
    assert torch.allclose(torch.view_as_complex(final), expected, atol=1e-6)
    assert torch.equal(final[1], pairs[2][1])


@needs_kernels
@pytest.mark.parametrize("kind", ["dictionary", "bank", "given"])
def test_single_step_is_the_torch_step_on_the_triton_backend(kind, monkeypatch):
    """The T = 1 rule is one code path: on the Triton backend a decoding step never calls a kernel and is
    bit-identical to the torch backend's."""
    name, inputs, _ = _step_case(kind)
    inputs = [t.to(DEVICE) for t in inputs]
    for kernel in ("pd_dictionary_scan", "pd_bank_scan", "pd_scan"):
        monkeypatch.setattr(kernels, kernel, lambda *a, **k: pytest.fail("a kernel ran for a decoding step"))
    with torch.no_grad():
        got = getattr(scan_ops("triton", DEVICE), name)(*inputs)
        want = getattr(scan_ops("torch", DEVICE), name)(*inputs)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


# ------------------------------------------------------------------------------------ Triton == torch


def _pd_kernel_inputs(batch, steps, heads, n):
    """Hard transitions idx (B, T, H, N), dv with |dv| in (0.5, 1), b and x0, on DEVICE."""
    idx = torch.randint(0, n, (batch, steps, heads, n), device=DEVICE)
    dv = torch.polar(
        0.5 + 0.5 * torch.rand(batch, steps, heads, n, device=DEVICE),
        6.3 * torch.rand(batch, steps, heads, n, device=DEVICE),
    )
    b = rand(batch, steps, heads, n, dtype=torch.complex64)
    x0 = rand(batch, heads, n, dtype=torch.complex64)
    return idx, dv, b, x0


PD_CASES = [
    # (dtype, batch, steps, chunk, n, scatter)
    (torch.float32, 1, 1, None, 4, "auto"),
    (torch.float32, 2, 7, None, 5, "onehot"),
    (torch.float32, 2, 11, 4, 5, "auto"),
    (torch.float32, 1, 9, 5, 4, "atomic"),
    (torch.float32, 3, 9, 2, 4, "atomic"),
    (torch.bfloat16, 2, 11, 4, 3, "auto"),
    (torch.bfloat16, 1, 1, None, 4, "atomic"),
]


@needs_kernels
@pytest.mark.parametrize("dtype,batch,steps,chunk,n,scatter", PD_CASES)
def test_pd_scan_matches_torch(dtype, batch, steps, chunk, n, scatter):
    """complex64 inputs, or bfloat16 (real, imag) pairs; with the straight-through p_soft gradient."""
    idx, dv, b, x0 = _pd_kernel_inputs(batch, steps, 2, n)
    p_soft = leaf(torch.rand(batch, steps, 2, n, n, device=DEVICE))
    if dtype == torch.bfloat16:
        dv_in, b_in, x0_in = (leaf(torch.view_as_real(t).to(dtype)) for t in (dv, b, x0))
        ref_dv, ref_b, ref_x0 = (leaf(torch.view_as_complex(t.detach().float())) for t in (dv_in, b_in, x0_in))
    else:
        dv_in, b_in, x0_in = (leaf(t) for t in (dv, b, x0))
        ref_dv, ref_b, ref_x0 = (leaf(t) for t in (dv, b, x0))
    ref_p = leaf(p_soft.detach())

    def run(dv, b, x0, p):
        return kernels.pd_scan(idx, dv, b, x0, p, chunk_size=chunk, scatter=scatter)

    def ref(dv, b, x0, p):
        return pd_scan(idx, dv, b, x0, p)

    states, final = run(dv_in, b_in, x0_in, p_soft)
    ref_states, ref_final = ref(ref_dv, ref_b, ref_x0, ref_p)
    tol = TOL[dtype]
    assert_close(states, ref_states, tol, "states")
    assert_close(final, ref_final, tol, "final")
    w, wf = torch.randn_like(ref_states), torch.randn_like(ref_final)
    grads = torch.autograd.grad(scan_loss(states, final, w, wf), (dv_in, b_in, x0_in, p_soft))
    ref_grads = torch.autograd.grad(scan_loss(ref_states, ref_final, w, wf), (ref_dv, ref_b, ref_x0, ref_p))
    for name, g, r in zip(("dv", "b", "x0", "p_soft"), grads, ref_grads):
        if not g.is_complex() and r.is_complex():
            g = torch.view_as_complex(g.float())
        assert_close(g, r, tol, name)


@needs_kernels
def test_pd_scan_without_initial_state_or_p_soft():
    idx, dv, b, _ = _pd_kernel_inputs(2, 6, 1, 4)
    inputs, ref_inputs = [leaf(dv), leaf(b)], [leaf(dv), leaf(b)]
    compare(
        lambda dv, b: kernels.pd_scan(idx, dv, b, chunk_size=4),
        lambda dv, b: pd_scan(idx, dv, b),
        inputs,
        ref_inputs,
        2e-5,
    )


@needs_kernels
@pytest.mark.parametrize(
    "dtype,batch,steps,chunk,masked",
    [
        (torch.float32, 2, 11, 4, False),
        (torch.float32, 1, 1, None, False),
        (torch.float32, 2, 7, None, True),
        (torch.bfloat16, 1, 9, 5, True),
        (torch.float32, 3, 9, 2, False),
    ],
)
def test_pd_dictionary_kernel_matches_reference(dtype, batch, steps, chunk, masked):
    """The fused P generation + scan == einsum / argmax / column softmax + the torch scan, gradients included
    (selection weights, dictionary, dv, b, x0)."""
    heads, n, k = 2, 5, 3
    sel = torch.softmax(rand(batch, steps, heads, k), dim=-1)
    dictionary = rand(heads, k, n, n, scale=n**-0.5)
    _, dv, b, _ = _pd_kernel_inputs(batch, steps, heads, n)
    x0 = rand(batch, heads, n, dtype=torch.complex64)
    mask = (torch.rand(batch, steps, device=DEVICE) > 0.3) if masked else None
    inputs = [leaf(sel, dtype), leaf(dictionary, dtype), leaf(dv), leaf(b), leaf(x0)]
    ref_inputs = [leaf(t.detach().float()) for t in inputs[:2]] + [leaf(t) for t in inputs[2:]]
    temperature = 0.7
    idx_ref = pd_generated.dictionary_indices(ref_inputs[0].detach(), ref_inputs[1].detach(), mask)
    assert torch.equal(kernels.pd_select(inputs[0], inputs[1], mask), idx_ref)

    def run(sel, dictionary, dv, b, x0):
        return kernels.pd_dictionary_scan(
            sel, dictionary, dv, b, x0, temperature=temperature, mask=mask, chunk_size=chunk
        )

    def ref(sel, dictionary, dv, b, x0):
        return TORCH_OPS.pd_dictionary_scan(sel, dictionary, dv, b, x0, temperature=temperature, mask=mask)

    compare(run, ref, inputs, ref_inputs, TOL[dtype])


@needs_kernels
def test_pd_scan_rejects_bad_input():
    idx, dv, b, x0 = _pd_kernel_inputs(1, 3, 1, 4)
    with pytest.raises(ValueError, match="idx"):
        kernels.pd_scan(idx[..., :3], dv, b)
    with pytest.raises(ValueError, match="initial_state"):
        kernels.pd_scan(idx, dv, b, x0[..., :3])
    with pytest.raises(ValueError, match="scatter"):
        kernels.pd_scan(idx, dv, b, scatter="dense")


@needs_kernels
@pytest.mark.parametrize(
    "batch,steps,chunk,masked,scatter",
    [
        (2, 11, 4, False, "auto"),
        (1, 1, None, False, "auto"),
        (2, 7, None, True, "onehot"),
        (2, 9, 2, True, "atomic"),
        (3, 9, 2, False, "auto"),
    ],
)
def test_bank_kernel_equals_torch_op(batch, steps, chunk, masked, scatter):
    """Bank mode with the selection argmax and the bank gather inside the scan kernels == ScanOps.pd_bank_scan on
    torch: states, final states and the gradients of logits, scores, dv, b and x0 (padding too)."""
    heads, n, k = 2, 5, 3
    inputs = pd_inputs(batch, steps, heads, n, k, logits=True, device=DEVICE)
    mask = (torch.rand(batch, steps, device=DEVICE) > 0.3) if masked else None

    def run(*tensors, **kwargs):
        return kernels.pd_bank_scan(*tensors, **kwargs, chunk_size=chunk, scatter=scatter)

    def ref(*tensors, **kwargs):
        return TORCH_OPS.pd_bank_scan(*tensors, **kwargs)

    got, want = (run_with_grads(fn, inputs, mask, 0.7, seed=3) for fn in (run, ref))
    for name, g, w in zip(["states", "final", "logits", "scores", "dv", "b", "x0"], got, want):
        assert_close(g, w, 2e-5, name)


@needs_kernels
def test_bank_kernel_rejects_mismatched_scores():
    logits, scores, dv, b, _ = pd_inputs(1, 3, 2, 4, 3, logits=True, device=DEVICE)
    with pytest.raises(ValueError, match="pd_bank_scan: dv must have shape"):
        kernels.pd_bank_scan(logits, scores[..., :3, :3], dv, b)


COMPILE_BANK_KERNELS = """
import importlib, itertools, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
mod = importlib.import_module("hf_ssm.ops.pd.triton")

failures = []
for name, reverse, onehot in itertools.product(["_pd_bank_summary_kernel", "_pd_bank_apply_kernel"], [False, True], [True, False]):
    fn = getattr(mod, name)
    consts = dict(REVERSE=reverse, ONEHOT=onehot, NP=128, HAS_KEEP=True, KP=8)
    if name == "_pd_bank_apply_kernel":
        consts.update(HAS_X0=True, WRITE_Z=reverse)
    ptrs = {"bank_ptr": "*i32", "keep_ptr": "*i32", "cu_ptr": "*i32", "cidx_ptr": "*i32"}
    signature = {a: "constexpr" if a in consts else (ptrs.get(a, "*fp32") if a.endswith("_ptr") else "i32")
                 for a in fn.arg_names}
    try:
        triton.compile(ASTSource(fn, signature, consts), target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    except Exception as exc:
        failures.append(f"{name} {consts}: {exc}")
print("\\n".join(failures) or "bank kernels compiled")
sys.exit(1 if failures else 0)
"""


@needs_kernels
@pytest.mark.slow
def test_bank_kernels_compile_for_sm90_without_a_gpu():
    """The interpreter does not compile: build the bank scan kernels for sm_90 through Triton's whole pipeline."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    result = subprocess.run([sys.executable, "-c", COMPILE_BANK_KERNELS], capture_output=True, text=True, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
