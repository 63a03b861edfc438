#!/usr/bin/env bash
# Installs what the build needs and a fresh machine may lack. Idempotent; safe to rerun.
#  - CuTe/CUTLASS headers: the nvidia-cutlass wheel at the version pinned in pyproject.toml, without its Python
#    dependencies, unpacked under .deps/cutlass (only its headers are used: cutlass_library/source/include).
#    This is the third place cmake/DashCuda.cmake looks; `pip install .` needs none of it.
#  - GoogleTest and OpenSSL's libcrypto headers (SHA-256 in `dash-attn check`): Debian's packages when missing.
#    Where nothing can be installed (the GPU machines), it says so and the build decides what it can do.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
CUTLASS_VERSION=$(sed -n 's/.*"nvidia-cutlass==\([0-9.]*\)".*/\1/p' "$root/pyproject.toml" | head -n 1)
[ -n "$CUTLASS_VERSION" ] || { echo "bootstrap: no nvidia-cutlass==<version> pin in pyproject.toml" >&2; exit 1; }
cutlass_dir="$root/.deps/cutlass"
# The headers' own version (cutlass/version.h: major.minor.patch), so a copy carried without the VERSION file
# below is recognised too.
headers_version() {
  sed -n 's/^#define CUTLASS_\(MAJOR\|MINOR\|PATCH\) *\([0-9][0-9]*\).*/\2/p' \
    "$cutlass_dir/cutlass_library/source/include/cutlass/version.h" 2>/dev/null | paste -sd. -
}
if [ "$(headers_version)" != "${CUTLASS_VERSION%.*}" ]; then
  # Unpack beside the old copy and swap only on success: without a package index the old copy stays.
  rm -rf "$cutlass_dir.new"
  if python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$cutlass_dir.new" \
       "nvidia-cutlass==$CUTLASS_VERSION"; then
    echo "$CUTLASS_VERSION" > "$cutlass_dir.new/VERSION"
    rm -rf "$cutlass_dir"
    mv "$cutlass_dir.new" "$cutlass_dir"
  else
    rm -rf "$cutlass_dir.new"
    echo "bootstrap: cannot install nvidia-cutlass==$CUTLASS_VERSION here; with nvcc, the build needs the CuTe" \
         "headers from elsewhere (cmake/DashCuda.cmake lists where it looks)" >&2
  fi
fi
# GoogleTest: the system's, or a source tree in .carry/googletest (tests/CMakeLists.txt uses either).
# libssl-dev: only `dash-attn check` needs it; without it that command reports it is unavailable.
missing=()
[ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ] || \
  [ -f "$root/.carry/googletest/CMakeLists.txt" ] || missing+=(libgtest-dev)
[ -f /usr/include/openssl/evp.h ] || missing+=(libssl-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null && timeout 20 apt-get update -qq >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "bootstrap: cannot install ${missing[*]} here (no apt-get or no network)" >&2
  fi
fi
