#!/usr/bin/env bash
# Builds and runs every test: the C++ suites (ctest) and the Python package's (pytest). The GPU suites run
# where a CUDA device is present and are reported as skipped where none is. The Python tests need PyTorch:
# if it is missing, the version the H200 machines run (2.11.0) is installed from PyPI with pytest and numpy,
# into the Python that `python3` runs (system-wide when run as root outside a virtual environment), and
# transformers (5.17.0, for the attn_implementation="dash" tests) where it is missing too. The script says so
# first, before the build, with how to avoid it: DASH_SKIP_TORCH_INSTALL=1 (the torch tests are then reported
# as skipped, and transformers is not installed) or a virtual environment.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
torch_version=2.11.0
transformers_version=5.17.0

importable() { python3 -c "import $1" >/dev/null 2>&1; }

in_virtual_environment() { python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; }

# Where pip would install, in words.
python_target() {
  local prefix
  prefix=$(python3 -c 'import sys; print(sys.prefix)')
  if in_virtual_environment; then
    echo "the virtual environment $prefix"
  elif [ "$(id -u)" = 0 ]; then
    echo "the system Python ($prefix), as root"
  else
    echo "your user site-packages (python3 at $prefix)"
  fi
}

# Said before anything else: a few GB in someone's system Python is not a side effect to find out about later.
install_torch=0
if ! importable torch; then
  if [ "${DASH_SKIP_TORCH_INSTALL:-0}" = 1 ]; then
    echo "note: PyTorch is not installed and DASH_SKIP_TORCH_INSTALL=1: the Python torch tests will be reported as"
    echo "      skipped (pytest and numpy, small, are still installed where missing; transformers is not)"
  else
    install_torch=1
    echo "note: PyTorch is not installed. After the C++ tests, this script installs torch==$torch_version from PyPI"
    echo "      (and pytest, numpy and transformers==$transformers_version where missing) into $(python_target),"
    echo "      for the Python tests. torch brings its CUDA libraries: a few GB to download and more on disk."
    echo "      To skip it: DASH_SKIP_TORCH_INSTALL=1 scripts/run-tests.sh (the torch tests are then reported as"
    if in_virtual_environment; then
      echo "      skipped)."
    else
      echo "      skipped), or run this inside a virtual environment to keep it out of the system Python:"
      echo "      python3 -m venv .venv && . .venv/bin/activate && scripts/run-tests.sh"
    fi
  fi
fi

"$root/scripts/build.sh"
build="${DASH_BUILD_DIR:-$root/build}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "note: no GPU on this machine: GPU tests will be reported as skipped"
fi
(cd "$build" && ctest --output-on-failure -j "$(nproc)")

missing=()
importable pytest || missing+=(pytest)
importable numpy || missing+=(numpy)
# transformers (no torch dependency of its own; a few MB with huggingface_hub and tokenizers): the CPU tests of
# attn_implementation="dash" run tiny random models, a few seconds. Not without torch (those tests skip then).
if importable torch || [ "$install_torch" = 1 ]; then
  importable transformers || missing+=("transformers==$transformers_version")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} for the Python tests into $(python_target)"
  python3 -m pip install --quiet --disable-pip-version-check "${missing[@]}"
fi
if [ "$install_torch" = 1 ]; then
  echo "installing torch==$torch_version for the Python tests into $(python_target) (a few GB; see the note at the start)"
  if ! python3 -m pip install --quiet --disable-pip-version-check "torch==$torch_version"; then
    echo "WARNING: PyTorch could not be installed here: the torch tests below will be reported as skipped" >&2
  fi
fi
cd "$root/python"
DASH_ATTN_LIBRARY="$build/libdash_attn.so" python3 -m pytest -q -rs tests
