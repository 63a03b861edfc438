#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Session 52's first device call (carry .carry/fa4p1 .carry/rec .carry/s52 .carry/nvml): FA4's part 1 (the record
# follows on the same warm machine), auto_check.py on the new library, then an A/B of the library before the table's
# regeneration (.carry/rec: b503cd4, the same kernels and core) and after it (.carry/s52: 769835d) with FA3, on rows
# whose first choice moved.
set -uo pipefail
out=${OUT:-/tmp/out}; log=/tmp/s52-logs; mkdir -p $log
bash scripts/gpu_fa4_site.sh part1 .carry/fa4p1 && echo "fa4 part1 ok"
for lib in old new; do mkdir -p /tmp/lib-$lib; done
tar xJf .carry/rec/lib.tar.xz -C /tmp/lib-old && tar xJf .carry/s52/lib.tar.xz -C /tmp/lib-new
mkdir -p /tmp/fa3 && xz -dc .carry/rec/fa3.xz > /tmp/fa3/_C.so
export PYTHONPATH="$PWD/python:$PWD/.carry/nvml:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
for dir in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $log/gpu.txt
echo "== auto_check $(date +%T)"
DASH_ATTN_LIBRARY=/tmp/lib-new/libdash_attn.so timeout 120 python3 docs/history/prepared/2026-12-07-auto-ties/auto_check.py \
  > $log/auto_check.log 2>&1; echo rc $?; tail -6 $log/auto_check.log
tar czf $out/s52-logs.tar.gz -C $log .
echo "== ab $(date +%T)"
timeout ${AB_SECONDS:-240} bash scripts/gpu_record_ab.sh --fa3 /tmp/fa3/_C.so --rounds 2 --configs \
  b1_s16384_hq16_hkv16_d128_full,b2_s8192_hq16_hkv4_d128_causal,b1_s16384_hq16_hkv8_d128_causal,b2_s8192_hq16_hkv4_d128_full \
  old=/tmp/lib-old new=/tmp/lib-new > $log/ab.log 2>&1; echo rc $?
grep -A40 "TFLOP/s, ratios" $out/ab-summary.txt 2>/dev/null | head -30
tar czf $out/s52-logs.tar.gz -C $log .
echo "== done $(date +%T)"
