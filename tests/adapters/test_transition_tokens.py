"""`SSMAdapterConfig.transition_token_ids` / `--transitions_at sentence_ends`: the adapter's state moves only at the
chosen tokens (one transition per sentence), and everything the adapter promises still holds with it."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
from test_adapter import PD_SETTINGS, TINY_MIXER, TINY_QUICK_RUN, VOCAB, cached_decode_logits, ids, randomise, tiny_base

from hf_ssm.adapters import (
    ADAPTER_CONFIG_NAME,
    SSMAdapter,
    SSMAdapterConfig,
    attach_ssm_adapter,
    load_ssm_adapter,
    sentence_end_token_ids,
    transition_token_ids,
)
from hf_ssm.adapters.tiny_base import build_word_tokenizer
from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
from model_checks import run_script

BOUNDARIES = [3, 7, 19]  # the "sentence-end" tokens of these tests
AUTOMATON = {**PD_SETTINGS, "pd_ssm_initial_state": "one_hot", "pd_ssm_input": "none", "pd_ssm_transition": "direct"}


def boundary_config(**overrides) -> SSMAdapterConfig:
    return SSMAdapterConfig(**{"mixer_settings": PD_SETTINGS, "transition_token_ids": BOUNDARIES, **overrides})


def with_boundaries(batch: int = 2, steps: int = 13, seed: int = 2) -> torch.Tensor:
    """Random ids with a boundary token at every fourth position."""
    x = ids(batch, steps, seed)
    x[:, 3::4] = torch.tensor(BOUNDARIES)[torch.arange(x[:, 3::4].numel()) % 3].view_as(x[:, 3::4])
    return x


@pytest.mark.parametrize(
    "bad", [[], [1, 1], [-1], [1.5], "3,7", [True]], ids=["empty", "repeat", "negative", "float", "str", "bool"]
)
def test_bad_transition_token_ids_raise_naming_the_field(bad):
    with pytest.raises(ValueError, match="transition_token_ids"):
        SSMAdapterConfig(transition_token_ids=bad)


def test_transition_token_ids_are_stored_sorted_and_round_trip_through_the_config_file(tmp_path):
    config = SSMAdapterConfig(transition_token_ids=[19, 3, 7])
    assert config.transition_token_ids == BOUNDARIES
    config.save_pretrained(tmp_path)
    assert SSMAdapterConfig.from_pretrained(tmp_path).transition_token_ids == BOUNDARIES


@torch.no_grad()
@pytest.mark.parametrize("settings", [PD_SETTINGS, AUTOMATON], ids=["dictionary", "pure_automaton"])
def test_state_moves_only_at_transition_tokens(settings):
    """The final state equals that of the same adapter run on the boundary positions alone (every other token
    is the identity), and it differs from an adapter that steps at every token."""
    torch.manual_seed(0)
    adapter = SSMAdapter(boundary_config(mixer_settings=settings), 32)
    every_token = SSMAdapter(SSMAdapterConfig(mixer_settings=settings), 32)
    every_token.load_state_dict(adapter.state_dict())
    hidden, x = torch.randn(2, 13, 32), with_boundaries()
    _, final = adapter(hidden, input_ids=x)
    keep = torch.isin(x[0], torch.tensor(BOUNDARIES))
    assert torch.equal(keep, torch.isin(x[1], torch.tensor(BOUNDARIES)))
    _, expected = every_token(hidden[:, keep])
    torch.testing.assert_close(final, expected, atol=1e-6, rtol=1e-6)
    _, stepping_everywhere = every_token(hidden)
    assert not torch.allclose(final, stepping_everywhere)


def test_a_forward_without_input_ids_raises():
    adapter = SSMAdapter(boundary_config(), 32)
    with pytest.raises(ValueError, match="needs `input_ids`"):
        adapter(torch.randn(1, 5, 32))
    adapted = attach_ssm_adapter(tiny_base(), boundary_config())
    embeds = adapted.get_input_embeddings()(ids())
    with pytest.raises(ValueError, match="needs `input_ids`"):
        adapted(inputs_embeds=embeds)


@torch.no_grad()
def test_attached_starts_equal_to_the_base_and_saves_and_reloads_bit_identically(tmp_path):
    base = tiny_base()
    pristine = copy.deepcopy(base)
    x = with_boundaries()
    reference = base(x).logits
    adapted = attach_ssm_adapter(base, boundary_config())
    assert torch.equal(adapted(x).logits, reference)
    randomise(adapted, scale=1.0)
    expected = adapted(x).logits
    assert not torch.equal(expected, reference)
    adapted.save_pretrained(tmp_path)
    assert json.loads((tmp_path / ADAPTER_CONFIG_NAME).read_text())["transition_token_ids"] == BOUNDARIES
    reloaded = load_ssm_adapter(pristine, tmp_path)
    assert torch.equal(reloaded(x).logits, expected)


@torch.no_grad()
def test_cached_decoding_and_generate_equal_the_full_forward():
    adapted = attach_ssm_adapter(tiny_base(), boundary_config())
    randomise(adapted, scale=1.0)
    x = with_boundaries(steps=13)
    full = adapted(x, use_cache=False).logits
    torch.testing.assert_close(cached_decode_logits(adapted, x), full, atol=1e-5, rtol=1e-5)
    greedy = dict(max_new_tokens=10, do_sample=False)
    prompt = with_boundaries(steps=8)
    assert torch.equal(
        adapted.generate(prompt, use_cache=True, **greedy), adapted.generate(prompt, use_cache=False, **greedy)
    )


def test_sentence_end_token_ids_are_the_tokens_ending_in_sentence_punctuation():
    tokenizer = build_word_tokenizer(["a", "b", ".", "?", "!", ",", ":"])
    found = {tokenizer.convert_ids_to_tokens(i) for i in sentence_end_token_ids(tokenizer)}
    assert found == {".", "?", "!"}
    assert transition_token_ids(tokenizer, "every_token") is None
    assert transition_token_ids(tokenizer, "sentence_ends") == sentence_end_token_ids(tokenizer)
    with pytest.raises(ValueError, match="transitions_at"):
        transition_token_ids(tokenizer, "sentences")
    without = build_word_tokenizer(["a", "b"])
    with pytest.raises(ValueError, match="no token ending"):
        sentence_end_token_ids(without)


def test_experiment_settings_validate_and_resolve_transitions_at():
    with pytest.raises(ValueError, match="transitions_at"):
        AdapterExperimentSettings(transitions_at="sentence").validate()
    settings = AdapterExperimentSettings(transitions_at="sentence_ends")
    with pytest.raises(ValueError, match="needs the base's tokenizer"):
        settings.adapter_config()
    tokenizer = build_word_tokenizer(["the", "train", "moves", "."])
    assert settings.adapter_config(tokenizer).transition_token_ids == [tokenizer.convert_tokens_to_ids(".")]
    assert AdapterExperimentSettings().adapter_config().transition_token_ids is None
    assert VOCAB > max(BOUNDARIES)


def test_standardize_input_validates_and_reads_the_z_scored_features(tmp_path):
    """standardize_input: the adapter equals an unstandardized twin fed (h - mean) / scale; the statistics are
    the features' per-feature mean and std, saved with the weights and reloaded bit-identically."""
    with pytest.raises(ValueError, match="standardize_input"):
        SSMAdapterConfig(standardize_input="yes")
    torch.manual_seed(0)
    config = boundary_config(mixer_settings=AUTOMATON, standardize_input=True, readout="classifier", num_labels=3)
    adapter = SSMAdapter(config, 32)
    plain = SSMAdapter(boundary_config(mixer_settings=AUTOMATON, readout="classifier", num_labels=3), 32)
    plain.load_state_dict(adapter.state_dict(), strict=False)
    features = 5.0 + 3.0 * torch.randn(200, 32)
    features[:, 0] += 100.0  # an outlier feature, as a pretrained LM's
    adapter.set_input_statistics(features)
    torch.testing.assert_close(adapter.input_mean, features.mean(0))
    torch.testing.assert_close(adapter.input_scale, features.std(0))
    hidden, x = 5.0 + 3.0 * torch.randn(2, 13, 32), with_boundaries()
    out, final = adapter(hidden, input_ids=x)
    expected, expected_final = plain((hidden - features.mean(0)) / features.std(0), input_ids=x)
    torch.testing.assert_close(out, expected)
    assert torch.equal(final, expected_final)
    with pytest.raises(ValueError, match=r"expected features \(n >= 2, 32\)"):
        adapter.set_input_statistics(torch.randn(5, 31))
    with pytest.raises(ValueError, match="standardize_input=True"):
        plain.set_input_statistics(features)
    base = tiny_base()
    pristine = copy.deepcopy(base)
    adapted = attach_ssm_adapter(base, dataclasses.replace(config, readout="lm_head", num_labels=None))
    adapted.ssm_adapter.set_input_statistics(torch.randn(50, 32) * 2 + 1)
    randomise(adapted, scale=1.0)
    expected_logits = adapted(with_boundaries()).logits
    adapted.save_pretrained(tmp_path)
    reloaded = load_ssm_adapter(pristine, tmp_path)
    assert torch.equal(reloaded.ssm_adapter.input_mean, adapted.ssm_adapter.input_mean)
    assert torch.equal(reloaded(with_boundaries()).logits, expected_logits)


def test_selection_learning_rate_puts_the_transition_choice_in_its_own_group():
    from hf_ssm.training.adapter.methods import build_method, parameter_groups

    with pytest.raises(ValueError, match="selection_learning_rate"):
        AdapterExperimentSettings(selection_learning_rate=-1.0).validate()
    with pytest.raises(ValueError, match="standardize_input"):
        AdapterExperimentSettings(methods="ssm_lora", standardize_input=True).validate()
    for transition, name in (("bank", "mixer.selection.weight"), ("direct", "mixer.transition_proj.weight")):
        mixer = {"pd_ssm_transition": transition, "pd_ssm_initial_state": "one_hot", "pd_ssm_input": "none"}
        settings = AdapterExperimentSettings(
            extra_config={**TINY_MIXER, **mixer}, learning_rate=1e-2, selection_learning_rate=2e-3,
            readout_learning_rate=3e-4,
        )  # fmt: skip
        model, _, _ = build_method("ssm_classifier", settings, tiny_base(), num_classes=3)
        groups = parameter_groups("ssm_classifier", model, settings)
        names = {id(p): n for n, p in model.named_parameters()}
        by_lr = {g["lr"]: sorted(names[id(p)].removeprefix("ssm_adapter.") for p in g["params"]) for g in groups}
        assert by_lr[2e-3] == [name]
        assert by_lr[3e-4] == ["classifier.bias", "classifier.weight"]
        assert name not in by_lr[1e-2] and by_lr[1e-2]


def test_train_adapter_runs_with_sentence_ends_and_standardized_input(tmp_path):
    """The experiment's flags reach the saved adapter: its config holds the tokenizer's sentence-end ids and
    standardize_input, its weights the measured (non-trivial) statistics."""
    from safetensors.torch import load_file

    run = tmp_path / "run"
    result = run_script(
        "train_adapter", "--output_dir", str(run), "--methods", "ssm_classifier", *TINY_QUICK_RUN, "pd_ssm_transition=bank",
        "--tiny_layers", "1", "--test_buckets", "1-3", "--transitions_at", "sentence_ends", "--standardize_input", "true",
        "--selection_learning_rate", "2e-3", "--train_examples", "6",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((run / "ssm_classifier" / "adapter" / ADAPTER_CONFIG_NAME).read_text())
    assert saved["standardize_input"] is True
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run / "base")
    assert saved["transition_token_ids"] == sentence_end_token_ids(tokenizer)
    weights = load_file(str(run / "ssm_classifier" / "adapter" / "adapter_model.safetensors"))
    assert weights["ssm_adapter.input_mean"].abs().sum() > 0 and not torch.equal(
        weights["ssm_adapter.input_scale"], torch.ones(16)
    )
    record = json.loads((run / "ssm_classifier" / "results.json").read_text())
    assert record["input_statistics_vectors"] > 0


BANK_AUTOMATON = {**AUTOMATON, "pd_ssm_transition": "bank", "pd_ssm_output_skip": False}


@pytest.mark.parametrize(
    ("settings", "per_head", "with_state"),
    [
        (PD_SETTINGS, False, False),
        (PD_SETTINGS, False, True),
        (AUTOMATON, False, False),
        (BANK_AUTOMATON, True, False),
        (BANK_AUTOMATON, True, True),
    ],
    ids=["dictionary", "dictionary-passed-state", "direct-automaton", "bank-per-head", "bank-per-head-passed-state"],
)
def test_scan_over_the_steps_alone_equals_the_masked_scan_over_every_token(settings, per_head, with_state):
    """SSMAdapter._scan_of_steps (the scan over the transition tokens alone, every position reading the state after
    the last of them) gives the masked full-length scan's features, final state and gradients, on left-padded rows,
    a row with no transition token, and a batch with none at all."""
    torch.manual_seed(0)
    extra = dict(readout="classifier", num_labels=3, classifier_per_head=True) if per_head else {}
    adapter = SSMAdapter(boundary_config(mixer_settings=settings, **extra), 32)
    with torch.no_grad():
        for p in adapter.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = with_boundaries(batch=4, steps=15)
    x[3] = 1  # a row with no boundary token
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[1, :4] = mask[2, :9] = False  # left padding
    state = None
    if with_state:
        start = adapter.mixer.initial_state(4)
        state = start[:, :, torch.randperm(start.shape[-1])]  # another basis vector (an automaton's state is one)
    for ids_ in (x, torch.ones_like(x)):  # the second batch has no step at all
        h = torch.randn(4, 15, 32, requires_grad=True)
        steps = adapter.step_mask(mask, ids_)
        results = []
        for scan in (adapter.mixer.state_features, adapter._scan_of_steps):
            adapter.zero_grad()
            h.grad = None
            features, final = scan(adapter._mixer_input(h), state, steps)
            (features * torch.randn_like(features, generator=torch.Generator().manual_seed(1))).sum().backward()
            grads = {n: p.grad.clone() for n, p in adapter.named_parameters() if p.grad is not None}
            results.append((features.detach(), final, h.grad.clone(), grads))
        (ref, ref_final, ref_h_grad, ref_grads), (got, final, h_grad, grads) = results
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(final, ref_final, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(h_grad, ref_h_grad, rtol=1e-4, atol=1e-6)
        assert grads.keys() == ref_grads.keys()
        for name, grad in ref_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


@torch.no_grad()
def test_adapter_output_through_the_scan_of_steps_equals_the_mixers_own_forward():
    """forward with transition tokens reads the mixer out of the step-only scan: C features + skip u at every token,
    as the mixer's own forward over the masked sequence gives it."""
    torch.manual_seed(0)
    adapter = SSMAdapter(boundary_config(), 32)
    with torch.no_grad():
        for p in adapter.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x, h = with_boundaries(batch=3, steps=14), torch.randn(3, 14, 32)
    output, final = adapter(h, input_ids=x)
    mixed, expected_final = adapter.mixer(adapter._mixer_input(h), mask=adapter.step_mask(None, x))
    # to float rounding: the chunked scan combines a shorter sequence's complex products in another order
    torch.testing.assert_close(output, adapter.out_proj(mixed), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final, expected_final, rtol=1e-5, atol=1e-5)
