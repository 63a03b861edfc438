#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for the 64-bit descriptor k-steps (README.md): the CUDA shape sweep on the variant, the stagger
# folder's stagger_check.py on both libraries (det bits compared: the same GEMMs, so the same bits), memcheck of
# sanitize_cases.py, then an A/B of main and the variant with FA3 in every run.
# Run from the repository root with .carry/s53 (main.tar.xz, desc64.tar.xz), .carry/rec (fa3.xz), .carry/nvml carried.
set -uo pipefail
root=$(pwd)
checks=$root/docs/history/prepared/2026-12-08-stagger-hd128
out=${OUT:-/tmp/out}
log=/tmp/v-logs; mkdir -p $log /tmp/lib-main /tmp/lib-v /tmp/fa3
tar xJf .carry/s53/main.tar.xz -C /tmp/lib-main
tar xJf .carry/s53/desc64.tar.xz -C /tmp/lib-v
xz -dc .carry/rec/fa3.xz > /tmp/fa3/_C.so
export PYTHONPATH="$root/python:$root/.carry/nvml:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
for dir in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $log/gpu.txt
V=/tmp/lib-v/libdash_attn.so M=/tmp/lib-main/libdash_attn.so
step() { echo "== $1 $(date +%T)"; }
step sweep; (cd python && DASH_ATTN_LIBRARY=$V timeout 100 python3 -m pytest -q -rs tests/test_shape_sweep.py -k cuda) > $log/sweep.log 2>&1; echo rc $?; tail -1 $log/sweep.log
step check; DASH_ATTN_LIBRARY=$V timeout 100 python3 $checks/stagger_check.py $log/check-v.json > $log/check-v.log 2>&1; echo rc $?; tail -1 $log/check-v.log
DASH_ATTN_LIBRARY=$M timeout 100 python3 $checks/stagger_check.py $log/check-main.json > $log/check-main.log 2>&1; echo rc $?
python3 -c "
import json
a=json.load(open('$log/check-v.json'))['shapes']; b=json.load(open('$log/check-main.json'))['shapes']
print('det bits equal to main on', sum(x['sha_det']==y['sha_det'] for x,y in zip(a,b)), 'of', len(a), 'shapes; all ok:', all(x['ok'] for x in a))
" | tee $log/bits.txt
step memcheck; DASH_ATTN_LIBRARY=$V timeout 100 compute-sanitizer --tool memcheck python3 $checks/sanitize_cases.py > $log/memcheck.log 2>&1; echo rc $?; grep -E 'ERROR SUMMARY' $log/memcheck.log
tar czf $out/v-logs.tar.gz -C $log .
step ab; timeout ${AB_SECONDS:-300} bash scripts/gpu_record_ab.sh --fa3 /tmp/fa3/_C.so --rounds 2 \
  --configs b1_s16384_hq16_hkv16_d128_full,b2_s8192_hq16_hkv16_d128_full,b4_s4096_hq16_hkv16_d128_full,b2_s8192_hq16_hkv16_d128_causal,b2_s8192_hq32_hkv8_d128_causal \
  main=/tmp/lib-main desc64=/tmp/lib-v > $log/ab.log 2>&1; echo rc $?; grep -v 'host\|fa3' $log/ab.log | head -30
tar czf $out/v-logs.tar.gz -C $log .
step done
