"""hf_ssm.parameter_groups: the optimizer groups every training loop uses (a user's, transformers' Trainer, the
package's drivers) — every trained parameter once, a PD-SSM W_P at learning_rate * pd_ssm_transition_lr_scale, weight
decay on matrices only — and the config field behind it: checked, saved, and absent from old configs (scale 1)."""

from __future__ import annotations

import json

import pytest
import torch

import hf_ssm
from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.training.checkpointing import latest_checkpoint
from hf_ssm.training.lm.lm_settings import PretrainSettings
from hf_ssm.training.lm.pretraining import pretrain

LAYER = dict(
    vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, mixers="PA", num_attention_heads=2,
    pd_ssm_num_heads=2, pd_ssm_head_state_size=4, pd_ssm_transition="direct",
)  # fmt: skip


def _model(scale: float = 0.25, **fields) -> HybridSSMForCausalLM:
    torch.manual_seed(0)
    return HybridSSMForCausalLM(HybridSSMConfig(**{**LAYER, "pd_ssm_transition_lr_scale": scale, **fields}))


def test_w_p_gets_its_own_rate_and_only_matrices_decay():
    model = _model(0.25)
    model.model.embed_tokens.weight.requires_grad_(False)  # a frozen parameter is in no group
    groups = hf_ssm.parameter_groups(model, 1e-3, weight_decay=0.1)
    w_p = model.model.layers[0].mixer.transition_proj.weight
    assert [(g["lr"], g["weight_decay"]) for g in groups] == [(1e-3, 0.1), (1e-3, 0.0), (2.5e-4, 0.1)]
    assert groups[2]["params"] == [w_p]
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and all(p.dim() < 2 for p in groups[1]["params"])
    grouped = [p for g in groups for p in g["params"]]
    trained = [p for p in model.parameters() if p.requires_grad]
    assert len(grouped) == len(trained) == len({id(p) for p in grouped})
    assert {id(p) for p in grouped} == {id(p) for p in trained}
    custom = hf_ssm.parameter_groups(model, 1e-3, 0.1, decays=lambda name, p: "mixer" in name)
    assert all(g["weight_decay"] == 0.1 for g in custom if any(p is w_p for p in g["params"]))


def test_scale_one_and_an_old_config_give_one_rate():
    """A config without the field (written before it existed) loads at 1.0: no group of its own for W_P."""
    old = HybridSSMConfig(**LAYER).to_dict()
    old.pop("pd_ssm_transition_lr_scale")
    model = HybridSSMForCausalLM(HybridSSMConfig.from_dict(old))
    assert model.config.pd_ssm_transition_lr_scale == 1.0
    assert {g["lr"] for g in hf_ssm.parameter_groups(model, 1e-3)} == {1e-3}


def test_the_scale_is_saved_and_reloaded(tmp_path):
    _model(0.125).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["pd_ssm_transition_lr_scale"] == 0.125
    reloaded = HybridSSMForCausalLM.from_pretrained(tmp_path)
    assert sorted({g["lr"] for g in hf_ssm.parameter_groups(reloaded, 1.0)}) == [0.125, 1.0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pd_ssm_transition_lr_scale": 0.0}, "`pd_ssm_transition_lr_scale` must be"),
        ({"pd_ssm_transition_lr_scale": float("nan")}, "`pd_ssm_transition_lr_scale` must be"),
        (
            {"pd_ssm_transition_lr_scale": 0.5, "pd_ssm_transition": "dictionary"},
            "`pd_ssm_transition_lr_scale` scales the learning rate of the direct transition's W_P: it needs "
            "pd_ssm_transition='direct' (got 'dictionary'",
        ),
    ],
)
def test_a_bad_scale_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError) as err:
        HybridSSMConfig(**{**LAYER, **fields})
    assert message in str(err.value)


def test_trainer_keeps_the_ratio_through_its_schedule(tmp_path):
    """transformers' Trainer with the groups' AdamW: its warm-up/decay schedule multiplies every group's rate, so W_P
    stays at 0.25 times the rest at every step, and W_P trains."""
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments

    class Ids(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ids = torch.randint(0, 32, (12,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    model = _model(0.25)
    w_p = model.model.layers[0].mixer.transition_proj.weight
    before = w_p.detach().clone()
    optimizer = torch.optim.AdamW(hf_ssm.parameter_groups(model, 1e-2))
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=4, warmup_steps=2, report_to=[],
        use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    ratios = []
    trainer = Trainer(model=model, args=args, train_dataset=Ids(), optimizers=(optimizer, None))
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    scheduler = trainer.lr_scheduler
    for _ in range(4):
        ratios.append(optimizer.param_groups[-1]["lr"] / max(optimizer.param_groups[0]["lr"], 1e-30))
        optimizer.step()
        scheduler.step()
    assert all(r == pytest.approx(0.25) for r in ratios[1:])
    trainer = Trainer(model=model, args=args, train_dataset=Ids(), optimizers=(optimizer, None))
    trainer.train()
    assert not torch.equal(w_p.detach(), before)


def test_pretraining_keeps_w_p_at_its_multiple_of_the_schedule(tmp_path):
    """scripts/pretrain.py's loop sets every group's rate each step: W_P's stays pd_ssm_transition_lr_scale times the
    schedule's (read off the saved optimizer state)."""
    config = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "mixers": "SA"}
    config |= {"pd_ssm_transition": "direct", "pd_ssm_transition_lr_scale": 0.25}
    settings = PretrainSettings(
        dataset="builtin", extra_config=config, block_size=64, batch_size=2, builtin_documents=60, eval_documents=12,
        eval_blocks=4, warmup_steps=2, sample_tokens=0, learning_rate=1e-2, max_steps=3, save_every=2, eval_every=3,
    )  # fmt: skip
    pretrain(settings, tmp_path)
    state = torch.load(latest_checkpoint(tmp_path / "checkpoints") / "optimizer.bin", weights_only=False)
    rates = sorted({round(g["lr"], 12) for g in state["param_groups"]})
    assert len(rates) == 2 and rates[0] == pytest.approx(0.25 * rates[1])
