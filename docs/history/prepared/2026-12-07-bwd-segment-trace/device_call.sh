#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call (~5 min on an H100): the segment trace (README beside this file), then the forward at head dim 128
# 512 causal beside cuDNN's and the backward profile of the det / balanced plans (the 2026-12-06 profile folder's
# device_call.sh, in the time left: PROFILE_S seconds, 0 skips it).
#   bash docs/history/prepared/2026-12-07-bwd-segment-trace/device_call.sh TRACE_LIB MAIN_LIB
# TRACE_LIB: the study library (0001-study-trace.patch applied to a worktree, then
# `scripts/build_variant_lib.sh build TREE OUT hopper_bwd_hdim64_bf16`), MAIN_LIB: main's; each a libdash_attn.so or
# a .tar.xz holding one at its top (`tar cJf X.tar.xz -C DIR libdash_attn.so`, 1.4 MB), carried with .carry/nvml.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
unpack() {  # LIB DIR
  rm -rf "$2" && mkdir -p "$2"
  if [ "${1%.tar.xz}" != "$1" ]; then tar xJf "$1" -C "$2"; else cp "$1" "$2/"; fi
}
trace_lib=${1:?usage: device_call.sh TRACE_LIB MAIN_LIB}
main_lib=${2:?usage: device_call.sh TRACE_LIB MAIN_LIB}
unpack "$trace_lib" /tmp/trace-lib
here=docs/history/prepared/2026-12-07-bwd-segment-trace
export PYTHONPATH=$PWD/.carry/nvml PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
DASH_ATTN_LIBRARY=/tmp/trace-lib/libdash_attn.so PYTHONPATH=$PWD/python LD_LIBRARY_PATH=/usr/local/cuda/lib64 \
  timeout 150 python3 "$here/trace_segments.py" --out "$out/trace" 2>&1 | tee "$out/trace.log" | grep -v "^    "
echo "trace rc=${PIPESTATUS[0]}"
# The profile folder's call: part 2 (forward beside cuDNN) and part 1 (the backward's plans), main's library.
[ "${PROFILE_S:-300}" -gt 0 ] && timeout "${PROFILE_S:-300}" \
  bash docs/history/prepared/2026-12-06-det-plan-shape-profile/device_call.sh "$main_lib" 2>&1 | grep -v "^  " | tail -40
