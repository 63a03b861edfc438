// SPDX-License-Identifier: Apache-2.0
// planner_internal.hpp — what planners.cpp, validate.cpp and geometry.cpp share privately (not installed): the
// threads that large templates are built and validated on, and how a table is split between them.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "dash/geometry.hpp"
#include "dash/plan_format.h"

namespace dash::detail {

// For tests and measurements: n >= 1 uses exactly n threads for every template, however small; 0 chooses.
void set_planner_threads(int n);
// Threads for a template of `visits` visits: 1 below 2^18, else up to min(hardware threads, 8).
int planner_threads(int64_t visits);
// Runs part(0) .. part(parts - 1) on the caller and up to parts - 1 workers of a pool kept for the process (parts are
// claimed one at a time), and rethrows the exception of the lowest part that threw.
void run_parallel(int parts, const std::function<void(int)>& part);
// Part `part` of `parts` of a segment table in visit order (parts of about equal visits): its first segment.
int32_t first_segment_of_part(const std::vector<dash_segment>& segments, int64_t visits, int part, int parts);
// Part `part` of `parts` of the lock-step positions of items of these lengths (about equal visits): its first.
int32_t first_position_of_part(const std::vector<int32_t>& lengths, int part, int parts);
// TileGrid::q_tiles_seen_by's first and end, without the list (geometry.cpp).
std::pair<int32_t, int32_t> q_tile_range(const Problem& problem, const TileGrid& grid, int32_t kv_tile);

}  // namespace dash::detail
