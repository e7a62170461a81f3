"""Triton scans (hf_ssm.kernels) against their torch references (docs/design.md §9), and the backend dispatch.

Every kernel is compared with its torch twin, outputs and gradients, in float32 and bfloat16 (the reference runs in
float32 on the same bf16-rounded inputs), with T = 1, odd T, T not a multiple of the chunk, B = 1 and packed
variable lengths. On a CPU the kernels run in the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1
before anything imports triton), so the shapes are tiny; on a CUDA machine the same tests run compiled.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():  # must precede the first import of triton (conftest.py does the same)
    os.environ.setdefault("TRITON_INTERPRET", "1")

kernels = pytest.importorskip("hf_ssm.kernels")
if not kernels.AVAILABLE:
    pytest.skip(f"Triton kernels unavailable: {kernels.UNAVAILABLE_REASON}", allow_module_level=True)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
_ok, _why = kernels.can_run(DEVICE)
if not _ok:
    pytest.skip(f"Triton kernels cannot run on {DEVICE}: {_why}", allow_module_level=True)

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM  # noqa: E402
from hf_ssm.modeling import pd_ops, scan_dispatch  # noqa: E402
from hf_ssm.modeling.scan_block import block_scan as torch_block_scan  # noqa: E402
from hf_ssm.modeling.scan_diag import diag_scan as torch_diag_scan  # noqa: E402
from hf_ssm.modeling.scan_pd import pd_scan as torch_pd_scan  # noqa: E402
from model_checks import tiny_config  # noqa: E402

# (batch, steps, chunk): T = 1; odd T in one chunk; T not a multiple of the chunk (3 chunks); B = 1 with 2 chunks.
SHAPES = [(1, 1, None), (2, 7, None), (2, 11, 4), (1, 9, 5)]
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def _rand(*shape, dtype=torch.float32, scale=1.0):
    return (scale * torch.randn(*shape, dtype=torch.float32 if dtype == torch.bfloat16 else dtype)).to(DEVICE)


def _leaf(t, dtype=None):
    """A fresh leaf on DEVICE, rounded to `dtype` first."""
    t = t if dtype is None else t.to(dtype)
    return t.detach().clone().requires_grad_()


def _assert_close(got, ref, tol, what=""):
    got, ref = got.detach(), ref.detach()
    if got.is_complex() or ref.is_complex():
        got, ref = got.to(torch.complex64), ref.to(torch.complex64)
    else:
        got, ref = got.float(), ref.float()
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= tol * (1 + ref.abs().max().item()), f"{what}: max error {err:.3g}"


def _loss(states, final, w, wf):
    """A scalar touching every state and the final state (so both gradients flow)."""
    return (
        (states * w.conj()).real.sum() + (final * wf.conj()).real.sum()
        if states.is_complex()
        else ((states.float() * w).sum() + (final.float() * wf).sum())
    )


def _compare(run, ref, inputs, ref_inputs, tol):
    """run(*inputs) and ref(*ref_inputs) -> (states, final): equal outputs and input gradients."""
    states, final = run(*inputs)
    ref_states, ref_final = ref(*ref_inputs)
    _assert_close(states, ref_states, tol, "states")
    _assert_close(final, ref_final, tol, "final")
    w, wf = torch.randn_like(ref_states), torch.randn_like(ref_final)
    wanted = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(_loss(states, final, w, wf), [inputs[i] for i in wanted])
    ref_grads = torch.autograd.grad(_loss(ref_states, ref_final, w, wf), [ref_inputs[i] for i in wanted])
    for i, g, r in zip(wanted, grads, ref_grads):
        _assert_close(g, r, tol, f"gradient of input {i}")


# ---------------------------------------------------------------------------------------------------------------
# diagonal scan


def _diag_inputs(batch, steps, dtype, channels=(3, 2)):
    a_dtype = torch.complex64 if dtype == torch.complex64 else torch.float32
    shape = (batch, steps, *channels)
    if dtype == torch.complex64:  # |a| up to 1.1: growing states are legal too
        a = torch.polar(1.1 * torch.rand(shape, device=DEVICE), 6.3 * torch.rand(shape, device=DEVICE))
    else:
        a = 1.2 * _rand(*shape).clamp(-1.0, 1.0)
    a[:, ::4] = 0  # zero coefficients are legal
    b = _rand(batch, steps, *channels, dtype=a_dtype)
    x0 = _rand(batch, *channels, dtype=a_dtype)
    return a, b, x0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64])
@pytest.mark.parametrize("batch,steps,chunk", SHAPES)
def test_diag_scan_matches_torch(dtype, batch, steps, chunk):
    a, b, x0 = _diag_inputs(batch, steps, dtype)
    inputs = [_leaf(t, dtype if dtype == torch.bfloat16 else None) for t in (a, b, x0)]
    ref_inputs = [_leaf(t.detach().float() if dtype == torch.bfloat16 else t) for t in inputs]
    tol = TOL.get(dtype, 2e-5)

    def run(a, b, x0):
        return kernels.diag_scan(a, b, x0, chunk_size=chunk)

    _compare(run, torch_diag_scan, inputs, ref_inputs, tol)
    # without an initial state
    _compare(lambda a, b: run(a, b, None), lambda a, b: torch_diag_scan(a, b), inputs[:2], ref_inputs[:2], tol)


# ---------------------------------------------------------------------------------------------------------------
# block scans (BD-LRU dense blocks, H-LRU companion blocks)


def _block_inputs(batch, steps, blocks, m):
    A = torch.softmax(_rand(batch, steps, blocks, m, m + 1), dim=-1)[..., :m] * 1.2  # |rows| around 1
    b = _rand(batch, steps, blocks, m)
    h0 = _rand(batch, blocks, m)
    return A, b, h0


BLOCK_CASES = [
    # (m, dtype, batch, steps, chunk)
    (1, torch.float32, 2, 11, 4),
    (2, torch.float32, 1, 1, None),
    (3, torch.float32, 2, 7, None),
    (3, torch.bfloat16, 2, 11, 4),
    (4, torch.float32, 1, 9, 5),
    (8, torch.float32, 2, 11, 4),
    (8, torch.bfloat16, 1, 1, None),
]


@pytest.mark.parametrize("m,dtype,batch,steps,chunk", BLOCK_CASES)
def test_block_scan_matches_torch(m, dtype, batch, steps, chunk):
    A, b, h0 = _block_inputs(batch, steps, 3, m)
    inputs = [_leaf(t, dtype) for t in (A, b, h0)]
    ref_inputs = [_leaf(t.detach().float()) for t in inputs]
    _compare(
        lambda A, b, h0: kernels.block_scan(A, b, h0, chunk_size=chunk),
        torch_block_scan,
        inputs,
        ref_inputs,
        TOL[dtype],
    )


def _companion_reference(a, v, h0, mask=None):
    return scan_dispatch.scan_ops("torch", DEVICE).companion_scan(a, v, h0, mask)


@pytest.mark.parametrize(
    "m,dtype,batch,steps,chunk",
    [
        (2, torch.float32, 2, 11, 4),
        (3, torch.bfloat16, 1, 9, 5),
        (4, torch.float32, 1, 1, None),
        (8, torch.float32, 2, 7, None),
    ],
)
def test_companion_scan_matches_torch(m, dtype, batch, steps, chunk):
    a = torch.softmax(_rand(batch, steps, 3, m + 1), dim=-1)[..., :m]
    v, h0 = _rand(batch, steps, 3), _rand(batch, 3, m)
    inputs = [_leaf(t, dtype) for t in (a, v, h0)]
    ref_inputs = [_leaf(t.detach().float()) for t in inputs]
    _compare(
        lambda a, v, h0: kernels.companion_scan(a, v, h0, chunk_size=chunk),
        _companion_reference,
        inputs,
        ref_inputs,
        TOL[dtype],
    )


@pytest.mark.parametrize("companion", [False, True], ids=["dense", "companion"])
def test_block_scans_with_padding_mask(companion):
    """A masked step is the identity with zero input (padding), in the kernel and in the torch path."""
    m, batch, steps = 3, 2, 11
    mask = torch.rand(batch, steps, device=DEVICE) > 0.3
    if companion:
        first = torch.softmax(_rand(batch, steps, 2, m + 1), dim=-1)[..., :m]
        inputs = [_leaf(t) for t in (first, _rand(batch, steps, 2), _rand(batch, 2, m))]
        run, ref = kernels.companion_scan, _companion_reference
    else:
        inputs = [_leaf(t) for t in _block_inputs(batch, steps, 2, m)]
        run = kernels.block_scan

        def ref(A, b, h0, mask):
            return scan_dispatch.scan_ops("torch", DEVICE).block_scan(A, b, h0, mask)

    ref_inputs = [_leaf(t) for t in inputs]
    _compare(lambda *t: run(*t, mask=mask, chunk_size=4), lambda *t: ref(*t, mask=mask), inputs, ref_inputs, 2e-5)


OPS_CASES = {
    # op: (inputs of (batch, steps) -> tuple of leaves, initial state shape)
    "block_scan": lambda B, T: (*_block_inputs(B, T, 2, 3)[:2], _rand(B, 2, 3)),
    "companion_scan": lambda B, T: (
        torch.softmax(_rand(B, T, 2, 4), dim=-1)[..., :3],
        _rand(B, T, 2),
        _rand(B, 2, 3),
    ),
    "diag_scan": lambda B, T: _diag_inputs(B, T, torch.float32),
}


@pytest.mark.parametrize("steps", [1, 11])
@pytest.mark.parametrize("op", list(OPS_CASES))
def test_triton_op_equals_torch_op_with_mask(op, steps, monkeypatch):
    """scan_ops("triton") == scan_ops("torch") for every block / diagonal op through the one public signature,
    with a padding mask and an initial state, values and gradients; T = 1 is the decoding step on both."""
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)
    tensors = OPS_CASES[op](2, steps)
    mask = torch.rand(2, steps, device=DEVICE) > 0.3
    mask[0, -1] = False  # a masked last step: the final state is the one before it
    inputs, ref_inputs = [_leaf(t) for t in tensors], [_leaf(t) for t in tensors]
    fast = getattr(scan_dispatch.scan_ops("triton", DEVICE), op)
    ref = getattr(scan_dispatch.scan_ops("torch", DEVICE), op)
    _compare(lambda *t: fast(*t, mask), lambda *t: ref(*t, mask), inputs, ref_inputs, 2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("pattern,kernel", [("B", "block_scan"), ("H", "companion_scan"), ("L", "diag_scan")])
def test_lru_and_deer_models_route_through_the_kernels(pattern, kernel, monkeypatch):
    """scan_backend="triton" sends the LRU and DEER mixers' scans to the kernels; "torch" never calls them."""
    calls = []
    real = getattr(kernels, kernel)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, kernel, spy)
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)
    ids = torch.randint(1, 37, (1, 6), device=DEVICE)
    for backend, expected in (("triton", True), ("torch", False)):
        calls.clear()
        config = tiny_config(
            pattern, scan_backend=backend, lru_total_state_size=6, lru_group_size=3, lrc_num_channels=4
        )
        HybridSSMForCausalLM(config).to(DEVICE)(ids)
        assert bool(calls) == expected, backend


def test_block_scan_rejects_large_blocks():
    A, b, _ = _block_inputs(1, 3, 1, 9)
    with pytest.raises(ValueError, match="m in"):
        kernels.block_scan(A, b)


# ---------------------------------------------------------------------------------------------------------------
# PD scan


def _pd_inputs(batch, steps, heads, n):
    idx = torch.randint(0, n, (batch, steps, heads, n), device=DEVICE)
    dv = torch.polar(
        0.5 + 0.5 * torch.rand(batch, steps, heads, n, device=DEVICE),
        6.3 * torch.rand(batch, steps, heads, n, device=DEVICE),
    )
    b = _rand(batch, steps, heads, n, dtype=torch.complex64)
    x0 = _rand(batch, heads, n, dtype=torch.complex64)
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


@pytest.mark.parametrize("dtype,batch,steps,chunk,n,scatter", PD_CASES)
def test_pd_scan_matches_torch(dtype, batch, steps, chunk, n, scatter):
    """complex64 inputs, or bfloat16 (real, imag) pairs; with the straight-through p_soft gradient."""
    idx, dv, b, x0 = _pd_inputs(batch, steps, 2, n)
    p_soft = _leaf(torch.rand(batch, steps, 2, n, n, device=DEVICE))
    if dtype == torch.bfloat16:
        dv_in, b_in, x0_in = (_leaf(torch.view_as_real(t).to(dtype)) for t in (dv, b, x0))
        ref_dv, ref_b, ref_x0 = (_leaf(torch.view_as_complex(t.detach().float())) for t in (dv_in, b_in, x0_in))
    else:
        dv_in, b_in, x0_in = (_leaf(t) for t in (dv, b, x0))
        ref_dv, ref_b, ref_x0 = (_leaf(t) for t in (dv, b, x0))
    ref_p = _leaf(p_soft.detach())

    def run(dv, b, x0, p):
        return kernels.pd_scan(idx, dv, b, x0, p, chunk_size=chunk, scatter=scatter)

    def ref(dv, b, x0, p):
        return torch_pd_scan(idx, dv, b, x0, p)

    states, final = run(dv_in, b_in, x0_in, p_soft)
    ref_states, ref_final = ref(ref_dv, ref_b, ref_x0, ref_p)
    tol = TOL[dtype]
    _assert_close(states, ref_states, tol, "states")
    _assert_close(final, ref_final, tol, "final")
    w, wf = torch.randn_like(ref_states), torch.randn_like(ref_final)
    grads = torch.autograd.grad(_loss(states, final, w, wf), (dv_in, b_in, x0_in, p_soft))
    ref_grads = torch.autograd.grad(_loss(ref_states, ref_final, w, wf), (ref_dv, ref_b, ref_x0, ref_p))
    for name, g, r in zip(("dv", "b", "x0", "p_soft"), grads, ref_grads):
        if not g.is_complex() and r.is_complex():
            g = torch.view_as_complex(g.float())
        _assert_close(g, r, tol, name)


def test_pd_scan_without_initial_state_or_p_soft():
    idx, dv, b, _ = _pd_inputs(2, 6, 1, 4)
    inputs, ref_inputs = [_leaf(dv), _leaf(b)], [_leaf(dv), _leaf(b)]
    _compare(
        lambda dv, b: kernels.pd_scan(idx, dv, b, chunk_size=4),
        lambda dv, b: torch_pd_scan(idx, dv, b),
        inputs,
        ref_inputs,
        2e-5,
    )


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
def test_pd_generated_scan_matches_reference(dtype, batch, steps, chunk, masked):
    """The fused P generation + scan == einsum / argmax / column softmax + the torch scan, gradients included
    (selection weights, dictionary, dv, b, x0)."""
    heads, n, k = 2, 5, 3
    sel = torch.softmax(_rand(batch, steps, heads, k), dim=-1)
    dictionary = _rand(heads, k, n, n, scale=n**-0.5)
    _, dv, b, _ = _pd_inputs(batch, steps, heads, n)
    x0 = _rand(batch, heads, n, dtype=torch.complex64)
    mask = (torch.rand(batch, steps, device=DEVICE) > 0.3) if masked else None
    inputs = [_leaf(sel, dtype), _leaf(dictionary, dtype), _leaf(dv), _leaf(b), _leaf(x0)]
    ref_inputs = [_leaf(t.detach().float()) for t in inputs[:2]] + [_leaf(t) for t in inputs[2:]]
    temperature = 0.7
    idx_ref = pd_ops.dictionary_indices(ref_inputs[0].detach(), ref_inputs[1].detach(), mask)
    assert torch.equal(kernels.pd_select(inputs[0], inputs[1], mask), idx_ref)

    def run(sel, dictionary, dv, b, x0):
        return kernels.pd_generated_scan(
            sel, dictionary, dv, b, x0, temperature=temperature, mask=mask, chunk_size=chunk
        )

    def ref(sel, dictionary, dv, b, x0):
        return pd_ops.pd_dictionary_scan(
            sel, dictionary, dv, b, x0, temperature=temperature, mask=mask, backend="torch"
        )

    _compare(run, ref, inputs, ref_inputs, TOL[dtype])


def test_pd_scan_rejects_bad_input():
    idx, dv, b, x0 = _pd_inputs(1, 3, 1, 4)
    with pytest.raises(ValueError, match="idx"):
        kernels.pd_scan(idx[..., :3], dv, b)
    with pytest.raises(ValueError, match="x0"):
        kernels.pd_scan(idx, dv, b, x0[..., :3])
    with pytest.raises(ValueError, match="scatter"):
        kernels.pd_scan(idx, dv, b, scatter="dense")


# ---------------------------------------------------------------------------------------------------------------
# dispatch


def test_scan_backend_setting_is_validated(monkeypatch):
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)
    assert HybridSSMConfig(scan_backend="triton").scan_backend == "triton"
    with pytest.raises(ValueError, match="scan_backend"):
        HybridSSMConfig(scan_backend="cuda")
    with pytest.raises(ValueError, match="scan_backend"):
        scan_dispatch.resolve_backend("fast", "cpu")


def test_environment_overrides_the_config(monkeypatch):
    monkeypatch.setenv(scan_dispatch.ENV_VAR, "torch")
    assert scan_dispatch.resolve_backend("triton", DEVICE) == "torch"
    monkeypatch.setenv(scan_dispatch.ENV_VAR, "triton")
    assert scan_dispatch.resolve_backend("torch", DEVICE) == "triton"
    monkeypatch.setenv(scan_dispatch.ENV_VAR, "fastest")
    with pytest.raises(ValueError, match=scan_dispatch.ENV_VAR):
        scan_dispatch.resolve_backend("auto", DEVICE)


def test_auto_uses_triton_only_on_cuda(monkeypatch):
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)
    assert scan_dispatch.resolve_backend("auto", "cpu") == "torch"  # even with the interpreter available
    assert scan_dispatch.resolve_backend("torch", DEVICE) == "torch"
    if DEVICE.type == "cuda":
        assert scan_dispatch.resolve_backend("auto", DEVICE) == "triton"
        assert scan_dispatch.resolve_backend("auto", DEVICE, unsupported="float64") == "torch"


def test_triton_where_it_cannot_run_raises_clearly(monkeypatch):
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(kernels, "INTERPRET", False)  # as if TRITON_INTERPRET had not been set
    with pytest.raises(RuntimeError, match="scan_backend='triton'.*TRITON_INTERPRET=1"):
        scan_dispatch.resolve_backend("triton", "cpu")
    monkeypatch.setattr(
        scan_dispatch, "_kernels_cache", [(None, "triton cannot be imported (No module named 'triton')")]
    )
    with pytest.raises(RuntimeError, match="scan_backend='triton'.*No module named 'triton'"):
        scan_dispatch.resolve_backend("triton", DEVICE)
    assert scan_dispatch.resolve_backend("auto", DEVICE) == "torch"  # auto falls back quietly


def test_triton_rejects_unsupported_dtype(monkeypatch):
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)
    a = torch.rand(1, 4, 3, dtype=torch.float64, device=DEVICE)
    with pytest.raises(ValueError, match="float64"):
        scan_dispatch.scan_ops("triton", DEVICE).diag_scan(a, a)
    states, _ = scan_dispatch.scan_ops("auto", DEVICE).diag_scan(a, a)  # auto: the torch scan
    assert states.dtype == torch.float64


# ---------------------------------------------------------------------------------------------------------------
# whole models: backend="triton" == backend="torch"


def _model_pair(pattern, **overrides):
    torch.manual_seed(0)
    reference = HybridSSMForCausalLM(tiny_config(pattern, scan_backend="torch", **overrides)).to(DEVICE)
    fast = HybridSSMForCausalLM(tiny_config(pattern, scan_backend="triton", **overrides)).to(DEVICE)
    fast.load_state_dict(reference.state_dict())
    return reference, fast


MODEL_CASES = {
    "pd_ssm": ("PA", {}),
    "pd_ssm learned start, real D": ("P", {"pd_ssm_initial_state": "learned", "pd_ssm_diagonal": "magnitude"}),
    "pd_ssm no input map, bank": (
        "P",
        {"pd_ssm_input": "none", "pd_ssm_initial_state": "head_basis", "pd_ssm_transition": "bank"},
    ),
    "bd_lru+h_lru": ("BH", {"lru_total_state_size": 6, "lru_group_size": 3}),
    "diag_lru": ("D", {"lru_total_state_size": 6}),
    "lrc_ssm": ("L", {"lrc_num_channels": 6}),
    "lstm_ssm": ("R", {"lrc_num_channels": 4}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_model_forward_backward_generate_triton_equals_torch(case, monkeypatch):
    monkeypatch.delenv(scan_dispatch.ENV_VAR, raising=False)
    pattern, overrides = MODEL_CASES[case]
    reference, fast = _model_pair(pattern, **overrides)
    ids = torch.randint(1, 37, (2, 7), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding in the second row
    outputs = []
    for model in (reference, fast):
        model.train()
        out = model(ids, attention_mask=mask, labels=ids, use_cache=False)
        out.loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        model.eval()
        with torch.no_grad():
            generated = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
        outputs.append((out.logits.detach(), grads, generated))
    (logits, grads, generated), (logits_t, grads_t, generated_t) = outputs
    _assert_close(logits_t, logits, 1e-4, "logits")
    assert grads.keys() == grads_t.keys()
    for name in grads:
        _assert_close(grads_t[name], grads[name], 1e-3, name)
    assert torch.equal(generated_t, generated)


@pytest.mark.slow
def test_model_routes_through_the_kernels(monkeypatch):
    """backend "triton" really calls the kernels (and HF_SSM_SCAN_BACKEND overrides a "torch" config)."""
    calls = []
    real = kernels.pd_generated_scan

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, "pd_generated_scan", spy)
    monkeypatch.setenv(scan_dispatch.ENV_VAR, "triton")
    model = HybridSSMForCausalLM(tiny_config("P", scan_backend="torch")).to(DEVICE)
    model(torch.randint(1, 37, (1, 5), device=DEVICE))
    assert calls
    monkeypatch.setenv(scan_dispatch.ENV_VAR, "torch")
    calls.clear()
    model(torch.randint(1, 37, (1, 5), device=DEVICE))
    assert not calls


@pytest.mark.slow
def test_bench_script_cpu_sanity_pass(tmp_path):
    """scripts/bench_kernels.py --cpu-sanity: every kernel once in the interpreter, checked against torch."""
    import json
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "bench_kernels.py")
    out = tmp_path / "bench.json"
    kinds = ["pd_generated", "block_companion", "diag_complex"]
    result = subprocess.run(
        [sys.executable, script, "--cpu-sanity", "--kernels", *kinds, "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["meta"]["mode"] == "cpu-interpreter-sanity" and report["all_ok"]
    assert [row["family"] for row in report["results"]] == kinds


@pytest.mark.slow
def test_every_kernel_compiles_for_sm90_without_a_gpu():
    """The interpreter does not compile the kernels: compile one variant of each for sm_90 (H100 / H200) through
    Triton's whole pipeline (TTIR ... PTX -> cubin with the ptxas in the triton wheel); no GPU needed."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    result = subprocess.run(
        [sys.executable, "-m", "hf_ssm.kernels.compile_check", "--quick"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "all kernels compiled for sm_90" in result.stdout
