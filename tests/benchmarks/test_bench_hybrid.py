"""benchmarks/bench_hybrid.py: the free-mixer floor that bounds what any SSM layer can give the hybrid's training
speed is the hybrid with only its SSM mixers replaced, and the training verdict reads the hybrid's ratio and the
floor's against the 1.5x target."""

from __future__ import annotations

import sys

import torch

from model_checks import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import bench_hybrid  # noqa: E402

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM  # noqa: E402


def _tiny_hybrid():
    torch.manual_seed(0)
    config = HybridSSMConfig(
        mixers="SA", vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2
    )
    return HybridSSMForCausalLM(config)


def test_floor_replaces_only_the_ssm_mixers_with_the_identity():
    """The floor's SSM layer passes its input through unchanged; its attention layer, norms and MLPs keep the
    hybrid's weights; the hybrid itself is left untouched; a training forward (no cache) runs."""
    hybrid = _tiny_hybrid()
    ssm_mixer = hybrid.model.layers[0].mixer
    floor = bench_hybrid.free_mixer_floor(hybrid)
    assert hybrid.model.layers[0].mixer is ssm_mixer
    x = torch.randn(2, 5, 16)
    out, state = floor.model.layers[0].mixer(x)
    assert out is x and state is None
    for name, param in floor.model.layers[1].named_parameters():
        assert torch.equal(param, dict(hybrid.model.layers[1].named_parameters())[name])
    ids = torch.randint(1, 32, (2, 7))
    assert floor(input_ids=ids, labels=ids, use_cache=False).loss.isfinite()
    assert not torch.equal(floor(input_ids=ids, use_cache=False).logits, hybrid(input_ids=ids, use_cache=False).logits)


def _row(hybrid_ratio: float, floor_ratio: float) -> dict:
    return {"ratio_wall": {"median": hybrid_ratio}, "floor_ratio_wall": {"median": floor_ratio}}


def test_training_verdict_against_the_target_and_the_floor():
    """At or above 1.5x: met; below it, "out of reach" exactly when the free-mixer floor is below 1.5x too."""
    assert bench_hybrid.TRAINING_TARGET == 1.5
    assert bench_hybrid._training_verdict(_row(1.5, 1.6)) == "met"
    assert bench_hybrid._training_verdict(_row(1.3, 1.6)) == "MISSED"
    assert bench_hybrid._training_verdict(_row(1.3, 1.4)) == "MISSED; out of reach (floor below)"
