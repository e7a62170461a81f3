"""Triton PD kernels of the PD-SSM ops (hf_ssm.kernels.pd_scan) equal the torch ops of pd_ops.py, values and
gradients, under TRITON_INTERPRET=1 on CPU (set in conftest.py) or on CUDA; and the mixer's Triton path equals its
torch path in both transition modes."""

from __future__ import annotations

import pytest
import torch

from hf_ssm import kernels

if not kernels.AVAILABLE:
    pytest.skip(f"Triton kernels unavailable: {kernels.UNAVAILABLE_REASON}", allow_module_level=True)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if not kernels.can_run(DEVICE)[0]:
    pytest.skip(f"Triton kernels cannot run on {DEVICE}: {kernels.can_run(DEVICE)[1]}", allow_module_level=True)

from hf_ssm.kernels.pd_scan import pd_bank_scan as triton_bank_scan  # noqa: E402
from hf_ssm.modeling import pd_ops  # noqa: E402
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer  # noqa: E402
from model_checks import tiny_config  # noqa: E402


def _inputs(batch, steps, heads, n, k):
    logits = torch.randn(batch, steps, heads, k, device=DEVICE)
    scores = torch.randn(heads, k, n, n, device=DEVICE) * n**-0.5
    dv = torch.polar(0.05 + 0.9 * torch.rand(batch, steps, heads, n), 6.283 * torch.rand(batch, steps, heads, n))
    b = torch.randn(batch, steps, heads, n, dtype=torch.complex64)
    x0 = torch.randn(batch, heads, n, dtype=torch.complex64)
    return [logits, scores, dv.to(DEVICE), b.to(DEVICE), x0.to(DEVICE)]


def _outputs_and_grads(fn, inputs):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    states, final = fn(*leaves)
    g = torch.Generator().manual_seed(3)
    w = torch.randn(states.shape, dtype=torch.complex64, generator=g).to(DEVICE)
    wf = torch.randn(final.shape, dtype=torch.complex64, generator=g).to(DEVICE)
    loss = (states * w.conj()).real.sum() + (final * wf.conj()).real.sum()
    return [states, final, *torch.autograd.grad(loss, leaves)]


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
    """Bank mode with the selection argmax and the bank gather inside the scan kernels == pd_ops.pd_bank_scan on
    torch: states, final states and the gradients of logits, scores, dv, b and x0 (padding too)."""
    heads, n, k = 2, 5, 3
    inputs = _inputs(batch, steps, heads, n, k)
    mask = (torch.rand(batch, steps, device=DEVICE) > 0.3) if masked else None
    temperature = 0.7

    def run(logits, scores, dv, b, x0):
        return triton_bank_scan(
            logits, scores, dv, b, x0, temperature=temperature, mask=mask, chunk_size=chunk, scatter=scatter
        )

    def ref(logits, scores, dv, b, x0):
        return pd_ops.pd_bank_scan(logits, scores, dv, b, x0, mask, temperature=temperature, backend="torch")

    names = ["states", "final", "logits", "scores", "dv", "b", "x0"]
    for name, got, want in zip(names, _outputs_and_grads(run, inputs), _outputs_and_grads(ref, inputs)):
        err = (got - want).abs().max().item()
        assert err <= 2e-5 * (1 + want.abs().max().item()), f"{name}: max error {err:.3g}"


def test_bank_kernel_rejects_mismatched_scores():
    logits, scores, dv, b, _ = _inputs(1, 3, 2, 4, 3)
    with pytest.raises(ValueError, match="scores"):
        triton_bank_scan(logits, scores[..., :3, :3], dv, b)


@pytest.mark.parametrize("transition", ["dictionary", "bank"])
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


COMPILE_BANK_KERNELS = """
import importlib, itertools, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
mod = importlib.import_module("hf_ssm.kernels.pd_scan")  # (the package attribute pd_scan is the function)

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


@pytest.mark.slow
def test_bank_kernels_compile_for_sm90_without_a_gpu():
    """The interpreter does not compile: build the bank scan kernels for sm_90 through Triton's whole pipeline."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    result = subprocess.run([sys.executable, "-c", COMPILE_BANK_KERNELS], capture_output=True, text=True, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
