#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pack.sh — on the CPU machine: `.carry/prep.tar.xz` for device_call1.sh / device_call2.sh here. Builds named:
#   base = main's build/ (library, CLI, backward GoogleTests);
#   p23  = main's library with ../2026-12-05-hd64-visit's patches 1-2 at head dim 64 and 1-3 at head dim 128
#          (scripts/build_variant_lib.sh; a finished library given as P23_LIB);
#   r80  = the full build of this series on the hd64-visit series (a worktree given as R80_TREE: library, CLI, GPU tests).
#
#   P23_LIB=/path/p23.so R80_TREE=../wt80 docs/history/prepared/2026-12-05-hd128-80rows/pack.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
prep="$root/.carry/prep"
rm -rf "$prep" && mkdir -p "$prep/base" "$prep/p23" "$prep/r80"
cp "$root/build/libdash_attn.so" "$root/build/dash-attn" "$root/build/tests/gpu/dash_gpu_bwd_tests" "$prep/base/"
cp "$P23_LIB" "$prep/p23/libdash_attn.so"
cp "$R80_TREE/build/libdash_attn.so" "$R80_TREE/build/dash-attn" "$R80_TREE"/build/tests/gpu/dash_* "$prep/r80/"
rm -f "$prep"/r80/*.cmake
cp "$root/../shared/fa3kit/fa3kit.tar.gz" "$prep/"
(cd "$root/.carry" && tar cJf prep.tar.xz prep && rm -rf prep)
du -sh "$root/.carry/prep.tar.xz"
