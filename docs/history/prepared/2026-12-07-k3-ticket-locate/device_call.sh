#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call (~5 min on an H100; no build there) for two studies against main's library (README beside this file):
#   k3: the forward at head dim 128 with a K ring of three stages, K loaded one KV tile ahead of V;
#   tl: the backward with one ticket decode (dash_ticket_locate, branch ticket-locate).
#   bash docs/history/prepared/2026-12-07-k3-ticket-locate/device_call.sh DIR
# DIR (carried, with .carry/nvml) holds base.tar.xz, k3.tar.xz, tl.tar.xz (a libdash_attn.so each), fa3_C.so.xz and
# tests.tar.xz (dash_gpu_tests, dash_gpu_bwd_tests and the dash-attn CLI of main's build).
set -uo pipefail
dir=${1:?usage: device_call.sh DIR}
out=${OUT:-out}; mkdir -p "$out"
for d in base k3 tl fa3 tests; do rm -rf /tmp/$d; mkdir -p /tmp/$d; done
for v in base k3 tl tests; do tar xJf "$dir/$v.tar.xz" -C /tmp/$v; done
xz -dc "$dir/fa3_C.so.xz" > /tmp/fa3/_C.so
export PYTHONPATH=$PWD/python:$PWD/bench:$PWD/.carry/nvml PYTHONUNBUFFERED=1 FA3_SO=/tmp/fa3/_C.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.limit --format=csv,noheader | tee "$out/gpu.txt"
run_tests() {  # NAME LIB TIMEOUT COMMAND...
  local name=$1 lib=$2 limit=$3; shift 3
  LD_LIBRARY_PATH=/tmp/$lib:/usr/local/cuda/lib64 timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name rc=$? $(grep -E '\[  PASSED  \]|\[  FAILED  \]|ERROR SUMMARY|RACECHECK SUMMARY' "$out/$name.log" | tr '\n' ' ')"
}
# k3: correctness (every forward GoogleTest; sanitizers on a persistent multi-tile head dim 128 case), then speed.
race='Cases/ForwardAccuracy.MatchesReference/Persistent_777x1200_causal_d128_bf16'
run_tests k3-gtest-forward k3 120 /tmp/tests/dash_gpu_tests
run_tests k3-racecheck k3 120 compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/tests/dash_gpu_tests --gtest_filter="$race"
run_tests k3-memcheck k3 120 compute-sanitizer --tool memcheck /tmp/tests/dash_gpu_tests --gtest_filter="$race"
export FORWARD_AB_HEAD_DIMS=128
for round in 1 2 3; do
  for v in base k3; do
    [ $((round % 2)) = 0 ] && v=$([ $v = base ] && echo k3 || echo base)
    DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 100 \
      python3 bench/forward_ab.py run $v "$out/k3-fwd-ab.jsonl" > "$out/k3-fwd-$v-$round.log" 2>&1 || echo "$v round $round failed"
  done
done
python3 bench/forward_ab.py summary "$out/k3-fwd-ab.jsonl" > "$out/k3-fwd-ab-summary.txt"; head -13 "$out/k3-fwd-ab-summary.txt"
# tl: dQ / dK / dV bits of both libraries (they must agree: `dash-attn check`, every deterministic schedule, on
# shapes whose plans claim tickets unit by unit, slot by slot across units (20 heads), split GQA and partial tiles),
# the backward GoogleTests, then a 2-round A/B of the backward.
for v in base tl; do
  for shape in "--seqlen 16384 --heads 20 --hdim 64 --causal" "--batch 2 --seqlen 8192 --heads 32 --hdim 64 --causal" \
      "--batch 2 --seqlen 8192 --heads 16 --hdim 128" "--batch 2 --seqlen 8192 --heads 32 --heads-kv 8 --hdim 128 --causal" \
      "--batch 2 --seqlen 1000 --heads 8 --heads-kv 2 --hdim 128 --causal"; do
    for schedule in auto descending shift symmetric-shift; do
      echo "$shape $schedule: $(LD_LIBRARY_PATH=/tmp/$v:/usr/local/cuda/lib64 timeout 60 /tmp/tests/dash-attn check $shape \
        --schedule $schedule --runs 2 2>&1 | grep -E '^1 |identical|error' | tr -s ' ' | tr '\n' ' ')"
    done
  done > "$out/tl-bits-$v.txt"
done
cmp -s "$out/tl-bits-base.txt" "$out/tl-bits-tl.txt" && echo "tl bits: equal to base ($(wc -l < "$out/tl-bits-tl.txt") lines)" || { echo "tl bits: DIFFER"; diff "$out/tl-bits-base.txt" "$out/tl-bits-tl.txt" | head; }
run_tests tl-gtest-bwd tl 150 /tmp/tests/dash_gpu_bwd_tests
configs=b1_s16384_hq32_hkv32_d64_causal,b2_s8192_hq32_hkv32_d64_causal,b2_s8192_hq16_hkv16_d128_causal,b2_s8192_hq32_hkv8_d128_causal
for v in base tl tl base; do
  DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 100 python3 bench/record.py \
    --out "$out/tl-ab.jsonl" --configs $configs --schedules auto --no-cudnn --repeats 1 --fa3 /tmp/fa3/_C.so --tag $v \
    > "$out/tl-ab-$v.log" 2>&1 || echo "tl a/b $v failed"
done
python3 bench/record_ab.py "$out/tl-ab.jsonl" --base base | tee "$out/tl-ab-summary.txt" | head -20
# Where the k3 consumers wait (main's: bench/results/ncu-h100-2026-12-07-2461ef4-fwd-*).
timeout 100 bash scripts/gpu_record.sh --build-dir /tmp/k3 --no-record --profile b2_s8192_hq16_hkv16_d128_causal \
  --mode forward --profile-impls dash-attn 2>&1 | grep -v "^  [0-9a-f]\{5\} " | tail -22
tar -C "$out" -czf "$out/logs.tar.gz" $(cd "$out" && ls *.log) && rm -f "$out"/*.log
