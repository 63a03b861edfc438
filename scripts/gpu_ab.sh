#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_ab.sh — one device call comparing two builds of dash-attn in the same call: the backward (non-deterministic
# and deterministic `auto`) and forward benchmarks over the protocol grid, interleaved (base, new, new, base, ...),
# then the SHA-256 of dQ / dK / dV of both builds for every deterministic planner on a few shapes.
#
#   scripts/gpu_ab.sh BASE_DIR NEW_BUILD_DIR [--repeats N] [--no-forward] [--no-bits] [--schedules LIST]
#
# BASE_DIR holds libdash_attn.so, dash-bench-bwd, dash-bench-fwd and dash-attn of the baseline (copied from its
# build/ and bench/ folders); NEW_BUILD_DIR is a scripts/build.sh tree. Carry both to the GPU machine. Results go to
# $OUT (or out/): base-*.jsonl, new-*.jsonl, ab-summary.json, bits.txt; the last lines are the comparison.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
base=$(cd "${1:?usage: scripts/gpu_ab.sh BASE_DIR NEW_BUILD_DIR}" && pwd)
new=$(cd "${2:?usage: scripts/gpu_ab.sh BASE_DIR NEW_BUILD_DIR}" && pwd)
shift 2
repeats=2
schedules=nondet,auto  # dash-bench-bwd --schedules: nondet and the deterministic schedules to time
forward=1
bits=1
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    --no-forward) forward=0; shift ;;
    --no-bits) bits=0; shift ;;
    --schedules) schedules="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
cuda_libs=/usr/local/cuda/lib64:/usr/local/cuda/lib
# Each build runs with its own library first on the loader's path (LD_LIBRARY_PATH wins over the RUNPATH).
run_base() { LD_LIBRARY_PATH="$base:$cuda_libs" "$@"; }
run_new() { LD_LIBRARY_PATH="$new:$cuda_libs" "$@"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader

bench_pair() {  # which (base|new), repeat
  local which=$1 r=$2 dir bin_bwd bin_fwd runner
  if [ "$which" = base ]; then runner=run_base; bin_bwd="$base/dash-bench-bwd"; bin_fwd="$base/dash-bench-fwd"
  else runner=run_new; bin_bwd="$new/bench/dash-bench-bwd"; bin_fwd="$new/bench/dash-bench-fwd"; fi
  $runner timeout 240 "$bin_bwd" --out "$out/$which-bwd-$r.jsonl" --commit "$which" --schedules "$schedules" \
    >"$out/$which-bwd-$r.log" 2>&1 || echo "$which backward run $r failed (rc $?): $(tail -2 "$out/$which-bwd-$r.log")"
  if [ "$forward" = 1 ]; then
    $runner timeout 120 "$bin_fwd" --out "$out/$which-fwd-$r.jsonl" --commit "$which" --cooldown-ms 100 \
      >"$out/$which-fwd-$r.log" 2>&1 || echo "$which forward run $r failed (rc $?)"
  fi
}
for r in $(seq 1 "$repeats"); do
  # Alternate the order so that a drift in clocks or temperature does not favour one build.
  if [ $((r % 2)) = 1 ]; then bench_pair base "$r"; bench_pair new "$r"; else bench_pair new "$r"; bench_pair base "$r"; fi
  echo "repeat $r done at ${SECONDS}s"
done

if [ "$bits" = 1 ]; then
  : >"$out/bits.txt"
  same=0; differ=0
  for shape in "--batch 2 --seqlen 2048 --heads 16 --hdim 128 --causal" \
               "--batch 2 --seqlen 1000 --heads 8 --heads-kv 2 --hdim 64" \
               "--batch 1 --seqlen 4096 --heads 32 --heads-kv 8 --hdim 128 --causal" \
               "--batch 2 --seqlen 3000 --seqlen-k 2000 --heads 4 --hdim 64 --causal"; do
    for schedule in ascending descending shift symmetric-shift auto; do
      hb=$(run_base "$base/dash-attn" check $shape --schedule "$schedule" --runs 2 2>&1 | awk '$1 == "1" {print $2, $3, $4}')
      hn=$(run_new "$new/dash-attn" check $shape --schedule "$schedule" --runs 2 2>&1 | awk '$1 == "1" {print $2, $3, $4}')
      if [ -n "$hb" ] && [ "$hb" = "$hn" ]; then verdict=same; same=$((same + 1)); else verdict=DIFFER; differ=$((differ + 1)); fi
      echo "$verdict $schedule $shape | base ${hb:-none} | new ${hn:-none}" >>"$out/bits.txt"
    done
  done
  echo "bits: $same same, $differ differ (bits.txt)"
fi

python3 "$root/scripts/ab_compare.py" --base "$out"/base-*.jsonl --new "$out"/new-*.jsonl --threshold 0.03 \
  --out "$out/ab-summary.json" | tee "$out/ab-table.txt" | tail -25
