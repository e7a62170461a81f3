"""`SSMAdapterConfig.classifier_per_head`: every PD-SSM head reads out its own state, is trained with its own
cross-entropy, and the heads answer together as a product of experts; saving, reloading and cached decoding keep
the promises of the plain classifier readout. With the LM-head readout the vote is written into the residual
stream, and the adapted model keeps every promise of an LM-head adapter."""

from __future__ import annotations

import json

import pytest
import test_adapter
import torch
from test_adapter import TINY_QUICK_RUN, _padded_batch, adapter_config, ids, tiny_base

from hf_ssm.adapters import ADAPTER_CONFIG_NAME, SSMAdapterConfig, attach_ssm_adapter, load_ssm_adapter
from hf_ssm.adapters.feature_cache import FrozenPrefix
from hf_ssm.training.adapter.experiment_settings import AdapterExperimentSettings
from hf_ssm.training.adapter.scoring import score_batch
from model_checks import run_script

HEADS, STATES, CLASSES = 2, 5, 3


def per_head_adapter(base=None, seed: int = 3, readout: str = "classifier", **overrides):
    """A tiny base with a per-head adapter after layer 0 whose every weight is random (so the states move and the
    heads disagree)."""
    config = adapter_config(readout=readout, num_labels=CLASSES, classifier_per_head=True, layer_index=0, **overrides)
    adapted = attach_ssm_adapter(tiny_base() if base is None else base, config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in adapted.ssm_adapter.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return adapted


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(classifier_per_head="yes", readout="classifier", num_labels=3), "`classifier_per_head` must be True"),
        (dict(classifier_per_head=True), "`num_labels` must be an int >= 1"),
        (dict(classifier_per_head=True, readout="classifier", num_labels=3, mixer="diag_lru"), "mixer='pd_ssm'"),
    ],
    ids=["not-bool", "no-num-labels", "diagonal-mixer"],
)
def test_bad_classifier_per_head_raises_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        SSMAdapterConfig(**{"mixer_settings": {}, **overrides})


def test_experiment_settings_refuse_classifier_per_head_without_a_method_that_reads_it():
    for methods in ("probe", "lora_classifier", "ssm,ssm_lora"):
        with pytest.raises(ValueError, match=r"classifier_per_head.*\['ssm_classifier', 'ssm'\]"):
            AdapterExperimentSettings(methods=methods, classifier_per_head=True).validate()
    with pytest.raises(ValueError, match="classifier_per_head.*pd_ssm"):
        AdapterExperimentSettings(methods="ssm_classifier", mixer="diag_lru", classifier_per_head=True).validate()
    for methods in ("ssm", "ssm_classifier", "ssm,ssm_classifier,probe"):
        AdapterExperimentSettings(methods=methods, classifier_per_head=True).validate()


def test_mixer_state_features_are_what_c_reads():
    """PDSSMMixer.state_features gives the (B, T, H, 2N) vector its forward maps through C: C f + skip u equals
    forward's output, and the final states agree."""
    mixer = per_head_adapter().ssm_adapter.mixer
    u = torch.randn(2, 7, 32)
    features, final = mixer.state_features(u)
    assert features.shape == (2, 7, HEADS, 2 * STATES)
    y, forward_final = mixer(u)
    torch.testing.assert_close(mixer.out_proj(features.flatten(2)) + mixer.skip * u, y)
    assert torch.equal(final, forward_final)


def test_logits_are_the_heads_summed_log_probabilities_of_their_own_readouts():
    adapter = per_head_adapter().ssm_adapter
    h = torch.randn(2, 7, 32)
    head_logits, _ = adapter.head_logits(h)
    assert head_logits.shape == (2, 7, HEADS, CLASSES)
    features, _ = adapter.mixer.state_features(adapter._mixer_input(h))
    for head in range(HEADS):  # head h reads only its own state
        expected = features[:, :, head] @ adapter.classifier.weight[head] + adapter.classifier.bias[head]
        torch.testing.assert_close(head_logits[:, :, head], expected)
    torch.testing.assert_close(adapter(h)[0], head_logits.log_softmax(-1).sum(-2))
    with pytest.raises(ValueError, match="classifier_per_head"):
        attach_ssm_adapter(tiny_base(), adapter_config(readout="classifier", num_labels=3)).ssm_adapter.head_logits(h)


def test_the_mixers_c_and_skip_stay_frozen_and_every_other_parameter_trains(tmp_path):
    adapted = per_head_adapter()
    frozen = {n for n, p in adapted.ssm_adapter.named_parameters() if not p.requires_grad}
    assert {"mixer.out_proj.weight", "mixer.skip"} <= frozen
    assert {"classifier.weight", "classifier.bias", "mixer.selection.weight"}.isdisjoint(frozen)
    adapted.save_pretrained(tmp_path)
    reloaded = load_ssm_adapter(tiny_base(), tmp_path, is_trainable=True)
    assert {n for n, p in reloaded.ssm_adapter.named_parameters() if not p.requires_grad} == frozen


def test_save_then_load_gives_identical_adapter_logits(tmp_path):
    adapted = per_head_adapter()
    x = ids()
    expected = adapted(x).adapter_logits
    adapted.save_pretrained(tmp_path)
    assert json.loads((tmp_path / ADAPTER_CONFIG_NAME).read_text())["classifier_per_head"] is True
    assert torch.equal(load_ssm_adapter(tiny_base(), tmp_path)(x).adapter_logits, expected)


def test_cached_decoding_gives_the_full_forwards_adapter_logits():
    adapted = per_head_adapter()
    x = ids()
    full = adapted(x).adapter_logits
    out = adapted(x[:, :4], use_cache=True)
    pieces = [out.adapter_logits]
    for t in range(4, x.shape[1]):
        out = adapted(x[:, t : t + 1], cache=out.cache, use_cache=True)
        pieces.append(out.adapter_logits)
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-5, atol=1e-5)


def test_training_loss_is_every_heads_own_cross_entropy_averaged_over_the_heads():
    """score_batch scores each head against the label on its own (not the product of experts), and predicts with
    the heads' summed log-probabilities."""
    adapted = per_head_adapter()
    batch = _padded_batch()
    batch["label"] = torch.tensor([0, 2, 1])
    loss, predicted = score_batch("ssm_classifier", adapted, batch, torch.arange(CLASSES), "cpu")
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    features = FrozenPrefix(adapted).features(**inputs)  # layer 0's output, the adapter's input
    mask = inputs["attention_mask"].bool()
    head_logits = adapted.ssm_adapter.head_logits(features, mask=mask, input_ids=inputs["input_ids"])[0][:, -1]
    per_head = torch.nn.functional.cross_entropy(head_logits.transpose(1, 2), batch["label"][:, None].expand(-1, HEADS))
    torch.testing.assert_close(loss, per_head)
    poe = head_logits.log_softmax(-1).sum(-2)
    assert not torch.allclose(loss, torch.nn.functional.cross_entropy(poe, batch["label"]))
    assert torch.equal(predicted, poe.argmax(-1))


def test_train_adapter_with_a_readout_per_head_end_to_end(tmp_path):
    """scripts/train_adapter.py --classifier_per_head true on the tiny base: trains, saves an adapter that records
    the option, and names it in the summary record and in its model card."""
    run = tmp_path / "run"
    summary = tmp_path / "summary.json"
    result = run_script(
        "train_adapter", "--output_dir", str(run), "--methods", "ssm_classifier", *TINY_QUICK_RUN,
        "--tiny_layers", "2", "--test_buckets", "1-3", "--layer_index", "0", "--classifier_per_head", "true",
        "--summary", str(summary),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((run / "ssm_classifier" / "adapter" / ADAPTER_CONFIG_NAME).read_text())
    assert saved["classifier_per_head"] is True and saved["readout"] == "classifier"
    records = json.loads(summary.read_text())  # a list of records, one per method and run
    assert any("a readout per head" in r["model"] for r in records)
    card = (run / "ssm_classifier" / "adapter" / "README.md").read_text()
    assert "every head's own readout of its state" in card and "W_cls Mixer" not in card  # the card names it too


# --- the LM-head readout: the vote written into the residual stream ----------------------------------------------


def test_lm_head_vote_starts_bit_identical_to_the_base_and_writes_w_out_of_the_votes_probabilities():
    """A fresh per-head LM-head adapter adds exactly zero (W_out (d, C) is zero); once W_out is set, its update is
    W_out softmax(sum_h log_softmax(head logits))."""
    base = tiny_base()
    x = ids()
    with torch.no_grad():
        expected = base(x).logits
    adapted = attach_ssm_adapter(
        tiny_base(), adapter_config(readout="lm_head", num_labels=CLASSES, classifier_per_head=True, layer_index=0)
    )
    assert adapted.ssm_adapter.out_proj.weight.shape == (32, CLASSES)
    with torch.no_grad():
        assert torch.equal(adapted(x).logits, expected)
    adapter = per_head_adapter(readout="lm_head").ssm_adapter
    h = torch.randn(2, 7, 32)
    head_logits, _ = adapter.head_logits(h)
    vote = head_logits.log_softmax(-1).sum(-2)
    update, _ = adapter(h)
    torch.testing.assert_close(update, vote.softmax(-1) @ adapter.out_proj.weight.T)
    assert update.abs().amax() > 0


@torch.no_grad()
def test_lm_head_vote_save_and_reload_is_bit_identical(tmp_path):
    adapted = per_head_adapter(readout="lm_head", write_layer_index=-1)
    x = ids()
    expected = adapted(x).logits
    adapted.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / ADAPTER_CONFIG_NAME).read_text())
    assert saved["classifier_per_head"] is True and saved["readout"] == "lm_head" and saved["num_labels"] == CLASSES
    assert torch.equal(load_ssm_adapter(tiny_base(), tmp_path)(x).logits, expected)


@torch.no_grad()
def test_lm_head_vote_cached_decoding_and_generate_equal_the_full_forward():
    adapted = per_head_adapter(readout="lm_head", write_layer_index=-1)
    x = ids(steps=13)
    torch.testing.assert_close(test_adapter.cached_decode_logits(adapted, x), adapted(x, use_cache=False).logits)
    prompt, greedy = ids(steps=5), dict(max_new_tokens=8, do_sample=False)
    assert torch.equal(adapted.generate(prompt, use_cache=True, **greedy), adapted.generate(prompt, **greedy))


def test_lm_head_vote_loss_adds_every_heads_own_cross_entropy_to_the_vocabulary_loss():
    """score_batch("ssm", vocab_loss=True) on a per-head LM-head adapter: the LM head's whole-vocabulary
    cross-entropy at the question plus each head's own class cross-entropy there (averaged over the heads); its
    prediction is still the LM head's answer word."""
    adapted = per_head_adapter(readout="lm_head", write_layer_index=-1)
    batch = _padded_batch()
    batch["label"], batch["answer_token"] = torch.tensor([0, 2, 1]), torch.tensor([7, 9, 11])
    answer_ids = torch.tensor([7, 9, 11])
    loss, predicted = score_batch("ssm", adapted, batch, answer_ids, "cpu", vocab_loss=True)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
    logits = adapted(**inputs, use_cache=False).logits[:, -1]
    vocab = torch.nn.functional.cross_entropy(logits, batch["answer_token"])
    features = FrozenPrefix(adapted).features(adapter_input_only=True, **inputs)
    mask = inputs["attention_mask"].bool()
    head_logits = adapted.ssm_adapter.head_logits(features, mask=mask, input_ids=inputs["input_ids"])[0][:, -1]
    per_head = torch.nn.functional.cross_entropy(head_logits.transpose(1, 2), batch["label"][:, None].expand(-1, HEADS))
    torch.testing.assert_close(loss, vocab + per_head)
    assert torch.equal(predicted, logits[:, answer_ids].argmax(-1))
    # without the per-head readout the same call is the vocabulary loss alone
    plain = attach_ssm_adapter(tiny_base(), adapter_config(layer_index=0, write_layer_index=-1))
    test_adapter.randomise(plain)
    plain_loss, _ = score_batch("ssm", plain, batch, answer_ids, "cpu", vocab_loss=True)
    plain_logits = plain(**inputs, use_cache=False).logits[:, -1]
    torch.testing.assert_close(plain_loss, torch.nn.functional.cross_entropy(plain_logits, batch["answer_token"]))


def test_train_adapter_lm_head_method_with_a_readout_per_head_end_to_end(tmp_path):
    """scripts/train_adapter.py --methods ssm --classifier_per_head true on the tiny base (reading after layer 0,
    writing after the last, the whole-vocabulary loss): the saved adapter is an LM-head adapter that records the
    option and its classes, and its model card says how the vote reaches the LM head."""
    run = tmp_path / "run"
    result = run_script(
        "train_adapter", "--output_dir", str(run), "--methods", "ssm", *TINY_QUICK_RUN, "--tiny_layers", "2",
        "--test_buckets", "1-3", "--layer_index", "0", "--write_layer_index", "-1", "--answer_loss", "vocab",
        "--transitions_at", "sentence_ends", "--classifier_per_head", "true",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    saved = json.loads((run / "ssm" / "adapter" / ADAPTER_CONFIG_NAME).read_text())
    assert saved["classifier_per_head"] is True and saved["readout"] == "lm_head" and saved["num_labels"] == 2
    card = (run / "ssm" / "adapter" / "README.md").read_text()
    assert "W_out softmax(v)" in card and "W_out Mixer" not in card


def test_lm_head_vote_is_detached_so_the_lm_loss_trains_w_out_alone():
    """A loss on the LM-head adapter's update gives gradient to W_out only; the heads (their readouts and the
    transition choice) learn from their own cross-entropies alone."""
    adapter = per_head_adapter(readout="lm_head").ssm_adapter
    update, _ = adapter(torch.randn(2, 7, 32))
    update.square().sum().backward()
    grads = {n: p.grad for n, p in adapter.named_parameters() if p.requires_grad}
    assert grads.pop("out_proj.weight").abs().sum() > 0
    assert all(g is None for g in grads.values()), [n for n, g in grads.items() if g is not None]
