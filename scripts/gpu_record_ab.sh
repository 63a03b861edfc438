#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_record_ab.sh — A/B of builds of dash-attn in one device call: bench/record.py runs once per build per round,
# the builds' order reversed every other round (interleaved, so drift shows as FA3's spread), FA3 timed in every
# run; bench/record_ab.py prints each build's median TFLOP/s and its ratio to the first build.
#
#   scripts/gpu_record_ab.sh [--fa3 SO] [--rounds N] [--configs LIST] [--schedules LIST] [--nondet-schedules LIST]
#                            [--warmup-seconds S] TAG=LIBDIR [TAG=LIBDIR ...]
#
# Each call is timed after 0.2 s of itself (record.py's default; --warmup-seconds 0: 3 warm-up calls only).
# LIBDIR holds a libdash_attn.so (e.g. a build directory, or a folder of carried libraries). Rows go to
# $OUT/ab-<TAG>.jsonl, the comparison to $OUT/ab-summary.txt, the rounds' logs to $OUT/ab-round-logs.tar.gz.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
rounds=2
configs="b2_s8192_hq16_hkv16_d128_causal,b4_s4096_hq16_hkv16_d128_full,b1_s16384_hq16_hkv16_d128_causal,b2_s8192_hq32_hkv32_d64_causal,b2_s8192_hq32_hkv8_d128_causal"
schedules=auto
nondet_schedules=auto
fa3_args=()
warmup_args=()
builds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fa3) fa3_args=(--fa3 "$2"); shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --schedules) schedules="$2"; shift 2 ;;
    --nondet-schedules) nondet_schedules="$2"; shift 2 ;;
    --warmup-seconds) warmup_args=(--warmup-seconds "$2"); shift 2 ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
export PYTHONPATH="$root/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
for dir in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
for round in $(seq 1 "$rounds"); do
  order=("${builds[@]}")
  if [ $((round % 2)) = 0 ]; then  # reversed
    order=(); for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order+=("${builds[$i]}"); done
  fi
  for build in "${order[@]}"; do
    tag="${build%%=*}"; lib="${build#*=}"
    echo "== round $round: $tag ($lib)"
    DASH_ATTN_LIBRARY="$lib/libdash_attn.so" timeout 300 python3 "$root/bench/record.py" --out "$out/ab-$tag.jsonl" \
      --tag "$tag" --configs "$configs" --schedules "$schedules" --nondet-schedules "$nondet_schedules" --no-cudnn --repeats 2 "${fa3_args[@]}" "${warmup_args[@]}" \
      > "$out/ab-$tag-round$round.log" 2>&1 || { echo "record.py failed ($tag):"; tail -5 "$out/ab-$tag-round$round.log"; }
  done
done
files=()
for build in "${builds[@]}"; do files+=("$out/ab-${build%%=*}.jsonl"); done
python3 "$root/bench/record_ab.py" "${files[@]}" | tee "$out/ab-summary.txt"
# A device call returns at most 8 files from $OUT: the rounds' logs travel as one archive, so that every build's rows
# and the summary come back with three builds.
tar -C "$out" -czf "$out/ab-round-logs.tar.gz" $(cd "$out" && ls ab-*-round*.log) && rm -f "$out"/ab-*-round*.log
