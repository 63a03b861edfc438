#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_production_bench.sh — one device call for plans in a training job: the busy-SM benchmark (K in {8, 16, 32}
# SMs held by another stream's kernel for 30 ms, every mode and planner, on 2 x 8192 tokens with 16 and 32/8 heads,
# causal and full; time against 1.15 x SMs / (SMs - K) and bits against the unloaded run), the first-call cost of
# new shapes and batch sizes through dash_attn.attention (split into plan, wait and launch, with PyTorch's flash SDPA
# on the same shapes beside), and the host time to plan (dash-bench-plan).
#
#   scripts/gpu_production_bench.sh [--build-dir DIR]
#
# Results go to $OUT (or out/): busy-sms.jsonl / .txt, first-call.jsonl / .txt, plan-build.jsonl / .txt.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
build="$root/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
commit="${DASH_COMMIT:-unknown}"
export DASH_ATTN_LIBRARY="$build/libdash_attn.so" PYTHONPATH="$root/python" PYTHONUNBUFFERED=1
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib "$build"; do  # $build: a carried build's libdash_attn.so
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"

: >"$out/busy-sms.txt"
for config in 2,8192,16,16,128,causal 2,8192,16,16,128,full 2,8192,32,8,128,causal 2,8192,32,8,128,full; do
  timeout 240 "$build/bench/dash-bench-bwd" --config "$config" --busy-ms 30 --busy-ctas 8,16,32 --commit "$commit" \
    --out "$out/busy-$config.jsonl" >>"$out/busy-sms.txt" 2>&1 || echo "busy-SM run $config failed (rc $?)"
done
cat "$out"/busy-*,*.jsonl >"$out/busy-sms.jsonl" && rm -f "$out"/busy-*,*.jsonl
grep -c '"within_bound":true' "$out/busy-sms.jsonl" | sed 's/^/busy-SM rows within the bound: /'
grep -c '"within_bound":false' "$out/busy-sms.jsonl" | sed 's/^/busy-SM rows past the bound: /'
grep '"mode":"deterministic"' "$out/busy-sms.jsonl" | grep -c '"bitwise_identical_to_unloaded":false' |
  sed 's/^/deterministic busy-SM rows whose bits differ from unloaded: /'

timeout 300 python3 "$root/bench/first_call_torch.py" --sdpa --out "$out/first-call.jsonl" --commit "$commit" \
  >"$out/first-call.txt" 2>&1 || echo "first-call run failed (rc $?)"
tail -n 20 "$out/first-call.txt"
timeout 120 "$build/dash-bench-plan" --out "$out/plan-build.jsonl" --commit "$commit" >"$out/plan-build.txt" 2>&1 ||
  echo "plan-build run failed (rc $?)"
cat "$out/plan-build.txt"
