"""Command-line pieces of the training scripts: --options from a settings dataclass, the run-folder arguments
(and the default, time-stamped folder), CPU threads, the opening of a run (`start_run`) and the closing summary
lines."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import typing
from collections.abc import Collection
from pathlib import Path

import torch

from .checkpointing import check_run_folder_arguments
from .loop import make_accelerator


def _parse_override(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--override expects KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a bare string, e.g. mixers=SASA
    return out


def add_settings_arguments(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    """One --option per dataclass field of `cls` (help from the field metadata, default from the field)."""
    hints = typing.get_type_hints(cls)
    defaults = cls()
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        hint, default = hints[f.name], getattr(defaults, f.name)
        text = f.metadata.get("help", "")
        shown = f" (default: {default})" if default not in (None, [], {}) else ""
        if hint is bool:
            parser.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, default=default, help=text)
        elif f.name == "override":
            parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE", help=text)
        elif typing.get_origin(hint) is list:
            parser.add_argument(f"--{f.name}", nargs="+", default=list(default), help=text)
        else:
            base = next((t for t in typing.get_args(hint) if t is not type(None)), hint)
            parser.add_argument(f"--{f.name}", type=base, default=default, help=text + shown)


def settings_from_args(cls, args: argparse.Namespace):
    """The `cls` instance of the parsed arguments (--override KEY=VALUE items parsed as JSON values)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    if "override" in values:
        values["override"] = _parse_override(values["override"])
    return cls(**values)


def comma_list(text: str) -> list[str]:
    """An argparse type: "a, b,,c" -> ["a", "b", "c"]."""
    return [item.strip() for item in text.split(",") if item.strip()]


def chosen_mixers(parser: argparse.ArgumentParser, args: argparse.Namespace, default: list[str]) -> list[str]:
    """The mixers of a suite script: --mixers, else --mixer, else `default`; an unknown name is a
    `parser.error` naming the accepted ones (the registered SSM mixers and attention)."""
    from ..modeling.configuration_hybrid_ssm import ATTENTION, SSM_MIXERS

    mixers = args.mixers or ([args.mixer] if args.mixer else default)
    for mixer in mixers:
        if mixer not in (*SSM_MIXERS, ATTENTION):
            parser.error(f"unknown mixer {mixer!r}; choose from {', '.join((*SSM_MIXERS, ATTENTION))}")
    return mixers


def run_folder(output_dir: str | None, prefix: str) -> Path:
    """--output_dir, or by default `prefix` followed by the start time (e.g. runs/timeseries/20260101-120000)."""
    return Path(output_dir or f"{prefix}{time.strftime('%Y%m%d-%H%M%S')}")


def add_suite_folder_arguments(parser: argparse.ArgumentParser, default_output: str, safe: Collection[str]) -> None:
    """--output_dir and --resume of the scripts that train several runs into one folder (state tracking, time
    series), each run resuming from its own latest checkpoint; `safe`: the settings a resume may change."""
    parser.add_argument("--output_dir", default=None, help=f"run folder (default {default_output})")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue each run from its latest checkpoint (with the same settings, apart from "
        f"{', '.join(sorted(safe))})",
    )


def print_training_summary(metrics: dict, trained: str, began: float) -> None:
    """The closing lines of an LM training script: what was `trained`, the training and wall-clock seconds
    (since `began`, a `time.perf_counter()` value), then `print_eval_summary`."""
    print(f"{trained}, train {metrics['train_seconds']:.0f} s, wall {time.perf_counter() - began:.0f} s")
    print_eval_summary(metrics)


def print_eval_summary(metrics: dict) -> None:
    """The closing lines of a training script: eval loss and perplexity before -> after, and the sample."""
    first, final = metrics["initial_eval"], metrics["final_eval"]
    print(
        f"eval loss {first['loss']:.4f} -> {final['loss']:.4f}; "
        f"perplexity {first['perplexity']:.2f} -> {final['perplexity']:.2f}"
    )
    if "sample" in metrics:
        print(f"sample: {metrics['sample']['text']!r}")


def add_run_folder_arguments(parser, default_output: str) -> None:
    """--output_dir, --resume and --cpu_threads, the run-folder arguments of the training scripts."""
    parser.add_argument("--output_dir", default=None, help=f"run folder (default {default_output})")
    parser.add_argument("--resume", action="store_true", help="continue from the run folder's latest checkpoint")
    parser.add_argument(
        "--cpu_threads",
        type=int,
        default=0,
        help="torch threads per process on a CPU; 0 = OMP_NUM_THREADS if set, else 1 (add processes for more cores)",
    )


def configure_cpu_threads(threads: int = 0) -> int:
    """Set torch's intra-op threads for a CPU run and return the number used (no-op with a GPU: returns 0).

    0 means: OMP_NUM_THREADS when set, else 1. One thread per process is what `accelerate launch` gives each CPU
    process, the fastest setting for tiny models, and far faster on a shared machine, where OpenMP threads that
    wait for busy cores make every step several times slower. Use more processes (scripts/configs/cpu_ddp.yaml) or
    a larger value here for bigger models on an idle many-core CPU.
    """
    if torch.cuda.is_available():
        return 0
    if threads < 0:
        raise ValueError(f"--cpu_threads must be >= 0, got {threads}")
    threads = threads or int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    torch.set_num_threads(threads)
    return threads


def start_run(parser: argparse.ArgumentParser, args: argparse.Namespace, cls, safe, prepare):
    """The opening every LM training script shares; each refusal is a `parser.error` (exit status 2).

    The `cls` settings of `args`, validated; the run-folder rules (`checkpointing.check_run_folder_arguments`,
    with `safe` the settings a resume may change); CPU threads; the accelerator (the settings'
    `mixed_precision`); then `prepare(settings, accelerator)`, which opens data and tokenizer and raises
    ValueError on bad input. Returns (settings, accelerator, what `prepare` returned).
    """
    try:
        settings = settings_from_args(cls, args)
        settings.validate()
        check_run_folder_arguments(args.resume, args.output_dir, settings, safe)
        configure_cpu_threads(args.cpu_threads)
    except (ValueError, argparse.ArgumentTypeError) as err:
        parser.error(str(err))
    accelerator = make_accelerator(settings.mixed_precision)
    try:
        prepared = prepare(settings, accelerator)
    except ValueError as err:
        parser.error(str(err))
    return settings, accelerator, prepared
