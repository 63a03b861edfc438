#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for the tail-cut prototype (this folder's patches): correctness of the prototype's library against
# fp32 and against main's bits, memcheck on a cut shape, and an A/B of main and the prototype with FA3 (README.md).
# Run from the repository root with .carry/tail (lib.tar.xz, bin.tar.xz), .carry/rec (main's lib.tar.xz, fa3.xz) and
# .carry/nvml carried; AB_SECONDS bounds the A/B (default 300).
set -uo pipefail
root=$(pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}
log=/tmp/tail-logs; mkdir -p $log
for lib in tail rec; do mkdir -p /tmp/lib-$lib && tar xJf .carry/$lib/lib.tar.xz -C /tmp/lib-$lib; done
mkdir -p /tmp/fa3 && xz -dc .carry/rec/fa3.xz > /tmp/fa3/_C.so
mkdir -p /tmp/tailbin && tar xJf .carry/tail/bin.tar.xz -C /tmp/tailbin
export PYTHONPATH="$root/python:$root/.carry/nvml:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
for dir in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $log/gpu.txt
step() { echo "== $1 $(date +%T)"; }
step check-tail; DASH_ATTN_LIBRARY=/tmp/lib-tail/libdash_attn.so timeout 150 python3 "$here/tail_check.py" $log/check-tail.json > $log/check-tail.log 2>&1; echo rc $?; tail -2 $log/check-tail.log
step check-main; DASH_ATTN_LIBRARY=/tmp/lib-rec/libdash_attn.so timeout 150 python3 "$here/tail_check.py" $log/check-main.json > $log/check-main.log 2>&1; echo rc $?; tail -1 $log/check-main.log
python3 - <<'PY'
import json
a = json.load(open('/tmp/tail-logs/check-tail.json'))["shapes"]; b = json.load(open('/tmp/tail-logs/check-main.json'))["shapes"]
for x, y in zip(a, b):
    same = {k: x["sha_det"][k] == y["sha_det"][k] for k in x["sha_det"]}
    uncut = {k: x["sha_det_uncut_rows"][k] == y["sha_det_uncut_rows"][k] for k in x["sha_det_uncut_rows"]}
    print("bits vs main", x["shape"], x["schedule"], "equal:", same, "uncut rows equal:", uncut, "tail ok:", x["ok"])
PY
step memcheck; LD_LIBRARY_PATH=/tmp/tailbin:$LD_LIBRARY_PATH timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/tailbin/dash-attn check --seqlen 16384 --heads 1 --device cuda --runs 1 > $log/memcheck.log 2>&1; echo rc $?; tail -3 $log/memcheck.log
# (the non-deterministic memcheck is left for a later call: device time)
tar czf $out/tail-logs.tar.gz -C $log .
step ab; timeout ${AB_SECONDS:-300} bash scripts/gpu_record_ab.sh --fa3 /tmp/fa3/_C.so --rounds 2 --configs ${AB_CONFIGS:-b1_s16384_hq16_hkv16_d128_full,b1_s16384_hq32_hkv32_d128_full,b1_s16384_hq33_hkv33_d128_full,b1_s16384_hq16_hkv16_d128_causal} main=/tmp/lib-rec tail=/tmp/lib-tail > $log/ab.log 2>&1; echo rc $?; tail -30 $log/ab.log
tar czf $out/tail-logs.tar.gz -C $log .
step done
