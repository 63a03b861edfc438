#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# device_checks.sh — device call 1 of this series (README.md here), after prepare.sh; carry `.carry/prep.tar.xz`.
# The series' build against the float64 references (every backward and varlen GoogleTest; the CUDA pytest sweeps of
# shapes, windows and varlen packs), compute-sanitizer on every backward kernel the series touches, and the
# deterministic SHA-256 of base and series, which must be equal. About 8 minutes; logs under $OUT.
#
#   bash docs/history/prepared/2026-12-05-hd64-visit/device_checks.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
tar xJf "$root/.carry/prep.tar.xz" -C /tmp
series=/tmp/prep/series base=/tmp/prep/base
cuda_libs=/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
run_series() { LD_LIBRARY_PATH="$series:$cuda_libs" "$@"; }

echo "== layout check"; run_series "$series/dash_bwd_layout_check" | tail -1
echo "== backward GoogleTests"
run_series timeout 300 "$series/dash_gpu_bwd_tests" >"$out/bwd-tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/bwd-tests.log" | tail -12
echo "== varlen GoogleTests"
run_series timeout 200 "$series/dash_gpu_varlen_tests" >"$out/varlen-tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/varlen-tests.log" | tail -8

accuracy=Shapes/BackwardAccuracy.MatchesReference
memcheck="$accuracy/b2_h2_2_sq113_sk113_d64_causal_auto_det:$accuracy/b1_h4_1_sq150_sk150_d64_causal_auto_nondet"
memcheck+=":$accuracy/b2_h2_2_sq127_sk129_d96_full_auto_det:$accuracy/b2_h2_2_sq127_sk129_d128_full_auto_det"
memcheck+=":$accuracy/*sq1_sk1_d64_full_auto_det:$accuracy/*sq113_sk113_d192*causal_auto_det"
memcheck+=":$accuracy/*sq113_sk113_d256*causal_auto_det:BackwardArgs.*"
racecheck="$accuracy/b2_h2_2_sq113_sk113_d64_causal_auto_det:$accuracy/b1_h4_1_sq150_sk150_d64_causal_auto_nondet"
racecheck+=":$accuracy/b2_h2_2_sq113_sk113_d128_causal_auto_det"
echo "== memcheck"
run_series timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$series/dash_gpu_bwd_tests" \
  --gtest_filter="$memcheck" >"$out/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -3
echo "== racecheck"
run_series timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$series/dash_gpu_bwd_tests" \
  --gtest_filter="$racecheck" >"$out/racecheck.log" 2>&1
echo "rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -3

echo "== deterministic bits, base against series"
same=0 differ=0
for shape in "--batch 2 --seqlen 2048 --heads 8 --hdim 64 --causal" "--batch 1 --seqlen 1000 --heads 4 --hdim 64" \
             "--batch 2 --seqlen 1024 --heads 8 --hdim 128 --causal" "--batch 1 --seqlen 777 --heads 4 --hdim 96" \
             "--batch 1 --seqlen 1024 --heads 4 --hdim 192 --hdim-v 128 --causal" \
             "--batch 1 --seqlen 1024 --heads 4 --hdim 256 --window 128,0"; do
  hb=$(LD_LIBRARY_PATH="$base:$cuda_libs" "$base/dash-attn" check $shape --runs 2 2>&1 | awk '$1 == "1" {print $2, $3, $4}')
  hs=$(run_series "$series/dash-attn" check $shape --runs 2 2>&1 | awk '$1 == "1" {print $2, $3, $4}')
  if [ -n "$hb" ] && [ "$hb" = "$hs" ]; then same=$((same + 1)); v=same; else differ=$((differ + 1)); v=DIFFER; fi
  echo "$v $shape | base ${hb:-none} | series ${hs:-none}" >>"$out/bits.txt"
done
echo "bits: $same same, $differ differ (bits.txt)"

echo "== pytest (CUDA: shapes, windows, varlen)"
DASH_ATTN_LIBRARY="$series/libdash_attn.so" PYTHONPATH="$root/python" timeout 240 python3 -m pytest -q -x -k cuda \
  "$root/python/tests/test_shape_sweep.py" "$root/python/tests/test_varlen.py" >"$out/pytest.log" 2>&1
echo "rc=$?"; tail -3 "$out/pytest.log"
