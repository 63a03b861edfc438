#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# device_call3.sh BUILD COMMIT — after device_call1.sh and device_call2.sh on the same warm machine (FA3's build and
# FA4's compiler library are there); carry `.carry/fa4w`. Installs FA4 (scripts/gpu_fa4_site.sh, /tmp/site), then
# runs the benchmark of record with FA4 (scripts/gpu_record.sh --fa4, 30 rows, sustained state, shuffled, three repeats) of the carried build BUILD (base, p23 or r80), its rows labelled COMMIT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
rm -rf /tmp/fa4dir && mkdir -p /tmp/fa4dir && cp "$root"/.carry/fa4w/* /tmp/fa4dir/ && cp /tmp/fa4site/rt.xz /tmp/fa4dir/
bash "$root/scripts/gpu_fa4_site.sh" /tmp/fa4dir >/tmp/fa4-pythonpath || { echo "FA4 site failed"; exit 3; }
fa3=$(find "$root/build-fa3" -name '_C*.so' 2>/dev/null | head -n 1)
[ -n "$fa3" ] || { echo "no FA3 build: run device_call1.sh first on this machine"; exit 3; }
PYTHONPATH=$(cat /tmp/fa4-pythonpath) DASH_COMMIT="$2" "$root/scripts/gpu_record.sh" --build-dir "/tmp/prep/$1" \
  --fa3 "$fa3" --fa4
