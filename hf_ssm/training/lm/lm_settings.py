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
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...data.lm_corpus import CorpusSpec, build_block_sources
from ..cli import check_numeric_settings, config_fields_field

MIXED_PRECISION = ("auto", "no", "bf16", "fp16")
# Settings a resumed run may change (checkpointing.check_resume): they change neither the model, the data nor the
# learning rate of any step, only when it evaluates / checkpoints, what it keeps, and the sample written at the end
# (gradient checkpointing recomputes the same activations). Everything else must match the checkpoint's run.
RESUME_SAFE_SETTINGS = frozenset(
    {"eval_every", "save_every", "keep_checkpoints", "sample_prompt", "sample_tokens", "gradient_checkpointing"}
)


def help_field(text: str, **kwargs):
    """A dataclass field with its --help text (hf_ssm.training.cli.settings_parser)."""
    return field(metadata={"help": text}, **kwargs)


@dataclass
class DataSettings:
    dataset: str | None = help_field(
        "`python_stdlib` (this interpreter's standard library: real text, offline), `builtin` (generated stories), "
        "`builtin:dialogues`, a Hub dataset name or a local dataset folder",
        default="python_stdlib",
    )
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

    def corpus_spec(self) -> CorpusSpec:
        names = {f.name for f in dataclasses.fields(CorpusSpec)}
        return CorpusSpec(**{k: v for k, v in asdict(self).items() if k in names})


@dataclass
class TrainSettings:
    batch_size: int = help_field("blocks per micro-batch and process", default=8)
    gradient_accumulation_steps: int = help_field("micro-batches per optimizer step", default=1)
    max_steps: int = help_field("optimizer steps", default=300)
    learning_rate: float = help_field("peak learning rate", default=3e-3)
    min_lr_ratio: float = help_field("final learning rate / peak (cosine decay)", default=0.1)
    warmup_steps: int = help_field("linear warmup steps", default=30)
    weight_decay: float = help_field("AdamW weight decay (matrices only; not norms, biases, gains)", default=0.1)
    adam_beta1: float = help_field("AdamW beta1", default=0.9)
    adam_beta2: float = help_field("AdamW beta2", default=0.95)
    grad_clip: float = help_field("clip the global gradient norm to this (0 = off)", default=1.0)
    mixed_precision: str = help_field(
        "auto (bf16 on GPUs that support it, else what `accelerate launch` sets, else fp32), no, bf16, fp16",
        default="auto",
    )
    gradient_checkpointing: bool = help_field(
        "recompute activations in the backward pass (saves memory)", default=False
    )
    eval_every: int = help_field(
        "evaluate every N steps (and at the start and the end); 0 = start and end only", default=50
    )
    save_every: int = help_field("checkpoint (accelerator.save_state) every N steps; 0 = never", default=100)
    keep_checkpoints: int = help_field("keep the newest N checkpoints", default=2)
    seed: int = help_field("seed of the model init and the data order", default=0)
    sample_prompt: str | None = help_field(
        "prompt of the greedy sample written at the end (default: from the data)", default=None
    )
    sample_tokens: int = help_field("tokens generated for the final sample (0 = none)", default=160)


@dataclass
class PretrainSettings(DataSettings, TrainSettings):
    preset: str | None = help_field("model preset, <family>-<size> (see --list_presets)", default="hybrid-pd_ssm-tiny")
    config: str | None = help_field("HybridSSMConfig JSON file (instead of --preset)", default=None)
    override: dict = config_fields_field(
        "config fields to change: KEY=VALUE items (JSON values) or a JSON object, e.g. hidden_size=256 "
        "(--override: the deprecated spelling of --extra_config)",
        aliases=("--extra_config",),
        deprecated=("--override",),
    )
    tokenizer: str = help_field(
        "`byte` (built-in byte-level tokenizer, no files) or any AutoTokenizer name / path", default="byte"
    )
    trust_remote_code: bool = help_field(
        "allow tokenizer code shipped with the tokenizer (AutoTokenizer)", default=False
    )

    def validate(self) -> None:
        validate_train_settings(self)
        if self.config is None and self.preset is None:
            raise ValueError("pass --preset or --config")
        if self.config is not None and not Path(self.config).is_file():
            raise ValueError(f"--config: file not found: {self.config}")
        if self.config is None:
            from ...presets import get_preset

            get_preset(self.preset)
        from ...modeling.configuration_hybrid_ssm import check_config_keys

        check_config_keys(self.override, "--extra_config")  # a misspelt key would otherwise be an ignored extra


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
        fields = get_preset(settings.preset)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else getattr(tokenizer, "sep_token_id", None)
    if eos is None:
        raise ValueError("the tokenizer has no eos_token (needed between packed documents)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    fields.update(vocab_size=len(tokenizer), eos_token_id=eos, pad_token_id=pad, bos_token_id=tokenizer.bos_token_id)
    fields.update(settings.override)
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
            f"use --block_size <= {limit} (or, for a new model, --override max_position_embeddings={block_size})"
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
