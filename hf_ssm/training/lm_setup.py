"""What a causal-LM run is built from: the tokenizer, the model config (preset or JSON, overrides, vocabulary),
and the packed block sources of its corpus."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

from ..data.lm_corpus import build_block_sources


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    """`byte` -> the built-in ByteTokenizer; a folder saved with it -> ByteTokenizer (no remote code needed);
    anything else -> AutoTokenizer."""
    from ..tokenization import ByteTokenizer

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
    from ..modeling import HybridSSMConfig
    from ..modeling.configuration_hybrid_ssm import check_config_keys
    from ..presets import get_preset

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
