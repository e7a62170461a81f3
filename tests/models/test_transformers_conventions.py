"""HybridSSM behaves like a transformers model: return_dict, output_attentions, the deprecated
`past_key_values` name, problem_type, rope types, stateful generation, cache implementations, auto_map,
pad-token pooling, the current checkpointing name, and no host synchronisation in a decode step."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from hf_ssm import (
    HybridSSMForCausalLM,
    HybridSSMForSequenceClassification,
    HybridSSMForTimeSeriesClassification,
    HybridSSMForTokenClassification,
    HybridSSMModel,
)
from model_checks import (
    HF_SSM_MODELING_FILES,
    ROOT,
    host_reads_in_decode_step,
    hybrid_config,
    load_without_hf_ssm,
    save_with_reference,
    tiny_config,
)


def _heads():
    """(model, inputs) for every head, tiny."""
    ids = torch.randint(1, 37, (2, 7))
    ts = tiny_config("SA", input_channels=3, num_labels=2)
    return [
        (HybridSSMModel(tiny_config("SA")), {"input_ids": ids}),
        (HybridSSMForCausalLM(tiny_config("SA")), {"input_ids": ids, "labels": ids}),
        (HybridSSMForSequenceClassification(tiny_config("SA", num_labels=3)), {"input_ids": ids}),
        (HybridSSMForTokenClassification(tiny_config("SA", num_labels=3)), {"input_ids": ids}),
        (HybridSSMForTimeSeriesClassification(ts), {"past_values": torch.randn(2, 7, 3)}),
    ]


# ----------------------------------------------------------------------------------------------- 1 return_dict


@pytest.mark.parametrize("index", range(5), ids=["base", "causal_lm", "sequence", "token", "time_series"])
def test_return_dict_false_returns_the_output_as_a_tuple(index):
    """return_dict=False (argument or config.return_dict) gives the ModelOutput's to_tuple(), for every head."""
    model, inputs = _heads()[index]
    model.eval()
    with torch.no_grad():
        as_dict = model(**inputs)
        as_tuple = model(**inputs, return_dict=False)
        model.config.return_dict = False
        from_config = model(**inputs)
    assert not isinstance(as_dict, tuple) and isinstance(as_tuple, tuple) and isinstance(from_config, tuple)
    expected = as_dict.to_tuple()
    for got in (as_tuple, from_config):
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert type(a) is type(b)
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b)


# ----------------------------------------------------------------------------------------- 2 output_attentions


def test_output_attentions_returns_the_maps_of_the_attention_layers():
    """With eager attention, output_attentions=True returns one causal (B, heads, T, T) softmax map per attention
    layer (SSM layers contribute none); padded keys get zero weight. hidden_states stay num_layers + 1."""
    config = tiny_config("SASA")
    model = HybridSSMForCausalLM(config)
    model.set_attn_implementation("eager")
    model.eval()
    ids = torch.randint(1, 37, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        out = model(ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    assert len(out.attentions) == 2 and len(out.hidden_states) == 5
    for weights in out.attentions:
        assert weights.shape == (2, 4, 6, 6)
        real_rows = weights[1]  # the unpadded row: every query attends to itself and the past only
        assert torch.allclose(real_rows.sum(-1), torch.ones(4, 6), atol=1e-5)
        assert torch.equal(torch.triu(real_rows, diagonal=1), torch.zeros_like(real_rows))
        assert torch.equal(weights[0, :, 2:, :2], torch.zeros(4, 4, 2))  # padded keys of the padded row
    with torch.no_grad():
        assert model(ids, attention_mask=mask).attentions is None  # not requested: nothing collected


# --------------------------------------------------------------------------------------- 3 past_key_values


def test_past_key_values_is_accepted_with_a_deprecation_warning():
    """`past_key_values=` maps to `cache` with a FutureWarning (transformers 5.x) and continues the cached run."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    ids = torch.randint(1, 37, (1, 8))
    with torch.no_grad():
        cache = model(ids[:, :5], use_cache=True).cache
        expected = model(ids[:, 5:], cache=copy.deepcopy(cache), use_cache=True).logits
        with pytest.warns(FutureWarning, match="past_key_values"):
            got = model(ids[:, 5:], past_key_values=cache, use_cache=True).logits
        full = model(ids, use_cache=False).logits[:, 5:]
    assert torch.equal(got, expected) and torch.allclose(got, full, atol=1e-5)


# ----------------------------------------------------------------------------------------------- 4 problem_type


@pytest.mark.parametrize("problem_type", ["regression", "single_label_classification", "multi_label_classification"])
@pytest.mark.parametrize("explicit", [False, True], ids=["inferred", "config"])
def test_sequence_classification_loss_follows_problem_type(problem_type, explicit):
    """Regression (MSE), single-label (cross-entropy) and multi-label (BCE with logits) losses as transformers'
    ForSequenceClassificationLoss computes them, whether problem_type is set or inferred from the labels."""
    num_labels = 1 if problem_type == "regression" else 3
    config = tiny_config("SA", num_labels=num_labels, problem_type=problem_type if explicit else None)
    model = HybridSSMForSequenceClassification(config).eval()
    ids = torch.randint(1, 37, (4, 6))
    labels = {
        "regression": torch.randn(4),
        "single_label_classification": torch.tensor([0, 2, 1, 2]),
        "multi_label_classification": torch.randint(0, 2, (4, 3)).float(),
    }[problem_type]
    with torch.no_grad():
        out = model(ids, labels=labels)
    f = torch.nn.functional
    expected = {
        "regression": lambda: f.mse_loss(out.logits.squeeze(-1), labels),
        "single_label_classification": lambda: f.cross_entropy(out.logits, labels),
        "multi_label_classification": lambda: f.binary_cross_entropy_with_logits(out.logits, labels),
    }[problem_type]()
    assert torch.allclose(out.loss, expected, atol=1e-6)
    assert model.config.problem_type == problem_type


def test_an_unknown_problem_type_is_refused_at_construction_and_on_change():
    """`problem_type` takes transformers' values only ("regression", "single_label_classification",
    "multi_label_classification", None): an unknown one is refused when the config is built or the field is set,
    naming the accepted values (before, "ranking" was kept and failed only at the loss)."""
    with pytest.raises(ValueError, match=r"`problem_type` must be one of \[None, 'regression', .*got 'ranking'"):
        tiny_config("SA", num_labels=3, problem_type="ranking")
    config = tiny_config("SA", num_labels=3)
    with pytest.raises(ValueError, match="`problem_type` must be one of"):
        config.problem_type = "ranking"
    assert config.problem_type is None
    config.problem_type = "multi_label_classification"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_integer_labels_of_any_dtype_give_the_long_labels_loss(dtype):
    """Labels of any integer dtype (int32 from numpy, ...) give the loss of the same labels as torch.long, for the
    causal LM, the sequence classifier (single-label, its problem type inferred as for long labels) and the token
    classifier; int32 `input_ids` give the logits of long ones, as transformers' embedding does."""
    torch.manual_seed(0)
    ids = torch.randint(1, 37, (2, 5))
    causal = HybridSSMForCausalLM(tiny_config("SA")).eval()
    reference = causal(ids, labels=ids)
    narrow = causal(ids.to(torch.int32), labels=ids.to(dtype))
    torch.testing.assert_close(narrow.loss, reference.loss)
    torch.testing.assert_close(narrow.logits, reference.logits)
    for head, labels in (
        (HybridSSMForSequenceClassification, torch.tensor([0, 2])),
        (HybridSSMForTokenClassification, torch.randint(0, 3, (2, 5))),
    ):
        model = head(tiny_config("SA", num_labels=3)).eval()
        expected = model(ids, labels=labels).loss
        torch.testing.assert_close(model(ids, labels=labels.to(dtype)).loss, expected)
    assert model.config.problem_type is None or model.config.problem_type == "single_label_classification"


def test_token_classification_loss_is_transformers_loss_with_num_items_in_batch():
    """Token classification uses transformers' ForTokenClassification: -100 ignored, and Trainer's
    num_items_in_batch turns the mean into sum / num_items_in_batch (gradient accumulation)."""
    model = HybridSSMForTokenClassification(tiny_config("SA", num_labels=4)).eval()
    ids = torch.randint(1, 37, (2, 5))
    labels = torch.randint(0, 4, (2, 5))
    labels[0, :2] = -100
    with torch.no_grad():
        out = model(ids, labels=labels)
        summed = model(ids, labels=labels, num_items_in_batch=torch.tensor(16)).loss
    f = torch.nn.functional
    total = f.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    assert torch.allclose(out.loss, total / 8, atol=1e-6)
    assert torch.allclose(summed, total / 16, atol=1e-6)


# ------------------------------------------------------------------------------------------------- 5 rope types


def test_dynamic_rope_rescales_frequencies_past_the_trained_length():
    """rope_type="dynamic" (NTK) equals default RoPE up to max_position_embeddings and runs past it with the
    frequencies transformers' dynamic NTK function gives for that length (the length limit is the other types')."""
    rope = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    config = tiny_config("SA", max_position_embeddings=16, rope_parameters=rope)
    dynamic = HybridSSMForCausalLM(config).eval()
    default = HybridSSMForCausalLM(tiny_config("SA", max_position_embeddings=64)).eval()
    default.load_state_dict(dynamic.state_dict())
    short, long = torch.randint(1, 37, (1, 12)), torch.randint(1, 37, (1, 24))
    with torch.no_grad():
        assert torch.equal(dynamic(short).logits, default(short).logits)
        longer = dynamic(long).logits  # default RoPE with max_position_embeddings=16 would refuse this length
        assert not torch.equal(longer, default(long).logits)
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=24)
    assert torch.allclose(dynamic.model.rotary_emb.inv_freq, expected)
    assert not torch.allclose(expected, dynamic.model.rotary_emb.original_inv_freq)


def test_unknown_rope_type_is_refused_naming_the_accepted_ones():
    """A rope type transformers does not implement is a clear error, not a KeyError: when it is assigned to the
    config, and when the model is built from a config whose dict was edited in place past that check."""
    config = tiny_config("SA")
    with pytest.raises(ValueError, match=r"rope_type.*dynamic"):
        config.rope_parameters = {"rope_type": "spiral", "rope_theta": 10000.0}
    config.rope_parameters["rope_type"] = "spiral"
    with pytest.raises(ValueError, match=r"rope_type.*dynamic"):
        HybridSSMForCausalLM(config)


# ------------------------------------------------------------------------------------- 6, 7 generation modes


@pytest.mark.parametrize("mode", ["prompt_lookup", "assistant_model"])
def test_assisted_decoding_is_refused_up_front_for_the_stateful_model(mode):
    """The SSM state cannot be rewound after rejected draft tokens: generate refuses assisted decoding and prompt
    lookup with a clear message before running anything."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    prompt = torch.randint(1, 37, (1, 6))
    extra = {"prompt_lookup_num_tokens": 3} if mode == "prompt_lookup" else {"assistant_model": model}
    with pytest.raises(ValueError, match="stateful"):
        model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0, **extra)


def test_a_cache_implementation_the_model_cannot_run_is_refused_clearly():
    """generate(cache_implementation="quantized" or an offloaded cache) is a ValueError naming the field and the
    accepted values before anything runs."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    prompt = torch.randint(1, 37, (1, 6))
    for implementation in ("quantized", "offloaded", "offloaded_static"):
        with pytest.raises(
            ValueError, match=rf"`cache_implementation` must be one of .*'static'.*got '{implementation}'"
        ):
            model.generate(
                prompt, max_new_tokens=3, do_sample=False, pad_token_id=0, cache_implementation=implementation
            )


STATIC_CACHE_MIXERS = ["pd_ssm", "bd_lru", "h_lru", "diag_lru", "lrc_ssm", "gru_ssm", "mgu_ssm", "lstm_ssm"]


@pytest.mark.parametrize("mixer", STATIC_CACHE_MIXERS)
def test_static_cache_generates_exactly_what_the_dynamic_cache_does(mixer):
    """generate(cache_implementation="static") equals the dynamic cache for every mixer beside attention: greedy,
    beam search and seeded sampling, on a left-padded batch of 2."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(hybrid_config(mixer)).eval()
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    modes = [dict(do_sample=False), dict(do_sample=False, num_beams=3), dict(do_sample=True, top_k=8)]
    for mode in modes:
        torch.manual_seed(1)
        dynamic = model.generate(ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0, **mode)
        torch.manual_seed(1)
        static = model.generate(
            ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0, cache_implementation="static", **mode
        )
        assert torch.equal(static, dynamic), mode


def test_static_cache_passed_by_hand_equals_the_full_forward():
    """A StaticCache(config=model.config) built by the user holds the SSM states in its recurrent slots: prefill
    plus cached one-token steps give the full forward's logits, and it refuses nothing a dynamic cache accepts."""
    from transformers import StaticCache

    torch.manual_seed(0)
    model = HybridSSMForCausalLM(tiny_config("PABA", lru_total_state_size=8, lru_group_size=2)).eval()
    ids = torch.randint(1, 37, (2, 9))
    with torch.no_grad():
        full = model(ids).logits
        cache = StaticCache(config=model.config, max_cache_len=16)
        steps = [model(ids[:, :5], cache=cache, use_cache=True).logits]
        steps += [model(ids[:, t : t + 1], cache=cache, use_cache=True).logits for t in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------- 8 auto_map


def test_checkpoints_name_every_auto_class_and_load_with_each_without_hf_ssm(tmp_path):
    """A causal-LM checkpoint's auto_map names AutoModel and the causal-LM, sequence- and token-classification
    classes; a time-series checkpoint carries modeling_timeseries.py and names its class. Where hf_ssm cannot be
    imported, each Auto class loads its checkpoint and reproduces the hybrid stack's output exactly."""
    lm_dir, ts_dir = tmp_path / "lm", tmp_path / "ts"
    ids = torch.randint(1, 37, (2, 7))
    lm = HybridSSMForCausalLM(tiny_config("SA", num_labels=3))
    save_with_reference(lm, lm_dir, {"input_ids": ids}, output="logits")
    auto_map = json.loads((lm_dir / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_hybrid_ssm.HybridSSMConfig",
        "AutoModel": "modeling_hybrid_ssm.HybridSSMModel",
        "AutoModelForCausalLM": "modeling_hybrid_ssm.HybridSSMForCausalLM",
        "AutoModelForSequenceClassification": "modeling_hybrid_ssm.HybridSSMForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_hybrid_ssm.HybridSSMForTokenClassification",
    }
    with torch.no_grad():  # AutoModel loads the stack under the LM head: its reference is the stack's output
        torch.save({"inputs": {"input_ids": ids}, "output": lm.model(ids).last_hidden_state}, lm_dir / "base.pt")
    ts = HybridSSMForTimeSeriesClassification(tiny_config("SA", input_channels=3, num_labels=2))
    save_with_reference(ts, ts_dir, {"past_values": torch.randn(2, 7, 3)}, output="logits")
    assert (ts_dir / "modeling_timeseries.py").exists()
    assert json.loads((ts_dir / "config.json").read_text())["auto_map"] == {
        "AutoConfig": "configuration_hybrid_ssm.HybridSSMConfig",
        "AutoModelForSequenceClassification": "modeling_timeseries.HybridSSMForTimeSeriesClassification",
    }
    jobs = [
        {"directory": str(lm_dir), "auto_class": "AutoModelForCausalLM"},
        {"directory": str(lm_dir), "auto_class": "AutoModel", "output": "last_hidden_state", "reference": "base.pt"},
        {"directory": str(ts_dir), "auto_class": "AutoModelForSequenceClassification"},
    ]
    # The classification heads load the LM checkpoint with a new score head: only their class is checked.
    for auto_class in ("AutoModelForSequenceClassification", "AutoModelForTokenClassification"):
        jobs.append({"directory": str(lm_dir), "auto_class": auto_class})
    results = [(r["class"], r["identical"]) for r in load_without_hf_ssm(jobs, tmp_path)]
    assert results[:3] == [
        ("HybridSSMForCausalLM", True),
        ("HybridSSMModel", True),
        ("HybridSSMForTimeSeriesClassification", True),
    ]
    assert [c for c, _ in results[3:]] == ["HybridSSMForSequenceClassification", "HybridSSMForTokenClassification"]


def test_token_classifier_refuses_a_time_series_config():
    """A time-series config (input_channels set) given to a token head is refused, naming the right class."""
    with pytest.raises(ValueError, match="HybridSSMForTimeSeriesClassification"):
        HybridSSMForSequenceClassification(tiny_config("SA", input_channels=3))


# ------------------------------------------------------------------------------------------ 9 checkpointing


def test_docs_name_the_current_activation_checkpointing_method():
    """README, docs, the package and the scripts use `activation_checkpointing_enable` (transformers 5.x), not
    the deprecated `gradient_checkpointing_enable`."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    # the package's own training code and scripts call the current name too
    texts += [*sorted((ROOT / "hf_ssm").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.py"))]
    stale = [p.name for p in texts if "gradient_checkpointing_enable" in p.read_text()]
    assert not stale, stale
    assert "activation_checkpointing_enable" in (ROOT / "docs" / "models.md").read_text()


@pytest.mark.filterwarnings("error::FutureWarning")
def test_activation_checkpointing_gives_same_gradients_without_deprecation_warning():
    """activation_checkpointing_enable() recomputes blocks in backward (no deprecation warning) and yields the
    gradients of storing activations."""
    config = tiny_config("SASA")
    ids = torch.randint(1, 37, (2, 16))
    grads, mixer_calls = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = HybridSSMForCausalLM(config).train()
        if checkpointing:
            model.activation_checkpointing_enable()
        calls = []
        model.model.layers[0].mixer.register_forward_hook(lambda *args, seen=calls: seen.append(1))
        model(ids, labels=ids, use_cache=False).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        mixer_calls.append(len(calls))
    assert mixer_calls == [1, 2], "checkpointing should re-run the block in backward"
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


# --------------------------------------------------------------------------------- 10 pad-token pooling


@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_sequence_classification_without_mask_skips_pad_tokens(pooling):
    """Without attention_mask, right padding is found from config.pad_token_id (as transformers' sequence
    classifiers do): each padded row gets its unpadded logits."""
    config = tiny_config("SA", num_labels=3, classifier_pooling=pooling, pad_token_id=0)
    model = HybridSSMForSequenceClassification(config).eval()
    a, b = torch.randint(1, 37, (1, 7)), torch.randint(1, 37, (1, 4))
    batch = torch.cat([a, torch.cat([b, torch.zeros(1, 3, dtype=torch.long)], dim=1)])
    with torch.no_grad():
        got = model(batch).logits
        alone = torch.cat([model(a).logits, model(b).logits])
    assert torch.allclose(got, alone, atol=1e-5)


def test_sequence_classification_batch_without_mask_or_pad_token_raises():
    """No mask and no pad_token_id: padding cannot be found, so a batch of several rows is refused."""
    model = HybridSSMForSequenceClassification(tiny_config("SA", num_labels=2, pad_token_id=None)).eval()
    with pytest.raises(ValueError, match="pad_token_id"):
        model(torch.randint(1, 37, (2, 5)))
    assert model(torch.randint(1, 37, (1, 5))).logits.shape == (1, 2)


# ------------------------------------------------------------------------------------ 13 attention_mask shape


@pytest.mark.parametrize("shape", [(1, 3), (2, 5), (1, 6), (5,)], ids=["short", "batch", "long", "1d"])
def test_attention_mask_of_the_wrong_shape_raises(shape):
    """A 2-D mask must be (batch, past + seq_len): anything else is a ValueError naming attention_mask."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.randint(1, 37, (1, 5)), attention_mask=torch.ones(shape, dtype=torch.long))


@pytest.mark.parametrize("pattern", ["SA", "S"])
def test_attention_mask_with_a_cache_must_cover_past_and_new_tokens(pattern):
    """After a 5-token prefill, a 3-token continuation takes a (B, 8) mask; (B, 3) is refused when the past
    length is known (attention layers hold it)."""
    model = HybridSSMForCausalLM(tiny_config(pattern)).eval()
    ids = torch.randint(1, 37, (2, 8))
    with torch.no_grad():
        cache = model(ids[:, :5], use_cache=True).cache
        expected = model(ids[:, 5:], cache=copy.deepcopy(cache), use_cache=True).logits
        got = model(ids[:, 5:], attention_mask=torch.ones(2, 8), cache=copy.deepcopy(cache), use_cache=True).logits
        assert torch.equal(got, expected)
        if pattern == "SA":
            with pytest.raises(ValueError, match=r"attention_mask.*5 \+ 3"):
                model(ids[:, 5:], attention_mask=torch.ones(2, 3), cache=cache, use_cache=True)
        with pytest.raises(ValueError, match="attention_mask"):
            model(ids[:, 5:], attention_mask=torch.ones(2, 2), cache=cache, use_cache=True)


def test_four_d_attention_mask_is_refused_where_ssm_layers_need_the_padding():
    """A 4-D mask cannot tell the SSM layers which tokens are padding: refused with the 2-D / packing alternative."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    mask = torch.zeros(1, 1, 5, 5)
    with pytest.raises(ValueError, match=r"2-D padding mask.*position_ids"):
        model(torch.randint(1, 37, (1, 5)), attention_mask=mask)


# ------------------------------------------------------------------------------------------ 14 other inputs


def test_empty_batch_raises_naming_the_input():
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    with pytest.raises(ValueError, match="batch size 0"):
        model(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="batch size 0"):
        model(inputs_embeds=torch.zeros(0, 5, 32))


@pytest.mark.parametrize("shape", [(1, 4), (3, 5), (5,)], ids=["length", "batch", "1d"])
def test_position_ids_of_the_wrong_shape_raise(shape):
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    with pytest.raises(ValueError, match="position_ids"):
        model(torch.randint(1, 37, (2, 5)), position_ids=torch.zeros(shape, dtype=torch.long))


@pytest.mark.parametrize(
    ("head", "labels", "message"),
    [
        ("lm", torch.randint(0, 37, (2, 4)), "labels.*shape"),
        ("lm", torch.full((2, 5), 37), r"labels.*\[0, 37\)"),
        ("lm", torch.full((2, 5), -5), r"labels.*\[0, 37\)"),
        ("sequence", torch.tensor([0, 3]), r"labels.*\[0, 3\)"),
        ("sequence", torch.tensor([0, 1, 2]), "labels.*one entry per sequence"),
        ("sequence", torch.rand(2, 2), r"labels.*\(2, 3\)"),
        ("token", torch.randint(0, 3, (2, 4)), r"labels.*\(2, 5\)"),
        ("token", torch.full((2, 5), 3), r"labels.*\[0, 3\)"),
    ],
)
def test_labels_of_the_wrong_shape_or_range_raise(head, labels, message):
    """Labels that do not fit the logits are a ValueError naming `labels` and what fits, not a raw torch error."""
    config = tiny_config("SA", num_labels=3)
    model = {
        "lm": HybridSSMForCausalLM,
        "sequence": HybridSSMForSequenceClassification,
        "token": HybridSSMForTokenClassification,
    }[head](config).eval()
    with pytest.raises(ValueError, match=message):
        model(torch.randint(1, 37, (2, 5)), labels=labels)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_inputs_embeds_raise(bad):
    """NaN / inf in inputs_embeds is refused before any layer (PD and LRU layers would return NaN logits)."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    embeds = torch.randn(1, 5, 32)
    embeds[0, 3, 7] = bad
    with pytest.raises(ValueError, match="inputs_embeds.*NaN or inf"):
        model(inputs_embeds=embeds)


# --------------------------------------------------------------------------- no host sync in a decode step


def test_decode_step_reads_no_tensor_value_beyond_transformers_own():
    """One cached decode step (with a padded 2-D mask, as generate passes it) makes no host read in hf_ssm's code,
    and no more in total than a Qwen2 decode step of the same shape (transformers' mask utilities make theirs).
    tests/models/test_model_invariants.py checks the hf_ssm part for every mixer."""
    ids = torch.randint(1, 37, (2, 6))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0
    ours = HybridSSMForCausalLM(tiny_config("SASA")).eval()
    qwen = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=37,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    ).eval()
    reads = host_reads_in_decode_step(ours, ids, mask)
    assert not {f: n for f, n in reads.items() if f in HF_SSM_MODELING_FILES}, reads
    assert sum(reads.values()) <= sum(host_reads_in_decode_step(qwen, ids, mask).values()), reads


def test_prefill_still_checks_token_ids():
    """The decode-step exemption is for one new token on a cache only: a prefill checks the id range."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    with pytest.raises(ValueError, match=r"input_ids.*\[0, 37\)"):
        model(torch.tensor([[1, 2, 37]]), cache=DynamicCache(config=model.config), use_cache=True)


@pytest.mark.parametrize(
    ("argument", "value", "error", "message"),
    [
        ("labels", torch.rand(2, 5), TypeError, r"`labels` must be integer token ids \(torch.long\), got dtype"),
        ("labels", [[1, 2, 3, 4, 5]] * 2, TypeError, "`labels` must be a torch.Tensor, got list"),
        ("input_ids", [[1, 2, 3, 4, 5]] * 2, TypeError, "`input_ids` must be a torch.Tensor, got list"),
        ("attention_mask", torch.full((2, 5), 0.5), ValueError, "`attention_mask` must hold only 1 .* and 0 .*0.5"),
        ("attention_mask", torch.full((2, 5), 2), ValueError, "`attention_mask` must hold only 1 .* and 0 .*got the value 2"),
        ("position_ids", torch.arange(-1, 4).unsqueeze(0), ValueError, "`position_ids` must be >= 0, got a minimum of -1"),
        ("position_ids", torch.arange(5.0).unsqueeze(0), TypeError, "`position_ids` must be an integer tensor"),
        ("inputs_embeds", [[[0.0] * 16] * 5] * 2, TypeError, "`inputs_embeds` must be a torch.Tensor, got list"),
    ],
)  # fmt: skip
def test_inputs_of_the_wrong_kind_or_value_raise_naming_the_argument(argument, value, error, message):
    """Float labels (a raw torch error before), Python lists (AttributeError: no 'dtype'), a mask of 0.5 or 2 and
    negative position_ids (accepted before) each raise naming the argument and what it accepts."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    inputs = {"input_ids": torch.randint(1, 37, (2, 5)), argument: value}
    if argument == "inputs_embeds":
        del inputs["input_ids"]
    with pytest.raises(error, match=message):
        model(**inputs)


def test_valid_masks_and_position_ids_still_pass():
    """0/1 masks of any dtype (bool, int, float) and position_ids from 0 pass, on a prompt and on a cached decode
    step (which skips the value checks: no host read per generated token)."""
    model = HybridSSMForCausalLM(tiny_config("SA")).eval()
    ids = torch.randint(1, 37, (2, 5))
    for mask in (torch.ones(2, 5, dtype=torch.bool), torch.ones(2, 5), torch.tensor([[0, 1, 1, 1, 1]] * 2)):
        model(ids, attention_mask=mask, position_ids=torch.arange(5).unsqueeze(0))
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
        model(ids[:, :1], cache=cache, attention_mask=torch.ones(2, 6))
