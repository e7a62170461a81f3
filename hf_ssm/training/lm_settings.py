"""Settings of the causal-LM drivers (pretraining, fine-tuning): the data, the optimisation, the model source.

Each field carries its command-line help (`help_field`); hf_ssm.training.cli turns a settings class into
--options. `validate` raises ValueError naming the field and the accepted values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..data.lm_corpus import CorpusSpec
from .cli import check_numeric_settings, config_fields_field

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
        "`builtin` (generated stories, offline), `builtin:dialogues`, a Hub dataset name or a local dataset folder",
        default="builtin",
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
            from ..presets import get_preset

            get_preset(self.preset)
        from ..modeling.configuration_hybrid_ssm import check_config_keys

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
