"""LrcSSM and its diagonal GRU / MGU / LSTM variants (docs/design.md §6): diagonal scan, DEER solver, mixers, model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import hf_ssm.modeling.mixer_lrc as mixer_lrc
from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling.deer import (
    DEERDivergenceError,
    DEEROptions,
    _linear_scan,
    _shift,
    deer_solve,
    jacobian_by_jvp,
    sequential_rollout,
)
from hf_ssm.modeling.mixer_lrc import LRC_MIXER_CLASSES
from hf_ssm.modeling.scan_diag import diag_scan, diag_scan_sequential
from hf_ssm.modeling.scan_dispatch import scan_ops
from model_checks import assert_loads_without_hf_ssm, max_cached_decode_error, reload_is_bit_identical, tiny_config

MIXERS = list(LRC_MIXER_CLASSES)


# ---------------------------------------------------------------------------------------------------------------
# Diagonal scan


def _coefficients(shape, dtype):
    """Transition coefficients with zeros, negatives and a few |a| > 1, bounded so that long products stay finite."""
    a = torch.empty(shape, dtype=torch.float64).uniform_(-1.05, 1.05)
    a[:, ::7] = 0.0
    if dtype.is_complex:
        a = torch.polar(a.abs(), torch.rand(shape, dtype=torch.float64) * 6.3)
    return a.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("steps,batch", [(1, 1), (5, 2), (64, 1), (65, 2), (257, 2), (4100, 1)])
def test_diag_scan_matches_sequential_with_gradients(steps, batch, dtype):
    """Parallel diagonal scan == the sequential loop, outputs and gradients (a may be 0, negative, |a| > 1)."""
    a = _coefficients((batch, steps, 3, 2), dtype).requires_grad_()
    b = torch.randn(batch, steps, 3, 2, dtype=dtype, requires_grad=True)
    x0 = torch.randn(batch, 3, 2, dtype=dtype, requires_grad=True)
    tol = 1e-9 if dtype == torch.float64 else 2e-4
    states_ref, final_ref = diag_scan_sequential(a, b, x0)
    states, final = diag_scan(a, b, x0)
    assert (states - states_ref).abs().max() <= tol * (1 + states_ref.abs().max())
    assert torch.equal(final, states[:, -1])
    w = torch.randn_like(states_ref)
    grads_ref = torch.autograd.grad((states_ref * w.conj()).real.sum() + final_ref.abs().sum(), (a, b, x0))
    grads = torch.autograd.grad((states * w.conj()).real.sum() + final.abs().sum(), (a, b, x0))
    for g, g_ref in zip(grads, grads_ref):
        assert (g - g_ref).abs().max() <= tol * (1 + g_ref.abs().max())


@pytest.mark.parametrize("chunk", [1, 3, 16, 1000])
def test_diag_scan_chunk_size_does_not_change_result(chunk):
    """Any chunk length (padding, recursion, a single chunk) gives the same states."""
    a, b = _coefficients((2, 300, 4), torch.float64), torch.randn(2, 300, 4, dtype=torch.float64)
    ref, _ = diag_scan_sequential(a, b)
    assert torch.allclose(diag_scan(a, b, chunk_size=chunk)[0], ref, atol=1e-12)


def test_diag_scan_bfloat16_accumulates_in_float32():
    """bf16 inputs are scanned in float32: the result equals the float32 scan of the same values, cast to bf16."""
    a = torch.rand(1, 2000, 8).mul(0.2).add(0.8).bfloat16()
    b = torch.randn(1, 2000, 8).bfloat16()
    states, _ = diag_scan(a, b)
    ref, _ = diag_scan_sequential(a.float(), b.float())
    assert states.dtype == torch.bfloat16
    assert torch.allclose(states.float(), ref, atol=0.05, rtol=0.01)


def test_diag_scan_bad_inputs_raise():
    """Mismatched shapes, dtypes, a wrong initial state, a wrong mask or T = 0 raise a clear error."""
    a = torch.rand(2, 5, 3)
    with pytest.raises(ValueError, match="share the shape"):
        diag_scan(a, torch.rand(2, 5, 4))
    with pytest.raises(TypeError, match="dtype"):
        diag_scan(a, a.double())
    with pytest.raises(ValueError, match="initial_state"):
        diag_scan(a, a, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        diag_scan(a, a, mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="T >= 1"):
        diag_scan(a[:, :0], a[:, :0])


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
    sys.path.insert(0, sys.argv[1])
    from test_lrc import _arguments, _mixer, _unrolled_deer
    from hf_ssm.modeling.deer import DEEROptions, deer_solve

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
        [sys.executable, "-c", PEAK_MEMORY, here], capture_output=True, text=True, cwd=here, env=env
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


# ---------------------------------------------------------------------------------------------------------------
# Mixers inside the hybrid model


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
    (deer.py, scan_diag.py and mixer_lrc.py are copied with it) and gives identical logits."""
    model = HybridSSMForCausalLM(tiny_config("LGMRA", lrc_num_channels=8))
    assert {"deer.py", "scan_diag.py", "mixer_lrc.py"} <= assert_loads_without_hf_ssm(model, tmp_path / "lrc")
