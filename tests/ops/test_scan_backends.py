"""The scan backend (docs/design.md §9): the `scan_backend` setting and the HF_SSM_SCAN_BACKEND override are
validated and resolved (auto: Triton only on CUDA), Triton where it cannot run fails clearly, whole models give the
same logits, gradients and generations on the Triton and torch backends and really route through the kernels, the
kernel benchmark's CPU sanity pass runs, and every kernel compiles for sm_90 without a GPU.

On a CPU the kernels run in the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before anything
imports triton), so the shapes are tiny; on a CUDA machine the same tests run compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from op_checks import DEVICE, KERNEL_MARKS, assert_close, kernels

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.ops import dispatch
from model_checks import BENCHMARKS, tiny_config

pytestmark = KERNEL_MARKS


# ---------------------------------------------------------------------------------------------------------------
# dispatch


def test_scan_backend_setting_is_validated(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    assert HybridSSMConfig(scan_backend="triton").scan_backend == "triton"
    with pytest.raises(ValueError, match="scan_backend"):
        HybridSSMConfig(scan_backend="cuda")
    with pytest.raises(ValueError, match="scan_backend"):
        dispatch.resolve_backend("fast", "cpu")


def test_environment_overrides_the_config(monkeypatch):
    monkeypatch.setenv(dispatch.ENV_VAR, "torch")
    assert dispatch.resolve_backend("triton", DEVICE) == "torch"
    monkeypatch.setenv(dispatch.ENV_VAR, "triton")
    assert dispatch.resolve_backend("torch", DEVICE) == "triton"
    monkeypatch.setenv(dispatch.ENV_VAR, "fastest")
    with pytest.raises(ValueError, match=dispatch.ENV_VAR):
        dispatch.resolve_backend("auto", DEVICE)


def test_auto_uses_triton_only_on_cuda(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    assert dispatch.resolve_backend("auto", "cpu") == "torch"  # even with the interpreter available
    assert dispatch.resolve_backend("torch", DEVICE) == "torch"
    if DEVICE.type == "cuda":
        assert dispatch.resolve_backend("auto", DEVICE) == "triton"
        assert dispatch.resolve_backend("auto", DEVICE, unsupported="float64") == "torch"


def test_triton_where_it_cannot_run_raises_clearly(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.setattr(kernels, "INTERPRET", False)  # as if TRITON_INTERPRET had not been set
    with pytest.raises(RuntimeError, match="scan_backend='triton'.*TRITON_INTERPRET=1"):
        dispatch.resolve_backend("triton", "cpu")
    monkeypatch.setattr(dispatch, "_kernels_cache", [(None, "triton cannot be imported (No module named 'triton')")])
    with pytest.raises(RuntimeError, match="scan_backend='triton'.*No module named 'triton'"):
        dispatch.resolve_backend("triton", DEVICE)
    assert dispatch.resolve_backend("auto", DEVICE) == "torch"  # auto falls back quietly


def test_triton_rejects_unsupported_dtype(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    a = torch.rand(1, 4, 3, dtype=torch.float64, device=DEVICE)
    with pytest.raises(ValueError, match="float64"):
        dispatch.scan_ops("triton", DEVICE).diag_scan(a, a)
    states, _ = dispatch.scan_ops("auto", DEVICE).diag_scan(a, a)  # auto: the torch scan
    assert states.dtype == torch.float64


# ---------------------------------------------------------------------------------------------------------------
# whole models: backend="triton" == backend="torch"


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
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    ids = torch.randint(1, 37, (1, 6), device=DEVICE)
    for backend, expected in (("triton", True), ("torch", False)):
        calls.clear()
        config = tiny_config(
            pattern, scan_backend=backend, lru_total_state_size=6, lru_group_size=3, lrc_num_channels=4
        )
        HybridSSMForCausalLM(config).to(DEVICE)(ids)
        assert bool(calls) == expected, backend


@pytest.mark.parametrize(("pattern", "kernel"), [("P", "pd_dictionary_scan"), ("B", "block_scan"), ("L", "diag_scan")])
def test_changing_scan_backend_on_a_built_model_rebinds_its_scans(pattern, kernel, monkeypatch):
    """`model.config.scan_backend = ...` after construction takes effect at the next forward (the mixers kept
    the backend bound when they were built, so the change was validated and then ignored)."""
    calls = []
    real = getattr(kernels, kernel)
    monkeypatch.setattr(kernels, kernel, lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    config = tiny_config(pattern, scan_backend="torch", lru_total_state_size=6, lru_group_size=3, lrc_num_channels=4)
    model = HybridSSMForCausalLM(config).to(DEVICE)
    ids = torch.randint(1, 37, (1, 5), device=DEVICE)
    model(ids)
    assert not calls
    model.config.scan_backend = "triton"
    model(ids)
    assert calls
    calls.clear()
    model.config.scan_backend = "torch"
    model(ids)
    assert not calls


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
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
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
    assert_close(logits_t, logits, 1e-4, "logits")
    assert grads.keys() == grads_t.keys()
    for name in grads:
        assert_close(grads_t[name], grads[name], 1e-3, name)
    assert torch.equal(generated_t, generated)


@pytest.mark.slow
def test_model_routes_through_the_kernels(monkeypatch):
    """backend "triton" really calls the kernels (and HF_SSM_SCAN_BACKEND overrides a "torch" config)."""
    calls = []
    real = kernels.pd_dictionary_scan

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, "pd_dictionary_scan", spy)
    monkeypatch.setenv(dispatch.ENV_VAR, "triton")
    model = HybridSSMForCausalLM(tiny_config("P", scan_backend="torch")).to(DEVICE)
    model(torch.randint(1, 37, (1, 5), device=DEVICE))
    assert calls
    monkeypatch.setenv(dispatch.ENV_VAR, "torch")
    calls.clear()
    model(torch.randint(1, 37, (1, 5), device=DEVICE))
    assert not calls


@pytest.mark.slow
def test_bench_script_cpu_sanity_pass(tmp_path):
    """benchmarks/bench_kernels.py --cpu_sanity: every kernel once in the interpreter, checked against torch."""
    script = BENCHMARKS / "bench_kernels.py"
    out = tmp_path / "bench.json"
    kinds = ["pd_generated", "block_companion", "diag_complex"]
    result = subprocess.run(
        [sys.executable, str(script), "--cpu_sanity", "--kernels", *kinds, "--out", str(out)],
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
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    result = subprocess.run(
        [sys.executable, "-m", "hf_ssm.ops.compile_check", "--quick"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "all kernels compiled for sm_90" in result.stdout
