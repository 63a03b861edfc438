#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Device call 2 (right after call 1, warm machine): A/B of the hint library against main's, FA3 in every run, 2 rounds.
set -uo pipefail
[ -f /tmp/hint/new/libdash_attn.so ] || { echo "cold machine: run device_call1.sh first"; exit 3; }
scripts/gpu_record_ab.sh --fa3 /tmp/hint/fa3_C.so --rounds 2 --configs \
  b32_s512_hq16_hkv16_d128_causal,b8_s2048_hq16_hkv16_d128_causal,b4_s4096_hq16_hkv16_d128_full,b1_s16384_hq16_hkv16_d128_full,b8_s2048_hq32_hkv32_d64_causal,b1_s16384_hq32_hkv32_d64_causal,b1_s16384_hq32_hkv32_d64_full,b4_s4096_hq28_hkv4_d128_causal \
  base=/tmp/hint/base hint=/tmp/hint/new 2>&1 | tail -60
