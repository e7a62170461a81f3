"""Pretraining: corpus packing, byte tokenizer, presets, the Accelerate loop (multi-process, exact resume,
crash-safe checkpoints) and scripts/pretrain.py's argument errors."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.data.lm_corpus import (
    IGNORE_INDEX,
    CorpusSpec,
    StreamingBlocks,
    builtin_documents,
    iter_builtin_documents,
    make_batch,
    pack_documents,
    positions_from_starts,
)
from hf_ssm.presets import PRESETS, preset_config
from hf_ssm.tokenization import BYTE_OFFSET, ByteTokenizer
from hf_ssm.training.checkpointing import COMPLETE_MARKER, is_complete, latest_checkpoint, read_metadata
from hf_ssm.training.lm import pretraining as lm
from hf_ssm.training.lm.lm_settings import PretrainSettings
from hf_ssm.training.lm.pretraining import learning_rate_at, pretrain, token_loss_sum
from model_checks import ROOT, SCRIPTS, checkpoint_names, kill_at_evaluation, load_script

# One thread per process: tiny models gain nothing from more, and on a loaded machine OpenMP threads waiting for
# busy cores make every step ~50x slower.
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

# A 2-layer (PD-SSM, attention) model of width 32 on 64-token blocks of the generated stories (not the default
# python_stdlib: 11 MB to tokenize per run): a step takes milliseconds.
TINY = dict(
    dataset="builtin",
    extra_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "mixers": "SA"},
    block_size=64,
    batch_size=2,
    builtin_documents=60,
    eval_documents=12,
    eval_blocks=4,
    warmup_steps=2,
    sample_tokens=0,
    learning_rate=1e-2,
)
TINY_ARGS = [
    "--dataset", "builtin", "--extra_config", "hidden_size=32", "intermediate_size=64", "num_hidden_layers=2", "mixers=SA",
    "--block_size", "64", "--builtin_documents", "60", "--eval_documents", "12", "--eval_blocks", "4",
    "--warmup_steps", "2", "--sample_tokens", "0", "--learning_rate", "1e-2",
]  # fmt: skip


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(**kwargs) -> PretrainSettings:
    return PretrainSettings(**{**TINY, **kwargs})


def losses(metrics: dict) -> list[float]:
    return [h["loss"] for h in metrics["history"]]


# ---------------------------------------------------------------------------------------------------------------
# Data and tokenizer
# ---------------------------------------------------------------------------------------------------------------


def test_builtin_corpus_is_deterministic_and_splits_differ():
    """The built-in corpus is a pure function of (style, seed): no network, reproducible runs."""
    assert builtin_documents("stories", 0, 50) == builtin_documents("stories", 0, 50)
    assert builtin_documents("stories", 0, 50) != builtin_documents("stories", 1, 50)
    dialogue = next(iter_builtin_documents("dialogues", 0))
    assert dialogue.startswith("Question: ") and "\nAnswer: " in dialogue
    with pytest.raises(ValueError, match="style"):
        builtin_documents("poems")


def test_byte_tokenizer_round_trips_and_keeps_specials_out_of_text(tmp_path):
    """Any text round-trips; a literal "<eos>" in a document is bytes, never the end-of-document id."""
    tok = ByteTokenizer()
    text = "Grüße, <eos> 🙂\nend"
    ids = tok(text)["input_ids"]
    assert ids == tok.fast_encode([text])[0] == [b + BYTE_OFFSET for b in text.encode()]
    assert tok.eos_token_id not in ids
    assert tok.decode(ids) == text
    assert len(tok) == tok.vocab_size == 260 and (tok.pad_token_id, tok.eos_token_id) == (0, 2)
    tok.save_pretrained(tmp_path)
    assert (tmp_path / "tokenization.py").is_file()  # shipped with the tokenizer for trust_remote_code
    code = (
        "import sys; from transformers import AutoTokenizer; "
        f"t = AutoTokenizer.from_pretrained({str(tmp_path)!r}, trust_remote_code=True); "
        f"assert t.decode(t({text!r})['input_ids']) == {text!r}; assert 'hf_ssm' not in sys.modules; print(len(t))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "260"


def test_byte_tokenizer_pads_prompts_on_the_left_for_generation(tmp_path):
    """Decoder-only generation continues every row from its last position: the byte tokenizer pads on the left
    (it padded on the right, which transformers' generate warns about), also once saved and reloaded."""
    tok = ByteTokenizer()
    batch = tok(["a", "abc"], padding=True)
    assert batch["input_ids"][0] == [tok.pad_token_id, tok.pad_token_id, ord("a") + BYTE_OFFSET]
    assert batch["attention_mask"][0] == [0, 0, 1]
    tok.save_pretrained(tmp_path)
    assert ByteTokenizer.from_pretrained(tmp_path).padding_side == "left"
    assert ByteTokenizer(padding_side="right").padding_side == "right"  # still a choice


def test_packing_puts_eos_between_documents_and_restarts_positions():
    tok = ByteTokenizer()
    ids, starts = pack_documents(tok, ["ab", "cde", "f", "ghij"], block_size=5)
    # stream: a b <eos> c d | e <eos> f <eos> g | ...   (the incomplete last block is dropped)
    e = tok.eos_token_id
    stream = (
        [b + BYTE_OFFSET for b in b"ab"] + [e] + [b + BYTE_OFFSET for b in b"cde"] + [e] + [ord("f") + BYTE_OFFSET, e]
    )
    assert ids.shape == (2, 5) and ids.flatten().tolist() == (stream + [ord("g") + BYTE_OFFSET])[:10]
    assert positions_from_starts(starts).tolist() == [[0, 1, 2, 0, 1], [0, 1, 0, 1, 0]]
    batch = make_batch(ids, starts, reset_at_boundaries=True)
    assert batch["labels"][0].tolist() == [IGNORE_INDEX, *ids[0, 1:3].tolist(), IGNORE_INDEX, ids[0, 4].item()]
    plain = make_batch(ids, starts, reset_at_boundaries=False)
    assert plain["position_ids"].tolist() == [list(range(5))] * 2 and torch.equal(plain["labels"], ids)


@torch.no_grad()
def test_packed_blocks_with_boundary_reset_equal_documents_run_separately():
    """With reset_at_boundaries, the loss of a packed block (attention + three SSM families) is exactly the sum of
    the documents' own losses run one at a time; without it, documents see each other."""
    torch.manual_seed(0)
    config = HybridSSMConfig(
        vocab_size=260, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        mixers=["pd_ssm", "attention", "bd_lru", "lrc_ssm"], pd_ssm_head_state_size=4, pd_ssm_dict_size=4,
        lru_total_state_size=16, lrc_num_channels=16,
    )  # fmt: skip
    model = HybridSSMForCausalLM(config).eval()
    tok = ByteTokenizer()
    docs = ["Mia had two cups.", "Leo ran.", "It was a quiet day at the farm.", "Ben"]
    total = sum(len(d) + 1 for d in docs)
    ids, starts = pack_documents(tok, docs + ["padding text that completes the block"], block_size=total)
    batch = make_batch(ids, starts, reset_at_boundaries=True)
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    packed_loss, packed_count = token_loss_sum(logits, batch["labels"])

    separate_loss, separate_count, offset = 0.0, 0, 0
    for doc in docs:
        doc_ids = torch.tensor([[*tok.fast_encode([doc])[0], tok.eos_token_id]])
        alone = model(input_ids=doc_ids, use_cache=False).logits
        loss, count = token_loss_sum(alone, doc_ids)
        separate_loss, separate_count = separate_loss + loss, separate_count + count
        span = logits[0, offset : offset + doc_ids.shape[1]]
        assert torch.allclose(span, alone[0], atol=1e-4), doc
        offset += doc_ids.shape[1]
    assert int(packed_count) == int(separate_count)
    assert float(packed_loss) == pytest.approx(float(separate_loss), rel=1e-5)

    mixed = make_batch(ids, starts, reset_at_boundaries=False)
    leaky = model(input_ids=mixed["input_ids"], position_ids=mixed["position_ids"], use_cache=False).logits
    second = slice(len(docs[0]) + 1, len(docs[0]) + 1 + len(docs[1]) + 1)
    assert not torch.allclose(leaky[0, second], logits[0, second], atol=1e-3)


def test_streaming_reader_resumes_from_its_saved_state():
    """A streaming reader restored from a saved state yields exactly the blocks an uninterrupted reader yields,
    across the end of the data (the stream starts its next pass)."""
    tok = ByteTokenizer()

    def documents(epoch):
        return iter_builtin_documents("stories", 0, 4)

    whole = StreamingBlocks(documents, tok, 48)
    reference = [whole.blocks(i, 1)[0] for i in range(40)]
    assert whole.epoch >= 1  # went past the end of the 4 documents
    first = StreamingBlocks(documents, tok, 48)
    first.blocks(0, 3)
    first.advance_to(17)
    state = json.loads(json.dumps(first.state()))  # what a checkpoint stores
    second = StreamingBlocks(documents, tok, 48)
    second.load_state(state, 17)
    assert all(torch.equal(second.blocks(i, 1)[0], reference[i]) for i in range(17, 40))
    with pytest.raises(ValueError, match="in order"):
        second.blocks(3, 1)


def test_every_preset_builds_a_valid_config():
    """Presets cover every mixer family and hybrid pattern in three sizes, and all are valid configs."""
    families = {name.rsplit("-", 1)[0] for name in PRESETS}
    assert {"pd_ssm", "bd_lru", "h_lru", "diag_lru", "lrc_ssm", "attention", "hybrid-pd_ssm"} <= families
    assert {name.rsplit("-", 1)[1] for name in PRESETS} == {"tiny", "small", "base"}
    for name in PRESETS:
        config = preset_config(name, vocab_size=260)
        assert len(config.mixers) == config.num_hidden_layers
    assert preset_config("hybrid-pd_ssm-tiny", vocab_size=260).mixers == ["pd_ssm", "attention"] * 2


def test_learning_rate_warms_up_then_decays_to_the_floor():
    s = PretrainSettings(learning_rate=1.0, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert learning_rate_at(0, s) == pytest.approx(0.1) and learning_rate_at(9, s) == pytest.approx(1.0)
    assert learning_rate_at(60, s) == pytest.approx(0.55)
    assert learning_rate_at(110, s) == pytest.approx(0.1)
    values = [learning_rate_at(i, s) for i in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))


# ---------------------------------------------------------------------------------------------------------------
# The training loop
# ---------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_cpu_processes_match_one_process_and_save_loadable_checkpoints(tmp_path):
    """`accelerate launch` with two gloo processes trains, checkpoints and saves a model that reloads; its loss
    curve equals a one-process run with the same global batch (the data order does not depend on the world)."""
    out = tmp_path / "ddp"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "scripts/configs/cpu_ddp.yaml"),
        "--num_processes", "2", "--main_process_port", str(_free_port()), str(SCRIPTS / "pretrain.py"), "--output_dir", str(out),
        "--max_steps", "4", "--eval_every", "2", "--save_every", "2", "--batch_size", "2", *TINY_ARGS,
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_processes"] == 2 and metrics["global_batch_blocks"] == 4 and metrics["steps"] == 4

    single = pretrain(tiny(max_steps=4, eval_every=2, save_every=0, batch_size=4), tmp_path / "single")
    assert losses(metrics) == pytest.approx(losses(single), rel=1e-5)
    evals = [e["loss"] for e in metrics["eval_history"]]
    assert evals == pytest.approx([e["loss"] for e in single["eval_history"]], rel=1e-5)

    checkpoint = latest_checkpoint(out / "checkpoints")
    assert checkpoint.name == "step_2" and is_complete(checkpoint)
    assert {"random_states_0.pkl", "random_states_1.pkl", "optimizer.bin"} <= {p.name for p in checkpoint.iterdir()}
    config = HybridSSMConfig.from_pretrained(out / "model")
    reloaded = HybridSSMForCausalLM(config)
    reloaded.load_state_dict(load_file(checkpoint / "model.safetensors"))  # the step-2 weights load strictly

    from transformers import AutoModelForCausalLM

    final = AutoModelForCausalLM.from_pretrained(out / "model", trust_remote_code=True).eval()
    spec = tiny().corpus_spec()
    from hf_ssm.data.lm_corpus import build_block_sources

    _, (eval_ids, eval_starts) = build_block_sources(spec, ByteTokenizer(), 64, 4)
    batch = make_batch(eval_ids, eval_starts, True)
    with torch.no_grad():
        logits = final(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    loss, count = token_loss_sum(logits, batch["labels"])
    assert float(loss / count) == pytest.approx(metrics["final_eval"]["loss"], rel=1e-4)
    card = (out / "model" / "README.md").read_text()
    assert card.startswith("---\n") and "| 0 | `pd_ssm` |" in card


@pytest.mark.parametrize(
    "variant",
    [dict(), dict(streaming=True, gradient_accumulation_steps=2, batch_size=1)],
    ids=["in_memory", "streaming_accumulation"],
)
def test_resume_after_interruption_reproduces_the_uninterrupted_run(tmp_path, monkeypatch, variant):
    """Killed after the step-4 checkpoint, a resumed run continues with the same data and learning rates: its
    loss curve, evaluations and final weights equal the uninterrupted run's."""
    settings = dict(max_steps=8, eval_every=2, save_every=2, **variant)
    full = pretrain(tiny(**settings), tmp_path / "full")

    # evaluations at steps 0, 2, 4, then 6: after the step-4 checkpoint
    kill_at_evaluation(monkeypatch, lm, 4, pretrain, tiny(**settings), tmp_path / "part")
    assert checkpoint_names(tmp_path / "part") == ["step_2", "step_4"]
    assert not (tmp_path / "part" / "model").exists()

    before = read_metadata(tmp_path / "part" / "checkpoints" / "step_4")
    resumed = pretrain(tiny(**settings), tmp_path / "part", resume=True)
    assert resumed["resumed_from"] == [4]
    assert [h["step"] for h in resumed["history"]] == list(range(1, 9))
    # CPU seconds go on from the checkpoint's: the first four steps' as recorded, then growing
    cpu = [h["cpu_seconds"] for h in resumed["history"]]
    assert cpu[:4] == [h["cpu_seconds"] for h in before["history"]] and cpu[3] == round(before["train_cpu_seconds"], 3)
    assert all(a <= b for a, b in zip(cpu, cpu[1:])) and resumed["train_cpu_seconds"] > before["train_cpu_seconds"] > 0
    assert losses(resumed) == pytest.approx(losses(full), rel=1e-6, abs=1e-7)
    assert [h["lr"] for h in resumed["history"]] == [h["lr"] for h in full["history"]]
    assert [e["loss"] for e in resumed["eval_history"]] == pytest.approx(
        [e["loss"] for e in full["eval_history"]], rel=1e-6
    )
    a = load_file(tmp_path / "full" / "model" / "model.safetensors")
    b = load_file(tmp_path / "part" / "model" / "model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_checkpoint_without_cpu_seconds_resumes_with_the_total_unknown(tmp_path, monkeypatch):
    """A checkpoint written before CPU seconds were recorded resumes; the run's total CPU seconds are then unknown
    (None), not this process's share counted as the whole."""
    settings = dict(max_steps=6, eval_every=2, save_every=2)
    kill_at_evaluation(monkeypatch, lm, 4, pretrain, tiny(**settings), tmp_path / "part")
    marker = tmp_path / "part" / "checkpoints" / "step_4" / COMPLETE_MARKER
    meta = json.loads(marker.read_text())
    del meta["train_cpu_seconds"]
    for entry in meta["history"]:
        del entry["cpu_seconds"]
    marker.write_text(json.dumps(meta))
    resumed = pretrain(tiny(**settings), tmp_path / "part", resume=True)
    assert resumed["resumed_from"] == [4] and resumed["train_cpu_seconds"] is None
    assert [h.get("cpu_seconds") for h in resumed["history"]] == [None] * 6


def test_killed_save_never_replaces_the_good_checkpoint(tmp_path):
    """SIGKILL in the middle of the step-4 save: step_2 stays the complete latest checkpoint, the half-written
    folder is ignored, and resuming from step 2 reproduces the uninterrupted run (and clears the debris)."""
    run = tmp_path / "run"
    settings = dict(max_steps=6, eval_every=2, save_every=2)
    code = f"""
import os, signal, accelerate
from hf_ssm.training.lm.lm_settings import PretrainSettings
from hf_ssm.training.lm.pretraining import pretrain
real, calls = accelerate.Accelerator.save_state, []
def save_then_die(self, output_dir, **kw):
    calls.append(output_dir)
    if len(calls) == 2:
        os.makedirs(output_dir, exist_ok=True)
        open(os.path.join(output_dir, "model.safetensors"), "wb").write(b"half written")
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, output_dir, **kw)
accelerate.Accelerator.save_state = save_then_die
pretrain(PretrainSettings(**{{**{TINY!r}, **{settings!r}}}), {str(run)!r})
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == -9, result.stderr[-3000:]
    names = checkpoint_names(run)
    assert names[0] == "step_2" and len(names) == 2 and names[1].startswith("step_4.tmp-")
    assert latest_checkpoint(run / "checkpoints").name == "step_2"

    resumed = pretrain(tiny(**settings), run, resume=True)
    full = pretrain(tiny(**settings), tmp_path / "full")
    assert resumed["resumed_from"] == [2]
    assert losses(resumed) == pytest.approx(losses(full), rel=1e-6, abs=1e-7)
    assert checkpoint_names(run) == ["step_2", "step_4"]


def test_loss_falls_and_run_folder_is_complete(tmp_path):
    metrics = pretrain(tiny(max_steps=30, eval_every=10, save_every=0, sample_tokens=8), tmp_path)
    assert metrics["final_eval"]["loss"] < metrics["initial_eval"]["loss"] - 1.0
    assert metrics["initial_eval"]["loss"] == pytest.approx(math.log(260), abs=0.3)  # uniform over 260 bytes
    for name in ("settings.json", "config.json", "metrics.json", "loss_curve.png", "model/model.safetensors",
                 "model/tokenizer_config.json", "model/tokenization.py", "model/README.md",
                 "model/modeling_hybrid_ssm.py"):  # fmt: skip
        assert (tmp_path / name).is_file(), name
    assert not (tmp_path / "model" / "checkpoint_complete.json").exists()  # an exported model, not a checkpoint
    assert metrics["sample"]["text"].startswith("Once upon a time,")


# ---------------------------------------------------------------------------------------------------------------
# scripts/pretrain.py arguments
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model_preset", "hybrid-pd_ssm-huge"], "unknown preset 'hybrid-pd_ssm-huge'"),
        (["--preset", "pd_ssm-tiny"], "--preset was renamed: use --model_preset"),
        (["--train_files", "/no/such/corpus.txt"], "file not found: /no/such/corpus.txt"),
        (["--dataset", "./no_such_folder"], "dataset folder not found"),
        (["--dataset", "hf-ssm-no-such-dataset-xyz"], "could not load dataset 'hf-ssm-no-such-dataset-xyz'"),
        (["--block_size", "4096"], "--block_size 4096 is above the model's limit: max_position_embeddings = 1024"),
        (["--train_files", __file__], "known extensions"),
        (["--config", "/no/such/config.json"], "--config: file not found"),
        (["--extra_config", "hidden_size"], "KEY=VALUE"),
        (["--override", "hidden_size=32"], "--override was renamed: use --extra_config"),  # the old spelling
        (["--extra_config", "hiden_size=100"], "--extra_config: 'hiden_size' is not a HybridSSMConfig field; did you"),
        (["--extra_config", "pd_ssm_stat_size=4"], "did you mean `pd_ssm_head_state_size`"),
        (["--extra_config", '{"hidden_size": 32'], "not valid JSON"),
    ],
)
def test_bad_arguments_exit_with_a_clear_message(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    script = load_script("pretrain")
    with pytest.raises(SystemExit) as exit_info:
        script.main([*args, "--output_dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["--override", "hidden_size=32"], "--override was renamed: use --extra_config"),
        (["--no-reset_at_boundaries"], "use --reset_at_boundaries false"),
        (["--no_reset_at_boundaries"], "use --reset_at_boundaries false"),
        (["--learning-rate", "0.1"], "use --learning_rate"),
    ],
)
def test_old_option_spellings_are_refused_naming_the_new_one(old, new, capsys):
    """Every option has one spelling, the field's: --override (now --extra_config), a bool's --no-<field> and the
    dashed twins are refused, exit status 2, naming the spelling to use."""
    with pytest.raises(SystemExit) as exit_info:
        load_script("pretrain").build_parser().parse_args(old)
    assert exit_info.value.code == 2 and new in capsys.readouterr().err


def test_extra_config_takes_items_or_a_json_object():
    """--extra_config KEY=VALUE items and a JSON object give the same config fields; a bool is --field false."""
    parser = load_script("pretrain").build_parser()
    new = parser.parse_args(["--extra_config", "hidden_size=32", "mixers=SA"])
    as_json = parser.parse_args(["--extra_config", '{"hidden_size": 32, "mixers": "SA"}'])
    assert new.extra_config == as_json.extra_config == {"hidden_size": 32, "mixers": "SA"}
    assert parser.parse_args([]).extra_config == {}
    assert parser.parse_args(["--reset_at_boundaries", "false"]).reset_at_boundaries is False


def test_list_presets(capsys):
    assert load_script("pretrain").main(["--list_presets"]) == 0
    assert "hybrid-pd_ssm-tiny" in capsys.readouterr().out


def test_local_jsonl_and_text_files_train(tmp_path):
    """Local files (jsonl with a custom column, and plain text) are read, packed and trained on."""
    docs = builtin_documents("stories", 3, 40)
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"body": d}) + "\n" for d in docs))
    txt = tmp_path / "corpus.txt"
    txt.write_text("\n\n".join(docs))
    for files, column in (([str(jsonl)], "body"), ([str(txt)], "text")):
        spec = CorpusSpec(dataset=None, train_files=files, text_column=column, eval_documents=5)
        from hf_ssm.data.lm_corpus import DocumentSource

        source = DocumentSource(spec)
        assert list(source.eval_documents()) == docs[:5]
        assert next(source.train_documents()) == docs[5]
    metrics = pretrain(
        tiny(dataset=None, train_files=[str(jsonl)], text_column="body", eval_documents=5, max_steps=2, save_every=0),
        tmp_path / "run",
    )
    assert metrics["dataset"] == "corpus.jsonl" and metrics["steps"] == 2
    bad = CorpusSpec(dataset=None, train_files=[str(jsonl)], text_column="text")
    with pytest.raises(ValueError, match="no text column 'text'"):
        DocumentSource(bad)


def test_a_config_file_with_a_misspelt_field_is_refused(tmp_path, capsys):
    """--config JSON keys are config fields: a misspelling is refused with the closest name, not ignored."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 32, "num_hidden_layers": 2, "mixers": "SA", "hiden_act": "silu"}))
    with pytest.raises(SystemExit) as exit_info:
        load_script("pretrain").main(["--config", str(path), "--output_dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "'hiden_act' is not a HybridSSMConfig field; did you mean `hidden_act`" in capsys.readouterr().err


def test_resume_with_changed_settings_is_refused_before_the_run_folder_changes(tmp_path, capsys):
    """pretrain(resume=True) and scripts/pretrain.py --resume compare the settings with the checkpoint's: a new
    learning rate or model override is refused naming the fields (it was silently ignored / failed later), while
    fields declared safe (eval_every) may change."""
    from hf_ssm.training.checkpointing import check_resume
    from hf_ssm.training.lm.lm_settings import RESUME_SAFE_SETTINGS

    run = tmp_path / "run"
    pretrain(tiny(max_steps=4, eval_every=2, save_every=2), run)
    recorded = (run / "settings.json").read_text()
    changed = tiny(max_steps=4, eval_every=2, save_every=2, learning_rate=2e-2)
    with pytest.raises(ValueError, match="learning_rate 0.01 -> 0.02"):
        pretrain(changed, run, resume=True)
    with pytest.raises(SystemExit) as exit_info:
        load_script("pretrain").main(
            [
                *TINY_ARGS,
                "--max_steps",
                "4",
                "--eval_every",
                "2",
                "--save_every",
                "2",
                "--extra_config",
                "hidden_size=64",
                "--output_dir",
                str(run),
                "--resume",
            ]  # fmt: skip
        )
    assert exit_info.value.code == 2
    assert "extra_config.hidden_size 32 -> 64" in capsys.readouterr().err
    assert (run / "settings.json").read_text() == recorded
    assert check_resume(tiny(max_steps=4, eval_every=1, save_every=2), run, RESUME_SAFE_SETTINGS).name == "step_2"
