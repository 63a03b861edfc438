#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_bwd_check.sh — one device call for the backward kernel: build (unless a carried build is given), GPU
# tests, compute-sanitizer memcheck/racecheck on small shapes, and the benchmark. Logs and JSON go to $OUT.
#
#   scripts/gpu_bwd_check.sh [--build-dir DIR] [--no-build] [--bench quick|full|none] [--busy-ms N]
#                            [--sanitize yes|no] [--tests FILTER] [--torch yes|no] [--kernel default|mma|wgmma]
#
# --kernel default (the default): DASH_BWD_KERNEL unset, i.e. the TMA + wgmma kernel for both head dims.
#   --kernel mma: DASH_BWD_KERNEL=mma (the mma.sync kernel for both; logs and JSON carry a -mma suffix).
#   --kernel wgmma: DASH_BWD_KERNEL=wgmma (the default kernel, asked for by name; suffix -wgmma).
# One small test per head dim runs first under a short timeout: a hang (which the wgmma kernel's watchdog turns
# into an error after ~17 s) costs a minute, not five, and is then located with memcheck.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
build="$root/build-bwd"
do_build=1
bench=quick
busy_ms=200
sanitize=yes
tests='*'
torch_ref=yes
kernel=default
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --bench) bench="$2"; shift 2 ;;
    --busy-ms) busy_ms="$2"; shift 2 ;;
    --sanitize) sanitize="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --torch) torch_ref="$2"; shift 2 ;;
    --kernel) kernel="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
sfx=""
case "$kernel" in
  default) unset DASH_BWD_KERNEL ;;
  mma) export DASH_BWD_KERNEL=mma; sfx="-mma"; torch_ref=no ;;
  wgmma) export DASH_BWD_KERNEL=wgmma; sfx="-wgmma"; torch_ref=no ;;
  *) echo "unknown --kernel $kernel (default, mma or wgmma)"; exit 2 ;;
esac
echo "kernel=$kernel build=$build DASH_BWD_KERNEL=${DASH_BWD_KERNEL:-<unset>}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
if [ "$do_build" = 1 ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDASH_CUTLASS_INCLUDE_DIR="$root/.deps/cutlass/cutlass_library/source/include" >"$out/cmake$sfx.log" 2>&1 || { tail -30 "$out/cmake$sfx.log"; exit 1; }
  ninja -C "$build" -j16 dash_attn dash_gpu_bwd_tests dash-bench-bwd >"$out/build$sfx.log" 2>&1 || { grep -E "error" "$out/build$sfx.log" | head -30; exit 1; }
  echo "== ptxas (backward main kernels: registers / spills)"
  grep -A2 -E "Compiling entry function '.*(bwd_wgmma_main|bwd_main)" "$out/build$sfx.log" | grep -E "Compiling|spill" | head -12
fi
tests_bin="$build/tests/gpu/dash_gpu_bwd_tests"

# One small case first: a hang (the most likely first-run failure of a new pipeline) costs a minute, not five.
echo "== smoke"
smoke='Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq127_sk129_d128_full_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d64_causal_auto_det'
timeout 60 "$tests_bin" --gtest_filter="$smoke" >"$out/smoke$sfx.log" 2>&1
rc=$?
echo "smoke rc=$rc (124 = timed out: a hang)"; tail -15 "$out/smoke$sfx.log"
if [ "$rc" != 0 ]; then
  # The kernel's watchdog (wg_wait) turns a hang into a write to 256 x (site + 1): memcheck names the site,
  # the block and the thread.
  echo "smoke failed: rerunning it under memcheck to locate the wait, then stopping"
  timeout 150 compute-sanitizer --tool memcheck --print-limit 8 "$tests_bin" --gtest_filter="$smoke" \
    >"$out/smoke-memcheck$sfx.log" 2>&1
  grep -E -A3 "Invalid __global__|ERROR SUMMARY|error" "$out/smoke-memcheck$sfx.log" | head -40
  exit 1
fi

echo "== tests"
timeout 300 "$tests_bin" --gtest_filter="$tests" >"$out/tests$sfx.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" "$out/tests$sfx.log" | tail -40

if [ "$sanitize" = yes ]; then
  small='Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d64_causal_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq127_sk129_d128_full_auto_det:Shapes/BackwardAccuracy.MatchesReference/b1_h8_2_sq200_sk200_d128_causal_auto_det'
  race='Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d64_causal_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d128_causal_auto_det'
  echo "== memcheck"
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests_bin" --gtest_filter="$small" >"$out/memcheck$sfx.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck$sfx.log" | tail -5
  echo "== racecheck"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$tests_bin" \
    --gtest_filter="$race" >"$out/racecheck$sfx.log" 2>&1
  echo "racecheck rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$out/racecheck$sfx.log" | tail -5
fi

if [ "$bench" != none ]; then
  echo "== bench ($bench)"
  args=(--out "$out/backward$sfx.jsonl" --commit "${DASH_COMMIT:-unknown}$sfx" --busy-ms "$busy_ms")
  [ "$bench" = quick ] && args+=(--quick)
  timeout 400 "$build/bench/dash-bench-bwd" "${args[@]}" >"$out/bench$sfx.log" 2>&1
  echo "bench rc=$?"
  cut -c1-120 "$out/bench$sfx.log"
fi

if [ "${torch_ref:-yes}" = yes ] && python3 -c "import torch" 2>/dev/null; then
  echo "== torch references (same device call)"
  PYTHONUNBUFFERED=1 timeout "${DASH_TORCH_TIMEOUT:-240}" python3 "$root/bench/bench_backward_torch.py" --out "$out/torch_backward.jsonl" --flex \
    >"$out/torch.log" 2>&1
  echo "torch rc=$?"
  cat "$out/torch.log" | grep -v Warning | tail -40
fi
