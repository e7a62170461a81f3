"""The decode step (one token on a cache): equal to the full forward with padding, in both PD transition modes and
with one or several PD heads; greedy generate equal to an uncached argmax loop; the PD mixer's fused decode step equal
to its sequence path, rebuilt after weight updates, and never bypassing a wrapped or hooked map."""

from __future__ import annotations

import inspect

import pytest
import torch

from hf_ssm import HybridSSMForCausalLM
from hf_ssm.modeling.mixer_pd_ssm import _exact_gelu
from model_checks import tiny_config

# (transition, heads): heads = 1 takes the single-head shortcuts of the decode step (one 2-D product for the
# dictionary mode's transition, one linear map for each MLP's per-head layer), heads = 2 the batched ones.
MODES = [("dictionary", 1), ("dictionary", 2), ("bank", 1), ("bank", 2)]


def _model(transition: str, heads: int, pattern: str = "SA") -> HybridSSMForCausalLM:
    config = tiny_config(pattern, pd_ssm_transition=transition, pd_ssm_num_heads=heads)
    return HybridSSMForCausalLM(config).eval()


@pytest.mark.parametrize(("transition", "heads"), MODES)
@torch.no_grad()
def test_masked_token_by_token_decode_equals_full_forward(transition, heads):
    """Feeding a left-padded batch one token at a time (padding included, the mask growing with the cache) gives
    the full forward's logits at every real position (<= 1e-4), in both transition modes."""
    torch.manual_seed(0)
    model = _model(transition, heads)
    ids = torch.randint(1, 37, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding of different lengths; row 0 has none
    mask[2, :1] = 0
    full = model(ids, attention_mask=mask, use_cache=False).logits
    cache, steps = None, []
    for t in range(ids.shape[1]):
        out = model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache, use_cache=True)
        cache = out.cache
        steps.append(out.logits)
    decoded = torch.cat(steps, dim=1)
    real = mask.bool()
    assert torch.isfinite(decoded[real]).all()
    assert (decoded[real] - full[real]).abs().max().item() <= 1e-4


@pytest.mark.parametrize(("transition", "heads"), MODES)
@torch.no_grad()
def test_padding_fed_in_decode_steps_leaves_ssm_state_unchanged(transition, heads):
    """A decode step on a padding token (mask 0) returns the cached SSM state exactly."""
    torch.manual_seed(1)
    model = _model(transition, heads)
    ids = torch.randint(1, 37, (2, 5))
    cache = model(ids, use_cache=True).cache
    before = cache.layers[0].recurrent_states[0].clone()
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[:, -1] = 0
    model(torch.randint(1, 37, (2, 1)), attention_mask=mask, cache=cache, use_cache=True)
    assert torch.equal(cache.layers[0].recurrent_states[0], before)


@pytest.mark.parametrize(("transition", "heads"), MODES)
@torch.no_grad()
def test_greedy_generate_equals_uncached_argmax_loop(transition, heads):
    """generate(do_sample=False) with a padded batch equals taking the argmax of an uncached full forward again
    and again (token-identical)."""
    torch.manual_seed(2)
    model = _model(transition, heads, "SASA")
    ids = torch.randint(1, 37, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = 0
    out = model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)
    for _ in range(10):
        nxt = model(ids, attention_mask=mask, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        ids, mask = torch.cat([ids, nxt], dim=1), torch.cat([mask, torch.ones_like(nxt)], dim=1)
    assert torch.equal(out, ids)


def _mixer(transition: str = "dictionary", heads: int = 1, **overrides):
    torch.manual_seed(3)
    config = tiny_config("SA", pd_ssm_transition=transition, pd_ssm_num_heads=heads, **overrides)
    return HybridSSMForCausalLM(config).eval().model.layers[0].mixer


def _step_both_ways(mixer, u, state):
    """(output, state) of one step through the fused decode path (no gradient) and through the sequence path (the
    same T = 1 call with gradient enabled, which never fuses)."""
    with torch.no_grad():
        fused = mixer(u, state)
    with torch.enable_grad():
        plain = mixer(u, state)
    return fused, tuple(t.detach() for t in plain)


@pytest.mark.parametrize(("transition", "heads", "dict_size"), [(t, h, 4) for t, h in MODES] + [("dictionary", 1, 3)])
def test_fused_decode_step_equals_sequence_path(transition, heads, dict_size):
    """The decode step's stacked products (one for B, W_s and both MLPs' first layers, a block-diagonal one for the
    output layers with one head, C with permuted columns, erf-form GELU) give the sequence path's output and state
    (<= 1e-5), for both transitions, one or two heads, and an odd row count (K = 3: the stack gets a zero row)."""
    mixer = _mixer(transition, heads, pd_ssm_dict_size=dict_size)
    u = torch.randn(3, 1, 32)
    state = torch.randn(3, heads, 5, dtype=torch.complex64)
    (y, x), (y_ref, x_ref) = _step_both_ways(mixer, u, state)
    assert mixer._decode_weights() is not None  # the fused path was taken
    assert (y - y_ref).abs().max().item() <= 1e-5
    assert (x - x_ref).abs().max().item() <= 1e-5


def test_fused_decode_step_under_bf16_autocast():
    """Under CPU autocast (bfloat16) the fused decode step runs its products in bfloat16 like the sequence path, keeps
    the state complex64 and returns the input's dtype; its output stays within bfloat16 rounding of the sequence
    path's (<= 3e-2) and its state within 1e-2."""
    mixer = _mixer()
    u, state = torch.randn(2, 1, 32), torch.randn(2, 1, 5, dtype=torch.complex64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (y, x), (y_ref, x_ref) = _step_both_ways(mixer, u, state)
    assert y.dtype == y_ref.dtype == torch.float32 and x.dtype == torch.complex64
    assert (y - y_ref).abs().max().item() <= 3e-2
    assert (x - x_ref).abs().max().item() <= 1e-2


def test_fused_decode_step_of_a_bfloat16_model():
    """A mixer whose weights are bfloat16 (model.to(torch.bfloat16)) decodes through the stacked products with a
    bfloat16 input: the output is bfloat16 and within bfloat16 rounding of the sequence path (<= 5e-2), the state
    complex64."""
    mixer = _mixer().to(torch.bfloat16)
    u, state = torch.randn(2, 1, 32).bfloat16(), torch.randn(2, 1, 5, dtype=torch.complex64)
    (y, x), (y_ref, x_ref) = _step_both_ways(mixer, u, state)
    assert mixer._decode_weights() is not None
    assert y.dtype == y_ref.dtype == torch.bfloat16 and x.dtype == torch.complex64
    assert (y.float() - y_ref.float()).abs().max().item() <= 5e-2
    assert (x - x_ref).abs().max().item() <= 5e-2


def test_fused_decode_weights_follow_parameter_updates():
    """The stacked weights are rebuilt after an in-place update of any parameter they come from (an optimizer step,
    load_state_dict), so a decode step never uses stale weights."""
    mixer = _mixer()
    u, state = torch.randn(2, 1, 32), torch.randn(2, 1, 5, dtype=torch.complex64)
    with torch.no_grad():
        mixer(u, state)
        for p in (mixer.selection.weight, mixer.phase.down_weight, mixer.out_proj.weight):
            p.add_(0.5 * torch.randn_like(p))
    (y, x), (y_ref, x_ref) = _step_both_ways(mixer, u, state)
    assert (y - y_ref).abs().max().item() <= 1e-5
    assert (x - x_ref).abs().max().item() <= 1e-5


def test_decode_step_keeps_wrapped_and_hooked_maps():
    """A map that is wrapped (here a subclass of nn.Linear, as PEFT's LoRA layers are), hooked, or has its forward
    replaced is not folded into the stacked products: the decode step calls it, so the wrapper, hook or new forward
    still applies."""
    mixer = _mixer()
    calls = []
    mixer.in_proj.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    assert mixer._decode_weights() is None
    with torch.no_grad():
        mixer(torch.randn(2, 1, 32))
    assert calls == [(2, 1, 10)]

    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    mixer = _mixer()
    scaled = Scaled(32, mixer.selection.out_features, bias=False)
    scaled.weight = mixer.selection.weight
    mixer.selection = scaled
    assert mixer._decode_weights() is None

    mixer = _mixer()  # a forward replaced on the instance, as Accelerate's offload hooks do
    plain_forward = mixer.out_proj.forward
    mixer.out_proj.forward = lambda x: calls.append("out_proj") or plain_forward(x)
    assert mixer._decode_weights() is None
    with torch.no_grad():
        mixer(torch.randn(2, 1, 32))
    assert calls[-1] == "out_proj"


def test_exact_gelu_equals_torch_gelu():
    """The decode step's erf-form GELU equals nn.functional.gelu (exact, not tanh) within float32 rounding, and
    returns the input's dtype."""
    x = torch.linspace(-10, 10, 20001)
    assert (_exact_gelu(x) - torch.nn.functional.gelu(x)).abs().max().item() <= 2e-6
    half = x.bfloat16()
    assert _exact_gelu(half).dtype == torch.bfloat16
    assert (_exact_gelu(half).float() - torch.nn.functional.gelu(half).float()).abs().max().item() <= 2e-2


def test_forward_signature_is_the_undecorated_forwards():
    """The signature generate reads from model.forward every step (cached on the class) is the one of the
    forward under its decorators, so input names generate checks (attention_mask, logits_to_keep...) still match."""
    model = _model("dictionary", 1)
    undecorated = inspect.signature(inspect.unwrap(HybridSSMForCausalLM.forward))
    assert list(inspect.signature(model.forward).parameters) == list(undecorated.parameters)[1:]
    assert "logits_to_keep" in inspect.signature(model.forward).parameters
