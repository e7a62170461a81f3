"""The block / companion / diagonal scan ops (scan_dispatch.scan_ops): one signature, torch backend == the
sequential loops (values and gradients, with padding masks), the T = 1 decoding step, binding once per (setting,
device), and the mixers' decode step and autocast behaviour. Triton == torch for the same ops: test_kernels.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_ssm.modeling import scan_block, scan_diag, scan_dispatch
from hf_ssm.modeling.configuration_hybrid_ssm import HybridSSMConfig
from hf_ssm.modeling.mixer_lrc import LRC_MIXER_CLASSES
from hf_ssm.modeling.mixer_lru import BlockDiagonalLRUMixer, DiagonalLRUMixer, HigherOrderLRUMixer, normalize_gates
from hf_ssm.modeling.scan_block import block_scan_sequential, companion_matrices
from hf_ssm.modeling.scan_diag import diag_scan_sequential


@pytest.fixture(autouse=True)
def _no_backend_override(monkeypatch):
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)


def _ops():
    return scan_dispatch.scan_ops("torch", "cpu")


def _block_inputs(batch, steps, blocks=3, m=3):
    p = normalize_gates(3 * torch.randn(batch, steps, blocks, m, m + 1, dtype=torch.float64), "tanh_l1")
    return p[..., :m].contiguous(), torch.randn(batch, steps, blocks, m, dtype=torch.float64)


def _companion_inputs(batch, steps, blocks=3, m=3):
    a = normalize_gates(torch.randn(batch, steps, blocks, m + 1, dtype=torch.float64), "softmax")[..., :m]
    return a.contiguous(), torch.randn(batch, steps, blocks, dtype=torch.float64)


def _diag_inputs(batch, steps):
    a = torch.empty(batch, steps, 4, 2, dtype=torch.float64).uniform_(-1.05, 1.05)
    return a, torch.randn(batch, steps, 4, 2, dtype=torch.float64)


def _companion_loop(a, v, h0, mask):
    m = a.shape[-1]
    return block_scan_sequential(companion_matrices(a), nn.functional.pad(v.unsqueeze(-1), (0, m - 1)), h0, mask)


# op name -> (inputs (B, T) -> tuple, initial-state shape from B, the sequential loop)
FAMILIES = {
    "block_scan": (_block_inputs, lambda B: (B, 3, 3), block_scan_sequential),
    "companion_scan": (_companion_inputs, lambda B: (B, 3, 3), _companion_loop),
    "diag_scan": (_diag_inputs, lambda B: (B, 4, 2), diag_scan_sequential),
}


def _values_and_grads(fn, tensors, mask):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    states, final = fn(*leaves, mask) if mask is not None else fn(*leaves)
    w = torch.randn(states.shape, dtype=states.dtype, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((states * w).sum() + final.square().sum(), leaves)
    return states.detach(), final.detach(), grads


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
    got = _values_and_grads(op, (*inputs, h0), mask)
    want = _values_and_grads(loop, (*inputs, h0), mask)
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
        monkeypatch.setattr(scan_dispatch, name, fail)
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
    ops = scan_dispatch.scan_ops("torch", "cpu")
    assert ops is scan_dispatch.scan_ops("torch", torch.device("cpu"))
    assert ops.backend == "torch" and ops._kernels is None
    assert scan_dispatch.scan_ops("auto", "cpu").backend == "torch"  # auto: the kernels only on CUDA
    calls = []
    real = scan_dispatch.resolve_backend
    monkeypatch.setattr(scan_dispatch, "resolve_backend", lambda *a, **k: calls.append(a) or real(*a, **k))
    for _ in range(3):
        scan_dispatch.scan_ops("torch", "cpu")
    assert not calls  # bound already: no resolution per call
    with pytest.raises(ValueError, match="scan_backend"):
        scan_dispatch.scan_ops("fast", "cpu")
    monkeypatch.setenv(scan_dispatch.ENV_VAR, "torch")
    assert scan_dispatch.scan_ops("triton", "cpu").source == f"{scan_dispatch.ENV_VAR}='torch'"


def test_torch_ops_keep_the_old_reference_functions_signature():
    """The torch references take the op signature directly: (inputs..., initial_state, mask)."""
    A, b = _block_inputs(1, 5)
    mask = torch.tensor([[True, False, True, True, False]])
    torch.testing.assert_close(scan_block.block_scan(A, b, None, mask)[0], block_scan_sequential(A, b, None, mask)[0])
    a, x = _diag_inputs(1, 5)
    torch.testing.assert_close(scan_diag.diag_scan(a, x, None, mask)[0], diag_scan_sequential(a, x, None, mask)[0])


# ---------------------------------------------------------------------------------------------------------------
# mixers: decode step == full forward; projections in bf16 under autocast


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
    import hf_ssm.modeling.mixer_lrc as mixer_lrc

    def fail(*args, **kwargs):
        raise AssertionError("chunk machinery ran for T = 1")

    for name_ in ("torch_block_scan", "torch_companion_scan", "torch_diag_scan"):
        monkeypatch.setattr(scan_dispatch, name_, fail)
    monkeypatch.setattr(mixer_lrc, "deer_solve", fail)
    mixer = _mixer(name)
    state = mixer.initial_state(2) + 0.1
    y, final = mixer(torch.randn(2, 1, 8), state=state)
    assert y.shape == (2, 1, 8) and final.shape == state.shape


@pytest.mark.parametrize("name", ALL_MIXERS)
def test_autocast_runs_projections_in_bf16_and_scan_in_float32(name, monkeypatch):
    """Under torch.autocast(bfloat16) every projection of an LRU / LRC mixer computes in bf16, while the scan (or
    the DEER solve) receives float32 inputs and returns a float32 state."""
    import hf_ssm.modeling.mixer_lrc as mixer_lrc

    mixer = _mixer(name)
    seen_linear, seen_scan = {}, []
    for proj_name, module in mixer.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda mod, args, out, n=proj_name: seen_linear.__setitem__(n, out.dtype))
    real_ops = scan_dispatch.ScanOps

    class SpyOps(real_ops):
        def _record(self, tensors):
            seen_scan.append({t.dtype for t in tensors if t is not None})

        def block_scan(self, A, b, initial_state=None, mask=None, **kw):
            self._record((A, b, initial_state))
            return super().block_scan(A, b, initial_state, mask, **kw)

        def companion_scan(self, a, v, initial_state=None, mask=None, **kw):
            self._record((a, v, initial_state))
            return super().companion_scan(a, v, initial_state, mask, **kw)

    monkeypatch.setattr(scan_dispatch, "_bound_ops", {})
    monkeypatch.setattr(scan_dispatch, "ScanOps", SpyOps)
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


@pytest.mark.parametrize("steps", [16, 13])
def test_block_scan_on_planar_views_equals_contiguous_input(steps):
    """Slot-major (planar) inputs, passed as transposed views as DEER passes them, give the states, final state
    and gradients of the same values stored (B, T, N, m); T a multiple of the chunk (read in place) or not."""
    A, b = _block_inputs(2, steps, blocks=5, m=2)
    h0 = torch.randn(2, 5, 2, dtype=torch.float64)
    planar = (A.permute(0, 1, 3, 4, 2).contiguous(), b.transpose(-1, -2).contiguous())

    def as_views(Ap, bp, h):
        return scan_block.block_scan(Ap.permute(0, 1, 4, 2, 3), bp.transpose(-1, -2), h, chunk_size=4)

    def contiguous(A_, b_, h):
        return scan_block.block_scan(A_, b_, h, chunk_size=4)

    got = _values_and_grads(as_views, (*planar, h0), None)
    want = _values_and_grads(contiguous, (A, b, h0), None)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    torch.testing.assert_close(got[2][0].permute(0, 1, 4, 2, 3), want[2][0])
    torch.testing.assert_close(got[2][1].transpose(-1, -2), want[2][1])
    torch.testing.assert_close(got[2][2], want[2][2])
