#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The study library (3 min on 2 cores): a finished build's objects, with the study tree's planner, plan, simulator,
# Gantt, launch and plan-handle objects and its head-dim-64 bf16 kernels. Only head dim 64 decodes the slot claims in
# this library (BwdParams' new field is its last, so the other head dims' objects keep the layout).
#   build_study.sh BASE_BUILD_DIR STUDY_TREE OUT_DIR     (STUDY_TREE: a worktree with 0001-study-slot-claims.patch)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../../../scripts/build_variant_lib.sh" "${1:?base build}" "${2:?study tree}" "${3:?out dir}" \
  src/core/planners.cpp src/core/plan.cpp src/core/simulator.cpp src/core/gantt_svg.cpp src/cuda/bwd/launch.cpp \
  src/cuda/bwd/plan_handle.cpp hopper_bwd_hdim64_bf16
