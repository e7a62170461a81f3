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

The pieces, one module each: the settings (adapter_settings), the base and the methods built on it
(adapter_baselines), scoring and evaluation (adapter_evaluation), the training of one method with its
trainable-only checkpoints (adapter_training), and what a run reports: summary records, table, plot, model card
(adapter_records). This module runs them in order (`run_experiment`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from ..data.nl_state_tracking import get_nl_task
from . import loop
from .adapter_baselines import prepare_base
from .adapter_records import model_card, plot_results, results_table
from .adapter_settings import RESUME_SAFE_SETTINGS, TINY_BASE, AdapterExperimentSettings
from .adapter_training import train_method
from .checkpointing import check_resumed_settings, recorded_settings


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
