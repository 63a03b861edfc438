#!/usr/bin/env bash
# Builds and runs every test: the C++ suites (ctest) and the Python package's (pytest). The GPU suites run
# where a CUDA device is present and are reported as skipped where none is. The Python tests need PyTorch:
# if it is missing, the version the H200 machines run (2.11.0) is installed from PyPI with pytest and numpy.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh"
build="${DASH_BUILD_DIR:-$root/build}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "note: no GPU on this machine: GPU tests will be reported as skipped"
fi
(cd "$build" && ctest --output-on-failure -j "$(nproc)")

if ! python3 -c "import torch, pytest, numpy" >/dev/null 2>&1; then
  echo "installing torch==2.11.0, pytest and numpy for the Python tests"
  python3 -m pip install --quiet --disable-pip-version-check pytest numpy
  if ! python3 -m pip install --quiet --disable-pip-version-check "torch==2.11.0"; then
    echo "WARNING: PyTorch could not be installed here: the torch tests below will be reported as skipped" >&2
  fi
fi
cd "$root/python"
DASH_ATTN_LIBRARY="$build/libdash_attn.so" python3 -m pytest -q -rs tests
