#!/usr/bin/env bash
# Forward O-rescale skip: forward A/B (base = main's lib, skip = patched), FA3 in every run; a GQA backward A/B; then checks.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
S=.carry/skip
rm -rf /tmp/sk && mkdir -p /tmp/sk/base /tmp/sk/skip && tar xJf $S/base.tar.xz -C /tmp/sk/base && tar xJf $S/skip.tar.xz -C /tmp/sk/skip || exit 3
export PYTHONPATH=$PWD/python:$PWD/bench LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
for round in 1 2; do
  for v in base skip; do
    DASH_ATTN_LIBRARY=/tmp/sk/$v/libdash_attn.so FA3_SO=$S/fa3_C.so CALL_ID=s35skip FORWARD_AB_HEAD_DIMS=128 timeout 60 python3 bench/forward_ab.py run $v "$out/fwd-ab.jsonl" > "$out/run-$v-$round.log" 2>&1 || tail -3 "$out/run-$v-$round.log"
  done
done
python3 bench/forward_ab.py summary "$out/fwd-ab.jsonl" | tee "$out/fwd-ab-summary.txt"
# the non-deterministic GQA rule (packed only with 3 rounds of items): backward A/B on the GQA rows it changes + a control
OUT=$out/gqa timeout 120 scripts/gpu_record_ab.sh --fa3 $S/fa3_C.so --rounds 2 --configs \
  b2_s8192_hq32_hkv8_d128_causal,b4_s4096_hq28_hkv4_d128_causal,b4_s4096_hq32_hkv8_d128_causal \
  base=/tmp/sk/base new=/tmp/sk/skip 2>&1 | grep -E "nondeterm|determini" | grep dash-attn
# correctness of the new forward: GoogleTests (forward), sanitizers, python sweep of forward cases
LD_LIBRARY_PATH=/tmp/sk/skip:/usr/local/cuda/lib64 timeout 60 $S/dash_gpu_tests --gtest_brief=1 --gtest_filter='*Forward*' 2>&1 | tail -4 | tee "$out/checks.txt"
for tool in memcheck; do
  LD_LIBRARY_PATH=/tmp/sk/skip:/usr/local/cuda/lib64 timeout 50 compute-sanitizer --tool $tool $S/dash_gpu_tests --gtest_filter='Cases/ForwardAccuracy.MatchesReference/Persistent_777x1200_causal_d128_bf16:Cases/ForwardAccuracy.MatchesReference/Persistent_1500x300_causal_d64_bf16:Cases/ForwardAccuracy.MatchesReference/Cross_1000x1_causal_d128_fp16:*window*d128_bf16' --gtest_brief=1 2>&1 | tail -3 | tee -a "$out/checks.txt"
done
( cd python && DASH_ATTN_LIBRARY=/tmp/sk/skip/libdash_attn.so timeout 60 python3 -m pytest -q -x tests/test_shape_sweep.py tests/test_torch_cuda.py -k "forward or fwd or gqa" 2>&1 | tail -3 ) | tee -a "$out/checks.txt"
