#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The device call that decides 0001 (two Q buffers in the short-row forward kernel). Before it, on the development
# machine: a worktree of main with 0001 applied, built whole (the patch changes fwd_config.cuh / fwd_kernel.cuh, so
# every forward instantiation rebuilds), its libdash_attn.so and tests/gpu/dash_gpu_tests and
# dash_gpu_varlen_tests packed into CARRY as new.tar.xz / dash_gpu_tests / dash_gpu_varlen_tests, and main's
# libdash_attn.so as base.tar.xz. Run from the repository root: bash device_call.sh CARRY (~3 min on an H100).
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
C=${1:?usage: device_call.sh CARRY}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
for v in base new; do rm -rf /tmp/$v && mkdir -p /tmp/$v && tar xJf "$C/$v.tar.xz" -C /tmp/$v; done
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  LD_LIBRARY_PATH=/tmp/new:/usr/local/cuda/lib64 timeout "$limit" "$@" > /tmp/step.log 2>&1; local rc=$?
  { echo "=== $name rc=$rc $((SECONDS - t0))s"; grep -E "Failure" -A3 /tmp/step.log | head -20; tail -4 /tmp/step.log; } >> "$out/checks.log"
  echo "$name rc=$rc :: $(grep -E 'PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY' /tmp/step.log | tail -2 | tr '\n' ' ')" | tee -a "$out/summary.txt"; }
# Every forward GoogleTest (the short-row kernel runs the causal and right-bounded cases of <= 1024 queries at head
# dim 64, bf16 and fp16, and the tests compare its bits with the three-warpgroup kernel's); the varlen forward.
step gtest-forward 300 "$C/dash_gpu_tests"
step gtest-varlen 200 "$C/dash_gpu_varlen_tests" --gtest_filter='*Forward*:*forward*'
for case in Len_1000x1000_causal_d64_bf16 Small_GQA8x2_255x255_causal_d64_fp16; do
  step "memcheck-$case" 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$C/dash_gpu_tests" \
    --gtest_filter="Cases/ForwardAccuracy.MatchesReference/$case"
  step "racecheck-$case" 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$C/dash_gpu_tests" \
    --gtest_filter="Cases/ForwardAccuracy.MatchesReference/$case"
done
# The A/B: causal rows of head dims 64 and 128 (only head dim 64's 512 / 1k rows run the changed kernel), 3 rounds,
# the order of the two libraries alternating per round.
export PYTHONPATH="$PWD/python:$PWD/bench" PYTHONUNBUFFERED=1 FORWARD_AB_HEAD_DIMS=64,128 FORWARD_AB_MASK=causal
for r in 1 2 3; do
  order="base new"; [ $((r % 2)) = 0 ] && order="new base"
  for v in $order; do
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so timeout 150 \
      python3 bench/forward_ab.py run $v "$out/fwd-ab.jsonl" > /tmp/ab.log 2>&1 || tail -3 /tmp/ab.log
  done
done
python3 bench/forward_ab.py summary "$out/fwd-ab.jsonl" | tee "$out/fwd-ab-summary.txt"
cat "$out/summary.txt"
