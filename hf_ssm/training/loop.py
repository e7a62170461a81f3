"""The skeleton every training driver shares (causal LM, state tracking, time series, the adapter experiment
and the pretraining of its tiny base).

A run trains `total` units (optimizer steps, or epochs) from `start` (0, or the unit count of the checkpoint
it resumes from). After unit n (counted from 1) `run_training` evaluates when due (every `eval_every` units,
always after the last, and when the run's time is up), then asks whether to stop early (always, when the time
is up), then checkpoints when due (every `save_every` units, never after the last: the driver exports the
model next). A driver keeps only what is its own: what a unit trains, what an evaluation scores, what a
checkpoint holds; the pieces around it live here:

- `make_accelerator`: Accelerate on the GPU if there is one, else on the CPU (gloo when launched several times;
  FSDP2 when the launch asks for FSDP), refusing processes that did not join (training/distributed.py);
- `open_run`: the launch and resume checks (before anything is written), the run folder's settings.json and
  launch.json (the process layout of every launch of the run); `begin_run`:
  accelerator and `open_run` in one call (the settings are validated once, at the driver's entry: a driver's
  public function validates unless its caller says it already did, `validated=True`);
- `Stopwatch`: training time, counting what a resumed run spent before the interruption;
- `BestWeights`: the weights with the best validation score so far (the ones a driver tests and saves), and
  their file in a checkpoint;
- `save_checkpoint` / `load_checkpoint`: crash-safe `accelerator.save_state` folders with their metadata;
- `optimizer_step`: backward, clipping, optimizer and schedule step of a plain (unaccumulated) step;
- `training_progress` / `evaluation_progress`: the tqdm bars of a training loop (on the local main process only)
  and of a long evaluation;
- the evaluation skeleton: `eval_mode` (the model in eval mode for the evaluation, its training flag restored
  after), `batch_ranges` (the batches of an evaluation set) and `bucket_accuracy` (the accuracy by bucket of the
  state-tracking drivers: formal tasks, training/state_tracking/evaluation.py; natural-language stories,
  training/adapter/scoring.py). The time-series driver scores one split (accuracy and loss, no buckets): it uses
  `eval_mode` and `batch_ranges` only; the causal-LM evaluation (training/lm/pretraining.py) sums token losses
  across processes, where every process must run the same number of forward passes (dummy batches included), so
  it shares only `eval_mode`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from .checkpointing import atomic_save_dir, check_resume, prune_checkpoints, read_metadata
from .distributed import check_launch, check_resumed_layout, fsdp_on_cpu, fsdp_requested, process_layout, record_launch


def make_accelerator(mixed_precision: str | None = "auto", cpu: bool | None = None):
    """An `accelerate.Accelerator`. `mixed_precision`: "auto" = what `accelerate launch` (or its config file)
    set, else bf16 on a GPU that supports it, else fp32; None = Accelerate's own choice (what `accelerate launch`
    set, else fp32); "no" / "bf16" / "fp16" are passed on. `cpu`: True runs on the CPU on a machine with CUDA too
    (benchmarks/bench_lm.py's `--device cpu`); None (default) = the CPU exactly where CUDA is not available.

    An FSDP launch of CPU processes runs as FSDP2 over gloo (distributed.fsdp_on_cpu); a launch whose processes did
    not join, or that asked for FSDP and does not run it, is refused (RuntimeError, distributed.check_launch)."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType

    if mixed_precision == "auto":
        if "ACCELERATE_MIXED_PRECISION" in os.environ:
            mixed_precision = None  # what `accelerate launch` / its config file chose
        elif torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            mixed_precision = "bf16"
        else:
            mixed_precision = "no"
    # Without CUDA, cpu=True is what makes several launched processes (WORLD_SIZE > 1) join as MULTI_CPU (gloo);
    # with cpu=False accelerate would run each of them alone.
    cpu = not torch.cuda.is_available() if cpu is None else cpu
    accelerator = Accelerator(mixed_precision=mixed_precision, cpu=cpu)
    if fsdp_requested() and accelerator.distributed_type == DistributedType.MULTI_CPU:
        fsdp_on_cpu(accelerator)
    check_launch(accelerator)
    return accelerator


def begin_run(settings, run_dir, resume: bool, safe: Collection[str], accelerator=None):
    """The opening of a driver that takes a ready `accelerator` or none, with `settings` already validated: make the
    accelerator if none was given (mixed precision: what `accelerate launch` set, else fp32), then `open_run`.

    Returns (accelerator, run_dir as a Path, the checkpoint to resume from or None)."""
    accelerator = accelerator or make_accelerator(mixed_precision=None)
    run_dir = Path(run_dir)
    return accelerator, run_dir, open_run(accelerator, settings, run_dir, resume, safe)


def open_run(accelerator, settings, run_dir: Path, resume: bool, safe: Collection[str]) -> Path | None:
    """Start (or continue) the run in `run_dir`: returns the checkpoint to resume from (None: start afresh).

    A launch whose processes did not join is refused first (distributed.check_launch). With `resume`, settings
    that differ from the run's own (apart from `safe`) are refused next (checkpointing.check_resume), and a
    checkpoint saved sharded (FSDP) or whole that this launch would read the other way
    (distributed.check_resumed_layout), so a refused run leaves the folder as it was; then the folder gets the
    dataclass `settings` as settings.json and this launch's process layout in launch.json (distributed.record_launch).
    """
    check_launch(accelerator)
    found = check_resume(settings, run_dir, safe) if resume else None
    if found is not None:
        check_resumed_layout(accelerator, found)
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "settings.json").write_text(json.dumps(asdict(settings), indent=2))
        record_launch(accelerator, run_dir, resume, found)
    accelerator.wait_for_everyone()
    return found


class Stopwatch:
    """Training time of a run: wall-clock seconds and this process's CPU seconds (all its threads), each
    counting the time recorded before an interruption (`seconds`, `cpu_seconds` of the checkpoint)."""

    def __init__(self, seconds: float = 0.0, cpu_seconds: float = 0.0):
        self._wall, self._cpu = time.perf_counter() - seconds, time.process_time() - cpu_seconds

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._wall

    @property
    def cpu_seconds(self) -> float:
        return time.process_time() - self._cpu


@dataclass
class BestWeights:
    """The weights with the best validation score so far, copied to the CPU, and the record of that score."""

    record: dict | None = None
    state: dict[str, torch.Tensor] | None = None

    def keep(self, model: torch.nn.Module, record: dict) -> None:
        self.record = record
        self.state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    def save(self, folder: Path, name: str) -> None:
        """Write the kept weights to folder/name, a safetensors file for a `.safetensors` name, else `torch.save`
        (nothing while no weights are kept): a checkpoint carries the best weights so far along."""
        if self.state is None:
            return
        if name.endswith(".safetensors"):
            save_file(self.state, str(folder / name))
        else:
            torch.save(self.state, folder / name)

    @classmethod
    def load(cls, record: dict, folder: Path, name: str) -> BestWeights:
        """The weights `save` wrote to folder/name, with their `record`."""
        path = folder / name
        state = load_file(str(path)) if name.endswith(".safetensors") else torch.load(path, map_location="cpu")
        return cls(record, state)


def load_checkpoint(accelerator, folder: Path) -> dict:
    """Restore `accelerator.save_state` (model, optimizer, scheduler, random states) from `folder`; returns the
    metadata the checkpoint was saved with."""
    accelerator.load_state(str(folder))
    return read_metadata(folder)


def save_checkpoint(
    accelerator,
    target: Path,
    metadata: dict,
    write_extra: Callable[[Path], None] | None = None,
    keep: int | None = None,
) -> None:
    """Collective crash-safe checkpoint: every process writes its part of `accelerator.save_state` into the
    main process's temporary folder, the main process adds `write_extra(folder)` and the metadata (with the run's
    "process_layout", which `open_run` checks on resume), and the folder is renamed into place
    (checkpointing.atomic_save_dir). With `keep`, only the newest `keep` checkpoints of `target`'s parent stay,
    pruned after the new one is complete.

    Not accelerate's `ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=k)`: in accelerate 1.15
    its `save_state` ignores the folder it is given, deletes the oldest checkpoints *before* writing the new one
    and writes straight into the final `checkpoint_<i>` folder, so an interrupted save leaves a half-written
    newest checkpoint beside fewer complete ones; and its counter restarts at 0 unless set by hand on resume.
    Here a checkpoint folder exists under its name only once complete, and is named by its step."""
    from accelerate.utils import broadcast_object_list

    metadata = {**metadata, "process_layout": process_layout(accelerator)}  # open_run checks it on resume
    if accelerator.is_main_process:

        def write(tmp: Path) -> None:
            broadcast_object_list([str(tmp)])
            accelerator.save_state(str(tmp))
            accelerator.wait_for_everyone()
            if write_extra is not None:
                write_extra(tmp)

        atomic_save_dir(target, write, metadata)
        if keep is not None:
            prune_checkpoints(target.parent, keep=keep)
    else:
        holder = [None]
        broadcast_object_list(holder)
        accelerator.save_state(holder[0])
        accelerator.wait_for_everyone()
    accelerator.wait_for_everyone()  # nobody goes on before the folder has its final name


def optimizer_step(accelerator, loss: torch.Tensor, optimizer, scheduler, parameters, grad_clip: float) -> None:
    """One optimizer step on `loss`: clear the gradients, backward, clip the global norm of `parameters` to
    `grad_clip` (0: no clipping), step the optimizer, then the schedule."""
    optimizer.zero_grad()
    accelerator.backward(loss)
    if grad_clip > 0:
        accelerator.clip_grad_norm_(parameters, grad_clip)
    optimizer.step()
    scheduler.step()


def is_due(done: int, every: int, total: int) -> bool:
    """Whether an evaluation follows unit `done`: every `every` units (0: never) and after the last one."""
    return bool(every) and done % every == 0 or done == total


@dataclass
class LoopResult:
    units: int  # units trained in all (the last one trained, counting from 1)
    stopped_early: bool  # `should_stop` ended the run before `total`


def run_training(
    accelerator,
    *,
    desc: str,
    start: int,
    total: int,
    train_unit: Callable[[int], dict | None],
    evaluate: Callable[[int], dict | None],
    eval_every: int,
    should_stop: Callable[[int], bool] | None = None,
    out_of_time: Callable[[], bool] | None = None,
    save: Callable[[int], None] | None = None,
    save_every: int = 0,
) -> LoopResult:
    """Train units start .. total - 1 (`train_unit(index)`, 0-based) behind a progress bar.

    After unit `done = index + 1`: `evaluate(done)` when `is_due(done, eval_every, total)` or `out_of_time()`
    (asked once per unit) is True, then the run stops if the time is up or `should_stop(done)` (only after an
    evaluation), then `save(done)` every `save_every` units (0: never) before the last. `train_unit` and
    `evaluate` may return progress-bar values (a dict) or None.
    """
    progress = training_progress(accelerator, desc, total, start)
    done, stopped_early = start, False
    try:
        for index in range(start, total):
            postfix = train_unit(index)
            done = index + 1
            progress.update(1)
            if postfix:
                progress.set_postfix(**postfix)
            late = out_of_time is not None and out_of_time()
            if late or is_due(done, eval_every, total):
                if postfix := evaluate(done):
                    progress.set_postfix(**postfix)
                if late or (should_stop is not None and should_stop(done)):
                    stopped_early = done < total
                    break
            if save is not None and save_every and done % save_every == 0 and done < total:
                save(done)
    finally:
        progress.close()
    return LoopResult(done, stopped_early)


# Refresh often on a terminal; in a log file (not a tty) a line every 10 s keeps the log short.
TERMINAL_INTERVAL_S, LOG_INTERVAL_S = 0.5, 10.0


def training_progress(accelerator, desc: str, total: int, initial: int = 0, iterable=None) -> tqdm:
    """A tqdm bar over `iterable` (or updated by hand), starting at `initial` of `total` (a resumed run)."""
    return tqdm(
        iterable,
        initial=initial,
        total=total,
        desc=desc,
        disable=not accelerator.is_local_main_process,
        mininterval=_refresh_interval(),
    )


def evaluation_progress(iterable, desc: str, total: int, enabled: bool = True) -> tqdm:
    """A tqdm bar over the batches of one evaluation: a test set of long stories can take tens of minutes."""
    return tqdm(iterable, total=total, desc=desc, disable=not enabled, mininterval=_refresh_interval())


def _refresh_interval() -> float:
    return TERMINAL_INTERVAL_S if sys.stderr.isatty() else LOG_INTERVAL_S


@contextmanager
def eval_mode(model: torch.nn.Module):
    """`model.eval()` inside the block; the model's training flag as it was afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def batch_ranges(count: int, batch_size: int) -> Iterator[range]:
    """The item indices of each batch of an evaluation set of `count` items: [0, B), [B, 2B), ... (the last one
    shorter)."""
    for start in range(0, count, batch_size):
        yield range(start, min(count, start + batch_size))


@torch.no_grad()
def bucket_accuracy(model: torch.nn.Module, buckets, score_bucket: Callable[[int, int], dict]) -> dict:
    """{"buckets": one record per (low, high) bucket, "mean_accuracy": the mean of their "accuracy"}.

    `score_bucket(low, high, *rest)` scores the bucket's sequences and returns its record (its bounds, "accuracy"
    and whatever else the driver reports); it runs with `model` in eval mode and without gradients. A bucket is
    (low, high) or (low, high, *rest) (the stories of the shuffled-objects task: (low, high, number of objects))."""
    with eval_mode(model):
        records = [score_bucket(*bucket) for bucket in buckets]
    return {"buckets": records, "mean_accuracy": sum(r["accuracy"] for r in records) / len(records)}
