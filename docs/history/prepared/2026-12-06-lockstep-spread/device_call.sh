#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Study library (experiment-only environment variables; README.md here). Two interleaved rounds of:
# (1) det `auto` with the lock-step offsets spread g Q tiles apart (DASH_STUDY_SPREAD; 1 = main's plans), with the
#     lock-step kernel (g = 1, 2, 8) and with the staggered kernel forced (g = 1, 2);
# (2) the non-deterministic rows with either kernel forced: the table's plan and the balanced plan.
# Usage on the device: device_call.sh CARRY_DIR   (CARRY_DIR holds lib.tar.xz and dash-bench-bwd; ~200 s)
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
C=${1:?usage: device_call.sh CARRY_DIR (lib.tar.xz of the study library, dash-bench-bwd)}
D=/tmp/kv; rm -rf $D; mkdir -p $D; tar xJf "$C/lib.tar.xz" -C $D; cp "$C/dash-bench-bwd" $D/
export LD_LIBRARY_PATH=$D:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
B="timeout 60 $D/dash-bench-bwd --warmup 100 --iters 30"
row() {  # tag, kernel, spread, then dash-bench-bwd arguments
  local tag=$1 k=$2 g=$3; shift 3
  DASH_ATTN_EXPERIMENT_BWD_KERNEL=$k DASH_STUDY_SPREAD=$g $B "$@" --commit "$tag" --out "$out/$tag.jsonl" 2>&1 |
    grep -E "det |failed|refused" | sed "s/^/$tag /" | tee -a "$out/summary.txt"
}
for r in 1 2; do
  for cfg in 1,16384,32,32,64,full 2,8192,32,32,64,full 4,4096,32,32,64,full 1,16384,32,32,64,causal \
             2,8192,32,32,64,causal 2,8192,16,16,128,full; do
    for g in 1 2 8; do row "r$r-det-lockstep-g$g" lockstep $g --config $cfg --schedules auto; done
    case $cfg in *,64,*) for g in 1 2; do row "r$r-det-staggered-g$g" staggered $g --config $cfg --schedules auto; done ;; esac
  done
  for cfg in 1,16384,32,32,64,full 1,16384,32,32,64,causal 2,8192,32,32,64,full; do
    for k in lockstep staggered; do
      row "r$r-nondet-table-$k" $k 1 --config $cfg --schedules nondet
      row "r$r-nondet-balanced-$k" $k 1 --config $cfg --gqa auto-nondeterministic --schedules nondet
    done
  done
done
