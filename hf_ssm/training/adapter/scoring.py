"""Scoring of the adapter experiment's methods: the loss and answer of a batch (`score_batch`, shared by training and
evaluation), the few-shot prefix of the untrained base, and the accuracy by story length (`evaluate`)."""

from __future__ import annotations

import math
import random
from contextlib import nullcontext

import torch
from torch import nn

from ...adapters.entity_tracking import EntityTrackingAdapter
from ...adapters.feature_cache import FrozenPrefix
from ...adapters.model import SSMAdapterModel, find_decoder_layers
from ...data.nl_state_tracking import (
    NLStateTrackingDataset,
    answer_token_ids,
    collate_nl_state_tracking,
)
from ..loop import batch_ranges, bucket_accuracy, evaluation_progress
from .experiment_settings import AdapterExperimentSettings
from .methods import LastHiddenStateProbe, PrefixLoRAClassifier


def score_batch(
    method: str,
    model,
    batch: dict,
    answer_ids: torch.Tensor,
    device,
    dense: bool = False,
    vocab_loss: bool = False,
    features: torch.Tensor | None = None,
    role_weight: float = 1.0,
):
    """(loss, predicted answer class at the last position (B,)) of one left-padded batch.

    Predictions: the LM-head methods take the arg-max over the LM-head logits of the answer words' first tokens,
    the probe its own head. Loss: cross-entropy over the answer classes at the last position (after "Answer:"),
    or with `vocab_loss` the next-token cross-entropy there over the whole vocabulary (LM-head methods); with
    `dense`, also the cross-entropy over the answer classes at the end of every transition sentence. An SSM
    adapter with `classifier_per_head` scores every head's own answer at those positions instead (averaged over
    the heads); with the LM-head readout that is added to the LM head's loss at the last position.
    `features` (B, L, d): the base's hidden states after the adapter's layer (frozen-prefix cache), used instead
    of running the layers up to it. The classifier readout never runs the layers above the adapter. The entity
    tracker (adapter kind "entity_tracking") adds `role_weight` times its tagger's mean cross-entropy against the
    batch's `token_roles` (and, with the LM-head readout, the cross-entropy of its own option scores at the end).
    """
    inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids")}
    last = inputs["input_ids"].shape[1] - 1
    if dense:
        positions = batch["supervised_positions"].to(device)
        labels = batch["supervised_labels"].to(device).masked_fill(positions == last, -100)  # the end: below
    else:
        positions = torch.full_like(batch["label"], last).unsqueeze(1).to(device)
        labels = torch.full_like(positions, -100)
    # Only the supervised positions get logits (a 150k-word LM head over every position would not fit).
    keep = torch.unique(torch.cat([positions[positions >= 0], positions.new_tensor([last])]))  # sorted; ends at `last`
    loss_scores = None  # (B, K, H, C) when every head is scored on its own (classifier_per_head)
    extra = 0.0  # the entity tracker's role loss
    if method == "ssm_classifier":
        adapted = _unwrapped(model)
        hidden = FrozenPrefix(adapted).features(**inputs) if features is None else features
        mask = inputs["attention_mask"].bool()
        step_mask = None if bool(mask.all()) else mask
        adapter = adapted.ssm_adapter
        if isinstance(adapter, EntityTrackingAdapter):
            out = adapter.outputs(hidden, mask=step_mask, input_ids=inputs["input_ids"])
            scores = out.scores[:, keep].float()
            extra = role_weight * _role_loss(out.role_logits, batch, device)
        elif adapter.config.classifier_per_head:
            loss_scores = adapter.head_logits(hidden, mask=step_mask, input_ids=inputs["input_ids"])[0][:, keep].float()
            scores = loss_scores.log_softmax(-1).sum(-2)
        else:
            scores = adapter(hidden, mask=step_mask, input_ids=inputs["input_ids"])[0][:, keep].float()
        # the last position only: (B, C), or per head (B, H, C)
        final_loss = _class_loss((scores if loss_scores is None else loss_scores)[:, -1], batch["label"].to(device))
    elif method == "lora_classifier":
        scores = model(**inputs, logits_to_keep=keep)
        final_loss = _class_loss(scores[:, -1], batch["label"].to(device))
    elif method == "probe":
        if features is None:
            scores = model(**inputs, logits_to_keep=keep).float()
        else:
            scores = _unwrapped(model).head(features[:, keep])
        final_loss = _class_loss(scores[:, -1], batch["label"].to(device))
    else:
        scores, loss_scores, final_loss, extra = _lm_head_scores(
            model, inputs, keep, answer_ids, batch, device, vocab_loss, features, role_weight
        )
    index = torch.searchsorted(keep, positions.clamp_min(0))
    scored = scores if loss_scores is None else loss_scores
    picked = scored[torch.arange(scored.shape[0], device=scored.device)[:, None], index]  # (B, P, [H,] C)
    dense_loss = _class_loss(picked.flatten(0, 1), labels.flatten())
    count = (labels != -100).sum() + scores.shape[0]
    return (dense_loss + final_loss) / count + extra, scores[:, -1].argmax(-1)


def _role_loss(role_logits: torch.Tensor, batch: dict, device) -> torch.Tensor:
    """The entity tracker's tagger loss: the mean cross-entropy of its role logits (B, T, R) against the batch's
    `token_roles` (B, T) (-100 on padding); ValueError when the batch has none (a task whose stories record no
    roles)."""
    if "token_roles" not in batch:
        raise ValueError(
            "the entity-tracking adapter trains its tagger on the stories' token roles, which this batch lacks "
            "(only the tracking_shuffled_objects stories record them)"
        )
    roles = batch["token_roles"].to(device)
    return nn.functional.cross_entropy(role_logits.flatten(0, 1).float(), roles.flatten(), ignore_index=-100)


def _lm_head_scores(
    model, inputs: dict, keep, answer_ids, batch: dict, device, vocab_loss: bool, features, role_weight: float = 1.0
):
    """score_batch's LM-head readout: (answer-class scores at the kept positions (B, K, C), a per-head adapter's
    own scores (B, K, H, C) or None, the loss at the last position, the entity tracker's own losses (its role loss
    times `role_weight` and its option scores' cross-entropy at the end; 0 for any other model))."""
    loss_scores = None
    # Only the answer words' rows of the LM head are computed at the supervised positions, and the whole head
    # only at the last position for the vocabulary loss: a 49k-word head over every supervised position
    # would cost more than the rest of the step on a CPU.
    forward = _answer_logits if _head_is_linear(model) else _full_logits
    context = nullcontext() if features is None else FrozenPrefix(_unwrapped(model)).replaced_by(features)
    head_logits = []  # a per-head adapter's heads' own logits (B, T, H, C), caught inside the forward
    tracker = {}  # the entity tracker's role logits and option scores, caught inside the forward
    catches = [_catch_head_logits(model, head_logits), *_catch_tracker_outputs(model, tracker)]
    try:
        with context:
            answer_logits, vocab_logits = forward(model, inputs, keep, answer_ids, vocab_loss)
    finally:
        for catch in catches:
            if catch is not None:
                catch.remove()
    scores = answer_logits.float()
    if vocab_loss:
        final_loss = nn.functional.cross_entropy(
            vocab_logits.float(), batch["answer_token"].to(device), reduction="sum"
        )
    else:
        final_loss = _class_loss(scores[:, -1], batch["label"].to(device))
    if head_logits:
        loss_scores = head_logits[-1][:, keep].float()
        final_loss = final_loss + _class_loss(loss_scores[:, -1], batch["label"].to(device))
    extra = 0.0
    if tracker:
        labels = batch["label"].to(device)
        own = _class_loss(tracker["scores"][:, -1].float(), labels) / labels.shape[0]
        extra = own + role_weight * _role_loss(tracker["roles"], batch, device)
    return scores, loss_scores, final_loss, extra


def _catch_tracker_outputs(model, caught: dict) -> list:
    """Forward hooks that put the entity tracker's role logits (B, T, R) and option scores (B, T, C) into `caught`
    ("roles", "scores") whenever it runs inside the model's forward (an LM-head method); [] for any other model."""
    adapted = _unwrapped(model)
    if not (isinstance(adapted, SSMAdapterModel) and isinstance(adapted.ssm_adapter, EntityTrackingAdapter)):
        return []
    tracker = adapted.ssm_adapter

    def keep(name):
        return lambda module, args, output: caught.__setitem__(name, output)

    return [tracker.tagger.register_forward_hook(keep("roles")), tracker.vote.register_forward_hook(keep("scores"))]


def _catch_head_logits(model, caught: list):
    """A forward hook appending every head's own logits (B, T, H, C) to `caught` whenever the SSM adapter of an
    LM-head method with `classifier_per_head` runs (None for any other model): the adapter runs inside the base's
    forward there, so its heads' answers can only be caught on the way."""
    adapted = _unwrapped(model)
    if not (isinstance(adapted, SSMAdapterModel) and adapted.adapter_config.classifier_per_head):
        return None  # (the entity tracker has no classifier_per_head: _catch_tracker_outputs)
    return adapted.ssm_adapter.classifier.register_forward_hook(lambda module, args, output: caught.append(output))


def _class_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of scores (n, C) against labels (n,) (-100 ignored); per-head scores (n, H, C): every
    head's cross-entropy against the same label, averaged over the heads."""
    if scores.dim() == 2:
        return nn.functional.cross_entropy(scores, labels, ignore_index=-100, reduction="sum")
    heads = scores.shape[1]
    per_head = labels[:, None].expand(-1, heads)
    return nn.functional.cross_entropy(scores.transpose(1, 2), per_head, ignore_index=-100, reduction="sum") / heads


def _full_logits(model, inputs: dict, keep: torch.Tensor, answer_ids: torch.Tensor, vocab_at_last: bool = False):
    """(the answer words' LM-head logits (B, K, C) at the positions `keep` (K,), the whole vocabulary's (B, V) at
    the last position when `vocab_at_last`, else None), from the model's own logits over the whole vocabulary."""
    logits = model(**inputs, use_cache=False, logits_to_keep=keep).logits
    return logits[..., answer_ids], logits[:, -1] if vocab_at_last else None


def _answer_logits(model, inputs: dict, keep: torch.Tensor, answer_ids: torch.Tensor, vocab_at_last: bool = False):
    """`_full_logits`'s two outputs from the base's decoder (with the adapter's hooks and any LoRA in it) to its
    final norm, then the head's rows `answer_ids` at `keep` and all its rows at the last position only. Equal
    to `_full_logits` for a plain linear LM head (`_head_is_linear`)."""
    base = _causal_lm(model)
    decoder = find_decoder_layers(base)[0]
    hidden = decoder(**inputs, use_cache=False).last_hidden_state
    head = base.get_output_embeddings()
    bias = None if head.bias is None else head.bias[answer_ids]
    answers = nn.functional.linear(hidden[:, keep], head.weight[answer_ids], bias)
    return answers, head(hidden[:, -1]) if vocab_at_last else None


def _causal_lm(model) -> nn.Module:
    """The (possibly LoRA-injected) causal LM inside a method's model."""
    model = _unwrapped(model)
    if isinstance(model, SSMAdapterModel):
        model = model.base_model
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _head_is_linear(model) -> bool:
    """Whether the base's logits are exactly its output embedding applied to the decoder's last hidden state (no
    soft-capping or scaling after the head, as in Llama, Qwen2, Mistral)."""
    base = _causal_lm(model)
    config = base.config.get_text_config()
    return (
        isinstance(base.get_output_embeddings(), nn.Linear)
        and getattr(config, "final_logit_softcapping", None) is None
        and getattr(config, "logit_scale", None) is None
    )


def _unwrapped(model):
    """The model under accelerate's / torch's wrappers (DDP keeps it in `.module`)."""
    while not isinstance(model, (SSMAdapterModel, LastHiddenStateProbe, PrefixLoRAClassifier)) and hasattr(
        model, "module"
    ):
        model = model.module
    return model


def fewshot_text(task, count: int, seed: int, min_transitions: int, max_transitions: int, distractor_prob=0.0) -> str:
    """`count` solved stories of min..max transitions ("... Answer: on" + a blank line each), seeded by the task
    and `seed`: the examples a few-shot prompt puts before a test story."""
    rng = random.Random(f"hf_ssm.fewshot:{task.name}:{seed}")
    text = ""
    for _ in range(count):
        story = task.sample(rng.randint(min_transitions, max_transitions), rng, distractor_prob)
        text += f"{story.prompt} {story.answer_word}\n\n"
    return text


def fewshot_prefix(task, tokenizer, settings: AdapterExperimentSettings) -> list[int]:
    """Token ids of `settings.fewshot_examples` solved stories of the training lengths, that method "fewshot" puts
    before every test story (the untrained base answers from them)."""
    text = fewshot_text(
        task, settings.fewshot_examples, settings.seed, settings.train_min_transitions,
        settings.train_max_transitions, settings.distractor_prob,
    )  # fmt: skip
    return tokenizer.encode(text, add_special_tokens=False)


def _after_examples(item: dict, examples: list[int]) -> dict:
    """A dataset item with the few-shot examples' tokens before its story (only the final answer is asked)."""
    ids = torch.cat([torch.tensor(examples, dtype=torch.long), item["input_ids"]])
    out = {**item, "input_ids": ids, "length": len(ids)}
    out["supervised_positions"] = torch.tensor([len(ids) - 1])
    out["supervised_labels"] = torch.tensor([item["label"]])
    return out


@torch.no_grad()
def evaluate(method, model, task, tokenizer, buckets, settings, seed, device, progress: bool = False) -> dict:
    """Accuracy at the question for fresh stories in each bucket of transition counts (`progress`: a bar per bucket,
    for the test set; the small validation sets during training go without)."""
    answer_ids = torch.tensor(answer_token_ids(task, tokenizer), device=device)
    examples = fewshot_prefix(task, tokenizer, settings) if method == "fewshot" else []

    def score_bucket(low: int, high: int, objects: int | None = None, variety: str | None = None) -> dict:
        # A bucket of the shuffled-objects task may fix the number of objects (its own stories, the same classes),
        # and take the stories of a held-out variety.
        bucket_task = task if objects is None else task.with_objects(objects)
        if variety is not None:
            bucket_task = bucket_task.with_variety(variety)
        data = NLStateTrackingDataset(
            bucket_task, tokenizer, settings.eval_samples_per_bucket, low, high, seed + low, settings.distractor_prob
        )
        correct, tokens = 0, []
        batches = evaluation_progress(
            batch_ranges(len(data), settings.eval_batch_size),
            f"{bucket_task.name}/{method} test {low}-{high}",
            total=math.ceil(len(data) / settings.eval_batch_size),
            enabled=progress,
        )
        for indices in batches:
            items = [data[i] for i in indices]
            if method == "fewshot":
                items = [_after_examples(item, examples) for item in items]
            batch = collate_nl_state_tracking(items, tokenizer.pad_token_id)
            _, pred = score_batch(method, model, batch, answer_ids, device)
            correct += int((pred.cpu() == batch["label"]).sum())
            tokens += batch["length"].tolist()
        return {
            "min_transitions": low,
            "max_transitions": high,
            **({} if objects is None else {"objects": objects}),
            **({} if variety is None else {"variety": variety}),
            "accuracy": correct / len(data),
            "mean_tokens": sum(tokens) / len(tokens),
            "max_tokens": max(tokens),
        }

    return bucket_accuracy(model, buckets, score_bucket)
