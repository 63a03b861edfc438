#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call (~5 min on an H100; no build there): the forward's producer loading K one KV tile ahead of V
# (0001-fwd-k-ahead.patch) against main's library. README beside this file.
#   bash docs/history/prepared/2026-12-07-fwd-k-ahead/device_call.sh DIR
# DIR (carried, with .carry/nvml) holds base.tar.xz and kahead.tar.xz (a libdash_attn.so each, at the top),
# fa3_C.so.xz (FA3 upstream's _C.so, xz) and tests.tar.xz (build/tests/gpu/dash_gpu_tests and dash_gpu_varlen_tests).
set -uo pipefail
dir=${1:?usage: device_call.sh DIR}
out=${OUT:-out}; mkdir -p "$out"
for d in base kahead fa3 tests; do rm -rf /tmp/$d; mkdir -p /tmp/$d; done
tar xJf "$dir/base.tar.xz" -C /tmp/base; tar xJf "$dir/kahead.tar.xz" -C /tmp/kahead; tar xJf "$dir/tests.tar.xz" -C /tmp/tests
xz -dc "$dir/fa3_C.so.xz" > /tmp/fa3/_C.so
export PYTHONPATH=$PWD/python:$PWD/.carry/nvml PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.limit --format=csv,noheader | tee "$out/gpu.txt"
# Correctness of the variant (its head dim 64 and 128 bf16 forwards; the other rows are main's objects): the forward
# and varlen forward GoogleTests, racecheck and memcheck on persistent multi-tile cases.
run_tests() {  # NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  LD_LIBRARY_PATH=/tmp/kahead:/usr/local/cuda/lib64 timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? $(grep -E '\[  PASSED  \]|\[  FAILED  \]|ERROR SUMMARY|RACECHECK SUMMARY' "$out/$name.log" | tr '\n' ' ')"
}
race='Cases/ForwardAccuracy.MatchesReference/Persistent_777x1200_causal_d128_bf16:Cases/ForwardAccuracy.MatchesReference/Persistent_1500x300_causal_d64_bf16'
run_tests gtest-forward 200 /tmp/tests/dash_gpu_tests
run_tests gtest-varlen-forward 150 /tmp/tests/dash_gpu_varlen_tests --gtest_filter='*Forward*'
run_tests racecheck-forward 200 compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/tests/dash_gpu_tests \
  --gtest_filter="$race"
run_tests memcheck-forward 200 compute-sanitizer --tool memcheck /tmp/tests/dash_gpu_tests --gtest_filter="$race"
# Speed: forward_ab.py, every head dim 64 / 128 row, 3 interleaved rounds, FA3 in every run; O and LSE bits compared.
export FA3_SO=/tmp/fa3/_C.so FORWARD_AB_HEAD_DIMS=64,128
for round in 1 2 3; do
  for v in base kahead; do
    [ $((round % 2)) = 0 ] && v=$([ $v = base ] && echo kahead || echo base)
    DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 150 \
      python3 bench/forward_ab.py run $v "$out/fwd-ab.jsonl" > "$out/fwd-$v-$round.log" 2>&1 || echo "$v round $round failed"
  done
done
python3 bench/forward_ab.py summary "$out/fwd-ab.jsonl" | tee "$out/fwd-ab-summary.txt"
# Where the consumers wait now: ncu of the variant at head dim 128 8k causal (the base's is
# bench/results/ncu-h100-2026-12-07-2461ef4-fwd-*.tar.gz).
timeout 120 bash scripts/gpu_record.sh --build-dir /tmp/kahead --no-record --profile b2_s8192_hq16_hkv16_d128_causal \
  --mode forward --profile-impls dash-attn 2>&1 | grep -v "^  [0-9a-f]\{5\} " | tail -25
tar -C "$out" -czf "$out/logs.tar.gz" $(cd "$out" && ls *.log) && rm -f "$out"/*.log
