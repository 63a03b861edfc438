#!/usr/bin/env bash
# The forward's long head-dim-128 rows in the sustained state: ours and FA3's SM clock and power per row (issue 14).
# Usage on the device: device_call.sh LIB_TARBALL FA3_SO NVML_WHEEL   (carry the three; ~150 s)
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
lib_tar=$1 fa3=$2 nvml=$3
rm -rf /tmp/fp && mkdir -p /tmp/fp && tar xJf "$lib_tar" -C /tmp/fp || exit 3
export PYTHONPATH=$PWD/python:$PWD/bench:$PWD/$nvml LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
export DASH_ATTN_LIBRARY=/tmp/fp/libdash_attn.so FA3_SO=$fa3 FORWARD_AB_HEAD_DIMS=128 CALL_ID=fwdpower
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import pynvml, torch; print('pynvml', pynvml.__file__, torch.cuda.clock_rate())" | tee -a "$out/gpu.txt"
# A log of the board's state every 100 ms beside the per-row readings (throttle reasons say whether power capped it).
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 100 \
  > "$out/smi.csv" 2>&1 &
smi=$!
for round in 1 2; do
  # One file per state: forward_ab names FA3's rows "fa3" whatever the state.
  FORWARD_AB_WARMUP_SECONDS=0.2 timeout 120 python3 bench/forward_ab.py run base "$out/fwd-sustained.jsonl" > "$out/run-s-$round.log" 2>&1 || tail -3 "$out/run-s-$round.log"
  FORWARD_AB_WARMUP_SECONDS=0 timeout 120 python3 bench/forward_ab.py run base "$out/fwd-unsustained.jsonl" > "$out/run-u-$round.log" 2>&1 || tail -3 "$out/run-u-$round.log"
done
kill $smi
for state in sustained unsustained; do
  echo "== $state"; python3 bench/forward_ab.py summary "$out/fwd-$state.jsonl"
done | tee "$out/summary.txt"
