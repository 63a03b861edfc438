#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for the staggered warpgroups at head dim 128 (README.md): correctness of the variant's library
# (the CUDA shape sweep against float64, the varlen suites, stagger_check.py with its bits compared to main's,
# memcheck and racecheck of sanitize_cases.py), then an A/B of main and the variant with FA3 in every run.
# Run from the repository root with .carry/s53 (stag.tar.xz, main.tar.xz), .carry/rec (fa3.xz) and .carry/nvml
# carried; AB_SECONDS bounds the A/B (default 330).
set -uo pipefail
root=$(pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}
log=/tmp/stag-logs; mkdir -p $log
mkdir -p /tmp/lib-main /tmp/lib-stag /tmp/fa3
tar xJf .carry/s53/main.tar.xz -C /tmp/lib-main
tar xJf .carry/s53/stag.tar.xz -C /tmp/lib-stag
xz -dc .carry/rec/fa3.xz > /tmp/fa3/_C.so
export PYTHONPATH="$root/python:$root/.carry/nvml:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
for dir in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $log/gpu.txt
step() { echo "== $1 $(date +%T)"; }
save() { tar czf $out/stag-logs.tar.gz -C $log .; }
S=/tmp/lib-stag/libdash_attn.so M=/tmp/lib-main/libdash_attn.so
step sweep; (cd python && DASH_ATTN_LIBRARY=$S timeout 120 python3 -m pytest -q -rs tests/test_shape_sweep.py -k cuda) > $log/sweep.log 2>&1; echo rc $?; tail -1 $log/sweep.log
step varlen; (cd python && DASH_ATTN_LIBRARY=$S timeout 120 python3 -m pytest -q -rs tests/test_varlen.py tests/test_padding_and_transformers.py -k cuda) > $log/varlen.log 2>&1; echo rc $?; tail -1 $log/varlen.log
step check-stag; DASH_ATTN_LIBRARY=$S timeout 120 python3 "$here/stagger_check.py" $log/check-stag.json > $log/check-stag.log 2>&1; echo rc $?; tail -1 $log/check-stag.log
step check-main; DASH_ATTN_LIBRARY=$M timeout 120 python3 "$here/stagger_check.py" $log/check-main.json > $log/check-main.log 2>&1; echo rc $?; tail -1 $log/check-main.log
python3 - <<'PY' | tee $log/bits.txt
import json
a = json.load(open('/tmp/stag-logs/check-stag.json'))["shapes"]; b = json.load(open('/tmp/stag-logs/check-main.json'))["shapes"]
for x, y in zip(a, b):
    print("det bits stag == main:", x["shape"], x["schedule"], x["sha_det"] == y["sha_det"], "| stag ok:", x["ok"])
PY
save
step memcheck; DASH_ATTN_LIBRARY=$S timeout 150 compute-sanitizer --tool memcheck --print-limit 10 python3 "$here/sanitize_cases.py" > $log/memcheck.log 2>&1; echo rc $?; grep -E 'ERROR SUMMARY|finite' $log/memcheck.log
step racecheck; DASH_ATTN_LIBRARY=$S timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard python3 "$here/sanitize_cases.py" > $log/racecheck.log 2>&1; echo rc $?; grep -E 'RACECHECK SUMMARY|finite' $log/racecheck.log
save
step ab; timeout ${AB_SECONDS:-330} bash scripts/gpu_record_ab.sh --fa3 /tmp/fa3/_C.so --rounds 2 --schedules auto,shift \
  --configs ${AB_CONFIGS:-b1_s16384_hq16_hkv16_d128_full,b2_s8192_hq16_hkv16_d128_full,b4_s4096_hq16_hkv16_d128_full,b8_s2048_hq16_hkv16_d128_full,b2_s8192_hq16_hkv16_d128_causal,b1_s16384_hq16_hkv16_d128_causal,b2_s8192_hq32_hkv8_d128_causal} \
  main=/tmp/lib-main stag=/tmp/lib-stag > $log/ab.log 2>&1; echo rc $?; tail -40 $log/ab.log
save
step done
