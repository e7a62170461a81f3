"""The warnings pyproject.toml's pytest filters silence are third-party ones, named exactly, and the test run of
hf_ssm's own code is otherwise free of them.

Each filter is checked both ways in a fresh interpreter (a warning fires once per import): with every warning an
error, the third-party code path it names raises exactly that warning; with the filters of pyproject.toml applied on
top, the same path runs clean. A filter that no longer matches (stale, or too narrow) and a new deprecation in the
same path both fail here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from model_checks import ROOT

# what triggers each filtered warning: (the code, a fragment of the warning's text)
PATHS = {
    "torch_inductor_import": ("import torch._inductor.compile_fx", "torch.jit.script_method"),
    "peft_lora_wrap": (
        """
        import hf_ssm
        from hf_ssm.training.lm.finetuning import FinetuneSettings, add_lora
        from model_checks import tiny_config
        from hf_ssm import HybridSSMForCausalLM
        add_lora(HybridSSMForCausalLM(tiny_config("SA")), FinetuneSettings(model="unused", lora=True))
        """,
        "is_gradient_checkpointing",
    ),
}


def _run(code: str, filters: list[str]) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with every warning an error, then the pytest `filters` on top."""
    setup = "import warnings\nwarnings.simplefilter('error')\n"
    if filters:
        for spec in filters:
            action, message, category, module = spec.split(":")
            setup += f"warnings.filterwarnings({action!r}, {message!r}, {category}, {module!r})\n"
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    script = setup + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_filtered_warning_is_a_real_third_party_one_and_the_filters_silence_exactly_it(path, pytestconfig):
    """Without the filters the third-party path raises its deprecation warning (the filter is not stale); with them
    it runs with every other warning still an error (the filters hide nothing else on that path)."""
    code, fragment = PATHS[path]
    bare = _run(code, [])
    assert bare.returncode != 0 and fragment in bare.stderr, bare.stderr[-2000:]
    filtered = _run(code, pytestconfig.getini("filterwarnings"))  # pyproject.toml's
    assert filtered.returncode == 0, filtered.stderr[-2000:]


def test_hf_ssm_does_not_call_the_deprecated_checkpointing_property():
    """The package and scripts read `is_activation_checkpointing`, never the deprecated
    `is_gradient_checkpointing` (the filter above is for peft's own read of it only)."""
    files = [*sorted((ROOT / "hf_ssm").rglob("*.py")), *sorted((ROOT / "scripts").rglob("*.py"))]
    assert [p.name for p in files if "is_gradient_checkpointing" in p.read_text(encoding="utf-8")] == []
