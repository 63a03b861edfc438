#!/usr/bin/env bash
# Builds and runs every test: the CPU suites always; the GPU suites run where a CUDA device is present
# and are reported as skipped where none is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
build="${DASH_BUILD_DIR:-$root/build}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "note: no GPU on this machine: GPU tests will be reported as skipped"
fi
cd "$build"
ctest --output-on-failure -j "$(nproc)"
