"""The hybrid causal LM: caching, generation, padding, save/reload, checkpointing, training, bad input."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.ops.pd import DICTIONARY_OP, reference
from model_checks import max_cached_decode_error, packed_batch, tiny_config

# Cached decode, left padding, packing, reload and remote-code loading for every mixer (next to attention) are in
# tests/models/test_model_invariants.py; the tests here cover layouts and the rest of the model.

PATTERNS = ["S", "AS", "SASA"]  # pure SSM, attention first, deeper: layouts the invariant suite does not build


@pytest.mark.parametrize("pattern", PATTERNS)
def test_cached_decode_equals_full_forward(pattern):
    """Prefill + token-by-token decoding with DynamicCache gives the full-sequence logits (<= 1e-4)."""
    assert max_cached_decode_error(tiny_config(pattern)) <= 1e-4


def test_ssm_cache_holds_fixed_size_state():
    """An SSM layer's cache slot is its (B, H, N) recurrent state (PD-SSM's complex state as (B, H, N, 2) real
    pairs), not something that grows with T."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    with torch.no_grad():
        cache = model(torch.randint(1, 37, (3, 50)), use_cache=True).cache
        state = cache.layers[0].recurrent_states[0]
        assert state.shape == (3, 2, 5, 2) and state.dtype == torch.float32
        cache = model(torch.randint(1, 37, (3, 1)), cache=cache, use_cache=True).cache
        assert cache.layers[0].recurrent_states[0].shape == (3, 2, 5, 2)
        assert cache.get_seq_length() == 51  # the attention layer's KV length


@pytest.mark.parametrize("pattern", ["S", "SASA"])
def test_greedy_generate_matches_uncached_argmax(pattern):
    """generate(do_sample=False) equals repeatedly taking the argmax of an uncached full forward."""
    model = HybridSSMForCausalLM(tiny_config(pattern)).eval()
    prompt = torch.randint(1, 37, (2, 6))
    out = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    ids = prompt
    with torch.no_grad():
        for _ in range(8):
            nxt = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    assert torch.equal(out, ids)


def test_sampled_generate_is_seeded_and_in_vocabulary():
    """Sampling works, stays in the vocabulary, and is reproducible under a fixed seed."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    prompt = torch.randint(1, 37, (2, 4))
    torch.manual_seed(1)
    a = model.generate(prompt, max_new_tokens=10, do_sample=True, top_k=10, pad_token_id=0)
    torch.manual_seed(1)
    b = model.generate(prompt, max_new_tokens=10, do_sample=True, top_k=10, pad_token_id=0)
    assert a.shape == (2, 14) and torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < 37


def test_left_padding_gives_same_continuation_as_each_row_alone():
    """Padding never changes an SSM state or an attention output: batched left-padded generation equals per-row."""
    model = HybridSSMForCausalLM(tiny_config("SASA")).eval()
    rows = [torch.randint(1, 37, (1, 9)), torch.randint(1, 37, (1, 4))]
    width = max(r.shape[1] for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - r.shape[1] :] = r
        mask[i, width - r.shape[1] :] = 1
    batched = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    for i, r in enumerate(rows):
        alone = model.generate(r, max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(batched[i, width:], alone[0, r.shape[1] :]), f"row {i}"


def test_padding_leaves_ssm_state_unchanged():
    """Left padding tokens of any value leave the SSM final state exactly where no padding leaves it."""
    model = HybridSSMForCausalLM(tiny_config("S")).eval()
    seq = torch.randint(1, 37, (1, 7))
    padded = torch.cat([torch.randint(1, 37, (1, 5)), seq], dim=1)  # garbage tokens under the mask
    mask = torch.cat([torch.zeros(1, 5), torch.ones(1, 7)], dim=1).long()
    with torch.no_grad():
        s1 = model(seq, use_cache=True).cache.layers[0].recurrent_states[0]
        s2 = model(padded, attention_mask=mask, use_cache=True).cache.layers[0].recurrent_states[0]
    assert torch.allclose(s1, s2, atol=1e-6)


def test_tied_embeddings_share_storage(tmp_path):
    """tie_word_embeddings ties lm_head to the input embeddings, also after a reload."""
    model = HybridSSMForCausalLM(tiny_config("SA", tie_word_embeddings=True))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model.save_pretrained(tmp_path)
    again = HybridSSMForCausalLM.from_pretrained(tmp_path)
    assert again.lm_head.weight.data_ptr() == again.model.embed_tokens.weight.data_ptr()
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)


def test_auto_classes_resolve_after_import(tmp_path):
    """`import hf_ssm` registers the config and the causal LM with the Auto classes."""
    HybridSSMForCausalLM(tiny_config("SA")).save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), HybridSSMConfig)
    assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path), HybridSSMForCausalLM)


def test_bfloat16_autocast_keeps_scan_in_complex64(monkeypatch):
    """Under bf16 autocast the PD op still receives float32 / complex64, and the fused op == the dense reference
    loop (hf_ssm.ops.pd.reference.pd_dictionary_scan) for the whole model."""
    ids = torch.randint(1, 37, (2, 33))
    seen = []

    def run(op):
        def spy(sel, matrices, dv, b, x0=None, mask=None, temperature=1.0):
            seen.append((sel.dtype, dv.dtype, b.dtype))
            with torch.autocast("cpu", enabled=False):
                return op(sel, matrices, dv, b, x0, mask, temperature)

        monkeypatch.setattr(DICTIONARY_OP, "torch_op", spy)
        torch.manual_seed(0)
        model = HybridSSMForCausalLM(tiny_config("SASA")).train()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(ids, labels=ids, use_cache=False)
        out.loss.backward()
        return out.logits.float(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    logits_par, grads_par = run(DICTIONARY_OP.torch_op)
    logits_seq, grads_seq = run(reference.pd_dictionary_scan)
    assert set(seen) == {(torch.float32, torch.complex64, torch.complex64)}
    assert torch.allclose(logits_par, logits_seq, atol=1e-2)
    for name in grads_par:
        assert torch.allclose(grads_par[name], grads_seq[name], atol=1e-3, rtol=1e-2), name


def test_training_halves_loss_on_repeating_corpus():
    """200 AdamW steps on a tiny repeating-pattern corpus cut the LM loss by at least half."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(tiny_config("SA", vocab_size=16)).train()
    pattern = torch.tensor([1, 5, 3, 9, 2, 7, 4, 11, 6])
    corpus = pattern.repeat(200)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(200):
        starts = torch.randint(0, len(corpus) - 33, (8,))
        batch = torch.stack([corpus[s : s + 32] for s in starts])
        loss = model(batch, labels=batch, use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last <= 0.5 * first, (first, last)


def test_wrong_input_ids_dtype_raises():
    """Floating-point, bool and complex ids (and positions) are a TypeError naming the argument; an id outside the
    vocabulary a ValueError."""
    model = HybridSSMForCausalLM(tiny_config("SA"))
    for bad in (torch.rand(1, 5), torch.ones(1, 5, dtype=torch.bool), torch.ones(1, 5, dtype=torch.complex64)):
        with pytest.raises(TypeError, match="`input_ids` must be an integer tensor"):
            model(bad)
        with pytest.raises(TypeError, match="`position_ids` must be an integer tensor"):
            model(torch.ones(1, 5, dtype=torch.long), position_ids=bad)
    with pytest.raises(ValueError, match="input_ids"):
        model(torch.tensor([[1, 2, 37]]))


NARROW_INTEGER_DTYPES = [torch.int8, torch.int16, torch.uint8, torch.int32]


@pytest.mark.parametrize("dtype", NARROW_INTEGER_DTYPES)
def test_input_ids_of_any_integer_dtype_give_the_int64_results(dtype):
    """input_ids of int8 / int16 / uint8 / int32 (admitted by the input check, promised by docs/models.md) give the
    int64 logits in a forward, the same logits in a cached decode (prompt and decoded token in that dtype) and the
    same tokens from generate: they become torch.long at the model's entry instead of crashing in the embedding."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    ids = torch.randint(1, 37, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(model(ids.to(dtype)).logits, model(ids).logits, rtol=0, atol=0)
        decoded = {}
        for kind in (torch.long, dtype):
            cache = model(ids[:, :6].to(kind), use_cache=True).cache
            decoded[kind] = model(ids[:, 6:].to(kind), cache=cache, use_cache=True).logits
        torch.testing.assert_close(decoded[dtype], decoded[torch.long], rtol=0, atol=0)
    expected = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(ids.to(dtype), max_new_tokens=4, do_sample=False, pad_token_id=0), expected)


@pytest.mark.parametrize("dtype", NARROW_INTEGER_DTYPES)
def test_classification_heads_take_input_ids_of_any_integer_dtype(dtype):
    """The sequence and token classifiers give the int64 logits for narrow integer ids, padding found from
    pad_token_id included (the ids are compared with it as torch.long)."""
    from hf_ssm import HybridSSMForSequenceClassification, HybridSSMForTokenClassification

    ids = torch.randint(1, 37, (2, 6))
    ids[0, -2:] = 0  # right padding, found from pad_token_id = 0
    for head in (HybridSSMForSequenceClassification, HybridSSMForTokenClassification):
        model = head(tiny_config("SA", num_labels=3)).eval()
        with torch.no_grad():
            torch.testing.assert_close(model(ids.to(dtype)).logits, model(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", NARROW_INTEGER_DTYPES)
def test_labels_and_position_ids_of_any_integer_dtype_give_the_int64_results(dtype):
    """Narrow integer labels give the int64 loss, also when the vocabulary size does not fit the dtype (300 as
    uint8 or int8 is 44: the range check compared in the labels' dtype refused every label >= 44) and with -100
    marking ignored positions (signed dtypes); narrow position_ids of packed documents give the int64 logits."""
    model = HybridSSMForCausalLM(tiny_config("SA", vocab_size=300)).eval()
    ids = torch.randint(1, 300, (2, 8))
    labels = torch.randint(0, 128, (2, 8))
    if dtype != torch.uint8:
        labels[:, :2] = -100
    _, _, positions = packed_batch([[3, 5], [8]], vocab_size=300)
    with torch.no_grad():
        expected = model(ids, labels=labels).loss
        torch.testing.assert_close(model(ids, labels=labels.to(dtype)).loss, expected, rtol=0, atol=0)
        packed = model(ids, position_ids=positions).logits
        torch.testing.assert_close(model(ids, position_ids=positions.to(dtype)).logits, packed, rtol=0, atol=0)


def test_sequence_longer_than_max_positions_raises():
    model = HybridSSMForCausalLM(tiny_config("SA", max_position_embeddings=16))
    model(torch.randint(1, 37, (1, 16)))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(torch.randint(1, 37, (1, 17)))
    with torch.no_grad():
        cache = model(torch.randint(1, 37, (1, 16)), use_cache=True).cache
        with pytest.raises(ValueError, match="max_position_embeddings"):
            model(torch.randint(1, 37, (1, 1)), cache=cache, use_cache=True)


def test_checkpoint_with_different_state_size_raises(tmp_path):
    """Loading N=5 weights into an N=8 model is an error naming the mismatch, never a silent re-init."""
    HybridSSMForCausalLM(tiny_config("SA")).save_pretrained(tmp_path)
    with pytest.raises((ValueError, RuntimeError), match="(?i)size|shape"):
        HybridSSMForCausalLM.from_pretrained(tmp_path, pd_ssm_head_state_size=8)


def test_cache_without_ssm_slots_raises():
    """A cache built without the config has no recurrent-state slots: clear error, not a crash inside a layer."""
    from transformers import DynamicCache

    model = HybridSSMForCausalLM(tiny_config("SA"))
    with pytest.raises(ValueError, match="DynamicCache\\(config=model.config\\)"):
        model(torch.randint(1, 37, (1, 4)), cache=DynamicCache(), use_cache=True)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(mixers=["pd_ssm", "mamba"]), "mixers"),
        (dict(mixers="SAX"), "mixers"),
        (dict(mixers="SAS", num_hidden_layers=2), "mixers"),
        (dict(pd_ssm_head_state_size=0), "pd_ssm_head_state_size"),
        (dict(pd_ssm_dict_size=0), "pd_ssm_dict_size"),
        (dict(ssm_mixer="s4"), "ssm_mixer"),
        (dict(num_attention_heads=4, num_key_value_heads=3), "num_key_value_heads"),
    ],
)
def test_invalid_config_raises_naming_the_field(overrides, field):
    settings = dict(num_hidden_layers=2, mixers="SA")
    settings.update(overrides)
    with pytest.raises(ValueError, match=field):
        HybridSSMConfig(**settings)


def test_pattern_string_and_list_are_equivalent():
    a = HybridSSMConfig(num_hidden_layers=4, mixers="SASA")
    b = HybridSSMConfig(num_hidden_layers=4, mixers=["pd_ssm", "attention", "pd_ssm", "attention"])
    assert a.mixers == b.mixers
    assert a.layer_types == ["linear_attention", "full_attention"] * 2


def test_packed_documents_with_cache_raise():
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    _, ids, positions = packed_batch([(3, 4)])
    with pytest.raises(ValueError, match="packed"):
        model(ids, position_ids=positions, use_cache=True)


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_sequence_classification_pooling_ignores_padding(pooling):
    """Right- or left-padded rows get the same logits as the unpadded sequence, for last-token and mean pooling."""
    from hf_ssm import HybridSSMForSequenceClassification

    model = HybridSSMForSequenceClassification(tiny_config("SA", num_labels=3, classifier_pooling=pooling)).eval()
    seq = torch.randint(1, 37, (1, 6))
    right = torch.cat([seq, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    left = torch.cat([torch.zeros(1, 3, dtype=torch.long), seq], dim=1)
    mask_right = torch.tensor([[1] * 6 + [0] * 3])
    with torch.no_grad():
        alone = model(seq).logits
        assert torch.allclose(model(right, attention_mask=mask_right).logits, alone, atol=1e-5)
        assert torch.allclose(model(left, attention_mask=mask_right.flip(1)).logits, alone, atol=1e-5)
        out = model(seq, labels=torch.tensor([2]))
    assert out.loss is not None and out.logits.shape == (1, 3)


def test_token_classification_ignores_minus_100_labels():
    """The per-position loss averages only over labelled positions."""
    from hf_ssm import HybridSSMForTokenClassification

    model = HybridSSMForTokenClassification(tiny_config("S", num_labels=4)).eval()
    ids = torch.randint(1, 37, (2, 5))
    labels = torch.full((2, 5), -100)
    labels[:, -1] = torch.tensor([1, 3])
    with torch.no_grad():
        out = model(ids, labels=labels)
        expected = torch.nn.functional.cross_entropy(out.logits[:, -1], labels[:, -1])
    assert torch.allclose(out.loss, expected, atol=1e-6)


@pytest.mark.parametrize("head", ["HybridSSMForTokenClassification", "HybridSSMForSequenceClassification"])
def test_classification_heads_take_use_cache_false_and_refuse_true(head):
    """transformers' callers pass `use_cache`: False (or None) runs as without it; True is refused naming the field,
    since these heads return no cache."""
    import hf_ssm

    model = getattr(hf_ssm, head)(tiny_config("S", num_labels=4)).eval()
    ids = torch.randint(1, 37, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(model(ids, use_cache=False).logits, model(ids).logits)
        with pytest.raises(ValueError, match="`use_cache`=True: the classification heads return no cache"):
            model(ids, use_cache=True)


def _explicit_rms_norm(norm, x):
    """The block's RMSNorm written out: float32 statistics, back to the input dtype, times the weight."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.eps)
    return norm.weight * h.to(x.dtype)


def test_rms_norm_fused_path_equals_explicit_formula():
    """In float32 the block RMSNorm runs torch's fused rms_norm: the same values as the explicit formula, bit for bit,
    and the same gradients (<= 1e-6); a bfloat16 input keeps the explicit path (float32 statistics, a float32 result
    with the float32 weight)."""
    from hf_ssm.modeling.attention import HybridSSMRMSNorm

    torch.manual_seed(0)
    norm = HybridSSMRMSNorm(48, eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 7, 48, requires_grad=True)
    fused, explicit = norm(x), _explicit_rms_norm(norm, x)
    assert torch.equal(fused, explicit)
    (g_fused,) = torch.autograd.grad(fused.square().sum(), x)
    (g_explicit,) = torch.autograd.grad(explicit.square().sum(), x)
    assert (g_fused - g_explicit).abs().max().item() <= 1e-6
    half = x.detach().bfloat16()
    assert torch.equal(norm(half), _explicit_rms_norm(norm, half)) and norm(half).dtype == torch.float32


@pytest.mark.parametrize("mixers", ["SS", "SA"])
@pytest.mark.parametrize(
    "layer, weight", [("paper", "in_proj"), ("default", "transition_proj")], ids=["paper_layer", "default_layer"]
)
def test_training_through_a_carried_cache_state_matches_the_whole_sequence(mixers, layer, weight):
    """Truncated backpropagation: the second chunk of a sequence, run from the cache the first chunk left, has the
    whole sequence's logits and passes the whole sequence's gradient back into the first chunk (the state read from
    the cache is not overwritten in place by the cache update before the backward needs it): into B of the paper's
    layer, into W_P (straight through) of the default one."""
    from transformers import DynamicCache

    torch.manual_seed(0)
    fields = PAPER_PD_SSM_LAYER if layer == "paper" else {}
    config = HybridSSMConfig(
        mixers=mixers, vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=2, **fields
    )
    model = HybridSSMForCausalLM(config)
    ids = torch.randint(1, 16, (2, 10))
    whole = model(input_ids=ids, use_cache=False).logits
    cache = DynamicCache(config=config)
    model(input_ids=ids[:, :6], cache=cache, use_cache=True)
    second = model(input_ids=ids[:, 6:], cache=cache, use_cache=True).logits
    torch.testing.assert_close(second, whole[:, 6:])
    first_mixer = dict(model.named_parameters())[f"model.layers.0.mixer.{weight}.weight"]
    expected = torch.autograd.grad(whole[:, 6:].square().sum(), first_mixer)[0]
    got = torch.autograd.grad(second.square().sum(), first_mixer)[0]
    assert expected.abs().sum() > 0
    torch.testing.assert_close(got, expected)
