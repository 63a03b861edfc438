#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The study library (2 min on 2 cores): a finished build's objects, with the study tree's planner, plan, simulator,
# Gantt, launch and plan-handle objects and its head-dim-64 bf16 kernels (scripts/build_variant_lib.sh does the
# kernels alone; this study changes host code too). Only head dim 64 decodes the slot claims in this library.
#   build_study.sh BASE_BUILD_DIR STUDY_TREE OUT_DIR     (STUDY_TREE: a worktree with 0001-study-slot-claims.patch)
set -euo pipefail
base=$(cd "${1:?base build}" && pwd); tree=$(cd "${2:?study tree}" && pwd); out=${3:?out dir}
mkdir -p "$out/objects/member"; out=$(cd "$out" && pwd)
src_root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$base/CMakeCache.txt")
cmds=$out/commands.txt
(cd "$base" && ninja -t commands dash_attn) > "$cmds"
link=$(tail -n 1 $cmds)
cp $base/libdash_core.a $out/libdash_core.a
core_objs=()
for src in src/core/planners.cpp src/core/plan.cpp src/core/simulator.cpp src/core/gantt_svg.cpp src/cuda/bwd/launch.cpp src/cuda/bwd/plan_handle.cpp; do
  name=$(basename $src)
  line=$(grep -F -- "-c $src_root/$src" $cmds | head -1)
  obj=$(printf '%s' "$line" | sed -n 's/.* -o \([^ ]*\) -c .*/\1/p')
  cmd=$(printf '%s' "$line" | sed -e "s#-I$src_root/#-I$tree/#g" -e "s#-c $src_root/#-c $tree/#" -e 's# -MD -MT [^ ]* -MF [^ ]*##' -e "s# -o $obj# -o $out/objects/$name.o#")
  echo "== $src"; (cd $base && eval "$cmd")
  case $obj in
    CMakeFiles/dash_core.dir/*) cp $out/objects/$name.o $out/objects/member/$name.o
       (cd $out/objects/member && ar r $out/libdash_core.a $name.o) ;;
    *) link=${link// $obj / $out/objects/$name.o } ;;
  esac
done
name=hopper_bwd_hdim64_bf16
obj="CMakeFiles/dash_attn.dir/src/cuda/instantiations/$name.cu.o"
line=$(grep -F -- "-o $obj" $cmds | head -1)
cmd=${line//-I$src_root\//-I$tree\/}
cmd=$(printf '%s' "$cmd" | sed -e 's# -MD -MT [^ ]* -MF [^ ]*##' -e "s# -o $obj# -o $out/objects/$name.o#")
echo "== $name"; (cd $base && eval "$cmd") > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
link=${link// $obj / $out/objects/$name.o }
link=${link// libdash_core.a / $out/libdash_core.a }
link=$(printf '%s' "$link" | sed -e "s# -o libdash_attn.so # -o $out/libdash_attn.so #")
(cd $base && eval "$link")
ls -la $out/libdash_attn.so
