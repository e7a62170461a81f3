"""The ladder from `table`'s mixer-only PD-SSM layer to the same layer inside a hybrid's residual stack, one difference
at a time, on a state-tracking task (A5 with 2 generators by default), several seeds, first runs only.

Each rung adds one difference to the rung before it (RUNGS; docs/design.md §8.8 holds the table with every seed):

    table              table's layer: one-hot tokens frozen, mixer-only block, C = I frozen (the reference)
    trained_embedding  + the token embedding trained (from its one-hot init)
    mixer_mlp          + an RMSNorm in front of the layer and a SwiGLU block after it (`block_type="mixer_mlp"`)
    residual           + the residual around the layer: the pre-norm residual block of a hybrid
    trained_c          + C trained (from the identity)
    with_attention     + an attention layer after it (pattern SA)
    after_attention    + an attention layer before it (pattern AS)
    four_layers        + a 4-layer stack with two attention layers (pattern SASA)

Every run is one product command, `python scripts/train_state_tracking.py --task a5 --mixers pd_ssm --recipe table
--restarts 1 --seed S <the rung's flags>`, printed before it starts. `--variants` applies changes under test (VARIANTS:
a fix found at one rung, tried on every rung) on top of every rung's flags, in the order given; their runs are recorded
under `<rung>+<variant>[+<variant>...]`. A run whose record is in the ladder's JSON
(default results/state_tracking/ladder.json) is skipped, so the ladder can be spread over sessions; run folders go
to --runs_dir (outside the work tree by default), and --resume continues an interrupted run there.

    python scripts/hybrid_ladder.py                          # every rung, seeds 0-2
    python scripts/hybrid_ladder.py --rungs table,residual --seeds 0-4
    python scripts/hybrid_ladder.py --rungs table,mixer_mlp --variants heads32
    python scripts/hybrid_ladder.py --table                  # print the table of what is recorded

`--ladder recall` climbs the other way, for multi-query associative recall (docs/design.md §8.8): from the smallest
hybrid that binds keys to values — `hybrid_recall`'s SAA at 1e-3 on a small recall (16 keys and 16 values, 64 tokens,
2-16 pairs; §8.7) — towards the block that tracks A5 (RECALL_RUNGS; recorded under the task `mqar`):

    binder             hybrid_recall's SAA at 1e-3: one-hot tokens frozen, 16 heads, C = I, d = 256 (the reference)
    sublayer_delay     + attention and the SwiGLU blocks held back for the first 200 steps
    trained_embedding  + the token embedding trained (from its one-hot init)
    block              + hybrid_block_wide's layer: 64 heads, d = 512, C frozen at its random init, W_P at 1e-2 / sqrt(d)

    python scripts/hybrid_ladder.py --ladder recall --rungs binder,sublayer_delay --seeds 0-2
    python scripts/hybrid_ladder.py --ladder recall --rungs binder --variants trained_embedding,normal_embedding
    python scripts/hybrid_ladder.py --ladder recall --rungs trained_embedding,block --variants output_scale
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hf_ssm.training.cli import add_seeds_argument, refuse_options
from hf_ssm.training.reports import update_json_locked
from hf_ssm.training.state_tracking.recipes import resolve_settings, transition_lr_scale
from hf_ssm.training.state_tracking.settings import StateTrackingSettings

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RECORD = ROOT / "results" / "state_tracking" / "ladder.json"
LEARNT = 0.99  # a run learnt the task when its test mean over 40-256 reaches this


@dataclass(frozen=True)
class Rung:
    name: str
    change: str  # what this rung adds to the one before
    flags: tuple[str, ...] = ()  # its own flags (added to the earlier rungs')
    extra_config: tuple[str, ...] = ()  # its own KEY=VALUE config fields (merged with the earlier rungs')
    # config fields whose values follow from the merged flags so far (e.g. a learning rate that depends on the width)
    derived: Callable[[dict[str, str]], dict[str, str]] | None = None


# a rung of both ladders (and a variant of the recall ladder's)
TRAINED_EMBEDDING = Rung("trained_embedding", "+ the token embedding trained", ("--freeze_embedding", "false"))
RUNGS = (
    Rung("table", "table's mixer-only layer: frozen one-hot tokens, C = I frozen"),
    TRAINED_EMBEDDING,
    Rung(
        "mixer_mlp",
        "+ RMSNorm before the layer, SwiGLU block after it",
        ("--block_type", "mixer_mlp"),
        ("pd_ssm_transition_init_scale=1.0",),  # W_P now reads RMSNorm(e_v) = sqrt(d) e_v: N(0, 1) logits
    ),
    Rung(
        "residual", "+ the residual around the layer (pre-norm residual block)", ("--block_type", "pre_norm_residual")
    ),
    Rung("trained_c", "+ C trained", (), ("pd_ssm_output_trainable=true",)),
    Rung("with_attention", "+ an attention layer after it (SA)", ("--pattern", "SA")),
    Rung("after_attention", "+ an attention layer before it (AS)", ("--pattern", "AS")),
    Rung("four_layers", "+ two attention layers, 4 layers (SASA)", ("--pattern", "SASA")),
)
RUNG_NAMES = tuple(r.name for r in RUNGS)


def _transition_step_per_width(flags: dict[str, str]) -> dict[str, str]:
    """pd_ssm_transition_lr_scale such that W_P learns at table's rate / sqrt(d) whatever the rate of the rest
    (recipes.transition_lr_scale, which `hybrid_block` uses too); d and the rate as train_state_tracking.py resolves
    them from the ladder's --recipe and the rung's --num_heads / --hidden_size / --learning_rate."""
    kinds = (("num_heads", int), ("hidden_size", int), ("learning_rate", float))
    explicit = {name: kind(flags[f"--{name}"]) for name, kind in kinds if f"--{name}" in flags}
    values = {**vars(StateTrackingSettings()), **resolve_settings(flags["--recipe"], explicit)}
    scale = transition_lr_scale(values["learning_rate"], values["hidden_size"])
    return {"pd_ssm_transition_lr_scale": f"{scale:.4g}"}


# Changes under test, each tried on top of every rung (docs/design.md §8.8 gives what each did).
VARIANTS = (
    Rung("heads32", "32 heads of N = 8 (d = 512): twice the search in parallel (§8.3)", ("--num_heads", "32")),
    # mixer_mlp's two differences apart: its SwiGLU block kept but one hidden unit wide (the RMSNorm stays)
    Rung("mlp1", "the SwiGLU block 1 unit wide (intermediate_size=1)", (), ("intermediate_size=1",)),
    # W_P's relative Adam step back to `table`'s where it reads sqrt(d) e_v (mixer_mlp and later rungs)
    Rung("wp_step", "W_P's learning rate / sqrt(d) (pd_ssm_transition_lr_scale)", derived=_transition_step_per_width),
    # everything but W_P at 1e-3 (with wp_step, W_P keeps table's relative step): attention and the MLPs move slower
    Rung("slow_rest", "every rate but W_P's at 1e-3", ("--learning_rate", "1e-3")),
    # C back to the frozen identity on the rungs above trained_c (where training C stopped the search)
    Rung(
        "c_frozen",
        "C frozen at the identity again (pd_ssm_output_trainable=false)",
        (),
        ("pd_ssm_output_trainable=false",),
    ),
    # the SwiGLU blocks (mlp_delay) / attention layers (attention_delay) silent and frozen for the first 200 steps
    # (hf_ssm.SublayerDelay), then live for at least 400 more: the layer searches before the rest fits the lengths
    Rung(
        "mlp_delay",
        "the SwiGLU blocks held back 200 steps (mlp_frozen_steps), 600 steps at least",
        ("--mlp_frozen_steps", "200", "--min_steps", "600"),
    ),
    Rung(
        "attention_delay",
        "the attention layers held back 200 steps (attention_frozen_steps)",
        ("--attention_frozen_steps", "200"),
    ),
    # a user's model: the token embedding starts at the model's own N(0, 0.02^2) init, not at one-hot rows
    Rung(
        "normal_embedding", "the token embedding initialised N(0, 0.02^2), not one-hot", ("--embedding_init", "normal")
    ),
)
VARIANT_NAMES = tuple(v.name for v in VARIANTS)

# The recall ladder's base: `hybrid_recall` at 1e-3 with pattern SAA on §8.7's small recall, where it binds by step 500
RECALL_BASE = {
    "--recipe": "hybrid_recall",
    "--pattern": "SAA",
    "--learning_rate": "1e-3",
    "--task_vocab_size": "34",
    "--sequence_length": "64",
    "--train_min_length": "2",
    "--train_max_length": "16",
    "--test_min_length": "4",
    "--test_max_length": "16",
    "--num_buckets": "2",
    "--max_steps": "600",
    "--eval_every": "100",
    "--save_every": "100",
    "--target_accuracy": "0.99",
}


RECALL_RUNGS = (
    Rung("binder", "hybrid_recall's SAA at 1e-3 on the small recall: frozen one-hot tokens, 16 heads, C = I"),
    Rung(
        "sublayer_delay",
        "+ attention and the SwiGLU blocks held back 200 steps",
        ("--attention_frozen_steps", "200", "--mlp_frozen_steps", "200"),
    ),
    TRAINED_EMBEDDING,
    Rung(
        "block",
        "+ hybrid_block_wide's layer: 64 heads, d = 512, C frozen at N(0, 0.02^2), W_P at 1e-2 / sqrt(d)",
        ("--num_heads", "64", "--hidden_size", "512"),
        ("pd_ssm_output_init=normal",),
        derived=_transition_step_per_width,  # hybrid_block_wide's 1e-2 / sqrt(512)
    ),
)
# Changes under test on the recall ladder: one rung's difference alone on an earlier rung, or a candidate fix
RECALL_VARIANTS = (
    TRAINED_EMBEDDING,
    *(v for v in VARIANTS if v.name in ("normal_embedding", "attention_delay")),
    # the block's C alone: frozen at the model's random init (1,024 -> 512 there), not the identity
    Rung("random_c", "C frozen at the model's N(0, 0.02^2) init, not the identity", (), ("pd_ssm_output_init=normal",)),
    # the fix §8.8 found: the layer's one-hot states, at full scale, outweigh a trained embedding in the stream
    Rung(
        "output_scale",
        "the PD-SSM layer's C started (frozen) at 0.1 times its init: its output a tenth as large",
        (),
        ("pd_ssm_output_init_scale=0.1",),
    ),
)


@dataclass(frozen=True)
class Ladder:
    """A ladder: the task it is recorded under, the arguments every rung starts from, its rungs and variants."""

    task: str
    base: dict[str, str]
    rungs: tuple[Rung, ...]
    variants: tuple[Rung, ...]

    @property
    def rung_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rungs)

    @property
    def variant_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)


LADDERS = {
    "tracking": Ladder("a5", {"--recipe": "table", "--restarts": "1"}, RUNGS, VARIANTS),
    "recall": Ladder("mqar", RECALL_BASE, RECALL_RUNGS, RECALL_VARIANTS),
}


def rung_arguments(
    name: str, task: str, seed: int, variants: tuple[str, ...] = (), ladder: str = "tracking"
) -> list[str]:
    """The train_state_tracking.py arguments of rung `name` of `ladder` (LADDERS): the ladder's base command, then
    every rung's flags up to it, then the variants' flags (a later value of a flag wins), the merged config fields
    last."""
    chosen_ladder = LADDERS[ladder]
    args = ["--task", task, "--mixers", "pd_ssm"]
    flags: dict[str, str] = {**chosen_ladder.base, "--seed": str(seed)}
    extra: dict[str, str] = {}
    chosen = [chosen_ladder.variants[chosen_ladder.variant_names.index(v)] for v in variants]
    chosen_and_rungs = (*chosen_ladder.rungs[: chosen_ladder.rung_names.index(name) + 1], *chosen)
    for rung in chosen_and_rungs:
        flags.update(zip(rung.flags[::2], rung.flags[1::2]))
        extra.update(item.split("=", 1) for item in rung.extra_config)
    for rung in chosen_and_rungs:
        if rung.derived is not None:  # from the flags of every rung and variant
            extra.update(rung.derived(flags))
    for flag, value in flags.items():
        args += [flag, value]
    if extra:
        args += ["--extra_config", *(f"{k}={v}" for k, v in extra.items())]
    return args


# The heads' probe: random words per length, and the lengths (head_information, joint_accuracy and the ladder's record)
PROBE_WORDS, PROBE_LENGTHS = 1024, (64, 256)


def _run_heads(model_dir: Path, task_name: str, words: int, lengths) -> tuple | None:
    """(final states (S, H) of every PD-SSM head of layer 0 run as the automaton its transitions' column argmax makes,
    from x_0, on `words` random words of each length (seed 0); their classes (S,)), or None unless layer 0 is a PD-SSM
    layer with direct transitions (whose input, after the embedding and the block's norm, is a function of the token
    alone)."""
    import random

    import torch

    import hf_ssm
    from hf_ssm.data.state_tracking import get_task

    config = json.loads((model_dir / "config.json").read_text())
    if config["mixers"][0] != "pd_ssm" or config.get("pd_ssm_transition") != "direct":
        return None
    model = getattr(hf_ssm, config["architectures"][0]).from_pretrained(model_dir).eval()
    layer = model.model.layers[0]
    with torch.no_grad():
        u = model.model.embed_tokens.weight.unsqueeze(0)
        u = layer.input_layernorm(u) if hasattr(layer, "input_layernorm") else u
        moves = layer.mixer.transition.logits(layer.mixer, u)[0].argmax(-2)  # (V, H, N): column (state) -> row
        start = layer.mixer.initial_state(1)[0].abs().argmax(-1)  # (H,)
    task, rng = get_task(task_name), random.Random(0)
    heads = torch.arange(moves.shape[1])
    states, classes = [], []
    for length in lengths:
        samples = [task.sample(length, rng) for _ in range(words)]
        tokens = torch.tensor([t for t, _ in samples])  # (S, L)
        state = start.expand(words, -1)
        for step in range(length):
            state = moves[tokens[:, step, None], heads, state]  # (S, H)
        states.append(state)
        classes += [labels[-1] for _, labels in samples]
    return torch.cat(states), torch.tensor(classes)


def head_information(
    model_dir: Path, task_name: str, words: int = PROBE_WORDS, lengths=PROBE_LENGTHS
) -> list[float] | None:
    """Bits that each PD-SSM head's hard state carries about the task's class after a random word (`_run_heads`),
    I(state; class) estimated from the counts. Where a run learnt, a few heads carry log2 of an orbit of the group
    (2.32 bits for A5's 5 points, 2.58 for its 6) and the rest ~0; it tells a search that found no such head from a
    readout that missed one. None where `_run_heads` is."""

    from hf_ssm.data.state_tracking import get_task

    ran = _run_heads(model_dir, task_name, words, lengths)
    return None if ran is None else _bits(*ran, get_task(task_name).num_classes)


def _bits(states, classes, num_classes: int) -> list[float]:
    """head_information's bits from the heads' final states (S, H) and the classes (S,)."""
    import torch

    def entropy(counts: torch.Tensor) -> float:
        p = counts[counts > 0].double() / counts.sum()
        return float(-(p * p.log2()).sum())

    class_entropy = entropy(torch.bincount(classes))
    bits = []
    for h in range(states.shape[1]):
        joint = states[:, h] * num_classes + classes
        conditional = entropy(torch.bincount(joint)) - entropy(torch.bincount(states[:, h]))
        bits.append(round(class_entropy - conditional, 2))
    return bits


def joint_accuracy(model_dir: Path, task_name: str, heads: list[int], words: int = PROBE_WORDS, lengths=PROBE_LENGTHS):
    """How well `heads` together name the class: the share of random words (`_run_heads`) whose class is the most
    common class of their joint state, 1.0 where the joint state determines the class. Faithful heads can overlap
    (on A5, two heads whose images determine each other add nothing to one), so several heads of
    `head_information`'s >= 1 bit can still name the class only in part. It reads high where the joint states are
    many and the words few (a state seen once names its class); for a handful of heads 2,048 words are plenty. None
    where `_run_heads` is."""

    ran = _run_heads(model_dir, task_name, words, lengths)
    return None if ran is None else _joint(*ran, heads)


def _joint(states, classes, heads: list[int]) -> float:
    """joint_accuracy from the heads' final states (S, H) and the classes (S,)."""
    from collections import Counter, defaultdict

    groups = defaultdict(Counter)
    for row, label in zip(states[:, heads].tolist(), classes.tolist(), strict=True):
        groups[tuple(row)][label] += 1
    return round(sum(c.most_common(1)[0][1] for c in groups.values()) / len(classes), 4)


def _summary(results: dict) -> dict:
    """What the ladder keeps of a run's results.json."""
    return {
        "test_mean": results["test"]["mean_accuracy"],
        "test_buckets": [b["accuracy"] for b in results["test"]["buckets"]],
        "far": {str(b["min_length"]): b["accuracy"] for b in (results.get("far") or {}).get("buckets", [])},
        "best_validation": results["validation"]["accuracy"],
        "steps": results["steps"],
        "best_step": results["best_step"],
        "parameters": results["parameters"],
        "cpu_seconds": round(results["cpu_seconds"], 1),
    }


def record_key(name: str, variants: tuple[str, ...] = ()) -> str:
    """The key of a rung's runs in the record: the rung, then its variants joined by '+'."""
    return "+".join((name, *variants))


def run_rung(
    name: str, task: str, seed: int, runs_dir: Path, resume: bool, threads: int, variants=(), ladder: str = "tracking"
) -> dict:
    """Train one rung of `ladder` (with `variants`) for one seed through the product command; returns its ladder
    record (with the heads' probe on the tracking ladder: recall's answer is no automaton's state)."""
    args = rung_arguments(name, task, seed, variants, ladder)
    out = runs_dir / task / record_key(name, variants) / f"seed{seed}"
    command = ["python", "scripts/train_state_tracking.py", *args]
    print("$ " + " ".join(command), flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    began = time.time()
    extra = ["--output_dir", str(out)] + (["--resume"] if resume and out.exists() else [])
    subprocess.run([sys.executable, *command[1:], *extra], cwd=ROOT, env=env, check=True)
    results = json.loads((out / "results.json").read_text())
    record = {"command": " ".join(command), "wall_seconds": round(time.time() - began, 1), **_summary(results)}
    return {**record, **(_head_probe(out / "model", task) if ladder == "tracking" else {})}


def _head_probe(model: Path, task: str) -> dict:
    """What the ladder records of a saved model's heads: head_bits, and joint_accuracy of those with >= 1 bit."""
    from hf_ssm.data.state_tracking import get_task

    ran = _run_heads(model, task, PROBE_WORDS, PROBE_LENGTHS)  # once for both measures
    if ran is None:
        return {"head_bits": None}
    bits = _bits(*ran, get_task(task).num_classes)
    return {"head_bits": bits, "joint_accuracy": _joint(*ran, [h for h, b in enumerate(bits) if b >= 1])}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def table(record: dict, ladder: str = "tracking") -> list[str]:
    """`ladder`'s record as Markdown: every seed's test mean over the test buckets (far 1,000 / 4,000) [its heads
    carrying >= 1 bit about the class: head_information, and the share of words their joint state names:
    joint_accuracy], how many learnt, mean ± std."""
    lines = [
        "| rung | what it adds | test mean % per seed (far 1,000 / 4,000) | learnt (>= 99 %) | mean ± std | CPU s |",
        "|---|---|---|---|---|---|",
    ]
    chosen = LADDERS[ladder]
    changes = {r.name: r.change for r in (*chosen.rungs, *chosen.variants)}
    order = {name: i for i, name in enumerate(chosen.rung_names)}
    for key in sorted(record, key=lambda k: (k.count("+"), order.get(k.split("+")[0], len(order)), k)):
        runs = record[key]
        if not runs:
            continue
        name, *variants = key.split("+")
        change = "; ".join(changes.get(v, v) for v in variants) if variants else changes.get(name, name)
        seeds = sorted(runs, key=int)
        means = [runs[s]["test_mean"] for s in seeds]
        cells = []
        for s in seeds:
            far = "/".join(_pct(v) for v in runs[s]["far"].values())
            bits = runs[s].get("head_bits")
            count = sum(b >= 1 for b in bits or ())
            joint = runs[s].get("joint_accuracy")
            together = f", naming {_pct(joint)} %" if joint is not None else ""
            informative = f" [{count} head{'' if count == 1 else 's'}{together}]" if bits else ""
            cells.append(f"s{s} {_pct(runs[s]['test_mean'])}" + (f" ({far})" if far else "") + informative)
        spread = f"{_pct(statistics.mean(means))} ± {_pct(statistics.stdev(means))}" if len(means) > 1 else "—"
        cpus = [runs[s]["cpu_seconds"] for s in seeds]
        cpu = f"{min(cpus):.0f}–{max(cpus):.0f}"
        learnt = sum(m >= LEARNT for m in means)
        lines.append(f"| {key} | {change} | {'; '.join(cells)} | {learnt}/{len(means)} | {spread} | {cpu} |")
    return lines


def probe_recorded(full: dict, runs_dir: Path) -> dict[tuple[str, str, str], dict]:
    """head_information and joint_accuracy for every recorded run that lacks them and whose model is still in
    `runs_dir`; returns the probed runs by (task, key, seed)."""
    probed = {}
    for task, record in full.items():
        if task == LADDERS["recall"].task:  # recall's answer is no automaton's state
            continue
        for key, runs in record.items():
            for seed, run in runs.items():
                model = runs_dir / task / key / f"seed{seed}" / "model"
                if "joint_accuracy" not in run and model.is_dir():
                    run.update(_head_probe(model, task))
                    probed[task, key, seed] = run
                    print(f"{task} {key} seed {seed}: head bits {run['head_bits']}, joint {run.get('joint_accuracy')}")
    return probed


def _record_runs(path: Path, runs: dict[tuple[str, str, str], dict]) -> dict:
    """Set each (task, key, seed) -> run of `runs` in the record at `path` as it is on disk now (under
    update_json_locked's lock); returns the whole record."""

    def with_runs(full: dict) -> dict:
        for (task, key, seed), run in runs.items():
            full.setdefault(task, {}).setdefault(key, {})[seed] = run
        return full

    return update_json_locked(path, with_runs, {})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ladder", default="tracking", choices=tuple(LADDERS), help="which ladder (module docstring)")
    names = "; ".join(f"{k}: {', '.join(v.rung_names)}" for k, v in LADDERS.items())
    parser.add_argument("--rungs", default=None, help=f"comma-separated (default: every rung of the ladder); {names}")
    add_seeds_argument(parser, "e.g. 0-2 or 0,3", default=[0, 1, 2])
    names = "; ".join(f"{k}: {', '.join(v.variant_names)}" for k, v in LADDERS.items())
    parser.add_argument("--variants", default="", help=f"changes applied to every rung, comma-separated; {names}")
    parser.add_argument(
        "--task", default=None, help="the tracking ladder's task (default a5); the recall ladder's is mqar, fixed"
    )
    parser.add_argument("--record", type=Path, default=DEFAULT_RECORD, help="the ladder's JSON record")
    parser.add_argument("--runs_dir", type=Path, default=Path.home() / ".cache" / "hf_ssm" / "ladder")
    parser.add_argument("--resume", action="store_true", help="continue interrupted runs from their checkpoints")
    parser.add_argument("--cpu_threads", type=int, default=1, help="OMP_NUM_THREADS of each run")
    refuse_options(parser, {"--threads": "--cpu_threads"})
    parser.add_argument("--table", action="store_true", help="print the recorded ladder and exit")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="add head_information and joint_accuracy to recorded runs without them (from --runs_dir)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ladder = LADDERS[args.ladder]
    if args.task is None:
        args.task = ladder.task
    elif args.ladder == "recall" and args.task != ladder.task:
        raise SystemExit(f"--task: the recall ladder trains {ladder.task} only, got {args.task!r}")
    rungs = [r for r in (args.rungs or ",".join(ladder.rung_names)).split(",") if r]
    unknown = sorted(set(rungs) - set(ladder.rung_names))
    if unknown:
        raise SystemExit(f"--rungs: unknown {unknown}; the {args.ladder} ladder's are {', '.join(ladder.rung_names)}")
    variants = tuple(v for v in args.variants.split(",") if v)
    unknown = sorted(set(variants) - set(ladder.variant_names))
    if unknown:
        raise SystemExit(
            f"--variants: unknown {unknown}; the {args.ladder} ladder's are {', '.join(ladder.variant_names)}"
        )
    full = json.loads(args.record.read_text()) if args.record.is_file() else {}
    record = full.setdefault(args.task, {})
    if args.probe:
        probed = probe_recorded(full, args.runs_dir.expanduser())
        full = _record_runs(args.record, probed)
    elif not args.table:
        for name in rungs:
            key = record_key(name, variants)
            for seed in args.seeds:
                if str(seed) in record.get(key, {}):
                    continue
                runs_dir = args.runs_dir.expanduser()
                result = run_rung(name, args.task, seed, runs_dir, args.resume, args.cpu_threads, variants, args.ladder)
                # merged into the record as it is now: another ladder process may have recorded runs meanwhile
                full = _record_runs(args.record, {(args.task, key, str(seed)): result})
                record = full[args.task]
                print(f"{key} seed {seed}: test mean {_pct(result['test_mean'])} %", flush=True)
    print("\n".join(table(record, args.ladder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
