#!/usr/bin/env bash
# GPU check, one prepared run on a CUDA machine (budget: under 8 minutes on one H200):
#   1. preflight: nvidia-smi, torch sees CUDA, the Triton kernels import compiled (not the CPU interpreter);
#   2. the kernel tests on CUDA, compiled by Triton (TRITON_INTERPRET unset: tests/conftest.py sets it only when
#      torch sees no CUDA device), including the model-level Triton == torch tests in tests/ops/test_scan_backends.py and
#      every other test module that imports hf_ssm.kernels;
#   3. benchmarks/bench_kernels.py at the acceptance point (B=8, T=4096, H=8, N=64, m=4), every family, the PD-SSM
#      mixer in dictionary mode and, where this version's config has it, bank mode (pd_ssm_transition="bank";
#      the bench marks the row skipped otherwise).
# Output: the whole log on stdout; with $OUT set, also $OUT/gpu_check.log, $OUT/bench_kernels.json and
# $OUT/pytest_kernels.xml. Exit status: 0 when every step passed, else the first failing step's status.
#
#   bash scripts/gpu_check.sh            # from anywhere; runs from the repository root
#   OUT=/tmp/gpu bash scripts/gpu_check.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET  # real compilation, never the interpreter
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PYTHON="${PYTHON:-python}"
TEST_TIMEOUT="${GPU_CHECK_TEST_TIMEOUT:-270}"    # seconds for step 2
BENCH_TIMEOUT="${GPU_CHECK_BENCH_TIMEOUT:-150}"  # seconds for step 3

if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    exec > >(tee "$OUT/gpu_check.log") 2>&1
fi

say() { printf '\n=== %s [%s, %ss elapsed]\n' "$1" "$(date -u +%H:%M:%S)" "$SECONDS"; }
fail() { printf 'gpu_check: FAILED: %s\n' "$1" >&2; exit "${2:-1}"; }

say "1. preflight"
command -v nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi not found: this script needs a CUDA machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || fail "nvidia-smi cannot query a GPU"
"$PYTHON" - <<'EOF' || fail "preflight: torch / Triton cannot run the kernels compiled on this machine"
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False (CPU-only torch build, or no visible GPU)")
from hf_ssm import kernels

if not kernels.AVAILABLE:
    sys.exit(f"hf_ssm.kernels unavailable: {kernels.UNAVAILABLE_REASON}")
if kernels.INTERPRET:
    sys.exit("the kernels were defined in the Triton interpreter (TRITON_INTERPRET=1 leaked into this process)")
ok, why = kernels.can_run("cuda")
if not ok:
    sys.exit(f"kernels.can_run('cuda'): {why}")
import triton

print(f"torch {torch.__version__}, triton {triton.__version__}, device {torch.cuda.get_device_name()}")
EOF

say "2. kernel tests on CUDA (compiled)"
# the kernel tests carry the registered `triton` mark (tests/op_checks.py), wherever they live under tests/
printf 'tests: pytest -m triton tests\n'
# not here: the sm_90 cross-compilation check and the interpreter sanity pass (both exist for CPU-only machines)
junit=()
[[ -n "${OUT:-}" ]] && junit=(--junitxml "$OUT/pytest_kernels.xml")
status=0
timeout "$TEST_TIMEOUT" "$PYTHON" -m pytest -q -p no:cacheprovider --durations=10 "${junit[@]}" \
    -m triton -k "not compiles_for_sm90 and not cpu_sanity" tests || status=$?
if [[ $status -eq 124 ]]; then
    fail "the kernel tests ran past ${TEST_TIMEOUT}s (GPU_CHECK_TEST_TIMEOUT)" 124
elif [[ $status -ne 0 ]]; then
    fail "kernel tests (pytest exit status $status)" "$status"
fi

say "3. bench_kernels.py (acceptance point, every family)"
bench_out=()
[[ -n "${OUT:-}" ]] && bench_out=(--out "$OUT/bench_kernels.json")
status=0
timeout "$BENCH_TIMEOUT" "$PYTHON" benchmarks/bench_kernels.py --batch 8 --steps 4096 --heads 8 --state 64 \
    --blocks 4 --repeats 10 --warmup 3 "${bench_out[@]}" || status=$?
if [[ $status -eq 124 ]]; then
    fail "bench_kernels.py ran past ${BENCH_TIMEOUT}s (GPU_CHECK_BENCH_TIMEOUT)" 124
elif [[ $status -ne 0 ]]; then
    fail "bench_kernels.py (exit status $status)" "$status"
fi

say "gpu_check: all steps passed"
