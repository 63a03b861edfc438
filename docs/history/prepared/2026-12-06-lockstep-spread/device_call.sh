#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The A/B and study call (README.md here). Two interleaved rounds, base (main's library) and the study library (0001 +
# 0002; unset variables = 0001's behaviour), both with main's dash-bench-bwd:
# (1) det `auto`: base; study at spacing 1 (main's plans), 2 (0001) and 4, each with the launcher's kernel choice,
#     and at spacing 2 with the lock-step kernel forced;
# (2) non-det `auto` (table plan) and the balanced plan with either kernel forced (the study library, spacing 1).
# Usage on the device: device_call.sh CARRY_DIR   (base.tar.xz, study.tar.xz, dash-bench-bwd; ~250 s)
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
C=${1:?usage: device_call.sh CARRY_DIR}
for v in base study; do
  rm -rf /tmp/$v && mkdir -p /tmp/$v && tar xJf "$C/$v.tar.xz" -C /tmp/$v && cp "$C/dash-bench-bwd" /tmp/$v/
done
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
row() {  # tag, library, kernel (or -), spacing (or -), then dash-bench-bwd arguments
  local tag=$1 lib=$2 k=$3 g=$4; shift 4
  local env=(LD_LIBRARY_PATH=/tmp/$lib:/usr/local/cuda/lib64)
  [ "$k" != - ] && env+=(DASH_ATTN_EXPERIMENT_BWD_KERNEL=$k)
  [ "$g" != - ] && env+=(DASH_STUDY_SPREAD=$g)
  env "${env[@]}" timeout 60 /tmp/$lib/dash-bench-bwd --warmup 100 --iters 30 "$@" --commit "$tag" \
    --out "$out/$tag.jsonl" 2>&1 | grep -E "det |failed|refused" | sed "s/^/$tag /" | tee -a "$out/summary.txt"
}
for r in 1 2; do
  for cfg in 1,16384,32,32,64,full 2,8192,32,32,64,full 4,4096,32,32,64,full 8,2048,32,32,64,full \
             1,16384,32,32,64,causal 2,8192,16,16,128,full 1,16384,16,16,128,full; do
    row "r$r-base" base - - --config $cfg --schedules nondet,auto
    for g in 1 2 4; do row "r$r-study-g$g" study - $g --config $cfg --schedules auto; done
    case $cfg in *,64,full) row "r$r-study-g2-lockstep" study lockstep 2 --config $cfg --schedules auto ;; esac
  done
  for cfg in 1,16384,32,32,64,full 1,16384,32,32,64,causal; do
    for k in lockstep staggered; do
      row "r$r-nondet-table-$k" study $k 1 --config $cfg --schedules nondet
      row "r$r-nondet-balanced-$k" study $k 1 --config $cfg --gqa auto-nondeterministic --schedules nondet
    done
  done
done
