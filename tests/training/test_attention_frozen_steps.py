"""`attention_frozen_steps` and `mlp_frozen_steps` of the state-tracking driver (hf_ssm.SublayerDelay): a hybrid's
attention layers / SwiGLU blocks start switched off (output projection at zero) and keep their initial weights until
that step while the other layers learn; from that step on they learn; a model without such a sublayer refuses the
setting, naming it."""

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


def test_mlps_start_switched_off_and_learn_from_their_step(tmp_path):
    """`mlp_frozen_steps`: every SwiGLU block's down projection starts at zero (and nothing else changes); trained 4
    steps with the MLPs held for 2, they learn in steps 2 and 3; held for 4, the saved MLPs are the initial ones."""
    delayed = build_model(StateTrackingSettings(**TINY, mlp_frozen_steps=3))
    default = build_model(StateTrackingSettings(**TINY))
    differing = [n for n, p in delayed.state_dict().items() if not torch.equal(p, default.state_dict()[n])]
    assert differing == [f"model.layers.{i}.mlp.down_proj.weight" for i in (0, 1)]
    for frozen_steps in (4, 2):
        settings = StateTrackingSettings(**TINY, max_steps=4, mlp_frozen_steps=frozen_steps)
        initial = build_model(settings)
        train_state_tracking(settings, tmp_path / str(frozen_steps))
        trained = type(initial).from_pretrained(tmp_path / str(frozen_steps) / "model")
        before, after = initial.state_dict(), trained.state_dict()
        mlp_moved = any(not torch.equal(after[n], before[n]) for n in before if ".mlp." in n)
        assert mlp_moved == (frozen_steps < 4)


def test_a_block_without_mlps_refuses_the_setting():
    with pytest.raises(ValueError, match=r"`mlp_frozen_steps` = 5 needs SwiGLU blocks.*'mixer_only'"):
        StateTrackingSettings(**{**TINY, "pattern": "S", "block_type": "mixer_only"}, mlp_frozen_steps=5).validate()


def test_the_public_delay_refuses_a_kind_the_model_lacks_and_keeps_frozen_parameters_frozen():
    """hf_ssm.SublayerDelay, as a user's loop uses it: a model without attention refuses `attention` > 0 naming it;
    a parameter frozen before the delay was made is never unfrozen by it; a negative step is refused."""
    import hf_ssm

    model = build_model(StateTrackingSettings(**{**TINY, "pattern": "S"}))
    with pytest.raises(ValueError, match="`attention` = 3: the model has no attention sublayer"):
        hf_ssm.SublayerDelay(model, attention=3)
    with pytest.raises(ValueError, match="`mlp` must be an int >= 0"):
        hf_ssm.SublayerDelay(model, mlp=-1)
    gate = model.model.layers[0].mlp.gate_proj.weight
    gate.requires_grad_(False)
    delay = hf_ssm.SublayerDelay(model, mlp=2).silence()
    delay.before_step(0)
    assert not model.model.layers[0].mlp.up_proj.weight.requires_grad
    delay.before_step(2)
    assert model.model.layers[0].mlp.up_proj.weight.requires_grad and not gate.requires_grad
    assert torch.count_nonzero(model.model.layers[0].mlp.down_proj.weight) == 0


def test_transformers_trainer_holds_the_sublayers_back_through_the_delay_s_callback(tmp_path):
    """hf_ssm.SublayerDelay with transformers' Trainer (`callbacks=[delay.trainer_callback()]`): the silenced
    attention output projection is still zero after optimizer steps 0 and 1 (attention = 2: no gradient yet) and has
    learnt after steps 2 and 3; the SSM layer learns from the first step."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    import hf_ssm

    torch.manual_seed(0)
    config = hf_ssm.HybridSSMConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2, mixers="PA",
                                    pd_ssm_num_heads=2, pd_ssm_head_state_size=4, pd_ssm_transition="direct")  # fmt: skip
    model = hf_ssm.HybridSSMForCausalLM(config)
    delay = hf_ssm.SublayerDelay(model, attention=2).silence()
    o_proj = model.model.layers[1].mixer.o_proj.weight
    ssm_start = [p.detach().clone() for p in model.model.layers[0].mixer.parameters()]
    seen = {}

    class Watch(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            seen[state.global_step] = int(torch.count_nonzero(o_proj))

    ids = torch.randint(0, 32, (8, 12))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-2,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True)  # fmt: skip
    Trainer(model=model, args=args, train_dataset=data, callbacks=[delay.trainer_callback(), Watch()]).train()
    assert seen[1] == seen[2] == 0 and seen[3] > 0 and seen[4] > 0
    assert any(not torch.equal(a, b) for a, b in zip(ssm_start, model.model.layers[0].mixer.parameters()))
