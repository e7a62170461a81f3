"""The language-modelling benchmark (benchmarks/bench_lm.py) and its scoring (hf_ssm/training/lm/bits_per_byte.py):
every longer window scores the same test bytes, the sliding window never shows a model more than its training
context, the models are matched to the Transformer's parameter count, and one tiny run trains, scores and writes a
record the report reads."""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.tokenization import ByteTokenizer
from hf_ssm.training.lm import bits_per_byte as bpb
from model_checks import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

import bench_lm  # noqa: E402
import bench_lm_report  # noqa: E402


def _tiny_model(seed: int = 0, mixers: str = "AA"):
    torch.manual_seed(seed)
    config = HybridSSMConfig(
        vocab_size=260, hidden_size=16, intermediate_size=32, num_hidden_layers=len(mixers), num_attention_heads=2,
        num_key_value_heads=2, mixers=mixers, max_position_embeddings=256,
    )  # fmt: skip
    return HybridSSMForCausalLM(config).eval()


def test_the_test_stream_is_cut_to_whole_windows_and_counts_its_bytes():
    """Documents + EOS, cut to a multiple of the longest window; the bytes are those of the kept text."""
    tok = ByteTokenizer()
    stream, nbytes = bpb.test_stream(tok, ["abcdefgh", "ijklmnopq", "é"], 8)
    assert stream.numel() == 16  # 9 + 10 + 3 tokens (é is 2 bytes) = 22 -> 16
    assert nbytes == 15  # 16 tokens, one of them the first EOS
    with pytest.raises(ValueError, match="fewer than one window"):
        bpb.test_stream(tok, ["ab"], 8)


def test_every_window_length_scores_the_same_tokens_and_a_short_window_equals_the_long_ones_start():
    """token_nll scores each token once at every window length; a causal model gives the first positions of a long
    window the same NLL as a short window starting there."""
    model = _tiny_model()
    stream = torch.randint(4, 260, (64,))
    short, long = bpb.token_nll(model, stream, 16, 2, 4), bpb.token_nll(model, stream, 64, 2, 4)
    assert short.numel() == long.numel() == 64
    torch.testing.assert_close(short[0], long[0, :16], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(short.reshape(-1)[16:32], long[0, 16:32])  # more context changes the later tokens


def test_sliding_scoring_sees_at_most_the_training_context():
    """With window = context the sliding score equals the plain one; past it each chunk is scored from the chunk
    before it only (its NLL equals scoring that slice alone)."""
    model = _tiny_model(1)
    stream = torch.randint(4, 260, (64,))
    plain = bpb.token_nll(model, stream, 16, 2, 4)
    torch.testing.assert_close(bpb.sliding_token_nll(model, stream, 16, 16, 2, 4), plain, rtol=1e-5, atol=1e-5)
    slid = bpb.sliding_token_nll(model, stream, 64, 16, 2, 4)
    alone = bpb.token_nll_of_tail(model, stream[24:40].view(1, 16), 8, 2, 4)
    torch.testing.assert_close(slid[0, 32:40], alone[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="even context"):
        bpb.sliding_token_nll(model, stream, 64, 12, 2, 4)


def test_bits_per_byte_of_a_uniform_guess_is_log2_of_the_vocabulary():
    """NLL ln(V) on every token of a byte stream gives log2(V) bits per byte, and by_position is flat."""
    nll = torch.full((4, 8), math.log(260.0), dtype=torch.float64)
    assert bpb.bits_per_byte(nll, 32) == pytest.approx(math.log2(260.0))
    assert bpb.by_position(nll, 32, 4) == pytest.approx([math.log2(260.0)] * 4)


def test_every_model_is_matched_within_ten_percent_of_the_transformer():
    """Each model's knob gives a parameter count within 10 % of the package Transformer's at d = 128."""
    target = bench_lm.reference_parameters("d128", 260)
    for name in bench_lm.MODELS:
        knob, count, reference = bench_lm.matched_knob(name, "d128", 260)
        assert reference == target and abs(count - target) <= 0.1 * target, (name, knob, count)


def _tiny_corpus(tok):
    from hf_ssm.data.lm_corpus import pack_documents

    docs = [f"def f{i}(x):\n    return x + {i}\n" for i in range(300)]
    ids, starts = pack_documents(tok, docs, bench_lm.CONTEXT)
    validation = bpb.test_stream(tok, docs[:60], bench_lm.CONTEXT)
    test = bpb.test_stream(tok, docs * 2, bench_lm.CONTEXT * 8)
    curve = bench_lm._spread_blocks(test[0], 4, bench_lm.CONTEXT)
    return bench_lm.Corpus(tok, {"dataset": "tiny"}, (ids, starts), curve, validation, test)


@pytest.mark.slow
def test_one_tiny_full_run_trains_scores_and_writes_a_record_the_report_reads(tmp_path, monkeypatch):
    """Two steps of the package Transformer at d = 128: the record holds the parameters, validation and test bits per
    byte at every multiple (sliding too), by position, the curve and the sample; the report's table reads it."""
    monkeypatch.setitem(bench_lm.PROTOCOL, "batch_size", 2)
    run = bench_lm.Run("full", "transformer", "d128", "byte", 3e-3, 0, 2 * 2 * bench_lm.CONTEXT)
    args = SimpleNamespace(runs_dir=str(tmp_path / "runs"), resume=False, results=tmp_path / "lm")
    record = bench_lm.train_one(run, _tiny_corpus(ByteTokenizer()), args, ["--phase", "full"])
    saved = json.loads(run.record_path(args.results).read_text())
    assert saved["model"]["parameters"] == record["model"]["parameters"] == bench_lm.reference_parameters("d128", 260)
    assert saved["protocol"]["steps"] == 2 and set(saved["test"]) == {"1x", "2x", "4x", "8x"}
    assert set(saved["test_sliding"]) == {"1x", "2x", "4x", "8x"}
    assert all(saved["test_best"][k] <= saved["test"][k] for k in saved["test"])
    assert len(saved["test_by_position"]) == bench_lm.POSITION_BUCKETS and saved["curve"][-1]["step"] == 2
    assert saved["sample"]["text"].startswith(bench_lm.SAMPLE_PROMPT)
    lines = bench_lm_report.full_table(bench_lm_report.full_rows([saved]))
    assert lines[2].startswith("| transformer | d128 | byte | 870,528 | 0.003 | 0 |")
