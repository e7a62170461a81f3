"""The process layout of a run (hf_ssm.training.distributed, loop.open_run): launches whose processes did not join,
or that asked for FSDP and do not run it, are refused before the run folder is touched; every run records its
layout (launch.json, metrics.json, checkpoint metadata); a checkpoint is not resumed under the other layout
(sharded FSDP vs whole)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import pytest
import torch

from hf_ssm.training.checkpointing import atomic_save_dir, read_metadata
from hf_ssm.training.distributed import launched_processes
from hf_ssm.training.lm.lm_settings import PretrainSettings
from hf_ssm.training.lm.pretraining import pretrain
from hf_ssm.training.loop import make_accelerator, open_run

# A 1-layer attention model, 2 steps of 2 blocks of 32 tokens of the generated stories: about a second.
TINY = dict(
    extra_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "mixers": "A"},
    dataset="builtin", block_size=32, batch_size=2, builtin_documents=20, eval_documents=4, eval_blocks=2,
    warmup_steps=1, sample_tokens=0, max_steps=2, eval_every=2, save_every=1,
)  # fmt: skip


@dataclass
class Settings:
    seed: int = 0


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def unjoined(monkeypatch):
    """An accelerator like that of each process of a two-process launch that did not join: WORLD_SIZE=2 in the
    environment, and an Accelerator made with cpu=False on a machine without a GPU (DistributedType.NO, one
    process)."""
    from accelerate import Accelerator

    if torch.cuda.is_available():
        pytest.skip("cpu=False joins the processes on a machine with a GPU")
    monkeypatch.setenv("WORLD_SIZE", "2")
    accelerator = Accelerator(cpu=False, mixed_precision="no")
    assert accelerator.num_processes == 1 and accelerator.distributed_type == "NO"
    return accelerator


def test_a_launch_whose_processes_did_not_join_is_refused_before_the_run_folder_is_written(unjoined, tmp_path):
    """Two launched processes that each run alone would train the whole run twice into one folder: pretrain refuses
    with a RuntimeError naming the launcher's count, the accelerator's, and the fix, before creating the folder."""
    with pytest.raises(RuntimeError, match=r"started 2 processes \(WORLD_SIZE=2\).*runs 1 \(distributed_type NO\)"):
        pretrain(PretrainSettings(**TINY), tmp_path / "run", accelerator=unjoined)
    assert not (tmp_path / "run").exists()
    with pytest.raises(RuntimeError, match="did not join.*cpu=True.*cpu_ddp.yaml"):
        open_run(unjoined, Settings(), tmp_path / "other", resume=False, safe=())
    assert not (tmp_path / "other").exists()


def test_an_fsdp_launch_that_does_not_run_fsdp_is_refused(monkeypatch):
    """ACCELERATE_USE_FSDP=true (what `accelerate launch` with an FSDP config sets) in a process that runs without
    FSDP (here alone: nothing to shard over) is refused by make_accelerator, naming FSDP, what runs instead, and
    the config to launch with, instead of training without FSDP."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(RuntimeError, match=r"asked for FSDP.*runs as NO with 1 process.*scripts/configs/fsdp.yaml"):
        make_accelerator("no")


@pytest.mark.parametrize("value", ["two", "0", "-3"])
def test_a_malformed_launcher_process_count_is_refused(monkeypatch, value):
    """A launcher variable that is not a positive integer is a ValueError naming the variable and its value."""
    monkeypatch.setenv("WORLD_SIZE", value)
    with pytest.raises(ValueError, match=f"WORLD_SIZE={value!r}.*positive integer"):
        launched_processes()


def test_the_launcher_process_count_comes_from_torchrun_or_mpi(monkeypatch):
    """WORLD_SIZE (torchrun, accelerate launch) first, else the MPI launchers' variables; 1 without any."""
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launched_processes() == (1, None)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert launched_processes() == (4, "OMPI_COMM_WORLD_SIZE")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert launched_processes() == (3, "WORLD_SIZE")


def test_a_run_records_its_process_layout(tmp_path):
    """A pretraining run writes its process count, distributed type, mixed precision and device into launch.json
    (one entry per launch: a resume appends one naming its checkpoint), metrics.json and every checkpoint's
    metadata."""
    metrics = pretrain(PretrainSettings(**TINY), tmp_path)
    layout = {"num_processes": 1, "distributed_type": "NO", "mixed_precision": "no", "device": "cpu"}
    assert {k: metrics[k] for k in layout} == layout
    assert json.loads((tmp_path / "launch.json").read_text()) == {"launches": [{**layout, "resumed_from": None}]}
    assert read_metadata(tmp_path / "checkpoints" / "step_1")["process_layout"] == layout

    pretrain(PretrainSettings(**TINY), tmp_path, resume=True)
    launches = json.loads((tmp_path / "launch.json").read_text())["launches"]
    assert [launch["resumed_from"] for launch in launches] == [None, "step_1"]


def test_every_driver_records_its_launch_in_open_run(tmp_path):
    """open_run, which every driver (causal LM, state tracking, time series, adapter) starts its run with, writes
    launch.json beside settings.json and leaves settings.json to the settings alone."""
    accelerator = make_accelerator("no")
    open_run(accelerator, Settings(seed=3), tmp_path, resume=False, safe=())
    assert json.loads((tmp_path / "settings.json").read_text()) == {"seed": 3}
    launch = json.loads((tmp_path / "launch.json").read_text())["launches"]
    assert [(x["num_processes"], x["distributed_type"], x["resumed_from"]) for x in launch] == [(1, "NO", None)]


def test_a_sharded_fsdp_checkpoint_is_not_resumed_without_fsdp(tmp_path):
    """Resuming a checkpoint saved under FSDP (sharded) in a launch without FSDP is refused with a ValueError naming
    both layouts and the config to resume with, and leaves the run folder as it was."""
    settings = Settings(seed=1)
    (tmp_path / "settings.json").write_text(json.dumps(asdict(settings)))
    saved = {"num_processes": 2, "distributed_type": "FSDP", "mixed_precision": "bf16", "device": "cuda:0"}
    atomic_save_dir(tmp_path / "checkpoints" / "step_4", lambda folder: None, {"process_layout": saved})
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(
        ValueError, match=r"distributed_type FSDP on 2 process\(es\), this launch runs NO on 1.*fsdp.yaml"
    ):
        open_run(make_accelerator("no"), settings, tmp_path, resume=True, safe=())
    assert sorted(p.name for p in tmp_path.iterdir()) == before
