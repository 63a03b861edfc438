#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The landed build's host code (tables written in slot order) on the GPU: bits against 35fb5d1's library, the
# determinism / executed-order GoogleTests and the varlen order test.
#   bash final_check.sh MAIN.tar.xz NEW.tar.xz   (NEW: libdash_attn.so, dash_gpu_bwd_tests, dash_gpu_varlen_tests; about 3 min)
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
here=docs/history/prepared/2026-12-07-slot-claims
for v in main new; do rm -rf /tmp/$v && mkdir -p /tmp/$v; done
tar xJf "${1:?main lib}" -C /tmp/main && tar xJf "${2:?landed build}" -C /tmp/new
export PYTHONPATH=$PWD/python LD_LIBRARY_PATH=/tmp/new:/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/final.log"
SLOT_CHECK_D128=1 DASH_ATTN_LIBRARY=/tmp/main/libdash_attn.so timeout 100 python3 $here/slot_check.py save /tmp/m.pt > /dev/null 2>&1
SLOT_CHECK_D128=1 DASH_ATTN_LIBRARY=/tmp/new/libdash_attn.so timeout 100 python3 $here/slot_check.py compare /tmp/m.pt 2>&1 | tee -a "$out/final.log"
echo "bits rc=${PIPESTATUS[0]}" | tee -a "$out/final.log"
timeout 150 /tmp/new/dash_gpu_bwd_tests --gtest_filter='Schedules/BackwardDeterminism.*' 2>&1 | tail -3 | tee -a "$out/final.log"
timeout 80 /tmp/new/dash_gpu_varlen_tests --gtest_filter='VarlenGpuOrder.*' 2>&1 | tail -3 | tee -a "$out/final.log"
