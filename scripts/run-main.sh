#!/usr/bin/env bash
# The main job: build, then simulate every planner over the benchmark grid on a 132-SM H200 (no GPU needed).
# On a machine with a CUDA GPU it then also runs the kernels: the backward under several schedules, five
# times each, printing a SHA-256 of dQ/dK/dV per run (`dash-attn check`).
#
# The build (scripts/build.sh) shows one short line per step, so that the first build — minutes of compiling
# CUDA kernels — is visibly progressing; its full output goes to a log, printed if it fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${DASH_BUILD_DIR:-$root/build}"

# ninja's "[12/46] Building CXX object CMakeFiles/dash_core.dir/src/core/plan.cpp.o" (make's "[ 26%] ...")
# as "  [12/46] Building plan.cpp"; bootstrap's notes pass unchanged; the rest (cmake's configure lines,
# compiler commands) stays in the log.
build_progress() {
  sed -u -n -E \
    -e '/^\[ *[0-9]+(\/[0-9]+|%)\] (Building|Linking) /{s#^(\[[^]]*\]) (Building|Linking) .*[ /]([^/ ]+)$#  \1 \2 \3#;s#\.o$##;p}' \
    -e 's#^ninja: no work to do\.$#  up to date#p' \
    -e '/^bootstrap:/p'
}

if [ -f "$build/CMakeCache.txt" ]; then
  echo "Building dash-attn in $build (only what changed)"
else
  echo "Building dash-attn in $build: the first build takes a few minutes (about 5 on a fresh machine, most"
  echo "of it compiling the CUDA kernels where nvcc is found); later runs rebuild only what changed."
fi
mkdir -p "$build"
log="$build/run-main-build.log"
if ! "$root/scripts/build.sh" 2>&1 | tee "$log" | build_progress; then
  echo "The build failed; the end of its log ($log):" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
echo

"$build/dash-attn" grid "$@"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  for schedule in ascending descending symmetric-shift auto; do
    echo
    "$build/dash-attn" check --batch 4 --seqlen 4096 --heads 16 --hdim 128 --causal --schedule "$schedule" --runs 5
  done
else
  echo
  echo "No GPU here: the kernels were not run (on a GPU machine this command also runs dash-attn check)."
fi
