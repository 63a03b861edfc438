#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# device_ab.sh — device call 2 (and 3) of this series (README.md here), after device_checks.sh on the same machine
# or with `.carry/prep.tar.xz` carried again: FA3 upstream built once into build-fa3/ (kept while the machine stays
# warm), then scripts/gpu_record_ab.sh over the builds named, two interleaved rounds, FA3 in every run.
#
#   bash docs/history/prepared/2026-12-05-hd64-visit/device_ab.sh base p1 p2 p3    # call 2
#   bash docs/history/prepared/2026-12-05-hd64-visit/device_ab.sh base p3 p4 p5    # call 3
#
# CONFIGS overrides the rows (default: head dim 64 at 2k / 8k / 16k causal and 16k full, head dim 128 at 2k causal).
set -uo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
[ -d /tmp/prep ] || tar xJf "$root/.carry/prep.tar.xz" -C /tmp
fa3_dir="$root/build-fa3"
fa3=$(find "$fa3_dir" -name "_C*.so" 2>/dev/null | head -n 1)
if [ -z "$fa3" ]; then
  tar xzf /tmp/prep/fa3kit.tar.gz -C /tmp
  MAX_JOBS=16 python3 /tmp/.fa3kit/build.py upstream "$fa3_dir" >"${OUT:-/tmp}/fa3-build.log" 2>&1
  fa3=$(find "$fa3_dir" -name "_C*.so" | head -n 1)
  [ -n "$fa3" ] || { echo "FA3 build failed"; tail -20 "${OUT:-/tmp}/fa3-build.log"; exit 1; }
fi
configs=${CONFIGS:-b8_s2048_hq32_hkv32_d64_causal,b2_s8192_hq32_hkv32_d64_causal,b1_s16384_hq32_hkv32_d64_causal,b1_s16384_hq32_hkv32_d64_full,b8_s2048_hq16_hkv16_d128_causal}
builds=()
for tag in "$@"; do builds+=("$tag=/tmp/prep/$tag"); done
"$root/scripts/gpu_record_ab.sh" --fa3 "$fa3" --rounds 2 --configs "$configs" "${builds[@]}"
