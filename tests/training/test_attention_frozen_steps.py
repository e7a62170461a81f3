"""`attention_frozen_steps` of the state-tracking driver: a hybrid's attention layers start switched off (output
projection at zero) and keep their initial weights until that step while the other layers learn; from that step on
they learn; a model without attention refuses the setting, naming it."""

from __future__ import annotations

import pytest
import torch

from hf_ssm.modeling.attention import HybridSSMAttention
from hf_ssm.training.state_tracking.driver import build_model, train_state_tracking
from hf_ssm.training.state_tracking.settings import StateTrackingSettings

TINY = dict(
    task="parity",
    mixer="diag_lru",
    pattern="SA",
    hidden_size=16,
    state_size=4,
    num_heads=2,
    train_max_length=8,
    test_min_length=8,
    test_max_length=12,
    num_buckets=1,
    batch_size=4,
    eval_every=4,  # one validation, after the last step: the saved weights are the last ones
    save_every=0,
    eval_samples_per_bucket=8,
    val_samples_per_bucket=8,
    restarts=1,
    learning_rate=1e-2,
)


def _attention(model) -> list[HybridSSMAttention]:
    return [m for m in model.modules() if isinstance(m, HybridSSMAttention)]


def test_attention_starts_switched_off():
    """With the setting, each attention layer's output projection starts at zero (the layer adds nothing to the
    residual stream); its other weights and every other layer are the default initialisation."""
    delayed = build_model(StateTrackingSettings(**TINY, attention_frozen_steps=3))
    default = build_model(StateTrackingSettings(**TINY))
    (layer,) = _attention(delayed)
    assert torch.count_nonzero(layer.o_proj.weight) == 0
    assert torch.count_nonzero(_attention(default)[0].o_proj.weight) > 0
    differing = [n for n, p in delayed.state_dict().items() if not torch.equal(p, default.state_dict()[n])]
    assert differing == ["model.layers.1.mixer.o_proj.weight"]


@pytest.mark.parametrize("frozen_steps", [4, 2])
def test_attention_keeps_its_init_until_the_step_then_learns(tmp_path, frozen_steps):
    """Trained 4 steps: with attention frozen for all 4 the saved attention weights are the initial ones (o_proj
    still zero) while the SSM layer has moved; frozen for 2, attention learns in steps 2 and 3."""
    settings = StateTrackingSettings(**TINY, max_steps=4, attention_frozen_steps=frozen_steps)
    initial = build_model(settings)
    train_state_tracking(settings, tmp_path)
    trained = type(initial).from_pretrained(tmp_path / "model")
    after, before = _attention(trained)[0], _attention(initial)[0]
    attention_moved = any(not torch.equal(a, b) for a, b in zip(after.parameters(), before.parameters(), strict=True))
    assert attention_moved == (frozen_steps < 4)
    ssm_after, ssm_before = trained.model.layers[0].mixer, initial.model.layers[0].mixer
    assert any(not torch.equal(a, b) for a, b in zip(ssm_after.parameters(), ssm_before.parameters(), strict=True))


def test_a_model_without_attention_refuses_the_setting():
    with pytest.raises(ValueError, match=r"`attention_frozen_steps` = 5 needs an attention layer.*\['diag_lru'\]"):
        StateTrackingSettings(**{**TINY, "pattern": "S"}, attention_frozen_steps=5).validate()


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="attention_frozen_steps"):
        StateTrackingSettings(**TINY, attention_frozen_steps=-1).validate()
