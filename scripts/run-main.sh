#!/usr/bin/env bash
# The main job: build, then simulate every planner over the benchmark grid on a 132-SM H200
# (no GPU needed). On a machine with a GPU it then also runs the kernels (once they exist).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" >/dev/null
build="${DASH_BUILD_DIR:-$root/build}"
"$build/dash-attn" grid "$@"
