#!/usr/bin/env bash
# Installs what the build needs and a fresh machine may lack. Idempotent; safe to rerun.
#  - CuTe/CUTLASS headers: the nvidia-cutlass wheel at a pinned version, without its Python dependencies,
#    unpacked under .deps/cutlass (only its headers are used: cutlass_library/source/include).
#  - GoogleTest and OpenSSL's libcrypto headers (SHA-256 in `dash-attn check`): Debian's packages when missing.
#    Where nothing can be installed (the GPU machines), it says so and the build decides what it can do.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
CUTLASS_VERSION=4.2.0.0
cutlass_dir="$root/.deps/cutlass"
if [ ! -f "$cutlass_dir/cutlass_library/source/include/cute/tensor.hpp" ] \
   || [ "$(cat "$cutlass_dir/VERSION" 2>/dev/null)" != "$CUTLASS_VERSION" ]; then
  rm -rf "$cutlass_dir"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$cutlass_dir" \
    "nvidia-cutlass==$CUTLASS_VERSION"
  echo "$CUTLASS_VERSION" > "$cutlass_dir/VERSION"
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
