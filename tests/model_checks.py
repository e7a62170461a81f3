"""Model-level properties every mixer must keep, and the pieces the tests that check them share.

tests/models/test_model_invariants.py runs the properties for every mixer from one parametrised place; per-mixer test
files call the same helpers with their own configs.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest
import torch

from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
from hf_ssm.modeling import PAPER_PD_SSM_LAYER

ROOT = Path(__file__).resolve().parents[1]  # the repository (tests/ sits at its top)
SCRIPTS = ROOT / "scripts"
BENCHMARKS = ROOT / "benchmarks"


def tiny_config(mixers: str | list[str], **overrides) -> HybridSSMConfig:
    """A small hybrid config; `mixers` is a pattern string or a list of mixer names. PD-SSM is the paper's layer
    (PAPER_PD_SSM_LAYER: dictionary, complex D, B, D_skip, C trained), the path with every part; the default layer
    has its own tests (tests/models/test_pd_ssm_defaults.py)."""
    layers = len(mixers)
    settings = dict(
        **PAPER_PD_SSM_LAYER,
        vocab_size=37,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        mixers=mixers,
        pd_ssm_dict_size=4,
    )
    settings.update(pd_ssm_num_heads=2, pd_ssm_head_state_size=5)
    settings.update(overrides)
    return HybridSSMConfig(**settings)


def hybrid_config(mixer: str, **overrides) -> HybridSSMConfig:
    """One `mixer` layer followed by one attention layer, every mixer's sizes kept tiny."""
    settings = dict(lrc_num_channels=8, lru_total_state_size=8, lru_group_size=2, lstm_hidden_size=8)
    settings.update(overrides)
    return tiny_config([mixer, "attention"], **settings)


@torch.no_grad()
def max_cached_decode_error(config: HybridSSMConfig, batch: int = 2, steps: int = 13, prefill: int = 6) -> float:
    """Largest |full-sequence logits - (prefill + one-token-at-a-time cached decode) logits|."""
    model = HybridSSMForCausalLM(config).eval()
    ids = torch.randint(1, config.vocab_size, (batch, steps))
    full = model(ids, use_cache=False).logits
    out = model(ids[:, :prefill], use_cache=True)
    pieces, cache = [out.logits], out.cache
    for t in range(prefill, steps):
        out = model(ids[:, t : t + 1], cache=cache, use_cache=True)
        pieces.append(out.logits)
        cache = out.cache
    return (full - torch.cat(pieces, dim=1)).abs().max().item()


@torch.no_grad()
def reload_is_bit_identical(config: HybridSSMConfig, directory: str) -> bool:
    """save_pretrained -> from_pretrained gives exactly the same logits, and only safetensors are written."""
    model = HybridSSMForCausalLM(config).eval()
    ids = torch.randint(1, config.vocab_size, (2, 9))
    model.save_pretrained(directory)
    files = os.listdir(directory)
    assert "model.safetensors" in files and not any(f.endswith((".bin", ".pt", ".pth")) for f in files), files
    reloaded = HybridSSMForCausalLM.from_pretrained(directory).eval()
    return torch.equal(model(ids).logits, reloaded(ids).logits)


# Tensor -> Python conversions: the host reads (device synchronisations) behind `if t:`, `t.item()`, `int(t)`.
_HOST_READS = ("__bool__", "item", "tolist", "__int__", "__float__", "__index__")
HF_SSM_MODELING_FILES = {p.name for p in (ROOT / "hf_ssm" / "modeling").glob("*.py")}


@torch.no_grad()
def host_reads_in_decode_step(model, ids: torch.Tensor, mask: torch.Tensor) -> collections.Counter:
    """Prefill `ids` (B, T) under mask[:, :-1], then count the host reads one decode step makes (the token
    ids[:, -1:] again, the full (B, T + 1) mask), by the file that made them. Sees Python-level reads only."""
    cache = model(ids, attention_mask=mask[:, :-1], use_cache=True).cache
    reads = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in _HOST_READS}

    def counting(original):
        def counted(self, *args, **kwargs):
            reads[Path(traceback.extract_stack(limit=2)[0].filename).name] += 1
            return original(self, *args, **kwargs)

        return counted

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, counting(original))
        model(ids[:, -1:], attention_mask=mask, cache=cache, use_cache=True)
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return reads


def packed_batch(lengths_per_row, vocab_size: int = 37):
    """Documents of the given lengths packed into rows: (docs, input_ids (B, T), position_ids restarting per doc)."""
    docs = [[torch.randint(1, vocab_size, (n,)) for n in row] for row in lengths_per_row]
    ids = torch.stack([torch.cat(row) for row in docs])
    positions = torch.stack([torch.cat([torch.arange(len(d)) for d in row]) for row in docs])
    return docs, ids, positions


# ------------------------------------------------------------------------------------------------ remote code

# Loads checkpoints through transformers' Auto classes with trust_remote_code in a process where hf_ssm cannot
# be imported, runs each on its saved reference inputs and prints one JSON list of results, then IDENTICAL when
# every output equals its reference exactly and no class came from hf_ssm. argv[1]: a JSON list of jobs
# {"directory", "auto_class", "output", "reference" (a file in directory)}, or one checkpoint directory
# (AutoModelForCausalLM, logits, reference.pt).
BLOCKED_LOAD = textwrap.dedent(
    """
    import json
    import sys

    class BlockHfSsm:
        def find_spec(self, name, path=None, target=None):
            if name == "hf_ssm" or name.startswith("hf_ssm."):
                raise ImportError("hf_ssm is blocked in this process")

    sys.meta_path.insert(0, BlockHfSsm())
    import torch
    import transformers

    try:
        import hf_ssm  # noqa: F401
        raise SystemExit("hf_ssm was importable")
    except ImportError:
        pass
    if sys.argv[1].startswith("["):
        jobs = json.loads(sys.argv[1])
    else:
        jobs = [{"directory": sys.argv[1]}]
    results = []
    for job in jobs:
        auto_class = getattr(transformers, job.get("auto_class", "AutoModelForCausalLM"))
        model = auto_class.from_pretrained(job["directory"], trust_remote_code=True).eval()
        ref = torch.load(job["directory"] + "/" + job.get("reference", "reference.pt"))
        inputs = ref["inputs"] if "inputs" in ref else {"input_ids": ref["ids"]}
        expected = ref["output"] if "output" in ref else ref["logits"]
        with torch.no_grad():
            got = getattr(model(**inputs), job.get("output", "logits"))
        cls = type(model)
        results.append({"directory": job["directory"], "class": cls.__name__, "module": cls.__module__,
                        "identical": bool(torch.equal(got, expected))})
    print(json.dumps(results))
    ok = all(r["identical"] and "hf_ssm" not in r["module"] for r in results)
    print("IDENTICAL" if ok else "DIFFERENT")
    """
)


@torch.no_grad()
def save_with_reference(model, directory, inputs: dict, output: str = "logits") -> None:
    """save_pretrained, plus reference.pt: the inputs and the `output` field they give (read by BLOCKED_LOAD)."""
    model.eval().save_pretrained(directory)
    torch.save({"inputs": inputs, "output": getattr(model(**inputs), output)}, Path(directory) / "reference.pt")


def load_without_hf_ssm(jobs: list[dict], workdir) -> list[dict]:
    """Run BLOCKED_LOAD on `jobs` in one subprocess (one interpreter start for all of them); its JSON results."""
    # the parent's thread count: bit-identical logits need the same float sums in both processes
    threads = str(torch.get_num_threads())
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": str(Path(workdir) / "modules"),
        "OMP_NUM_THREADS": threads,
    }
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_LOAD, json.dumps(jobs)], capture_output=True, text=True, cwd=workdir, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines and lines[-1] in ("IDENTICAL", "DIFFERENT"), result.stdout + result.stderr[-2000:]
    return json.loads(lines[-2])


def assert_loads_without_hf_ssm(model, directory, vocab_size: int = 37) -> set[str]:
    """Save `model` to `directory`, load it through AutoModelForCausalLM with trust_remote_code in a process where
    hf_ssm cannot be imported, and assert identical logits; returns the names of the saved files."""
    directory = Path(directory)
    save_with_reference(model, directory, {"input_ids": torch.randint(1, vocab_size, (2, 11))})
    (result,) = load_without_hf_ssm(
        [{"directory": str(directory), "auto_class": "AutoModelForCausalLM"}], directory.parent
    )
    assert "hf_ssm" not in result["module"], result
    assert result["identical"], result
    return set(os.listdir(directory))


def kill_at_evaluation(monkeypatch, module, call: int, train, *args, **kwargs) -> None:
    """Simulate a run killed mid-training: train(*args, **kwargs) with `module.evaluate` raising KeyboardInterrupt
    at its `call`-th call (the ones before run normally). The real evaluate is back afterwards, for the resumed run."""
    real_evaluate, calls = module.evaluate, []

    def evaluate_then_die(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(module, "evaluate", evaluate_then_die)
    try:
        with pytest.raises(KeyboardInterrupt):
            train(*args, **kwargs)
    finally:
        monkeypatch.setattr(module, "evaluate", real_evaluate)


def checkpoint_names(run_dir) -> list[str]:
    """The checkpoint folders a run left in run_dir/checkpoints, sorted."""
    return sorted(p.name for p in (Path(run_dir) / "checkpoints").iterdir())


# ------------------------------------------------------------------------------------------------ scripts


def load_script(name: str, folder: Path = SCRIPTS):
    """<folder>/<name>.py (default scripts/) imported as a module (its main() then runs in-process: no interpreter
    start per case), its folder on the path as when the script runs (scripts import their siblings)."""
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    spec = importlib.util.spec_from_file_location(f"_script_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """scripts/<name>.py run in a subprocess from the repository root, offline; its captured text output."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, str(SCRIPTS / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )
