"""The scan ops through their one signature (hf_ssm.ops.dispatch.scan_ops): every op of a family has one name
and one signature in its reference, torch and Triton implementations; for the block / companion / diagonal ops the
torch backend == its sequential loop (values and gradients, with padding masks), a masked step is the
identity, T = 1 (the decoding step) skips the chunked scan, the ops are bound once per (setting, device), and the
Triton backend == the torch backend. Each family's own scan tests: tests/ops/test_{block,diag,pd}_scans.py."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest
import torch
from op_checks import (
    DEVICE,
    companion_coefficients,
    compare,
    kernel_block_inputs,
    kernel_diag_inputs,
    kernels,
    leaf,
    needs_kernels,
    rand,
    values_and_grads,
)

from hf_ssm.modeling.mixer_lru import normalize_gates
from hf_ssm.ops import dispatch
from hf_ssm.ops.block import reference as block_reference
from hf_ssm.ops.diag import reference as diag_reference
from model_checks import ROOT


@pytest.fixture(autouse=True)
def _no_backend_override(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)


def _ops():
    return dispatch.scan_ops("torch", "cpu")


def _block_inputs(batch, steps, blocks=3, m=3):
    p = normalize_gates(3 * torch.randn(batch, steps, blocks, m, m + 1, dtype=torch.float64), "tanh_l1")
    return p[..., :m].contiguous(), torch.randn(batch, steps, blocks, m, dtype=torch.float64)


def _companion_inputs(batch, steps, blocks=3, m=3):
    a = normalize_gates(torch.randn(batch, steps, blocks, m + 1, dtype=torch.float64), "softmax")[..., :m]
    return a.contiguous(), torch.randn(batch, steps, blocks, dtype=torch.float64)


def _diag_inputs(batch, steps):
    a = torch.empty(batch, steps, 4, 2, dtype=torch.float64).uniform_(-1.05, 1.05)
    return a, torch.randn(batch, steps, 4, 2, dtype=torch.float64)


# op name -> (inputs (B, T) -> tuple, initial-state shape from B, the sequential loop)
FAMILIES = {
    "block_scan": (_block_inputs, lambda B: (B, 3, 3), block_reference.block_scan),
    "companion_scan": (_companion_inputs, lambda B: (B, 3, 3), block_reference.companion_scan),
    "diag_scan": (_diag_inputs, lambda B: (B, 4, 2), diag_reference.diag_scan),
}


@pytest.mark.parametrize("steps", [1, 2, 13, 40])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_op_equals_sequential_loop_with_mask_values_and_gradients(family, steps):
    """Every op's torch implementation == its plain loop (a masked step keeps the state there), states, final
    state and the gradients of every input and of the initial state, with padding at the start, inside and at
    the end; T = 1 is the decoding step."""
    make, state_shape, loop = FAMILIES[family]
    inputs = make(2, steps)
    h0 = torch.randn(state_shape(2), dtype=torch.float64)
    mask = torch.rand(2, steps) > 0.3
    mask[0, 0] = mask[1, -1] = False
    op = getattr(_ops(), family)
    got = values_and_grads(op, (*inputs, h0), mask)
    want = values_and_grads(loop, (*inputs, h0), mask)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    for g, r in zip(got[2], want[2]):
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_masked_steps_are_the_identity_like_removed_steps(family):
    """Padding inside the op: a masked run gives, at the kept steps, the states of the same run with the masked
    steps removed, and the same final state."""
    make, state_shape, _ = FAMILIES[family]
    inputs = make(1, 12)
    h0 = torch.randn(state_shape(1), dtype=torch.float64)
    mask = torch.ones(1, 12, dtype=torch.bool)
    mask[0, [0, 5, 6, 11]] = False
    op = getattr(_ops(), family)
    states, final = op(*inputs, h0, mask)
    kept_states, kept_final = op(*(t[:, mask[0]] for t in inputs), h0)
    torch.testing.assert_close(states[:, mask[0]], kept_states)
    torch.testing.assert_close(final, kept_final)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_single_step_does_not_run_the_chunked_scan(family, monkeypatch):
    """T = 1 (decoding) is one O(state) update: the chunked scans are never entered."""

    def fail(*args, **kwargs):
        raise AssertionError("the chunked scan ran for T = 1")

    for name in ("torch_block_scan", "torch_companion_scan", "torch_diag_scan"):
        monkeypatch.setattr(dispatch, name, fail)
    make, state_shape, loop = FAMILIES[family]
    inputs = make(2, 1)
    h0 = torch.randn(state_shape(2), dtype=torch.float64)
    states, final = getattr(_ops(), family)(*inputs, h0)
    torch.testing.assert_close(states, loop(*inputs, h0, None)[0])
    with pytest.raises(AssertionError, match="chunked scan ran"):
        getattr(_ops(), family)(*make(2, 2), h0)


def test_ops_are_bound_once_per_setting_and_device(monkeypatch):
    """scan_ops returns the same bound ops for the same (setting, device); the environment override is honoured
    (and a different override binds different ops); the torch backend never touches the kernels."""
    ops = dispatch.scan_ops("torch", "cpu")
    assert ops is dispatch.scan_ops("torch", torch.device("cpu"))
    assert ops.backend == "torch" and ops._kernels is None
    assert dispatch.scan_ops("auto", "cpu").backend == "torch"  # auto: the kernels only on CUDA
    calls = []
    real = dispatch.resolve_backend
    monkeypatch.setattr(dispatch, "resolve_backend", lambda *a, **k: calls.append(a) or real(*a, **k))
    for _ in range(3):
        dispatch.scan_ops("torch", "cpu")
    assert not calls  # bound already: no resolution per call
    with pytest.raises(ValueError, match="scan_backend"):
        dispatch.scan_ops("fast", "cpu")
    monkeypatch.setenv(dispatch.ENV_VAR, "torch")
    assert dispatch.scan_ops("triton", "cpu").source == f"{dispatch.ENV_VAR}='torch'"


# family -> its ops: each one name in hf_ssm/ops/<family>/{reference, parallel, triton}.py and on ScanOps
OPS = {"pd": ("pd_scan", "pd_dictionary_scan", "pd_bank_scan"), "block": ("block_scan", "companion_scan"),
       "diag": ("diag_scan",)}  # fmt: skip


def _positional(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]


def _kernel_positional(family: str, name: str) -> list[str]:
    """The positional parameters of a Triton op, read from its source (triton need not be installed)."""
    tree = ast.parse((ROOT / "hf_ssm" / "ops" / family / "triton.py").read_text(encoding="utf-8"))
    (fn,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
    return [arg.arg for arg in fn.args.args]


def test_every_op_has_one_name_and_signature_in_its_implementations():
    """An op is found under one name in its family's plain reference, its parallel torch implementation (exported
    by the family package) and its Triton kernel, and on ScanOps; all take the same positional parameters."""
    for family, names in OPS.items():
        package = importlib.import_module(f"hf_ssm.ops.{family}")
        reference = importlib.import_module(f"hf_ssm.ops.{family}.reference")
        for name in names:
            expected = _positional(getattr(package, name))
            assert _positional(getattr(reference, name)) == expected, name
            assert _kernel_positional(family, name) == expected, name
            assert _positional(getattr(dispatch.ScanOps, name))[1:] == expected, name
            if kernels.AVAILABLE:
                assert getattr(kernels, name).__module__ == f"hf_ssm.ops.{family}.triton"


# ------------------------------------------------------------------------------------ Triton == torch


OPS_CASES = {
    # op: (batch, steps) -> its input tensors, the initial state last
    "block_scan": lambda B, T: (*kernel_block_inputs(B, T, 2, 3)[:2], rand(B, 2, 3)),
    "companion_scan": lambda B, T: (companion_coefficients(B, T, 2, 3), rand(B, T, 2), rand(B, 2, 3)),
    "diag_scan": lambda B, T: kernel_diag_inputs(B, T, torch.float32),
}


@needs_kernels
@pytest.mark.parametrize("steps", [1, 11])
@pytest.mark.parametrize("op", list(OPS_CASES))
def test_triton_op_equals_torch_op_with_mask(op, steps, monkeypatch):
    """scan_ops("triton") == scan_ops("torch") for every block / diagonal op through the one public signature,
    with a padding mask and an initial state, values and gradients; T = 1 is the decoding step on both."""
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    tensors = OPS_CASES[op](2, steps)
    mask = torch.rand(2, steps, device=DEVICE) > 0.3
    mask[0, -1] = False  # a masked last step: the final state is the one before it
    inputs, ref_inputs = [leaf(t) for t in tensors], [leaf(t) for t in tensors]
    fast = getattr(dispatch.scan_ops("triton", DEVICE), op)
    ref = getattr(dispatch.scan_ops("torch", DEVICE), op)
    compare(lambda *t: fast(*t, mask), lambda *t: ref(*t, mask), inputs, ref_inputs, 2e-5)
