#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# prepare.sh — on the CPU machine, before the device calls of this series (README.md here): main's build (the
# base), the series' full build (its GPU tests), one library per cumulative patch (head dims 64 and 128, bf16), all
# packed under .carry/prep (git-ignored; name it in `carry`). About 45 minutes on 2 cores.
#
#   docs/history/prepared/2026-12-05-hd64-visit/prepare.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
series="$root/../wt-series"
carry="$root/.carry/prep"
cd "$root"
scripts/bootstrap.sh
[ -f build/libdash_attn.so ] || scripts/build.sh
if [ ! -d "$series" ]; then
  git worktree add --detach "$series" HEAD
  git -C "$series" am "$here"/0*.patch
fi
mkdir -p "$series/.deps" && ln -sfn "$root/.deps/cutlass" "$series/.deps/cutlass"
(cd "$series" && scripts/build.sh)
patches=$(ls "$here"/0*.patch | wc -l)
for n in $(seq 1 "$patches"); do
  tree="$root/../wt-p$n"
  [ -d "$tree" ] || git worktree add --detach "$tree" "$(git -C "$series" rev-parse "HEAD~$((patches - n))")"
  scripts/build_variant_lib.sh build "$tree" "$carry/p$n" hopper_bwd_hdim64_bf16 hopper_bwd_hdim128_bf16
  rm -rf "$carry/p$n/objects"
done
mkdir -p "$carry/base" "$carry/series"
cp build/libdash_attn.so build/dash-attn build/bench/dash-bench-bwd build/bench/dash-bench-fwd "$carry/base/"
cp "$series/build/libdash_attn.so" "$series/build/dash-attn" "$series"/build/tests/gpu/dash_* "$carry/series/"
cp ../shared/fa3kit/fa3kit.tar.gz "$carry/"
(cd "$root/.carry" && tar cJf prep.tar.xz prep && rm -rf prep)
du -sh "$root/.carry/prep.tar.xz"
