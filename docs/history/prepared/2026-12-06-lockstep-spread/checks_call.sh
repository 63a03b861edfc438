#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The checks of 0001 (README.md here), on the study library with its variables unset (0001's behaviour): the backward
# GoogleTests (0001's GPU test: head dim 64 full 4352, shift, the staggered kernel in the deterministic mode, against
# float64, bitwise over 5 runs, executed order = plan), memcheck and racecheck on that case, and the dQ / dK / dV bits
# of the staggered kernel against the lock-step kernel on the same spaced plans (dash-bench-bwd's gradient hashes).
# Usage on the device: checks_call.sh CARRY_DIR   (study.tar.xz, dash_gpu_bwd_tests, dash-bench-bwd; ~300 s)
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
C=${1:?usage: checks_call.sh CARRY_DIR}
rm -rf /tmp/study && mkdir -p /tmp/study && tar xJf "$C/study.tar.xz" -C /tmp/study
cp "$C/dash_gpu_bwd_tests" "$C/dash-bench-bwd" /tmp/study/
export LD_LIBRARY_PATH=/tmp/study:/usr/local/cuda/lib64
T=/tmp/study/dash_gpu_bwd_tests
new='Schedules/BackwardDeterminism.*4352*'
timeout 240 $T > "$out/gtests.log" 2>&1; echo "gtests rc=$?" | tee -a "$out/summary.txt"; tail -3 "$out/gtests.log" | tee -a "$out/summary.txt"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter="$new" > "$out/memcheck.log" 2>&1
echo "memcheck rc=$?" | tee -a "$out/summary.txt"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | tee -a "$out/summary.txt"
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $T --gtest_filter="$new" > "$out/racecheck.log" 2>&1
echo "racecheck rc=$?" | tee -a "$out/summary.txt"; grep -E "RACECHECK SUMMARY" "$out/racecheck.log" | tee -a "$out/summary.txt"
for cfg in 1,4352,1,1,64,full 2,8192,32,32,64,full 1,16384,32,32,64,full; do
  for k in staggered lockstep; do
    DASH_ATTN_EXPERIMENT_BWD_KERNEL=$k /tmp/study/dash-bench-bwd --config $cfg --schedules auto --warmup 3 --iters 3 \
      --out "$out/hash-$k.jsonl" 2>&1 | grep -E "det " | sed "s/^/$k /" | tee -a "$out/summary.txt"
  done
done
# The deterministic rows' gradient hashes (dash-bench-bwd: fixed-seed inputs) must agree between the two kernels.
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, sys
rows = {k: {(r["config"], r["schedule"]): r["gradient_hash"] for r in map(json.loads, open(f"{sys.argv[1]}/hash-{k}.jsonl"))
            if r["mode"] == "deterministic"} for k in ("staggered", "lockstep")}
for key, h in sorted(rows["staggered"].items()):
    print("bits", "equal" if rows["lockstep"].get(key) == h else "DIFFER", key, h, rows["lockstep"].get(key))
PY
