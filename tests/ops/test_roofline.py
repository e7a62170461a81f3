"""The roofline model of the Triton scans (hf_ssm/ops/roofline.py): its command runs and writes its tables, one
count matches a hand calculation, and the bytes it gives every Triton launch of every family are the bytes the
kernels' own tl.load / tl.store / atomics move, counted lane by lane in an instrumented Triton interpreter.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from op_checks import DEVICE, KERNEL_MARKS, kernels

from hf_ssm.ops import roofline

# (B, T, H, N, m, K, chunk): 3 chunks, the last partial (8, 8, 3); padded lanes everywhere (H*N = 6 of a 256-lane
# diag block, m = 3 in a 4 x 4 tile, N = 3 in 4 PD lanes, K = 3 in 16 dictionary lanes).
SMALL = roofline.Shape(batch=2, steps=19, heads=2, state=3, block=3, dict_size=3, chunk=8)
CASES = [(f, d) for f in roofline.FAMILIES for d in roofline.DTYPES if not (f == "diag_complex" and d != "float32")]


@pytest.mark.parametrize("old", ["--dict-size", "--launch-dtypes"])
def test_the_dashed_options_are_refused_naming_the_new_spelling(old, capsys):
    """One spelling per option, with underscores as in every benchmark: the dashed ones are refused, naming the new."""
    with pytest.raises(SystemExit) as info:
        roofline.main([old, "3" if old == "--dict-size" else "float32"])
    assert info.value.code == 2 and f"{old} was renamed: use --{old[2:].replace('-', '_')}" in capsys.readouterr().err


def test_the_command_writes_its_tables_at_a_small_shape(tmp_path, capsys):
    """`python -m hf_ssm.ops.roofline` at a small shape prints the totals and the per-launch tables and writes
    them as JSON and markdown, one result per family and dtype (diag_complex in float32 only); its forward apply of
    the real diagonal scan in float32 moves the bytes counted by hand from the kernel's loads and stores."""
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    argv = ["--batch", "2", "--steps", "19", "--heads", "2", "--state", "3", "--blocks", "3", "--dict_size", "3",
            "--chunk", "8", "--json", str(out_json), "--markdown", str(out_md)]  # fmt: skip
    assert roofline.main(argv) == 0
    printed = capsys.readouterr().out
    assert printed == out_md.read_text() and "| pd_bank | bfloat16 |" in printed
    rep = json.loads(out_json.read_text())
    assert [(r["family"], r["dtype"]) for r in rep["results"]] == CASES
    diag = next(r for r in rep["results"] if (r["family"], r["dtype"]) == ("diag_real", "float32"))
    apply = [x for x in diag["launches"] if x["name"] == "_diag_apply_kernel" and x["phase"] == "fwd"]
    # S = 2 rows, C = 3 chunks, one 256-lane block of D = 6 channels: 6 programs, R = 38 tokens.
    # reads: 6 programs x 2 int32 row bounds (48) + the starts of 6 chunks x 6 float32 (144) + a and b of every
    # token (38 x 6 x 2 x 4 = 1824); writes: every state (38 x 6 x 4 = 912) + 2 final states (2 x 6 x 4 = 48).
    assert (apply[0]["reads"], apply[0]["writes"], apply[0]["programs"]) == (2016, 960, 6)
    assert rep["shape"]["chunks"] == 3


def test_bad_arguments_are_refused_by_name():
    """A family or dtype the model does not know, and a complex diagonal scan in bfloat16, fail naming the field and
    the accepted values."""
    with pytest.raises(ValueError, match="family must be one of"):
        roofline.family_launches("pd", SMALL, "float32")
    with pytest.raises(ValueError, match="dtype must be one of"):
        roofline.family_launches("diag_real", SMALL, "float16")
    with pytest.raises(ValueError, match="complex64 inputs only"):
        roofline.family_launches("diag_complex", SMALL, "bfloat16")


def test_the_floors_and_the_prediction():
    """A launch's memory floor is its bytes over the bandwidth, the latency floor counts waves of resident programs
    times serial steps, and the prediction is the largest floor."""
    launch = roofline.Launch("fwd", "k", "triton", reads=3_000_000, writes=0, grid=(132 * 16 + 1,), warps=4, steps=10)
    t = launch.times(3.0e12)
    assert math.isclose(t["memory"], 1e-6)
    assert math.isclose(t["latency"], 2 * 10 * roofline.STEP_LATENCY_S)  # 16 blocks of 4 warps an SM: 2 waves
    assert t["predicted"] == max(t["memory"], t["compute"], t["latency"])


# ---------------------------------------------------------------------------------------------------------------
# the model against the kernels' own loads and stores


class _Traffic:
    """Counts, per interpreted kernel launch, the bytes its masked loads, stores and atomics move."""

    def __init__(self, monkeypatch):
        from triton.runtime import interpreter

        self.launches = []
        builder = interpreter.interpreter_builder
        for name, kind in (("create_masked_load", "reads"), ("create_masked_store", "writes")):
            monkeypatch.setattr(builder, name, self._counting(getattr(builder, name), kind))
        monkeypatch.setattr(builder, "create_atomic_rmw", self._counting_atomic(builder.create_atomic_rmw))
        run = interpreter.GridExecutor.__call__

        def call(executor, *args, **kwargs):
            grid = tuple(executor.grid)
            self.launches.append({"name": executor.fn.__name__, "grid": grid, "reads": 0, "writes": 0})
            return run(executor, *args, **kwargs)

        monkeypatch.setattr(interpreter.GridExecutor, "__call__", call)

    @staticmethod
    def _bytes(ptrs, mask) -> int:
        width = ptrs.get_element_ty().primitive_bitwidth // 8
        return int(np.broadcast_to(mask.data, ptrs.data.shape).sum()) * width

    def _counting(self, original, kind):
        def counted(ptrs, *args, **kwargs):
            mask = args[0] if kind == "reads" else args[1]  # load(ptrs, mask, ...), store(ptrs, value, mask, ...)
            self.launches[-1][kind] += self._bytes(ptrs, mask)
            return original(ptrs, *args, **kwargs)

        return counted

    def _counting_atomic(self, original):
        def counted(op, ptr, val, mask, *args, **kwargs):
            moved = self._bytes(ptr, mask)
            self.launches[-1]["reads"] += moved
            self.launches[-1]["writes"] += moved
            return original(op, ptr, val, mask, *args, **kwargs)

        return counted


def _inputs(family: str, dtype: torch.dtype, s: roofline.Shape):
    """The op of `family` and its inputs (leaves requiring grad) at shape `s`."""
    B, T, H, N, m, K = s.batch, s.steps, s.heads, s.state, s.block, s.dict_size

    def leaf(t, dt=dtype):
        return t.to(dt).to(DEVICE).requires_grad_()

    if family == "diag_real":
        return kernels.diag_scan, [leaf(0.9 * torch.rand(B, T, H * N)), leaf(torch.randn(B, T, H * N))]
    if family == "diag_complex":
        a = torch.polar(0.9 * torch.rand(B, T, H * N), torch.rand(B, T, H * N))
        b = torch.randn(B, T, H * N, dtype=torch.complex64)
        return kernels.diag_scan, [leaf(a, torch.complex64), leaf(b, torch.complex64)]
    nb = H * N // m
    if family == "block_dense":
        return kernels.block_scan, [leaf(0.3 * torch.rand(B, T, nb, m, m)), leaf(torch.randn(B, T, nb, m))]
    if family == "block_companion":
        return kernels.companion_scan, [leaf(0.3 * torch.rand(B, T, nb, m)), leaf(torch.randn(B, T, nb))]
    pairs = [leaf(0.5 * torch.randn(B, T, H, N, 2)), leaf(torch.randn(B, T, H, N, 2))]
    op = kernels.pd_dictionary_scan if family == "pd_dictionary" else kernels.pd_bank_scan
    return op, [leaf(torch.randn(B, T, H, K)), leaf(torch.randn(H, K, N, N)), *pairs]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "dtype"), CASES)
@pytest.mark.skipif(not kernels.INTERPRET, reason="counts the loads and stores of the interpreted kernels")
@KERNEL_MARKS[0]
@KERNEL_MARKS[1]
def test_the_model_moves_the_bytes_the_kernels_load_and_store(monkeypatch, family, dtype):
    """Every Triton launch of one fwd+bwd (no mask, no initial state, both outputs in the loss) has the name, grid,
    bytes read and bytes written the model gives it, at a shape with a partial chunk and padded lanes."""
    op, inputs = _inputs(family, getattr(torch, dtype), SMALL)
    traffic = _Traffic(monkeypatch)
    states, final = op(*inputs, chunk_size=SMALL.chunk)
    loss = torch.view_as_real(states).sum() + torch.view_as_real(final).sum() if states.is_complex() else None
    (loss if loss is not None else states.float().sum() + final.float().sum()).backward()
    model = [x for x in roofline.family_launches(family, SMALL, dtype) if x.kind == "triton"]
    expected = [{"name": x.name, "grid": x.grid, "reads": x.reads, "writes": x.writes} for x in model]
    assert traffic.launches == expected
