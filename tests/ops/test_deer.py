"""The DEER solver (hf_ssm.ops.deer, docs/design.md §6) on the nonlinear cells of the LrcSSM family (lrc / gru / mgu
/ lstm): each cell's analytic Jacobian equals forward-mode JVPs; DEER equals the sequential rollout, values and
implicit gradients, with padding; Newton iterations stay far below T; a diverging step is damped; non-finite cells
and the iteration limit are reported; and the memory of the backward pass does not grow with the iterations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from hf_ssm.modeling.mixer_lrc import LRC_MIXER_CLASSES
from hf_ssm.ops.deer import DEERDivergenceError, DEEROptions, deer_solve, jacobian_by_jvp, sequential_rollout
from hf_ssm.ops.deer.parallel import _linear_scan, _shift
from hf_ssm.ops.diag import diag_scan
from hf_ssm.ops.dispatch import scan_ops
from model_checks import tiny_config

MIXERS = list(LRC_MIXER_CLASSES)


# ---------------------------------------------------------------------------------------------------------------
# Cells and the DEER solver


def _mixer(name: str, stiff: bool = False, gain: float = 5.0, input_std: float = 3.0, **overrides):
    """A small mixer; `stiff`: recurrent gains x `gain` (|J| > 1 in places) and input projections of std
    `input_std` per weight (3: saturated, switching gates). Stiff but not chaotic: float32 and float64 sequential
    loops still agree to ~1e-6 there, so a 1e-5 comparison is meaningful."""
    config = tiny_config([name], hidden_size=16, lrc_num_channels=8, **overrides)
    torch.manual_seed(1)
    mixer = LRC_MIXER_CLASSES[name](config, 0)
    if stiff:
        with torch.no_grad():
            (mixer.state_gain if name == "lrc_ssm" else mixer.recurrent).mul_(gain)
            mixer.in_proj.weight.normal_(0.0, input_std)
    return mixer


def _arguments(mixer, batch: int, steps: int, requires_grad: bool = False):
    """Cell inputs (B, T, D), weights (D,) and a random initial state, as leaf tensors."""
    u = torch.randn(batch, steps, 16)
    with torch.no_grad():
        inputs, weights = mixer.cell_arguments(u)
    inputs = tuple(i.detach().float().clone().requires_grad_(requires_grad) for i in inputs)
    weights = tuple(w.detach().float().clone().requires_grad_(requires_grad) for w in weights)
    x0 = (0.5 * torch.randn(batch, *mixer.state_shape)).requires_grad_(requires_grad)
    return inputs, weights, x0


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")  # torch's forward-AD setup
@pytest.mark.parametrize("stiff", [False, True])
@pytest.mark.parametrize("name", MIXERS)
def test_analytic_jacobian_equals_forward_mode_jvp(name, stiff):
    """Each cell's analytic Jacobian (diagonal, or the LSTM's 2 x 2 blocks) equals forward-mode JVPs exactly."""
    mixer = _mixer(name, stiff)
    inputs, weights, _ = _arguments(mixer, 2, 7)
    x = 2.0 * torch.randn(2, 7, *mixer.state_shape)
    fx, jac = mixer.cell.step_and_jacobian(x, inputs, weights)
    fx_ref, jac_ref = jacobian_by_jvp(mixer.cell, x, inputs, weights)
    assert jac.shape == ((2, 7, 8) if mixer.cell.block == 1 else (2, 7, 2, 2, 8))  # planar LSTM blocks
    assert torch.allclose(fx, fx_ref, atol=1e-6)
    assert torch.allclose(jac, jac_ref, atol=1e-5, rtol=1e-5)
    # The JVP of a diagonal cell really is the full Jacobian: no channel feeds another (checked densely).
    dense = torch.autograd.functional.jacobian(lambda v: mixer.cell.step(v, inputs, weights)[0, 0], x[0, 0])
    m = mixer.cell.block
    if m == 1:
        blocks = torch.diag(jac_ref[0, 0])
    else:  # planar (slot, channel) order -> (channel, slot), where the blocks sit on the diagonal
        dense = dense.reshape(m, 8, m, 8).permute(1, 0, 3, 2)
        blocks = torch.block_diag(*jac_ref[0, 0].permute(2, 0, 1))
    dense = dense.reshape(8 * m, 8 * m)
    assert torch.allclose(dense, blocks, atol=1e-6)


@pytest.mark.parametrize("stiff", [False, True], ids=["random", "stiff"])
@pytest.mark.parametrize("steps", [1, 5, 257, 2048])
@pytest.mark.parametrize("name", MIXERS)
def test_deer_equals_sequential_outputs_and_gradients(name, steps, stiff):
    """DEER == the sequential loop of the same cell to 1e-5 (float32), and its implicit gradients (inputs, weights,
    x0) == backpropagation through the loop to 1e-4 of the gradient's scale; default tol 1e-4."""
    mixer = _mixer(name, stiff)
    inputs, weights, x0 = _arguments(mixer, 2, steps, requires_grad=True)
    states, info = deer_solve(mixer.cell, inputs, weights, x0, options=mixer.options)
    ref = sequential_rollout(mixer.cell, inputs, weights, x0)
    assert info.converged and info.iterations <= max(steps, 1) + info.rejected
    assert (states - ref).abs().max().item() <= 1e-5, info
    w = torch.randn_like(ref)
    leaves = (*inputs, *weights, x0)
    grads = torch.autograd.grad((states * w).sum(), leaves)
    grads_ref = torch.autograd.grad((ref * w).sum(), leaves)
    for g, g_ref in zip(grads, grads_ref):
        assert (g - g_ref).abs().max().item() <= 1e-4 * max(1.0, g_ref.abs().max().item())


@pytest.mark.parametrize("name", MIXERS)
def test_masked_steps_keep_the_state(name):
    """With a padding mask, DEER == the masked sequential loop, and at every masked step the state is unchanged."""
    mixer = _mixer(name)
    inputs, weights, x0 = _arguments(mixer, 3, 40, requires_grad=True)
    mask = torch.rand(3, 40) > 0.3
    mask[0, :10] = False  # left padding
    states, _ = deer_solve(mixer.cell, inputs, weights, x0, mask=mask)
    ref = sequential_rollout(mixer.cell, inputs, weights, x0, mask=mask)
    assert (states - ref).abs().max() <= 1e-5
    prev = _shift(states, x0)
    assert torch.allclose(states[~mask], prev[~mask], atol=1e-6, rtol=0)
    grads = torch.autograd.grad(states.sum(), inputs)
    grads_ref = torch.autograd.grad(ref.sum(), inputs)
    for g, g_ref in zip(grads, grads_ref):
        assert torch.allclose(g, g_ref, atol=1e-4)
        assert torch.all(g[~mask] == 0)  # padded steps get no gradient


@pytest.mark.parametrize("name", MIXERS)
def test_newton_iterations_stay_far_below_sequence_length(name):
    """At T = 2048 DEER converges (tol 1e-4) in <= 20 Newton iterations, ~100x fewer than T sequential steps."""
    mixer = _mixer(name)
    inputs, weights, x0 = _arguments(mixer, 2, 2048)
    _, info = deer_solve(mixer.cell, inputs, weights, x0, options=mixer.options)
    print(f"{name}: T = 2048, Newton iterations = {info.iterations}, residual = {info.residual:.2e}")
    assert info.converged and info.rejected == 0
    assert info.iterations <= 20, info
    assert info.residual <= 1e-4


def test_diverging_newton_step_is_caught_and_damped_to_convergence():
    """Undamped Newton from the zero guess blows up for a stiff LRC (checked directly); the solver rejects that
    iterate, damps (ELK-style) and still converges to the sequential answer, with no NaN anywhere."""
    mixer = _mixer("lrc_ssm", stiff=True, gain=8.0, input_std=0.3)
    inputs, weights, x0 = _arguments(mixer, 2, 2048)
    x0 = torch.zeros_like(x0)
    guess = torch.zeros(2, 2048, 8)
    fx, jac = mixer.cell.step_and_jacobian(_shift(guess, x0), inputs, weights)
    first = _linear_scan(jac, fx - jac * _shift(guess, x0), x0, 1, scan_ops("torch", "cpu"))
    assert not (first.abs().max() < 1e6)  # plain Newton diverges here (inf / NaN / huge)
    states, info = deer_solve(mixer.cell, inputs, weights, x0, options=mixer.options)
    print(f"diverging case: {info}")
    assert info.rejected >= 1 and info.converged and torch.isfinite(states).all()
    assert info.iterations <= 30, info
    ref = sequential_rollout(mixer.cell, inputs, weights, x0)
    assert (states - ref).abs().max() <= 1e-5


def test_non_finite_cell_raises_clear_error_instead_of_nan():
    """If even a fully damped (fixed-point) step is non-finite, deer_solve raises DEERDivergenceError, never NaNs."""
    mixer = _mixer("gru_ssm")
    inputs, weights, x0 = _arguments(mixer, 1, 30)
    inputs = (inputs[0], inputs[1], inputs[2].clone())
    inputs[2][0, 12, 3] = float("nan")
    with pytest.raises(DEERDivergenceError, match="non-finite"):
        deer_solve(mixer.cell, inputs, weights, x0)


def test_iteration_limit_warns_and_reports_non_convergence():
    """Stopping at max_iter before convergence warns and sets info.converged = False with the counts used."""
    mixer = _mixer("lrc_ssm")
    inputs, weights, x0 = _arguments(mixer, 2, 200)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        _, info = deer_solve(mixer.cell, inputs, weights, x0, options=DEEROptions(tol=0.0, max_iter=2))
    assert info.iterations == 2 and not info.converged


def _unrolled_deer(cell, inputs, weights, x0, iterations):
    """Control for the memory tests: DEER with autograd through every iteration (what the solver avoids; J is
    taken as a constant here, which only makes the control's graph smaller)."""
    x = torch.zeros(x0.shape[0], inputs[0].shape[1], *x0.shape[1:])
    for _ in range(iterations):
        prev = _shift(x, x0)
        _, jac = cell.step_and_jacobian(prev.detach(), inputs, weights)
        x, _ = diag_scan(jac, cell.step(prev, inputs, weights) - jac * prev, x0)
    return x


def _saved_bytes(fn) -> int:
    """Bytes that autograd keeps for backward while building the graph of fn()."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total[0]


@pytest.mark.filterwarnings("ignore:DEER did not converge")  # tol = 0 forces the iteration count
def test_saved_activations_do_not_grow_with_newton_iterations():
    """The implicit gradient saves the same bytes for 3 or 30 forced iterations (tol = 0); unrolled DEER grows."""
    mixer = _mixer("lrc_ssm")
    inputs, weights, x0 = _arguments(mixer, 2, 256, requires_grad=True)

    def solve(n):
        return lambda: deer_solve(mixer.cell, inputs, weights, x0, options=DEEROptions(tol=0.0, max_iter=n))

    assert _saved_bytes(solve(3)) == _saved_bytes(solve(30))
    few = _saved_bytes(lambda: _unrolled_deer(mixer.cell, inputs, weights, x0, 3))
    many = _saved_bytes(lambda: _unrolled_deer(mixer.cell, inputs, weights, x0, 30))
    assert many > 5 * few  # the measurement is sensitive to per-iteration storage


PEAK_MEMORY = textwrap.dedent(
    """
    import gc, json, sys, torch
    sys.path[:0] = sys.argv[1:]  # this folder, and tests/ for model_checks
    from test_deer import _arguments, _mixer, _unrolled_deer
    from hf_ssm.ops.deer import DEEROptions, deer_solve

    def rss(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) * 1024

    def reset_peak():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS mark (VmHWM) to the current RSS

    torch.set_num_threads(1)
    mixer = _mixer("lrc_ssm")
    inputs, weights, x0 = _arguments(mixer, 8, 4096, requires_grad=True)
    peaks = {}
    # The first pass pays one-off allocations (autograd engine, kernels): a warm-up pass, not measured.
    for method, n in [("deer", 3), ("deer", 3), ("deer", 30), ("unrolled", 2), ("unrolled", 6)]:
        gc.collect()
        reset_peak()
        base = rss("VmRSS")
        if method == "deer":
            y, _ = deer_solve(mixer.cell, inputs, weights, x0, options=DEEROptions(tol=0.0, max_iter=n))
        else:
            y = _unrolled_deer(mixer.cell, inputs, weights, x0, n)
        loss = y.square().sum()
        forward = rss("VmHWM") - base
        reset_peak()
        loss.backward()
        peaks[f"{method}-{n}"] = {"forward": forward, "backward": rss("VmHWM") - base}
        del y
        for t in (*inputs, *weights, x0):
            t.grad = None
    print(json.dumps(peaks))
    """
)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc peak-RSS reset")
@pytest.mark.filterwarnings("ignore:DEER did not converge")
def test_backward_peak_memory_does_not_grow_with_newton_iterations():
    """Peak RSS of the backward pass (and of the forward), above the RSS before the forward, with 3 vs 30 forced
    Newton iterations (B*T*D = 256K floats = 1 MiB per state tensor) differs by less than one state tensor;
    unrolled DEER (the control: autograd through the iterations) grows by many state tensors."""
    here = os.path.dirname(__file__)
    # Every allocation >= 64 KiB gets its own mmap, returned to the OS when freed: RSS then tracks live tensors
    # exactly instead of glibc's heap fragmentation (which otherwise adds tens of MiB of noise).
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    result = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY, here, os.path.dirname(here)],
        capture_output=True,
        text=True,
        cwd=here,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    peaks = json.loads(result.stdout.strip().splitlines()[-1])
    print(
        "peak RSS above the pre-forward RSS (MiB):",
        {k: {p: round(v / 2**20, 2) for p, v in d.items()} for k, d in peaks.items()},
    )
    state_bytes = 8 * 4096 * 8 * 4
    for phase in ("backward", "forward"):
        assert peaks["deer-30"][phase] - peaks["deer-3"][phase] < state_bytes, peaks
    assert peaks["unrolled-6"]["backward"] - peaks["unrolled-2"]["backward"] > 16 * state_bytes, peaks
