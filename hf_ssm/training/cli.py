"""Command-line pieces of the training scripts: --options from a settings dataclass (`settings_parser`, through
transformers' HfArgumentParser: one spelling per field, `--<field>`; old spellings refused naming the new one,
legacy_settings.py), flags not given told from defaults (`NotGiven`, for recipes and presets), the run-folder
arguments (and the default, time-stamped folder), --seeds, CPU threads, the opening of a run (`start_run`) and the
closing summary lines."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import time
import typing
from argparse import SUPPRESS
from collections.abc import Collection
from pathlib import Path

import torch
from transformers import HfArgumentParser

from .checkpointing import check_run_folder_arguments
from .legacy_settings import (
    MOVED_TO_EXTRA_CONFIG,
    RENAMED_OPTIONS,
    RENAMED_SETTINGS,
    moved_option_message,
    renamed_option_message,
)
from .loop import make_accelerator


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The scripts' --help: their docstring as written, each option with its default (also an option without a
    help text, which argparse would list bare)."""

    def add_argument(self, action):
        if action.help is None and action.option_strings and action.default is not argparse.SUPPRESS:
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        super().add_argument(action)


class FlagAction(argparse.Action):
    """Stores an option's value; with `merge`, the dicts of one occurrence (the items of --extra_config) merge into
    one, later keys winning (a repeated flag replaces the earlier one, as argparse's own "store" does)."""

    def __init__(self, option_strings, dest, merge=False, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.merge = merge

    def __call__(self, parser, namespace, values, option_string=None):
        if self.merge:
            merged = {}
            for value in values:
                merged.update(value)
            values = merged
        setattr(namespace, self.dest, values)


class RefusedOption(argparse.Action):
    """An old spelling of an option (legacy_settings.py): hidden from --help, and a usage error naming the spelling
    to use when given (`message(option_string, values)`)."""

    def __init__(self, option_strings, dest, message, **kwargs):
        super().__init__(option_strings, argparse.SUPPRESS, nargs="?", default=argparse.SUPPRESS, **kwargs)
        self.message = message

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(self.message(option_string, values))


def refuse_options(parser: argparse.ArgumentParser, renamed: dict) -> None:
    """Refuse each old option of `renamed` ({old: new}) naming its new spelling."""
    for old, new in renamed.items():
        parser.add_argument(
            old, action=RefusedOption, message=lambda o, v, new=new: renamed_option_message(o, new), help=SUPPRESS
        )


def config_fields_item(text: str) -> dict:
    """One item of --extra_config: a JSON object ('{"hidden_size": 32}') or KEY=VALUE (the value parsed as JSON
    when it is JSON, else kept as a string: mixers=SA)."""
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"expects a JSON object, got {text!r}")
        return value
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expects KEY=VALUE items or a JSON object, got {text!r}")
    try:
        return {key: json.loads(value)}
    except json.JSONDecodeError:
        return {key: value}  # a bare string, e.g. mixers=SASA


def config_fields_field(help: str):
    """A dict field of HybridSSMConfig fields, given on the command line as --extra_config (`settings_parser`:
    JSON objects or KEY=VALUE items, merged)."""
    metadata = {"help": help, "nargs": "+", "metavar": "JSON|KEY=VALUE", "action": FlagAction, "merge": True}
    return dataclasses.field(default_factory=dict, metadata=metadata)


def settings_parser(settings_classes, description: str | None = None) -> HfArgumentParser:
    """`transformers.HfArgumentParser` for the settings dataclasses `settings_classes`: one --option per field,
    spelled exactly as the field (help, choices from the field's metadata). Measured with transformers 5.25, three
    things differ from HfArgumentParser's own:

    - a `dict` field gets `type=dict`, so `--extra_config '{"a": 1}'` fails with "invalid dict value": `dict` is
      registered as a type that reads one --extra_config item (`config_fields_item`);
    - HfArgumentParser adds a `--field-with-dashes` twin of every field and, for a bool that defaults to True,
      `--no_field` / `--no-field`: one spelling stays, `--field` (a bool: `--field [true|false]`); the others,
      and the `--no-field` the scripts accepted once, are refused naming it;
    - the old spellings of legacy_settings.py (renamed options, fields that moved into `extra_config`) are refused
      naming the new one.
    """
    parser = HfArgumentParser(settings_classes, description=description, formatter_class=HelpFormatter)
    parser.register("type", dict, config_fields_item)
    classes = settings_classes if isinstance(settings_classes, (list, tuple)) else [settings_classes]
    fields = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        fields.update({f.name: hints[f.name] for f in dataclasses.fields(cls)})
    _one_spelling(parser, fields)
    for cls in classes:
        renamed = {f"--{old}": f"--{new}" for old, new in RENAMED_SETTINGS.get(cls.__name__, {}).items()}
        refuse_options(parser, {**renamed, **RENAMED_OPTIONS.get(cls.__name__, {})})
        for old, moved in MOVED_TO_EXTRA_CONFIG.get(cls.__name__, {}).items():
            if old not in fields:
                parser.add_argument(
                    f"--{old}",
                    action=RefusedOption,
                    message=lambda o, v, moved=moved: moved_option_message(o, moved, v),
                    help=SUPPRESS,
                )
    return parser


def _one_spelling(parser: argparse.ArgumentParser, fields: dict) -> None:
    """Leave each settings field `fields` ({name: type}) the one option `--<name>`: HfArgumentParser's dashed twins
    and bool negations are taken out and refused, naming the spelling to use."""
    refused = {}
    for action in list(parser._actions):
        if action.dest not in fields:
            continue
        keep = f"--{action.dest}"
        for option in [o for o in action.option_strings if o != keep]:
            action.option_strings.remove(option)
            del parser._option_string_actions[option]
        if not action.option_strings:  # a --no_<field> action of HfArgumentParser's
            for group in parser._action_groups:
                if action in group._group_actions:
                    group._remove_action(action)
    for name, hint in fields.items():
        if "_" in name:
            refused[f"--{name.replace('_', '-')}"] = f"--{name}"
        if hint is bool:
            for negated in {f"--no_{name}", f"--no-{name}", f"--no-{name.replace('_', '-')}"}:
                refused[negated] = f"--{name} false"
    refuse_options(parser, {old: new for old, new in refused.items() if old not in parser._option_string_actions})


class NotGiven:
    """The namespace value of a settings flag not given on the command line, where the value may come from a named
    set of values (a state-tracking recipe, an adapter preset): a flag not given takes that set's value (or the
    settings' default), one given always wins (`defer_settings_defaults`, `given_settings`). `label` is what --help
    shows as its default. (argparse.SUPPRESS, the usual "no default", cannot be set through `set_defaults`: it
    would land in the namespace as the string '==SUPPRESS==' and be parsed as the flag's value.)"""

    def __init__(self, label: str = "the recipe's"):
        self.label = label

    def __repr__(self) -> str:
        return self.label


NOT_GIVEN = NotGiven()


def defer_settings_defaults(parser: argparse.ArgumentParser, cls, label=None) -> None:
    """Make every flag of the settings dataclass `cls` parse to a `NotGiven` when it is not given, so that
    `given_settings` can tell the flags given from the defaults. `label(field)`: the text --help shows as the
    field's default (default: the shared `NOT_GIVEN`, "the recipe's")."""
    parser.set_defaults(**{f.name: NOT_GIVEN if label is None else NotGiven(label(f)) for f in dataclasses.fields(cls)})


def given_settings(cls, args: argparse.Namespace) -> dict:
    """The fields of the settings dataclass `cls` given explicitly on the command line (after
    `defer_settings_defaults`): {name: value}, the others left out."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return {name: value for name, value in values.items() if not isinstance(value, NotGiven)}


def settings_from_args(cls, args: argparse.Namespace):
    """The `cls` instance of the parsed arguments (the fields found in `args`; the others keep their default)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})


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


def add_output_arguments(parser: argparse.ArgumentParser, default_output: str, resume_help: str) -> None:
    """--output_dir (the run folder, default `default_output`) and --resume, declared once for every training
    script."""
    parser.add_argument("--output_dir", default=None, help=f"run folder (default {default_output})")
    parser.add_argument("--resume", action="store_true", help=resume_help)


def add_seeds_argument(parser: argparse.ArgumentParser, help: str, default: list[int] | None = None) -> None:
    """--seeds (`seed_list`: 0-4, 0,2,5), the several seeds of one call, declared once for every script."""
    parser.add_argument("--seeds", type=seed_list, default=default, help=help)


def add_mixers_argument(parser: argparse.ArgumentParser) -> None:
    """--mixers, the comma-separated mixers of a suite (`chosen_mixers`)."""
    parser.add_argument("--mixers", type=comma_list, help="comma-separated mixers, each run over every seed")


def add_suite_folder_arguments(parser: argparse.ArgumentParser, default_output: str, safe: Collection[str]) -> None:
    """--output_dir and --resume of the scripts that train several runs into one folder (state tracking, time
    series), each run resuming from its own latest checkpoint; `safe`: the settings a resume may change."""
    add_output_arguments(
        parser,
        default_output,
        f"continue each run from its latest checkpoint (with the same settings, apart from {', '.join(sorted(safe))})",
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
    """--output_dir, --resume and --cpu_threads, the run-folder arguments of the LM training scripts."""
    add_output_arguments(parser, default_output, "continue from the run folder's latest checkpoint")
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
    `mixed_precision`); then `prepare(settings, accelerator, validated=True)`, which opens data and tokenizer and
    raises ValueError on bad input. Returns (settings, accelerator, what `prepare` returned). The settings are
    validated once, here.
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
        prepared = prepare(settings, accelerator, validated=True)
    except ValueError as err:
        parser.error(str(err))
    return settings, accelerator, prepared


def seed_list(text: str) -> list[int]:
    """An argparse type for --seeds: "0-4" -> [0, 1, 2, 3, 4], "0,2,5" -> [0, 2, 5], "1000-1001,3" -> [1000, 1001,
    3]. Refuses a descending range, a negative seed, a repeated seed and anything that is not an integer."""
    seeds: list[int] = []
    for item in comma_list(text):
        first, sep, last = item.partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--seeds takes integers and ranges such as 0-4 or 0,2,5; got {item!r} in {text!r}"
            ) from None
        if low < 0 or high < low:
            raise argparse.ArgumentTypeError(f"--seeds: {item!r} is not a range of seeds >= 0 (low-high, low <= high)")
        seeds.extend(range(low, high + 1))
    if not seeds:
        raise argparse.ArgumentTypeError(f"--seeds: no seed in {text!r}")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"--seeds: seed(s) {repeated} given twice in {text!r}")
    return seeds


def group_options(parser: argparse.ArgumentParser, groups: dict[str, tuple[str, ...]]) -> None:
    """Show the parser's options in titled groups, in the order given, for a --help a person can read.

    `groups` maps a title to option names (dests). The options stay where argparse parses them; only the help
    lists them under their title. An option named in no group stays in the generic "options" group, listed last
    (so a new option is never hidden); a name that is not an option of the parser is refused (a stale group)."""
    actions: dict[str, list[argparse.Action]] = {}  # a dest can have several options (--x and --no_x)
    for action in parser._actions:
        if action.option_strings:
            actions.setdefault(action.dest, []).append(action)
    unknown = [name for names in groups.values() for name in names if name not in actions]
    if unknown:
        raise ValueError(f"option groups name options the parser does not have: {unknown}")
    generic = parser._optionals
    for title, names in groups.items():
        group = parser.add_argument_group(title)
        for action in (action for name in names for action in actions[name]):
            for container in parser._action_groups:
                if action in container._group_actions and container is not group:
                    container._group_actions.remove(action)
            group._group_actions.append(action)
    # argparse lists groups in creation order: move the generic group (what is left: --help, ungrouped) last
    parser._action_groups.remove(generic)
    parser._action_groups.append(generic)
    generic.title = "other options"
