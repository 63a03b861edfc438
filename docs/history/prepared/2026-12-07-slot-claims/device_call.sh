#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call (~5 min on an H100): slot claims (the study library: lock-step templates split into slots, claimed
# slot by slot across groups of units) against main's library: bits (slot_check.py), then det / non-det `auto` at
# head dim 64 in 2 interleaved rounds of record.py per library, det `auto` with 8 SMs held (margin_ab.py), then
# memcheck on one split shape.
#   bash docs/history/prepared/2026-12-07-slot-claims/device_call.sh MAIN_LIB.tar.xz STUDY_LIB.tar.xz
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
here=docs/history/prepared/2026-12-07-slot-claims
for v in main study; do rm -rf /tmp/$v && mkdir -p /tmp/$v; done
tar xJf "${1:?main lib}" -C /tmp/main && tar xJf "${2:?study lib}" -C /tmp/study
export PYTHONPATH=$PWD/python:$PWD/.carry/nvml LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
DASH_ATTN_LIBRARY=/tmp/main/libdash_attn.so timeout 150 python3 $here/slot_check.py save /tmp/main_grads.pt 2>&1 | tee "$out/check.log"
DASH_STUDY_SLOTS=1 DASH_ATTN_LIBRARY=/tmp/study/libdash_attn.so timeout 150 python3 $here/slot_check.py compare /tmp/main_grads.pt 2>&1 | tee -a "$out/check.log"
echo "check rc=${PIPESTATUS[0]}"
configs=b1_s16384_hq28_hkv28_d64_causal,b1_s16384_hq20_hkv20_d64_causal,b1_s16384_hq32_hkv32_d64_causal
configs+=${MORE_ROWS-,b1_s16384_hq12_hkv12_d64_causal,b1_s8192_hq28_hkv28_d64_full}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in main study; do
    env=(); [ $v = study ] && env=(DASH_STUDY_SLOTS=1)
    env "${env[@]}" DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so timeout 100 python3 bench/record.py --out "$out/ab.jsonl" \
      --no-cudnn --configs "$configs" --schedules auto --repeats 3 --tag "$v-r$round" --commit study 2>&1 \
      | grep "^b" | sed "s/^/$v r$round /" | tee -a "$out/ab.log"
  done
done
for v in main study; do
  env=(); [ $v = study ] && env=(DASH_STUDY_SLOTS=1)
  env "${env[@]}" DASH_ATTN_LIBRARY=/tmp/$v/libdash_attn.so PYTHONPATH=$PYTHONPATH:$PWD/bench timeout 90 \
    python3 $here/margin_ab.py $v 2>&1 | tee -a "$out/margin.log"
done
cat > /tmp/memcheck_one.py <<'PY'
import torch, dash_attn
q, k, v = (torch.randn(3, 4608, 5, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
dash_attn.attention(q, k, v, causal=True, schedule="symmetric-shift", deterministic=True).sum().backward()
torch.cuda.synchronize(); print("ran")
PY
DASH_STUDY_SLOTS=1 DASH_ATTN_LIBRARY=/tmp/study/libdash_attn.so timeout "${MEMCHECK_S:-120}" compute-sanitizer --tool memcheck \
  python3 /tmp/memcheck_one.py 2>&1 | tail -4 | tee "$out/memcheck.log"
