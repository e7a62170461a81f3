#!/usr/bin/env bash
# Fetch the wheels that scripts/gpu_check.sh carries to the GPU machine (scripts/gpu_wheels.txt says which and why)
# into .whl/ at the repository root (ignored by git), for CPython 3.12 on manylinux x86_64, whatever Python runs this.
# Run it here, where PyPI is reachable; the GPU machine reaches nothing. Fails when the wheels come to more than
# GPU_WHEELS_MAX_MIB (default 40: a run carries at most 64 MiB, the repository itself about 5).
#
#   bash scripts/gpu_wheels.sh     # then carry .whl with the run: bash scripts/gpu_check.sh installs it first
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python}"
MAX_MIB="${GPU_WHEELS_MAX_MIB:-40}"

rm -rf .whl
mkdir .whl
# --no-deps: the list is the whole closure already, pinned; the tags name every manylinux level a wheel may carry
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl -r scripts/gpu_wheels.txt
count=$(find .whl -type f -name '*.whl' | wc -l)
bytes=$(find .whl -type f -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
printf 'gpu_wheels: %s wheels, %s bytes (%.1f MiB) in .whl/\n' "$count" "$bytes" "$(echo "$bytes / 1048576" | bc -l)"
if (( bytes > MAX_MIB * 1048576 )); then
    echo "gpu_wheels: over GPU_WHEELS_MAX_MIB = $MAX_MIB MiB: the run could not carry them with the repository" >&2
    exit 1
fi
