#!/usr/bin/env bash
# Installs what the build needs and a fresh machine may lack. Idempotent; safe to rerun.
#  - CuTe/CUTLASS headers: the nvidia-cutlass wheel at a pinned version, without its Python dependencies,
#    unpacked under .deps/cutlass (only its headers are used: cutlass_library/source/include).
#  - GoogleTest and OpenSSL's libcrypto headers (SHA-256 in `dash-attn check`): Debian's packages when missing.
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
missing=()
[ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ] || missing+=(libgtest-dev)
[ -f /usr/include/openssl/evp.h ] || missing+=(libssl-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "bootstrap: install ${missing[*]} (apt-get is not available here)" >&2; exit 1
  fi
fi
