#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# device_call1.sh — carry `.carry/fa4p1` and `.carry/prep.tar.xz` (pack.sh). FA4's compiler library (ir.xz of
# shared/docs/fa4-on-h200.md, 48 MiB) no longer fits one call beside this tree's 19 MiB, so it comes in two parts, one
# per call (`split -b 25000000 ir.xz`; part 2 beside rt.xz in `.carry/fa4p2`, the wheels in `.carry/fa4w`). Keeps
# part 1 under /tmp/fa4site for call 2, builds FA3 upstream into build-fa3/ (kept while the machine is warm) in
# the background, and checks r80 meanwhile: the layout check, every backward GoogleTest (the 80-row cases among them),
# memcheck and racecheck on 80-row and 64-row cases, and the deterministic SHA-256 of base and r80 (equal where r80
# keeps 64-row tiles; an 80-row plan sums in another tiling, so its bits are only checked run to run).
set -uo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out" /tmp/fa4site
cp "$root/.carry/fa4p1/ir.xz.part1" /tmp/fa4site/
rm -rf /tmp/prep && tar xJf "$root/.carry/prep.tar.xz" -C /tmp
fa3_dir="$root/build-fa3"
( if [ -z "$(find "$fa3_dir" -name '_C*.so' 2>/dev/null | head -n 1)" ]; then
    tar xzf /tmp/prep/fa3kit.tar.gz -C /tmp && MAX_JOBS=12 python3 /tmp/.fa3kit/build.py upstream "$fa3_dir" \
      >"$out/fa3-build.log" 2>&1; fi
  echo "fa3: $(find "$fa3_dir" -name '_C*.so' | head -n 1)" ) &
r80=/tmp/prep/r80 base=/tmp/prep/base cuda_libs=/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
run80() { LD_LIBRARY_PATH="$r80:$cuda_libs" "$@"; }
echo "== layout check"; run80 "$r80/dash_bwd_layout_check" | tail -2
echo "== backward GoogleTests"
run80 timeout 300 "$r80/dash_gpu_bwd_tests" >"$out/bwd-tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/bwd-tests.log" | tail -12
acc=Shapes/BackwardAccuracy.MatchesReference
tall="$acc/*sq1100_sk1030_d128_full_auto_det:$acc/*sq1030_sk1500_d128_full_auto_det"
tall+=":$acc/*sq1100_sk1100_d128_full_auto_nondet:$acc/b1_h8_2_sq1024_sk1024_d128_full_auto_det_pack"
echo "== memcheck (80-row and 64-row cases)"
run80 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$r80/dash_gpu_bwd_tests" \
  --gtest_filter="$tall:$acc/b2_h2_2_sq113_sk113_d64_causal_auto_det:$acc/b2_h2_2_sq127_sk129_d128_full_auto_det:BackwardArgs.*" \
  >"$out/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -4
echo "== racecheck (80-row cases)"
run80 timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$r80/dash_gpu_bwd_tests" \
  --gtest_filter="$acc/*sq1100_sk1030_d128_full_auto_det:$acc/*sq1100_sk1100_d128_full_auto_nondet" \
  >"$out/racecheck.log" 2>&1
echo "rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -3
echo "== deterministic bits"
for shape in "--batch 2 --seqlen 2048 --heads 8 --hdim 64 --causal" "--batch 2 --seqlen 1024 --heads 8 --hdim 128 --causal" \
             "--batch 1 --seqlen 777 --heads 4 --hdim 128" "--batch 1 --seqlen 2048 --heads 8 --hdim 128" \
             "--batch 1 --seqlen 1100 --heads 4 --hdim 128"; do
  hb=$(LD_LIBRARY_PATH="$base:$cuda_libs" "$base/dash-attn" check $shape --runs 2 2>&1 | awk '$1 == "1" || $1 == "2" {print $1, substr($2, 1, 12), substr($3, 1, 12), substr($4, 1, 12)}' | tr '\n' ' ')
  hr=$(run80 "$r80/dash-attn" check $shape --runs 2 2>&1 | awk '$1 == "1" || $1 == "2" {print $1, substr($2, 1, 12), substr($3, 1, 12), substr($4, 1, 12)}' | tr '\n' ' ')
  echo "$shape | base $hb | r80 $hr" >>"$out/bits.txt"
done
cut -c1-200 "$out/bits.txt"
wait
ls -la /tmp/fa4site
