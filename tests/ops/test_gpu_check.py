"""The prepared GPU run (scripts/gpu_check.sh, its stack check scripts/gpu_stack.py, the wheels it carries): the
stack check accepts the GPU image's stack and refuses another one naming what differs, the script parses and keeps
its real path and its rehearsal, and the carried wheels are pinned, one version each, with transformers >= 5.24.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess

from model_checks import ROOT

SCRIPTS = ROOT / "scripts"


def _gpu_stack():
    spec = importlib.util.spec_from_file_location("gpu_stack", SCRIPTS / "gpu_stack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


IMAGE = {  # the GPU image with the carried transformers
    "python": "3.12.3", "torch": "2.11.0+cu130", "torch_cuda": "13.0", "triton": "3.6.0",
    "transformers": "5.25.0", "transformers_from": "/tmp/site/transformers",
}  # fmt: skip


def test_the_stack_check_accepts_the_image_and_refuses_another_stack():
    """The image's versions (with transformers 5.25 carried) pass; a different torch, Triton, CUDA or Python, or the
    image's own transformers 5.17, are each named with the version expected."""
    stack = _gpu_stack()
    assert stack.differences(IMAGE) == []
    for key, value in [("torch", "2.12.0+cu130"), ("triton", "3.9.0"), ("torch_cuda", "12.8"), ("python", "3.11.7")]:
        (problem,) = stack.differences({**IMAGE, key: value})
        assert problem.startswith(f"{key} {value} (expected {stack.EXPECTED[key]}.x)")
    (problem,) = stack.differences({**IMAGE, "transformers": "5.17.0"})
    assert "hf_ssm needs >= 5.24" in problem and "gpu_wheels.sh" in problem
    assert stack.differences({**IMAGE, "torch": "2.11.1"}) == []  # a patch release of the same minor


def test_the_script_parses_and_keeps_both_paths():
    """bash accepts scripts/gpu_check.sh and scripts/gpu_wheels.sh; the check runs the stack check first, the kernel
    tests, the benchmark and compile_check --loaded on a GPU, and the interpreter (TRITON_INTERPRET=1) with
    bench_kernels.py --cpu_sanity only in its rehearsal."""
    for name in ("gpu_check.sh", "gpu_wheels.sh"):
        result = subprocess.run(["bash", "-n", str(SCRIPTS / name)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    text = (SCRIPTS / "gpu_check.sh").read_text()
    commands = (
        "scripts/gpu_stack.py --rehearsal",
        '-m pytest "${tests_args[@]}"',
        'benchmarks/bench_kernels.py "${bench_args[@]}"',
        '-m hf_ssm.ops.compile_check "${compile_args',
    )
    order = [text.index(c) for c in commands]
    assert order == sorted(order)
    assert re.search(r'if \[\[ "\$REHEARSAL" == 1 \]\]; then\n\s+export TRITON_INTERPRET=1', text)
    assert '[[ "$REHEARSAL" == 1 ]] && bench_args=(--cpu_sanity)' in text
    assert '[[ "$REHEARSAL" != 1 ]] && compile_args+=(--loaded' in text


def test_the_carried_wheels_are_pinned_once_each():
    """scripts/gpu_wheels.txt pins every wheel to one exact version, names each package once, carries transformers
    >= 5.24 and the huggingface_hub it needs, and leaves numpy, torch and triton to the image."""
    lines = [line for line in (SCRIPTS / "gpu_wheels.txt").read_text().splitlines() if line and line[0] != "#"]
    pins = dict(line.split("==") for line in lines)
    assert len(pins) == len(lines) and all(re.fullmatch(r"[\w.-]+==[\w.]+", line) for line in lines)
    names = {re.sub(r"[-_.]+", "-", name).lower() for name in pins}
    assert len(names) == len(pins) and not names & {"numpy", "torch", "triton"}
    assert tuple(int(x) for x in pins["transformers"].split(".")[:2]) >= (5, 24)
    assert "huggingface-hub" in names and "httpx2" in names
