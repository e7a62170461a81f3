"""Hugging Face model cards for hf_ssm checkpoints: YAML front matter, architecture, training and evaluation.

`render_model_card(config, metrics)` builds the card from a model config and a run's metrics (the `metrics.json`
written by `hf_ssm.training.lm.pretraining`); `write_model_card(model_dir, run_dir)` reads both from disk. Used by
scripts/pretrain.py, scripts/finetune.py and scripts/make_model_card.py.

The front matter is a `huggingface_hub.ModelCardData` (the `model-index` built from `EvalResult`s), and every card
is parsed back through `huggingface_hub.ModelCard` before it is returned (`check_model_card`), so a card that the
Hub's own metadata classes cannot read is never written. `ModelCard.validate` is not used: it posts the card to
the Hub, and nothing here touches the network.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .modeling.legacy_names import RENAMED_CONFIG_FIELDS

_MIXER_TAGS = {
    "pd_ssm": "pd-ssm",
    "bd_lru": "bd-lru",
    "h_lru": "h-lru",
    "diag_lru": "diagonal-lru",
    "lrc_ssm": "lrc-ssm",
    "gru_ssm": "gru-ssm",
    "mgu_ssm": "mgu-ssm",
    "lstm_ssm": "lstm-ssm",
    "lstm": "lstm",
    "attention": "attention",
}
_BUILTIN_NAMES = {
    "builtin": "hf_ssm built-in stories (generated)",
    "builtin:stories": "hf_ssm built-in stories (generated)",
}
_BUILTIN_NAMES["builtin:dialogues"] = "hf_ssm built-in dialogues (generated)"
_BUILTIN_NAMES["python_stdlib"] = "the Python standard library's .py files (hf_ssm.data.python_stdlib)"


def _config_value(config, key, default=None):
    if isinstance(config, dict):  # a config.json saved before a field was renamed holds its old name
        old = next((o for o, n in RENAMED_CONFIG_FIELDS.items() if n == key), None)
        return config.get(key, config.get(old, default))
    return getattr(config, key, default)


def mixer_details(config, mixer: str) -> str:
    """One line describing a layer's mixer with its sizes."""
    c = lambda key: _config_value(config, key)  # noqa: E731
    if mixer == "attention":
        heads, kv = c("num_attention_heads"), c("num_key_value_heads")
        return f"causal self-attention, {heads} heads ({kv} key/value), head dim {c('head_dim')}, RoPE"
    if mixer == "pd_ssm":
        heads, state, entries = c("pd_ssm_num_heads"), c("pd_ssm_head_state_size"), c("pd_ssm_dict_size")
        return f"PD-SSM, {heads} head(s) x state {state} (complex), dictionary {entries}"
    if mixer == "bd_lru":
        state, block, gates = c("lru_total_state_size"), c("lru_group_size"), c("lru_normalization")
        return f"BD-LRU, state {state} in blocks of {block}, {gates} gates"
    if mixer == "h_lru":
        size, order = c("lru_total_state_size"), c("lru_group_size")
        return f"H-LRU, order {order} over {size // order} channels, {c('lru_normalization')} gates"
    if mixer == "diag_lru":
        return f"diagonal selective LRU, state {c('lru_total_state_size')}, {c('lru_normalization')} gates"
    if mixer in ("lrc_ssm", "gru_ssm", "mgu_ssm", "lstm_ssm"):
        return f"{mixer} (diagonal-Jacobian cell), state {c('lrc_num_channels')}, solver {c('lrc_solver')}"
    if mixer == "lstm":
        return f"LSTM (torch.nn.LSTM, sequential), hidden size {c('lstm_hidden_size')}"
    return mixer


def count_parameters(config) -> int:
    """Parameter count of a HybridSSMForCausalLM with `config` (built on the meta device: no memory, no init)."""
    import torch

    from .modeling import HybridSSMConfig, HybridSSMForCausalLM

    if isinstance(config, dict):  # a saved config.json: loaded as from_pretrained loads it (older fields included)
        config = HybridSSMConfig.from_dict({k: v for k, v in config.items() if k != "auto_map"})
    with torch.device("meta"):
        model = HybridSSMForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


def _human(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _dataset_name(dataset: str | None) -> str:
    return _BUILTIN_NAMES.get(dataset or "", dataset or "unknown")


def _precision(mixed_precision: str | None) -> str:
    return "fp32" if mixed_precision in (None, "no") else f"{mixed_precision} mixed precision"


def card_data(
    *,
    tags: list[str],
    library_name: str,
    base_model: str | None = None,
    datasets: list[str] | None = None,
    final_eval: dict | None = None,
    dataset: str | None = None,
    model_name: str = "hf-ssm-model",
) -> ModelCardData:
    """The front matter of a language-model card; with `final_eval` ({"loss", "perplexity"}) also its metrics and
    the model-index entry (text generation on the held-out split of `dataset`)."""
    results = None
    if final_eval:
        task = {
            "task_type": "text-generation",
            "task_name": "Causal language modeling",
            "dataset_type": dataset or "unknown",
            "dataset_name": _dataset_name(dataset),
            "dataset_split": "validation",
        }
        results = [
            EvalResult(**task, metric_type="perplexity", metric_value=round(final_eval["perplexity"], 4),
                       metric_name="Eval perplexity"),
            EvalResult(**task, metric_type="loss", metric_value=round(final_eval["loss"], 4),
                       metric_name="Eval loss (nats per token)"),
        ]  # fmt: skip
    return ModelCardData(
        library_name=library_name,
        license="apache-2.0",
        pipeline_tag="text-generation",
        base_model=base_model,
        tags=tags,
        datasets=datasets or None,
        metrics=["perplexity", "loss"] if results else None,
        # model_name only feeds the model-index; without results it would be written as a field of its own
        model_name=model_name if results else None,
        eval_results=results,
    )


REQUIRED_FIELDS = ("library_name", "license", "pipeline_tag", "tags")


def check_model_card(text: str) -> str:
    """Parse `text` as a Hugging Face model card, offline, and return it unchanged.

    Raises ValueError when the card does not start with a YAML front matter block, when huggingface_hub's
    `ModelCard` / `ModelCardData` cannot read that block (e.g. a malformed model-index), or when a field every hf_ssm
    card carries (`REQUIRED_FIELDS`) is missing.
    """
    if not text.startswith("---\n"):
        raise ValueError("a model card must start with a YAML front matter block ('---' on the first line)")
    try:
        card = ModelCard(text)
    except Exception as err:  # yaml errors, and ModelCardData's own ValueError for a bad model-index
        raise ValueError(f"the model card's front matter is not valid card metadata: {err}") from err
    missing = [key for key in REQUIRED_FIELDS if getattr(card.data, key, None) in (None, [], "")]
    if missing:
        raise ValueError(
            f"the model card's front matter lacks {missing} (every hf_ssm card sets {list(REQUIRED_FIELDS)})"
        )
    return text


def render_model_card(
    config,
    metrics: dict | None = None,
    *,
    model_name: str = "hf-ssm-model",
    base_model: str | None = None,
    adapter: dict | None = None,
    parameters: int | None = None,
) -> str:
    """The README.md of a checkpoint: front matter (library, tags, datasets, metrics, model-index) and sections."""
    metrics = metrics or {}
    mixers = list(_config_value(config, "mixers") or [])
    if parameters is None:
        parameters = _model_parameters(config, metrics, adapter)
    settings = metrics.get("settings", {})
    dataset = metrics.get("dataset") or settings.get("dataset")
    final = metrics.get("final_eval") or {}
    is_hub_dataset = bool(dataset) and dataset not in _BUILTIN_NAMES and not settings.get("train_files")

    tags = ["hf_ssm", "hybrid-ssm", "state-space-model", "custom_code", "text-generation"]
    tags += sorted({_MIXER_TAGS.get(m, m) for m in mixers})
    if adapter:
        tags += ["lora", "peft"]
    data = card_data(
        tags=tags,
        library_name="peft" if adapter else "transformers",
        base_model=base_model,
        datasets=[dataset] if is_hub_dataset else None,
        final_eval=final,
        dataset=dataset,
        model_name=model_name,
    )
    counts = {m: mixers.count(m) for m in dict.fromkeys(mixers)}
    num_layers = len(mixers) or _config_value(config, "num_hidden_layers")
    layer_words = ", ".join(f"{n} {m}" for m, n in counts.items()) or str(_config_value(config, "model_type"))
    kind = metrics.get("kind", "pretrain")
    what = "LoRA-fine-tuned" if adapter else ("fine-tuned" if kind == "finetune" else "pretrained")
    lines = [
        "",
        f"# {model_name}",
        "",
        f"A {_human(parameters)}-parameter {'hybrid ' if mixers else ''}language model ({num_layers} layers: "
        f"{layer_words}) built with `hf_ssm` and {what} on {_dataset_name(dataset)}."
        + (f" Base model: `{base_model}`." if base_model else "")
        + (" This folder holds the LoRA adapter only." if adapter else ""),
        "",
        *_usage_lines(base_model, adapter),
        *_architecture_lines(config, mixers, parameters, f"{num_layers} ({layer_words})"),
    ]
    if adapter:
        lines += _adapter_lines(adapter, parameters)
    if settings:
        lines += _training_lines(metrics, settings, dataset)
    if final:
        lines += _evaluation_lines(final, metrics.get("initial_eval") or {}, kind, dataset)
    sample = metrics.get("sample")
    if sample:
        lines += ["Greedy sample:", "", "```", sample["text"], "```", ""]
    lines += [
        "## Limitations",
        "",
        "A research checkpoint produced by the hf_ssm training scripts. Small presets trained on the built-in "
        "generated corpus learn its templates, not general language; they exist to test and demonstrate the "
        "architecture and the training pipeline.",
        "",
    ]
    return check_model_card(f"---\n{data.to_yaml()}\n---\n" + "\n".join(lines))


def _model_parameters(config, metrics: dict, adapter: dict | None) -> int:
    """The model's own parameters (an adapter's are counted apart): the training record's count, else the
    config's."""
    info = metrics.get("model") or {}
    parameters = info.get("parameters") or count_parameters(config)
    if adapter and info.get("parameters"):
        parameters -= info.get("trainable_parameters", 0)
    return parameters


def _usage_lines(base_model: str | None, adapter: dict | None) -> list[str]:
    """The card's "Usage" section: loading the model (or the base and the LoRA adapter) and a greedy generation."""
    lines = ["## Usage", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer"]
    if adapter:
        base = base_model or "path/to/base"
        lines += [
            "from peft import PeftModel",
            "",
            f'base = AutoModelForCausalLM.from_pretrained("{base}", trust_remote_code=True)',
            'model = PeftModel.from_pretrained(base, "path/to/this/adapter")',
            f'tokenizer = AutoTokenizer.from_pretrained("{base}", trust_remote_code=True)',
        ]
    else:
        lines += [
            "",
            'model = AutoModelForCausalLM.from_pretrained("path/to/this/model", trust_remote_code=True)',
            'tokenizer = AutoTokenizer.from_pretrained("path/to/this/model", trust_remote_code=True)',
        ]
    return lines + [
        'ids = tokenizer("Once upon a time,", return_tensors="pt").input_ids',
        "print(tokenizer.decode(model.generate(ids, max_new_tokens=60, do_sample=False)[0]))",
        "```",
        "",
        "The modeling code ships next to the weights (`trust_remote_code=True`), so hf_ssm need not be installed. "
        "SSM layers keep a fixed-size recurrent state in the generation cache; attention layers keep keys and values.",
        "",
    ]


def _architecture_lines(config, mixers: list[str], parameters: int, layers: str) -> list[str]:
    """The card's "Architecture" section: the model's sizes, then one row per layer with its mixer's settings."""
    return [
        "## Architecture",
        "",
        "| | |",
        "|---|---|",
        f"| parameters | {parameters:,} |",
        f"| layers | {layers} |",
        f"| hidden size | {_config_value(config, 'hidden_size')} |",
        f"| MLP (SwiGLU) width | {_config_value(config, 'intermediate_size')} |",
        f"| vocabulary | {_config_value(config, 'vocab_size')} |",
        f"| max positions (attention layers) | {_config_value(config, 'max_position_embeddings')} |",
        f"| tied embeddings | {_config_value(config, 'tie_word_embeddings')} |",
        "",
        "| layer | mixer | details |",
        "|---|---|---|",
        *(f"| {i} | `{m}` | {mixer_details(config, m)} |" for i, m in enumerate(mixers)),
        "",
        "Every layer is a pre-norm residual block: x + Mixer(RMSNorm(x)), then x + SwiGLU(RMSNorm(x)).",
        "",
    ]


def _adapter_lines(adapter: dict, parameters: int) -> list[str]:
    """The card's "Adapter" section: the LoRA settings and its parameter count beside the model's."""
    method = f"LoRA (PEFT), rank {adapter.get('r')}, alpha {adapter.get('alpha')}, dropout {adapter.get('dropout')}"
    return [
        "## Adapter",
        "",
        "| | |",
        "|---|---|",
        f"| method | {method} |",
        f"| target modules | `{adapter.get('target_modules')}` |",
        f"| adapter parameters | {adapter.get('trainable_parameters', 0):,} (the model: {parameters:,}) |",
        "",
    ]


def _training_lines(metrics: dict, settings: dict, dataset) -> list[str]:
    """The card's "Training" section, from the run's metrics and settings."""
    blocks = metrics.get("global_batch_blocks")
    lr_line = (
        f"AdamW, peak {settings.get('learning_rate')}, {settings.get('warmup_steps')} warmup steps, cosine to "
        f"{settings.get('min_lr_ratio')} x peak; betas ({settings.get('adam_beta1')}, {settings.get('adam_beta2')}), "
        f"weight decay {settings.get('weight_decay')}"
    )
    batch = f"{blocks} blocks x {settings.get('block_size')} tokens = {metrics.get('global_batch_tokens')} tokens"
    packing = (
        "documents separated by EOS; state and attention reset at document boundaries: "
        f"{settings.get('reset_at_boundaries')}"
    )
    precision = (
        f"{_precision(metrics.get('mixed_precision'))} on {metrics.get('device')}, "
        f"{metrics.get('num_processes')} process(es)"
    )
    seconds = metrics.get("train_seconds")
    return [
        "## Training",
        "",
        "| | |",
        "|---|---|",
        f"| data | {_dataset_name(dataset)} |",
        f"| tokenizer | {metrics.get('tokenizer', settings.get('tokenizer', '-'))} |",
        f"| steps | {metrics.get('steps')} |",
        f"| global batch | {batch} |",
        f"| tokens seen | {metrics.get('tokens_seen'):,} |",
        f"| packing | {packing} |",
        f"| optimizer | {lr_line} |",
        f"| gradient clipping | {settings.get('grad_clip')} |",
        f"| gradient accumulation | {settings.get('gradient_accumulation_steps')} |",
        f"| precision | {precision} |",
        f"| training time | {seconds:.0f} s |" if seconds is not None else "| training time | - |",
        "",
    ]


def _evaluation_lines(final: dict, initial: dict, kind: str, dataset) -> list[str]:
    """The card's "Evaluation" section: held-out loss and perplexity before and after training."""
    lines = [
        "## Evaluation",
        "",
        f"Held-out data of {_dataset_name(dataset)}: next-token cross-entropy (nats per token) and perplexity.",
        "",
        "| | loss | perplexity |",
        "|---|---|---|",
    ]
    if initial and initial is not final:
        label = "before fine-tuning" if kind == "finetune" else "at initialisation"
        lines.append(f"| {label} (step {initial['step']}) | {initial['loss']:.4f} | {initial['perplexity']:.2f} |")
    return lines + [f"| after training (step {final['step']}) | {final['loss']:.4f} | {final['perplexity']:.2f} |", ""]


def write_model_card(
    model_dir: str | Path, run_dir: str | Path | None = None, output: str | Path | None = None, **kwargs
) -> Path:
    """Write the card of a saved model (`config.json`) or LoRA adapter (`adapter_config.json`, whose base model
    folder holds the config) with the metrics of its run (`run_dir/metrics.json`, default: the parent folder of
    `model_dir`); returns the path written (default `model_dir/README.md`)."""
    model_dir = Path(model_dir)
    adapter_file = model_dir / "adapter_config.json"
    if adapter_file.is_file():
        adapter_config = json.loads(adapter_file.read_text())
        base = adapter_config.get("base_model_name_or_path")
        if not base or not (Path(base) / "config.json").is_file():
            raise ValueError(f"the adapter's base model {base!r} has no config.json on this machine")
        config = json.loads((Path(base) / "config.json").read_text())
        kwargs.setdefault("base_model", base)
        kwargs.setdefault(
            "adapter",
            {
                "r": adapter_config.get("r"),
                "alpha": adapter_config.get("lora_alpha"),
                "dropout": adapter_config.get("lora_dropout"),
                "target_modules": adapter_config.get("target_modules"),
            },
        )
    elif (model_dir / "config.json").is_file():
        config = json.loads((model_dir / "config.json").read_text())
    else:
        raise ValueError(
            f"no config.json or adapter_config.json in {model_dir}: pass a folder written by save_pretrained"
        )
    metrics_path = Path(run_dir) / "metrics.json" if run_dir is not None else model_dir.parent / "metrics.json"
    if run_dir is not None and not metrics_path.is_file():
        raise ValueError(f"no metrics.json in {run_dir}")
    metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    if "adapter" in kwargs and metrics.get("lora"):
        kwargs["adapter"] = {**kwargs["adapter"], **metrics["lora"]}
    if metrics.get("base_model"):
        kwargs.setdefault("base_model", metrics["base_model"])
    generic = ("model", "merged", "adapter")
    kwargs.setdefault("model_name", model_dir.parent.name if model_dir.name in generic else model_dir.name)
    text = render_model_card(config, metrics, **kwargs)
    output = Path(output) if output is not None else model_dir / "README.md"
    output.write_text(text)
    return output


__all__ = [
    "card_data",
    "check_model_card",
    "count_parameters",
    "mixer_details",
    "render_model_card",
    "write_model_card",
]
