"""The process layout of a training run, between the launcher (`accelerate launch`, torchrun, mpirun) and the
`accelerate.Accelerator` every driver makes (training/loop.py `make_accelerator`):

- `launched_processes`: how many processes the launcher says it started;
- `check_launch`: refuses a run whose processes did not join (each would train the whole run alone, into the same
  run folder) and an FSDP launch that is not running as FSDP (it would train as something else without a word);
- `fsdp_on_cpu`: FSDP2 for several CPU processes over gloo, which accelerate does not set up by itself;
- `process_layout`: what a run records about its processes (launch.json, metrics.json, a checkpoint's metadata);
- `record_launch`: each launch of a run appended to its launch.json; `check_resumed_layout`: refuses to resume a
  checkpoint saved sharded (FSDP) or whole in a launch that would read it the other way (both run by loop.open_run);
- `plain_class`: the model under its own class while `save_pretrained` writes it (FSDP2 swaps the class).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from .checkpointing import read_metadata

# The variables accelerate itself reads for the size of a launch: torchrun / `accelerate launch` (WORLD_SIZE), then
# the MPI launchers (Intel MPI, Open MPI, MVAPICH).
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
CPU_LAUNCH_CONFIGS = "scripts/configs/cpu_ddp.yaml (DDP over gloo) or scripts/configs/fsdp.yaml (FSDP2)"


def launched_processes() -> tuple[int, str | None]:
    """(number of processes the launcher started, the variable that says so); (1, None) when no launcher variable
    is set. ValueError when one is set to something other than a positive integer."""
    for name in WORLD_SIZE_VARIABLES:
        text = os.environ.get(name)
        if text is None or not text.strip():
            continue
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{name}={text!r}: the launcher's process count must be a positive integer") from None
        if value < 1:
            raise ValueError(f"{name}={text!r}: the launcher's process count must be a positive integer")
        return value, name
    return 1, None


def fsdp_requested() -> bool:
    """Whether the launch asked for FSDP: `accelerate launch` with an FSDP config (or `--use_fsdp`) sets
    ACCELERATE_USE_FSDP=true in every process."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def check_launch(accelerator) -> None:
    """RuntimeError when the accelerator's processes are not those the launch asked for:

    - the launcher started several processes (`launched_processes`) and the accelerator runs fewer (an
      Accelerator made with cpu=False on a machine without a GPU: each process reports DistributedType.NO and one
      process, so each trains the whole run by itself);
    - the launch asked for FSDP (`fsdp_requested`) and the accelerator runs as something else (a plain process,
      or DDP).
    """
    world, variable = launched_processes()
    distributed_type = _type_name(accelerator.distributed_type)
    if world > 1 and accelerator.num_processes != world:
        raise RuntimeError(
            f"the launcher started {world} processes ({variable}={world}) but the accelerator of this one runs "
            f"{accelerator.num_processes} (distributed_type {distributed_type}): the processes did not join, and "
            f"each would train the whole run into the same run folder. On a machine without a GPU make the "
            f"Accelerator with cpu=True (hf_ssm.training.loop.make_accelerator does) and launch with "
            f"{CPU_LAUNCH_CONFIGS}; or start one process (python scripts/X.py)."
        )
    if fsdp_requested() and distributed_type != "FSDP":
        raise RuntimeError(
            f"the launch asked for FSDP (ACCELERATE_USE_FSDP=true) but the accelerator runs as {distributed_type} "
            f"with {accelerator.num_processes} process(es): launch with `accelerate launch --config_file "
            f"scripts/configs/fsdp.yaml --num_processes N ...` (it starts the processes FSDP needs), or unset "
            f"ACCELERATE_USE_FSDP to run without FSDP."
        )


def fsdp_on_cpu(accelerator) -> None:
    """Run an FSDP launch of several CPU processes as FSDP2 over gloo (for tests and debugging without a GPU).

    accelerate (1.16) makes a launch FSDP only on GPU-like devices: on CPUs its processes join as MULTI_CPU and
    `prepare` wraps the model in DistributedDataParallel, dropping the FSDP settings. torch's FSDP2 (`fully_shard`)
    runs on CPU tensors over gloo, so this sets the accelerator's shared state to what accelerate sets on GPUs (the
    FSDP distributed type and the launch's plugin, read from its FSDP_* variables): `prepare` then shards the model
    with accelerate's own FSDP2 code, and checkpoints and the gathered state dict follow. FSDP2 only; mixed
    precision "no" or "bf16". The caller checks the result (`check_launch`)."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin()  # from the FSDP_* variables `accelerate launch` set
    if plugin.fsdp_version != 2:
        raise RuntimeError(
            f"FSDP on CPU processes runs FSDP2 only; the launch asked for fsdp_version {plugin.fsdp_version}: "
            "set fsdp_version: 2 in the config (scripts/configs/fsdp.yaml does)"
        )
    if accelerator.mixed_precision not in ("no", "bf16"):
        raise RuntimeError(
            f"FSDP on CPU processes takes mixed precision 'no' or 'bf16', not {accelerator.mixed_precision!r}: "
            "launch with --mixed_precision no"
        )
    if accelerator.mixed_precision != "no":
        plugin.set_mixed_precision(accelerator.mixed_precision)
    state = AcceleratorState()
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP  # as AcceleratorState does on GPUs


def process_layout(accelerator) -> dict:
    """What a run records about its processes: {"num_processes", "distributed_type" ("NO", "MULTI_CPU",
    "MULTI_GPU", "FSDP", ...), "mixed_precision", "device"}, and under FSDP "fsdp_version", "fsdp_wrap" (the module
    classes each made a unit of their own) and "fsdp_state_dict_type" (how checkpoints are saved)."""
    layout = {
        "num_processes": accelerator.num_processes,
        "distributed_type": _type_name(accelerator.distributed_type),
        "mixed_precision": accelerator.mixed_precision,
        "device": str(accelerator.device),
    }
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if layout["distributed_type"] == "FSDP" and plugin is not None:
        state_dict_type = plugin.state_dict_type
        layout.update(
            fsdp_version=plugin.fsdp_version,
            fsdp_wrap=list(plugin.transformer_cls_names_to_wrap or []),
            fsdp_state_dict_type=getattr(state_dict_type, "name", str(state_dict_type)),
        )
    return layout


def check_resumed_layout(accelerator, checkpoint: Path) -> None:
    """ValueError when `checkpoint` was saved under FSDP (sharded weights and optimizer state) and this launch does
    not run FSDP, or the other way round: accelerator.load_state would look for files the checkpoint does not
    have. A checkpoint without a recorded layout (saved before it was recorded) passes."""
    saved = read_metadata(checkpoint).get("process_layout")
    if saved is None:
        return
    now = process_layout(accelerator)
    if (saved["distributed_type"] == "FSDP") != (now["distributed_type"] == "FSDP"):
        raise ValueError(
            f"--resume: {checkpoint} was saved with distributed_type {saved['distributed_type']} on "
            f"{saved['num_processes']} process(es), this launch runs {now['distributed_type']} on "
            f"{now['num_processes']}; FSDP checkpoints are sharded: resume an FSDP run with the FSDP config "
            "(scripts/configs/fsdp.yaml) and any other run without it"
        )


def record_launch(accelerator, run_dir: Path, resume: bool, found: Path | None) -> None:
    """Append this launch to run_dir/launch.json, {"launches": [...]}: its process layout
    (`process_layout`: process count, distributed type, mixed precision, device, FSDP settings) and the
    checkpoint it resumed from ("resumed_from": the folder name, or None). A fresh run starts the list anew; a
    resumed one keeps the earlier launches, so a run continued under another layout says so."""
    path = run_dir / "launch.json"
    launches = json.loads(path.read_text())["launches"] if resume and path.is_file() else []
    launches.append({**process_layout(accelerator), "resumed_from": found.name if found is not None else None})
    path.write_text(json.dumps({"launches": launches}, indent=2))


def _type_name(distributed_type) -> str:
    return getattr(distributed_type, "value", str(distributed_type))


@contextmanager
def plain_class(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`model` under its own class inside the block (the class it had before `fully_shard`), restored after.

    FSDP2 turns a sharded module's class into a generated subclass, FSDP<Name>, defined in torch. `save_pretrained`
    records a model's class in config.json (`auto_map`) and copies the files of its module next to the weights:
    under that subclass it would name `_fsdp_init.FSDPHybridSSMForCausalLM` and copy torch's FSDP files into the
    exported folder. Other models pass through unchanged."""
    from torch.distributed.fsdp import FSDPModule

    sharded_class = type(model)
    if not isinstance(model, FSDPModule):
        yield model
        return
    model.__class__ = next(c for c in sharded_class.__mro__[1:] if not issubclass(c, FSDPModule))
    try:
        yield model
    finally:
        model.__class__ = sharded_class
