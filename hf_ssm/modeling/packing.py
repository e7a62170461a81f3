"""Packed documents: several sequences in one row, each SSM starting from a zero state at its first token.

Packing follows the transformers / FlashAttention convention: no attention mask, and `position_ids` that restart
at every document (a new document starts wherever position_ids[t] != position_ids[t-1] + 1). Attention gets a
block-diagonal causal mask from transformers' mask utilities; SSM layers see each document as its own row, so
a packed batch computes exactly what running the documents separately computes, for every mixer.

This re-gather is the only variable-length path: the scan ops and kernels take no `cu_seqlens`. It needs no
support from the mixers (the DEER cells, whose Newton iterations would otherwise need a reset at every boundary,
included), and a new mixer gets packing for free; its cost is the padding of every document to the longest one
and one gather / scatter of the hidden states per SSM layer (docs/design.md §7.5).
"""

from __future__ import annotations

import torch


def document_starts(position_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) bool, True where a document starts (the first token of a row always starts one)."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    return starts


class PackedDocuments:
    """Index maps between packed rows (B, T, ...) and one-document-per-row form (R, L, ...).

    `index` (R, L) holds flat positions into B*T (0 where `mask` is False), `mask` (R, L) marks real tokens.
    """

    def __init__(self, starts: torch.Tensor):
        batch, steps = starts.shape
        flat_starts = starts.reshape(-1)
        doc_of_token = torch.cumsum(flat_starts.long(), 0) - 1  # (B*T,) document id of every token
        start_positions = torch.nonzero(flat_starts).squeeze(-1)  # (R,)
        tokens = torch.arange(batch * steps, device=starts.device)
        offset = tokens - start_positions[doc_of_token]
        lengths = torch.bincount(doc_of_token)
        self.batch, self.steps = batch, steps
        self.num_documents, self.max_length = len(start_positions), int(lengths.max())
        self.index = torch.zeros(self.num_documents, self.max_length, dtype=torch.long, device=starts.device)
        self.mask = torch.zeros(self.num_documents, self.max_length, dtype=torch.bool, device=starts.device)
        self.index[doc_of_token, offset] = tokens
        self.mask[doc_of_token, offset] = True

    @classmethod
    def from_position_ids(cls, position_ids: torch.Tensor, batch: int) -> PackedDocuments | None:
        """None when no row holds more than one document (nothing to unpack)."""
        if position_ids.dim() != 2 or position_ids.shape[0] not in (1, batch):
            return None
        starts = document_starts(position_ids.expand(batch, -1))
        if bool(starts[:, 1:].any()):
            return cls(starts)
        return None

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (R, L, ...), zeros at padding."""
        rows = x.reshape(self.batch * self.steps, *x.shape[2:])[self.index]
        return rows * self.mask.view(*self.mask.shape, *([1] * (x.dim() - 2))).to(rows.dtype)

    def pack(self, rows: torch.Tensor) -> torch.Tensor:
        """(R, L, ...) -> (B, T, ...)."""
        out = rows.new_empty(self.batch * self.steps, *rows.shape[2:])
        out[self.index[self.mask]] = rows[self.mask]
        return out.view(self.batch, self.steps, *rows.shape[2:])
