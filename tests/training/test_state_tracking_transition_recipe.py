"""The state-tracking settings `freeze_embedding` (the token embedding is not trained) and `embedding_init`, and the
config field `pd_ssm_transition_lr_scale` (the learning rate of PD-SSM's direct transition map W_P, as a multiple of
learning_rate, set through extra_config) (one-hot token codes): their validation, the optimizer and model they build, a run that keeps the
embedding, the record and the resume check."""

from __future__ import annotations

import json

import pytest
import torch

import hf_ssm.training.state_tracking.evaluation as scoring
from hf_ssm import HybridSSMForTokenClassification
from hf_ssm.training.optimization import build_optimizer, build_scheduler
from hf_ssm.training.state_tracking.driver import build_model, train_state_tracking
from hf_ssm.training.state_tracking.recipes import resolve_settings
from hf_ssm.training.state_tracking.results import recipe_overrides
from hf_ssm.training.state_tracking.settings import RESUME_SAFE_SETTINGS, StateTrackingSettings
from model_checks import kill_at_evaluation

DIRECT = {"pd_ssm_transition": "direct", "pd_ssm_output_skip": False}
TINY = dict(
    task="parity", hidden_size=16, state_size=4, num_heads=2, batch_size=8, eval_every=2, save_every=2,
    num_buckets=1, eval_samples_per_bucket=8, val_samples_per_bucket=4, train_max_length=12, test_min_length=12,
    test_max_length=20, target_accuracy=1.0, max_steps=4,
)  # fmt: skip


def tiny(**fields) -> StateTrackingSettings:
    return StateTrackingSettings(**{**TINY, "extra_config": DIRECT, **fields})


def scaled(scale: float, **layer) -> dict:
    """extra_config of the direct layer with W_P at `scale` times the learning rate."""
    return {"extra_config": {**DIRECT, "pd_ssm_transition_lr_scale": scale, **layer}}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (scaled(0.0), "`pd_ssm_transition_lr_scale` must be"),
        (scaled(-1.0), "`pd_ssm_transition_lr_scale` must be"),
        (
            {"extra_config": {"pd_ssm_transition_lr_scale": 0.5}},
            "`pd_ssm_transition_lr_scale` scales the learning rate",
        ),
        (scaled(0.5, pd_ssm_transition="bank"), "needs pd_ssm_transition='direct' (got 'bank'"),
        ({"embedding_init": "eye"}, "`embedding_init` must be one of ['normal', 'one_hot'], got 'eye'"),
        (
            {"embedding_init": "one_hot", "task": "a5", "hidden_size": 2},
            "needs hidden_size >= the task's vocabulary (3",
        ),
    ],
)
def test_bad_transition_lr_scale_or_embedding_init_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError) as err:
        tiny(**fields).validate()
    assert message in str(err.value)


def test_transition_lr_scale_is_unused_without_a_pd_ssm_layer():
    """A baseline trained under the same recipe (no pd_ssm layer, so no W_P) accepts the scale and has one group."""
    settings = tiny(mixer="diag_lru", **scaled(0.5))
    settings.validate()
    assert len(build_optimizer(build_model(settings), settings).param_groups) == 1


def test_transition_lr_scale_gives_w_p_its_own_learning_rate_through_the_schedule():
    """W_P (`transition_proj.weight`) is alone in a group at learning_rate * scale; the warm-up and cosine keep the
    ratio at every step; with scale 1 there is one group, as before."""
    settings = tiny(learning_rate=1e-2, warmup_steps=2, max_steps=6, **scaled(0.25))
    settings.validate()
    model = build_model(settings)
    optimizer = build_optimizer(model, settings)
    w_p = model.model.layers[0].mixer.transition_proj.weight
    (w_p_group,) = [g for g in optimizer.param_groups if any(p is w_p for p in g["params"])]
    (rest,) = [g for g in optimizer.param_groups if g is not w_p_group]
    assert (
        len(w_p_group["params"]) == 1 and w_p_group["lr"] == pytest.approx(2.5e-3) and rest["lr"] == pytest.approx(1e-2)
    )
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(
        [p for p in model.parameters() if p.requires_grad]
    )
    scheduler = build_scheduler(optimizer, settings)
    for _ in range(5):
        optimizer.step()
        scheduler.step()
        assert w_p_group["lr"] == pytest.approx(0.25 * rest["lr"])
    assert len(build_optimizer(build_model(tiny()), tiny()).param_groups) == 1  # scale 1: one group


def test_paper_groups_keep_their_order_with_a_scaled_transition():
    """Weight decay off the embedding and a scaled W_P: [decayed, embedding, W_P] (the first two in the order a saved
    optimizer state of the paper recipe has them)."""
    settings = tiny(weight_decay=0.01, decay_embedding=False, **scaled(0.5))
    model = build_model(settings)
    groups = build_optimizer(model, settings).param_groups
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0, 0.01]
    assert groups[1]["params"] == [model.get_input_embeddings().weight]
    assert groups[2]["params"] == [model.model.layers[0].mixer.transition_proj.weight]


def test_frozen_embedding_is_left_out_of_the_optimizer_and_never_changes(tmp_path):
    """freeze_embedding: requires_grad False, in no optimizer group; after training the saved model's embedding is
    its initial value (the rest has trained), the model reloads with the same outputs, and results.json and the
    summary's overrides record both settings."""
    settings = tiny(freeze_embedding=True, **scaled(0.5))
    initial = build_model(settings)
    embedding = initial.get_input_embeddings().weight
    assert not embedding.requires_grad
    assert all(p is not embedding for g in build_optimizer(initial, settings).param_groups for p in g["params"])
    results = train_state_tracking(settings, tmp_path)
    saved = HybridSSMForTokenClassification.from_pretrained(tmp_path / "model").eval()
    assert torch.equal(saved.get_input_embeddings().weight, embedding.detach())
    w_p = "model.layers.0.mixer.transition_proj.weight"
    assert not torch.equal(saved.state_dict()[w_p], initial.state_dict()[w_p])
    ids = torch.randint(1, 3, (2, 9))
    trained = build_model(settings)
    trained.load_state_dict(saved.state_dict())
    torch.testing.assert_close(trained.eval()(ids).logits, saved(ids).logits)
    assert results["freeze_embedding"] is True
    recorded = json.loads((tmp_path / "settings.json").read_text())
    overrides = recipe_overrides(recorded, "residual")
    assert overrides["freeze_embedding"] is True and overrides["extra_config"]["pd_ssm_transition_lr_scale"] == 0.5


def test_one_hot_embedding_makes_w_p_a_free_table_per_token():
    """embedding_init="one_hot": the embedding is the (V, d) identity, so without a transition norm the logits of
    token v are column v of W_P (one free N x N table per head and token); "normal" keeps the N(0, 0.02^2) draw."""
    settings = tiny(embedding_init="one_hot", freeze_embedding=True)
    settings.validate()
    model = build_model(settings)
    embedding = model.get_input_embeddings().weight
    torch.testing.assert_close(embedding, torch.eye(*embedding.shape), rtol=0, atol=0)
    mixer = model.model.layers[0].mixer
    ids = torch.arange(embedding.shape[0])[None]
    logits = mixer.transition_logits(embedding[ids])
    torch.testing.assert_close(logits.flatten(2), mixer.transition_proj.weight[:, : ids.shape[1]].T[None])
    normal = build_model(tiny()).get_input_embeddings().weight
    assert not torch.equal(normal, torch.eye(*normal.shape)) and normal.std() < 0.05


def test_one_hot_frozen_embedding_survives_training_and_reload(tmp_path):
    """A frozen one-hot embedding is still the identity in the saved model, which reloads with equal logits; the
    record names the init."""
    settings = tiny(embedding_init="one_hot", freeze_embedding=True)
    results = train_state_tracking(settings, tmp_path)
    saved = HybridSSMForTokenClassification.from_pretrained(tmp_path / "model").eval()
    embedding = saved.get_input_embeddings().weight
    torch.testing.assert_close(embedding, torch.eye(*embedding.shape), rtol=0, atol=0)
    assert results["embedding_init"] == "one_hot"
    assert recipe_overrides(json.loads((tmp_path / "settings.json").read_text()), "residual")["embedding_init"] == (
        "one_hot"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("freeze_embedding", True), ("extra_config", scaled(0.5)["extra_config"]), ("embedding_init", "one_hot")],
)
def test_resume_refuses_a_changed_freeze_or_transition_lr(tmp_path, monkeypatch, field, value):
    """Both change the training of every later step: not resume-safe, so a changed value is refused by name."""

    assert field not in RESUME_SAFE_SETTINGS
    settings = tiny(max_steps=8, min_steps=8)  # no early stop before the kill
    kill_at_evaluation(monkeypatch, scoring, 3, train_state_tracking, settings, tmp_path)
    changed = tiny(max_steps=8, min_steps=8, **{field: value})
    named = "extra_config.pd_ssm_transition_lr_scale" if field == "extra_config" else field
    with pytest.raises(ValueError, match=f"{named} "):
        train_state_tracking(changed, tmp_path, resume=True)


def test_direct_recipe_builds_the_documented_model_and_optimizer():
    """--recipe direct: one post-norm PD-SSM layer, d = 256, P_t from W_P RMSNorm(u_t) with W_P ~ N(0, 0.02^2), no
    D_skip, C frozen at its random N(0, 0.02^2) init, the embedding frozen; W_P at 1e-2 / 256 and everything else at a constant 1e-2 (no warm-up, no
    clipping); stop at 100 % validation within 2,000 steps."""
    settings = StateTrackingSettings(**resolve_settings("direct", {"task": "a5"}))
    settings.validate()
    model = build_model(settings)
    config, mixer = model.config, model.model.layers[0].mixer
    assert (config.mixers, config.block_type, config.hidden_size) == (["pd_ssm"], "post_norm_mixer", 256)
    assert (config.pd_ssm_num_heads, config.pd_ssm_head_state_size) == (16, 8)
    assert (config.pd_ssm_transition, config.pd_ssm_transition_norm, config.pd_ssm_output_skip) == (
        "direct",
        True,
        False,
    )
    assert (config.pd_ssm_diagonal, config.pd_ssm_input, config.pd_ssm_initial_state) == ("unit", "none", "one_hot")
    assert (
        mixer.out_proj.weight.std().item() == pytest.approx(0.02, rel=0.05) and not mixer.out_proj.weight.requires_grad
    )
    assert mixer.transition_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert not model.get_input_embeddings().weight.requires_grad and mixer.transition_norm.weight.requires_grad
    optimizer = build_optimizer(model, settings)
    (w_p_group,) = [g for g in optimizer.param_groups if any(p is mixer.transition_proj.weight for p in g["params"])]
    assert w_p_group["lr"] == pytest.approx(1e-2 / 256) and len(w_p_group["params"]) == 1
    scheduler = build_scheduler(optimizer, settings)
    for _ in range(3):
        assert [g["lr"] for g in optimizer.param_groups] == [1e-2, 1e-2 / 256]
        optimizer.step()
        scheduler.step()
    assert (settings.grad_clip, settings.target_accuracy, settings.max_steps) == (0.0, 1.0, 2000)


def test_table_recipe_is_the_reference_automatons_free_table():
    """--recipe table: one mixer-only PD-SSM layer, d = 256, the embedding frozen at one-hot codes and no norm in
    front of W_P, so token v's logits are column v of W_P (N(0, 1) entries, stepped at the full 1e-2); C the frozen
    identity, no D_skip; the final RMSNorm and the classifier read the states; constant Adam, no clipping, stop at
    100 % within 2,000 steps, not before step 300."""
    settings = StateTrackingSettings(**resolve_settings("table", {"task": "a5"}))
    settings.validate()
    model = build_model(settings)
    config, mixer = model.config, model.model.layers[0].mixer
    assert (config.mixers, config.block_type, config.hidden_size) == (["pd_ssm"], "mixer_only", 256)
    assert (config.pd_ssm_transition, config.pd_ssm_transition_norm, config.pd_ssm_output_skip) == (
        "direct",
        False,
        False,
    )
    embedding = model.get_input_embeddings().weight
    assert torch.equal(embedding, torch.eye(*embedding.shape)) and not embedding.requires_grad
    assert torch.equal(mixer.out_proj.weight, torch.eye(256)) and not mixer.out_proj.weight.requires_grad
    assert mixer.transition_proj.weight.std().item() == pytest.approx(1.0, rel=0.05)
    ids = torch.tensor([[1, 2, 1]])
    logits = mixer.transition_logits(model.get_input_embeddings()(ids))  # (1, 3, H, N, N)
    torch.testing.assert_close(logits[0, 1].flatten(), mixer.transition_proj.weight[:, 2])
    optimizer = build_optimizer(model, settings)
    assert [g["lr"] for g in optimizer.param_groups] == [1e-2]
    assert (settings.lr_schedule, settings.grad_clip, settings.target_accuracy) == ("constant", 0.0, 1.0)
    assert (settings.min_steps, settings.max_steps) == (300, 2000)


def test_constant_schedule_warms_up_then_holds_the_peak():
    settings = tiny(lr_schedule="constant", warmup_steps=4, learning_rate=1e-2, max_steps=10)
    optimizer = build_optimizer(build_model(settings), settings)
    scheduler = build_scheduler(optimizer, settings)
    lrs = []
    for _ in range(10):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:4] == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2]) and lrs[4:] == [1e-2] * 6
