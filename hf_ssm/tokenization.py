"""Byte-level tokenizer that needs no vocabulary files: hf_ssm's built-in tokenizer.

Ids: 0 `<pad>`, 1 `<bos>`, 2 `<eos>`, 3 `<unk>`, then byte b -> 4 + b (260 ids in all). Text is encoded as UTF-8,
so every string round-trips exactly; decoding replaces an incomplete UTF-8 sequence (e.g. a generation cut in the
middle of a character) with U+FFFD. No special token is added by `__call__`/`encode`; the data pipeline puts
`<eos>` between packed documents itself. Batches are padded on the left (`padding_side="left"`, what
decoder-only generation needs). Raw text is always read as bytes (`split_special_tokens=True`): a literal
"<eos>" inside a document does not become the end-of-document id.

The module imports only `transformers`, so `save_pretrained` copies it next to `tokenizer_config.json` (with an
`auto_map` entry) and `AutoTokenizer.from_pretrained(path, trust_remote_code=True)` loads the tokenizer on a
machine where hf_ssm is not installed.
"""

from __future__ import annotations

from transformers import AddedToken, PreTrainedTokenizer

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
BYTE_OFFSET = len(SPECIAL_TOKENS)


class ByteTokenizer(PreTrainedTokenizer):
    """UTF-8 bytes as tokens (vocabulary 4 specials + 256 bytes); see the module docstring for the id layout."""

    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names: dict = {}

    def __init__(self, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", **kwargs):
        names = (pad_token, bos_token, eos_token, unk_token)
        self._added_tokens_decoder = {
            i: name if isinstance(name, AddedToken) else AddedToken(name, special=True, normalized=False)
            for i, name in enumerate(names)
        }
        kwargs.setdefault("special_tokens_pattern", "none")
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        # Raw text is always bytes: a literal "<eos>" in a document is 5 byte tokens, not the end-of-document id.
        kwargs.setdefault("split_special_tokens", True)
        # Decoder-only generation continues from the last position of every row, so a padded batch of prompts
        # must be padded on the left (transformers' generate warns otherwise); saved with the tokenizer.
        kwargs.setdefault("padding_side", "left")
        super().__init__(pad_token=pad_token, bos_token=bos_token, eos_token=eos_token, unk_token=unk_token, **kwargs)

    @property
    def vocab_size(self) -> int:
        return BYTE_OFFSET + 256

    def get_vocab(self) -> dict[str, int]:
        vocab = {chr(b): b + BYTE_OFFSET for b in range(256)}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        if len(token) == 1 and ord(token) < 256:
            return ord(token) + BYTE_OFFSET
        return self.unk_token_id

    def _convert_id_to_token(self, index: int) -> str:
        if BYTE_OFFSET <= index < BYTE_OFFSET + 256:
            return chr(index - BYTE_OFFSET)
        return self.unk_token

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        out, pending = [], bytearray()
        for token in tokens:
            if len(token) == 1 and ord(token) < 256 and token not in self.added_tokens_encoder:
                pending.append(ord(token))
                continue
            out.append(pending.decode("utf-8", errors="replace"))
            pending = bytearray()
            out.append(token)
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def fast_encode(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text: the same as `tokenizer(texts)["input_ids"]`, much faster (used by the corpus packer)."""
        return [[b + BYTE_OFFSET for b in text.encode("utf-8")] for text in texts]

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        return ()  # nothing to save: the vocabulary is fixed


# save_pretrained copies this file next to tokenizer_config.json and writes an auto_map entry for it.
ByteTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = ["ByteTokenizer", "BYTE_OFFSET", "SPECIAL_TOKENS"]
