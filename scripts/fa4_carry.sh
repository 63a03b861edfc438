#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fa4_carry.sh — on the development machine: FlashAttention-4 and its CuTe-DSL compiler (shared/docs/fa4-on-h200.md,
# outside the repo), packed for three device calls. FA4 is third-party code, measured and never shipped.
#
#   scripts/fa4_carry.sh            # writes .carry/fa4p1, .carry/fa4p2, .carry/fa4w (git-ignored); about 8 minutes
#
# The compiler's IR library is 48 MiB as .xz. Beside this tree (19 MiB on 2026-12-05) it does not fit one call's
# 64 MiB, so it travels in two parts:
#   call 1 carries .carry/fa4p1 (part 1, 24 MiB):           scripts/gpu_fa4_site.sh part1 .carry/fa4p1
#   call 2 carries .carry/fa4p2 (part 2 and the runtime):   scripts/gpu_fa4_site.sh part2 .carry/fa4p2
#   call 3 carries .carry/fa4w (the wheels, 10 MiB):        PYTHONPATH=$(scripts/gpu_fa4_site.sh install .carry/fa4w)
# on one warm machine. Other work may share each call, within 64 MiB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carry="$root/.carry"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$work/wheels" flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 \
  nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
  "quack-kernels>=0.5.3" "apache-tvm-ffi<0.2,>=0.1.11" torch-c-dlpack-ext
rm -rf "$carry/fa4p1" "$carry/fa4p2" "$carry/fa4w"
mkdir -p "$carry/fa4p1" "$carry/fa4p2" "$carry/fa4w" "$work/cu13"
# The cu13 wheel is unpacked: its two large libraries travel compressed, the rest as a small tarball.
(cd "$work/cu13" && unzip -q "$work"/wheels/nvidia_cutlass_dsl_libs_cu13-*.whl)
ir="$work/cu13/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so"
runtime="$work/cu13/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so"
xz -9 -T2 -c "$ir" >"$work/ir.xz"
xz -9 -T2 -c "$runtime" >"$carry/fa4p2/rt.xz"
rm "$ir" "$runtime" "$work"/wheels/nvidia_cutlass_dsl_libs_cu13-*.whl
tar -C "$work/cu13" -czf "$carry/fa4w/cu13-rest.tar.gz" .
cp "$work"/wheels/*.whl "$carry/fa4w/"
half=$(( ($(stat -c %s "$work/ir.xz") + 1) / 2 ))
head -c "$half" "$work/ir.xz" >"$carry/fa4p1/ir.xz.part1"
tail -c +"$((half + 1))" "$work/ir.xz" >"$carry/fa4p2/ir.xz.part2"
cat "$carry/fa4p1/ir.xz.part1" "$carry/fa4p2/ir.xz.part2" | cmp - "$work/ir.xz"
du -sh "$carry/fa4p1" "$carry/fa4p2" "$carry/fa4w"
