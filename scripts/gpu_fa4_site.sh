#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_fa4_site.sh DIR — the second of the two device calls that shared/docs/fa4-on-h200.md (outside the repo) describes
# for timing FlashAttention-4 beside dash-attn: it installs FA4 and its CuTe-DSL compiler into /tmp/site from DIR (the
# wheels, rt.xz = libcute_dsl_runtime.so, cu13-rest.tar.gz = the rest of the nvidia-cutlass-dsl-libs-cu13 wheel) and
# /tmp/fa4site/ir.so (unpacked by the first call: `xz -dc ir.xz > /tmp/fa4site/ir.so`), and prints the PYTHONPATH
# entries to use. FA4 is third-party code, measured and never shipped.
set -euo pipefail
dir="$1"
if [ ! -f /tmp/fa4site/ir.so ]; then
  echo "gpu_fa4_site.sh: /tmp/fa4site/ir.so is missing: the machine went cold since the first call; repeat it" >&2
  exit 3
fi
rm -rf /tmp/site
mkdir -p /tmp/site
pip install --quiet --no-index --no-deps --target /tmp/site "$dir"/*.whl >&2
tar -C /tmp/site -xzf "$dir/cu13-rest.tar.gz"
cp /tmp/fa4site/ir.so /tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
xz -dc "$dir/rt.xz" >/tmp/site/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so
# The wheel's .pth file is not read from a --target directory, hence the second entry.
echo /tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
