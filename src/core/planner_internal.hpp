// SPDX-License-Identifier: Apache-2.0
// planner_internal.hpp — what planners.cpp, validate.cpp and geometry.cpp share privately (not installed): the
// threads that large templates are built and validated on, and how a table is split between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory_resource>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dash/geometry.hpp"
#include "dash/plan_format.h"

namespace dash::detail {

// Where a template's build and its validation keep their working lists: dozens of small lists whose allocations
// cost as much as a small template's whole check. They come from one arena per call (a stack buffer, then the heap:
// ListArena), except those that parts on other threads allocate, which come from the heap (an arena is not
// thread-safe).
using Memory = std::pmr::memory_resource*;
template <class T>
using List = std::pmr::vector<T>;
// The memory for a part's lists: the call's arena where one part runs (on the caller's thread), else the heap.
inline Memory part_memory(Memory arena, int parts) { return parts == 1 ? arena : std::pmr::new_delete_resource(); }
// The call's arena: 8 KiB on the stack, then (a large template's lists) the heap, all freed on return.
class ListArena {
 public:
  ListArena() : resource_(buffer_, sizeof buffer_) {}
  Memory get() { return &resource_; }

 private:
  std::byte buffer_[8192];
  std::pmr::monotonic_buffer_resource resource_;
};

// For tests and measurements: n >= 1 uses exactly n threads for every template, however small; 0 chooses.
void set_planner_threads(int n);
// Threads for a template of `visits` visits: 1 below 2^17, else one per 2^16 visits, up to min(hardware threads, 16).
int planner_threads(int64_t visits);
// Runs part(0) .. part(parts - 1) on the caller and up to parts - 1 workers of a pool kept for the process (parts are
// claimed one at a time), and rethrows the exception of the lowest part that threw.
void run_parallel_on_pool(int parts, const std::function<void(int)>& part);
// The same; one part is called directly: a small template's passes are a few hundred nanoseconds, about what the
// std::function of a lambda of several references (an allocation) and the pool's job cost.
template <class Part>
void run_parallel(int parts, Part&& part) {
  if (parts == 1) part(0);
  else run_parallel_on_pool(parts, std::ref(part));
}
// Part `part` of `parts` of a segment table in visit order (parts of about equal visits): its first segment.
int32_t first_segment_of_part(const std::vector<dash_segment>& segments, int64_t visits, int part, int parts);
// Part `part` of `parts` of the lock-step positions of items of these lengths (about equal visits): its first.
int32_t first_position_of_part(std::span<const int32_t> lengths, int part, int parts);
// TileGrid::q_tiles_seen_by's first and end, without the list (geometry.cpp).
std::pair<int32_t, int32_t> q_tile_range(const Problem& problem, const TileGrid& grid, int32_t kv_tile);

// The Q tiles a KV tile meets, [q_begin, q_end), and those it meets without a masked pair, [full_begin, full_end):
// both intervals (the band's edges are non-decreasing in the row), the partial tiles at the two ends.
struct KvTileRows {
  int32_t q_begin = 0, q_end = 0, full_begin = 0, full_end = 0;
};
// q_tile_range and KvTileRows of every KV tile of one grid, the mask's band taken once (TileGrid::kind and
// q_tile_range take it per call, which cost more than the rest for the small templates of a pack). `problem` and
// `grid` must outlive it.
class KvTileGeometry {
 public:
  KvTileGeometry(const Problem& problem, const TileGrid& grid);
  std::pair<int32_t, int32_t> q_range(int32_t kv_tile) const;  // q_tile_range
  KvTileRows rows(int32_t kv_tile) const;                      // its ends by TileGrid::kind
  // rows() of every KV tile, in one sweep; the list from `memory`.
  std::pmr::vector<KvTileRows> all_rows(std::pmr::memory_resource* memory = std::pmr::get_default_resource()) const;

 private:
  KvTileRows with_full_range(int32_t kv_tile, std::pair<int32_t, int32_t> q_range) const;

  const Problem& problem_;
  const TileGrid& grid_;
  bool left_bounded_ = false, right_bounded_ = false;
  int64_t left_ = 0, right_ = 0, offset_ = 0;
};

// The lengths geometry_representative maps to the same representative as a problem's: every (seqlen_q, seqlen_k)
// with seqlen_q in [q_lo, q_hi], seqlen_k in [k_lo, k_hi] and seqlen_k - seqlen_q in [offset_lo, offset_hi] (the
// other fields as the problem's). Every member's class is this one (its thresholds are those of the problem, which
// no member crosses), so a member's representative costs the three comparisons of contains(). nullopt where
// geometry_representative keeps the problem's own lengths (no grid, or too many tiles to be planned).
struct GeometryClass {
  int64_t q_lo, q_hi, k_lo, k_hi, offset_lo, offset_hi;
  int32_t representative_q, representative_k;
  bool contains(int64_t seqlen_q, int64_t seqlen_k) const {
    return q_lo <= seqlen_q && seqlen_q <= q_hi && k_lo <= seqlen_k && seqlen_k <= k_hi &&
           offset_lo <= seqlen_k - seqlen_q && seqlen_k - seqlen_q <= offset_hi;
  }
  bool operator==(const GeometryClass&) const = default;
};
std::optional<GeometryClass> geometry_class(const Problem& problem, TileShape tiles);

}  // namespace dash::detail
