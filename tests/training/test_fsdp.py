"""FSDP2 on two CPU processes (gloo): scripts/configs/fsdp.yaml launched with `accelerate launch`, the package's
training loop under it, and what it writes.

The test launches this file as the program of both processes (`worker`, below `if __name__ == "__main__"`): one
launch holds every multi-process part, since starting two interpreters costs more than the training itself.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

# A 2-layer (PD-SSM, attention) model of width 32 on 64-token blocks of the generated stories (as
# tests/training/test_pretrain.py), 4 steps of 2 blocks per process, a checkpoint at step 2.
RUN_ARGS = [
    "--dataset", "builtin",
    "--extra_config", "hidden_size=32", "intermediate_size=64", "num_hidden_layers=2", "mixers=SA",
    "--block_size", "64", "--builtin_documents", "60", "--eval_documents", "12", "--eval_blocks", "4",
    "--warmup_steps", "2", "--sample_tokens", "0", "--learning_rate", "1e-2",
    "--max_steps", "4", "--eval_every", "2", "--save_every", "2", "--batch_size", "2",
]  # fmt: skip
# The same run on one process with the global batch of two: 4 blocks per step.
SINGLE = dict(
    extra_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "mixers": "SA"},
    dataset="builtin", block_size=64, builtin_documents=60, eval_documents=12, eval_blocks=4, warmup_steps=2,
    sample_tokens=0, learning_rate=1e-2, max_steps=4, eval_every=2, save_every=0, batch_size=4,
)  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _load_script(name: str):
    import importlib.util

    sys.path.append(str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gradient_check(out: Path) -> None:
    """One backward pass of a 4-layer (PD-SSM, attention) x 2 model under FSDP2, each process on its half of a batch
    of 4 sequences with the training loop's scaling (sum of token losses x processes / global token count); the
    gathered gradients and the loss beside those of the unsharded model on the whole batch, written (main process)
    to out/gradients.json."""
    from torch.distributed.fsdp import FSDPModule

    from hf_ssm import HybridSSMConfig, HybridSSMForCausalLM
    from hf_ssm.modeling import PAPER_PD_SSM_LAYER
    from hf_ssm.training.distributed import process_layout
    from hf_ssm.training.lm.pretraining import token_loss_sum
    from hf_ssm.training.loop import make_accelerator

    accelerator = make_accelerator("no")
    world, rank = accelerator.num_processes, accelerator.process_index
    config = HybridSSMConfig(  # PD-SSM: the paper's layer, every parameter trained
        **{**PAPER_PD_SSM_LAYER, "pd_ssm_num_heads": 2, "pd_ssm_head_state_size": 5},
        vocab_size=37, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, mixers="SASA", pd_ssm_dict_size=4,
    )  # fmt: skip
    torch.manual_seed(0)
    model = HybridSSMForCausalLM(config)
    reference = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    units = sorted(name for name, module in model.named_modules() if isinstance(module, FSDPModule))

    ids = torch.randint(0, config.vocab_size, (4, 24), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(24).expand(4, -1)
    global_tokens = ids[:, 1:].numel()
    rows = slice(rank * 4 // world, (rank + 1) * 4 // world)
    logits = model(input_ids=ids[rows], position_ids=positions[rows], use_cache=False).logits
    loss_sum, _ = token_loss_sum(logits, ids[rows])
    accelerator.backward(loss_sum * (world / global_tokens))
    loss = accelerator.reduce(loss_sum.detach(), "sum").item() / global_tokens
    gathered = {name: p.grad.full_tensor() for name, p in model.named_parameters()}

    ref_sum, ref_count = token_loss_sum(reference(input_ids=ids, position_ids=positions, use_cache=False).logits, ids)
    (ref_sum / ref_count).backward()
    expected = dict(reference.named_parameters())
    if accelerator.is_main_process:
        result = {
            **process_layout(accelerator),
            "units": units,
            "loss": loss,
            "reference_loss": (ref_sum / ref_count).item(),
            "names_match": sorted(gathered) == sorted(expected),
            "max_grad_error": max((gathered[n] - p.grad).abs().max().item() for n, p in expected.items()),
            "max_grad": max(p.grad.abs().max().item() for p in expected.values()),
        }
        (out / "gradients.json").write_text(json.dumps(result, indent=2))
    accelerator.wait_for_everyone()


def worker(out: Path) -> None:
    """Each process of the launch: the gradient check; scripts/pretrain.py for 4 steps (checkpoint at step 2) into
    out/full; a copy of that run folder without its outputs, resumed from its step-2 checkpoint into out/resumed;
    and scripts/finetune.py --lora, which must refuse FSDP (its exit status, main process, in out/lora_exit)."""
    gradient_check(out)
    pretrain = _load_script("pretrain")
    pretrain.main(["--output_dir", str(out / "full"), *RUN_ARGS])
    if int(os.environ["RANK"]) == 0:
        keep = shutil.ignore_patterns("model", "metrics.json", "loss_curve.png")
        shutil.copytree(out / "full", out / "resumed", ignore=keep)
    torch.distributed.barrier()
    pretrain.main(["--resume", "--output_dir", str(out / "resumed"), *RUN_ARGS])
    try:
        _load_script("finetune").main(
            ["--model", str(out / "full" / "model"), "--lora", "--output_dir", str(out / "lora")]
        )
        status = 0
    except SystemExit as stop:
        status = stop.code
    if int(os.environ["RANK"]) == 0:
        (out / "lora_exit").write_text(str(status))


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> Path:
    """The two-process launch of `worker` (one per module: every test below reads its folders)."""
    out = tmp_path_factory.mktemp("fsdp")
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "scripts/configs/fsdp.yaml"),
        "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(_free_port()), __file__, str(out),
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=400)
    assert result.returncode == 0, result.stderr[-6000:]
    (out / "stderr.txt").write_text(result.stderr)
    return out


@pytest.fixture(scope="module")
def single(launched, tmp_path_factory) -> dict:
    """The metrics of the same pretraining run on one process with the global batch (4 blocks a step)."""
    from hf_ssm.training.lm.lm_settings import PretrainSettings
    from hf_ssm.training.lm.pretraining import pretrain

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path_factory.mktemp("single")
        return {"metrics": pretrain(PretrainSettings(**SINGLE), out), "dir": out}
    finally:
        torch.set_num_threads(threads)


def _losses(metrics: dict) -> list[float]:
    return [h["loss"] for h in metrics["history"]]


@pytest.mark.slow
def test_decoder_layer_is_the_unit_and_gradients_equal_one_process(launched):
    """scripts/configs/fsdp.yaml runs as FSDP2 on two CPU processes with each decoder layer an FSDP unit (none of
    its submodules one; besides the layers only the model, its embedding, final norm and LM head); a backward pass
    on each process's half of a batch gives the loss and the gradients (gathered from the shards) of the unsharded
    model on the whole batch."""
    result = json.loads((launched / "gradients.json").read_text())
    assert (result["distributed_type"], result["num_processes"], result["fsdp_version"]) == ("FSDP", 2, 2)
    assert result["fsdp_wrap"] == ["HybridSSMDecoderLayer"]
    layers = [name for name in result["units"] if name.startswith("model.layers.")]
    assert layers == ["model.layers.0", "model.layers.1", "model.layers.2", "model.layers.3"]  # nothing inside one
    # the rest: the model, and the embedding and the final norm / LM head accelerate makes units of their own
    assert "" in result["units"] and set(result["units"]) - set(layers) <= {
        "",
        "model.embed_tokens",
        "model.norm",
        "lm_head",
    }
    assert result["loss"] == pytest.approx(result["reference_loss"], rel=1e-6)
    assert result["names_match"]
    assert result["max_grad_error"] <= 1e-6 * max(1.0, result["max_grad"]), result


@pytest.mark.slow
def test_fsdp_pretraining_equals_one_process_and_exports_a_loadable_model(launched, single):
    """scripts/pretrain.py under FSDP2 trains the loss curve (and gradient norms, evaluations) of one process with
    the same global batch, saves sharded checkpoints (one file per process for the model and the optimizer),
    records its process layout, and gathers the final weights into a model/ folder that from_pretrained loads
    under the model's own class (no torch FSDP code, no FSDP class in auto_map) with the weights of the one-process
    run."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    full = launched / "full"
    metrics = json.loads((full / "metrics.json").read_text())
    reference = single["metrics"]
    assert metrics["distributed_type"] == "FSDP" and metrics["num_processes"] == 2 and metrics["steps"] == 4
    assert _losses(metrics) == pytest.approx(_losses(reference), rel=1e-5)
    grad_norms = [h["grad_norm"] for h in metrics["history"]]
    assert grad_norms == pytest.approx([h["grad_norm"] for h in reference["history"]], rel=1e-4)
    assert [e["loss"] for e in metrics["eval_history"]] == pytest.approx(
        [e["loss"] for e in reference["eval_history"]], rel=1e-5
    )
    launch = json.loads((full / "launch.json").read_text())["launches"]
    assert [(x["distributed_type"], x["num_processes"], x["resumed_from"]) for x in launch] == [("FSDP", 2, None)]

    checkpoint = full / "checkpoints" / "step_2"
    for part in ("pytorch_model_fsdp_0", "optimizer_0"):
        assert sorted(p.name for p in (checkpoint / part).glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]

    model_dir = full / "model"
    assert not list(model_dir.glob("_fsdp*"))
    auto_map = json.loads((model_dir / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForCausalLM"] == "modeling_hybrid_ssm.HybridSSMForCausalLM"
    loaded = AutoModelForCausalLM.from_pretrained(model_dir, trust_remote_code=True)
    assert type(loaded).__name__ == "HybridSSMForCausalLM"
    expected = load_file(single["dir"] / "model" / "model.safetensors")
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_fsdp_resume_from_a_sharded_checkpoint_continues_the_run(launched):
    """A run resumed under FSDP2 from the sharded step-2 checkpoint continues as the uninterrupted run did: the
    same losses and learning rates, and the same final weights; launch.json lists both launches."""
    from safetensors.torch import load_file

    full = json.loads((launched / "full" / "metrics.json").read_text())
    resumed = json.loads((launched / "resumed" / "metrics.json").read_text())
    assert resumed["resumed_from"] == [2]
    assert [h["step"] for h in resumed["history"]] == [1, 2, 3, 4]
    assert _losses(resumed) == pytest.approx(_losses(full), rel=1e-6, abs=1e-7)
    assert [h["lr"] for h in resumed["history"]] == [h["lr"] for h in full["history"]]
    launches = json.loads((launched / "resumed" / "launch.json").read_text())["launches"]
    assert [x["resumed_from"] for x in launches] == [None, "step_2"]
    a = load_file(launched / "full" / "model" / "model.safetensors")
    b = load_file(launched / "resumed" / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_lora_finetuning_is_refused_under_fsdp(launched):
    """scripts/finetune.py --lora under FSDP exits with status 2 and says why (merging the adapters needs unsharded
    weights) and what to use instead, before it writes a run folder."""
    assert (launched / "lora_exit").read_text() == "2"
    assert "--lora is not supported under FSDP" in (launched / "stderr.txt").read_text()
    assert not (launched / "lora").exists()


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
