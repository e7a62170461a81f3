"""Fine-tuning: LoRA targets for every mixer family, LoRA trains only adapters, merged = base + adapter, full
fine-tuning, and scripts/finetune.py's argument errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.data.lm_corpus import build_block_sources, make_batch
from hf_ssm.modeling import PAPER_PD_SSM_LAYER
from hf_ssm.tokenization import ByteTokenizer
from hf_ssm.training.lm.finetuning import FinetuneSettings, add_lora, finetune, lora_target_modules
from hf_ssm.training.lm.pretraining import token_loss_sum
from model_checks import kill_at_evaluation, load_script

MIXERS = ["pd_ssm", "attention", "bd_lru", "lrc_ssm"]
SMALL = dict(
    block_size=64, batch_size=2, builtin_documents=60, eval_documents=12, eval_blocks=4, warmup_steps=1,
    sample_tokens=0, max_steps=4, eval_every=2, save_every=2,
)  # fmt: skip


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models; extra OpenMP threads only slow a loaded machine down
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    """A saved hybrid checkpoint (PD-SSM, attention, BD-LRU, LrcSSM) with the byte tokenizer."""
    torch.manual_seed(0)
    tok = ByteTokenizer()
    config = HybridSSMConfig(
        **{**PAPER_PD_SSM_LAYER, "pd_ssm_head_state_size": 4},  # the paper's layer: every projection of its group
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        mixers=MIXERS, pd_ssm_dict_size=4, lru_total_state_size=16, lrc_num_channels=16,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, max_position_embeddings=256,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("base")
    HybridSSMForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def wrapped(model) -> set[str]:
    return {name.split("model.layers.", 1)[1] for name, m in model.named_modules() if hasattr(m, "lora_A") and name}


def test_lora_target_groups_wrap_the_documented_projections(base_dir):
    """Group names resolve to the attention / SSM / MLP projections of every mixer family, and keep the MLP's
    gate_proj apart from BD-LRU's."""
    settings = FinetuneSettings(model=str(base_dir), lora=True, lora_target_modules="attention,ssm")
    model = add_lora(HybridSSMForCausalLM.from_pretrained(base_dir), settings)
    assert wrapped(model) == {
        "0.mixer.selection", "0.mixer.magnitude.up", "0.mixer.phase.up", "0.mixer.in_proj", "0.mixer.out_proj",
        "1.mixer.q_proj", "1.mixer.k_proj", "1.mixer.v_proj", "1.mixer.o_proj",
        "2.mixer.in_proj", "2.mixer.gate_proj", "2.mixer.out_proj",
        "3.mixer.in_proj", "3.mixer.out_proj",
    }  # fmt: skip
    settings.lora_target_modules = "mlp"
    model = add_lora(HybridSSMForCausalLM.from_pretrained(base_dir), settings)
    assert wrapped(model) == {f"{i}.mlp.{p}" for i in range(4) for p in ("gate_proj", "up_proj", "down_proj")}
    assert lora_target_modules("q_proj,v_proj") == ["q_proj", "v_proj"]  # plain names pass through to PEFT
    # the default PD-SSM layer (direct transitions, no B, no D generators): its W_P and C
    default = HybridSSMForCausalLM(HybridSSMConfig(vocab_size=32, hidden_size=32, num_hidden_layers=1, mixers="P"))
    settings.lora_target_modules = "ssm"
    assert wrapped(add_lora(default, settings)) == {"0.mixer.transition_proj", "0.mixer.out_proj"}
    with pytest.raises(ValueError, match="mixes group names"):
        lora_target_modules("attention,q_proj")


def test_lora_changes_only_adapters_and_merged_equals_base_plus_adapter(base_dir, tmp_path):
    """After LoRA training every base weight is bit-identical to the checkpoint, every adapter changed, and the
    saved merged model computes what base + saved adapter compute (W' = W + alpha/r * B A)."""
    from peft import PeftModel

    settings = FinetuneSettings(
        model=str(base_dir), lora=True, lora_r=4, lora_alpha=8, lora_target_modules="attention,ssm,mlp",
        learning_rate=2e-2, **SMALL,
    )  # fmt: skip
    metrics = finetune(settings, tmp_path)
    assert metrics["final_eval"]["loss"] < metrics["initial_eval"]["loss"]
    base = load_file(base_dir / "model.safetensors")
    adapter = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    merged = load_file(tmp_path / "model" / "model.safetensors")
    lora_a = {k: v for k, v in adapter.items() if ".lora_A." in k}
    assert len(lora_a) == 4 * 3 + 5 + 4 + 3 + 2  # 3 MLP projections per layer + the mixers' projections
    for key, a in lora_a.items():
        b = adapter[key.replace("lora_A", "lora_B")]
        assert b.abs().max() > 0, key  # B starts at zero: every wrapped layer runs in the forward and trained
        weight = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        torch.testing.assert_close(merged[weight], base[weight] + (8 / 4) * b @ a, rtol=1e-5, atol=1e-6)
    untouched = set(base) - {k.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight") for k in lora_a}
    assert untouched and all(torch.equal(merged[k], base[k]) for k in untouched)

    # Base weights inside the trained PEFT model are unchanged; the reloaded adapter equals the merged model.
    peft_model = PeftModel.from_pretrained(HybridSSMForCausalLM.from_pretrained(base_dir), tmp_path / "adapter").eval()
    for name, param in peft_model.named_parameters():
        if "lora_" not in name:
            key = name.removeprefix("base_model.model.").replace(".base_layer", "")
            assert torch.equal(param, base[key]), name
    merged_model = HybridSSMForCausalLM.from_pretrained(tmp_path / "model").eval()
    ids = torch.randint(4, 260, (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(merged_model(ids).logits, peft_model(input_ids=ids).logits, rtol=1e-4, atol=1e-4)
    assert (tmp_path / "model" / "tokenization.py").is_file()
    card = (tmp_path / "adapter" / "README.md").read_text()
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["library_name"] == "peft" and meta["base_model"] == str(base_dir)


def test_full_finetune_trains_every_weight_and_reloads(base_dir, tmp_path):
    settings = FinetuneSettings(model=str(base_dir), learning_rate=3e-3, **SMALL)
    metrics = finetune(settings, tmp_path)
    assert metrics["model"]["trainable_parameters"] == metrics["model"]["parameters"]
    assert not (tmp_path / "adapter").exists()
    base = load_file(base_dir / "model.safetensors")
    tuned = load_file(tmp_path / "model" / "model.safetensors")
    assert all(not torch.equal(base[k], tuned[k]) for k in base if not k.endswith("norm.weight"))
    model = HybridSSMForCausalLM.from_pretrained(tmp_path / "model").eval()
    _, (ids, starts) = build_block_sources(settings.corpus_spec(), ByteTokenizer(), 64, 4)
    batch = make_batch(ids, starts, True)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    loss, count = token_loss_sum(logits, batch["labels"])
    assert float(loss / count) == pytest.approx(metrics["final_eval"]["loss"], rel=1e-4)


def test_lora_resume_reproduces_the_uninterrupted_run(base_dir, tmp_path, monkeypatch):
    from hf_ssm.training.lm import pretraining as lm

    settings = dict(model=str(base_dir), lora=True, learning_rate=2e-2, **{**SMALL, "max_steps": 6})
    full = finetune(FinetuneSettings(**settings), tmp_path / "full")
    # evaluations at steps 0, 2, 4, 6: dies after the step-4 checkpoint
    kill_at_evaluation(monkeypatch, lm, 4, finetune, FinetuneSettings(**settings), tmp_path / "part")
    resumed = finetune(FinetuneSettings(**settings), tmp_path / "part", resume=True)
    assert resumed["resumed_from"] == [4]
    assert [h["loss"] for h in resumed["history"]] == pytest.approx([h["loss"] for h in full["history"]], rel=1e-6)


def test_resume_with_changed_settings_is_refused(base_dir, tmp_path):
    """finetune(resume=True) shares pretraining's check: a changed LoRA rank is refused, naming the field, before
    settings.json is rewritten."""
    settings = dict(model=str(base_dir), lora=True, **SMALL)
    finetune(FinetuneSettings(**settings), tmp_path)
    recorded = (tmp_path / "settings.json").read_text()
    with pytest.raises(ValueError, match="lora_r 8 -> 4"):
        finetune(FinetuneSettings(**{**settings, "lora_r": 4}), tmp_path, resume=True)
    assert (tmp_path / "settings.json").read_text() == recorded
    assert not (tmp_path / "model" / "checkpoint_complete.json").exists()
    assert not (tmp_path / "adapter" / "checkpoint_complete.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--model is required"),
        (["--model", "/no/such/model"], "no config.json there"),
        (["--model", "{base}", "--block_size", "512"], "--block_size 512 is above the model's limit"),
        (["--model", "{base}", "--lora", "--lora_target_modules", "nope_proj"], "nope_proj"),
        (["--model", "{base}", "--lora", "--save", "everything"], "--save must be one of"),
        (["--model", "{base}", "--dataset", "hf-ssm-no-such-dataset-xyz"], "could not load dataset"),
    ],
)
def test_bad_arguments_exit_with_a_clear_message(args, message, base_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    args = [a.replace("{base}", str(base_dir)) for a in args]
    with pytest.raises(SystemExit) as exit_info:
        load_script("finetune").main([*args, "--output_dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
