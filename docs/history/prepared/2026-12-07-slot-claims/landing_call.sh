#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The landing checks of slot claims, in two device calls on one warm machine (about 4 min each on an H100):
#   checks: the backward and varlen GoogleTests of the new build (every schedule bitwise over 5 runs with the executed
#           dQ order equal to the plan's, the new cut-template cases among them), the bits of the new library against
#           main's on 10 shapes (slot_check.py), memcheck and racecheck on the cut-template cases;
#   ab:     det / non-det `auto` of both libraries in 2 interleaved rounds of record.py (scripts/gpu_record_ab.sh), then
#           det `auto` with 8 SMs held (margin_ab.py) per library.
#   bash landing_call.sh checks|ab|all MAIN.tar.xz NEW.tar.xz      (all: both in one call, about 9 min)
# MAIN.tar.xz: main's libdash_attn.so; NEW.tar.xz: the new build's libdash_attn.so and its GPU test binaries. Carry
# both and .carry/nvml. Logs go to $OUT (few files: a call returns at most 8).
set -uo pipefail
phase=${1:?checks or ab}
out=${OUT:-out}; mkdir -p "$out"
here=docs/history/prepared/2026-12-07-slot-claims
for v in main new; do rm -rf /tmp/$v && mkdir -p /tmp/$v; done
tar xJf "${2:?main lib}" -C /tmp/main && tar xJf "${3:?new build}" -C /tmp/new
export PYTHONPATH=$PWD/python:$PWD/.carry/nvml LD_LIBRARY_PATH=/tmp/new:/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee -a "$out/gpu.txt"
summary="$out/$phase-summary.txt"
step() {  # step NAME TIMEOUT_S COMMAND...: the command's log under $out/logs, one summary line
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  mkdir -p "$out/logs"
  timeout "$limit" "$@" >"$out/logs/$name.log" 2>&1
  local rc=$?
  printf '%-14s rc=%-3s %4ss :: %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(grep -E 'PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|FAIL|ok$' "$out/logs/$name.log" | tail -2 | tr '\n' ' ' | cut -c1-160)" \
    | tee -a "$summary"
}
checks_first() {
  step gtest-bwd 180 /tmp/new/dash_gpu_bwd_tests
  step bits-main 120 env SLOT_CHECK_D128=1 DASH_ATTN_LIBRARY=/tmp/main/libdash_attn.so \
    python3 $here/slot_check.py save /tmp/main_grads.pt
  step bits-new 120 env SLOT_CHECK_D128=1 DASH_ATTN_LIBRARY=/tmp/new/libdash_attn.so \
    python3 $here/slot_check.py compare /tmp/main_grads.pt
}
checks_rest() {
  step gtest-varlen 90 /tmp/new/dash_gpu_varlen_tests
  step memcheck 90 compute-sanitizer --tool memcheck --print-limit 10 /tmp/new/dash_gpu_bwd_tests \
    --gtest_filter='*sq4608*:*sq4096*'
  step racecheck 90 compute-sanitizer --tool racecheck --print-limit 10 /tmp/new/dash_gpu_bwd_tests \
    --gtest_filter="${RACECHECK_FILTER:-*b1_h1_1_sq4608*}"
}
if [ "$phase" = checks ]; then
  checks_first
  checks_rest
else
  [ "$phase" = all ] && checks_first
  configs=b1_s16384_hq28_hkv28_d64_causal,b1_s16384_hq20_hkv20_d64_causal,b1_s16384_hq32_hkv32_d64_causal
  configs+=,b2_s8192_hq32_hkv32_d64_causal,b2_s8192_hq16_hkv16_d128_causal,b4_s4096_hq16_hkv16_d128_full
  configs+=,b2_s8192_hq32_hkv8_d128_causal
  OUT="$out" timeout 240 bash scripts/gpu_record_ab.sh --rounds "${ROUNDS:-2}" --configs "$configs" \
    main=/tmp/main new=/tmp/new 2>&1 | tail -30
  for v in main new; do
    DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so PYTHONPATH=$PYTHONPATH:$PWD/bench timeout 60 \
      python3 $here/margin_ab.py $v 2>&1 | tee -a "$out/margin.log"
  done
  [ "$phase" = all ] && checks_rest
fi
[ -d "$out/logs" ] && tar -C "$out" -czf "$out/$phase-logs.tar.gz" logs && rm -rf "$out/logs"
cat "$summary" 2>/dev/null
