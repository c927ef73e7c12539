#!/usr/bin/env bash
# The one device run on a CUDA machine (docs/gpu.md). Every step is time-boxed and logged; a step
# that fails (a peer that does not install, a JIT that does not build) is reported, never fatal.
#
#   scripts/gpu_check.sh [--quick] [OUTDIR]      (OUTDIR defaults to $OUT, else /tmp/specproof-gpu)
#
# 1. environment and versions; specproof installed from this checkout (or a wheel in .whl/);
# 2. peers: the slim site of scripts/gpu_peers.py (.peers/site, for a machine without a registry),
#    else pinned installs from the registry, each alone and without dependencies (a failure is
#    logged and that peer is skipped); then which peers load, with the reason for each that does not;
# 3. FlashInfer's sampling JIT built once, so no timing pays for it;
# 4. the coupled tests with compiled kernels (full-size vocabularies; the split paths);
# 5. chunk and warp sizes of the split token path (full run only);
# 6. the side by side: optimized.token / block / tree rules against FlashInfer, vLLM and SGLang on
#    the same inputs, fp32 and bf16, against the copy bandwidth measured in the same run;
# 7. `specproof conform` on the CUDA-only adapters and vLLM, and the engine audit when this build
#    has one.
# Budget: about 10 minutes (--quick: about 4). Files (at most 8, for the device tool): env.txt,
# steps.txt, tests.txt, tune.md, side-by-side.md, side-by-side.jsonl, conformance.md,
# conformance.json.
set -uo pipefail
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
out="${1:-${OUT:-/tmp/specproof-gpu}}"
mkdir -p "$out"
repo=$(pwd)
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 SPECPROOF_FULL_SIZE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
t_all=$(date +%s)

step() {  # step NAME SECONDS COMMAND...: run time-boxed, log to steps.txt, never fail the script
  local name=$1 secs=$2 start rc
  shift 2
  start=$(date +%s)
  echo "== $name (limit ${secs} s)" >>"$out/steps.txt"
  timeout --kill-after=10 "$secs" "$@" >>"$out/steps.txt" 2>&1
  rc=$?
  echo "== $name: exit $rc after $(($(date +%s) - start)) s$([ $rc = 124 ] && echo ' (time limit)')" \
    | tee -a "$out/steps.txt"
  return 0
}

# 1. environment, specproof
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version 2>/dev/null | tail -1
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  git -C "$repo" rev-parse --short HEAD 2>/dev/null | sed 's/^/specproof commit /'
  echo "mode: $([ $quick = 1 ] && echo quick || echo full)"
} | tee "$out/env.txt"
if ls "$repo"/.whl/specproof-*.whl >/dev/null 2>&1; then
  step install-specproof 60 python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/specproof-*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  step install-specproof 60 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e "$repo"
fi

# 2. peers (pins: scripts/gpu_peers.py)
if [ -d "$repo/.peers/site" ]; then
  echo "peers: the slim site .peers/site ($(tr '\n' ' ' <"$repo/.peers/site/PINS.txt"))" | tee -a "$out/env.txt"
  export PYTHONPATH="$repo/.peers/site${PYTHONPATH:+:$PYTHONPATH}"
else
  # one package per install, no dependencies (vLLM and SGLang would replace this machine's torch);
  # a machine without a registry fails each in seconds (--retries 0 --timeout 5)
  for pkg in flashinfer-python==0.7.4 apache-tvm-ffi==0.1.15.post2 vllm==0.33.0 sglang==0.5.23 sgl-kernel==0.3.21; do
    step "pip ${pkg}" 240 python3 -m pip install -q --no-deps --retries 0 --timeout 5 "$pkg"
  done
fi
cd /tmp || exit 1  # the checkout's specproof/ folder would shadow the installed package
step peers 120 python3 - <<'EOF'
import importlib.metadata as md
from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability
for dist in ("flashinfer-python", "apache-tvm-ffi", "vllm", "sglang", "sgl-kernel"):
    try:
        print(f"{dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"{dist} not installed")
for a in ADAPTERS:
    if a.module in ("flashinfer", "sglang_cuda", "vllm", "sglang"):
        ok, why = availability(a)
        print(f"adapter {a.module}: {'available' if ok else 'unavailable: ' + why}")
EOF
grep -E "^(flashinfer-python|apache-tvm-ffi|vllm|sglang|sgl-kernel|adapter) " "$out/steps.txt" >>"$out/env.txt"

# 3. FlashInfer's sampling module (JIT) built once, outside every timing
step flashinfer-jit "$([ $quick = 1 ] && echo 150 || echo 200)" python3 -c \
  "import flashinfer.sampling as s; s.get_sampling_module(); print('flashinfer sampling module ready')"

# 4. coupled tests, compiled kernels
filter=${TEST_FILTER:-$([ $quick = 1 ] && echo split || echo "")}
start=$(date +%s)
timeout --kill-after=10 "$([ $quick = 1 ] && echo 75 || echo 150)" python3 -m pytest \
  "$repo/tests/test_optimized_coupled.py" "$repo/tests/test_optimized_tree.py" "$repo/tests/test_optimized_buffers.py" \
  -q -n 12 -p no:cacheprovider ${filter:+-k "$filter"} >"$out/tests.txt" 2>&1
echo "== tests: exit $? after $(($(date +%s) - start)) s" | tee -a "$out/steps.txt"
tail -5 "$out/tests.txt"

# 5. chunk / warp sizes of the split token path
if [ $quick = 0 ]; then
  step tune 60 python3 "$repo/scripts/gpu_tune.py" "$out/tune.md"
fi

# 6. side by side (each row appended to the .jsonl as measured, so a time limit keeps the rows done)
step side-by-side "$([ $quick = 1 ] && echo 90 || echo 200)" python3 -m specproof.properties.bench.peers \
  $([ $quick = 1 ] && echo --quick) --seconds "$([ $quick = 1 ] && echo 0.1 || echo 0.15)" \
  --markdown "$out/side-by-side.md" --jsonl "$out/side-by-side.jsonl"

# 7. conformance of the CUDA-only adapters and vLLM (compiled), then the engine audit if present
names=$(python3 - <<'EOF'
import importlib
from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability
names = []
for a in ADAPTERS:
    if a.module in ("flashinfer", "sglang_cuda", "vllm") and availability(a)[0]:
        names += [b["name"] for b in importlib.import_module(f"specproof.properties.conformance.backends.thirdparty.{a.module}").backends()]
print(" ".join(names))
EOF
)
if [ -n "$names" ]; then
  # shellcheck disable=SC2086  # one argument per backend name
  step conform "$([ $quick = 1 ] && echo 75 || echo 170)" python3 -m specproof.properties.cli conform $names \
    --budget-seconds "${CONFORM_SECONDS:-$([ $quick = 1 ] && echo 3 || echo 8)}" --shrink-seconds 5 \
    --markdown "$out/conformance.md" --json "$out/conformance.json"
else
  echo "== conform: no CUDA-only adapter nor vLLM loads here (see env.txt)" | tee -a "$out/steps.txt"
fi
# the engine audit of every CUDA engine that loads (vLLM's, SGLang's); ENGINE_AUDIT_CMD overrides
if python3 -m specproof.properties.cli audit --help 2>/dev/null | grep -q -- "--engine-group"; then
  step engine-audit "$([ $quick = 1 ] && echo 45 || echo 90)" bash -c "${ENGINE_AUDIT_CMD:-python3 -m specproof.properties.cli \
    audit engine --engine-group vllm --engine-group sglang --budget-seconds $([ $quick = 1 ] && echo 20 || echo 40)}"
else
  echo "== engine audit: not in this build of specproof" | tee -a "$out/steps.txt"
fi
echo "total: $(($(date +%s) - t_all)) s" | tee -a "$out/env.txt"
grep "^== .*: exit" "$out/steps.txt"
exit 0
