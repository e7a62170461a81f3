"""examples/a5_plain_loop.py: the loop docs/training.md shows is the loop that was run, and it trains the default
hybrid as the docs say (the heads search first: the attention and SwiGLU outputs stay zero for 200 steps; W_P at
its own rate)."""

from __future__ import annotations

import re

import torch

from model_checks import ROOT, load_script

EXAMPLE = ROOT / "examples" / "a5_plain_loop.py"


def _train_source(text: str) -> str:
    match = re.search(r"^def train\(.*?(?=^```|^\n\ndef |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "no `def train(` found"
    return match.group(0).strip()


def test_the_docs_show_the_examples_train_line_for_line():
    docs = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    section = docs[docs.index("### The default hybrid on A5 in a plain loop") :]
    assert _train_source(section) == _train_source(EXAMPLE.read_text(encoding="utf-8"))
    assert len(_train_source(section).splitlines()) <= 30


def test_the_loop_trains_the_default_layer_with_the_sublayers_held_back():
    example = load_script("a5_plain_loop", EXAMPLE.parent)
    model = example.train(seed=0, steps=3)
    config = model.config
    assert config.pd_ssm_transition == "direct" and config.pd_ssm_num_heads == 64  # the defaults, not set by the loop
    layers = model.model.layers
    for layer in layers:
        for module in layer.modules():
            for name in ("o_proj", "down_proj"):
                if hasattr(module, name):  # silenced and not yet learning at step 3 < 200
                    assert torch.count_nonzero(getattr(module, name).weight) == 0
    assert not torch.equal(model.get_input_embeddings().weight, torch.eye(*model.get_input_embeddings().weight.shape))
