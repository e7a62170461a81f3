"""Bits per byte of a causal LM on held-out text, at its training context and at longer windows.

The test text is one token stream: the documents in order, each followed by the tokenizer's EOS id (as packing
does). It is cut to a whole number of the longest window, so every window length scores exactly the same tokens:
for a window of L tokens the stream is split into consecutive windows, each is fed as [EOS, w_0 .. w_{L-2}] and
every one of its L tokens is predicted (the first from the EOS alone). Bits per byte = the summed next-token
negative log-likelihood in nats / ln 2 / the UTF-8 bytes of the scored text, so a byte tokenizer and a subword
tokenizer are scored on the same scale.

`sliding` scores a model that must not see more than `context` tokens (a Transformer past its training length):
each window is read in chunks of `context // 2` tokens, every chunk predicted from itself and the chunk before
(between `context // 2` and `context - 1` tokens of context, positions always below `context`), which is what a
sliding attention window of the training context gives up to that granularity, at twice the cost.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

LN2 = math.log(2.0)


def test_stream(tokenizer, documents, multiple: int) -> tuple[torch.Tensor, int]:
    """(token ids [n] with n a multiple of `multiple`, UTF-8 bytes of the text those ids cover).

    Raises ValueError when the documents hold fewer than `multiple` tokens."""
    from ...data.lm_corpus import _eos_id, encode_texts

    eos = _eos_id(tokenizer)
    ids: list[int] = []
    for encoded in encode_texts(tokenizer, list(documents)):
        ids.extend(encoded)
        ids.append(eos)
    usable = len(ids) // multiple * multiple
    if usable == 0:
        raise ValueError(f"the test documents hold {len(ids)} tokens, fewer than one window of {multiple}")
    ids = ids[:usable]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return torch.tensor(ids, dtype=torch.long), len(text.encode("utf-8"))


def _forward_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Logits [B, L, V] of a causal LM for ids [B, L] (any transformers model; no cache, positions 0..L-1)."""
    return model(input_ids=ids, use_cache=False).logits


@torch.no_grad()
def token_nll(model, stream: torch.Tensor, window: int, eos_id: int, batch_size: int) -> torch.Tensor:
    """Next-token NLL in nats of every token of `stream` [n] scored in windows of `window` tokens: [n / window,
    window] (row = window, column = position inside it)."""
    device = next(model.parameters()).device
    rows = stream.view(-1, window)
    out = torch.empty(rows.shape, dtype=torch.float64)
    for start in range(0, rows.shape[0], batch_size):
        targets = rows[start : start + batch_size].to(device)
        inputs = torch.cat([torch.full_like(targets[:, :1], eos_id), targets[:, :-1]], dim=1)
        logits = _forward_logits(model, inputs).float()
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        out[start : start + batch_size] = nll.double().cpu()
    return out


@torch.no_grad()
def sliding_token_nll(model, stream: torch.Tensor, window: int, context: int, eos_id: int, batch_size: int):
    """As token_nll, but no token sees more than `context - 1` tokens: [n / window, window] (module docstring)."""
    if context % 2 or window % (context // 2):
        raise ValueError(f"sliding scoring needs an even context dividing the window, got {context} and {window}")
    half = context // 2
    rows = stream.view(-1, window)
    out = torch.empty(rows.shape, dtype=torch.float64)
    out[:, :half] = token_nll(model, rows[:, :half].reshape(-1), half, eos_id, batch_size)
    for chunk in range(1, window // half):
        pieces = rows[:, (chunk - 1) * half : (chunk + 1) * half]  # the chunk and the one before it
        nll = token_nll_of_tail(model, pieces, half, eos_id, batch_size)
        out[:, chunk * half : (chunk + 1) * half] = nll
    return out


@torch.no_grad()
def token_nll_of_tail(model, pieces: torch.Tensor, tail: int, eos_id: int, batch_size: int) -> torch.Tensor:
    """NLL [B, tail] of the last `tail` tokens of each row of `pieces` [B, L], each row read from its start."""
    device = next(model.parameters()).device
    out = torch.empty(pieces.shape[0], tail, dtype=torch.float64)
    for start in range(0, pieces.shape[0], batch_size):
        ids = pieces[start : start + batch_size].to(device)
        inputs = torch.cat([torch.full_like(ids[:, :1], eos_id), ids[:, :-1]], dim=1)
        logits = _forward_logits(model, inputs)[:, -tail:].float()
        nll = F.cross_entropy(logits.transpose(1, 2), ids[:, -tail:], reduction="none")
        out[start : start + batch_size] = nll.double().cpu()
    return out


def bits_per_byte(nll: torch.Tensor, num_bytes: int) -> float:
    """Bits per byte of summed NLL (nats) over text of `num_bytes` UTF-8 bytes."""
    return float(nll.sum()) / LN2 / num_bytes


def by_position(nll: torch.Tensor, num_bytes: int, buckets: int) -> list[float]:
    """Bits per byte in `buckets` equal ranges of positions inside the window: the NLL of each range over that
    range's share of the bytes (bytes spread evenly over tokens)."""
    window = nll.shape[1]
    if window % buckets:
        raise ValueError(f"buckets ({buckets}) must divide the window ({window})")
    per_token_bytes = num_bytes / nll.numel()
    size = window // buckets
    return [
        float(nll[:, b * size : (b + 1) * size].sum()) / LN2 / (per_token_bytes * nll.shape[0] * size)
        for b in range(buckets)
    ]


__all__ = ["bits_per_byte", "by_position", "sliding_token_nll", "test_stream", "token_nll", "token_nll_of_tail"]
