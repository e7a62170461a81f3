"""`SSMAdapterConfig.write_layer_index`: the adapter reads after one decoder layer and adds its update after a later
one (where the LM head reads), and everything the adapter promises still holds with it."""

from __future__ import annotations

import json

import pytest
import torch
from test_adapter import (
    TINY_QUICK_RUN,
    _loss_and_grads,
    _padded_batch,
    adapter_config,
    cached_decode_logits,
    ids,
    randomise,
    tiny_base,
)

from hf_ssm.adapters import ADAPTER_CONFIG_NAME, SSMAdapterConfig, attach_ssm_adapter, load_ssm_adapter
from hf_ssm.adapters.feature_cache import FeatureStore, FrozenPrefix
from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
from model_checks import run_script


def randomised(adapted, scale: float = 0.5):
    """`randomise` (test_adapter) that hands the adapted model back, for one-line set-ups."""
    randomise(adapted, scale)
    return adapted


@pytest.mark.parametrize("bad", [True, "last", 1.0], ids=["bool", "str", "float"])
def test_bad_write_layer_index_raises_naming_the_field(bad):
    with pytest.raises(ValueError, match="write_layer_index"):
        SSMAdapterConfig(write_layer_index=bad)


def test_write_layer_index_needs_the_lm_head_readout_and_a_layer_at_or_after_the_read_layer():
    with pytest.raises(ValueError, match="write_layer_index.*readout='lm_head'"):
        SSMAdapterConfig(readout="classifier", num_labels=2, write_layer_index=-1)
    for read, write in ((1, 0), (0, 3), (0, -4)):
        with pytest.raises(ValueError, match="must name a decoder layer at or after the read layer"):
            attach_ssm_adapter(tiny_base(layers=3), adapter_config(layer_index=read, write_layer_index=write))
    with pytest.raises(ValueError, match="write_layer_index.*LM-head SSM adapter methods"):
        AdapterExperimentSettings(methods="ssm,ssm_classifier", write_layer_index=-1).validate()


@torch.no_grad()
def test_update_computed_from_the_read_layer_is_added_after_the_write_layer():
    """logits = head(norm(h_w + W_out Mixer(Norm(h_k)))) with h_k, h_w the base's own outputs of layers k and w; a
    fresh adapter (zero W_out) leaves the logits bit-identical."""
    base = tiny_base("llama", layers=3)
    x = ids(steps=9)
    reference = base(x).logits
    adapted = attach_ssm_adapter(base, adapter_config(layer_index=0, write_layer_index=-1))
    assert adapted.adapter_write_layer_index == 2 and adapted.writes_later
    assert torch.equal(adapted(x).logits, reference)
    randomised(adapted)
    outputs = {}
    hooks = [
        layer.register_forward_hook(lambda m, a, out, i=i: outputs.__setitem__(i, out), prepend=True)
        for i, layer in enumerate(base.model.layers)
    ]
    logits = adapted(x).logits
    for hook in hooks:
        hook.remove()
    update, _ = adapted.ssm_adapter(outputs[0])
    expected = base.lm_head(base.model.norm(outputs[2] + update))
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(logits, reference)
    # the same weights writing where they read give other logits: the write layer matters
    here = attach_ssm_adapter(tiny_base("llama", layers=3), adapter_config(layer_index=0))
    here.ssm_adapter.load_state_dict(adapted.ssm_adapter.state_dict())
    assert not torch.allclose(here(x).logits, logits)


@torch.no_grad()
def test_cached_decoding_and_generate_equal_the_full_forward():
    adapted = randomised(attach_ssm_adapter(tiny_base(layers=3), adapter_config(layer_index=0, write_layer_index=1)))
    x = ids(steps=13)
    torch.testing.assert_close(cached_decode_logits(adapted, x), adapted(x, use_cache=False).logits)
    prompt, greedy = ids(steps=5), dict(max_new_tokens=8, do_sample=False)
    assert torch.equal(adapted.generate(prompt, use_cache=True, **greedy), adapted.generate(prompt, **greedy))


def test_frozen_prefix_cache_keeps_both_layers_and_gives_the_full_models_loss_and_gradients():
    """The cached features are h_k and h_w side by side (B, T, 2d); training on them skips layers 0..w and gives
    the full model's loss and adapter gradients to float rounding."""
    adapted = randomised(
        attach_ssm_adapter(tiny_base("llama", layers=3), adapter_config(layer_index=0, write_layer_index=1)), 0.1
    )
    batch = _padded_batch()
    loss, grads = _loss_and_grads(adapted, batch)
    prefix, store = FrozenPrefix(adapted), FeatureStore(2**20, "float32")
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    both = prefix.features(**inputs)
    assert both.shape[-1] == 64 and torch.equal(prefix.adapter_input(both), prefix.features(True, **inputs))
    for _ in range(2):  # computes and stores, then reads the store
        cached_loss, cached_grads = _loss_and_grads(adapted, batch, (prefix, store))
        torch.testing.assert_close(cached_loss, loss, rtol=1e-5, atol=1e-6)
        for name, grad in grads.items():
            torch.testing.assert_close(cached_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    adapted.base_model.model.layers[1].mlp.up_proj.weight.requires_grad_(True)
    with pytest.raises(ValueError, match="layers 0..1 frozen"):
        FrozenPrefix(adapted)


@torch.no_grad()
def test_save_and_reload_is_bit_identical(tmp_path):
    adapted = randomised(attach_ssm_adapter(tiny_base(layers=3), adapter_config(layer_index=0, write_layer_index=-1)))
    adapted.save_pretrained(tmp_path)
    assert json.loads((tmp_path / ADAPTER_CONFIG_NAME).read_text())["write_layer_index"] == -1
    loaded = load_ssm_adapter(tiny_base(layers=3), tmp_path)
    x = ids()
    assert loaded.adapter_write_layer_index == 2 and torch.equal(loaded(x).logits, adapted(x).logits)


def test_train_adapter_lm_head_method_writes_after_the_last_layer(tmp_path):
    """End to end on the tiny base: --methods ssm reading after layer 0 and writing after the last, with the
    frozen-prefix cache and the whole-vocabulary loss at the question; the saved adapter records the write
    layer."""
    run = tmp_path / "run"
    result = run_script(
        "train_adapter", "--output_dir", str(run), "--methods", "ssm", *TINY_QUICK_RUN, "--tiny_layers", "2",
        "--test_buckets", "1-3", "--layer_index", "0", "--write_layer_index", "-1",
        "--transitions_at", "sentence_ends", "--train_examples", "6", "--answer_loss", "vocab",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((run / "ssm" / "adapter" / ADAPTER_CONFIG_NAME).read_text())
    assert saved["layer_index"] == 0 and saved["write_layer_index"] == -1
    record = json.loads((run / "ssm" / "results.json").read_text())
    assert record["feature_cache"]["examples"] == 6
