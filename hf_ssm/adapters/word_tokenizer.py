"""The word-level tokenizer class of the built-in tiny base (tiny_base.py), named so that a saved base reloads.

A saved tiny base is a Qwen2 folder (config.json's model_type "qwen2"). For such a folder, transformers'
`AutoTokenizer.from_pretrained` does not trust tokenizer_config.json's `tokenizer_class`: it rebuilds the tokenizer
as a byte-level BPE `Qwen2Tokenizer` from tokenizer.json's vocabulary alone, and a word-level vocabulary has no
merges, so every word but the one-character ones is lost ("Alice flips the switch." -> ".").

An `auto_map` entry in tokenizer_config.json is how a folder tells AutoTokenizer that its tokenizer is its own
class, which turns that rebuild off. `save_pretrained` of this class writes the entry and copies this file next to
the weights (`register_for_auto_class`), so AutoTokenizer loads tokenizer.json as saved (normalizer, pre-tokenizer,
word-level model): without `trust_remote_code` as transformers' generic `TokenizersBackend` (a class it does not
know falls back to it), with `trust_remote_code=True` as this class. Either way the ids are those of the
tokenizer that was saved.

The module imports only `transformers`, so the copy loads where hf_ssm is not installed.
"""

from __future__ import annotations

from transformers import TokenizersBackend


class WordLevelTokenizer(TokenizersBackend):
    """transformers' `TokenizersBackend` (the class behind `PreTrainedTokenizerFast`) under a name of its own:
    the backend tokenizer (a `tokenizers.Tokenizer`, here word level) does all the work; the name only makes
    `save_pretrained` write the `auto_map` entry that keeps AutoTokenizer from rebuilding it (module docstring)."""


# save_pretrained copies this file next to tokenizer_config.json and writes an auto_map entry for it.
WordLevelTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = ["WordLevelTokenizer"]
