"""Fingerprints of PD-SSM's computation in every transition mode (mixer_pd_ssm.py, pd_transitions.py): a refactoring
of the mixer, its modes or its ops must leave every number it produces unchanged.

Each case builds, from a fixed seed, one PD-SSM mixer and one tiny HybridSSM model ("SA") for one setting of the
transition mode x pd_ssm_diagonal x pd_ssm_input and a few options (shared selection, identity entry, transition
norm and input size, identity output init, a pure automaton), runs a forward and backward on fixed inputs with left
padding, and one cached decode step, and records the outputs, the final state and the gradient of every parameter
(by its state-dict name). tests/fixtures/pd_fingerprints.json holds them: per tensor its shape, the first 16 hex digits
of the sha256 of its float32 bytes, and its sum and L2 norm in float64.

The hashes are compared where the fixture was written on the same torch version and CPU capability (bit identity);
elsewhere (other vector units order sums differently) the float64 statistics are compared to a tight tolerance.

Regenerate (only when a change is meant to change the numbers, and say so in the commit):
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python tests/mixers/test_pd_transition_fingerprint.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # model_checks, when run as a script

from hf_ssm import HybridSSMForCausalLM  # noqa: E402
from hf_ssm.modeling.mixer_pd_ssm import PDSSMMixer  # noqa: E402
from model_checks import tiny_config  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pd_fingerprints.json"


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


def _tensor_print(t: torch.Tensor) -> list:
    """[shape, sha256 of the float32 bytes (complex: of the (re, im) pairs) cut to 16 hex digits, float64 sum, float64
    L2 norm]."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    t = t.float().contiguous()
    flat = t.flatten().double()
    digest = hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]
    return [list(t.shape), digest, flat.sum().item(), flat.norm().item()]


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


def fingerprints() -> dict:
    """{case: {"mixer": {tensor: print}, "model": {...}}} on one CPU thread (thread counts change sum orders)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {}
        for name, overrides in _cases().items():
            out[name] = {
                part: {key: _tensor_print(t) for key, t in run(overrides).items()}
                for part, run in (("mixer", _mixer_run), ("model", _model_run))
            }
        return out
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture(scope="module")
def computed() -> dict:
    return fingerprints()


def test_fixture_covers_every_case(stored):
    """The fixture holds a print for every case of this file (a case added without regenerating it fails)."""
    assert sorted(stored["cases"]) == sorted(_cases())


@pytest.mark.parametrize("case", sorted(_cases()))
def test_transition_fingerprint_unchanged(case, stored, computed):
    """Outputs, final state, decode step and every parameter and gradient of `case` (same names, same shapes) equal
    the stored fingerprints: bit for bit on the platform that wrote them, else to rtol 1e-5 in their statistics."""
    exact = stored["platform"] == _platform()
    for part in ("mixer", "model"):
        want, got = stored["cases"][case][part], computed[case][part]
        assert sorted(got) == sorted(want), f"{case}/{part}: the recorded tensors (parameter names) changed"
        for key, (shape, digest, total, norm) in want.items():
            got_shape, got_digest, got_total, got_norm = got[key]
            assert got_shape == shape, f"{case}/{part}/{key}: shape {got_shape} != {shape}"
            if exact:
                assert got_digest == digest, f"{case}/{part}/{key}: not bit-identical"
            else:
                assert got_total == pytest.approx(total, rel=1e-5, abs=1e-6), f"{case}/{part}/{key}: sum"
                assert got_norm == pytest.approx(norm, rel=1e-5, abs=1e-6), f"{case}/{part}/{key}: norm"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(f"usage: python {sys.argv[0]} --write   (rewrites {FIXTURE})")
    cases = fingerprints()
    # one line per case: a changed case shows as one changed line
    body = ",\n".join(
        f"{json.dumps(name)}:{json.dumps(prints, separators=(',', ':'))}" for name, prints in cases.items()
    )
    FIXTURE.write_text(f'{{"platform":{json.dumps(_platform())},\n"cases":{{\n{body}}}}}\n')
    print(f"wrote {FIXTURE}")
