#!/usr/bin/env bash
# session 35, minimal: GQA backward A/B (pack rule) first, then forward A/B (skip) on head dim 128 full rows.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
S=.carry/skip
rm -rf /tmp/sk && mkdir -p /tmp/sk/base /tmp/sk/skip && tar xJf $S/base.tar.xz -C /tmp/sk/base && tar xJf $S/skip.tar.xz -C /tmp/sk/skip || exit 3
export PYTHONPATH=$PWD/python:$PWD/bench LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
s0=$SECONDS
OUT=$out/gqa timeout 70 scripts/gpu_record_ab.sh --fa3 $S/fa3_C.so --rounds 2 --configs \
  b2_s8192_hq32_hkv8_d128_causal,b4_s4096_hq28_hkv4_d128_causal \
  base=/tmp/sk/base new=/tmp/sk/skip > "$out/gqa.log" 2>&1; grep -E "dash-attn +(nondeterm|determini)|fa3 +nondeterm" "$out/gqa.log" | head -12
echo "gqa: $((SECONDS-s0)) s"
for round in 1 2; do
  for v in base skip; do
    s0=$SECONDS
    DASH_ATTN_LIBRARY=/tmp/sk/$v/libdash_attn.so FA3_SO=$S/fa3_C.so CALL_ID=s35skip FORWARD_AB_MASK=full FORWARD_AB_HEAD_DIMS=128 timeout 25 python3 bench/forward_ab.py run $v "$out/fwd-ab.jsonl" > "$out/run-$v-$round.log" 2>&1
    echo "$v round $round: $((SECONDS-s0)) s"
  done
done
python3 bench/forward_ab.py summary "$out/fwd-ab.jsonl" > "$out/fwd-ab-summary.txt" 2>&1; cat "$out/fwd-ab-summary.txt"
