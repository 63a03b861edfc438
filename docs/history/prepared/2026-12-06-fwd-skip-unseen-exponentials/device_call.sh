#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The device call that decides 0001 (the first KV tile's exponentials skip the 16-column chunks no row of a warp
# sees). Before it, on the development machine: main with 0001 applied, built whole (the patch changes
# fwd_softmax.cuh / fwd_kernel.cuh: every forward instantiation rebuilds, ~11 min on 2 cores), its libdash_attn.so
# packed into CARRY as new.tar.xz with tests/gpu/dash_gpu_tests and dash_gpu_varlen_tests, and main's
# libdash_attn.so as base.tar.xz. Run from the repository root: bash device_call.sh CARRY (~4 min on an H100).
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
C=${1:?usage: device_call.sh CARRY}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
for v in base new; do rm -rf /tmp/$v && mkdir -p /tmp/$v && tar xJf "$C/$v.tar.xz" -C /tmp/$v; done
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  LD_LIBRARY_PATH=/tmp/new:/usr/local/cuda/lib64 timeout "$limit" "$@" > /tmp/step.log 2>&1; local rc=$?
  { echo "=== $name rc=$rc $((SECONDS - t0))s"; grep -E "Failure" -A3 /tmp/step.log | head -20; tail -4 /tmp/step.log; } >> "$out/checks.log"
  echo "$name rc=$rc :: $(grep -E 'PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY' /tmp/step.log | tail -2 | tr '\n' ' ')" | tee -a "$out/summary.txt"; }
# Every forward GoogleTest (all head dims and dtypes: every forward kernel takes the change; the tests compare the
# two-warpgroup short-row kernel's bits with the three-warpgroup kernel's) and every varlen test (windows among them).
step gtest-forward 300 "$C/dash_gpu_tests"
step gtest-varlen 200 "$C/dash_gpu_varlen_tests"
for case in Len_1000x1000_causal_d64_bf16 Len_1000x1000_causal_d128_bf16; do
  step "memcheck-$case" 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$C/dash_gpu_tests" \
    --gtest_filter="Cases/ForwardAccuracy.MatchesReference/$case"
  step "racecheck-$case" 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$C/dash_gpu_tests" \
    --gtest_filter="Cases/ForwardAccuracy.MatchesReference/$case"
done
# Ragged edges: a tile cut by the end of the keys (203 x 113, 17 x 300) and an fp16 short row.
for case in Small_Cross_203x113_causal_d64_bf16 Small_Cross_17x300_causal_d128_bf16 Small_Len_255x255_causal_d64_fp16; do
  step "memcheck-$case" 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$C/dash_gpu_tests" \
    --gtest_filter="Cases/ForwardAccuracy.MatchesReference/$case"
done
export PYTHONPATH="$PWD/python:$PWD/bench" PYTHONUNBUFFERED=1
# The CUDA shape and window sweeps against the float64 reference (awkward lengths, lengths 1 and 2, windows).
(cd python && DASH_ATTN_LIBRARY=/tmp/new/libdash_attn.so LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 200 \
  python3 -m pytest -q tests/test_shape_sweep.py -k cuda > /tmp/sweep.log 2>&1
  echo "pytest-sweep-cuda rc=$? :: $(tail -1 /tmp/sweep.log)" | tee -a "$out/summary.txt")
# The A/B: head dims 64 and 128, both masks (the full rows' first tiles take the chunk branches without skipping:
# the control for their cost), 3 rounds, the order of the two libraries alternating per round.
export FORWARD_AB_HEAD_DIMS=64,128
for r in 1 2 3; do
  order="base new"; [ $((r % 2)) = 0 ] && order="new base"
  for v in $order; do
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so timeout 150 \
      python3 bench/forward_ab.py run $v "$out/fwd-ab.jsonl" > /tmp/ab.log 2>&1 || tail -3 /tmp/ab.log
  done
done
python3 bench/forward_ab.py summary "$out/fwd-ab.jsonl" | tee "$out/fwd-ab-summary.txt"
cat "$out/summary.txt"
