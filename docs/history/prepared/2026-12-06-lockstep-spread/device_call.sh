#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# session 37 (study library: experiment-only env vars). (1) spread lock-step offsets (DASH_STUDY_SPREAD 1 = main's
# plans, 2, 8): det auto; (2) head dim 64's det gap decomposed: lock-step vs staggered kernel forced, table plan det /
# non-det, balanced non-det. Interleaved rounds.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
C=${1:?usage: device_call.sh CARRY_DIR (lib.tar.xz of the study library, dash-bench-bwd)}
D=/tmp/kv; rm -rf $D; mkdir -p $D; tar xJf "$C/lib.tar.xz" -C $D; cp "$C/dash-bench-bwd" $D/
export LD_LIBRARY_PATH=$D:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
B="timeout 60 $D/dash-bench-bwd --warmup 100 --iters 30"
for r in 1 2; do
  for cfg in 1,16384,32,32,64,full 2,8192,32,32,64,full 1,16384,32,32,64,causal 2,8192,32,32,64,causal 2,8192,16,16,128,full; do
    for g in 1 2 8; do
      DASH_STUDY_SPREAD=$g $B --config $cfg --schedules auto --commit spread$g --out "$out/spread-r$r-g$g.jsonl" 2>&1 | grep -E " det |failed|refused" | sed "s/^/r$r spread$g /" | tee -a "$out/summary.txt"
    done
  done
  for cfg in 1,16384,32,32,64,full 1,16384,32,32,64,causal 2,8192,32,32,64,full; do
    for k in lockstep staggered; do
      DASH_ATTN_EXPERIMENT_BWD_KERNEL=$k $B --config $cfg --schedules nondet,auto --commit kv-$k --out "$out/kv-r$r-$k-table.jsonl" 2>&1 | grep -E "nondet|det |failed|refused" | sed "s/^/r$r $k table /" | tee -a "$out/summary.txt"
      DASH_ATTN_EXPERIMENT_BWD_KERNEL=$k $B --config $cfg --gqa auto-nondeterministic --schedules nondet --commit kv-$k --out "$out/kv-r$r-$k-balanced.jsonl" 2>&1 | grep -E "nondet|failed|refused" | sed "s/^/r$r $k balanced /" | tee -a "$out/summary.txt"
    done
  done
done
