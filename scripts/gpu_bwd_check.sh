#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_bwd_check.sh — one device call for the backward kernel: build (unless a carried build is given), GPU
# tests, compute-sanitizer memcheck/racecheck on small shapes, and the benchmark. Logs and JSON go to $OUT.
#
#   scripts/gpu_bwd_check.sh [--build-dir DIR] [--no-build] [--bench quick|full|none] [--busy-ms N]
#                            [--sanitize yes|no] [--tests FILTER] [--torch yes|no]
#
# One small test per head dim runs first under a short timeout: a hang costs a minute, not five (the kernel's
# watchdog ends a wait only after ~9 minutes), and is then located with memcheck.
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
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --bench) bench="$2"; shift 2 ;;
    --busy-ms) busy_ms="$2"; shift 2 ;;
    --sanitize) sanitize="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --torch) torch_ref="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
echo "build=$build"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
if [ "$do_build" = 1 ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDASH_CUTLASS_INCLUDE_DIR="$root/.deps/cutlass/cutlass_library/source/include" >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
  ninja -C "$build" -j16 dash_attn dash_gpu_bwd_tests dash-bench-bwd >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
  echo "== ptxas (backward main kernels: registers / spills)"
  grep -A2 -E "Compiling entry function '.*backward_kernel" "$out/build.log" | grep -E "Compiling|spill" | head -12
fi
tests_bin="$build/tests/gpu/dash_gpu_bwd_tests"

# One small case first: a hang (the most likely first-run failure of a new pipeline) costs a minute, not five.
echo "== smoke"
smoke='Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq127_sk129_d128_full_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d64_causal_auto_det'
timeout 60 "$tests_bin" --gtest_filter="$smoke" >"$out/smoke.log" 2>&1
rc=$?
echo "smoke rc=$rc (124 = timed out: a hang)"; tail -15 "$out/smoke.log"
if [ "$rc" != 0 ]; then
  # The kernel's watchdog (watchdog_wait) turns a hang into a write to 256 x (site + 1): memcheck names the site,
  # the block and the thread.
  echo "smoke failed: rerunning it under memcheck to locate the wait, then stopping"
  timeout 150 compute-sanitizer --tool memcheck --print-limit 8 "$tests_bin" --gtest_filter="$smoke" \
    >"$out/smoke-memcheck.log" 2>&1
  grep -E -A3 "Invalid __global__|ERROR SUMMARY|error" "$out/smoke-memcheck.log" | head -40
  exit 1
fi

echo "== tests"
timeout 300 "$tests_bin" --gtest_filter="$tests" >"$out/tests.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" "$out/tests.log" | tail -40

if [ "$sanitize" = yes ]; then
  small='Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d64_causal_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq127_sk129_d128_full_auto_det:Shapes/BackwardAccuracy.MatchesReference/b1_h8_2_sq200_sk200_d128_causal_auto_det'
  race='Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d64_causal_auto_det:Shapes/BackwardAccuracy.MatchesReference/b2_h2_2_sq113_sk113_d128_causal_auto_det'
  echo "== memcheck"
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests_bin" --gtest_filter="$small" >"$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -5
  echo "== racecheck"
  timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$tests_bin" \
    --gtest_filter="$race" >"$out/racecheck.log" 2>&1
  echo "racecheck rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -5
fi

if [ "$bench" != none ]; then
  echo "== bench ($bench)"
  args=(--out "$out/backward.jsonl" --commit "${DASH_COMMIT:-unknown}")
  [ "$bench" = quick ] && args+=(--quick)
  timeout 400 "$build/bench/dash-bench-bwd" "${args[@]}" >"$out/bench.log" 2>&1
  echo "bench rc=$?"
  cut -c1-120 "$out/bench.log"
fi
if [ "$busy_ms" -gt 0 ]; then
  # Every mode and schedule of one configuration while 16 SMs are held by another stream's kernel.
  echo "== busy SMs ($busy_ms ms, 16 SMs)"
  timeout 200 "$build/bench/dash-bench-bwd" --out "$out/busy.jsonl" --commit "${DASH_COMMIT:-unknown}" \
    --config 2,8192,16,16,128,causal --busy-ms "$busy_ms" --busy-ctas 16 >"$out/busy.log" 2>&1
  echo "busy rc=$?"; grep BUSY "$out/busy.log"
fi

if [ "${torch_ref:-yes}" = yes ] && python3 -c "import torch" 2>/dev/null; then
  echo "== torch references (same device call)"
  PYTHONUNBUFFERED=1 timeout "${DASH_TORCH_TIMEOUT:-240}" python3 "$root/bench/bench_backward_torch.py" --out "$out/torch_backward.jsonl" --flex \
    >"$out/torch.log" 2>&1
  echo "torch rc=$?"
  cat "$out/torch.log" | grep -v Warning | tail -40
fi
