#!/usr/bin/env bash
# GPU check: one prepared run on the GPU machine, planned to end inside one 10-minute call (every step has its own
# time limit and the whole run a deadline, GPU_CHECK_DEADLINE = 540 s, after which no step starts).
#
# Expected stack (the GPU image; checked first, failing in seconds on another one): Python 3.12, torch 2.11 built for
# CUDA 13, Triton 3.6, and transformers >= 5.24. The image's transformers is 5.17, under which `import hf_ssm` fails,
# so the run carries transformers 5.25 and the closure of its dependencies as wheels (scripts/gpu_wheels.txt; fetch
# them here with `bash scripts/gpu_wheels.sh` into .whl/, about 32 MiB, and name `.whl` in the run's carry); step 0
# installs them with `pip install --no-index --no-deps --target` into GPU_CHECK_SITE, first on PYTHONPATH.
#
#   0. stack: install the carried wheels, check the versions above (GPU_CHECK_ANY_STACK=1: warn and go on);
#   1. preflight: nvidia-smi, torch sees CUDA, the Triton kernels import compiled (not the CPU interpreter);
#   2. the kernel tests on CUDA, compiled by Triton, in GPU_CHECK_TEST_WORKERS (8) pytest-xdist processes (Triton's
#      compilation, on the CPU, is most of their time), including the model-level Triton == torch tests in
#      tests/ops/test_scan_backends.py and every other test module that imports hf_ssm.ops.kernels;
#   3. benchmarks/bench_kernels.py at the acceptance point (B=8, T=4096, H=8, N=64, m=4), every family, the PD-SSM
#      mixer in dictionary mode and, where this version's config has it, bank mode;
#   4. the compiled form on the device: every kernel variant compiled for the GPU's own architecture (in
#      GPU_CHECK_TEST_WORKERS processes) and loaded: registers / spills / shared memory / occupancy, the driver's
#      register count against ptxas's (python -m hf_ssm.ops.compile_check --loaded).
# A failing step does not stop the later ones (0 and 1 do: nothing after them could run). Output: the whole log on
# stdout; with $OUT set, each step writes there as it goes: gpu_check.log, steps.tsv (step, status, seconds),
# stack.json, pytest_kernels.xml, bench_kernels.json, kernel_resources.json and .md. Exit status: 0 when every step
# passed, else the first failing step's (124: a step ran past its limit).
#
# Rehearsal on a CPU (GPU_CHECK_REHEARSAL=1, in an environment of the expected stack): the same steps with the
# kernels in the Triton interpreter (TRITON_INTERPRET=1), no nvidia-smi, step 3 as bench_kernels.py --cpu_sanity
# (every family once at a tiny shape, checked against torch) and step 4 cross-compiling for sm_90 without loading.
#
#   bash scripts/gpu_check.sh                       # from anywhere; runs from the repository root
#   OUT=/tmp/gpu bash scripts/gpu_check.sh
#   GPU_CHECK_REHEARSAL=1 PYTHON=/path/to/python3.12 OUT=/tmp/rehearsal bash scripts/gpu_check.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO="$PWD"
PYTHON="${PYTHON:-python3}"
REHEARSAL="${GPU_CHECK_REHEARSAL:-0}"
SITE="${GPU_CHECK_SITE:-/tmp/hf_ssm_gpu_site}"
DEADLINE="${GPU_CHECK_DEADLINE:-540}"               # seconds from the start; no step runs past it
STACK_TIMEOUT="${GPU_CHECK_STACK_TIMEOUT:-60}"      # step 0 (wheel install and version checks)
PREFLIGHT_TIMEOUT="${GPU_CHECK_PREFLIGHT_TIMEOUT:-45}"
TEST_TIMEOUT="${GPU_CHECK_TEST_TIMEOUT:-230}"       # step 2
BENCH_TIMEOUT="${GPU_CHECK_BENCH_TIMEOUT:-150}"     # step 3
COMPILE_TIMEOUT="${GPU_CHECK_COMPILE_TIMEOUT:-75}"  # step 4
WORKERS="${GPU_CHECK_TEST_WORKERS:-8}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHON REHEARSAL SITE OUT
if [[ "$REHEARSAL" == 1 ]]; then
    export TRITON_INTERPRET=1  # the kernels run in the interpreter on the CPU
else
    unset TRITON_INTERPRET  # real compilation, never the interpreter
fi

if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    exec > >(tee "$OUT/gpu_check.log") 2>&1
    printf 'step\tstatus\tseconds\n' >"$OUT/steps.tsv"
fi

say() { printf '\n=== %s [%s, %ss elapsed]\n' "$1" "$(date -u +%H:%M:%S)" "$SECONDS"; }
fail() { printf 'gpu_check: FAILED: %s\n' "$1" >&2; exit "${2:-1}"; }
first_failure=0

# step NAME LIMIT COMMAND...: run COMMAND under min(LIMIT, the time left before the deadline); record its status
step() {
    local name="$1" limit="$2" start=$SECONDS status=0
    shift 2
    local left=$((DEADLINE - SECONDS))
    if ((left < limit)); then limit=$left; fi
    if ((limit < 5)); then
        status=124
        printf 'gpu_check: %s not run: the %ss deadline (GPU_CHECK_DEADLINE) is reached\n' "$name" "$DEADLINE" >&2
    else
        timeout "$limit" "$@" || status=$?
    fi
    [[ -n "${OUT:-}" ]] && printf '%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" >>"$OUT/steps.tsv"
    if ((status == 124)); then
        printf 'gpu_check: %s ran past its %ss limit\n' "$name" "$limit" >&2
    elif ((status != 0)); then
        printf 'gpu_check: %s failed (exit status %s)\n' "$name" "$status" >&2
    fi
    if ((status != 0 && first_failure == 0)); then first_failure=$status; fi
    return 0
}

say "0. stack (expected: Python 3.12, torch 2.11 + CUDA 13, Triton 3.6, transformers >= 5.24)"
install_wheels() {
    set -euo pipefail
    if compgen -G ".whl/*.whl" >/dev/null; then
        printf 'carried: %s wheels, %s bytes\n' "$(ls .whl/*.whl | wc -l)" "$(cat .whl/*.whl | wc -c)"
        rm -rf "$SITE"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            .whl/*.whl
    else
        printf 'no .whl/ carried: using the environment'"'"'s own transformers\n'
    fi
    "$PYTHON" scripts/gpu_stack.py --rehearsal "$REHEARSAL" ${OUT:+--out "$OUT/stack.json"}
}
export -f install_wheels
step "0-stack" "$STACK_TIMEOUT" bash -c install_wheels
((first_failure == 0)) || fail "the stack is not the expected one (see above); nothing else can run" "$first_failure"

say "1. preflight"
preflight() {
    set -euo pipefail
    if [[ "$REHEARSAL" != 1 ]]; then
        command -v nvidia-smi >/dev/null 2>&1 || { echo "nvidia-smi not found: this script needs a CUDA machine"; return 1; }
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || return 1
    fi
    "$PYTHON" - "$REHEARSAL" <<'EOF'
import sys

import torch

rehearsal = sys.argv[1] == "1"
from hf_ssm.ops import kernels

if not kernels.AVAILABLE:
    sys.exit(f"hf_ssm.ops.kernels unavailable: {kernels.UNAVAILABLE_REASON}")
if rehearsal:
    if not kernels.INTERPRET:
        sys.exit("rehearsal: the kernels were compiled, not interpreted (TRITON_INTERPRET=1 did not reach triton)")
    device = "cpu"
else:
    if not torch.cuda.is_available():
        sys.exit("torch.cuda.is_available() is False (CPU-only torch build, or no visible GPU)")
    if kernels.INTERPRET:
        sys.exit("the kernels were defined in the Triton interpreter (TRITON_INTERPRET=1 leaked into this process)")
    device = "cuda"
ok, why = kernels.can_run(device)
if not ok:
    sys.exit(f"kernels.can_run({device!r}): {why}")
name = torch.cuda.get_device_name() if device == "cuda" else "CPU, Triton interpreter (rehearsal)"
print(f"kernels run on {device}: {name}")
EOF
}
export -f preflight
step "1-preflight" "$PREFLIGHT_TIMEOUT" bash -c preflight
((first_failure == 0)) || fail "preflight: torch / Triton cannot run the kernels on this machine" "$first_failure"

say "2. kernel tests (pytest -m triton tests)"
# the kernel tests carry the registered `triton` mark (tests/op_checks.py), wherever they live under tests/; not here:
# the sm_90 cross-compilation tests (*for_sm90*: step 4 compiles for the device itself) and the interpreter sanity pass
tests_args=(-q -p no:cacheprovider --durations=15 -m triton -k "not for_sm90 and not cpu_sanity")
[[ -n "${OUT:-}" ]] && tests_args+=(--junitxml "$OUT/pytest_kernels.xml")
if "$PYTHON" -c "import xdist" 2>/dev/null && ((WORKERS > 1)); then tests_args+=(-n "$WORKERS"); fi
step "2-tests" "$TEST_TIMEOUT" "$PYTHON" -m pytest "${tests_args[@]}" tests

say "3. bench_kernels.py"
bench_args=(--batch 8 --steps 4096 --heads 8 --state 64 --blocks 4 --repeats 10 --warmup 3)
[[ "$REHEARSAL" == 1 ]] && bench_args=(--cpu_sanity)
[[ -n "${OUT:-}" ]] && bench_args+=(--out "$OUT/bench_kernels.json")
step "3-bench" "$BENCH_TIMEOUT" "$PYTHON" benchmarks/bench_kernels.py "${bench_args[@]}"

say "4. the compiled form (compile_check: registers, spills, shared memory, occupancy)"
compile_args=(--jobs "$WORKERS")
[[ "$REHEARSAL" != 1 ]] && compile_args+=(--loaded --arch "$("$PYTHON" -c 'import torch; a, b = torch.cuda.get_device_capability(); print(10 * a + b)')")
[[ -n "${OUT:-}" ]] && compile_args+=(--json "$OUT/kernel_resources.json" --markdown "$OUT/kernel_resources.md")
step "4-compiled-form" "$COMPILE_TIMEOUT" env -u TRITON_INTERPRET "$PYTHON" -m hf_ssm.ops.compile_check "${compile_args[@]}"

if ((first_failure != 0)); then
    say "gpu_check: FAILED (first failing status $first_failure; steps.tsv has every step)"
    exit "$first_failure"
fi
say "gpu_check: all steps passed"
