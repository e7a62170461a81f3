"""Which tokens move an adapter's state: every token, or only the tokens that end a sentence (docs/adapter.md).

An English sentence such as "Bob drives the train back to the previous station." is one transition of the story's
automaton, but ten tokens long. When every token is a step, the filler words must all learn to act as the identity
before the event words can be told apart; when only the sentence's last token is a step, the base's features
there (which already encode the whole sentence after a few layers) choose one transition per sentence.
"""

from __future__ import annotations

TRANSITION_POSITIONS = ("every_token", "sentence_ends")
SENTENCE_END_MARKS = (".", "!", "?")


def sentence_end_token_ids(tokenizer) -> list[int]:
    """Ids of the tokens whose text, stripped of white space, ends with ".", "!" or "?" (special tokens excluded):
    the tokens that can end a sentence. ValueError when the vocabulary has none."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = [i for i in range(len(tokenizer)) if i not in special]
    texts = tokenizer.batch_decode([[i] for i in ids])
    found = [i for i, text in zip(ids, texts) if text.strip().endswith(SENTENCE_END_MARKS)]
    if not found:
        raise ValueError(f"the tokenizer has no token ending with one of {SENTENCE_END_MARKS}")
    return found


def transition_token_ids(tokenizer, transitions_at: str) -> list[int] | None:
    """`SSMAdapterConfig.transition_token_ids` for `transitions_at` in TRANSITION_POSITIONS: None for
    "every_token", `sentence_end_token_ids(tokenizer)` for "sentence_ends"."""
    if transitions_at not in TRANSITION_POSITIONS:
        raise ValueError(f"`transitions_at` must be one of {list(TRANSITION_POSITIONS)}, got {transitions_at!r}")
    return None if transitions_at == "every_token" else sentence_end_token_ids(tokenizer)


__all__ = ["SENTENCE_END_MARKS", "TRANSITION_POSITIONS", "sentence_end_token_ids", "transition_token_ids"]
