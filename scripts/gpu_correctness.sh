#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_correctness.sh — one device call for correctness: the Python GPU suites (shape sweep, semantics, the CUDA
# tests, plans in production: CTA counts and sm_margin; varlen, padding and transformers), the kernels' GoogleTest suites, compute-sanitizer memcheck over the sweep's memcheck sample and racecheck
# on two small backward and three forward cases, and optionally the 1M-token test. Logs go to $OUT (or out/); the last lines printed are a summary.
#
#   scripts/gpu_correctness.sh [--build-dir DIR] [--long] [--no-sanitize] [--no-gtest] [--sweep sample|full]
#
# The build directory is the one scripts/build.sh makes (carry it to the GPU machine: libdash_attn.so and the
# test binaries built on a development machine with nvcc run there; only libcudart.so.13 is needed).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
build="$root/build"
long=0
sanitize=1
gtest=1
sweep=sample
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --long) long=1; shift ;;
    --no-sanitize) sanitize=0; shift ;;
    --no-gtest) gtest=0; shift ;;
    --sweep) sweep="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
export DASH_ATTN_LIBRARY="$build/libdash_attn.so" PYTHONPATH="$root/python" PYTHONUNBUFFERED=1
# libcudart.so.13: the toolkit's, or the one PyTorch's wheels bring.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
# The test binaries find libdash_attn.so through their RUNPATH, the build directory where they were linked; a build
# carried to another path (unpacked under /tmp) needs its own directory searched first.
export LD_LIBRARY_PATH="$(cd "$build" && pwd):$LD_LIBRARY_PATH"
summary=()
step() {  # step NAME TIMEOUT_S COMMAND...: runs it, logs to $out/NAME.log, records pass/fail and seconds
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(tail -1 "$out/$name.log" | cut -c1-90)")")
  echo "== $name: rc=$rc in $((SECONDS - t0)) s"; tail -4 "$out/$name.log"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
# The commit under test: DASH_COMMIT if given (the device tool's copy of the tree may carry a stale .git).
echo "${DASH_COMMIT:-unknown: set DASH_COMMIT}" | tee "$out/commit.txt"

cd "$root/python"
step single-key 120 python3 "$root/scripts/single_key_gradients.py" --out "$out/single-key-gradients.jsonl"
step sweep-cuda 300 python3 -m pytest -q -rs --durations=5 tests/test_shape_sweep.py -k cuda --sweep "$sweep"
step semantics 200 python3 -m pytest -q -rs tests/test_semantics.py tests/test_torch_cuda.py
step production 300 python3 -m pytest -q -rs --durations=3 tests/test_plans_in_production.py
step varlen 300 python3 -m pytest -q -rs --durations=3 tests/test_varlen.py tests/test_padding_and_transformers.py -k cuda
if [ "$long" = 1 ]; then
  step long-1m 300 python3 -m pytest -q -rs --durations=3 tests/test_semantics.py -k million --long
fi
if [ "$sanitize" = 1 ]; then
  step memcheck-sweep 300 compute-sanitizer --tool memcheck --print-limit 10 \
    python3 -m pytest -q -x tests/test_shape_sweep.py -k cuda --sweep memcheck
  grep -E "ERROR SUMMARY" "$out/memcheck-sweep.log" | tail -1
  # racecheck (shared-memory hazards) on small backward cases, one per head dim, and one with several visits per
  # segment (stages reused within a segment: what the 113 x 113 cases never do).
  race='Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d64_causal_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d128_causal_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq300_sk64_d64_full_auto_det'
  step racecheck-bwd 300 compute-sanitizer --tool racecheck --racecheck-report hazard \
    "$build/tests/gpu/dash_gpu_bwd_tests" --gtest_filter="$race"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$out/racecheck-bwd.log" | tail -1
  # ... and on three forward cases: the persistent grid taking several tiles per CTA at both head dims, and Q tiles
  # that see no key (announced without a load).
  race='Cases/ForwardAccuracy.MatchesReference/Persistent_777x1200_causal_d128_bf16:Cases/ForwardAccuracy.MatchesReference/Persistent_1500x300_causal_d64_bf16:Cases/ForwardAccuracy.MatchesReference/Cross_1000x1_causal_d128_fp16'
  step racecheck-fwd 300 compute-sanitizer --tool racecheck --racecheck-report hazard \
    "$build/tests/gpu/dash_gpu_tests" --gtest_filter="$race"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$out/racecheck-fwd.log" | tail -1
fi
if [ "$sanitize" = 1 ]; then
  # Varlen packs: memcheck over the small packs, racecheck on a forward and a backward pack.
  step memcheck-varlen 300 compute-sanitizer --tool memcheck --print-limit 10 "$build/tests/gpu/dash_gpu_varlen_tests" \
    --gtest_filter='Packs/*mix*:Packs/*uneven*:Packs/*no_keys*:Packs/*window*:VarlenGpuArguments*'
  step racecheck-varlen 300 compute-sanitizer --tool racecheck --racecheck-report hazard \
    "$build/tests/gpu/dash_gpu_varlen_tests" \
    --gtest_filter='Packs/VarlenGpu.ForwardMatchesFloat64/uneven*:Packs/VarlenGpu.BackwardMatchesFloat64AndRepeatsBitwise/uneven_d64_full'
fi
if [ "$gtest" = 1 ]; then
  step gtest-forward 200 "$build/tests/gpu/dash_gpu_tests"
  step gtest-backward 300 "$build/tests/gpu/dash_gpu_bwd_tests"
  step gtest-varlen 300 "$build/tests/gpu/dash_gpu_varlen_tests"
fi
echo
echo "== summary ($(cat "$out/commit.txt" 2>/dev/null))"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
