"""A built-in tiny Qwen2 base for offline adapter experiments: word-level tokenizer + small Qwen2ForCausalLM.

Nothing is downloaded: the tokenizer's vocabulary is the set of words the story tasks can produce, and the
model is built from a `Qwen2Config`. `hf_ssm.training.adapter.methods` gives it a few minutes of
next-token training on story narratives (without questions or answers) so that its features are not random when
the adapter is attached; the base is frozen afterwards.
"""

from __future__ import annotations

import torch

PAD_TOKEN, UNK_TOKEN, EOS_TOKEN = "<pad>", "<unk>", "</s>"


def build_word_tokenizer(words: list[str]):
    """A lower-casing word-level tokenizer (`WordLevelTokenizer`, a `PreTrainedTokenizerFast`); id 0 is `<pad>`,
    unknown words map to `<unk>`. Saved, it reloads with `AutoTokenizer.from_pretrained` (word_tokenizer.py)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel

    from .word_tokenizer import WordLevelTokenizer

    specials = [PAD_TOKEN, UNK_TOKEN, EOS_TOKEN]
    vocab = {w: i for i, w in enumerate(specials + sorted(set(words) - set(specials)))}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # \w+|[^\w\s]+, the split of nl_state_tracking.words_of
    return WordLevelTokenizer(
        tokenizer_object=tok, pad_token=PAD_TOKEN, unk_token=UNK_TOKEN, eos_token=EOS_TOKEN, padding_side="left"
    )


def build_tiny_qwen2(
    vocab_size: int,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    max_positions: int = 4096,
    seed: int = 0,
):
    """A randomly initialised Qwen2ForCausalLM (tied embeddings, SwiGLU width 2*hidden, grouped KV heads)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


__all__ = ["build_tiny_qwen2", "build_word_tokenizer"]
