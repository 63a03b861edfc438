#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Why the deterministic plan at head dim 64 16k causal (symmetric shift, 16 lock-step items of 4 pairs, staggered
# kernel) runs 6-13% below the balanced non-deterministic plan on the same kernel (README beside this file). One
# device call, main's library only (no peers but cuDNN in part 2, ~6 min on an H100).
# Part 1: Nsight Compute on the backward kernel of three runs of one config (scripts/gpu_record.sh --profile) - det
# auto (symmetric shift), non-det auto (the balanced plan), non-det symmetric shift (the det plan without its waits) -
# then a short timing of the same three as a cross-check.
# Run from the repository root: bash docs/history/prepared/2026-12-06-det-plan-shape-profile/device_call.sh LIB
# LIB: a libdash_attn.so, or a .tar.xz holding one at its top (main's library packed on the development machine:
# `tar cJf .carry/X/main.tar.xz -C build libdash_attn.so`, 1.4 MB, and `carry` names .carry/X).
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
lib=${1:?usage: device_call.sh LIB (libdash_attn.so or a .tar.xz holding it)}
libdir=/tmp/profile-lib
rm -rf "$libdir" && mkdir -p "$libdir"
if [ "${lib%.tar.xz}" != "$lib" ]; then tar xJf "$lib" -C "$libdir"; else cp "$lib" "$libdir/"; fi
export PYTHONPATH=$PWD/.carry/nvml PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
config=${CONFIG:-b1_s16384_hq32_hkv32_d64_causal}
OUT=$out bash scripts/gpu_record.sh --build-dir "$libdir" --no-record --profile "$config" --nondet-schedules auto,symmetric-shift \
  --profile-impls "dash-attn/deterministic/auto dash-attn/nondeterministic/auto dash-attn/nondeterministic/symmetric-shift"
DASH_ATTN_LIBRARY=$libdir/libdash_attn.so PYTHONPATH=$PWD/python:$PYTHONPATH LD_LIBRARY_PATH=/usr/local/cuda/lib64 \
  timeout 120 python3 bench/record.py --out "$out/timing.jsonl" --no-cudnn --configs "$config" --schedules auto \
  --nondet-schedules auto,symmetric-shift --repeats 5 2>&1 | tail -12
# Part 2 (FWD=0 skips it): the forward at head dim 128 512 causal beside cuDNN's, the row that misses against cuDNN
# per MHz in every record (0.90-0.93) and was never profiled (head dim 64's was, session 39).
if [ "${FWD:-1}" = 1 ]; then
  tmp=$(mktemp -d)
  DASH_ATTN_LIBRARY=$libdir/libdash_attn.so PYTHONPATH=$PWD/python LD_LIBRARY_PATH=/usr/local/cuda/lib64 \
    timeout 200 ncu --profile-from-start off --set full --clock-control none --import-source no -f -o "$tmp/prof" \
    python3 bench/ncu_forward_beside_cudnn.py 32 512 16 128 > "$tmp/ncu-run.log" 2>&1
  echo "ncu rc=$? (forward beside cuDNN)"; tail -2 "$tmp/ncu-run.log"
  ncu -i "$tmp/prof.ncu-rep" --page details --csv > "$tmp/details.csv" 2>&1
  ncu -i "$tmp/prof.ncu-rep" --page source --csv --print-source sass > "$tmp/source.csv" 2>&1
  { echo "== forward d128 512 causal, ours and cuDNN's (two launches each)"; python3 scripts/ncu_headline.py "$tmp/details.csv"; } \
    2>&1 | tee -a "$out/ncu-summary.log"
  tar -C "$tmp" -czf "$out/ncu-fwd-d128-512-causal-cudnn.tar.gz" details.csv source.csv ncu-run.log
  rm -rf "$tmp"
fi
