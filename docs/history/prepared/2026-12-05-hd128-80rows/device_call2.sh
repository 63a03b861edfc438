#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# device_call2.sh — after device_call1.sh on the same warm machine; carry `.carry/fa4p2`. Unpacks FA4's compiler
# library from its two parts (/tmp/fa4site/ir.so and rt.xz, for device_call3.sh) and runs
# scripts/gpu_record_ab.sh over base, p23 and r80, two interleaved rounds, FA3 in every run. CONFIGS overrides the
# rows (default: head dim 128 full at 2k / 8k / 16k, 2k / 8k causal; head dim 64 2k / 8k causal, 16k full).
set -uo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
[ -d /tmp/prep ] || { echo "no /tmp/prep: the machine went cold; run device_call1.sh first"; exit 3; }
cat /tmp/fa4site/ir.xz.part1 "$root/.carry/fa4p2/ir.xz.part2" | xz -T8 -dc >/tmp/fa4site/ir.so && cp "$root/.carry/fa4p2/rt.xz" /tmp/fa4site/ \
  && echo "fa4 ir unpacked" || echo "fa4 ir NOT unpacked"
fa3=$(find "$root/build-fa3" -name '_C*.so' 2>/dev/null | head -n 1)
[ -n "$fa3" ] || { echo "no FA3 build: run device_call1.sh first on this machine"; exit 1; }
configs=${CONFIGS:-b8_s2048_hq16_hkv16_d128_full,b2_s8192_hq16_hkv16_d128_full,b1_s16384_hq16_hkv16_d128_full,b8_s2048_hq16_hkv16_d128_causal,b2_s8192_hq16_hkv16_d128_causal,b8_s2048_hq32_hkv32_d64_causal,b2_s8192_hq32_hkv32_d64_causal,b1_s16384_hq32_hkv32_d64_full}
"$root/scripts/gpu_record_ab.sh" --fa3 "$fa3" --rounds "${ROUNDS:-2}" --configs "$configs" \
  base=/tmp/prep/base p23=/tmp/prep/p23 r80=/tmp/prep/r80
