"""The adapter experiment of issue 7: natural-language state tracking on a frozen causal LM (docs/design.md §8, §10).

One run trains, on stories of `train_min_transitions .. train_max_transitions` transitions, each of

- `probe`: the frozen base alone, a linear probe on its last hidden state at the question's end;
- `lora`: PEFT LoRA on every projection of the base, rank chosen for a parameter count similar to the SSM
  adapter's, answering through the LM head;
- `lora_classifier`: PEFT LoRA on the attention projections of layers 0..`layer_index` with a linear classifier
  after that layer (the layers above are not run): the LoRA baseline at the `ssm_classifier` method's readout,
  depth and parameter budget, affordable on a CPU with a real base;
- `ssm`: the SSM adapter (default: one PD-SSM layer after the first decoder layer, D kept at its near-identity
  start), answering through the LM head;
- `ssm_classifier`: the SSM adapter with its own linear classifier (the base's logits are not used);
- `ssm_lora` (optional): the SSM adapter and LoRA together;

and evaluates each by story length in `test_buckets`, far past the training lengths, on the answer after the
final question. The LM-head methods score the answer classes by the LM-head logits of the answer words' first
tokens and train with cross-entropy over those answer words (`answer_loss="vocab"`: next-token prediction over
the whole vocabulary at the question, so that generate() itself says the word); the probe uses its own head.
By default (`supervision="dense"`) training also asks for the state at the end of every transition sentence
(cross-entropy over the answer words there): the natural-language counterpart of the every-prefix labels of
the formal tasks, and far more signal per story than the final answer alone. Writes results.json,
accuracy_vs_transitions.png, the trained adapters (the SSM adapter with a model card) and a Markdown table.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from huggingface_hub import ModelCardData
from torch import nn

from ..adapters.bases import DTYPES, NAMED_BASES
from ..adapters.bases import load_base as _load_base
from ..adapters.config import SSMAdapterConfig
from ..adapters.feature_cache import STORE_DTYPES, FeatureStore, FrozenPrefix, batch_features
from ..adapters.layer import SSMAdapter
from ..adapters.lora import ATTENTION_TARGETS, add_lora, lora_parameters_per_rank, lora_rank_for_budget
from ..adapters.model import SSMAdapterModel, attach_ssm_adapter, find_decoder_layers, run_to_layer
from ..adapters.tiny_base import build_tiny_qwen2, build_word_tokenizer, pretrain_language_model
from ..data.nl_state_tracking import (
    NL_TASK_NAMES,
    NLStateTrackingDataset,
    answer_token_ids,
    check_sentence_tokenization,
    collate_nl_state_tracking,
    get_nl_task,
    narrative_corpus,
    task_vocabulary,
)
from ..model_card import check_model_card
from ..modeling.configuration_hybrid_ssm import (
    PD_SSM_INITIAL_STATES,
    PD_SSM_INPUTS,
    PD_SSM_TRANSITIONS,
    check_choice,
)
from . import loop
from .checkpointing import atomic_save_dir, latest_checkpoint, prune_checkpoints, read_metadata
from .optimization import warmup_cosine_schedule
from .plotting import pyplot, save_figure

METHODS = ("fewshot", "probe", "lora", "lora_classifier", "ssm", "ssm_classifier", "ssm_lora")
# How each method answers: the frozen LM head (logits of the answer words' first tokens) or its own classifier.
READOUT_OF_METHOD = {
    "fewshot": "lm_head",
    "probe": "probe",
    "lora": "lm_head",
    "lora_classifier": "classifier",
    "ssm": "lm_head",
    "ssm_classifier": "classifier",
    "ssm_lora": "lm_head",
}
FEATURE_CACHES = ("memory", "disk", "off")
# The base below the adapter (for the probe: the whole base) is frozen: its features can be computed once per story.
CACHED_METHODS = ("probe", "ssm", "ssm_classifier")
# Training signal: the answer after every transition sentence (like every-prefix labels) or only at the end.
SUPERVISION = ("dense", "final")
ANSWER_LOSSES = ("answers", "vocab")
TINY_BASE = "tiny"


@dataclass
class AdapterExperimentSettings:
    """Everything one run depends on (saved to the run folder as settings.json)."""

    task: str = "parity"
    base_model: str = TINY_BASE
    dtype: str = "float32"
    methods: str = "probe,lora,ssm"
    # the built-in tiny Qwen2 (base_model == "tiny")
    tiny_hidden_size: int = 64
    tiny_layers: int = 2
    tiny_heads: int = 4
    pretrain_steps: int = 200
    pretrain_batch_size: int = 8
    pretrain_max_minutes: float = 0.0  # > 0: stop pretraining after this long (then the base depends on the machine)
    # the SSM adapter
    mixer: str = "pd_ssm"
    # After the first decoder layer: its features are close to the words and depend little on the story's length
    # (the adapter's own default, the last layer, trained more slowly here; see RESULTS.md).
    layer_index: int = 0
    state_size: int = 8
    num_heads: int = 2
    dict_size: int = 16
    temperature: float = 0.1
    # PD-SSM x_0 (HybridSSMConfig.pd_ssm_initial_state): "zeros" (docs/design.md §4), "one_hot" (an automaton's start
    # state) or "learned"
    initial_state: str = "zeros"
    # PD-SSM input map (HybridSSMConfig.pd_ssm_input): "projection" (b_t = B u_t) or "none" (no B: the state is x_0
    # moved by the transitions alone; needs a non-zero initial_state)
    input_map: str = "projection"
    # PD-SSM transition (HybridSSMConfig.pd_ssm_transition): "dictionary" (P_t = column-argmax of a mix of K
    # score matrices, per token) or "bank" (K fixed one-hot matrices, one picked per token; docs/design.md §4.4)
    transition: str = "dictionary"
    # PD-SSM: added to the diagonal of every dictionary (bank) score matrix at init; None = the adapter's
    # near-identity start (1.0, so P = I at first). In bank mode a strong diagonal on every entry saturates the
    # straight-through column softmax and the entries barely move (RESULTS.md, issue 15); 0 starts them random.
    dictionary_diagonal_init: float | None = None
    # Mixer parameters kept at their (near-identity) start: for the PD-SSM, D's magnitude and phase MLPs, so the
    # state is carried by the exact permutations P (a trained D fits the training lengths but drifts on longer
    # stories; RESULTS.md). "" trains everything.
    frozen_mixer_parameters: str = "magnitude,phase"
    # data
    train_min_transitions: int = 1
    train_max_transitions: int = 10
    test_buckets: str = "1-10,11-20,21-30,31-45,46-60,61-80"
    distractor_prob: float = 0.0
    supervision: str = "dense"
    # "answers": cross-entropy over the answer words at the question; "vocab": next-token cross-entropy over the
    # whole vocabulary there (then generate() itself names the answer; see RESULTS.md for its effect).
    answer_loss: str = "answers"
    eval_samples_per_bucket: int = 128
    fewshot_examples: int = 4  # method "fewshot": solved stories (of the training lengths) before each test story
    # Training stories: 0 = a fresh story every step; N > 0 = a pool of N stories cycled (epochs), which is what
    # lets the frozen-prefix feature cache pay off.
    train_examples: int = 0
    # Frozen-prefix feature cache of the SSM adapter methods (hf_ssm.adapters.feature_cache): the base's hidden
    # states after the adapter's layer, computed once per training story: "memory", "disk" (memory-mapped file
    # in the method's folder) or "off"; stored in feature_cache_dtype, at most feature_cache_max_mb. Used only
    # when stories repeat (train_examples > 0).
    feature_cache: str = "memory"
    feature_cache_dtype: str = "bfloat16"
    feature_cache_max_mb: float = 2048.0
    # training
    batch_size: int = 32
    eval_batch_size: int = 32
    max_steps: int = 600
    learning_rate: float = 1e-2
    lora_learning_rate: float = 3e-3  # LoRA's usual range; the SSM adapter and the probe use learning_rate
    # Learning rate of the SSM adapter's readout (the classifier, or out_proj of the LM-head readout); 0 = the
    # adapter's learning_rate. A wide base's readout moves its logits ~lr x width per Adam step (RESULTS.md).
    readout_learning_rate: float = 0.0
    warmup_steps: int = 30
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    eval_every: int = 100
    target_accuracy: float = 0.99
    min_steps: int = 400  # no early stop before this: length generalisation keeps improving after the fit
    max_minutes_per_method: float = 0.0
    save_every: int = 0
    seed: int = 0

    def validate(self) -> None:
        check_choice("task", self.task, NL_TASK_NAMES)
        check_choice("supervision", self.supervision, SUPERVISION)
        check_choice("answer_loss", self.answer_loss, ANSWER_LOSSES)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("initial_state", self.initial_state, PD_SSM_INITIAL_STATES)
        check_choice("input_map", self.input_map, PD_SSM_INPUTS)
        check_choice("transition", self.transition, PD_SSM_TRANSITIONS)
        if self.input_map == "none" and self.initial_state == "zeros":
            raise ValueError("`input_map='none'` needs a non-zero `initial_state` (one_hot, head_basis or learned)")
        check_choice("feature_cache", self.feature_cache, FEATURE_CACHES)
        check_choice("feature_cache_dtype", self.feature_cache_dtype, tuple(STORE_DTYPES))
        if not self.feature_cache_max_mb >= 0:
            raise ValueError(f"`feature_cache_max_mb` must be >= 0, got {self.feature_cache_max_mb}")
        if not self.readout_learning_rate >= 0:
            raise ValueError(
                f"`readout_learning_rate` must be >= 0 (0: learning_rate), got {self.readout_learning_rate}"
            )
        if self.train_examples < 0:
            raise ValueError(f"`train_examples` must be >= 0 (0: a fresh story every step), got {self.train_examples}")
        unknown = [m for m in self.method_list() if m not in METHODS]
        if unknown or not self.method_list():
            raise ValueError(f"`methods` must be a comma-separated subset of {list(METHODS)}, got {self.methods!r}")
        if not 1 <= self.train_min_transitions <= self.train_max_transitions:
            raise ValueError(
                "need 1 <= train_min_transitions <= train_max_transitions, got "
                f"[{self.train_min_transitions}, {self.train_max_transitions}]"
            )
        self.bucket_list()  # raises on a malformed `test_buckets`
        if self.fewshot_examples < 0:
            raise ValueError(f"`fewshot_examples` must be >= 0, got {self.fewshot_examples}")
        for name in ("batch_size", "eval_batch_size", "max_steps", "eval_every", "eval_samples_per_bucket"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        for name in ("tiny_hidden_size", "tiny_layers", "tiny_heads", "state_size", "num_heads", "dict_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        if self.pretrain_steps < 0:
            raise ValueError(f"`pretrain_steps` must be >= 0, got {self.pretrain_steps}")
        if not 0 <= self.distractor_prob < 1:
            raise ValueError(f"`distractor_prob` must be in [0, 1), got {self.distractor_prob}")
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(f"`target_accuracy` must be in (0, 1], got {self.target_accuracy}")
        self.adapter_config()  # raises on a bad mixer / layer index type

    def method_list(self) -> list[str]:
        return [m.strip() for m in self.methods.split(",") if m.strip()]

    def bucket_list(self) -> list[tuple[int, int]]:
        """`test_buckets` "1-10,11-20" -> [(1, 10), (11, 20)]."""
        out = []
        for part in self.test_buckets.split(","):
            try:
                low, high = (int(x) for x in part.strip().split("-"))
            except ValueError:
                raise ValueError(
                    f"`test_buckets` must look like '1-10,11-20' (ranges of transition counts), got {self.test_buckets!r}"
                ) from None
            if not 1 <= low <= high:
                raise ValueError(f"`test_buckets` range {part.strip()!r} must satisfy 1 <= low <= high")
            out.append((low, high))
        if not out:
            raise ValueError("`test_buckets` is empty")
        return out

    def adapter_config(self) -> SSMAdapterConfig:
        settings = {}
        if self.mixer == "pd_ssm":
            settings = {
                "pd_ssm_head_state_size": self.state_size,
                "pd_ssm_num_heads": self.num_heads,
                "pd_ssm_dict_size": self.dict_size,
                "pd_ssm_temperature": self.temperature,
                "pd_ssm_initial_state": self.initial_state,
                "pd_ssm_input": self.input_map,
                "pd_ssm_transition": self.transition,
            }
            if self.dictionary_diagonal_init is not None:
                settings["pd_ssm_dictionary_diagonal_init"] = self.dictionary_diagonal_init
        frozen = [n.strip() for n in self.frozen_mixer_parameters.split(",") if n.strip()]
        return SSMAdapterConfig(
            mixer=self.mixer, mixer_settings=settings, layer_index=self.layer_index, frozen_mixer_parameters=frozen
        )


# --- the base model ----------------------------------------------------------------------------------------


def prepare_base(settings: AdapterExperimentSettings, run_dir: Path, accelerator) -> tuple[str, dict]:
    """Where the base loads from, and how it was made. The tiny base is built and pretrained once into
    run_dir/base (reused by a resumed run); any other `base_model` is a hub id or local path."""
    if settings.base_model in NAMED_BASES:
        named = NAMED_BASES[settings.base_model]
        info = {"base_model": settings.base_model, "description": named.description, "gguf_file": named.gguf_file}
        return settings.base_model, info
    if settings.base_model != TINY_BASE:
        return settings.base_model, {"base_model": settings.base_model}
    path = run_dir / "base"
    info_path = run_dir / "base_info.json"
    if (path / "config.json").is_file() and info_path.is_file():
        return str(path), json.loads(info_path.read_text())
    tasks = [get_nl_task(name) for name in NL_TASK_NAMES]
    tokenizer = build_word_tokenizer(task_vocabulary(tasks))
    longest = max(high for _, high in settings.bucket_list())
    model = build_tiny_qwen2(
        len(tokenizer),
        hidden_size=settings.tiny_hidden_size,
        num_layers=settings.tiny_layers,
        num_heads=settings.tiny_heads,
        max_positions=32 * longest + 512,
        seed=settings.seed,
    )
    info = {
        "base_model": "tiny Qwen2 (built in)",
        "hidden_size": settings.tiny_hidden_size,
        "layers": settings.tiny_layers,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
    }
    if settings.pretrain_steps:
        # Narratives of every task and of every test length, but never a question or an answer.
        texts = narrative_corpus(
            tasks,
            settings.pretrain_steps * settings.pretrain_batch_size,
            1,
            longest,
            settings.seed + 7,
            group_size=settings.pretrain_batch_size,
        )
        info["pretraining"] = pretrain_language_model(
            model,
            tokenizer,
            texts,
            settings.pretrain_steps,
            accelerator,
            batch_size=settings.pretrain_batch_size,
            max_seconds=60 * settings.pretrain_max_minutes if settings.pretrain_max_minutes else None,
        )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    info_path.write_text(json.dumps(info, indent=2))
    return str(path), info


def load_base(source: str, dtype: str, device):
    """A fresh copy of the base (model in eval mode, left-padding tokenizer). The first call for a source loads it
    (`hf_ssm.adapters.bases.load_base`: named base, local path or hub id); later calls in this process copy it,
    so the methods of one run do not each pay the load (about 20 s to a minute for a GGUF base)."""
    key = (source, dtype, str(device))
    if key not in _LOADED_BASES:
        _LOADED_BASES.clear()  # one base at a time in memory
        _LOADED_BASES[key] = _load_base(source, dtype, device)
    model, tokenizer = _LOADED_BASES[key]
    return copy.deepcopy(model), copy.deepcopy(tokenizer)


_LOADED_BASES: dict = {}


# --- methods -----------------------------------------------------------------------------------------------


class LastHiddenStateProbe(nn.Module):
    """A linear classifier on the frozen base's last hidden state (after its final norm).

    forward(input_ids, attention_mask, position_ids, logits_to_keep (K,) positions) -> class logits (B, K, C).
    """

    def __init__(self, base: nn.Module, num_classes: int):
        super().__init__()
        self.base = base
        self.decoder = find_decoder_layers(base)[0]
        width = base.config.get_text_config().hidden_size
        self.head = nn.Linear(width, num_classes)
        base.requires_grad_(False)

    @torch.no_grad()
    def features(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        """The frozen base's last hidden state (B, T, d): what the probe reads (cacheable, see feature_cache)."""
        return self.decoder(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep):
        with torch.no_grad():
            hidden = self.decoder(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state[:, logits_to_keep]
        return self.head(hidden.float())


class PrefixLoRAClassifier(nn.Module):
    """LoRA on the attention projections of decoder layers 0..k, and a linear classifier on the normalised hidden
    state after layer k (k = `layer_index`): the LoRA baseline with the `ssm_classifier` method's readout, depth
    and trainable-parameter budget. The layers above k are never run.

    forward(input_ids, attention_mask, position_ids, logits_to_keep (K,) positions) -> class logits (B, K, C).
    """

    def __init__(self, base: nn.Module, layer_index: int, num_classes: int, rank: int):
        super().__init__()
        base.requires_grad_(False)
        layers = self.prefix_layers(base, layer_index)
        self.k = layers[-1]
        self.peft = add_lora(base, rank, ATTENTION_TARGETS, layers=layers)
        self.layers = find_decoder_layers(self.peft)[1]
        width = base.config.get_text_config().hidden_size
        self.norm = nn.RMSNorm(width, elementwise_affine=False)
        self.head = nn.Linear(width, num_classes)

    @staticmethod
    def prefix_layers(base: nn.Module, layer_index: int) -> range:
        """The decoder layers 0..k that get LoRA, k = `layer_index` (negative counts from the end)."""
        count = len(find_decoder_layers(base)[1])
        if not -count <= layer_index < count:
            raise ValueError(f"`layer_index` must be in [{-count}, {count - 1}] for this base, got {layer_index}")
        return range(layer_index % count + 1)

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        hidden = run_to_layer(self.peft, self.layers[self.k], **inputs)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        return self.head(self.norm(hidden[:, logits_to_keep].float()))


def build_method(method: str, settings: AdapterExperimentSettings, base, num_classes: int):
    """(model to train, its trainable parameters, extra info) for one method on a fresh copy of the base."""
    info = {}
    if method == "probe":
        model = LastHiddenStateProbe(base, num_classes)
    elif method == "lora":
        base.requires_grad_(False)
        adapter = SSMAdapter(settings.adapter_config(), base.config.hidden_size)
        budget = sum(p.numel() for p in adapter.parameters() if p.requires_grad)
        rank = lora_rank_for_budget(base, budget)
        info = {"lora_rank": rank, "lora_parameters_per_rank": lora_parameters_per_rank(base)}
        model = add_lora(base, rank)
    elif method == "lora_classifier":
        config = dataclasses.replace(settings.adapter_config(), readout="classifier", num_labels=num_classes)
        adapter = SSMAdapter(config, base.config.get_text_config().hidden_size)
        budget = sum(p.numel() for p in adapter.parameters() if p.requires_grad)  # frozen D MLPs do not count
        layers = PrefixLoRAClassifier.prefix_layers(base, settings.layer_index)
        rank = lora_rank_for_budget(base, budget, ATTENTION_TARGETS, layers=layers)
        info = {
            "lora_rank": rank,
            "lora_parameters_per_rank": lora_parameters_per_rank(base, ATTENTION_TARGETS, layers),
        }
        model = PrefixLoRAClassifier(base, settings.layer_index, num_classes, rank)
    elif method == "ssm_classifier":
        config = dataclasses.replace(settings.adapter_config(), readout="classifier", num_labels=num_classes)
        model = attach_ssm_adapter(base, config)
    elif method in ("ssm", "ssm_lora"):
        model = attach_ssm_adapter(base, settings.adapter_config())
        if method == "ssm_lora":
            rank = lora_rank_for_budget(base, sum(p.numel() for p in model.adapter_parameters()))
            info = {"lora_rank": rank}
            add_lora(model.base_model, rank)
    else:
        raise ValueError(f"unknown method {method!r}; accepted: {list(METHODS)}")
    params = [p for p in model.parameters() if p.requires_grad]
    return model, params, info


def parameter_groups(method: str, model, settings: AdapterExperimentSettings) -> list[dict]:
    """AdamW parameter groups of a method's trainable parameters: the SSM adapter's readout (classifier or
    out_proj) at `readout_learning_rate` when it is set, everything else at `learning_rate` (LoRA:
    `lora_learning_rate`)."""
    lr = settings.lora_learning_rate if method in ("lora", "lora_classifier") else settings.learning_rate
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if method not in ("ssm", "ssm_classifier", "ssm_lora") or not settings.readout_learning_rate:
        return [{"params": [p for _, p in named], "lr": lr}]
    readout = [p for n, p in named if n.startswith(("ssm_adapter.classifier.", "ssm_adapter.out_proj."))]
    if not readout:
        raise ValueError(f"`readout_learning_rate`: found no readout parameters in {[n for n, _ in named]}")
    ids = {id(p) for p in readout}
    return [
        {"params": [p for _, p in named if id(p) not in ids], "lr": lr},
        {"params": readout, "lr": settings.readout_learning_rate},
    ]


def _scores(
    method: str,
    model,
    batch: dict,
    answer_ids: torch.Tensor,
    device,
    dense: bool = False,
    vocab_loss: bool = False,
    features: torch.Tensor | None = None,
):
    """(loss, predicted answer class at the last position (B,)) of one left-padded batch.

    Predictions: the LM-head methods take the arg-max over the LM-head logits of the answer words' first tokens,
    the probe its own head. Loss: cross-entropy over the answer classes at the last position (after "Answer:"),
    or with `vocab_loss` the next-token cross-entropy there over the whole vocabulary (LM-head methods); with
    `dense`, also the cross-entropy over the answer classes at the end of every transition sentence.
    `features` (B, L, d): the base's hidden states after the adapter's layer (frozen-prefix cache), used instead
    of running the layers up to it. The classifier readout never runs the layers above the adapter.
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
    if method == "ssm_classifier":
        adapted = _unwrapped(model)
        hidden = FrozenPrefix(adapted).features(**inputs) if features is None else features
        mask = inputs["attention_mask"].bool()
        scores = adapted.ssm_adapter(hidden, mask=None if bool(mask.all()) else mask)[0][:, keep].float()
        final_loss = nn.functional.cross_entropy(scores[:, -1], batch["label"].to(device), reduction="sum")
    elif method == "lora_classifier":
        scores = model(**inputs, logits_to_keep=keep)
        final_loss = nn.functional.cross_entropy(scores[:, -1], batch["label"].to(device), reduction="sum")
    elif method == "probe":
        if features is None:
            scores = model(**inputs, logits_to_keep=keep).float()
        else:
            scores = _unwrapped(model).head(features[:, keep])
        final_loss = nn.functional.cross_entropy(scores[:, -1], batch["label"].to(device), reduction="sum")
    else:
        # With the answer-word loss only the answer words' rows of the LM head are needed: a 49k-word head over
        # every supervised position would cost more than the rest of the step on a CPU.
        forward = _full_logits if vocab_loss or not _head_is_linear(model) else _answer_logits
        if features is None:
            logits = forward(model, inputs, keep, answer_ids)
        else:
            with FrozenPrefix(_unwrapped(model)).replaced_by(features):
                logits = forward(model, inputs, keep, answer_ids)
        scores = logits.float() if forward is _answer_logits else logits[..., answer_ids].float()
        if vocab_loss:
            final_loss = nn.functional.cross_entropy(
                logits[:, -1].float(), batch["answer_token"].to(device), reduction="sum"
            )
        else:
            final_loss = nn.functional.cross_entropy(scores[:, -1], batch["label"].to(device), reduction="sum")
    index = torch.searchsorted(keep, positions.clamp_min(0))
    picked = scores.gather(1, index.unsqueeze(-1).expand(-1, -1, scores.shape[-1]))
    dense_loss = nn.functional.cross_entropy(picked.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
    count = (labels != -100).sum() + scores.shape[0]
    return (dense_loss + final_loss) / count, scores[:, -1].argmax(-1)


def _full_logits(model, inputs: dict, keep: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """LM-head logits (B, K, V) over the whole vocabulary at the positions `keep` (K,)."""
    return model(**inputs, use_cache=False, logits_to_keep=keep).logits


def _answer_logits(model, inputs: dict, keep: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """The LM-head logits of the answer words only (B, K, C) at the positions `keep` (K,): the base's decoder
    (with the adapter's hook and any LoRA in it) to its final norm, then the head's rows `answer_ids`. Equal to
    `_full_logits(...)[..., answer_ids]` for a plain linear LM head (`_head_is_linear`)."""
    base = _causal_lm(model)
    decoder = find_decoder_layers(base)[0]
    hidden = decoder(**inputs, use_cache=False).last_hidden_state[:, keep]
    head = base.get_output_embeddings()
    bias = None if head.bias is None else head.bias[answer_ids]
    return nn.functional.linear(hidden, head.weight[answer_ids], bias)


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


def fewshot_prefix(task, tokenizer, settings: AdapterExperimentSettings) -> list[int]:
    """Token ids of `settings.fewshot_examples` solved stories ("... Answer: on" + blank line), of the training
    lengths, that method "fewshot" puts before every test story (the untrained base answers from them)."""
    import random

    rng = random.Random(f"hf_ssm.fewshot:{settings.task}:{settings.seed}")
    text = ""
    for _ in range(settings.fewshot_examples):
        count = rng.randint(settings.train_min_transitions, settings.train_max_transitions)
        story = task.sample(count, rng, settings.distractor_prob)
        text += f"{story.prompt} {story.answer_word}\n\n"
    return tokenizer.encode(text, add_special_tokens=False)


def _after_examples(item: dict, examples: list[int]) -> dict:
    """A dataset item with the few-shot examples' tokens before its story (only the final answer is asked)."""
    ids = torch.cat([torch.tensor(examples, dtype=torch.long), item["input_ids"]])
    out = {**item, "input_ids": ids, "length": len(ids)}
    out["supervised_positions"] = torch.tensor([len(ids) - 1])
    out["supervised_labels"] = torch.tensor([item["label"]])
    return out


@torch.no_grad()
def evaluate(method, model, task, tokenizer, buckets, settings, seed, device) -> dict:
    """Accuracy at the question for fresh stories in each bucket of transition counts."""
    answer_ids = torch.tensor(answer_token_ids(task, tokenizer), device=device)
    examples = fewshot_prefix(task, tokenizer, settings) if method == "fewshot" else []
    was_training = model.training
    model.eval()
    results = []
    for low, high in buckets:
        data = NLStateTrackingDataset(
            task, tokenizer, settings.eval_samples_per_bucket, low, high, seed + low, settings.distractor_prob
        )
        correct, tokens = 0, []
        for start in range(0, len(data), settings.eval_batch_size):
            items = [data[i] for i in range(start, min(len(data), start + settings.eval_batch_size))]
            if method == "fewshot":
                items = [_after_examples(item, examples) for item in items]
            batch = collate_nl_state_tracking(items, tokenizer.pad_token_id)
            _, pred = _scores(method, model, batch, answer_ids, device)
            correct += int((pred.cpu() == batch["label"]).sum())
            tokens += batch["length"].tolist()
        results.append(
            {
                "min_transitions": low,
                "max_transitions": high,
                "accuracy": correct / len(data),
                "mean_tokens": sum(tokens) / len(tokens),
                "max_tokens": max(tokens),
            }
        )
    model.train(was_training)
    return {"buckets": results, "mean_accuracy": sum(r["accuracy"] for r in results) / len(results)}


def _trainable_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def _evaluate_untrained(settings, base, tokenizer, task, method_dir: Path, device) -> dict:
    """Method "fewshot": the base as it is, answering after `fewshot_examples` solved stories."""
    began, cpu_began = time.perf_counter(), time.process_time()
    test = evaluate("fewshot", base, task, tokenizer, settings.bucket_list(), settings, 20_000, device)
    result = {
        "method": "fewshot",
        "readout": READOUT_OF_METHOD["fewshot"],
        "task": settings.task,
        "trainable_parameters": 0,
        "steps": 0,
        "train_seconds": 0.0,
        "eval_seconds": time.perf_counter() - began,
        "cpu_seconds": time.process_time() - cpu_began,
        "history": [],
        "test": test,
        "fewshot_prefix_tokens": len(fewshot_prefix(task, tokenizer, settings)),
        "settings": asdict(settings),
    }
    method_dir.mkdir(parents=True, exist_ok=True)
    (method_dir / "results.json").write_text(json.dumps(result, indent=2))
    return result


def _save_trainable_checkpoint(target: Path, model, optimizer, scheduler, metadata: dict) -> None:
    """A checkpoint of the trainable parameters only (trainable.safetensors) and the optimizer and schedule
    states (optimizer.pt): the frozen base is never copied. Crash-safe (checkpointing.atomic_save_dir)."""
    from safetensors.torch import save_file

    def write(tmp: Path):
        save_file(_trainable_state(model), str(tmp / "trainable.safetensors"))
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "optimizer.pt")

    atomic_save_dir(target, write, metadata)
    prune_checkpoints(target.parent, keep=2)


def _load_trainable_checkpoint(folder: Path, model, optimizer, scheduler, device) -> dict:
    """Restore what `_save_trainable_checkpoint` wrote into `model`, `optimizer`, `scheduler`; returns its
    metadata."""
    from safetensors.torch import load_file

    named = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in load_file(str(folder / "trainable.safetensors")).items():
            named[name].copy_(value)
    state = torch.load(folder / "optimizer.pt", map_location=device)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return read_metadata(folder)


def train_method(method, settings, base_source, run_dir: Path, accelerator, resume: bool = False) -> dict:
    """Train and evaluate one method on a fresh copy of the base; writes run_dir/<method>/.

    The loop is the shared skeleton (training/loop.py), one unit per optimizer step: validation on the training
    lengths every `eval_every` steps, after the last and when `max_minutes_per_method` has run out; an early stop
    at `target_accuracy` from `min_steps` on; a checkpoint every `save_every` steps (`_save_trainable_checkpoint`).
    """
    from safetensors.torch import save_file

    method_dir = run_dir / method
    if resume and (method_dir / "results.json").is_file():
        return json.loads((method_dir / "results.json").read_text())
    task = get_nl_task(settings.task)
    base, tokenizer = load_base(base_source, settings.dtype, accelerator.device)
    if method == "fewshot":
        return _evaluate_untrained(settings, base, tokenizer, task, method_dir, accelerator.device)
    torch.manual_seed(settings.seed)
    model, params, info = build_method(method, settings, base, task.num_classes)
    model.to(accelerator.device)
    optimizer = torch.optim.AdamW(parameter_groups(method, model, settings), weight_decay=settings.weight_decay)
    scheduler = warmup_cosine_schedule(optimizer, settings.warmup_steps, settings.max_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    answer_ids = torch.tensor(answer_token_ids(task, tokenizer), device=accelerator.device)
    tokenization = check_sentence_tokenization(task, tokenizer)  # ValueError when a sentence end is inside a token
    pool = settings.train_examples or settings.max_steps * settings.batch_size
    train_data = NLStateTrackingDataset(
        task,
        tokenizer,
        pool,
        settings.train_min_transitions,
        settings.train_max_transitions,
        settings.seed,
        settings.distractor_prob,
    )
    checkpoints = method_dir / "checkpoints"
    start, history = 0, []
    if resume and (found := latest_checkpoint(checkpoints)) is not None:
        unwrapped = accelerator.unwrap_model(model)
        meta = _load_trainable_checkpoint(found, unwrapped, optimizer, scheduler, accelerator.device)
        start, history = meta["step"], meta["history"]
    trainable = sum(p.numel() for p in params)
    prefix = store = None
    if method in CACHED_METHODS and settings.feature_cache != "off" and settings.train_examples:
        unwrapped = accelerator.unwrap_model(model)
        prefix = unwrapped if method == "probe" else FrozenPrefix(unwrapped)
        store = FeatureStore(
            int(settings.feature_cache_max_mb * 2**20),
            settings.feature_cache_dtype,
            path=method_dir / "feature_cache.bin" if settings.feature_cache == "disk" else None,
        )
    val_bucket = [(settings.train_min_transitions, settings.train_max_transitions)]
    clock = loop.Stopwatch()  # this call's time only: a resumed method counts from the resume
    last = {}  # the loss of the latest step

    def train_step(step: int) -> None:
        indices = [(step * settings.batch_size + i) % pool for i in range(settings.batch_size)]
        batch = collate_nl_state_tracking([train_data[i] for i in indices], tokenizer.pad_token_id)
        features = None if store is None else batch_features(prefix, store, indices, batch, accelerator.device)
        loss, _ = _scores(
            method,
            model,
            batch,
            answer_ids,
            accelerator.device,
            dense=settings.supervision == "dense",
            vocab_loss=settings.answer_loss == "vocab",
            features=features,
        )
        loop.optimizer_step(accelerator, loss, optimizer, scheduler, params, settings.grad_clip)
        last["loss"] = loss.detach()

    def validation(step: int) -> dict:
        val = evaluate(method, model, task, tokenizer, val_bucket, settings, 10_000 + step, accelerator.device)
        loss = last["loss"].item()
        history.append({"step": step, "loss": loss, "val_accuracy": val["mean_accuracy"]})
        return {"loss": f"{loss:.3f}", "val": f"{val['mean_accuracy']:.3f}"}

    def reached_target(step: int) -> bool:
        return history[-1]["val_accuracy"] >= settings.target_accuracy and step >= settings.min_steps

    def out_of_time() -> bool:
        return bool(settings.max_minutes_per_method) and clock.seconds > 60 * settings.max_minutes_per_method

    def save(step: int) -> None:
        if accelerator.is_main_process:  # the trainable weights are the same in every process
            target = checkpoints / f"step_{step}"
            meta = {"step": step, "history": history}
            _save_trainable_checkpoint(target, accelerator.unwrap_model(model), optimizer, scheduler, meta)

    model.train()
    loop.run_training(
        accelerator, desc=f"{settings.task}/{method}", start=start, total=settings.max_steps,
        train_unit=train_step, evaluate=validation, eval_every=settings.eval_every, should_stop=reached_target,
        out_of_time=out_of_time, save=save, save_every=settings.save_every,
    )  # fmt: skip
    train_seconds = clock.seconds
    if store is not None and store.path is not None:
        store.path.unlink()  # a cache, not a result: it can be hundreds of MB
    steps_done = history[-1]["step"] if history else start

    eval_began = time.perf_counter()
    test = evaluate(method, model, task, tokenizer, settings.bucket_list(), settings, 20_000, accelerator.device)
    result = {
        "method": method,
        "readout": READOUT_OF_METHOD[method],
        "task": settings.task,
        "trainable_parameters": trainable,
        "steps": steps_done,
        "train_seconds": train_seconds,
        "eval_seconds": time.perf_counter() - eval_began,
        # CPU time of this process (all its threads) for training + evaluation; with OMP_NUM_THREADS=1 it is
        # what the method cost, whatever else shared the machine.
        "cpu_seconds": clock.cpu_seconds,
        "history": history,
        "test": test,
        "train_examples": pool,
        "tokenization_check": tokenization,
        "feature_cache": None
        if store is None
        else {
            "dtype": settings.feature_cache_dtype,
            "examples": len(store),
            "bytes": store.nbytes,
            "skipped": store.skipped,
        },
        **info,
        "settings": asdict(settings),
    }
    unwrapped = accelerator.unwrap_model(model)
    method_dir.mkdir(parents=True, exist_ok=True)
    if method in ("ssm", "ssm_classifier", "ssm_lora"):
        unwrapped.save_pretrained(method_dir / "adapter")
        if method == "ssm_lora":
            # The LoRA weights sit inside the base; PEFT's own state-dict helper extracts them.
            from peft import get_peft_model_state_dict

            lora_state = {k: v.contiguous() for k, v in get_peft_model_state_dict(unwrapped.base_model).items()}
            save_file(lora_state, str(method_dir / "adapter" / "lora_weights.safetensors"))
    elif method == "lora":
        unwrapped.save_pretrained(method_dir / "adapter")
    elif method == "lora_classifier":
        unwrapped.peft.save_pretrained(method_dir / "adapter")  # the LoRA weights and their PEFT config
        head = {f"head.{k}": v.contiguous() for k, v in unwrapped.head.state_dict().items()}
        save_file(head, str(method_dir / "classifier.safetensors"))
    else:
        save_file(
            {k: v.contiguous() for k, v in unwrapped.head.state_dict().items()}, str(method_dir / "probe.safetensors")
        )
    (method_dir / "results.json").write_text(json.dumps(result, indent=2))
    return result


# --- reporting ---------------------------------------------------------------------------------------------


def model_name(result: dict) -> str:
    """Short name of a method's model for summaries: "pd_ssm adapter @L3", "lora r=4", "linear probe"."""
    settings = result["settings"]
    if result["method"] == "probe":
        return "linear probe (last hidden state)"
    if result["method"] == "fewshot":
        return f"untrained base, {result['settings']['fewshot_examples']}-shot"
    if result["method"] == "lora":
        return f"lora r={result['lora_rank']}"
    if result["method"] == "lora_classifier":
        return (
            f"lora r={result['lora_rank']} (attention, layers 0-{settings['layer_index']}) @L{settings['layer_index']}"
        )
    name = f"{settings['mixer']} adapter @L{settings['layer_index']}"
    return name + (f" + lora r={result['lora_rank']}" if result["method"] == "ssm_lora" else "")


def summary_records(summary: dict, run_dir: str) -> list[dict]:
    """One record per method of a run, for results/adapter/summary.json."""
    records = []
    for r in summary["results"]:
        records.append(
            {
                "base": summary["base"].get("base_model", summary["base_source"]),
                "task": summary["task"],
                "model": model_name(r),
                "method": r["method"],
                "readout": r["readout"],
                "seed": r["settings"]["seed"],
                "trainable_params": r["trainable_parameters"],
                "cpu_seconds": round(r["cpu_seconds"], 1),
                "wall_seconds": round(r["train_seconds"] + r["eval_seconds"], 1),
                "steps": r["steps"],
                "train_transitions": [r["settings"]["train_min_transitions"], r["settings"]["train_max_transitions"]],
                "accuracy_by_transitions": {
                    f"{b['min_transitions']}-{b['max_transitions']}": round(b["accuracy"], 4)
                    for b in r["test"]["buckets"]
                },
                "eval_samples_per_bucket": r["settings"]["eval_samples_per_bucket"],
                "mean_tokens_by_transitions": {
                    f"{b['min_transitions']}-{b['max_transitions']}": round(b["mean_tokens"], 1)
                    for b in r["test"]["buckets"]
                },
                "run_dir": run_dir,
            }
        )
    return records


def update_summary_json(path, records: list[dict]) -> None:
    """Merge `records` into the JSON list at `path`: a record of the same run, method and seed is replaced."""
    path = Path(path)
    old = json.loads(path.read_text()) if path.is_file() else []
    key = lambda r: (r["run_dir"], r["method"], r["seed"])  # noqa: E731
    new_keys = {key(r) for r in records}
    merged = [r for r in old if key(r) not in new_keys] + records
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=1) + "\n")


def results_table(results: list[dict], num_classes: int | None = None) -> str:
    """Markdown: one row per method, accuracy (%) per bucket of transitions."""
    buckets = results[0]["test"]["buckets"]
    cols = [f"{b['min_transitions']}-{b['max_transitions']}" for b in buckets]
    lines = [
        "| method | trainable params | steps | train s | " + " | ".join(cols) + " |",
        "|" + "---|" * (4 + len(cols)),
    ]
    for r in results:
        accs = " | ".join(f"{100 * b['accuracy']:.1f}" for b in r["test"]["buckets"])
        lines.append(
            f"| {r['method']} | {r['trainable_parameters']} | {r['steps']} | {r['train_seconds']:.0f} | {accs} |"
        )
    if num_classes:
        lines.append("| chance | | | | " + " | ".join(f"{100 / num_classes:.1f}" for _ in cols) + " |")
    return "\n".join(lines)


def plot_results(results: list[dict], settings: AdapterExperimentSettings, num_classes: int, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        xs = [(b["min_transitions"] + b["max_transitions"]) / 2 for b in r["test"]["buckets"]]
        ax.plot(xs, [b["accuracy"] for b in r["test"]["buckets"]], marker="o", label=r["method"])
    ax.axvspan(settings.train_min_transitions, settings.train_max_transitions, color="grey", alpha=0.15, label="train")
    ax.axhline(1 / num_classes, color="black", linestyle=":", label="chance")
    ax.set(
        title=f"{settings.task} (NL stories)",
        xlabel="transitions in the story",
        ylabel="answer accuracy",
        ylim=(0, 1.02),
    )
    ax.legend()
    save_figure(fig, path)


def model_card(settings: AdapterExperimentSettings, base_info: dict, ssm: dict, table: str) -> str:
    """A Hugging Face model card (YAML front matter) for the trained SSM adapter."""
    tiny = settings.base_model == TINY_BASE
    config = settings.adapter_config()
    base = "the built-in tiny Qwen2 of scripts/train_adapter.py, not on the hub" if tiny else settings.base_model
    load_base = (
        "from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast\n"
        'base = AutoModelForCausalLM.from_pretrained("<run folder>/base")\n'
        'tokenizer = PreTrainedTokenizerFast.from_pretrained("<run folder>/base")  # word level'
        if tiny
        else "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f'base = AutoModelForCausalLM.from_pretrained("{settings.base_model}")\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{settings.base_model}", padding_side="left")'
    )
    named = NAMED_BASES.get(settings.base_model)
    if named is not None:
        base = f"{settings.base_model}: {named.description}"
        load_base = f'from hf_ssm.adapters import load_base\n\nbase, tokenizer = load_base("{settings.base_model}")'
    classifier = ssm["method"] == "ssm_classifier"
    defaults = asdict(AdapterExperimentSettings())
    reproduce = " ".join(
        f"--{k} {v if v != '' else repr('')}" for k, v in asdict(settings).items() if v != defaults[k] or k == "task"
    )
    branch = (
        "as a side branch: logits = W_cls Mixer(Norm(h)) (its own classifier over the answer classes; the base's "
        "hidden states and logits are untouched)"
        if classifier
        else "as a residual branch h <- h + W_out Mixer(Norm(h)), W_out zero-initialised"
    )
    read = (
        'scores = model(**batch)["adapter_logits"][:, -1]  # (B, num_classes): the answer classes, in task order'
        if classifier
        else "scores = model(**batch).logits[:, -1, answer_token_ids]  # hf_ssm.data.nl_state_tracking.answer_token_ids"
    )
    data = ModelCardData(
        library_name="hf_ssm",
        license="apache-2.0",
        base_model=None if tiny else (named.hub_id if named else settings.base_model),
        tags=["ssm-adapter", config.mixer.replace("_", "-"), "state-tracking"],
        pipeline_tag="text-generation",
    )
    samples = settings.eval_samples_per_bucket
    body = f"""# SSM adapter ({config.mixer}) for natural-language {settings.task}

One {config.mixer} layer inserted after decoder layer {config.layer_index} of a frozen causal LM ({base}),
{branch}. Only the adapter was trained:
{ssm["trainable_parameters"]} trainable parameters, {ssm["steps"]} steps, {ssm["train_seconds"]:.0f} s on a shared
2-core CPU. Frozen mixer parameters: {config.frozen_mixer_parameters or "none"}. This folder holds no base weight.

Task: stories whose sentences are the transitions of the `{settings.task}` automaton, ending in a question answered
by one word (hf_ssm.data.nl_state_tracking). Trained on {settings.train_min_transitions}-{settings.train_max_transitions}
transitions, tested on longer stories. Answer accuracy (%) by number of transitions, with the other methods of the
same run (if any):

{table}

Base: {json.dumps(base_info)}

## Use

```python
{load_base}
from hf_ssm.adapters import load_ssm_adapter

model = load_ssm_adapter(base, "<this folder>")
batch = tokenizer([story], return_tensors="pt", padding=True)  # story ends with "Answer:"
{read}
```

Mixer settings: `{json.dumps(config.mixer_settings)}`. Reproduce with
`python scripts/train_adapter.py {reproduce}` (see docs/adapter.md).

## Limitations

- Trained and tested only on the generated stories of this task (their sentence templates, names and
  vocabulary); other phrasings, languages and tasks are untested.
- The accuracies above come from {samples} fresh stories per bucket and one training seed; how often the same
  command succeeds across seeds is reported in the project's RESULTS.md, not here.
- {"The classifier answers only with the task's answer classes; the base model's own generations are unchanged." if classifier else "The answer is read from the LM head's logits of the answer words; other generations of the adapted model are not evaluated."}
- A research artefact of the hf_ssm package, not a product: no safety or bias evaluation was done.
"""
    return check_model_card(f"---\n{data.to_yaml()}\n---\n\n" + body)


def run_experiment(settings: AdapterExperimentSettings, run_dir, resume: bool = False, model_card_dir=None) -> dict:
    """All methods of `settings` in one run; writes run_dir/{settings.json, results.json, plot, <method>/}."""
    # The run folder and its settings.json; resuming is per method (finished methods and their checkpoints,
    # run_dir/<method>/checkpoints), so there is no run-level checkpoint to check here.
    accelerator, run_dir, _ = loop.begin_run(settings, run_dir, resume=False, safe=())
    began = time.perf_counter()
    base_source, base_info = prepare_base(settings, run_dir, accelerator)
    base_seconds = time.perf_counter() - began
    task = get_nl_task(settings.task)
    results = [train_method(m, settings, base_source, run_dir, accelerator, resume) for m in settings.method_list()]
    table = results_table(results, task.num_classes)
    summary = {
        "task": settings.task,
        "base": base_info,
        "base_source": base_source,
        "base_seconds": base_seconds,
        "wall_seconds": time.perf_counter() - began,
        # Pretraining + every method's training and evaluation, also when a resumed run reused earlier work.
        "compute_seconds": base_info.get("pretraining", {}).get("seconds", 0.0)
        + sum(r["train_seconds"] + r["eval_seconds"] for r in results),
        "num_classes": task.num_classes,
        "settings": asdict(settings),
        "results": results,
    }
    (run_dir / "results.json").write_text(json.dumps(summary, indent=2))
    (run_dir / "results.md").write_text(table + "\n")
    plot_results(results, settings, task.num_classes, run_dir / "accuracy_vs_transitions.png")
    for r in results:
        if r["method"] in ("ssm", "ssm_classifier"):
            card = model_card(settings, base_info, r, table)
            (run_dir / r["method"] / "adapter" / "README.md").write_text(card)
            if model_card_dir is not None:
                base_path = Path(settings.base_model)
                # A tiny base reused from another run folder sits in <run>/base: name it after the run folder.
                base_name = base_path.parent.name if base_path.name == "base" else base_path.name
                base_name = "tiny-qwen2" if settings.base_model == TINY_BASE else base_name.lower()
                suffix = "-classifier" if r["method"] == "ssm_classifier" else ""
                name = f"ssm-adapter-{base_name}-{settings.task}{suffix}.md"
                Path(model_card_dir).mkdir(parents=True, exist_ok=True)
                (Path(model_card_dir) / name).write_text(card)
    return summary


__all__ = [
    "METHODS",
    "AdapterExperimentSettings",
    "LastHiddenStateProbe",
    "build_method",
    "evaluate",
    "load_base",
    "model_card",
    "model_name",
    "summary_records",
    "update_summary_json",
    "prepare_base",
    "results_table",
    "run_experiment",
    "train_method",
]
