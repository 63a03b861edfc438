#!/usr/bin/env bash
# Study lib: base build's objects, with the worktree's versions of some host objects and the hd64 bf16 instantiation.
set -euo pipefail
base=/work/main/build; tree=/tmp/s45/wt; out=/tmp/s45/slotlib
cmds=/tmp/s45/cmds.txt
link=$(tail -n 1 $cmds)
cp $base/libdash_core.a $out/libdash_core.a
core_objs=()
for src in src/core/planners.cpp src/core/plan.cpp src/core/simulator.cpp src/core/gantt_svg.cpp src/cuda/bwd/launch.cpp src/cuda/bwd/plan_handle.cpp; do
  name=$(basename $src)
  line=$(grep -F -- "-c /work/main/$src" $cmds | head -1)
  obj=$(printf '%s' "$line" | sed -n 's/.* -o \([^ ]*\) -c .*/\1/p')
  cmd=$(printf '%s' "$line" | sed -e "s#-I/work/main/#-I$tree/#g" -e "s#-c /work/main/#-c $tree/#" -e 's# -MD -MT [^ ]* -MF [^ ]*##' -e "s# -o $obj# -o $out/objects/$name.o#")
  echo "== $src"; (cd $base && eval "$cmd")
  case $obj in
    CMakeFiles/dash_core.dir/*) cp $out/objects/$name.o $out/objects/member/$name.o 2>/dev/null || { mkdir -p $out/objects/member; cp $out/objects/$name.o $out/objects/member/$name.o; }
       (cd $out/objects/member && ar r $out/libdash_core.a $name.o) ;;
    *) link=${link// $obj / $out/objects/$name.o } ;;
  esac
done
name=hopper_bwd_hdim64_bf16
obj="CMakeFiles/dash_attn.dir/src/cuda/instantiations/$name.cu.o"
line=$(grep -F -- "-o $obj" $cmds | head -1)
cmd=${line//-I\/work\/main\//-I$tree\/}
cmd=$(printf '%s' "$cmd" | sed -e 's# -MD -MT [^ ]* -MF [^ ]*##' -e "s# -o $obj# -o $out/objects/$name.o#")
echo "== $name"; (cd $base && eval "$cmd") > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
link=${link// $obj / $out/objects/$name.o }
link=${link// libdash_core.a / $out/libdash_core.a }
link=$(printf '%s' "$link" | sed -e "s# -o libdash_attn.so # -o $out/libdash_attn.so #")
(cd $base && eval "$link")
ls -la $out/libdash_attn.so
