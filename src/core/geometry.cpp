// SPDX-License-Identifier: Apache-2.0
// Problem validation and the mask's tile geometry (see dash/geometry.hpp).
#include "dash/geometry.hpp"
#include "planner_internal.hpp"

#include "dash/attention_mask.hpp"
#include "dash/kernel_table.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <utility>

namespace dash {

dash_problem Problem::to_c() const {
  dash_problem p{};
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim = head_dim;
  p.mask_kind = static_cast<int32_t>(mask);
  p.window_left = window_left;
  p.window_right = window_right;
  p.head_dim_v = head_dim_v;
  return p;
}

Problem Problem::from_c(const dash_problem& p) {
  Problem q;
  q.batch = p.batch;
  q.heads_q = p.heads_q;
  q.heads_kv = p.heads_kv;
  q.seqlen_q = p.seqlen_q;
  q.seqlen_k = p.seqlen_k;
  q.head_dim = p.head_dim;
  q.mask = static_cast<Mask>(p.mask_kind);
  q.window_left = p.window_left;
  q.window_right = p.window_right;
  q.head_dim_v = p.head_dim_v;
  return q;
}

void Problem::validate() const {
  auto positive = [](const char* name, int32_t value) {
    if (value < 1) throw Error(name, "must be >= 1, got " + std::to_string(value));
  };
  positive("batch", batch);
  positive("heads_q", heads_q);
  positive("heads_kv", heads_kv);
  positive("seqlen_q", seqlen_q);
  positive("seqlen_k", seqlen_k);
  positive("head_dim", head_dim);
  if (head_dim_v < 0) throw Error("head_dim_v", "must be >= 1, or 0 for head_dim, got " + std::to_string(head_dim_v));
  if (heads_q % heads_kv != 0)
    throw Error("heads_kv", "heads_q (" + std::to_string(heads_q) + ") must be a multiple of heads_kv (" +
                                std::to_string(heads_kv) + ")");
  if (mask != Mask::Full && mask != Mask::Causal && mask != Mask::Window)
    throw Error("mask", "unknown mask kind " + std::to_string(static_cast<int>(mask)));
  if (mask == Mask::Window) {
    if (window_left < -1) throw Error("window_left", "must be >= 0, or -1 for unbounded");
    if (window_right < -1) throw Error("window_right", "must be >= 0, or -1 for unbounded");
  } else if (window_left != -1 || window_right != -1) {
    throw Error("window", "window sizes are only meaningful with the window mask");
  }
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << "batch " << batch << ", heads " << heads_q;
  if (heads_kv != heads_q) s << " (kv " << heads_kv << ")";
  s << ", seqlen " << seqlen_q;
  if (seqlen_k != seqlen_q) s << "x" << seqlen_k;
  s << ", hdim " << head_dim;
  if (value_head_dim() != head_dim) s << " (v " << value_head_dim() << ")";
  s << ", " << mask_name(mask);
  if (mask == Mask::Window) s << "(" << window_left << "," << window_right << ")";
  return s.str();
}

Mask parse_mask(const std::string& name) {
  if (name == "full") return Mask::Full;
  if (name == "causal") return Mask::Causal;
  if (name == "window") return Mask::Window;
  throw Error("mask", "unknown mask '" + name + "' (expected full, causal or window)");
}

const char* mask_name(Mask mask) {
  switch (mask) {
    case Mask::Full: return "full";
    case Mask::Causal: return "causal";
    case Mask::Window: return "window";
  }
  return "?";
}

TileShape default_backward_tiles(int32_t head_dim) {
  // The kernels' tiles (dash/kernel_table.hpp). Head dims without kernels (planner and simulator studies) get
  // the table's rule: 128-row Q tiles up to head dim 64, 64-row ones above.
  const KernelTableRow row = kernel_table_row(head_dim);
  if (row.head_dim != 0) return {row.bwd_block_m, row.bwd_block_n};
  if (head_dim <= 64) return {128, 128};
  return {64, 128};
}

const std::vector<int32_t>& kernel_head_dims() {
  static const std::vector<int32_t> dims = [] {
    std::vector<int32_t> d;
    for (const KernelTableRow& row : kKernelTable) d.push_back(row.head_dim);
    return d;
  }();
  return dims;
}

double attention_flops(const Problem& p, Pass pass) {
  double pairs = 0;
  if (p.mask == Mask::Full) {
    pairs = double(p.seqlen_q) * double(p.seqlen_k);
  } else if (p.mask == Mask::Causal && p.seqlen_q == p.seqlen_k) {
    pairs = 0.5 * double(p.seqlen_q) * double(p.seqlen_k);
  } else {
    pairs = double(TileGrid(p, {1, 1}).total_unmasked_pairs());
  }
  const double forward = 2.0 * p.batch * p.heads_q * (p.head_dim + p.value_head_dim()) * pairs;
  return pass == Pass::Backward ? 2.5 * forward : forward;
}

TileGrid::TileGrid(const Problem& problem, TileShape tiles) : problem_(problem), tiles_(tiles) {
  if (tiles.block_m < 1) throw Error("block_m", "must be >= 1, got " + std::to_string(tiles.block_m));
  if (tiles.block_n < 1) throw Error("block_n", "must be >= 1, got " + std::to_string(tiles.block_n));
  num_q_tiles_ = (problem.seqlen_q + tiles.block_m - 1) / tiles.block_m;
  num_kv_tiles_ = (problem.seqlen_k + tiles.block_n - 1) / tiles.block_n;
}

// The band of keys a query row sees (dash/attention_mask.hpp), in 64-bit arithmetic for the tile bounds.
namespace {
struct Band {
  bool left_bounded, right_bounded;
  int64_t left, right, offset;
};
Band band_of(const Problem& p) {
  const AttentionMask m = AttentionMask::of(p.to_c());
  return {m.left_bounded(), m.right_bounded(), m.left(), m.right(), m.diagonal_offset()};
}

// A block's query rows [i0, i1] and keys [j0, j1], clipped to the sequences.
struct BlockSpan {
  int64_t i0, i1, j0, j1;
};
BlockSpan span_of(const Problem& p, TileShape tiles, int32_t q_tile, int32_t kv_tile) {
  const int64_t i0 = int64_t(q_tile) * tiles.block_m;
  const int64_t j0 = int64_t(kv_tile) * tiles.block_n;
  return {i0, std::min<int64_t>(p.seqlen_q, i0 + tiles.block_m) - 1, j0,
          std::min<int64_t>(p.seqlen_k, j0 + tiles.block_n) - 1};
}

// Row i meets keys [j0, j1] iff lo(i) <= j1 and hi(i) >= j0. The band's edges are non-decreasing in the row,
// so against one KV tile the Q tiles wholly before the band (even the last row's band ends before j0) are a
// prefix and those wholly after it (even the first row's band starts past j1) a suffix; the rest meet it.
bool before_band(const Band& b, const BlockSpan& s) { return b.right_bounded && s.i1 + b.offset + b.right < s.j0; }
bool after_band(const Band& b, const BlockSpan& s) { return b.left_bounded && s.i0 + b.offset - b.left > s.j1; }
} // namespace

void TileGrid::visible_keys(int64_t row, int64_t& first, int64_t& last) const {
  const AttentionMask m = AttentionMask::of(problem_.to_c());
  first = m.key_begin(int32_t(row));
  last = int64_t(m.key_end(int32_t(row))) - 1;
}

BlockKind TileGrid::kind(int32_t q_tile, int32_t kv_tile) const {
  const BlockSpan s = span_of(problem_, tiles_, q_tile, kv_tile);
  const Band b = band_of(problem_);
  if (before_band(b, s) || after_band(b, s)) return BlockKind::Empty;
  // Fully visible iff the last row still sees key j0 and the first row already sees key j1.
  const bool lower_ok = !b.left_bounded || s.i1 + b.offset - b.left <= s.j0;
  const bool upper_ok = !b.right_bounded || s.i0 + b.offset + b.right >= s.j1;
  return (lower_ok && upper_ok) ? BlockKind::Full : BlockKind::Partial;
}

int64_t TileGrid::unmasked_pairs(int32_t q_tile, int32_t kv_tile) const {
  const int64_t i0 = int64_t(q_tile) * tiles_.block_m;
  const int64_t i1 = std::min<int64_t>(problem_.seqlen_q, i0 + tiles_.block_m);
  const int64_t j0 = int64_t(kv_tile) * tiles_.block_n;
  const int64_t j1 = std::min<int64_t>(problem_.seqlen_k, j0 + tiles_.block_n) - 1;
  int64_t pairs = 0;
  for (int64_t i = i0; i < i1; ++i) {
    int64_t first, last;
    visible_keys(i, first, last);
    first = std::max(first, j0);
    last = std::min(last, j1);
    if (last >= first) pairs += last - first + 1;
  }
  return pairs;
}

namespace detail {
// The Q tiles that meet KV tile `kv_tile`, [first, end) ([0, 0) if none), for the grid of `problem`: the ends
// of q_tiles_seen_by without the list between them, which the planner and validator would build and drop for
// every KV tile (declared in planner_internal.hpp).
std::pair<int32_t, int32_t> q_tile_range(const Problem& problem, const TileGrid& grid, int32_t kv_tile) {
  // The Q tiles before the band are a prefix and those after it a suffix: bisect for both boundaries.
  const Band b = band_of(problem);
  const auto first_where = [&](auto&& pred) {
    int32_t lo = 0, hi = grid.num_q_tiles();
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (pred(span_of(problem, grid.tiles(), mid, kv_tile))) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  const int32_t first = first_where([&](const BlockSpan& s) { return !before_band(b, s); });
  const int32_t end = first_where([&](const BlockSpan& s) { return after_band(b, s); });
  if (first >= end) return {0, 0}; // no Q tile: the empty range everyone has used
  return {first, end};
}
} // namespace detail

std::vector<int32_t> TileGrid::q_tiles_seen_by(int32_t kv_tile) const {
  // Bisected ends, so the cost is the answer's length (planning and validating a unit stay linear in its visits).
  const auto [first, end] = detail::q_tile_range(problem_, *this, kv_tile);
  std::vector<int32_t> rows(end - first);
  std::iota(rows.begin(), rows.end(), first);
  return rows;
}

int64_t TileGrid::total_unmasked_pairs() const {
  int64_t pairs = 0;
  for (int64_t i = 0; i < problem_.seqlen_q; ++i) {
    int64_t first, last;
    visible_keys(i, first, last);
    if (last >= first) pairs += last - first + 1;
  }
  return pairs;
}

} // namespace dash
