"""The language-modelling benchmark (benchmarks/bench_lm.py) and its scoring (hf_ssm/training/lm/bits_per_byte.py):
every longer window scores the same test bytes, the sliding window never shows a model more than its training
context, the models are matched to the Transformer's parameter count, and one tiny run trains, scores and writes a
record the report reads. A corpus of one's own files (--train_files / --validation_files / --test_files) is read as
pretraining reads files, fingerprinted, kept in a results folder of its own and refused where another corpus's
records are; the device a run used is recorded."""

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
    args = SimpleNamespace(runs_dir=str(tmp_path / "runs"), resume=False, results=tmp_path / "lm", device="cpu")
    record = bench_lm.train_one(run, _tiny_corpus(ByteTokenizer()), args, ["--phase", "full"])
    saved = json.loads(run.record_path(args.results).read_text())
    assert saved["model"]["parameters"] == record["model"]["parameters"] == bench_lm.reference_parameters("d128", 260)
    assert saved["protocol"]["steps"] == 2 and set(saved["test"]) == {"1x", "2x", "4x", "8x"}
    assert set(saved["test_sliding"]) == set(saved["test_windowed"]) == {"1x", "2x", "4x", "8x"}
    readings = ("test", "test_sliding", "test_windowed")
    assert all(saved["test_best"][k] == min(saved[r][k] for r in readings) for k in saved["test"])
    assert saved["test_windowed"]["1x"] == saved["test"]["1x"] != saved["test_windowed"]["2x"]
    for name in ("test", "test_sliding", "test_windowed"):  # by position inside the 8x window, every reading
        assert len(saved[f"{name}_by_position"]) == bench_lm.POSITION_BUCKETS
    assert len(saved["test_by_position"]) == bench_lm.POSITION_BUCKETS and saved["curve"][-1]["step"] == 2
    assert saved["sample"]["text"].startswith(bench_lm.SAMPLE_PROMPT)
    cpu = saved["train_cpu_seconds"]
    assert saved["curve"][-1]["train_cpu_seconds"] == pytest.approx(cpu, abs=0.1) and cpu > 0
    lines = bench_lm_report.full_table(bench_lm_report.full_rows([saved]))
    assert lines[2].startswith("| transformer | d128 | byte | 870,528 | 0.003 | 0 |")
    assert lines[2].endswith(f" | {cpu:,.0f} |")  # the CPU seconds column: the run's total


def test_the_report_gives_a_resumed_runs_cpu_seconds_as_recorded_or_the_steps_its_process_covered():
    """A run resumed from a checkpoint that recorded no CPU seconds shows its process's share and the steps it
    covers, never that share as the run's total; a run with the total shows the total."""
    record = {"train_cpu_seconds": None, "train_cpu_seconds_this_process": 1429.9, "resumed_from": [100]}
    record["protocol"] = {"steps": 1221}
    assert bench_lm_report._cpu_seconds(record) == "1,430 (steps 100-1,221)"
    assert bench_lm_report._cpu_seconds(record | {"train_cpu_seconds": 1561.2}) == "1,561"
    assert bench_lm_report._cpu_seconds(record | {"resumed_from": []}) == "1,430"


@pytest.mark.slow
def test_a_full_run_saves_its_model_where_from_pretrained_loads_it(tmp_path, monkeypatch):
    """A full run writes <runs_dir>/full/<run>/model (save_pretrained + tokenizer) before its record, which names
    it; AutoModelForCausalLM / AutoTokenizer load it and the loaded model computes the trained model's logits."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setitem(bench_lm.PROTOCOL, "batch_size", 2)
    monkeypatch.setattr(bench_lm, "score", lambda *a, **k: {"validation_bpb": 1.0})  # scoring has its own test
    run = bench_lm.Run("full", "transformer", "d128", "byte", 3e-3, 0, 2 * bench_lm.CONTEXT)
    args = SimpleNamespace(runs_dir=str(tmp_path / "runs"), resume=False, results=tmp_path / "lm", device="cpu")
    record = bench_lm.train_one(run, _tiny_corpus(ByteTokenizer()), args, ["--phase", "full"])
    folder = tmp_path / "runs" / record["saved_model"]
    assert folder == tmp_path / "runs" / "full" / run.name / "model"
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    assert bench_lm.count_parameters(model) == record["model"]["parameters"]
    ids = tokenizer("def f(x):", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert model.generate(ids, max_new_tokens=8, do_sample=False).shape == (1, ids.shape[1] + 8)


# ----------------------------------------------------------------------------------------------------------------
# One's own corpus, the device
# ----------------------------------------------------------------------------------------------------------------


def _own_files(folder, tag: str = "") -> list[str]:
    """Training / validation (.jsonl) / test files big enough for the benchmark's context and 8x window."""
    folder.mkdir(parents=True, exist_ok=True)
    para = [f"def f{i}{tag}(x):\n    return x * {i} + {i % 7}  # paragraph {i} of the test corpus" for i in range(160)]
    (folder / "train.txt").write_text("\n\n".join(para[:60]) + "\n")
    rows = [json.dumps({"text": p, "id": i}) for i, p in enumerate(para[60:75])]
    (folder / "validation.jsonl").write_text("\n".join(rows) + "\n")
    (folder / "test.txt").write_text("\n\n".join(para[75:]) + "\n")
    files = [str(folder / name) for name in ("train.txt", "validation.jsonl", "test.txt")]
    return ["--train_files", files[0], "--validation_files", files[1], "--test_files", files[2]]


def test_own_files_give_three_splits_read_as_pretraining_reads_them_and_a_fingerprint_of_their_own(tmp_path):
    """--train_files / --validation_files / --test_files give a corpus of three splits whose documents are those
    pretraining's DocumentSource reads from the same files (.txt by paragraph, .jsonl by its text column), and a
    fingerprint naming every file with its size and sha256: not python_stdlib's, changed by one edited byte."""
    import hashlib

    from hf_ssm.data.lm_corpus import CorpusSpec, DocumentSource
    from hf_ssm.data.python_stdlib import default_corpus

    flags = _own_files(tmp_path / "data")
    args = bench_lm.parse_args(["--phase", "sweep", *flags, "--results", str(tmp_path / "lm"), "--device", "cpu"])
    source = bench_lm.corpus_source(args)
    for split, path in zip(("train", "validation", "test"), flags[1::2]):
        pretraining = DocumentSource(CorpusSpec(dataset=None, train_files=[path], eval_documents=0))
        assert list(source.documents(split)) == list(pretraining.train_documents())
        (entry,) = source.fingerprint["splits"][split]["listing"]
        assert entry["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert len(list(source.documents("train"))) == 60 and len(list(source.documents("validation"))) == 15
    corpus = bench_lm.open_corpus("byte", source)
    assert corpus.fingerprint == source.fingerprint != default_corpus().fingerprint
    assert corpus.fingerprint["dataset"] == "local_files" and corpus.fingerprint["files"] == 3
    assert corpus.train[0].shape[1] == bench_lm.CONTEXT and corpus.test[0].numel() % (8 * bench_lm.CONTEXT) == 0
    assert corpus.validation[1] > 0 and args.runs_dir == str(tmp_path / "lm" / "runs")
    with open(flags[-1], "a") as handle:
        handle.write("#")
    assert bench_lm.corpus_source(args).fingerprint["listing_sha256"] != source.fingerprint["listing_sha256"]
    (tmp_path / "data" / "copy.txt").write_text((tmp_path / "data" / "train.txt").read_text())
    with pytest.raises(ValueError, match="--test_files: .*copy.txt has the same bytes as .*train.txt"):
        bench_lm.corpus_source(bench_lm.parse_args(["--phase", "sweep", *flags[:5], str(tmp_path / "data" / "copy.txt"),
                                                    "--results", str(tmp_path / "lm")]))  # fmt: skip


def test_the_three_files_flags_go_together_and_need_a_results_folder_of_their_own(tmp_path):
    """A missing files flag is refused naming it; own files without --results, or with python_stdlib's
    results/lm, are refused naming --results; --text_sample_by without files is refused (not ignored)."""
    flags = _own_files(tmp_path)
    results = ["--results", str(tmp_path / "lm")]
    for i, name in enumerate(("--train_files", "--validation_files", "--test_files")):
        without = flags[: 2 * i] + flags[2 * i + 2 :]
        with pytest.raises(SystemExit, match=f"{name} missing"):
            bench_lm.parse_args(["--phase", "sweep", *without, *results])
    with pytest.raises(SystemExit, match="--train_files needs --results DIR"):
        bench_lm.parse_args(["--phase", "sweep", *flags])
    with pytest.raises(SystemExit, match="--results .*python_stdlib's"):
        bench_lm.parse_args(["--phase", "sweep", *flags, "--results", str(bench_lm.RESULTS)])
    with pytest.raises(SystemExit, match="--text_sample_by reads --train_files"):
        bench_lm.parse_args(["--phase", "sweep", "--text_sample_by", "line"])
    default = bench_lm.parse_args(["--phase", "sweep"])
    assert default.results == bench_lm.RESULTS and default.train_files is None


def test_cpu_threads_is_spelled_as_the_other_scripts_and_threads_is_refused(capsys):
    """--cpu_threads (as hybrid_ladder.py's and reference_automaton.py's); the old --threads is refused naming it,
    and --cpu_threads 0 naming itself."""
    assert bench_lm.parse_args(["--phase", "sweep", "--cpu_threads", "2", "--device", "cpu"]).cpu_threads == 2
    with pytest.raises(SystemExit) as exit_info:
        bench_lm.parse_args(["--phase", "sweep", "--threads", "2"])
    assert exit_info.value.code == 2 and "--threads was renamed: use --cpu_threads" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--cpu_threads must be >= 1"):
        bench_lm.parse_args(["--phase", "sweep", "--cpu_threads", "0"])


def _record(corpus: dict, model: str = "transformer", rate: float = 1e-3) -> dict:
    run = {"model": model, "size": "d128", "tokenizer": "byte"}
    return {"run": run, "corpus": corpus, "validation_bpb": 3.0, "learning_rate": rate}


def test_a_results_folder_holding_another_corpus_records_is_refused(tmp_path):
    """Records of python_stdlib in the folder: a run on own files (main, before training), best_rate and the
    record check refuse, naming --results and the corpus; the report refuses a folder mixing two corpora; a
    folder of the same corpus's records passes."""
    from hf_ssm.data.python_stdlib import default_corpus

    flags = _own_files(tmp_path / "data")
    results = tmp_path / "lm"
    argv = ["--phase", "sweep", "--models", "transformer", *flags, "--results", str(results), "--device", "cpu"]
    own = bench_lm.corpus_source(bench_lm.parse_args(argv)).fingerprint
    bench_lm.write_json_atomic(results / "sweep" / "stdlib.json", _record(default_corpus().fingerprint))
    with pytest.raises(ValueError, match="--results .*sweep/stdlib.json was trained on python_stdlib"):
        bench_lm.main(argv)
    with pytest.raises(ValueError, match="--results"):
        bench_lm.best_rate(results, "transformer", "d128", "byte", own)
    with pytest.raises(ValueError, match="not on local_files"):
        bench_lm.check_results_corpus(results, own)
    bench_lm.write_json_atomic(results / "full" / "own.json", _record(own))
    with pytest.raises(ValueError, match="records of two corpora are never mixed"):
        bench_lm.main(["--phase", "report", "--results", str(results)])
    (results / "sweep" / "stdlib.json").unlink()
    bench_lm.write_json_atomic(results / "sweep" / "own.json", _record(own, rate=3e-3))
    bench_lm.check_results_corpus(results, own)
    assert bench_lm.best_rate(results, "transformer", "d128", "byte", own) == 3e-3


def test_a_run_records_its_device_and_corpus_and_a_resume_on_changed_files_is_refused(tmp_path, monkeypatch):
    """Two steps on own files with --device cpu: the record names the device (no CUDA peak memory on the CPU, the
    RSS peak as before) and the corpus fingerprint, settings.json holds it; after a training file changes,
    --resume of that run is refused naming corpus_files, before anything is rewritten."""
    monkeypatch.setitem(bench_lm.PROTOCOL, "batch_size", 2)
    flags = _own_files(tmp_path / "data")
    argv = ["--phase", "sweep", *flags, "--results", str(tmp_path / "lm"), "--device", "cpu", "--save_every", "1"]
    args = bench_lm.parse_args(argv)
    source = bench_lm.corpus_source(args)
    run = bench_lm.Run("sweep", "transformer", "d128", "byte", 1e-3, 0, 2 * 2 * bench_lm.CONTEXT, {"save_every": 1})
    bench_lm.train_one(run, bench_lm.open_corpus("byte", source), args, argv)
    saved = json.loads(run.record_path(args.results).read_text())
    assert saved["device"] == "cpu" and saved["gpu"] is None and saved["peak_cuda_memory_mib"] is None
    assert saved["peak_rss_mib"] > 0 and saved["corpus"] == source.fingerprint
    run_dir = tmp_path / "lm" / "runs" / "sweep" / run.name
    settings = json.loads((run_dir / "settings.json").read_text())
    assert settings["corpus_files"] == source.fingerprint and settings["dataset"] is None
    with open(flags[1], "a") as handle:
        handle.write("\n\ndef changed():\n    pass\n")
    changed = bench_lm.open_corpus("byte", bench_lm.corpus_source(args))
    args.resume = True
    with pytest.raises(ValueError, match="--resume: settings differ .*corpus_files"):
        bench_lm.train_one(run, changed, args, [*argv, "--resume"])
    assert json.loads((run_dir / "settings.json").read_text()) == settings


def test_the_score_phase_scores_saved_full_runs_again_and_keeps_their_training_fields(tmp_path, monkeypatch):
    """`--phase score` reads a full run's saved model and writes this version's readings into its record (a record
    from before the windowed reading gets it, the same numbers a fresh run writes), keeping the training command,
    curve and timings, and naming the scoring command."""
    monkeypatch.setitem(bench_lm.PROTOCOL, "batch_size", 2)
    flags = [*_own_files(tmp_path / "data"), "--results", str(tmp_path / "lm"), "--device", "cpu"]
    run = ["--models", "transformer", "--learning_rate", "1e-3", "--full_bytes", str(2 * 2 * bench_lm.CONTEXT)]
    assert bench_lm.main(["--phase", "full", *flags, *run]) == 0
    (path,) = (tmp_path / "lm" / "full").glob("*.json")
    trained = json.loads(path.read_text())
    bench_lm.write_json_atomic(path, {k: v for k, v in trained.items() if k not in ("test_windowed", "test_best")})
    assert bench_lm.main(["--phase", "score", *flags, *run]) == 0
    scored = json.loads(path.read_text())
    assert scored["test_windowed"] == pytest.approx(trained["test_windowed"], rel=1e-9)
    assert scored["test_best"] == pytest.approx(trained["test_best"], rel=1e-9)
    for key in ("command", "curve", "train_seconds", "train_cpu_seconds", "sample"):
        assert scored[key] == trained[key], key
    assert scored["scored_by"]["command"].startswith("python benchmarks/bench_lm.py --phase score")


def test_a_record_s_command_names_paths_inside_the_repository_from_its_root(tmp_path):
    """A record names no folder of the machine it ran on: an absolute path inside the repository (a --results folder
    given in full) is kept relative to the repository's root, where the command runs; other arguments as given."""
    inside = bench_lm.ROOT / "results" / "lm"
    assert bench_lm._portable(str(inside)) == "results/lm"
    assert bench_lm._portable(str(tmp_path)) == str(tmp_path)
    assert bench_lm._portable("3e-3") == "3e-3" and bench_lm._portable("results/lm") == "results/lm"


def test_a_sweep_is_extended_one_rate_at_a_time_but_never_runs_on_fewer_than_three(tmp_path):
    """--learning_rates may name one edge rate for a model whose sweep has two or more recorded rates (at the size
    and tokenizer run); a model whose recorded and given rates are fewer than three is refused, naming them."""
    for rate in (1e-3, 3e-3):
        run = {"model": "mamba2", "size": "d128", "tokenizer": "byte"}
        bench_lm.write_json_atomic(tmp_path / "sweep" / f"mamba2-{rate}.json", {"run": run, "learning_rate": rate})

    def args(models, rates, size="d128"):
        return SimpleNamespace(models=models, learning_rates=rates, results=tmp_path, size=size, tokenizer="byte")

    bench_lm.check_sweep_size(args(["mamba2"], [3e-2]))
    bench_lm.check_sweep_size(args(["transformer"], [1e-3, 3e-3, 1e-2]))
    with pytest.raises(SystemExit, match=r"transformer's sweep needs at least three rates.*\[0\.03\]"):
        bench_lm.check_sweep_size(args(["mamba2", "transformer"], [3e-2]))
    with pytest.raises(SystemExit, match="mamba2's sweep"):
        bench_lm.check_sweep_size(args(["mamba2"], [3e-2], size="d256"))
    assert bench_lm.parse_args(["--phase", "sweep", "--learning_rates", "3e-2"]).learning_rates == [3e-2]
