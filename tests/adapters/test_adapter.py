"""SSM adapter on a frozen causal LM (docs/design.md §10), on tiny random Qwen2 and Llama models."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from hf_ssm.adapters import (
    ADAPTER_CONFIG_NAME,
    ADAPTER_WEIGHTS_NAME,
    SSMAdapterConfig,
    attach_ssm_adapter,
    find_decoder_layers,
    load_ssm_adapter,
)
from hf_ssm.adapters.lora import add_lora, lora_rank_for_budget
from hf_ssm.modeling import SSM_MIXER_CLASSES
from model_checks import ROOT, load_script, run_script

VOCAB = 61
PD_SETTINGS = {"pd_ssm_head_state_size": 5, "pd_ssm_num_heads": 2, "pd_ssm_dict_size": 4}


def tiny_base(kind: str = "qwen2", hidden: int = 32, layers: int = 2, seed: int = 0):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(seed)
    classes = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
        "mistral": (MistralConfig, MistralForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    }
    config_class, model_class = classes[kind]
    return model_class(config_class(**common)).eval()


def adapter_config(**overrides) -> SSMAdapterConfig:
    return SSMAdapterConfig(**{"mixer_settings": PD_SETTINGS, **overrides})


def randomise(adapted, scale: float = 0.3) -> None:
    """Give the adapter weights that change the logits (a fresh one adds exactly zero)."""
    torch.manual_seed(1)
    with torch.no_grad():
        adapted.ssm_adapter.out_proj.weight.normal_(0.0, scale)


def ids(batch: int = 2, steps: int = 11, seed: int = 2) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, steps), generator=torch.Generator().manual_seed(seed))


KINDS = ["qwen2", "llama"]
# scripts/train_adapter.py on the built-in tiny base in seconds (each test adds its layers, buckets and options)
TINY_QUICK_RUN = [
    "--tiny_hidden_size", "16", "--tiny_heads", "2", "--pretrain_steps", "2", "--pretrain_batch_size", "2",
    "--max_steps", "3", "--eval_every", "3", "--batch_size", "4", "--eval_batch_size", "8",
    "--eval_samples_per_bucket", "4", "--train_max_transitions", "3",
    "--extra_config", "pd_ssm_head_state_size=4", "pd_ssm_dict_size=4",  # a test adds its own items right after
]  # fmt: skip
# The mixer fields TINY_QUICK_RUN and the tiny settings below give the adapter's PD-SSM.
TINY_MIXER = {"pd_ssm_head_state_size": 4, "pd_ssm_dict_size": 4}


def cached_decode_logits(adapted, x: torch.Tensor, prefill: int = 5) -> torch.Tensor:
    """Logits (B, T, V) of `x` from a prefill of `prefill` tokens, then one token at a time through the cache."""
    out = adapted(x[:, :prefill], use_cache=True)
    pieces = [out.logits]
    for t in range(prefill, x.shape[1]):
        out = adapted(x[:, t : t + 1], cache=out.cache, use_cache=True)
        pieces.append(out.logits)
    return torch.cat(pieces, dim=1)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layer_index", [-1, 0])
def test_attach_leaves_logits_bit_identical_and_base_untouched(kind, layer_index):
    """A freshly attached adapter (zero W_out) leaves the logits bit-identical and never edits base weights."""
    base = tiny_base(kind)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    x = ids()
    reference = base(x).logits
    adapted = attach_ssm_adapter(base, adapter_config(layer_index=layer_index))
    assert torch.equal(adapted(x).logits, reference)
    randomise(adapted)
    assert not torch.allclose(adapted(x).logits, reference)  # the hook really is in the forward path
    after = base.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(adapted.unload()(x).logits, reference)  # unload removes the hooks


@pytest.mark.parametrize("kind", KINDS)
def test_only_adapter_parameters_train_and_all_receive_gradients(kind):
    """Base parameters are frozen and get no gradient; every adapter parameter gets a non-zero one."""
    adapted = attach_ssm_adapter(tiny_base(kind), adapter_config())
    adapter_ids = {id(p) for p in adapted.ssm_adapter.parameters()}
    trainable = {id(p) for p in adapted.parameters() if p.requires_grad}
    assert trainable == adapter_ids
    randomise(adapted)  # with W_out = 0 only W_out itself would get a gradient
    adapted(ids(), labels=ids()).loss.backward()
    assert all(p.grad is None for p in adapted.base_model.parameters())
    for name, param in adapted.ssm_adapter.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kind", KINDS)
def test_save_then_load_gives_identical_outputs_and_only_adapter_files(kind, tmp_path):
    """save_pretrained writes only the adapter (config + safetensors, no base tensor); reloading onto the same
    base reproduces the logits exactly."""
    base = tiny_base(kind)
    pristine = copy.deepcopy(base)
    adapted = attach_ssm_adapter(base, adapter_config())
    for p in adapted.ssm_adapter.parameters():  # every tensor must round-trip, not just W_out
        p.data.add_(0.05 * torch.randn_like(p))
    x = ids()
    expected = adapted(x).logits
    adapted.save_pretrained(tmp_path)
    assert sorted(f.name for f in tmp_path.iterdir()) == [ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME]
    tensors = load_file(str(tmp_path / ADAPTER_WEIGHTS_NAME))
    assert all(k.startswith("ssm_adapter.") for k in tensors)
    assert sum(t.numel() for t in tensors.values()) == sum(p.numel() for p in adapted.ssm_adapter.parameters())
    saved = json.loads((tmp_path / ADAPTER_CONFIG_NAME).read_text())
    assert saved["base_hidden_size"] == 32 and saved["base_num_hidden_layers"] == 2 and saved["mixer"] == "pd_ssm"
    reloaded = load_ssm_adapter(pristine, tmp_path)
    assert torch.equal(reloaded(x).logits, expected)
    assert not any(p.requires_grad for p in reloaded.parameters())  # inference mode by default, as in PEFT


@pytest.mark.parametrize(
    ("other", "message"),
    [(dict(hidden=48), "hidden_size = 32"), (dict(layers=3), "num_hidden_layers = 2")],
)
def test_loading_onto_mismatched_base_raises(tmp_path, other, message):
    """An adapter trained for one base width / depth refuses another base with a clear error."""
    attach_ssm_adapter(tiny_base(), adapter_config()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=message):
        load_ssm_adapter(tiny_base(**other), tmp_path)


def test_failed_load_leaves_the_base_trainable_as_before(tmp_path):
    """a load_ssm_adapter that fails after attaching (weights that do not fit the config) leaves no
    adapter and restores every base parameter's requires_grad (it used to leave the base frozen)."""
    attach_ssm_adapter(tiny_base(), adapter_config()).save_pretrained(tmp_path)
    tensors = load_file(str(tmp_path / ADAPTER_WEIGHTS_NAME))
    tensors["ssm_adapter.unexpected"] = torch.zeros(1)
    from safetensors.torch import save_file

    save_file(tensors, str(tmp_path / ADAPTER_WEIGHTS_NAME))
    base = tiny_base()
    base.lm_head.weight.requires_grad_(False)  # a mixed state, to check it is restored rather than reset
    before = {n: p.requires_grad for n, p in base.named_parameters()}
    assert any(before.values())
    with pytest.raises(ValueError, match="unexpected"):
        load_ssm_adapter(base, tmp_path)
    assert {n: p.requires_grad for n, p in base.named_parameters()} == before
    attach_ssm_adapter(base, adapter_config())  # not left marked as attached


def test_adapter_of_another_model_type_is_refused_unless_allowed(tmp_path):
    """an adapter saved on a Llama base does not load silently onto a Qwen2 base of the same shape
    (base_model_type is recorded); allow_other_model_type=True loads it with a warning."""
    llama = attach_ssm_adapter(tiny_base("llama"), adapter_config())
    randomise(llama)
    llama.save_pretrained(tmp_path)
    assert json.loads((tmp_path / ADAPTER_CONFIG_NAME).read_text())["base_model_type"] == "llama"
    qwen = tiny_base("qwen2")
    with pytest.raises(ValueError, match="trained on a 'llama' base.*this base is 'qwen2'.*allow_other_model_type"):
        load_ssm_adapter(qwen, tmp_path)
    assert all(p.requires_grad for p in qwen.parameters())
    with pytest.warns(UserWarning, match="'llama'.*'qwen2'"):
        loaded = load_ssm_adapter(qwen, tmp_path, allow_other_model_type=True)
    assert torch.equal(loaded.ssm_adapter.out_proj.weight, llama.ssm_adapter.out_proj.weight)


@torch.no_grad()
@pytest.mark.parametrize("kind", KINDS)
def test_cached_decoding_equals_full_forward(kind):
    """Prefill + one token at a time through the KV cache and the adapter state == one full forward."""
    adapted = attach_ssm_adapter(tiny_base(kind), adapter_config())
    randomise(adapted)
    x = ids(steps=13)
    full = adapted(x, use_cache=False).logits
    torch.testing.assert_close(cached_decode_logits(adapted, x), full, atol=1e-5, rtol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("kind", KINDS)
def test_generate_cached_equals_uncached_and_state_is_fresh_per_call(kind):
    """generate() with the cache matches generate() without it (greedy and beam search), and a second call
    starts from a fresh adapter state (the same prompt gives the same continuation)."""
    adapted = attach_ssm_adapter(tiny_base(kind), adapter_config())
    randomise(adapted, scale=1.0)
    prompt = ids(steps=5)
    greedy = dict(max_new_tokens=10, do_sample=False)
    cached = adapted.generate(prompt, use_cache=True, **greedy)
    assert torch.equal(cached, adapted.generate(prompt, use_cache=False, **greedy))
    assert torch.equal(cached, adapted.generate(prompt, use_cache=True, **greedy))
    # Beam search reorders the cache rows every step; the adapter state must follow them.
    for seed in range(4):
        prompt = ids(steps=4, seed=seed)
        beams = dict(max_new_tokens=8, do_sample=False, num_beams=3)
        assert torch.equal(
            adapted.generate(prompt, use_cache=True, **beams), adapted.generate(prompt, use_cache=False, **beams)
        )
    # Without an adapter the continuation differs: the checks above do see the adapter.
    assert not torch.equal(cached, adapted.unload().generate(ids(steps=5), use_cache=True, **greedy))


@torch.no_grad()
def test_left_padding_leaves_adapter_state_unchanged():
    """A left-padded row produces the same logits and generation as the unpadded prompt alone.

    The pad id is an ordinary token with a non-zero embedding (as Qwen-2.5's pad, "<|endoftext|>"), so the
    padding's hidden states are not zero and would move the adapter state if the mask were ignored.
    """
    adapted = attach_ssm_adapter(tiny_base(), adapter_config())
    randomise(adapted, scale=1.0)
    short, long = ids(1, 4, seed=3), ids(1, 9, seed=4)
    batch = torch.cat([torch.cat([torch.full((1, 5), 7), short], 1), long])
    mask = (torch.arange(9) >= 5).long().unsqueeze(0).repeat(2, 1)
    mask[1] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp_min(0)
    padded = adapted(batch, attention_mask=mask, position_ids=position_ids).logits
    torch.testing.assert_close(padded[0, 5:], adapted(short).logits[0], atol=1e-5, rtol=1e-5)
    generated = adapted.generate(batch, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert torch.equal(generated[0, 9:], adapted.generate(short, max_new_tokens=6, do_sample=False)[0, 4:])
    assert torch.equal(generated[1, 9:], adapted.generate(long, max_new_tokens=6, do_sample=False)[0, 9:])


@torch.no_grad()
def test_continuing_a_cache_the_adapter_did_not_fill_raises():
    """A cache whose length does not match the adapter's stored state (filled without it) raises, never mixes."""
    base = tiny_base()
    cache = base(ids(), use_cache=True).cache  # filled by the bare base
    adapted = attach_ssm_adapter(base, adapter_config())
    with pytest.raises(ValueError, match="no recurrent state for this cache"):
        adapted(ids(steps=1), cache=cache, use_cache=True)


def test_classifier_readout_keeps_base_logits_and_returns_adapter_logits():
    """readout='classifier' never touches the base's hidden states and returns (B, T, num_labels) logits."""
    base = tiny_base()
    x = ids()
    reference = base(x).logits
    adapted = attach_ssm_adapter(base, adapter_config(readout="classifier", num_labels=3))
    out = adapted(x)
    assert torch.equal(out.logits, reference)
    assert out.adapter_logits.shape == (2, x.shape[1], 3)


def test_any_registered_mixer_can_be_the_adapter():
    """The adapter builds its mixer through SSM_MIXER_CLASSES, so another registered mixer works as well."""
    other = next((m for m in ("diag_lru", "bd_lru", "h_lru") if m in SSM_MIXER_CLASSES), None)
    if other is None:
        pytest.skip("no second SSM mixer registered")
    base = tiny_base()
    x = ids()
    reference = base(x).logits
    adapted = attach_ssm_adapter(base, SSMAdapterConfig(mixer=other, mixer_settings={"lru_total_state_size": 8}))
    assert torch.equal(adapted(x).logits, reference)
    randomise(adapted)
    full = adapted(x, use_cache=False).logits
    out = adapted(x[:, :6], use_cache=True)
    step = adapted(x[:, 6:], cache=out.cache, use_cache=True).logits
    torch.testing.assert_close(torch.cat([out.logits, step], 1), full, atol=1e-5, rtol=1e-5)


def test_lora_trains_alongside_the_adapter():
    """PEFT LoRA injected into the adapted base trains together with the adapter; other base weights stay frozen."""
    adapted = attach_ssm_adapter(tiny_base(), adapter_config())
    budget = sum(p.numel() for p in adapted.ssm_adapter.parameters())
    add_lora(adapted.base_model, lora_rank_for_budget(adapted.base_model, budget))
    randomise(adapted)
    trainable = {n for n, p in adapted.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trainable) and any(n.startswith("ssm_adapter.") for n in trainable)
    assert all("lora_" in n or n.startswith("ssm_adapter.") for n in trainable)
    adapted(ids(), labels=ids()).loss.backward()
    lora_b = [p for n, p in adapted.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora_b)
    assert adapted.ssm_adapter.out_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(mixer="mamba"), "`mixer`"),
        (dict(readout="head"), "`readout`"),
        (dict(readout="classifier"), "`num_labels`"),
        (dict(mixer_settings={"hidden_size": 8}), "`mixer_settings`"),
        (dict(mixer_settings={"pd_ssm_sate_size": 8}), "unknown HybridSSMConfig fields"),
    ],
)
def test_bad_adapter_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SSMAdapterConfig(**kwargs)


def test_layer_index_out_of_range_and_double_attach_raise():
    base = tiny_base()
    with pytest.raises(ValueError, match="`layer_index` = 2 is out of range"):
        attach_ssm_adapter(base, adapter_config(layer_index=2))
    adapted = attach_ssm_adapter(base, adapter_config(layer_index=-2))
    assert adapted.adapter_layer_index == 0
    with pytest.raises(ValueError, match="already has an SSM adapter"):
        attach_ssm_adapter(base, adapter_config())


def test_decoder_layers_found_without_model_specific_code():
    """Qwen2 and Llama layer lists are found by shape (one ModuleList of num_hidden_layers blocks)."""
    for kind in KINDS:
        owner, layers, name = find_decoder_layers(tiny_base(kind))
        assert name == "model.layers" and layers is owner.layers and len(layers) == 2


def test_lora_on_chosen_layers_only_and_bad_layers_refused():
    """add_lora(layers=...) puts LoRA into those decoder layers only, its parameter count matches
    lora_parameters_per_rank, and an out-of-range layer index is refused with the valid range."""
    from hf_ssm.adapters.lora import ATTENTION_TARGETS, lora_parameters_per_rank

    base = tiny_base(layers=3)
    per_rank = lora_parameters_per_rank(base, ATTENTION_TARGETS, layers=[0, 1])
    assert per_rank == 2 * lora_parameters_per_rank(base, ATTENTION_TARGETS, layers=[2])
    model = add_lora(base, 3, ATTENTION_TARGETS, layers=[0, 1])
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert all(".layers.0." in n or ".layers.1." in n for n in trainable) and trainable
    assert sum(p.numel() for p in trainable.values()) == 3 * per_rank
    with pytest.raises(ValueError, match=r"`layers` must be decoder layer indices in \[0, 2\]"):
        add_lora(tiny_base(layers=3), 2, layers=[3])


def test_prefix_lora_classifier_starts_at_the_base_and_trains_only_lora_and_its_head():
    """The LoRA baseline with a classifier after layer k: at init (LoRA B = 0) its logits are the head applied to
    the base's own normalised layer-k hidden state; the layers above k never run; only LoRA (in layers <= k)
    and the head receive gradients."""
    from hf_ssm.training.adapter.methods import PrefixLoRAClassifier

    base = tiny_base(layers=3)
    reference = copy.deepcopy(base)
    model = PrefixLoRAClassifier(base, layer_index=1, num_classes=3, rank=2)
    calls = []
    top = model.layers[2].register_forward_hook(lambda *args: calls.append(1))
    x = ids()
    mask, positions = torch.ones_like(x), torch.arange(x.shape[1]).expand_as(x)
    keep = torch.tensor([2, x.shape[1] - 1])
    logits = model(x, mask, positions, keep)
    assert logits.shape == (x.shape[0], 2, 3) and not calls
    hidden = reference(x, attention_mask=mask, output_hidden_states=True).hidden_states[2]  # after layer 1
    torch.testing.assert_close(logits, model.head(model.norm(hidden[:, keep])))
    with pytest.raises(ValueError, match=r"`layer_index` must be in \[-3, 2\]"):
        PrefixLoRAClassifier(tiny_base(layers=3), layer_index=3, num_classes=3, rank=2)
    model(x, mask, positions, keep).sum().backward()
    top.remove()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert {"head.weight", "head.bias"} <= with_grad
    assert all(n.startswith("head.") or ("lora_" in n and (".layers.0." in n or ".layers.1." in n)) for n in with_grad)
    assert any("lora_B" in n and ".layers.1." in n for n in with_grad)


@pytest.mark.parametrize("method", ["ssm", "lora", "ssm_lora"])
def test_answer_word_logits_equal_the_full_lm_head_at_those_words(method):
    """The LM-head methods' answer scores come from the answer words' rows of the head only, and the vocabulary
    loss's logits from the whole head at the last position only; they equal the full vocabulary logits there (with
    the adapter's hook and LoRA in the decoder), values and gradients."""
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
    from hf_ssm.training.adapter.methods import build_method
    from hf_ssm.training.adapter.scoring import _answer_logits, _full_logits, _head_is_linear

    settings = AdapterExperimentSettings(extra_config=TINY_MIXER, layer_index=0)
    model, params, _ = build_method(method, settings, tiny_base(kind="llama"), num_classes=3)
    with torch.no_grad():
        for p in params:
            p.normal_(0.0, 0.2)  # LoRA B and the adapter's out_proj start at zero
    x = ids()
    inputs = {"input_ids": x, "attention_mask": torch.ones_like(x), "position_ids": torch.arange(11).expand_as(x)}
    keep, answer_ids = torch.tensor([3, 10]), torch.tensor([5, 17, 40])
    assert _head_is_linear(model)
    full, full_vocab = _full_logits(model, inputs, keep, answer_ids, vocab_at_last=True)
    part, part_vocab = _answer_logits(model, inputs, keep, answer_ids, vocab_at_last=True)
    assert full_vocab.shape == (2, VOCAB) and _answer_logits(model, inputs, keep, answer_ids)[1] is None
    for ours, theirs in ((part, full), (part_vocab, full_vocab)):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        grads = [torch.autograd.grad(out.square().sum(), params, retain_graph=True) for out in (ours, theirs)]
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_train_adapter_script_smoke_run(tmp_path):
    """scripts/train_adapter.py runs offline on the built-in tiny Qwen2 and writes results, plot, the adapter
    (only adapter files plus its model card); it leaves the repository's model_cards/ alone unless
    --model_card_dir asks for a published copy; bad arguments exit clearly."""
    tiny = [*TINY_QUICK_RUN, "--tiny_layers", "1", "--test_buckets", "1-3,8-9"]
    cards = tmp_path / "cards"
    args = ["train_adapter", "--output_dir", str(tmp_path / "run")]
    published = {p.name: p.read_bytes() for p in (ROOT / "model_cards").iterdir()}
    run_args = [
        *args, "--methods", "fewshot,probe,lora,ssm,ssm_classifier,lora_classifier", *tiny, "--train_examples", "6",
        "--feature_cache", "disk", "--summary", str(tmp_path / "summary.json"),
    ]  # fmt: skip
    result = run_script(*run_args, timeout=300)  # from the repository root, no --model_card_dir
    assert result.returncode == 0, result.stderr[-3000:]
    assert "parity/fewshot test 1-3" in result.stderr and "parity/ssm_classifier test 8-9" in result.stderr  # progress
    assert {p.name: p.read_bytes() for p in (ROOT / "model_cards").iterdir()} == published
    assert not cards.exists()
    # publishing is explicit: the resumed run reuses every finished method and writes the cards into --model_card_dir
    result = run_script(*run_args, "--resume", "--model_card_dir", str(cards), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    summary = json.loads((run / "results.json").read_text())
    methods = ["fewshot", "probe", "lora", "ssm", "ssm_classifier", "lora_classifier"]
    assert [r["method"] for r in summary["results"]] == methods
    readouts = ["lm_head", "probe", "lm_head", "lm_head", "classifier", "classifier"]
    assert [r["readout"] for r in summary["results"]] == readouts
    # the LoRA baseline's rank is chosen for the classifier adapter's trainable (not frozen) parameter count
    ssm_cls, lora_cls = summary["results"][4], summary["results"][5]
    head = lora_cls["trainable_parameters"] - lora_cls["lora_rank"] * lora_cls["lora_parameters_per_rank"]
    gap = abs(lora_cls["trainable_parameters"] - head - ssm_cls["trainable_parameters"])
    assert gap <= lora_cls["lora_parameters_per_rank"] / 2 + head
    assert (run / "lora_classifier" / "adapter" / "adapter_config.json").is_file()
    assert (run / "lora_classifier" / "classifier.safetensors").is_file()
    assert summary["results"][0]["trainable_parameters"] == 0 and summary["results"][0]["fewshot_prefix_tokens"] > 0
    summary["results"] = summary["results"][1:]
    records = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["method"], r["readout"]) for r in records][1:] == [
        ("probe", "probe"), ("lora", "lm_head"), ("ssm", "lm_head"), ("ssm_classifier", "classifier"),
        ("lora_classifier", "classifier"),
    ]  # fmt: skip
    assert all(r["command"].startswith("python scripts/train_adapter.py --output_dir ") for r in records)
    assert records[-1]["command"].endswith("--resume --model_card_dir " + str(cards))  # the run that wrote it
    records = records[1:]
    assert set(records[2]["accuracy_by_transitions"]) == {"1-3", "8-9"} and summary["results"][2]["cpu_seconds"] > 0
    # 3 steps x batch 4 over a pool of 6 stories: each stored once, in a memory-mapped file removed afterwards
    assert summary["results"][2]["feature_cache"]["examples"] == 6 and not (run / "ssm" / "feature_cache.bin").exists()
    assert [b["min_transitions"] for b in summary["results"][2]["test"]["buckets"]] == [1, 8]
    assert (run / "accuracy_vs_transitions.png").is_file()
    assert sorted(p.name for p in (run / "ssm" / "adapter").iterdir()) == [
        "README.md",
        ADAPTER_CONFIG_NAME,
        ADAPTER_WEIGHTS_NAME,
    ]
    from huggingface_hub import ModelCard

    tiny_card = ModelCard((cards / "ssm-adapter-tiny-qwen2-parity.md").read_text())
    assert tiny_card.data.library_name == "hf_ssm" and "ssm-adapter" in tiny_card.data.tags
    assert "## Limitations" in tiny_card.text
    card = (cards / "ssm-adapter-tiny-qwen2-parity-classifier.md").read_text()
    assert '["adapter_logits"]' in card and "--train_examples 6" in card and "--methods fewshot,probe" in card
    assert "| ssm |" in result.stdout and "| chance |" in result.stdout
    bad = run_script(*args, "--task", "dyck")
    assert bad.returncode == 2 and "`task` must be one of" in bad.stderr
    bad = run_script(*args, "--extra_config", "pd_ssm_initial_state=e1")
    assert bad.returncode == 2 and "`pd_ssm_initial_state` must be one of" in bad.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["--base", "smollm2-135m"], "--base was renamed: use --base_model"),
        (["--summary_json", "s.json"], "--summary_json was renamed: use --summary"),
        (
            ["--transition", "bank"],
            "HybridSSMConfig field pd_ssm_transition; pass --extra_config pd_ssm_transition=bank",
        ),
        (["--num_heads", "16"], "pass --extra_config pd_ssm_num_heads=16"),
        (["--dictionary_diagonal_init", "0"], "pass --extra_config pd_ssm_dictionary_diagonal_init=0"),
        (["--no_standardize_input"], "use --standardize_input false"),
        (["--base-model", "tiny"], "use --base_model"),
    ],
)
def test_train_adapter_refuses_the_old_spellings_naming_the_new_ones(old, new, capsys):
    """The script's options come from AdapterExperimentSettings through HfArgumentParser, one spelling each: the old
    ones (--base, --summary_json, the PD-SSM fields now --extra_config keys, dashed twins, --no_<bool>) exit 2
    naming the spelling to use."""
    with pytest.raises(SystemExit) as exit_info:
        load_script("train_adapter").build_parser().parse_args(old)
    assert exit_info.value.code == 2 and new in capsys.readouterr().err


def test_train_adapter_flags_set_their_fields():
    """--base_model, --summary and --extra_config set their fields; a bad value is refused naming the field."""
    script = load_script("train_adapter")
    parser = script.build_parser()
    args = parser.parse_args(
        ["--base_model", "smollm2-135m", "--summary", "s.json", "--extra_config", "pd_ssm_dict_size=8"]
    )
    assert (args.base_model, args.summary, args.extra_config) == ("smollm2-135m", "s.json", {"pd_ssm_dict_size": 8})
    assert parser.parse_args([]).summary == ""
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--max_steps", "0"])
    assert exit_info.value.code == 2


def _merge_adapter_records(path: str, run_dir: str, count: int) -> None:
    from hf_ssm.training.adapter.records import update_summary_json

    for seed in range(count):
        update_summary_json(path, [{"run_dir": run_dir, "method": "ssm", "seed": seed}])


def test_adapter_summary_merges_under_the_lock_and_keeps_every_runs_records(tmp_path):
    """results/adapter/summary.json is written through reports.merge_summary: a record of the same run, method and
    seed is replaced, every other kept, under <path>.lock, so processes merging at once lose no record."""
    import multiprocessing

    from hf_ssm.training.adapter.records import update_summary_json

    path = tmp_path / "summary.json"
    update_summary_json(path, [{"run_dir": "a", "method": "ssm", "seed": 0, "acc": 0.5}])
    update_summary_json(path, [{"run_dir": "b", "method": "ssm", "seed": 0, "acc": 0.6}])
    update_summary_json(path, [{"run_dir": "a", "method": "ssm", "seed": 0, "acc": 0.7}])
    records = json.loads(path.read_text())
    assert [(r["run_dir"], r["acc"]) for r in records] == [("b", 0.6), ("a", 0.7)]
    assert (tmp_path / "summary.json.lock").is_file()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_merge_adapter_records, args=(str(path), f"run{i}", 15)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    keys = {(r["run_dir"], r["seed"]) for r in json.loads(path.read_text())}
    assert keys >= {(f"run{i}", s) for i in range(4) for s in range(15)} and len(keys) == 62


def test_experiment_input_map_none_builds_an_adapter_without_b_and_needs_a_start_state():
    """--extra_config pd_ssm_input=none reaches the adapter's PD-SSM (no input map B); from x_0 = 0 it is refused,
    naming both fields."""
    from hf_ssm.adapters.layer import SSMAdapter
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings

    settings = AdapterExperimentSettings(extra_config={"pd_ssm_input": "none", "pd_ssm_initial_state": "one_hot"})
    settings.validate()
    adapter = SSMAdapter(settings.adapter_config(), hidden_size=16)
    assert adapter.mixer.input_kind == "none" and not hasattr(adapter.mixer, "in_proj")
    with pytest.raises(ValueError, match="pd_ssm_input='none'.*pd_ssm_initial_state"):
        AdapterExperimentSettings(extra_config={"pd_ssm_input": "none"}).validate()
    with pytest.raises(ValueError, match="pd_ssm_input"):
        AdapterExperimentSettings(extra_config={"pd_ssm_input": "zero", "pd_ssm_initial_state": "one_hot"}).validate()


def test_adapter_mixer_settings_override_the_near_identity_start():
    """near_identity_init supplies D's start and the identity diagonal, but explicit mixer_settings win."""
    from hf_ssm.adapters.layer import SSMAdapter

    config = adapter_config(mixer_settings={"pd_ssm_head_state_size": 4, "pd_ssm_magnitude_bias_init": 2.0})
    mixer = SSMAdapter(config, 32).mixer
    assert torch.all(mixer.magnitude.down_bias == 2.0) and torch.all(mixer.phase.down_bias == -10.0)
    assert mixer.transition.dictionary_diagonal_init == 1.0


@torch.no_grad()
def test_pd_adapter_starts_at_the_identity_transition():
    """near_identity_init: a fresh PD-SSM adapter has P = I and |D| ~ 1, arg D ~ 0 on any input, so its state
    survives long texts from the start; without it (docs/design.md §4 init) P is not the identity."""
    from hf_ssm.adapters.layer import SSMAdapter

    u = torch.randn(2, 7, 32)
    eye = torch.arange(5)
    idx, dv = SSMAdapter(adapter_config(), 32).mixer.transitions(u)
    assert (idx == eye).all() and (dv.abs() > 1 - 1e-4).all() and (dv.angle().abs() < 1e-3).all()
    idx, dv = SSMAdapter(adapter_config(near_identity_init=False), 32).mixer.transitions(u)
    assert not (idx == eye).all() and (dv.abs() < 0.9).all()


@torch.no_grad()
@pytest.mark.parametrize("kind", ["mistral", "qwen3"])
def test_other_decoders_need_no_model_specific_code(kind):
    """Mistral and Qwen3 take the adapter as they are: logits unchanged at attach, cached decode == full forward."""
    base = tiny_base(kind)
    x = ids(steps=9)
    reference = base(x).logits
    adapted = attach_ssm_adapter(base, adapter_config())
    assert torch.equal(adapted(x).logits, reference)
    randomise(adapted)
    full = adapted(x, use_cache=False).logits
    out = adapted(x[:, :4], use_cache=True)
    rest = [adapted(x[:, t : t + 1], cache=out.cache, use_cache=True).logits for t in range(4, 9)]
    torch.testing.assert_close(torch.cat([out.logits, *rest], 1), full, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(full, reference)


def test_frozen_mixer_parameters_stay_frozen_through_save_and_load(tmp_path):
    """frozen_mixer_parameters keeps e.g. the PD-SSM's D (magnitude / phase MLPs) at its start, also after a
    trainable reload; a name that matches no mixer parameter is a clear error."""
    config = adapter_config(frozen_mixer_parameters=["magnitude", "phase"])
    adapted = attach_ssm_adapter(tiny_base(), config)
    frozen = {n for n, p in adapted.ssm_adapter.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith(("mixer.magnitude.", "mixer.phase.")) for n in frozen)
    assert {id(p) for p in adapted.adapter_parameters()} == {
        id(p) for n, p in adapted.ssm_adapter.named_parameters() if n not in frozen
    }
    adapted.save_pretrained(tmp_path)
    reloaded = load_ssm_adapter(tiny_base(), tmp_path, is_trainable=True)
    assert {n for n, p in reloaded.ssm_adapter.named_parameters() if not p.requires_grad} == frozen
    with pytest.raises(ValueError, match="`frozen_mixer_parameters` entry 'gamma' matches no parameter"):
        attach_ssm_adapter(tiny_base(), adapter_config(frozen_mixer_parameters=["gamma"]))


def test_a_mixer_setting_that_fixes_c_holds_in_the_adapter(tmp_path):
    """pd_ssm_output_trainable=False keeps the PD-SSM's C out of the adapter's trainable parameters, after attaching
    and after a trainable reload (the adapter used to switch every mixer parameter back on)."""
    config = adapter_config(mixer_settings={**PD_SETTINGS, "pd_ssm_output_trainable": False})
    adapted = attach_ssm_adapter(tiny_base(), config)
    fixed = {n for n, p in adapted.ssm_adapter.named_parameters() if not p.requires_grad}
    assert fixed == {"mixer.out_proj.weight"}
    assert all(p.requires_grad for p in adapted.adapter_parameters())
    adapted.save_pretrained(tmp_path)
    reloaded = load_ssm_adapter(tiny_base(), tmp_path, is_trainable=True)
    assert {n for n, p in reloaded.ssm_adapter.named_parameters() if not p.requires_grad} == fixed


def _padded_batch(seed: int = 5):
    """Three left-padded rows of lengths 9, 6, 4 with collate_nl_state_tracking's mask and position ids."""
    from hf_ssm.data.nl_state_tracking import collate_nl_state_tracking

    g = torch.Generator().manual_seed(seed)
    items = [
        {"input_ids": torch.randint(1, VOCAB, (n,), generator=g), "label": 0, "answer_token": 0, "num_transitions": 1}
        for n in (9, 6, 4)
    ]
    return collate_nl_state_tracking(items, pad_id=0)


def _loss_and_grads(adapted, batch, use_cache_of=None):
    from hf_ssm.adapters.feature_cache import batch_features

    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    adapted.zero_grad()
    if use_cache_of is None:
        logits = adapted(**inputs, use_cache=False).logits
    else:
        prefix, store = use_cache_of
        features = batch_features(prefix, store, [10, 11, 12], batch, "cpu")
        with prefix.replaced_by(features):
            logits = adapted(**inputs, use_cache=False).logits
    loss = torch.nn.functional.cross_entropy(logits[:, -3:].flatten(0, 1), batch["input_ids"][:, -3:].flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in adapted.ssm_adapter.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("layer_index", [0, 1])
def test_frozen_prefix_cache_gives_the_full_models_loss_and_gradients(layer_index, tmp_path):
    """Training on cached prefix features (layers 0..k skipped, layer k returning h_k from the store) gives the
    loss and adapter gradients of the full model: to float rounding with a float32 store (in memory and
    memory-mapped; second use = a cache hit), within bfloat16 rounding with a bfloat16 store."""
    from hf_ssm.adapters.feature_cache import FeatureStore, FrozenPrefix

    adapted = attach_ssm_adapter(tiny_base("llama", layers=3), adapter_config(layer_index=layer_index))
    randomise(adapted, 0.1)
    batch = _padded_batch()
    loss, grads = _loss_and_grads(adapted, batch)
    prefix = FrozenPrefix(adapted)
    for store in (FeatureStore(2**20, "float32"), FeatureStore(2**20, "float32", path=tmp_path / "f.bin")):
        for _ in range(2):  # first call computes and stores, second reads the store
            cached_loss, cached_grads = _loss_and_grads(adapted, batch, (prefix, store))
            torch.testing.assert_close(cached_loss, loss, rtol=1e-5, atol=1e-6)
            for name, grad in grads.items():
                torch.testing.assert_close(cached_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
        assert len(store) == 3 and store.nbytes == (9 + 6 + 4) * 32 * 4
    bf16_loss, _ = _loss_and_grads(adapted, batch, (prefix, FeatureStore(2**20, "bfloat16")))
    assert bf16_loss != loss and abs(bf16_loss - loss) < 1e-2 * loss
    # Afterwards the layers are the model's own again: the full forward is unchanged.
    torch.testing.assert_close(_loss_and_grads(adapted, batch)[0], loss, rtol=0, atol=0)


def test_feature_store_limit_and_bad_arguments():
    """Over max_bytes an example is not stored (put -> False, one warning, counted); a prefix with trainable
    parameters (LoRA inside it) and a bad store dtype are refused with clear errors."""
    from hf_ssm.adapters.feature_cache import FeatureStore, FrozenPrefix

    store = FeatureStore(100, "float32")
    assert store.put(0, torch.ones(5, 5))  # 100 bytes
    with pytest.warns(UserWarning, match="feature cache full"):
        assert not store.put(1, torch.ones(1, 1))
    assert store.skipped == 1 and 1 not in store and torch.equal(store.get(0), torch.ones(5, 5))
    with pytest.raises(ValueError, match="`dtype` must be one of"):
        FeatureStore(10, "int8")
    adapted = attach_ssm_adapter(tiny_base(), adapter_config(layer_index=0))
    adapted.base_model.model.layers[0].mlp.up_proj.weight.requires_grad_(True)
    with pytest.raises(ValueError, match="frozen-prefix cache needs .* layers 0..0 frozen"):
        FrozenPrefix(adapted)


def test_readout_learning_rate_puts_only_the_readout_in_its_own_adam_group():
    """--readout_learning_rate gives the SSM adapter's readout (classifier weight and bias, or out_proj) its own
    learning rate and leaves every other trainable parameter at learning_rate; 0 keeps one group; < 0 raises."""
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
    from hf_ssm.training.adapter.methods import parameter_groups

    for readout, names in (("classifier", {"classifier.weight", "classifier.bias"}), ("lm_head", {"out_proj.weight"})):
        extra = {"num_labels": 2} if readout == "classifier" else {}
        model = attach_ssm_adapter(tiny_base(), adapter_config(readout=readout, **extra))
        method = "ssm_classifier" if readout == "classifier" else "ssm"
        settings = AdapterExperimentSettings(learning_rate=3e-3, readout_learning_rate=3e-4)
        groups = parameter_groups(method, model, settings)
        by_id = {id(p): n.removeprefix("ssm_adapter.") for n, p in model.named_parameters() if p.requires_grad}
        assert [g["lr"] for g in groups] == [3e-3, 3e-4]
        assert {by_id[id(p)] for p in groups[1]["params"]} == names
        assert sum(len(g["params"]) for g in groups) == len(by_id)
        assert not names & {by_id[id(p)] for p in groups[0]["params"]}
        single = parameter_groups(method, model, AdapterExperimentSettings(learning_rate=3e-3))
        assert len(single) == 1 and single[0]["lr"] == 3e-3 and len(single[0]["params"]) == len(by_id)
    with pytest.raises(ValueError, match="readout_learning_rate"):
        AdapterExperimentSettings(readout_learning_rate=-1.0).validate()


def test_write_learning_rate_puts_the_lm_head_adapters_write_map_in_its_own_adam_group():
    """--write_learning_rate gives out_proj (W_out) of an LM-head adapter its own learning rate, before the readout
    group claims it; a per-head vote's readouts stay with readout_learning_rate. < 0, or a method without an
    LM-head SSM adapter, raises naming the field."""
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
    from hf_ssm.training.adapter.methods import parameter_groups

    config = adapter_config(readout="lm_head", num_labels=2, classifier_per_head=True)
    model = attach_ssm_adapter(tiny_base(), config)
    settings = AdapterExperimentSettings(learning_rate=3e-3, readout_learning_rate=3e-4, write_learning_rate=0.1)
    groups = parameter_groups("ssm", model, settings)
    by_id = {id(p): n.removeprefix("ssm_adapter.") for n, p in model.named_parameters() if p.requires_grad}
    assert [g["lr"] for g in groups] == [3e-3, 0.1, 3e-4]
    assert [{by_id[id(p)] for p in g["params"]} for g in groups[1:]] == [
        {"out_proj.weight"},
        {"classifier.weight", "classifier.bias"},
    ]
    assert sum(len(g["params"]) for g in groups) == len(by_id)
    for bad, message in (
        (dict(write_learning_rate=-1.0), "write_learning_rate` must be a finite number >= 0"),
        (dict(write_learning_rate=0.1, methods="ssm_classifier"), "write_learning_rate` is for"),
    ):
        with pytest.raises(ValueError, match=message):
            AdapterExperimentSettings(**bad).validate()


def test_training_preamble_is_validated_and_named_in_the_record_and_the_card():
    """train_max_preamble_sentences (training stories opened by up to N sentences that change nothing): a negative
    count raises naming the field, and a record and a model card trained with it say so."""
    from dataclasses import asdict

    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
    from hf_ssm.training.adapter.records import model_card, model_name

    ssm = {"method": "ssm_classifier", "trainable_parameters": 10, "steps": 1, "train_seconds": 1.0}
    plain_card = model_card(AdapterExperimentSettings(), {}, ssm, "")
    assert "Trained on 1-10 transitions, tested on longer" in plain_card and "change nothing" not in plain_card
    card = model_card(AdapterExperimentSettings(train_max_preamble_sentences=30, distractor_prob=0.25), {}, ssm, "")
    assert "each story opened by 0-30 sentences that change nothing (the test stories have none)" in card
    assert "distractor sentence before each transition with probability 0.25" in card

    with pytest.raises(ValueError, match="train_max_preamble_sentences"):
        AdapterExperimentSettings(train_max_preamble_sentences=-1).validate()
    settings = asdict(AdapterExperimentSettings(train_max_preamble_sentences=30))
    assert model_name({"method": "ssm_classifier", "settings": settings}).endswith("after up to 30 preamble sentences")
    plain = asdict(AdapterExperimentSettings())
    assert "preamble" not in model_name({"method": "ssm_classifier", "settings": plain})


def test_a_resumed_adapter_method_ends_as_the_uninterrupted_run(tmp_path, monkeypatch):
    """The adapter experiment's resume: a method interrupted after its step-2 checkpoint and run again with
    resume=True continues from that checkpoint (trainable weights, optimizer and schedule) and ends with the
    weights, validation history and test accuracies of the run that was never interrupted."""
    import shutil

    from hf_ssm.training import loop
    from hf_ssm.training.adapter.experiment import run_experiment
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings

    settings = AdapterExperimentSettings(
        methods="ssm", tiny_hidden_size=16, tiny_layers=1, tiny_heads=2, pretrain_steps=2, pretrain_batch_size=2,
        max_steps=4, eval_every=1, save_every=2, warmup_steps=2, batch_size=4, eval_batch_size=8,
        eval_samples_per_bucket=4, train_max_transitions=3, test_buckets="1-3,8-9", extra_config=TINY_MIXER,
    )  # fmt: skip
    method = tmp_path / "ssm"
    whole = run_experiment(settings, tmp_path)["results"][0]
    weights = load_file(str(method / "adapter" / ADAPTER_WEIGHTS_NAME))
    assert sorted(p.name for p in (method / "checkpoints").iterdir()) == ["step_2"]  # none after the last step
    (method / "results.json").unlink()  # the interruption: the method never finished
    shutil.rmtree(method / "adapter")
    starts, run_training = [], loop.run_training
    monkeypatch.setattr(loop, "run_training", lambda *a, **kw: starts.append(kw["start"]) or run_training(*a, **kw))
    resumed = run_experiment(settings, tmp_path, resume=True)["results"][0]
    assert starts == [2]  # only steps 3 and 4 were trained again
    assert resumed["history"] == whole["history"] and [h["step"] for h in whole["history"]] == [1, 2, 3, 4]
    assert resumed["test"] == whole["test"] and resumed["steps"] == 4
    again = load_file(str(method / "adapter" / ADAPTER_WEIGHTS_NAME))
    assert weights.keys() == again.keys() and all(torch.equal(weights[k], again[k]) for k in weights)


def test_plot_adapter_draws_the_matching_records_and_refuses_an_empty_selection(tmp_path):
    """scripts/plot_adapter.py draws a PNG from summary records whose run folder matches a --series, and exits 1
    with a message when no record matches (rather than writing an empty figure)."""
    record = {"base": "smollm2-135m", "task": "parity", "run_dir": "runs/x/par_s0", "seed": 0, "method": "probe"}
    records = [
        {**record, "accuracy_by_transitions": {"1-10": 1.0, "40-40": 0.9}},
        {**record, "seed": 1, "run_dir": "runs/x/par_s1", "accuracy_by_transitions": {"1-10": 0.8, "40-40": 0.5}},
    ]
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(records))
    out = tmp_path / "plot.png"
    args = ["plot_adapter", "--summary", str(summary), "--tasks", "parity", "--out", str(out)]
    done = run_script(*args, "--series", "PD=runs/x/par_")
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "2 records" in done.stdout
    by_method = run_script(*args, "--series", "probe=par_s0:probe")  # "<run_dir>:<method>" selects one
    assert by_method.returncode == 0 and "1 records" in by_method.stdout
    empty = run_script(*args, "--series", "PD=nothing")
    assert empty.returncode == 1 and "matches any --series" in empty.stderr


def test_plot_adapter_legend_counts_seeds_not_records():
    """A seed measured in two runs (e.g. its long bucket in a run of its own) counts once in the legend, with the
    number of runs beside it; distinct seeds are counted as seeds."""
    seed_count = load_script("plot_adapter").seed_count
    assert seed_count([{"seed": 0}, {"seed": 1}]) == "2 seeds"
    assert seed_count([{"seed": 3}]) == "1 seed"
    assert seed_count([{"seed": 0}, {"seed": 0}]) == "1 seed, 2 runs"


def test_experiment_dictionary_diagonal_init_overrides_the_near_identity_start():
    """--extra_config pd_ssm_dictionary_diagonal_init replaces the adapter's near-identity diagonal (+1 on every
    score matrix) and pd_ssm_transition reaches the mixer; by default the near-identity start stays."""
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings

    def diagonal_mean(**fields):
        settings = AdapterExperimentSettings(extra_config={"pd_ssm_dict_size": 4, **fields})
        torch.manual_seed(0)
        from hf_ssm.adapters.layer import SSMAdapter

        adapter = SSMAdapter(settings.adapter_config(), 32)
        assert adapter.mixer.transition.name == settings.mixer_settings()["pd_ssm_transition"]
        return adapter.mixer.dictionary.diagonal(dim1=-2, dim2=-1).mean().item()

    assert abs(diagonal_mean() - 1.0) < 0.2
    assert abs(diagonal_mean(pd_ssm_transition="bank", pd_ssm_dictionary_diagonal_init=0.0)) < 0.2


def test_experiment_identity_entry_logit_reaches_the_mixer_and_is_pd_ssm_only():
    """pd_ssm_identity_entry_logit starts entry 0 at the identity with the selection biased towards it (the rest of
    the dictionary as pd_ssm_dictionary_diagonal_init says); with another mixer a pd_ssm_* key is refused, not
    ignored."""
    from hf_ssm.adapters.layer import SSMAdapter
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings

    fields = {"pd_ssm_transition": "bank", "pd_ssm_dictionary_diagonal_init": 0.0, "pd_ssm_identity_entry_logit": 3.0}
    settings = AdapterExperimentSettings(extra_config={"pd_ssm_dict_size": 4, **fields})
    mixer = SSMAdapter(settings.adapter_config(), 32).mixer
    assert torch.equal(mixer.dictionary[:, 0], torch.eye(8).expand_as(mixer.dictionary[:, 0]))
    assert mixer.selection.bias.view(-1, 4)[:, 0].eq(3.0).all()
    for name in ("pd_ssm_identity_entry_logit", "pd_ssm_dictionary_diagonal_init"):
        with pytest.raises(ValueError, match=f"{name}.*pd_ssm mixer only"):
            AdapterExperimentSettings(mixer="diag_lru", extra_config={name: 1.0}).validate()


def test_experiment_output_skip_reaches_the_mixer_and_is_pd_ssm_only():
    """--extra_config pd_ssm_output_skip=false removes the mixer's D_skip u (with out_proj frozen the readout sees the
    states through a fixed map only); the default keeps the mixer's own default; with another mixer the key is
    refused."""
    from hf_ssm.adapters.layer import SSMAdapter
    from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings

    def adapter(config=(), **values):
        settings = AdapterExperimentSettings(extra_config={"pd_ssm_dict_size": 4, **dict(config)}, **values)
        settings.validate()
        return SSMAdapter(settings.adapter_config(), 32)

    assert adapter().mixer.skip is not None
    fixed = adapter({"pd_ssm_output_skip": False}, frozen_mixer_parameters="magnitude,phase,out_proj")
    assert fixed.mixer.skip is None and not fixed.mixer.out_proj.weight.requires_grad
    with pytest.raises(ValueError, match="pd_ssm_output_skip.*pd_ssm mixer only"):
        AdapterExperimentSettings(mixer="diag_lru", extra_config={"pd_ssm_output_skip": False}).validate()


# The tiny base at its smallest, one method, a few steps: a run of the driver in seconds.
_TINY_RUN = [
    "--methods", "ssm", "--tiny_hidden_size", "16", "--tiny_layers", "1", "--tiny_heads", "2", "--pretrain_steps", "2",
    "--pretrain_batch_size", "2", "--max_steps", "2", "--eval_every", "1", "--warmup_steps", "1", "--batch_size", "4",
    "--eval_batch_size", "8", "--eval_samples_per_bucket", "4", "--train_max_transitions", "3", "--test_buckets",
    "1-3", "--min_steps", "1", "--extra_config", "pd_ssm_head_state_size=4", "pd_ssm_dict_size=4",
]  # fmt: skip


def test_train_adapter_resume_refuses_changed_settings_before_touching_the_run_folder(tmp_path, capsys):
    """scripts/train_adapter.py --resume with settings the run was not trained with (learning rate 0.01 -> 0.5,
    2 -> 4 heads) exits 2 naming each changed setting, and leaves every file of the run folder as it was (settings.json
    is not rewritten, so no earlier result is reported under the new settings); a change of resume-safe settings
    only (the methods, how often it evaluates) passes the check."""
    from hf_ssm.training.adapter.experiment import check_resume_settings
    from hf_ssm.training.adapter.experiment_settings import RESUME_SAFE_SETTINGS, AdapterExperimentSettings

    script = load_script("train_adapter")
    out = tmp_path / "run"
    common = ["--output_dir", str(out), *_TINY_RUN]  # ends with --extra_config items
    assert script.main([*common, "pd_ssm_num_heads=2", "--learning_rate", "0.01"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    changed = ["pd_ssm_num_heads=4", "--learning_rate", "0.5", "--methods", "ssm_classifier"]
    with pytest.raises(SystemExit) as exit_info:
        script.main([*common, *changed, "--resume"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    listed = re.search(r"was trained with: (.*?)\. Resume with", err).group(1).split("; ")
    assert listed == ["learning_rate 0.01 -> 0.5", "extra_config.pd_ssm_num_heads 2 -> 4"], err  # methods is safe
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    recorded = AdapterExperimentSettings(**json.loads((out / "settings.json").read_text()))
    safe_change = {"methods": "ssm,ssm_classifier", "eval_every": 2, "eval_samples_per_bucket": 8}
    assert set(safe_change) <= RESUME_SAFE_SETTINGS
    check_resume_settings(dataclasses.replace(recorded, **safe_change), out)  # no error


def test_docs_name_exactly_the_resume_safe_adapter_settings():
    """docs/adapter.md lists the settings a resumed adapter run may change: RESUME_SAFE_SETTINGS."""
    from hf_ssm.training.adapter.experiment_settings import RESUME_SAFE_SETTINGS

    text = (ROOT / "docs" / "adapter.md").read_text(encoding="utf-8")
    found = re.search(r"A resumed run may change only(.*?)\(`RESUME_SAFE_SETTINGS`", text, re.DOTALL)
    assert found, "docs/adapter.md no longer lists the adapter's resume-safe settings"
    assert set(re.findall(r"`--(\w+)`", found.group(1))) == set(RESUME_SAFE_SETTINGS)


def test_one_readout_classifier_loss_is_the_documented_dense_loss():
    """score_batch("ssm_classifier", dense=True) with one readout of all heads is the documented loss: the summed
    cross-entropy over the answer classes at the end of every transition sentence, plus the final answer's at the
    last position only, over their count (before, the final label's cross-entropy was averaged over every kept
    position: other sentence ends and padding included). Checked by hand on 8 stories of the tiny base."""
    from hf_ssm.adapters.feature_cache import FrozenPrefix
    from hf_ssm.adapters.tiny_base import build_tiny_qwen2, build_word_tokenizer
    from hf_ssm.data.nl_state_tracking import (
        NL_TASK_NAMES,
        NLStateTrackingDataset,
        answer_token_ids,
        collate_nl_state_tracking,
        get_nl_task,
        task_vocabulary,
    )
    from hf_ssm.training.adapter.scoring import score_batch

    task = get_nl_task("parity")
    tokenizer = build_word_tokenizer(task_vocabulary([get_nl_task(n) for n in NL_TASK_NAMES]))
    base = build_tiny_qwen2(len(tokenizer), hidden_size=32, num_layers=2, num_heads=4, seed=0)
    config = adapter_config(readout="classifier", num_labels=task.num_classes, layer_index=0)
    adapted = attach_ssm_adapter(base, config)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in adapted.ssm_adapter.parameters():
            p.add_(0.3 * torch.randn_like(p))
    stories = NLStateTrackingDataset(task, tokenizer, 8, 1, 10, seed=0)
    batch = collate_nl_state_tracking([stories[i] for i in range(8)], tokenizer.pad_token_id)
    answer_ids = torch.tensor(answer_token_ids(task, tokenizer))
    loss, _ = score_batch("ssm_classifier", adapted, batch, answer_ids, "cpu", dense=True)

    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    mask = inputs["attention_mask"].bool()
    with torch.no_grad():
        features = FrozenPrefix(adapted).features(**inputs)
        logits = adapted.ssm_adapter(features, mask=mask, input_ids=inputs["input_ids"])[0].float()  # (B, L, C)
    last = logits.shape[1] - 1
    ce = torch.nn.functional.cross_entropy
    total, count = ce(logits[:, last], batch["label"], reduction="sum"), len(batch["label"])
    for row in range(len(batch["label"])):
        for position, label in zip(batch["supervised_positions"][row], batch["supervised_labels"][row]):
            if position >= 0 and position != last and label != -100:  # the sentence ends (the end counted above)
                total, count = total + ce(logits[row, position], label), count + 1
    assert count > 8  # dense supervision: sentence ends as well as the 8 final answers
    torch.testing.assert_close(loss.detach(), total / count)
