"""scripts/demo_adapter.py: one long story, the base's answer and the adapted model's, run on a
tiny offline base with both readouts."""

from __future__ import annotations

import argparse

import pytest

from hf_ssm.adapters import SSMAdapterConfig, attach_ssm_adapter
from hf_ssm.adapters.bases import load_base
from hf_ssm.adapters.tiny_base import build_tiny_qwen2, build_word_tokenizer
from hf_ssm.data import nl_state_tracking as nl
from model_checks import load_script, run_script

MIXER = {"pd_ssm_head_state_size": 4, "pd_ssm_dict_size": 4}


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("base")
    tokenizer = build_word_tokenizer(nl.task_vocabulary([nl.get_nl_task(t) for t in ("parity", "cycle_navigation")]))
    build_tiny_qwen2(len(tokenizer), hidden_size=16, num_layers=1, num_heads=2).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("readout", "task", "how"),
    [("classifier", "cycle_navigation", "its classifier"), ("lm_head", "parity", "the base's own LM head")],
)
def test_prints_the_story_the_base_answer_and_the_adapted_answer(base_folder, tmp_path, readout, task, how):
    """The base is the one the adapter records (no --base_model); the story has the asked number of transitions."""
    model, _ = load_base(str(base_folder))
    num_labels = nl.get_nl_task(task).num_classes if readout == "classifier" else None
    config = SSMAdapterConfig(layer_index=0, mixer_settings=MIXER, readout=readout, num_labels=num_labels)
    attach_ssm_adapter(model, config).save_pretrained(tmp_path / "adapter")
    args = ["--adapter", str(tmp_path / "adapter"), "--task", task, "--transitions", "12", "--fewshot_examples", "1"]
    result = run_script("demo_adapter", *args, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = nl.get_nl_task(task).answer_words
    lines = {line.split(":")[0]: line.split(":", 1)[1].strip() for line in result.stdout.splitlines() if ":" in line}
    assert lines["correct answer"] in answers
    assert lines[f"with the adapter ({how})"] in answers or readout == "lm_head"  # a random head may say anything
    assert "(12 transitions;" in result.stdout and "Question:" in result.stdout


def test_refuses_a_task_with_another_number_of_classes(base_folder, tmp_path):
    model, _ = load_base(str(base_folder))
    config = SSMAdapterConfig(layer_index=0, mixer_settings=MIXER, readout="classifier", num_labels=2)
    attach_ssm_adapter(model, config).save_pretrained(tmp_path / "adapter")
    result = run_script("demo_adapter", "--adapter", str(tmp_path / "adapter"), "--task", "cycle_navigation")
    assert result.returncode == 2 and "has 2 classes and task 'cycle_navigation' has 5" in result.stderr


@pytest.mark.parametrize(("old", "new"), [("--model", "--base_model"), ("--fewshot", "--fewshot_examples")])
def test_an_old_option_spelling_is_refused_naming_the_new_one(old, new, capsys):
    """--base_model and --fewshot_examples are named as the adapter settings they mean; the old spellings are hidden
    from --help and refused with a usage error naming the new one (--transitions stays: one story's length)."""
    parser = load_script("demo_adapter").build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--adapter", "unused", old, "1"])
    assert exit_info.value.code == 2 and f"{old} was renamed: use {new}" in capsys.readouterr().err
    visible = {o for a in parser._actions if a.help is not argparse.SUPPRESS for o in a.option_strings}
    assert old not in visible and {new, "--transitions"} <= visible
