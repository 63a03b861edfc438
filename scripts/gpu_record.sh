#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_record.sh — one device call for the benchmark of record (bench/record.py: dash-attn beside FA3, cuDNN and, when
# importable, FA4, in one process) and, optionally, Nsight Compute profiles of our backward kernel and FA3's on the
# same configs (details + per-SASS stall samples as CSV, summarised by scripts/ncu_stalls.py).
#
#   scripts/gpu_record.sh --build-dir DIR --fa3 SO [--quick] [--long | --long-only] [--fa4 | --fa4-site WHEELS]
#                         [--profile CONFIG,...] [--mode M] [--no-record] [--configs LIST]
#                         [--profile-impls "dash-attn fa3"] [--warmup-seconds S] [--repeats N]
#                         [--order shuffle|rotate] [--nondet-schedules LIST] [--schedules LIST] [--no-cudnn]
#
# DIR may be a .tar.xz holding libdash_attn.so at its top, and SO an .xz of the _C.so (both unpacked under /tmp):
# what a device call carries from the development machine. --fa4-site WHEELS installs FA4 from the folder that
# scripts/fa4_carry.sh writes (.carry/fa4w; `scripts/gpu_fa4_site.sh install`, after its part1 and part2 calls on the
# same warm machine) and times it (--fa4).
#
# --profile-impls takes impl names (profiled in --mode, dash-attn with schedule auto) or whole record.py keys
# IMPL/MODE/SCHEDULE (e.g. dash-attn/nondeterministic/symmetric-shift, with --nondet-schedules naming it).
#
# record.py times each call after 0.2 s of itself (the power-capped state) in a shuffled order per repeat; the full
# record with FA4 took 410 s of the 560 allowed below at e1c69e3, so --long goes in a call of its own.
#
# SO is FA3 upstream's _C.so built from shared/fa3kit (`build.py upstream DIR`; build it on the development machine
# and carry it, 6 MB, or build it on the H200). Outputs go to $OUT (or out/): record-<commit>.jsonl, record.log, and
# ncu-<impl>-<config>.tar.gz per profile with ncu-summary.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${OUT:-$root/out}"
mkdir -p "$out"
build="$root/build"
fa3=""
record_args=()
only_args=()  # what record.py --only needs beside the key
profiles=""
mode=nondeterministic
record=1
profile_impls="dash-attn fa3"
fa4_site=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --fa3) fa3="$2"; shift 2 ;;
    --quick|--long|--long-only|--fa4|--no-cudnn) record_args+=("$1"); shift ;;
    --fa4-site) fa4_site="$2"; record_args+=(--fa4); shift 2 ;;
    --configs) record_args+=(--configs "$2"); shift 2 ;;
    --warmup-seconds) record_args+=(--warmup-seconds "$2"); shift 2 ;;  # the sustained power state (record.py)
    --repeats|--order|--schedules) record_args+=("$1" "$2"); shift 2 ;;  # --schedules: record.py's, for the det rows
    --nondet-schedules) record_args+=("$1" "$2"); only_args+=("$1" "$2"); shift 2 ;;
    --profile) profiles="$2"; shift 2 ;;
    --mode) mode="$2"; shift 2 ;;
    --no-record) record=0; shift ;;
    --profile-impls) profile_impls="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
if [ "${build%.tar.xz}" != "$build" ]; then  # a carried archive of the library
  rm -rf /tmp/dash-record-lib && mkdir -p /tmp/dash-record-lib && tar xJf "$build" -C /tmp/dash-record-lib || exit 3
  build=/tmp/dash-record-lib
fi
if [ "${fa3%.xz}" != "$fa3" ]; then  # a carried, compressed FA3 _C.so
  mkdir -p /tmp/dash-record-fa3 && xz -dc "$fa3" >/tmp/dash-record-fa3/_C.so || exit 3
  fa3=/tmp/dash-record-fa3/_C.so
fi
if [ -n "$fa4_site" ]; then
  site=$(bash "$root/scripts/gpu_fa4_site.sh" install "$fa4_site") || { echo "gpu_record.sh: FA4's install failed"; exit 3; }
  export PYTHONPATH="$site:${PYTHONPATH:-}"
fi
export DASH_ATTN_LIBRARY="$build/libdash_attn.so" PYTHONPATH="$root/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
for dir in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__))' 2>/dev/null)/cuda_runtime/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done
commit=${DASH_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
[ -z "${DASH_COMMIT:-}" ] && [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit-dirty"
fa3_args=()
[ -n "$fa3" ] && fa3_args=(--fa3 "$fa3")

if [ "$record" = 1 ]; then
  timeout 560 python3 "$root/bench/record.py" --out "$out/record-$commit.jsonl" --commit "$commit" "${fa3_args[@]}" \
    "${record_args[@]}" 2>&1 | tee "$out/record.log" | tail -60
fi

# Profiles (--mode nondeterministic, deterministic or forward): the third launch of the kernel in `record.py --only`
# (two warm-ups before it).
IFS=, read -r -a configs <<<"$profiles"
for config in "${configs[@]}"; do
  [ -z "$config" ] && continue
  for name in $profile_impls; do
    impl="$name/$mode"
    [ "$name" = dash-attn ] && [ "$mode" != forward ] && impl="$impl/auto"
    kernel_mode=$mode
    tag="$name-$mode-$config"
    if [ "${name#*/}" != "$name" ]; then  # a whole key IMPL/MODE/SCHEDULE
      impl=$name; kernel_mode=$(echo "$name" | cut -d/ -f2); name=${name%%/*}
      tag="$(echo "$impl" | tr / -)-$config"
    fi
    [ "$name" = fa3 ] && [ -z "$fa3" ] && continue
    # FA3's kernels are all cutlass::device_kernel<...>: match the main one on its demangled template argument.
    if [ "$kernel_mode" = forward ]; then
      name_args=(--kernel-name regex:forward_kernel)
      [ "$name" = fa3 ] && name_args=(--kernel-name-base demangled --kernel-name regex:FlashAttnFwdSm90)
    else
      name_args=(--kernel-name regex:backward_kernel)
      [ "$name" = fa3 ] && name_args=(--kernel-name-base demangled --kernel-name regex:FlashAttnBwdSm90)
    fi
    tmp=$(mktemp -d)
    timeout 240 ncu --clock-control none "${name_args[@]}" --launch-skip 2 --launch-count 1 --set full \
      --metrics sm__cycles_active.min,sm__cycles_active.max \
      --import-source no -f -o "$tmp/prof" \
      python3 "$root/bench/record.py" --out /dev/null --configs "$config" --only "$impl" "${fa3_args[@]}" "${only_args[@]}" \
      >"$tmp/ncu-run.log" 2>&1
    echo "ncu rc=$? ($tag)"; tail -3 "$tmp/ncu-run.log"
    ncu -i "$tmp/prof.ncu-rep" --page details --csv >"$tmp/details.csv" 2>&1
    ncu -i "$tmp/prof.ncu-rep" --page source --csv --print-source sass >"$tmp/source.csv" 2>&1
    { echo "== $tag"
      python3 "$root/scripts/ncu_headline.py" "$tmp/details.csv"
      python3 "$root/scripts/ncu_stalls.py" "$tmp/source.csv" --top 16; } 2>&1 | tee -a "$out/ncu-summary.log"
    tar -C "$tmp" -czf "$out/ncu-$tag.tar.gz" details.csv source.csv ncu-run.log
    rm -rf "$tmp"
  done
done
