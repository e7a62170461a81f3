"""Model cards: valid YAML front matter, architecture / training / evaluation read from the run, the script."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from huggingface_hub import ModelCard

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.model_card import check_model_card, count_parameters, render_model_card, write_model_card
from model_checks import ROOT, load_script


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


@pytest.fixture
def config() -> HybridSSMConfig:
    return HybridSSMConfig(
        vocab_size=260, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        mixers=["pd_ssm", "attention", "bd_lru"], pd_ssm_head_state_size=4, pd_ssm_dict_size=4, lru_total_state_size=16,
    )  # fmt: skip


def run_metrics(dataset: str = "wikitext") -> dict:
    return {
        "kind": "pretrain",
        "dataset": dataset,
        "settings": {"dataset": dataset, "learning_rate": 3e-3, "warmup_steps": 30, "min_lr_ratio": 0.1,
                     "block_size": 128, "reset_at_boundaries": True, "grad_clip": 1.0, "tokenizer": "byte",
                     "gradient_accumulation_steps": 1, "weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95},
        "steps": 300, "tokens_seen": 307200, "global_batch_blocks": 8, "global_batch_tokens": 1024,
        "train_seconds": 123.4, "num_processes": 1, "mixed_precision": "no", "device": "cpu",
        "initial_eval": {"step": 0, "loss": 5.56, "perplexity": 259.8},
        "final_eval": {"step": 300, "loss": 0.9123, "perplexity": 2.49},
        "sample": {"prompt": "Once", "text": "Once upon a time"},
    }  # fmt: skip


def test_card_front_matter_and_sections_come_from_config_and_metrics(config):
    """The YAML front matter parses and names library, tags, dataset and metric values; the architecture table
    lists every layer's mixer and the exact parameter count; training settings and results are shown."""
    card = render_model_card(config, run_metrics(), model_name="my-hybrid")
    meta = front_matter(card)
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"
    assert {"hf_ssm", "pd-ssm", "bd-lru", "attention", "custom_code"} <= set(meta["tags"])
    assert meta["datasets"] == ["wikitext"] and meta["metrics"] == ["perplexity", "loss"]
    results = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert results == {"perplexity": 2.49, "loss": 0.9123}
    parameters = sum(p.numel() for p in HybridSSMForCausalLM(config).parameters())
    assert count_parameters(config) == parameters
    assert f"| parameters | {parameters:,} |" in card
    for i, mixer in enumerate(["pd_ssm", "attention", "bd_lru"]):
        assert f"| {i} | `{mixer}` |" in card
    assert "| steps | 300 |" in card and "| training time | 123 s |" in card
    assert "| at initialisation (step 0) | 5.5600 | 259.80 |" in card
    assert "| after training (step 300) | 0.9123 | 2.49 |" in card


def test_builtin_data_is_not_listed_as_a_hub_dataset(config):
    meta = front_matter(render_model_card(config, run_metrics("builtin")))
    assert "datasets" not in meta
    assert "built-in stories" in meta["model-index"][0]["results"][0]["dataset"]["name"]


def test_card_without_metrics_still_describes_the_architecture(config):
    card = render_model_card(config)
    meta = front_matter(card)
    assert "model-index" not in meta and "## Evaluation" not in card and "| 2 | `bd_lru` |" in card


def test_script_writes_card_from_model_and_run_folders(config, tmp_path, capsys):
    run = tmp_path / "run"
    torch.manual_seed(0)
    HybridSSMForCausalLM(config).save_pretrained(run / "model")
    (run / "metrics.json").write_text(json.dumps(run_metrics()))
    script = load_script("make_model_card")
    out = tmp_path / "card.md"
    assert script.main([str(run / "model"), "--output", str(out)]) == 0
    meta = front_matter(out.read_text())
    assert meta["model-index"][0]["name"] == "run"  # the run folder names a generic `model/` folder
    with pytest.raises(SystemExit) as exit_info:
        script.main([str(tmp_path / "missing")])
    assert exit_info.value.code == 2 and "no config.json" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no metrics.json"):
        write_model_card(run / "model", run_dir=tmp_path / "nowhere")


def test_card_metadata_reads_back_through_huggingface_hub(config, monkeypatch):
    """huggingface_hub's ModelCard parses the front matter into ModelCardData with the evaluation figures passed in
    (EvalResults of the model-index), the body holds the same figures, and nothing opens a network connection."""

    def no_network(*args, **kwargs):
        raise AssertionError("a model card must be built without network access")

    monkeypatch.setattr("socket.socket.connect", no_network)
    card = ModelCard(render_model_card(config, run_metrics(), model_name="my-hybrid", base_model="org/base"))
    data = card.data
    assert (data.library_name, data.license, data.base_model) == ("transformers", "apache-2.0", "org/base")
    assert data.model_name == "my-hybrid" and data.datasets == ["wikitext"]
    results = {r.metric_type: (r.metric_value, r.dataset_type, r.dataset_split) for r in data.eval_results}
    assert results == {"perplexity": (2.49, "wikitext", "validation"), "loss": (0.9123, "wikitext", "validation")}
    assert card.text.startswith("\n# my-hybrid\n") and "| after training (step 300) | 0.9123 | 2.49 |" in card.text


def test_card_check_refuses_cards_the_hub_metadata_cannot_read(config):
    """check_model_card raises a ValueError naming the problem: no front matter, a malformed model-index, or a
    missing field every hf_ssm card sets."""
    card = render_model_card(config, run_metrics())
    assert check_model_card(card) == card
    with pytest.raises(ValueError, match="must start with a YAML front matter"):
        check_model_card(card.split("---\n", 2)[2])
    broken = card.replace("  results:\n", "  result:\n", 1)
    assert broken != card
    with pytest.raises(ValueError, match="not valid card metadata"):
        check_model_card(broken)
    with pytest.raises(ValueError, match=r"lacks \['license'\]"):
        check_model_card(card.replace("license: apache-2.0\n", "", 1))


@pytest.mark.parametrize("path", sorted((ROOT / "model_cards").glob("*.md")), ids=lambda p: p.name)
def test_shipped_model_cards_are_valid_cards(path):
    """Every card in model_cards/ is readable by huggingface_hub's ModelCard and carries the required fields."""
    check_model_card(path.read_text(encoding="utf-8"))
