"""A built-in tiny Qwen2 base for offline adapter experiments: word-level tokenizer + small Qwen2ForCausalLM.

Nothing is downloaded: the tokenizer's vocabulary is the set of words the story tasks can produce, and the
model is built from a `Qwen2Config`. `pretrain_language_model` gives it a few minutes of next-token training
on story narratives (without questions or answers) so that its features are not random when the adapter is
attached; the base is frozen afterwards.
"""

from __future__ import annotations

import torch

PAD_TOKEN, UNK_TOKEN, EOS_TOKEN = "<pad>", "<unk>", "</s>"


def build_word_tokenizer(words: list[str]):
    """A lower-casing word-level `PreTrainedTokenizerFast`; id 0 is `<pad>`, unknown words map to `<unk>`."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    specials = [PAD_TOKEN, UNK_TOKEN, EOS_TOKEN]
    vocab = {w: i for i, w in enumerate(specials + sorted(set(words) - set(specials)))}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # \w+|[^\w\s]+, the split of nl_state_tracking.words_of
    return PreTrainedTokenizerFast(
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


def pretrain_language_model(
    model,
    tokenizer,
    texts: list[str],
    steps: int,
    accelerator,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    max_seconds: float | None = None,
    desc: str = "pretrain base",
) -> dict:
    """Next-token training on `texts` (cycled in order); stops after `steps` or `max_seconds`.

    The shared loop skeleton (hf_ssm.training.loop) with the package's warm-up + cosine schedule (warm-up over
    steps / 20). The model trains where it is (the tiny base is built on the CPU in every process, identically);
    `accelerator` (the run's) only shows the progress bar. Returns {"steps", "seconds", "loss"} (loss: mean of
    the last 20 steps).
    """
    from ..training import loop
    from ..training.optimization import warmup_cosine_schedule

    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    scheduler = warmup_cosine_schedule(optimizer, max(1, steps // 20), steps)
    clock, losses = loop.Stopwatch(), []

    def train_step(step: int) -> None:
        chunk = [texts[(step * batch_size + i) % len(texts)] for i in range(batch_size)]
        batch = tokenizer(chunk, return_tensors="pt", padding=True)
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        labels = ids.masked_fill(mask == 0, -100)
        position_ids = (mask.cumsum(-1) - 1).clamp_min(0)
        loss = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, labels=labels, use_cache=False).loss
        # A plain torch step: the base is not prepared by the accelerator (its device and precision stay).
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())

    model.train()
    outcome = loop.run_training(
        accelerator, desc=desc, start=0, total=steps, train_unit=train_step, evaluate=lambda step: None,
        eval_every=0, out_of_time=lambda: max_seconds is not None and clock.seconds > max_seconds,
    )  # fmt: skip
    model.eval()
    tail = losses[-20:]
    return {"steps": outcome.units, "seconds": clock.seconds, "loss": sum(tail) / max(1, len(tail))}


__all__ = ["build_tiny_qwen2", "build_word_tokenizer", "pretrain_language_model"]
