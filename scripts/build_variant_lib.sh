#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build_variant_lib.sh — a libdash_attn.so for an A/B of kernel variants without a full build: the named kernel
# instantiations are compiled from another source tree (a worktree with the variant's commits) with a finished
# build's own flags, and linked with that build's other objects. A variant touching only the head dims it is timed
# on then costs minutes on 2 cores instead of a full build (~15-25 min).
#
#   scripts/build_variant_lib.sh BASE_BUILD_DIR VARIANT_TREE OUT_DIR INSTANTIATION|SOURCE...
#   e.g. scripts/build_variant_lib.sh build ../wt-v1 /tmp/libs/v1 hopper_bwd_hdim64_bf16 hopper_bwd_hdim128_bf16
#
# A SOURCE (a host file of the library, as src/core/plan.cpp) is compiled from the variant tree too, for a variant
# that changes host code; one of dash_core's replaces its member in a copy of libdash_core.a. The variant must then
# keep the layout of what the base's other objects share with it (structs, tables).
#
# An instantiation is one generated file of src/cuda/CMakeLists.txt (BASE_BUILD_DIR/src/cuda/instantiations/*.cu);
# each holds its head dim's kernels whole (the backward's main, preprocess and convert kernels), so a library mixing
# variant and base instantiations is consistent per head dim. Everything else (host code, the other head dims) is
# the base build's: only the variant's kernel headers may differ from it. OUT_DIR gets libdash_attn.so and a
# build.log with ptxas's register / spill lines (-Xptxas -v of the build's flags). Never run it while a ninja of
# BASE_BUILD_DIR is running (a second ninja process rewrites its deps log).
set -euo pipefail
[ $# -ge 4 ] || { sed -n 3,16p "$0"; exit 2; }
base=$(cd "$1" && pwd)
tree=$(cd "$2" && pwd)
out=$3
shift 3
src_root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$base/CMakeCache.txt")
[ -n "$src_root" ] || { echo "no CMAKE_HOME_DIRECTORY in $base/CMakeCache.txt" >&2; exit 1; }
mkdir -p "$out/objects"
out=$(cd "$out" && pwd)
commands=$(cd "$base" && ninja -t commands dash_attn)
link=$(printf '%s\n' "$commands" | tail -n 1)
: >"$out/build.log"
core_copy=""
for name in "$@"; do
  case $name in
    *.cpp)  # a host source
      line=$(printf '%s\n' "$commands" | grep -F -- "-c $src_root/$name" | head -n 1 || true)
      [ -n "$line" ] || { echo "no compile command for $name in $base" >&2; exit 1; }
      object=$(printf '%s' "$line" | sed -n 's#.* -o \([^ ]*\) -c .*#\1#p')
      member=$(basename "$object")
      compile=$(printf '%s' "$line" | sed -e "s#-I$src_root/#-I$tree/#g" -e "s#-c $src_root/#-c $tree/#" \
                -e 's# -MD -MT [^ ]* -MF [^ ]*##' -e "s# -o $object# -o $out/objects/$member#")
      echo "== $name" | tee -a "$out/build.log"
      (cd "$base" && eval "$compile") >>"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
      case $object in
        CMakeFiles/dash_core.dir/*)
          if [ -z "$core_copy" ]; then core_copy=$out/libdash_core.a; cp "$base/libdash_core.a" "$core_copy"; fi
          (cd "$out/objects" && ar r "$core_copy" "$member") ;;
        *) link=${link// $object / $out/objects/$member } ;;
      esac
      continue ;;
  esac
  object="CMakeFiles/dash_attn.dir/src/cuda/instantiations/$name.cu.o"
  compile=$(printf '%s\n' "$commands" | grep -F -- "-o $object" | head -n 1 || true)
  [ -n "$compile" ] || { echo "no compile command for $object in $base" >&2; exit 1; }
  # The variant's headers replace the base tree's; the dependency file and the object go elsewhere.
  compile=${compile//-I$src_root\//-I$tree\/}
  compile=$(printf '%s' "$compile" | sed -e 's# -MD -MT [^ ]* -MF [^ ]*##' -e "s# -o $object# -o $out/objects/$name.o#")
  echo "== $name" | tee -a "$out/build.log"
  (cd "$base" && eval "$compile") >>"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
  link=${link// $object / $out/objects/$name.o }
done
[ -z "$core_copy" ] || link=${link// libdash_core.a / $core_copy }
link=$(printf '%s' "$link" | sed -e 's#^: && ##' -e 's# && :$##' -e "s# -o libdash_attn.so # -o $out/libdash_attn.so #")
(cd "$base" && eval "$link") || exit 1
echo "$out/libdash_attn.so"
