#!/usr/bin/env bash
# The main job: build, then simulate every planner over the benchmark grid on a 132-SM H200 (no GPU needed).
# On a machine with a CUDA GPU it then also runs the kernels: the backward under several schedules, five
# times each, printing a SHA-256 of dQ/dK/dV per run (`dash-attn check`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" >/dev/null
build="${DASH_BUILD_DIR:-$root/build}"
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
