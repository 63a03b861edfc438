#!/usr/bin/env bash
# session 35, lean: forward A/B (skip), GQA backward A/B (pack rule), then checks; each step capped.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
S=.carry/skip
rm -rf /tmp/sk && mkdir -p /tmp/sk/base /tmp/sk/skip && tar xJf $S/base.tar.xz -C /tmp/sk/base && tar xJf $S/skip.tar.xz -C /tmp/sk/skip || exit 3
export PYTHONPATH=$PWD/python:$PWD/bench LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
for round in 1 2; do
  for v in base skip; do
    s0=$SECONDS
    DASH_ATTN_LIBRARY=/tmp/sk/$v/libdash_attn.so FA3_SO=$S/fa3_C.so CALL_ID=s35skip FORWARD_AB_HEAD_DIMS=128 timeout 45 python3 bench/forward_ab.py run $v "$out/fwd-ab.jsonl" > "$out/run-$v-$round.log" 2>&1
    echo "$v round $round: $((SECONDS-s0)) s"
  done
done
python3 bench/forward_ab.py summary "$out/fwd-ab.jsonl" > "$out/fwd-ab-summary.txt" 2>&1; cat "$out/fwd-ab-summary.txt"
s0=$SECONDS
OUT=$out/gqa timeout 80 scripts/gpu_record_ab.sh --fa3 $S/fa3_C.so --rounds 2 --configs \
  b2_s8192_hq32_hkv8_d128_causal,b4_s4096_hq28_hkv4_d128_causal,b4_s4096_hq32_hkv8_d128_causal \
  base=/tmp/sk/base new=/tmp/sk/skip > "$out/gqa.log" 2>&1; grep -E "dash-attn +(nondeterm|determini)|fa3 +nondeterm" "$out/gqa.log" | head -20
echo "gqa: $((SECONDS-s0)) s"
LD_LIBRARY_PATH=/tmp/sk/skip:/usr/local/cuda/lib64 timeout 40 $S/dash_gpu_tests --gtest_brief=1 --gtest_filter='*Forward*' 2>&1 | tail -3 | tee "$out/checks.txt"
LD_LIBRARY_PATH=/tmp/sk/skip:/usr/local/cuda/lib64 timeout 40 compute-sanitizer --tool memcheck $S/dash_gpu_tests --gtest_filter='Cases/ForwardAccuracy.MatchesReference/Persistent_777x1200_causal_d128_bf16:Cases/ForwardAccuracy.MatchesReference/Persistent_1500x300_causal_d64_bf16:Cases/ForwardAccuracy.MatchesReference/Cross_1000x1_causal_d128_fp16' --gtest_brief=1 2>&1 | tail -2 | tee -a "$out/checks.txt"
