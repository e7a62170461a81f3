"""Model-level properties every mixer must keep; the per-mixer test files call these with their configs."""

from __future__ import annotations

import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM


def tiny_config(mixers: str | list[str], **overrides) -> HybridSSMConfig:
    """A small hybrid config; `mixers` is a pattern string or a list of mixer names."""
    layers = len(mixers)
    settings = dict(
        vocab_size=37,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        mixers=mixers,
        pd_ssm_num_heads=2,
        pd_ssm_state_size=5,
        pd_ssm_dict_size=4,
    )
    settings.update(overrides)
    return HybridSSMConfig(**settings)


@torch.no_grad()
def max_cached_decode_error(config: HybridSSMConfig, batch: int = 2, steps: int = 13, prefill: int = 6) -> float:
    """Largest |full-sequence logits - (prefill + one-token-at-a-time cached decode) logits|."""
    model = HybridSSMForCausalLM(config).eval()
    ids = torch.randint(1, config.vocab_size, (batch, steps))
    full = model(ids, use_cache=False).logits
    out = model(ids[:, :prefill], use_cache=True)
    pieces, cache = [out.logits], out.cache
    for t in range(prefill, steps):
        out = model(ids[:, t : t + 1], cache=cache, use_cache=True)
        pieces.append(out.logits)
        cache = out.cache
    return (full - torch.cat(pieces, dim=1)).abs().max().item()


@torch.no_grad()
def reload_is_bit_identical(config: HybridSSMConfig, directory: str) -> bool:
    """save_pretrained -> from_pretrained gives exactly the same logits, and only safetensors are written."""
    import os

    model = HybridSSMForCausalLM(config).eval()
    ids = torch.randint(1, config.vocab_size, (2, 9))
    model.save_pretrained(directory)
    files = os.listdir(directory)
    assert "model.safetensors" in files and not any(f.endswith((".bin", ".pt", ".pth")) for f in files), files
    reloaded = HybridSSMForCausalLM.from_pretrained(directory).eval()
    return torch.equal(model(ids).logits, reloaded(ids).logits)
