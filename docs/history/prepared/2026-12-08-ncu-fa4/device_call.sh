#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The third of three calls on one warm machine (after `scripts/gpu_fa4_site.sh part1 .carry/fa4p1` and `part2
# .carry/fa4p2`): Nsight Compute profiles (--set full, SASS source page) of the non-deterministic backward of FA4 and of
# dash-attn (main's library, .carry/s53/main.tar.xz) on one shape, each backward's kernels in an NVTX range.
#   bash docs/history/prepared/2026-12-08-ncu-fa4/device_call.sh [BATCH SEQLEN HEADS HEAD_DIM MASK MODE]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}
shape=${*:-2 8192 16 128 full nondet}
fa4_path=$(bash scripts/gpu_fa4_site.sh install .carry/fa4w) || exit 1
mkdir -p /tmp/lib-main && tar xJf .carry/s53/main.tar.xz -C /tmp/lib-main
for dir in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $out/gpu.txt
for impl in fa4 dash; do
  tmp=/tmp/ncu-$impl; mkdir -p $tmp
  echo "== $impl $(date +%T)"
  PYTHONPATH="$fa4_path:$PWD/python" DASH_ATTN_LIBRARY=/tmp/lib-main/libdash_attn.so timeout 240 \
    ncu --clock-control none --kernel-name regex:"FlashAttentionBackwardSm90|backward_kernel" --launch-skip 3 --launch-count 1 --set full --import-source no -f -o $tmp/prof \
    python3 "$here/bwd_once.py" $impl $shape > $tmp/run.log 2>&1
  echo "rc $?"; tail -3 $tmp/run.log
  ncu -i $tmp/prof.ncu-rep --page details --csv > $tmp/details.csv 2>&1
  ncu -i $tmp/prof.ncu-rep --page source --csv --print-source sass > $tmp/source.csv 2>&1
  wc -c $tmp/*.csv
  grep -o '"[^"]*\(Duration\|Elapsed Cycles\)","[^"]*","[^"]*"' $tmp/details.csv | head -8
  tar -C $tmp -czf $out/ncu-$impl.tar.gz details.csv source.csv run.log
done
# What is left of the call's 600 s: main's non-det schedules at head dim 128 full (the collision hypothesis of the
# notes, 2026-12-08), FA3 beside, one round.
left=$((540 - SECONDS)); [ -n "${NO_PROBE:-}" ] && left=0
if [ $left -gt 120 ] && [ -f .carry/rec/fa3.xz ]; then
  mkdir -p /tmp/fa3 && xz -dc .carry/rec/fa3.xz > /tmp/fa3/_C.so
  echo "== probe $(date +%T) ($left s)"
  PYTHONPATH=$PWD/.carry/nvml timeout $left bash scripts/gpu_record_ab.sh --fa3 /tmp/fa3/_C.so --rounds 1 \
    --schedules auto,shift --nondet-schedules auto,shift,descending \
    --configs b1_s16384_hq16_hkv16_d128_full,b2_s8192_hq16_hkv16_d128_full,b1_s16384_hq32_hkv32_d128_full main=/tmp/lib-main \
    > /tmp/probe.log 2>&1; echo "rc $?"; grep -v host /tmp/probe.log | head -40
fi
echo "== done $(date +%T)"
