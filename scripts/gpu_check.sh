#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_check.sh — the one command for the forward kernel on an H200, run from the repository root:
#
#   scripts/gpu_check.sh COMMIT [--sdpa] [--repeat]
#
# Configures the project's CMake tree and builds the forward targets (library, GPU tests, benchmark) with ninja -j16,
# runs the GPU tests, compute-sanitizer memcheck on the "Small" cases, and the forward benchmark; with --sdpa
# also PyTorch SDPA (flash, cuDNN) timings in the same call, with --repeat the bf16 benchmark a second time
# (run-to-run spread, rows tagged variant "default-repeat" in variants.jsonl). Tile experiments edit the head
# dim's row of include/dash/kernel_table.hpp. Outputs go to $OUT (the device tool's folder) or ./out:
#   env.txt build.log tests.log memcheck.log bench.log forward.jsonl [sdpa.jsonl] [variants.jsonl]
# Every step has a timeout, so a hung kernel costs minutes, not the whole call. Needs the CuTe headers in
# .deps/cutlass (scripts/bootstrap.sh) and GoogleTest: the system's, or a source tree in .carry/googletest
# (`mkdir -p .carry && cp -r /usr/src/googletest .carry/` on a machine with Debian's libgtest-dev). Through
# the device tool: run `scripts/gpu_check.sh $(git rev-parse --short HEAD) --sdpa` with
# carry [".deps/cutlass/cutlass_library/source/include", ".carry/googletest"].
set -uo pipefail
commit=${1:?usage: scripts/gpu_check.sh COMMIT [--sdpa] [--repeat]}
shift
run_sdpa=0
run_repeat=0
for arg in "$@"; do
  case $arg in
    --sdpa) run_sdpa=1 ;;
    --repeat) run_repeat=1 ;;
    *) echo "unknown option $arg" >&2; exit 1 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}
mkdir -p "$out"
cutlass=$root/.deps/cutlass/cutlass_library/source/include
build=/tmp/dash-gpu-build
summary=""
note() { summary+="$1"$'\n'; echo "== $1"; }

configure_and_build() {  # dir, targets...
  local dir=$1; shift
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDASH_CUTLASS_INCLUDE_DIR="$cutlass" >/dev/null &&
    ninja -C "$dir" -j16 "$@"
}

{ date -u; nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE | sed -n 1,60p; nvcc --version; cmake --version | head -1
  compute-sanitizer --version | head -2; } >"$out/env.txt" 2>&1

start=$SECONDS
# Only the forward targets (the backward's have scripts/gpu_bwd_check.sh).
if configure_and_build "$build" dash_attn dash_gpu_tests dash-bench-fwd >"$out/build.log" 2>&1; then
  note "build: ok in $((SECONDS - start)) s (16 jobs)"
else
  note "build: FAILED (see build.log)"; tail -40 "$out/build.log"; exit 1
fi
ptxas_lines=$(grep -E "Compiling entry|registers|spill" "$out/build.log")
{ echo "---- ptxas (registers / spills) ----"; echo "$ptxas_lines"
  echo "---- SASS instruction counts in libdash_attn.so ----"
  cuobjdump --dump-sass "$build/libdash_attn.so" | grep -oE "\b(HGMMA\.[0-9A-Za-z]+|MUFU\.EX2|UTMALDG|UTMASTG|STSM|LDL|STL|WARPSYNC|BAR\.SYNC|BAR\.ARV|USETMAXREG)" |
    sort | uniq -c; } >>"$out/build.log" 2>&1

tests=$build/tests/gpu/dash_gpu_tests
start=$SECONDS
timeout 200 "$tests" >"$out/tests.log" 2>&1
rc=$?
note "tests: exit $rc in $((SECONDS - start)) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/tests.log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" "$out/tests.log" | head -20

bench=$build/bench/dash-bench-fwd
start=$SECONDS
{ timeout 120 "$bench" --out "$out/forward.jsonl" --commit "$commit" --variant default --dtype bf16
  timeout 60 "$bench" --out "$out/forward.jsonl" --commit "$commit" --variant default --dtype fp16 --only-hdim 128
} >"$out/bench.log" 2>&1
note "bench: exit $? in $((SECONDS - start)) s"

start=$SECONDS
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 17 "$tests" --gtest_filter='*Small*:ForwardBehaviour.*' \
  >"$out/memcheck.log" 2>&1
rc=$?
note "memcheck (Small cases): exit $rc in $((SECONDS - start)) s; $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"

# Optional steps only while the call has time left (the device tool stops a command at 600 s).
if [ $run_sdpa = 1 ] && [ $SECONDS -lt 360 ]; then
  start=$SECONDS
  timeout 120 env PYTHONUNBUFFERED=1 python3 "$root/bench/sdpa_reference.py" --out "$out/sdpa.jsonl" --commit "$commit" \
    >>"$out/bench.log" 2>&1
  note "sdpa references: exit $? in $((SECONDS - start)) s"
fi

if [ $run_repeat = 1 ]; then
  start=$SECONDS
  echo "---- repeat of the default bf16 benchmark ----" >>"$out/bench.log"
  timeout 90 "$bench" --out "$out/variants.jsonl" --commit "$commit" --variant default-repeat --dtype bf16 \
    >>"$out/bench.log" 2>&1
  note "bench repeat: exit $? in $((SECONDS - start)) s"
fi

echo
echo "================ summary ================"
printf '%s' "$summary"
echo "---- default bf16 / fp16 ----"
sed -n "1,45p" "$out/bench.log"
