"""`sliding_window`: each attention layer reads the w most recent tokens (the token itself included), in the full
forward, cached decoding and generate alike; the SSM layers keep the whole past; bad values are refused."""

from __future__ import annotations

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from model_checks import hybrid_config, max_cached_decode_error, tiny_config

TOL = 1e-4


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_one_attention_layer_reads_exactly_the_last_w_tokens(attn_implementation):
    """With one attention layer and window w, the logits at position t change with token t - w + 1 and never with an
    earlier one; a window as long as the input gives the unwindowed logits."""
    window, steps = 4, 12
    torch.manual_seed(0)
    config = tiny_config(["attention"], sliding_window=window, attn_implementation=attn_implementation)
    model = HybridSSMForCausalLM(config).eval()
    ids = torch.randint(1, config.vocab_size, (1, steps))
    changed = ids.clone()
    changed[0, 0] = ids[0, 0] % (config.vocab_size - 1) + 1  # another token at position 0
    with torch.no_grad():
        moved = (model(ids).logits - model(changed).logits).abs().amax(-1)[0]
        assert (moved[:window] > 1e-3).all() and (moved[window:] == 0).all()
        model.config.sliding_window = steps
        wide = model(ids).logits
        model.config.sliding_window = None
        assert torch.allclose(wide, model(ids).logits, atol=1e-6)


@pytest.mark.parametrize("mixer", ["pd_ssm", "attention"])
def test_a_windowed_models_cached_decode_equals_its_full_forward(mixer):
    """Prefill, then token-by-token decoding past the window, gives the windowed full forward's logits."""
    torch.manual_seed(0)
    config = hybrid_config(mixer, sliding_window=3)
    assert max_cached_decode_error(config, steps=13, prefill=5) <= TOL


def test_generate_with_a_window_says_what_the_windowed_forward_predicts():
    """Greedy generate (static cache too) continues with the argmax of the windowed full forward at every step."""
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(hybrid_config("pd_ssm", sliding_window=3)).eval()
    prompt = torch.randint(1, model.config.vocab_size, (1, 4))
    for cache_implementation in (None, "static"):
        out = model.generate(
            prompt, max_new_tokens=8, do_sample=False, cache_implementation=cache_implementation, pad_token_id=0
        )
        with torch.no_grad():
            predicted = model(out).logits[:, prompt.shape[1] - 1 : -1].argmax(-1)
        assert torch.equal(predicted, out[:, prompt.shape[1] :]), cache_implementation


@pytest.mark.parametrize("value", [0, -2, 2.5, "8"])
def test_a_sliding_window_that_is_not_a_positive_int_is_refused(value):
    with pytest.raises(ValueError, match="sliding_window"):
        HybridSSMConfig(sliding_window=value)


def test_the_window_survives_save_and_reload(tmp_path):
    model = HybridSSMForCausalLM(hybrid_config("pd_ssm", sliding_window=5))
    model.save_pretrained(tmp_path)
    assert HybridSSMForCausalLM.from_pretrained(tmp_path).config.sliding_window == 5
    assert HybridSSMConfig().sliding_window is None
