"""Settings of the causal-LM drivers (pretraining, fine-tuning): the data, the optimisation, the model source; and
what a run is built from: the tokenizer, the model config (preset or JSON, overrides, vocabulary), and the packed
block sources of its corpus.

Each field carries its command-line help (`help_field`); hf_ssm.training.cli turns a settings class into
--options. `validate` raises ValueError naming the field and the accepted values.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

from ...data.lm_corpus import CorpusSpec, build_block_sources
from ..settings_base import (
    ConfigFieldSettings,
    DatasetSettings,
    StepTrainingSettings,
    check_numeric_settings,
    help_field,
)

MIXED_PRECISION = ("auto", "no", "bf16", "fp16")
# Settings a resumed run may change (checkpointing.check_resume): they change neither the model, the data nor the
# learning rate of any step, only when it evaluates / checkpoints, what it keeps, and the sample written at the end
# (gradient checkpointing recomputes the same activations). Everything else must match the checkpoint's run.
RESUME_SAFE_SETTINGS = frozenset(
    {"eval_every", "save_every", "keep_checkpoints", "sample_prompt", "sample_tokens", "gradient_checkpointing"}
)


@dataclass
class DataSettings(DatasetSettings):
    """The corpus of a causal-LM run and its tokenizer."""

    DEFAULTS = {"dataset": "python_stdlib"}
    HELP = {
        "dataset": "`python_stdlib` (this interpreter's standard library: real text, offline), `builtin` (generated "
        "stories), `builtin:dialogues`, a Hub dataset name or a local dataset folder"
    }

    dataset_config: str | None = help_field("the dataset's configuration name (Hub datasets)", default=None)
    train_files: list[str] = help_field(
        "local .txt / .jsonl / .json / .parquet files (instead of --dataset)", default_factory=list
    )
    eval_files: list[str] = help_field(
        "local evaluation files (default: hold out --eval_documents)", default_factory=list
    )
    text_column: str = help_field("the column holding the text (json / parquet / Hub data)", default="text")
    train_split: str = help_field("training split of a Hub / folder dataset", default="train")
    eval_split: str | None = help_field("evaluation split (default: validation or test when present)", default=None)
    text_sample_by: str = help_field(
        "for .txt files: one document per line, paragraph or document (file)", default="paragraph"
    )
    streaming: bool = help_field(
        "read the training data lazily (large corpora); exact resume still holds", default=False
    )
    builtin_documents: int = help_field("number of generated training documents (built-in corpus)", default=4000)
    eval_documents: int = help_field(
        "documents for evaluation (held out from training when there is no eval split)", default=200
    )
    block_size: int = help_field("tokens per packed training block", default=128)
    reset_at_boundaries: bool = help_field(
        "restart position_ids (so every SSM state, and attention) at each document inside a block", default=True
    )
    eval_blocks: int = help_field("most blocks used for evaluation", default=64)
    tokenizer: str | None = help_field(
        "`byte` (built-in byte-level tokenizer, no files) or any AutoTokenizer name / path", default="byte"
    )
    trust_remote_code: bool = help_field(
        "allow code shipped with the tokenizer or with a non-hf_ssm checkpoint (AutoTokenizer, AutoModel)",
        default=False,
    )

    def corpus_spec(self) -> CorpusSpec:
        names = {f.name for f in dataclasses.fields(CorpusSpec)}
        return CorpusSpec(**{k: v for k, v in asdict(self).items() if k in names})


@dataclass
class TrainSettings(StepTrainingSettings):
    """The optimisation of a causal-LM run (the shared fields: settings_base), its precision, checkpoints and sample."""

    DEFAULTS = {
        "batch_size": 8,
        "max_steps": 300,
        "learning_rate": 3e-3,
        "warmup_steps": 30,
        "weight_decay": 0.1,
        "eval_every": 50,
        "save_every": 100,
    }
    HELP = {
        "batch_size": "a causal-LM run: packed blocks per micro-batch and process",
        "weight_decay": "matrices only; not norms, biases, gains",
        "eval_every": "a causal-LM run also evaluates at the start; 0 = at the start and the end only",
    }

    gradient_accumulation_steps: int = help_field("micro-batches per optimizer step", default=1)
    min_lr_ratio: float = help_field("final learning rate / peak (cosine decay)", default=0.1)
    adam_beta1: float = help_field("AdamW beta1", default=0.9)
    adam_beta2: float = help_field("AdamW beta2", default=0.95)
    mixed_precision: str = help_field(
        "auto (bf16 on GPUs that support it, else what `accelerate launch` sets, else fp32), no, bf16, fp16",
        default="auto",
    )
    gradient_checkpointing: bool = help_field(
        "recompute activations in the backward pass (saves memory)", default=False
    )
    keep_checkpoints: int = help_field("keep the newest N checkpoints", default=2)
    sample_prompt: str | None = help_field(
        "prompt of the greedy sample written at the end (default: from the data)", default=None
    )
    sample_tokens: int = help_field("tokens generated for the final sample (0 = none)", default=160)


@dataclass
class PretrainSettings(ConfigFieldSettings, DataSettings, TrainSettings):
    """A pretraining run: the model (a preset or a config file, and config fields over it), its data, its training."""

    HELP = {"extra_config": "a pretraining run: over the preset's (or --config's) fields, e.g. hidden_size=256"}

    model_preset: str | None = help_field(
        "model preset, <family>-<size> (see --list_presets)", default="hybrid-pd_ssm-tiny"
    )
    config: str | None = help_field("HybridSSMConfig JSON file (instead of --model_preset)", default=None)

    def validate(self) -> None:
        validate_train_settings(self)
        if self.config is None and self.model_preset is None:
            raise ValueError("pass --model_preset or --config")
        if self.config is not None and not Path(self.config).is_file():
            raise ValueError(f"--config: file not found: {self.config}")
        if self.config is None:
            from ...presets import get_preset

            get_preset(self.model_preset)
        from ...modeling.configuration_hybrid_ssm import check_config_keys

        check_config_keys(self.extra_config, "--extra_config")  # a misspelt key would otherwise be an ignored extra


def validate_train_settings(s) -> None:
    """The checks every causal-LM settings class shares (data and optimisation fields); ValueError naming the field."""
    check_numeric_settings(s, positive=("learning_rate",))
    for name in ("batch_size", "gradient_accumulation_steps", "max_steps", "keep_checkpoints"):
        if getattr(s, name) < 1:
            raise ValueError(f"`{name}` must be >= 1, got {getattr(s, name)}")
    if not 0 <= s.min_lr_ratio <= 1:
        raise ValueError(f"`min_lr_ratio` must be in [0, 1], got {s.min_lr_ratio}")
    if s.mixed_precision not in MIXED_PRECISION:
        raise ValueError(f"`mixed_precision` must be one of {list(MIXED_PRECISION)}, got {s.mixed_precision!r}")
    if s.block_size < 2:
        raise ValueError(f"`block_size` must be >= 2, got {s.block_size}")
    s.corpus_spec().validate()


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    """`byte` -> the built-in ByteTokenizer; a folder saved with it -> ByteTokenizer (no remote code needed);
    anything else -> AutoTokenizer."""
    from ...tokenization import ByteTokenizer

    if name_or_path == "byte":
        return ByteTokenizer()
    config = Path(name_or_path) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") == "ByteTokenizer":
        return ByteTokenizer.from_pretrained(name_or_path)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except Exception as err:  # OSError, ValueError, ... from a missing / unreadable tokenizer
        raise ValueError(f"could not load tokenizer {name_or_path!r}: {err}") from err


def build_config(settings, tokenizer):
    """The HybridSSMConfig of a pretraining run: preset or JSON, overrides, vocabulary from the tokenizer."""
    from ...modeling import HybridSSMConfig
    from ...modeling.configuration_hybrid_ssm import check_config_keys
    from ...presets import get_preset

    if settings.config is not None:
        fields = json.loads(Path(settings.config).read_text())
        model_type = fields.pop("model_type", HybridSSMConfig.model_type)
        if model_type != HybridSSMConfig.model_type:
            raise ValueError(f"--config: model_type {model_type!r} is not {HybridSSMConfig.model_type!r}")
        for key in ("architectures", "auto_map", "transformers_version", "dtype", "torch_dtype", "layer_types"):
            fields.pop(key, None)
        check_config_keys(fields, f"--config {settings.config}")
    else:
        fields = get_preset(settings.model_preset)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else getattr(tokenizer, "sep_token_id", None)
    if eos is None:
        raise ValueError("the tokenizer has no eos_token (needed between packed documents)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    fields.update(vocab_size=len(tokenizer), eos_token_id=eos, pad_token_id=pad, bos_token_id=tokenizer.bos_token_id)
    fields.update(settings.extra_config)
    config = HybridSSMConfig(**fields)
    if config.vocab_size < len(tokenizer):
        raise ValueError(f"vocab_size {config.vocab_size} is smaller than the tokenizer ({len(tokenizer)} tokens)")
    check_block_size(settings.block_size, config)
    return config


def check_block_size(block_size: int, config) -> None:
    """ValueError when the blocks are longer than the model accepts (attention layers: max_position_embeddings)."""
    limit = getattr(config, "max_position_embeddings", None)
    has_attention = getattr(config, "has_attention", True)  # any non-hybrid model is limited by its positions
    if limit is not None and has_attention and block_size > limit:
        raise ValueError(
            f"--block_size {block_size} is above the model's limit: max_position_embeddings = {limit}; "
            f"use --block_size <= {limit} (or, for a new model, --extra_config max_position_embeddings={block_size})"
        )


def open_block_sources(settings, tokenizer, accelerator=None):
    """(train source, eval blocks) of the settings' corpus; the main process reads (and caches) it first.

    Raises ValueError when the evaluation data holds no complete block."""
    context = accelerator.main_process_first() if accelerator is not None else nullcontext()
    with context:
        train_source, eval_data = build_block_sources(
            settings.corpus_spec(), tokenizer, settings.block_size, settings.eval_blocks
        )
    if len(eval_data[0]) == 0:
        raise ValueError("the evaluation data yields no complete block: add eval data or lower --block_size")
    return train_source, eval_data
