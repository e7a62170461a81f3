"""torch.compile of the model's forward (training and one-token decode), for every mixer.

Properties: the compiled forward equals eager (values and gradients); the decode step on a static cache traces as
one graph (no graph break) for every mixer, and so does the training forward except for the DEER mixers, whose
only breaks are DEER's own convergence test (it decides after every Newton iteration whether to stop, a host
read by design). Most tests compile with the `aot_eager` backend, which traces and functionalises the whole graph
as inductor does but skips code generation (seconds instead of minutes on this CPU); one test runs inductor itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from op_checks import needs_kernels
from transformers import StaticCache

from hf_ssm import HybridSSMForCausalLM
from model_checks import hybrid_config

# (mixer, extra config): every mixer beside attention, PD-SSM in both transition modes
MIXERS = [
    ("pd_ssm", {}),
    ("pd_ssm", {"pd_ssm_transition": "bank", "pd_ssm_diagonal": "unit", "pd_ssm_input": "none",
                "pd_ssm_initial_state": "one_hot"}),
    ("pd_ssm", {"pd_ssm_transition": "direct", "pd_ssm_output_skip": False}),
    ("bd_lru", {}), ("h_lru", {}), ("diag_lru", {}),
    ("lrc_ssm", {}), ("gru_ssm", {}), ("mgu_ssm", {}), ("lstm_ssm", {}),
]  # fmt: skip
IDS = [f"{m}-{extra.get('pd_ssm_transition', 'default')}" for m, extra in MIXERS]
DEER_MIXERS = {"lrc_ssm", "gru_ssm", "mgu_ssm", "lstm_ssm"}


def _model(mixer: str, extra: dict) -> HybridSSMForCausalLM:
    torch.manual_seed(0)
    return HybridSSMForCausalLM(hybrid_config(mixer, **extra))


def _decode_inputs(model, ids: torch.Tensor):
    """A static cache after a 6-token prompt, and the inputs of the next one-token step."""
    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + 4)
    with torch.no_grad():
        model(ids, cache=cache, use_cache=True)
    mask = torch.ones(ids.shape[0], ids.shape[1] + 1, dtype=torch.long)
    return dict(input_ids=ids[:, -1:], cache=cache, use_cache=True, attention_mask=mask)


@pytest.mark.slow
@pytest.mark.parametrize(("mixer", "extra"), MIXERS, ids=IDS)
def test_compiled_training_forward_equals_eager_in_values_and_gradients(mixer, extra):
    assert_compiled_training_forward_equals_eager(_model(mixer, extra), torch.randint(1, 37, (2, 12)))


def assert_compiled_training_forward_equals_eager(model, ids: torch.Tensor) -> None:
    """torch.compile(model, backend="aot_eager") gives the eager logits and the eager gradient of every parameter."""
    torch._dynamo.reset()
    out = torch.compile(model, backend="aot_eager")(ids, labels=ids, use_cache=False)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    reference = model(ids, labels=ids, use_cache=False)
    reference.loss.backward()
    torch.testing.assert_close(out.logits, reference.logits, atol=1e-5, rtol=1e-5)
    assert set(grads) == {n for n, p in model.named_parameters() if p.grad is not None}
    for name, param in model.named_parameters():
        if param.grad is not None:
            torch.testing.assert_close(grads[name], param.grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize(("mixer", "extra"), MIXERS, ids=IDS)
def test_compiled_decode_steps_equal_eager(mixer, extra):
    """Three compiled one-token steps on a static cache give the eager logits and leave the same states."""
    model = _model(mixer, extra).eval()
    ids = torch.randint(1, 37, (2, 6))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    runs = []
    for forward in (model, compiled):
        inputs = _decode_inputs(model, ids)
        logits = []
        with torch.no_grad():
            for t in range(3):
                mask = torch.ones(2, ids.shape[1] + t + 1, dtype=torch.long)
                out = forward(**{**inputs, "attention_mask": mask})
                logits.append(out.logits)
                inputs["input_ids"] = out.logits[:, -1:].argmax(-1)
        runs.append((torch.cat(logits, 1), inputs["cache"]))
    torch.testing.assert_close(runs[1][0], runs[0][0], atol=1e-5, rtol=1e-5)
    for i in model.config.ssm_layer_indices:
        eager_state, compiled_state = (run[1].layers[i].recurrent_states[0] for run in runs)
        torch.testing.assert_close(compiled_state, eager_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("mixer", "extra"), MIXERS, ids=IDS)
def test_the_decode_step_on_a_static_cache_has_no_graph_break(mixer, extra):
    """One generated token = one graph: no host read, no Python-side check of tensor values, no `out=` into a
    strided view on the decode path of any mixer."""
    model = _model(mixer, extra).eval()
    ids = torch.randint(1, 37, (2, 6))
    inputs = _decode_inputs(model, ids)
    torch._dynamo.reset()
    with torch.no_grad():
        model(**inputs)  # an eager step first: what it caches (the PD stacked weights) must not break the trace
        explanation = torch._dynamo.explain(model)(**{**inputs, "attention_mask": torch.ones(2, 8, dtype=torch.long)})
    assert explanation.graph_break_count == 0, [str(b.reason)[:200] for b in explanation.break_reasons]
    assert explanation.graph_count == 1


# The file of the DEER solver (hf_ssm/ops/deer/parallel.py), its folder and name: where its graph breaks are.
DEER_SOLVER = "deer/parallel.py"


def _break_places(explanation) -> set[str]:
    """folder/file of the user code at every graph break (a file name alone is ambiguous: every family has a
    parallel.py)."""
    return {"/".join(Path(b.user_stack[-1].filename).parts[-2:]) for b in explanation.break_reasons if b.user_stack}


@pytest.mark.slow
@pytest.mark.parametrize(("mixer", "extra"), MIXERS, ids=IDS)
def test_the_training_forward_breaks_only_in_deers_convergence_test(mixer, extra):
    """0 graph breaks for PD-SSM and the LRU family; the DEER mixers break only in the DEER solver, where every Newton
    iteration reads its residual on the host to decide whether to stop (docs/design.md §6)."""
    model = _model(mixer, extra)
    ids = torch.randint(1, 37, (2, 12))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, labels=ids, use_cache=False)
    places = _break_places(explanation)
    if mixer in DEER_MIXERS:
        assert explanation.graph_break_count > 0 and places == {DEER_SOLVER}, places
    else:
        assert explanation.graph_break_count == 0, [str(b.reason)[:200] for b in explanation.break_reasons]


@pytest.mark.slow
def test_inductor_compiles_the_decode_step_to_the_eager_logits():
    """The real CPU backend: torch.compile(model.forward, fullgraph=True) (inductor) decodes four tokens on a static
    cache with the eager logits."""
    model = _model("pd_ssm", {}).eval()
    ids = torch.randint(1, 37, (2, 6))

    def decode(forward) -> torch.Tensor:
        cache = StaticCache(config=model.config, max_cache_len=12)
        with torch.no_grad():
            logits = [model(ids, cache=cache, use_cache=True).logits[:, -1]]
            for _ in range(4):
                step = forward(logits[-1].argmax(-1, keepdim=True), cache=cache, use_cache=True)
                logits.append(step.logits[:, -1])
        return torch.stack(logits)

    torch._dynamo.reset()
    torch.testing.assert_close(decode(torch.compile(model.forward, fullgraph=True)), decode(model.forward))


# The Triton scans as custom ops (hf_ssm::diag_pass, block_pass, pd_pass, pd_select, pd_generation_backward): a mixer
# per kernel family, PD-SSM in its three transition modes.
TRITON_MIXERS = [
    ("pd_ssm", {}), ("pd_ssm", {"pd_ssm_transition": "bank"}), ("pd_ssm", {"pd_ssm_transition": "direct"}),
    ("diag_lru", {}), ("bd_lru", {}), ("h_lru", {}), ("lrc_ssm", {}),
]  # fmt: skip
TRITON_IDS = [f"{m}-{extra.get('pd_ssm_transition', 'default')}" for m, extra in TRITON_MIXERS]


@needs_kernels
@pytest.mark.parametrize(("mixer", "extra"), TRITON_MIXERS, ids=TRITON_IDS)
def test_the_triton_scans_compile_as_opaque_ops_to_the_eager_values_and_gradients(mixer, extra):
    """With scan_backend="triton" the compiled training forward equals eager (values and gradients) and breaks only
    where the torch path does (nowhere, or DEER's convergence test): the kernels are custom ops, so dynamo neither
    traces into Triton's launcher nor breaks the graph around them."""
    model = _model(mixer, {**extra, "scan_backend": "triton"})
    ids = torch.randint(1, 37, (2, 9))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(ids, labels=ids, use_cache=False)
    places = _break_places(explanation)
    assert places <= {DEER_SOLVER}, [str(b.reason)[:200] for b in explanation.break_reasons]
    assert (explanation.graph_break_count == 0) == (mixer not in DEER_MIXERS)
    assert_compiled_training_forward_equals_eager(model, ids)


# The operators that make or unmake a complex tensor: none may appear in a compiled decode step's graph.
COMPLEX_OPS = {"polar", "view_as_complex", "view_as_real", "complex"}
PD_DECODE_CASES = [
    (transition, diagonal)
    for transition in ("dictionary", "bank", "direct")
    for diagonal in ("complex", "magnitude", "unit")
]


def _traced_pd_decode_step(model, grad: bool):
    """The FX graphs dynamo records for one compiled one-token step of `model` on a static cache (a 6-token prompt
    before it, a padded row in the step's mask), with gradients enabled or not; and the eager and compiled logits."""
    ids = torch.randint(1, 37, (2, 6))
    graphs, logits = [], []

    def capture(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    for forward in (model, torch.compile(model, backend=capture, fullgraph=True)):
        torch._dynamo.reset()
        inputs = _decode_inputs(model, ids)
        inputs["attention_mask"] = torch.tensor([[1] * 6 + [0], [1] * 7])
        with torch.set_grad_enabled(grad):
            logits.append(forward(**inputs).logits)
    return graphs, logits


def _complex_nodes(graphs) -> list[str]:
    """The nodes of `graphs` that produce a complex tensor or call an operator in COMPLEX_OPS."""
    found = []
    for graph in graphs:
        for node in graph.graph.nodes:
            value = node.meta.get("example_value")
            name = getattr(node.target, "__name__", str(node.target))
            if (isinstance(value, torch.Tensor) and value.is_complex()) or name in COMPLEX_OPS:
                found.append(f"{node.op} {name}")
    return found


@pytest.mark.parametrize(("transition", "diagonal"), PD_DECODE_CASES, ids=[f"{t}-{d}" for t, d in PD_DECODE_CASES])
@pytest.mark.parametrize("heads", [1, 2])
def test_the_compiled_pd_decode_step_has_no_complex_tensor_or_operator(transition, diagonal, heads):
    """PD-SSM's state is complex, but the model caches it as real (..., 2) pairs and a compiled decode step (no
    gradient, as generate() runs it) computes in pairs end to end: in the traced graph no node produces a complex
    tensor and none calls polar / view_as_complex / view_as_real / complex (inductor generates no code for complex
    operators and would run each one eagerly, with a warning), for every transition and every `pd_ssm_diagonal`
    (docs/models.md, "Static cache and torch.compile"); the step gives the eager logits, a padded row included."""
    extra = {"pd_ssm_transition": transition, "pd_ssm_diagonal": diagonal, "pd_ssm_num_heads": heads}
    if diagonal == "unit":
        extra["pd_ssm_initial_state"] = "one_hot"
    model = _model("pd_ssm", extra).eval()
    inputs = _decode_inputs(model, torch.randint(1, 37, (2, 6)))
    state = inputs["cache"].layers[0].recurrent_states[0]
    assert state.dtype == torch.float32 and state.shape[-1] == 2
    graphs, (eager, compiled) = _traced_pd_decode_step(model, grad=False)
    assert len(graphs) == 1 and _complex_nodes(graphs) == []
    torch.testing.assert_close(compiled, eager)


def test_a_compiled_pd_step_that_records_gradients_still_computes_in_complex():
    """The boundary docs/models.md states: with gradients enabled a one-token step goes through the straight-through
    scan, which computes in complex64 (so the snippet there decodes under torch.no_grad()). When this fails the
    gradient path has become real too, and that sentence can drop its condition."""
    model = _model("pd_ssm", {}).eval()
    graphs, (eager, compiled) = _traced_pd_decode_step(model, grad=True)
    assert _complex_nodes(graphs) != []
    torch.testing.assert_close(compiled, eager)
