#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Device call 1 of the prepared suspend-hint change: checks of the hint library (README.md). Carry .carry/hint
# (base.tar.xz, hint.tar.xz: libdash_attn.so each; fa3_C.so).
set -uo pipefail
here=docs/history/prepared/2026-12-05-mbarrier-suspend-hint
out=${OUT:-out}; mkdir -p "$out"
rm -rf /tmp/hint && mkdir -p /tmp/hint/base /tmp/hint/new && tar xJf .carry/hint/base.tar.xz -C /tmp/hint/base &&
  tar xJf .carry/hint/hint.tar.xz -C /tmp/hint/new && cp .carry/hint/fa3_C.so /tmp/hint/ || exit 3
export PYTHONPATH=$PWD/python LD_LIBRARY_PATH=/usr/local/cuda/lib64 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | tee "$out/gpu.txt"
for lib in base new; do
  DASH_ATTN_LIBRARY=/tmp/hint/$lib/libdash_attn.so timeout 120 python3 $here/bits_and_races.py > "$out/bits-$lib.txt" 2>&1
done
diff <(grep "det=True" "$out/bits-base.txt") <(grep "det=True" "$out/bits-new.txt") && echo "deterministic bits equal" | tee -a "$out/checks.txt"
grep -c "finite=True" "$out/bits-new.txt" | tee -a "$out/checks.txt"
for tool in racecheck memcheck; do
  DASH_ATTN_LIBRARY=/tmp/hint/new/libdash_attn.so timeout 150 compute-sanitizer --tool $tool python3 $here/bits_and_races.py --small \
    2>&1 | tail -4 | tee -a "$out/checks.txt"
done
( cd python && DASH_ATTN_LIBRARY=/tmp/hint/new/libdash_attn.so timeout 200 python3 -m pytest -q tests/test_torch_cuda.py \
    tests/test_plans_in_production.py tests/test_shape_sweep.py -k "cuda or production or nondeterministic" 2>&1 | tail -4 ) | tee -a "$out/checks.txt"
