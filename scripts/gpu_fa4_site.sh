#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu_fa4_site.sh STAGE DIR — on the GPU machine, the three device calls that install FlashAttention-4 and its
# CuTe-DSL compiler for timing beside dash-attn (shared/docs/fa4-on-h200.md, outside the repo), from the folders that
# scripts/fa4_carry.sh writes; all three on one warm machine (/tmp survives between its calls):
#   part1 .carry/fa4p1   keeps the first half of the compiler's IR library (xz) under /tmp/fa4site;
#   part2 .carry/fa4p2   joins the second half, unpacks the IR library, keeps the runtime library (xz);
#   install .carry/fa4w  installs FA4, the compiler and their wheels into /tmp/site and prints the PYTHONPATH entries
#                        to use: PYTHONPATH=$(scripts/gpu_fa4_site.sh install .carry/fa4w) ... record.py --fa4.
# FA4 is third-party code, measured and never shipped.
set -euo pipefail
stage="${1:?usage: gpu_fa4_site.sh part1|part2|install DIR}"
dir="${2:?usage: gpu_fa4_site.sh part1|part2|install DIR}"
site=/tmp/fa4site
cold() { echo "gpu_fa4_site.sh: $1 is missing: the machine went cold since the call before; start again at part1" >&2; exit 3; }
case "$stage" in
  part1)
    mkdir -p "$site"
    cp "$dir/ir.xz.part1" "$site/" ;;
  part2)
    [ -f "$site/ir.xz.part1" ] || cold "$site/ir.xz.part1"
    cat "$site/ir.xz.part1" "$dir/ir.xz.part2" | xz -T8 -dc >"$site/ir.so"
    cp "$dir/rt.xz" "$site/" ;;
  install)
    [ -f "$site/ir.so" ] || cold "$site/ir.so"
    [ -f "$site/rt.xz" ] || cold "$site/rt.xz"
    rm -rf /tmp/site
    mkdir -p /tmp/site
    pip install --quiet --no-index --no-deps --target /tmp/site "$dir"/*.whl >&2
    tar -C /tmp/site -xzf "$dir/cu13-rest.tar.gz"
    cp "$site/ir.so" /tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
    xz -dc "$site/rt.xz" >/tmp/site/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so
    # The wheel's .pth file is not read from a --target directory, hence the second entry.
    echo /tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages ;;
  *) echo "gpu_fa4_site.sh: unknown stage '$stage' (part1, part2 or install)" >&2; exit 2 ;;
esac
