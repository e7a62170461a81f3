"""The adapter experiment: natural-language state tracking on a frozen causal LM (docs/design.md §8, §10).

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

The pieces, one module each in this wing: the settings and presets (experiment_settings), the base and the
methods built on it (methods), scoring and evaluation (scoring), and what a run reports: summary records, table,
plot, model card (records). This module runs them in order (`run_experiment`) and trains one method at a time with
its trainable-only checkpoints, the frozen base never copied (`train_method`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ...adapters.feature_cache import FeatureStore, FrozenPrefix, batch_features
from ...data.nl_state_tracking import (
    NLStateTrackingDataset,
    answer_token_ids,
    check_sentence_tokenization,
    collate_nl_state_tracking,
)
from .. import loop
from ..checkpointing import (
    atomic_save_dir,
    check_resumed_settings,
    latest_checkpoint,
    prune_checkpoints,
    read_metadata,
    recorded_settings,
)
from ..optimization import warmup_cosine_schedule
from .experiment_settings import (
    CACHED_METHODS,
    READOUT_OF_METHOD,
    RESUME_SAFE_SETTINGS,
    SSM_ADAPTER_METHODS,
    TINY_BASE,
    AdapterExperimentSettings,
)
from .methods import build_method, load_base, parameter_groups, prepare_base
from .records import model_card, plot_results, results_table
from .scoring import evaluate, fewshot_prefix, score_batch


def check_resume_settings(settings: AdapterExperimentSettings, run_dir) -> None:
    """A resumed run keeps the settings it was started with (its settings.json): ValueError naming every changed
    setting outside RESUME_SAFE_SETTINGS, so that nothing in the folder is rewritten and no earlier method's
    result is reported under settings it was not trained with. A folder without settings.json starts afresh."""
    recorded = recorded_settings(run_dir)
    if recorded is not None:
        check_resumed_settings(settings, recorded, RESUME_SAFE_SETTINGS, run_dir)


def run_experiment(
    settings: AdapterExperimentSettings, run_dir, resume: bool = False, model_card_dir=None, validated: bool = False
) -> dict:
    """All methods of `settings` in one run; writes run_dir/{settings.json, results.json, plot, <method>/}.
    `validated`: the caller has run `settings.validate()` already (scripts/train_adapter.py does)."""
    if not validated:
        settings.validate()
    if resume:  # before settings.json (or anything else in the folder) is rewritten
        check_resume_settings(settings, run_dir)
    # The run folder and its settings.json; resuming is per method (finished methods and their checkpoints,
    # run_dir/<method>/checkpoints), so there is no run-level checkpoint to check here.
    accelerator, run_dir, _ = loop.begin_run(settings, run_dir, resume=False, safe=())
    task = settings.nl_task()  # the run's one resolution of its task (and its stories' variety), handed to every step
    began = time.perf_counter()
    base_source, base_info = prepare_base(settings, task, run_dir, accelerator)
    base_seconds = time.perf_counter() - began
    results = [
        train_method(m, settings, task, base_source, run_dir, accelerator, resume) for m in settings.method_list()
    ]
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
        if r["method"] in ("ssm", "ssm_classifier"):  # (the entity tracker's card: records.model_card too)
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


def _trainable_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def _evaluate_untrained(settings, base, tokenizer, task, method_dir: Path, device) -> dict:
    """Method "fewshot": the base as it is, answering after `fewshot_examples` solved stories."""
    began, cpu_began = time.perf_counter(), time.process_time()
    test = evaluate("fewshot", base, task, tokenizer, settings.bucket_list(), settings, 20_000, device, progress=True)
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


STATISTICS_STORIES = 64  # training stories whose features set a standardize_input adapter's mean and scale


@torch.no_grad()
def _fit_input_statistics(model, train_data, tokenizer, device) -> int:
    """Set the adapter's `input_mean` / `input_scale` (standardize_input) from the base features of the first
    STATISTICS_STORIES training stories at the positions where its state moves (every real token, or only its
    `transition_token_ids`). Deterministic, so a resumed run recomputes the same values. Returns the count of
    feature vectors used."""
    adapter = model.ssm_adapter
    stories = [train_data[i] for i in range(min(STATISTICS_STORIES, len(train_data)))]
    batch = collate_nl_state_tracking(stories, tokenizer.pad_token_id)
    inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids")}
    features = FrozenPrefix(model).features(adapter_input_only=True, **inputs)
    steps = adapter.step_mask(inputs["attention_mask"].bool(), inputs["input_ids"])
    adapter.set_input_statistics(features[steps])
    return int(steps.sum())


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


def train_method(method, settings, task, base_source, run_dir: Path, accelerator, resume: bool = False) -> dict:
    """Train and evaluate one method on a fresh copy of the base; writes run_dir/<method>/. `task`: the run's
    natural-language task, resolved once by `run_experiment`.

    The loop is the shared skeleton (training/loop.py), one unit per optimizer step: validation on the training
    lengths every `eval_every` steps, after the last and when `max_minutes_per_method` has run out; an early stop
    at `target_accuracy` from `min_steps` on; a checkpoint every `save_every` steps (`_save_trainable_checkpoint`).
    """
    method_dir = run_dir / method
    if resume and (method_dir / "results.json").is_file():
        return json.loads((method_dir / "results.json").read_text())
    base, tokenizer = load_base(base_source, settings.dtype, accelerator.device)
    if method == "fewshot":
        return _evaluate_untrained(settings, base, tokenizer, task, method_dir, accelerator.device)
    run = _start_method(method, settings, task, base, tokenizer, accelerator)
    checkpoints = method_dir / "checkpoints"
    if resume and (found := latest_checkpoint(checkpoints)) is not None:
        unwrapped = accelerator.unwrap_model(run.model)
        meta = _load_trainable_checkpoint(found, unwrapped, run.optimizer, run.scheduler, accelerator.device)
        run.start, run.history = meta["step"], meta["history"]
    trainable = sum(p.numel() for p in run.params)
    unwrapped = accelerator.unwrap_model(run.model)
    if method in SSM_ADAPTER_METHODS and unwrapped.adapter_config.standardize_input:
        run.info["input_statistics_vectors"] = _fit_input_statistics(
            unwrapped, run.train_data, tokenizer, accelerator.device
        )
    prefix, store = _feature_store(method, settings, unwrapped, method_dir)
    clock = loop.Stopwatch()  # this call's time only: a resumed method counts from the resume
    _train_loop(method, run, settings, task, tokenizer, accelerator, checkpoints, clock, prefix, store)
    train_seconds = clock.seconds
    if store is not None and store.path is not None:
        store.path.unlink()  # a cache, not a result: it can be hundreds of MB
    steps_done = run.history[-1]["step"] if run.history else run.start

    eval_began = time.perf_counter()
    test = evaluate(
        method,
        run.model,
        task,
        tokenizer,
        settings.bucket_list(),
        settings,
        20_000,
        accelerator.device,
        progress=accelerator.is_local_main_process,
    )
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
        "history": run.history,
        "test": test,
        "train_examples": run.pool,
        "tokenization_check": run.tokenization,
        "feature_cache": None
        if store is None
        else {
            "dtype": settings.feature_cache_dtype,
            "examples": len(store),
            "bytes": store.nbytes,
            "skipped": store.skipped,
        },
        **run.info,
        "settings": asdict(settings),
    }
    _save_trained(method, accelerator.unwrap_model(run.model), method_dir)
    (method_dir / "results.json").write_text(json.dumps(result, indent=2))
    return result


@dataclass
class _MethodRun:
    """One method's training, as `_start_method` prepares it: the model with its trainable parameters, optimizer
    and schedule, the answer words' token ids, the training stories, and the state a checkpoint restores."""

    model: torch.nn.Module
    params: list
    info: dict
    optimizer: torch.optim.Optimizer
    scheduler: object
    answer_ids: torch.Tensor
    tokenization: dict
    pool: int
    train_data: NLStateTrackingDataset
    start: int = 0
    history: list = field(default_factory=list)


def _start_method(method, settings, task, base, tokenizer, accelerator) -> _MethodRun:
    """The method built on `base` (torch seeded by settings.seed first), its optimizer and warm-up cosine schedule
    prepared by `accelerator`, and its pool of training stories."""
    torch.manual_seed(settings.seed)
    model, params, info = build_method(method, settings, base, task.num_classes, tokenizer)
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
        settings.train_max_preamble_sentences,
    )
    return _MethodRun(model, params, info, optimizer, scheduler, answer_ids, tokenization, pool, train_data)


def _feature_store(method, settings, unwrapped, method_dir: Path):
    """(frozen prefix, feature store) of a method whose frozen layers' features are cached across steps (a pool
    of `train_examples` stories, the cache not off); (None, None) otherwise."""
    if method not in CACHED_METHODS or settings.feature_cache == "off" or not settings.train_examples:
        return None, None
    prefix = unwrapped if method == "probe" else FrozenPrefix(unwrapped)
    store = FeatureStore(
        int(settings.feature_cache_max_mb * 2**20),
        settings.feature_cache_dtype,
        path=method_dir / "feature_cache.bin" if settings.feature_cache == "disk" else None,
    )
    return prefix, store


def _train_loop(method, run: _MethodRun, settings, task, tokenizer, accelerator, checkpoints, clock, prefix, store):
    """The shared loop over one method's optimizer steps, from `run.start` to settings.max_steps."""
    model, history = run.model, run.history
    val_bucket = [(settings.train_min_transitions, settings.train_max_transitions)]
    last = {}  # the loss of the latest step

    def train_step(step: int) -> None:
        indices = [(step * settings.batch_size + i) % run.pool for i in range(settings.batch_size)]
        batch = collate_nl_state_tracking([run.train_data[i] for i in indices], tokenizer.pad_token_id)
        features = None if store is None else batch_features(prefix, store, indices, batch, accelerator.device)
        loss, _ = score_batch(
            method,
            model,
            batch,
            run.answer_ids,
            accelerator.device,
            dense=settings.supervision == "dense",
            vocab_loss=settings.answer_loss == "vocab",
            features=features,
            role_weight=settings.role_loss_weight,
        )
        loop.optimizer_step(accelerator, loss, run.optimizer, run.scheduler, run.params, settings.grad_clip)
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
            _save_trainable_checkpoint(target, accelerator.unwrap_model(model), run.optimizer, run.scheduler, meta)

    model.train()
    loop.run_training(
        accelerator, desc=f"{settings.task}/{method}", start=run.start, total=settings.max_steps,
        train_unit=train_step, evaluate=validation, eval_every=settings.eval_every, should_stop=reached_target,
        out_of_time=out_of_time, save=save, save_every=settings.save_every,
    )  # fmt: skip


def _save_trained(method, unwrapped, method_dir: Path) -> None:
    """The trained weights of a method in method_dir: the SSM adapter (with its LoRA weights for ssm_lora), the
    LoRA adapter (with its classifier head for lora_classifier), or the probe's head."""
    from safetensors.torch import save_file

    method_dir.mkdir(parents=True, exist_ok=True)
    if method in SSM_ADAPTER_METHODS:
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
