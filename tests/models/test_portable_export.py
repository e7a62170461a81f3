"""The export step of save_pretrained (hf_ssm/modeling/portable.py, docs/design.md §2): the model's code from
hf_ssm/modeling and hf_ssm/ops is written flat into the checkpoint folder with its imports of the package rewritten
to single-dot relative ones; the Triton files and the references stay home; the folder loads, saves again and loads
again through trust_remote_code in a process where hf_ssm cannot be imported, and so does a config saved alone."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from hf_ssm import HybridSSMForCausalLM
from hf_ssm.modeling.portable import check_portable_folder, flat_name, portable_sources
from model_checks import save_with_reference, tiny_config

# What the model's code imports of hf_ssm/ops, flattened: the torch side of every family the mixers use, the checks
# and the dispatch; never a reference loop (but DEER's, which the model runs), a kernel or the kernel tooling.
OPS_FILES = {
    "ops_checks", "ops_dispatch", "ops_block_parallel", "ops_diag_parallel", "ops_pd", "ops_pd_parallel",
    "ops_pd_generated", "ops_pd_bank", "ops_pd_automaton", "ops_deer", "ops_deer_parallel", "ops_deer_reference",
}  # fmt: skip


def test_flat_names_and_rewritten_imports():
    """A module of hf_ssm.modeling keeps its file name, one of hf_ssm.ops gets `ops_` and its dotted path; every
    import of the package in the exported sources is a single-dot relative one of a file that is exported too."""
    assert flat_name("hf_ssm.modeling.mixer_lru") == "mixer_lru"
    assert flat_name("hf_ssm.ops.pd") == "ops_pd" and flat_name("hf_ssm.ops.pd.parallel") == "ops_pd_parallel"
    with pytest.raises(ValueError, match="not part of the portable model code"):
        flat_name("hf_ssm.training.loop")
    sources = portable_sources("hf_ssm.modeling.modeling_hybrid_ssm")
    assert {name for name in sources if name.startswith("ops")} == OPS_FILES
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in sources, (name, node.module)
    # the dispatch's optional import of the kernels stays as written, inside its try block
    assert "import hf_ssm.ops.kernels as module" in sources["ops_dispatch"]


def test_a_folder_the_loader_would_refuse_is_refused(tmp_path):
    """check_portable_folder reads a folder as transformers' loader will: a file that imports hf_ssm outside a try
    block, or a relative import of a file that is not there, is a ValueError."""
    (tmp_path / "modeling_x.py").write_text("from .helper import f\n")
    (tmp_path / "helper.py").write_text("try:\n    import hf_ssm.ops.kernels\nexcept ImportError:\n    pass\n")
    assert check_portable_folder(tmp_path, "modeling_x") == ["modeling_x", "helper"]
    (tmp_path / "helper.py").write_text("from hf_ssm.ops.pd import pd_scan\n")
    with pytest.raises(ValueError, match="imports hf_ssm"):
        check_portable_folder(tmp_path, "modeling_x")
    (tmp_path / "modeling_x.py").write_text("from .missing import f\n")
    with pytest.raises(ValueError, match="missing.py"):
        check_portable_folder(tmp_path, "modeling_x")


def test_save_pretrained_writes_the_flat_code_and_nothing_of_the_kernels(tmp_path):
    """After save_pretrained the folder holds every file of the closure, none importing hf_ssm where the loader
    checks; the Triton files, the kernel table and the PD references are not there."""
    model = HybridSSMForCausalLM(tiny_config("PBHLA", lru_total_state_size=6, lru_group_size=3, lrc_num_channels=4))
    model.save_pretrained(tmp_path)
    saved = {path.stem for path in tmp_path.glob("*.py")}
    assert OPS_FILES | {"modeling_hybrid_ssm", "configuration_hybrid_ssm", "portable"} <= saved
    assert not {"ops_kernels", "ops_triton_common", "ops_pd_triton", "ops_pd_reference", "ops_block_reference"} & saved
    assert set(check_portable_folder(tmp_path, "modeling_hybrid_ssm")) <= saved


# In a process where hf_ssm cannot be imported: load a saved checkpoint (argv[1]) through trust_remote_code, save it
# again (argv[2]), load that, load a config saved alone (argv[3]); print the logits' agreement and the modules.
BLOCKED_RESAVE = textwrap.dedent(
    """
    import json
    import sys

    class BlockHfSsm:
        def find_spec(self, name, path=None, target=None):
            if name == "hf_ssm" or name.startswith("hf_ssm."):
                raise ImportError("hf_ssm is blocked in this process")

    sys.meta_path.insert(0, BlockHfSsm())
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source, again, config_dir = sys.argv[1:4]
    ref = torch.load(source + "/reference.pt")
    first = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=True).eval()
    first.save_pretrained(again)
    second = AutoModelForCausalLM.from_pretrained(again, trust_remote_code=True).eval()
    config = AutoConfig.from_pretrained(config_dir, trust_remote_code=True)
    with torch.no_grad():
        same = [torch.equal(m(**ref["inputs"]).logits, ref["output"]) for m in (first, second)]
    modules = [type(first).__module__, type(second).__module__, type(config).__module__]
    print(json.dumps({"same": same, "modules": modules, "mixers": config.mixers}))
    """
)


@pytest.mark.slow
def test_exported_checkpoint_and_config_load_and_save_again_without_hf_ssm(tmp_path):
    """The exported folder loads where hf_ssm is blocked, with identical logits; saved again there (transformers'
    own copy, the code being flat already) it loads again, identical; a config saved alone loads through
    AutoConfig."""
    config = tiny_config("PBHLA", lru_total_state_size=6, lru_group_size=3, lrc_num_channels=4)
    model = HybridSSMForCausalLM(config)
    save_with_reference(model, tmp_path / "model", {"input_ids": torch.randint(1, 37, (2, 9))})
    config.save_pretrained(tmp_path / "config")
    assert {"configuration_hybrid_ssm.py", "ops_checks.py", "ops_dispatch.py"} <= set(os.listdir(tmp_path / "config"))
    threads = str(torch.get_num_threads())  # the same float sums as this process's reference
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "OMP_NUM_THREADS": threads,
    }
    folders = [str(tmp_path / name) for name in ("model", "again", "config")]
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED_RESAVE, *folders], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["same"] == [True, True] and got["mixers"] == config.mixers, got
    assert not any("hf_ssm" in module for module in got["modules"]), got
    assert OPS_FILES <= {path.stem for path in Path(folders[1]).glob("*.py")}
