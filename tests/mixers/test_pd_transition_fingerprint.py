"""Fingerprints of PD-SSM's computation in every transition mode (mixer_pd_ssm.py, pd_transitions.py): a refactoring
of the mixer, its modes or its ops must leave every number it produces unchanged.

Each case builds, from a fixed seed, one PD-SSM mixer and one tiny HybridSSM model ("SA") for one setting of the
transition mode x pd_ssm_diagonal x pd_ssm_input and a few options (shared selection, identity entry, transition
norm and input size, identity output init, a pure automaton), runs a forward and backward on fixed inputs with left
padding, and one cached decode step, and records the outputs, the final state and the gradient of every parameter
(by its state-dict name). tests/fixtures/pd_fingerprints.json holds, per tensor (complex: its (re, im) pairs), its
shape, its L2 norm and either its values (up to STORE_VALUES_UP_TO elements) or a sketch of them: the sums over
fixed random buckets of SKETCH_BUCKET elements with fixed random signs, in SKETCH_ROWS independent layouts. A
change of one element by more than FINGERPRINT_RTOL x the tensor's rms moves a stored value or a bucket sum past the
tolerance, and so does a swap of two elements or a flipped sign (they land in different buckets or under different
signs of at least one layout).

A stored fingerprint is compared within that tolerance, never bit for bit: float32 results differ in their last bits
between CPUs, even between two CPUs reporting the same torch cpu_capability. Bit identity is tested where it holds,
inside one process: every case computed twice gives the same bits. The fixture records the platform that wrote it
("written_on") for a reader; no test reads it.

Regenerate (only when a change is meant to change the numbers, and say so in the commit):
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/mixers/test_pd_transition_fingerprint.py --write
"""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_checks, when run as a script

from hf_ssm import HybridSSMForCausalLM  # noqa: E402
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer  # noqa: E402
from model_checks import tiny_config  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pd_fingerprints.json"

# The tolerance of a stored value or bucket sum, as a fraction of its tensor's rms. Measured with the fixture's own
# tensors, one thread, against AVX-512 (torch 2.13 on an AMD EPYC): ATEN_CPU_CAPABILITY=default (scalar kernels, every
# reduction in another order) moves one element by at most 6.6e-6 rms and one bucket sum by at most 1.3e-5 rms, avx2
# by 1.7e-6 and 3.0e-6; limiting oneDNN and MKL to SSE4.1 / SSE4.2 as well moves them no more. 5e-5 leaves a factor 4
# over the worst bucket; a swap or a sign flip of typical elements moves a bucket by ~rms, 2e4 times the tolerance.
FINGERPRINT_RTOL = 5e-5
STORE_VALUES_UP_TO = 64  # elements; a larger tensor is stored as its sketch
SKETCH_BUCKET = 16  # elements per bucket: a bucket sum's rounding noise grows as its square root
SKETCH_ROWS = 2  # independent layouts: a swap inside one bucket under equal signs shows in the other


def _cases() -> dict[str, dict]:
    """{case name: config overrides}: every mode x diagonal x input, then the options the tests cover."""
    cases = {}
    for transition in ("dictionary", "bank", "direct"):
        for diagonal in ("complex", "magnitude", "unit"):
            for input_kind in ("projection", "none"):
                overrides = dict(pd_ssm_transition=transition, pd_ssm_diagonal=diagonal, pd_ssm_input=input_kind)
                if input_kind == "none":  # a zero start without input is refused; one_hot + unit = a pure automaton
                    overrides["pd_ssm_initial_state"] = "one_hot"
                cases[f"{transition}-{diagonal}-{input_kind}"] = overrides
    cases["bank-shared_selection"] = dict(pd_ssm_transition="bank", pd_ssm_shared_selection=True)
    for transition in ("dictionary", "bank"):
        cases[f"{transition}-identity_entry"] = dict(
            pd_ssm_transition=transition, pd_ssm_identity_entry_logit=2.0, pd_ssm_dictionary_diagonal_init=0.5
        )
        cases[f"{transition}-learned_start-output_identity"] = dict(
            pd_ssm_transition=transition, pd_ssm_initial_state="learned", pd_ssm_output_init="identity"
        )
    cases["direct-transition_norm"] = dict(pd_ssm_transition="direct", pd_ssm_transition_norm=True)
    cases["direct-input_size-init_scale"] = dict(
        pd_ssm_transition="direct", pd_ssm_transition_input_size=12, pd_ssm_transition_init_scale=0.5
    )
    cases["direct-output_identity-no_skip"] = dict(
        pd_ssm_transition="direct", pd_ssm_output_init="identity", pd_ssm_output_skip=False
    )
    cases["dictionary-one_head-temperature"] = dict(pd_ssm_num_heads=1, pd_ssm_temperature=0.5)
    return cases


@functools.cache
def _sketch_layout(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed buckets and signs of an n-element tensor: (bucket index, sign), each (SKETCH_ROWS * n,) over
    SKETCH_ROWS * ceil(n / SKETCH_BUCKET) buckets. Drawn from PCG64's raw stream, which numpy keeps stable across
    versions and machines (integer arithmetic), seeded by n."""
    raw = np.random.PCG64(n).random_raw(2 * SKETCH_ROWS * n).reshape(SKETCH_ROWS, 2, n)
    rank = np.argsort(np.argsort(raw[:, 0], axis=1, kind="stable"), axis=1, kind="stable")  # a permutation per row
    index = rank // SKETCH_BUCKET + np.arange(SKETCH_ROWS)[:, None] * -(-n // SKETCH_BUCKET)
    sign = np.where(raw[:, 1] >> np.uint64(63), -1.0, 1.0)
    return torch.from_numpy(index.reshape(-1)), torch.from_numpy(sign.reshape(-1))


def _sketch(flat: torch.Tensor) -> torch.Tensor:
    """flat: (n,) float64 -> (SKETCH_ROWS * ceil(n / SKETCH_BUCKET),) signed bucket sums."""
    index, sign = _sketch_layout(flat.numel())
    out = flat.new_zeros(SKETCH_ROWS * -(-flat.numel() // SKETCH_BUCKET))
    return out.index_add_(0, index, sign * flat.repeat(SKETCH_ROWS))


def _short(values: torch.Tensor) -> list[float]:
    """9 significant digits: exact for float32 values, far below FINGERPRINT_RTOL for float64 sums."""
    return [float(f"{v:.9g}") for v in values.tolist()]


def _tensor_print(t: torch.Tensor) -> dict:
    """{"shape", "norm" (float64 L2), "values" (n <= STORE_VALUES_UP_TO) or "sketch"} of a float32 or complex
    tensor (complex: of its (re, im) pairs, shape (..., 2))."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    flat = t.float().flatten().double()
    small = flat.numel() <= STORE_VALUES_UP_TO
    norm = _short(flat.norm().reshape(1))[0]
    return {
        "shape": list(t.shape),
        "norm": norm,
        "values" if small else "sketch": _short(flat if small else _sketch(flat)),
    }


def _mismatches(want: dict, got: dict) -> list[str]:
    """What differs between two tensor prints beyond FINGERPRINT_RTOL x the rms of `want` (the stored one)."""
    if got["shape"] != want["shape"]:
        return [f"shape {got['shape']} != {want['shape']}"]
    rms = want["norm"] / math.sqrt(max(math.prod(want["shape"]), 1))
    problems = []
    if abs(got["norm"] - want["norm"]) > FINGERPRINT_RTOL * want["norm"]:
        problems.append(f"norm {got['norm']!r} != {want['norm']!r}")
    kind = "values" if "values" in want else "sketch"
    for i, (a, b) in enumerate(zip(got[kind], want[kind], strict=True)):
        if abs(a - b) > FINGERPRINT_RTOL * rms:
            problems.append(f"{kind}[{i}] {a!r} != {b!r} (tolerance {FINGERPRINT_RTOL * rms:.3g})")
    return problems


def _mixer_run(overrides: dict) -> dict[str, torch.Tensor]:
    """A seeded mixer: forward + backward on a left-padded batch, then one no-grad decode step from its state."""
    torch.manual_seed(0)
    layer = PDSSMMixer(tiny_config("S", **overrides), 0)
    u = torch.randn(2, 7, 32, requires_grad=True)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, :3] = False
    out, final = layer(u, mask=mask)
    weights = torch.randn(out.shape)
    loss = (out * weights).sum() + torch.view_as_real(final).square().sum()
    loss.backward()
    record = {"out": out, "final": final, "grad.u": u.grad}
    record.update({f"grad.{name}": p.grad for name, p in layer.named_parameters() if p.grad is not None})
    record.update({f"param.{name}": p for name, p in layer.named_parameters()})
    with torch.no_grad():
        step_out, step_state = layer(torch.randn(2, 1, 32), state=final)
    record.update({"step.out": step_out, "step.state": step_state})
    return record


def _model_run(overrides: dict) -> dict[str, torch.Tensor]:
    """A seeded tiny "SA" model: loss + backward on a left-padded batch, then prefill + one cached decode step."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(tiny_config("SA", **overrides))
    ids = torch.randint(1, 37, (2, 9))
    attention = torch.ones_like(ids)
    attention[1, :2] = 0
    out = model(ids, attention_mask=attention, labels=ids)
    out.loss.backward()
    record = {"logits": out.logits, "loss": out.loss}
    record.update({f"grad.{name}": p.grad for name, p in model.named_parameters() if p.grad is not None})
    record.update({f"param.{name}": p for name, p in model.model.layers[0].mixer.named_parameters()})
    model.eval()
    with torch.no_grad():
        prefill = model(ids[:, :-1], attention_mask=attention[:, :-1], use_cache=True)
        step = model(ids[:, -1:], attention_mask=attention, cache=prefill.cache, use_cache=True)
    record["step.logits"] = step.logits
    return record


def _platform() -> dict:
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def records() -> dict[str, dict[str, dict[str, torch.Tensor]]]:
    """{case: {"mixer": {tensor name: tensor}, "model": {...}}} on one CPU thread (thread counts change sum orders)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {
            name: {part: run(overrides) for part, run in (("mixer", _mixer_run), ("model", _model_run))}
            for name, overrides in _cases().items()
        }
    finally:
        torch.set_num_threads(threads)


def fingerprints(computed: dict | None = None) -> dict:
    """{case: {part: {tensor name: print}}} of `computed` (default: records())."""
    computed = records() if computed is None else computed
    return {
        name: {part: {key: _tensor_print(t) for key, t in tensors.items()} for part, tensors in parts.items()}
        for name, parts in computed.items()
    }


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def computed_tensors() -> dict:
    return records()


@pytest.fixture(scope="module")
def computed(computed_tensors) -> dict:
    return fingerprints(computed_tensors)


def test_fixture_covers_every_case(stored):
    """The fixture holds a print for every case of this file (a case added without regenerating it fails)."""
    assert sorted(stored["cases"]) == sorted(_cases())


def test_every_case_computed_twice_is_bit_identical(computed_tensors):
    """Inside one process the computation is deterministic: every tensor of every case, computed again, has the same
    bits (this, not a stored fingerprint, is where bit identity can be asked for)."""
    again = records()
    for case, parts in computed_tensors.items():
        for part, tensors in parts.items():
            assert list(again[case][part]) == list(tensors), f"{case}/{part}"
            for key, t in tensors.items():
                assert torch.equal(again[case][part][key], t), f"{case}/{part}/{key}: not bit-identical"


@pytest.mark.parametrize("case", sorted(_cases()))
def test_transition_fingerprint_unchanged(case, stored, computed):
    """Outputs, final state, decode step and every parameter and gradient of `case` (same names, same shapes) equal
    the stored fingerprints within FINGERPRINT_RTOL x each tensor's rms, on any CPU."""
    for part in ("mixer", "model"):
        want, got = stored["cases"][case][part], computed[case][part]
        assert sorted(got) == sorted(want), f"{case}/{part}: the recorded tensors (parameter names) changed"
        problems = [f"{case}/{part}/{key}: {p}" for key in want for p in _mismatches(want[key], got[key])]
        assert not problems, "\n".join(problems[:20])


def _changed_copies(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """x: a float32 tensor of rms < 2 -> {change: a copy of x with that one change}: its largest and smallest
    elements swapped, the sign of its median-magnitude element flipped, 1e-4 added to that element, and its
    largest-magnitude element moved by one ulp."""
    flat = x.flatten()
    rms = flat.double().norm().item() / math.sqrt(flat.numel())
    low, high = flat.argmin().item(), flat.argmax().item()
    by_magnitude = flat.abs().argsort()
    median, largest = by_magnitude[flat.numel() // 2].item(), by_magnitude[-1].item()
    # the changes must be real ones: two different values, a sign that is not a zero's, 1e-4 above the tolerance
    assert flat[high] - flat[low] > rms and abs(flat[median]) > 0.1 * rms and FINGERPRINT_RTOL * rms < 1e-4
    copies = {change: flat.clone() for change in ("swap", "sign flip", "+1e-4", "one ulp")}
    copies["swap"][[low, high]] = flat[[high, low]]
    copies["sign flip"][median] = -flat[median]
    copies["+1e-4"][median] = flat[median] + 1e-4
    copies["one ulp"][largest] = torch.nextafter(flat[largest], flat.new_tensor(math.inf))
    return {change: copy.view_as(x) for change, copy in copies.items()}


@pytest.mark.parametrize(
    ("part", "key"),
    [("mixer", "final"), ("mixer", "out"), ("model", "logits"), ("model", "grad.model.layers.0.mlp.up_proj.weight")],
)
def test_comparison_passes_one_ulp_and_catches_a_swap_a_sign_flip_and_a_1e_4_change(part, key, computed_tensors):
    """The tolerance comparison of two prints lets one ulp pass (on the largest element; on every element at once)
    and fails on two values swapped, one sign flipped and one element moved by 1e-4, for a tensor stored as values
    ("final") and for sketched ones (up to 2048 elements); the sum and norm alone would have missed the swap."""
    x = computed_tensors["dictionary-complex-projection"][part][key]
    x = torch.view_as_real(x) if x.is_complex() else x
    want = _tensor_print(x)
    every_ulp = torch.nextafter(x, torch.full_like(x, math.inf))
    assert not torch.equal(every_ulp, x) and _mismatches(want, _tensor_print(every_ulp)) == []
    for change, changed in _changed_copies(x).items():
        problems = _mismatches(want, _tensor_print(changed))
        assert (problems == []) == (change == "one ulp"), (change, problems)
    swapped = _changed_copies(x)["swap"].double()
    assert swapped.sum().item() == pytest.approx(x.double().sum().item(), rel=1e-12, abs=1e-12)
    assert swapped.norm().item() == pytest.approx(x.double().norm().item(), rel=1e-12)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(f"usage: python {sys.argv[0]} --write   (rewrites {FIXTURE})")
    cases = fingerprints()
    # one line per case: a changed case shows as one changed line
    body = ",\n".join(
        f"{json.dumps(name)}:{json.dumps(prints, separators=(',', ':'))}" for name, prints in cases.items()
    )
    FIXTURE.write_text(f'{{"written_on":{json.dumps(_platform())},\n"cases":{{\n{body}}}}}\n')
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size / 1e6:.2f} MB)")
