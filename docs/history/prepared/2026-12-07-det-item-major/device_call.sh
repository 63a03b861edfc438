#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call (~4 min): the study library (DASH_STUDY_DESC_IM: schedule `descending` claimed item by item across
# all units) checked (im_check.py: bitwise runs, heads alone, error) and timed against `auto` (symmetric shift) and
# the non-deterministic balanced plan, with FA3 beside them (record.py, MHA causal rows and two odd head counts),
# then MHA sliding windows (window_ab.py).
#   bash docs/history/prepared/2026-12-07-det-item-major/device_call.sh STUDY_LIB.tar.xz FA3_C.so
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
here=docs/history/prepared/2026-12-07-det-item-major
rm -rf /tmp/study && mkdir -p /tmp/study && tar xJf "${1:?study lib}" -C /tmp/study
export DASH_STUDY_DESC_IM=1 DASH_ATTN_LIBRARY=/tmp/study/libdash_attn.so PYTHONPATH=$PWD/python:$PWD/.carry/nvml
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
timeout 200 python3 "$here/im_check.py" --device cuda 2>&1 | tee "$out/im_check.log"
echo "im_check rc=${PIPESTATUS[0]}"
configs=b16_s1024_hq16_hkv16_d128_causal,b8_s2048_hq16_hkv16_d128_causal,b4_s4096_hq16_hkv16_d128_causal
configs+=,b2_s8192_hq16_hkv16_d128_causal,b1_s16384_hq16_hkv16_d128_causal,b32_s512_hq32_hkv32_d64_causal
configs+=,b16_s1024_hq32_hkv32_d64_causal,b8_s2048_hq32_hkv32_d64_causal,b4_s4096_hq32_hkv32_d64_causal
configs+=,b2_s8192_hq32_hkv32_d64_causal,b1_s16384_hq32_hkv32_d64_causal,b1_s16384_hq28_hkv28_d64_causal
configs+=,b1_s16384_hq20_hkv20_d64_causal
timeout 330 python3 bench/record.py --out "$out/ab.jsonl" --fa3 "${2:?fa3 _C.so}" --no-cudnn --configs "$configs" \
  --schedules auto,descending --repeats 3 --tag study-desc-im --commit "${DASH_COMMIT:-study}" 2>&1 | tee "$out/ab.log" \
  | grep -v "^    "
echo "record rc=${PIPESTATUS[0]}"
PYTHONPATH=$PYTHONPATH:$PWD/bench timeout 120 python3 "$here/window_ab.py" 2>&1 | tee "$out/window_ab.log"
echo "window rc=${PIPESTATUS[0]}"
