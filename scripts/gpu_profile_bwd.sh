#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_profile_bwd.sh — Nsight Compute profile of one backward launch, for kernel work (docs/history/kernel-notes-bwd*.md).
# Exports the details page (speed of light, warp states, occupancy) and the per-SASS-instruction source page
# (warp stall samples) as CSV, packed into $OUT/ncu-<tag>.tar.gz. Expects a build with dash-bench-bwd.
#
#   scripts/gpu_profile_bwd.sh BUILD_DIR TAG CONFIG SCHEDULE      e.g. build-bwd nondet 1,16384,16,16,128,full nondet
set -uo pipefail
build="$1"; tag="$2"; config="$3"; schedule="$4"
out="${OUT:-out}"
tmp=$(mktemp -d)
# Launch 2 of the bench's sequence (warmup, timed, 3 hashed runs) is the timed one.
timeout 300 ncu --clock-control none --kernel-name regex:backward_kernel --launch-skip 1 --launch-count 1 \
  --set full --import-source no -f -o "$tmp/prof" \
  "$build/bench/dash-bench-bwd" --config "$config" --schedules "$schedule" --warmup 1 --iters 1 --out "$tmp/bench.jsonl" \
  >"$tmp/ncu-run.log" 2>&1
echo "ncu rc=$? ($tag)"; tail -4 "$tmp/ncu-run.log"
ncu -i "$tmp/prof.ncu-rep" --page details --csv >"$tmp/details.csv" 2>&1
ncu -i "$tmp/prof.ncu-rep" --page source --csv --print-source sass >"$tmp/source.csv" 2>&1
wc -c "$tmp"/*.csv
tar -C "$tmp" -czf "$out/ncu-$tag.tar.gz" details.csv source.csv ncu-run.log
rm -rf "$tmp"
