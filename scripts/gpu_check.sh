#!/usr/bin/env bash
# One device run on a CUDA machine: the optimized engine's coupled tests with compiled kernels
# at full size (SPECPROOF_FULL_SIZE=1: V up to 152,064), then `specproof bench --section gpu`
# (bandwidth against the byte floor and the copy bandwidth measured in the same run).
# Usage: scripts/gpu_check.sh [OUTDIR]   (expects a wheel of this tree in .whl/, see README)
set -uo pipefail
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 SPECPROOF_FULL_SIZE=1
out="${1:-${OUT:-/tmp/specproof-gpu}}"
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"
} | tee "$out/env.txt"
if ls .whl/specproof-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
else
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
fi
repo=$(pwd)
cd /tmp  # the checkout's specproof/ folder would shadow the installed package
timeout 120 python3 "$repo/scripts/gpu_tune.py" "$out/tune.md" 2>&1 | tail -25
timeout 200 python3 -m specproof.properties.cli bench --section gpu \
  --markdown "$out/bench-gpu.md" --json "$out/bench-gpu.json" 2>&1 | tee "$out/bench.txt"
start=$(date +%s)
timeout "${TEST_SECONDS:-300}" python3 -m pytest "$repo/tests/test_optimized_coupled.py" \
  "$repo/tests/test_optimized_tree.py" "$repo/tests/test_optimized_buffers.py" -q -n 12 -p no:cacheprovider \
  ${TEST_FILTER:+-k "$TEST_FILTER"} 2>&1 | tee "$out/tests.txt" | tail -40
echo "tests: $(( $(date +%s) - start )) s" | tee -a "$out/env.txt"
