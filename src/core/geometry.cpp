// SPDX-License-Identifier: Apache-2.0
// Problem validation and the mask's tile geometry (see dash/geometry.hpp).
#include "dash/geometry.hpp"
#include "planner_internal.hpp"

#include "dash/attention_mask.hpp"
#include "dash/kernel_table.hpp"

#include <algorithm>
#include <climits>
#include <numeric>
#include <optional>
#include <sstream>
#include <tuple>
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
  // The backward kernels' tiles (dash/kernel_table.hpp): the row of this qk head dim (whatever its value head dim:
  // a head dim has one row, and a plan's tables do not depend on the value head dim). Head dims without a backward
  // kernel (planner and simulator studies) get the table's rule: 128-row Q tiles up to head dim 64, 64-row ones
  // above.
  for (const KernelTableRow& row : kKernelTable)
    if (row.head_dim == head_dim && has_backward(row)) return {row.bwd_block_m, row.bwd_block_n};
  if (head_dim <= 64) return {128, 128};
  return {64, 128};
}

const std::vector<int32_t>& kernel_head_dims() {
  static const std::vector<int32_t> dims = [] {
    std::vector<int32_t> d;
    for (const KernelTableRow& row : kKernelTable)
      if (row.head_dim_v == row.head_dim) d.push_back(row.head_dim);
    std::sort(d.begin(), d.end());
    return d;
  }();
  return dims;
}

std::string kernel_pair_name(int32_t head_dim, int32_t head_dim_v) {
  if (head_dim_v == 0 || head_dim_v == head_dim) return std::to_string(head_dim);
  return std::to_string(head_dim) + "/" + std::to_string(head_dim_v);
}

std::string kernel_pairs_text(KernelRows which) {
  std::vector<std::string> names;
  for (const KernelTableRow& row : kKernelTable) {
    if (which == KernelRows::WithBackward && !has_backward(row)) continue;
    if (which == KernelRows::ForwardOnly && has_backward(row)) continue;
    names.push_back(kernel_pair_name(row.head_dim, row.head_dim_v));
  }
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return text;
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

namespace {
BlockKind kind_of(const Band& b, const BlockSpan& s) {
  if (before_band(b, s) || after_band(b, s)) return BlockKind::Empty;
  // Fully visible iff the last row still sees key j0 and the first row already sees key j1.
  const bool lower_ok = !b.left_bounded || s.i1 + b.offset - b.left <= s.j0;
  const bool upper_ok = !b.right_bounded || s.i0 + b.offset + b.right >= s.j1;
  return (lower_ok && upper_ok) ? BlockKind::Full : BlockKind::Partial;
}
} // namespace

BlockKind TileGrid::kind(int32_t q_tile, int32_t kv_tile) const {
  return kind_of(band_of(problem_), span_of(problem_, tiles_, q_tile, kv_tile));
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
KvTileGeometry::KvTileGeometry(const Problem& problem, const TileGrid& grid) : problem_(problem), grid_(grid) {
  const Band b = band_of(problem);
  left_bounded_ = b.left_bounded;
  right_bounded_ = b.right_bounded;
  left_ = b.left;
  right_ = b.right;
  offset_ = b.offset;
}

std::pair<int32_t, int32_t> KvTileGeometry::q_range(int32_t kv_tile) const {
  // The Q tiles before the band are a prefix and those after it a suffix: bisect for both boundaries.
  const Band b{left_bounded_, right_bounded_, left_, right_, offset_};
  const auto first_where = [&](auto&& pred) {
    int32_t lo = 0, hi = grid_.num_q_tiles();
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (pred(span_of(problem_, grid_.tiles(), mid, kv_tile))) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  const int32_t first = first_where([&](const BlockSpan& s) { return !before_band(b, s); });
  const int32_t end = first_where([&](const BlockSpan& s) { return after_band(b, s); });
  if (first >= end) return {0, 0}; // no Q tile: the empty range everyone has used
  return {first, end};
}

KvTileRows KvTileGeometry::rows(int32_t kv_tile) const { return with_full_range(kv_tile, q_range(kv_tile)); }

std::pmr::vector<KvTileRows> KvTileGeometry::all_rows(std::pmr::memory_resource* memory) const {
  // Both ends of q_range are non-decreasing in the KV tile (the band's edges in the row): the Q tiles wholly before
  // the band of tile n are so for tile n + 1 (its first key is later), and those wholly after it were so for tile
  // n - 1 (whose last key is earlier). So each end moves forward from the last tile's: every Q tile is passed once
  // per end, where q_range bisects afresh for each KV tile.
  const Band b{left_bounded_, right_bounded_, left_, right_, offset_};
  const int32_t nq = grid_.num_q_tiles(), nk = grid_.num_kv_tiles();
  std::pmr::vector<KvTileRows> rows(memory);
  rows.reserve(size_t(nk));
  int32_t first = 0, end = 0;  // q_range's ends before the empty range is made [0, 0)
  for (int32_t kv = 0; kv < nk; ++kv) {
    while (first < nq && before_band(b, span_of(problem_, grid_.tiles(), first, kv))) ++first;
    while (end < nq && !after_band(b, span_of(problem_, grid_.tiles(), end, kv))) ++end;
    rows.push_back(with_full_range(kv, first >= end ? std::pair<int32_t, int32_t>{0, 0} : std::pair{first, end}));
  }
  return rows;
}

KvTileRows KvTileGeometry::with_full_range(int32_t kv_tile, std::pair<int32_t, int32_t> q_range) const {
  const Band b{left_bounded_, right_bounded_, left_, right_, offset_};
  const auto partial = [&](int32_t q) {
    return kind_of(b, span_of(problem_, grid_.tiles(), q, kv_tile)) == BlockKind::Partial;
  };
  KvTileRows r;
  std::tie(r.q_begin, r.q_end) = q_range;
  r.full_begin = r.q_begin;
  while (r.full_begin < r.q_end && partial(r.full_begin)) ++r.full_begin;
  r.full_end = r.q_end;
  while (r.full_end > r.full_begin && partial(r.full_end - 1)) --r.full_end;
  return r;
}

// The Q tiles that meet KV tile `kv_tile`, [first, end) ([0, 0) if none), for the grid of `problem`: the ends
// of q_tiles_seen_by without the list between them (declared in planner_internal.hpp).
std::pair<int32_t, int32_t> q_tile_range(const Problem& problem, const TileGrid& grid, int32_t kv_tile) {
  return KvTileGeometry(problem, grid).q_range(kv_tile);
}
} // namespace detail

std::vector<int32_t> TileGrid::q_tiles_seen_by(int32_t kv_tile) const {
  // Bisected ends, so the cost is the answer's length (planning and validating a unit stay linear in its visits).
  const auto [first, end] = detail::q_tile_range(problem_, *this, kv_tile);
  std::vector<int32_t> rows(end - first);
  std::iota(rows.begin(), rows.end(), first);
  return rows;
}

namespace {
// The sum of clamp(x, 0, m) over x in [0, b), b >= 0.
int64_t clamped_prefix_sum(int64_t b, int64_t m) {
  const int64_t rising = std::min(b, m);
  return rising * (rising - 1) / 2 + std::max<int64_t>(0, b - m) * m;
}

// The (query, key) pairs of a seqlen_q x seqlen_k rectangle with key - query <= t: row i has clamp(i + t + 1, 0, sk).
int64_t pairs_at_most(int64_t t, int64_t seqlen_q, int64_t seqlen_k) {
  const int64_t first = t + 1;
  return clamped_prefix_sum(std::max<int64_t>(0, first + seqlen_q), seqlen_k) -
         clamped_prefix_sum(std::max<int64_t>(0, first), seqlen_k);
}
} // namespace

int64_t TileGrid::total_unmasked_pairs() const {
  // Row i sees the keys j of the band d - left <= j - i <= d + right (dash/attention_mask.hpp): the rectangle's pairs
  // up to the band's upper diagonal less those below its lower one. In closed form, since a pack orders its sequences
  // by it: summing rows cost most of a millisecond for 1000 sequences of 1000 tokens.
  const AttentionMask m = AttentionMask::of(problem_.to_c());
  const int64_t sq = problem_.seqlen_q, sk = problem_.seqlen_k, d = m.diagonal_offset();
  const int64_t up_to_upper = m.right_bounded() ? pairs_at_most(d + m.right(), sq, sk) : sq * sk;
  const int64_t below_lower = m.left_bounded() ? pairs_at_most(d - m.left() - 1, sq, sk) : 0;
  return up_to_upper - below_lower;
}

// ---- Geometry classes (geometry_representative) ----
//
// With i0 = q bm, i1 = min(sq, i0 + bm) - 1, j0 = n bn, j1 = min(sk, j0 + bn) - 1 and d = sk - sq, kind() decides a
// block by four comparisons (R, L: the bounded sides after AttentionMask's clipping):
//   P1 before the band: i1 + d + R < j0        P2 after the band: i0 + d - L > j1
//   P3 lower edge full: i1 + d - L <= j0       P4 upper edge full: i0 + d + R >= j1
// Written out for interior and last tiles, each compares one quantity with a constant of the grid:
//   - d, for a non-last Q tile (P1, P3: i1 = i0 + bm - 1) or a non-last KV tile (P2, P4: j1 = j0 + bn - 1);
//   - sq against q bm + R + 1 (P4 of the last KV tile: j1 = sk - 1 cancels the sk in d);
//   - sk against n bn + L + 1 (P3 of the last Q tile: i1 = sq - 1 cancels the sq in d);
// and P1 of the last Q tile and P2 of the last KV tile never hold. So every block keeps its kind while sq, sk and d
// each stay between the same two consecutive thresholds of their own (the tile counts and the clipping are
// thresholds of sq and sk too): a class is {(sq, sk): sq in Sq, sk in Sk, sk - sq in D} for three intervals.
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }  // b > 0

// The values around x that no threshold separates from x; a threshold t lies between t - 1 and t.
class ThresholdInterval {
 public:
  explicit ThresholdInterval(int64_t x) : x_(x) {}

  void threshold(int64_t t) {
    if (t <= x_) lo_ = std::max(lo_, t);
    else hi_ = std::min(hi_, t - 1);
  }
  // The thresholds c - k step for k in [k0, k1] (step > 0): only the nearest on either side of x can bound it.
  void thresholds(int64_t c, int64_t step, int64_t k0, int64_t k1) {
    if (k0 > k1) return;
    const int64_t k = -floor_div(x_ - c, step);  // the least k with c - k step <= x: ceil((c - x) / step)
    if (std::max(k0, k) <= k1) threshold(c - std::max(k0, k) * step);
    if (std::min(k1, k - 1) >= k0) threshold(c - std::min(k1, k - 1) * step);
  }
  int64_t lo() const { return lo_; }
  int64_t hi() const { return hi_; }

 private:
  static constexpr int64_t kUnbounded = int64_t(1) << 62;  // far beyond any sum of two int32 lengths
  int64_t x_, lo_ = -kUnbounded, hi_ = kUnbounded;
};

} // namespace

namespace detail {

std::optional<GeometryClass> geometry_class(const Problem& problem, TileShape tiles) {
  const int64_t sq = problem.seqlen_q, sk = problem.seqlen_k, bm = tiles.block_m, bn = tiles.block_n;
  if (sq < 1 || sk < 1 || bm < 1 || bn < 1) return std::nullopt;  // no grid to represent
  const int64_t nq = (sq + bm - 1) / bm, nk = (sk + bn - 1) / bn;
  if (nq > DASH_PLAN_MAX_TILES || nk > DASH_PLAN_MAX_TILES) return std::nullopt;  // never planned: not worth the loops
  const AttentionMask mask = AttentionMask::of(problem.to_c());
  ThresholdInterval q_len(sq), k_len(sk), offset(sk - sq);
  // The tile counts, within int32.
  q_len.threshold((nq - 1) * bm + 1);
  q_len.threshold(std::min<int64_t>(nq * bm, INT32_MAX) + 1);
  k_len.threshold((nk - 1) * bn + 1);
  k_len.threshold(std::min<int64_t>(nk * bn, INT32_MAX) + 1);
  // The clipping: a window side bounds the band iff it is narrower than the sequence it limits.
  if (problem.mask == Mask::Window && problem.window_right >= 0) q_len.threshold(int64_t(problem.window_right) + 1);
  if (problem.mask == Mask::Window && problem.window_left >= 0) k_len.threshold(int64_t(problem.window_left) + 1);
  if (mask.right_bounded()) {
    const int64_t r = mask.right();
    q_len.thresholds((nq - 1) * bm + r + 2, bm, 0, nq - 1);  // P4, last KV tile: q = nq - 1 - k
    for (int64_t n = 0; n < nk; ++n) {
      offset.thresholds(n * bn - bm - r + 1, bm, 0, nq - 2);                  // P1, Q tile k < nq - 1
      if (n < nk - 1) offset.thresholds((n + 1) * bn - 1 - r, bm, 0, nq - 1);  // P4, Q tile k
    }
  }
  if (mask.left_bounded()) {
    const int64_t l = mask.left();
    k_len.thresholds((nk - 1) * bn + l + 2, bn, 0, nk - 1);  // P3, last Q tile: n = nk - 1 - k
    for (int64_t n = 0; n < nk; ++n) {
      if (n < nk - 1) offset.thresholds((n + 1) * bn + l, bm, 0, nq - 1);  // P2, Q tile k
      offset.thresholds(n * bn - bm + l + 2, bm, 0, nq - 2);               // P3, Q tile k < nq - 1
    }
  }
  // The class's lexicographically largest member: the longest sq that some sk of the class pairs with, then the
  // longest such sk. (sq, sk) is a member, so both bounds are at least its own lengths and at most the intervals'.
  GeometryClass c{q_len.lo(), q_len.hi(), k_len.lo(), k_len.hi(), offset.lo(), offset.hi(), 0, 0};
  const int64_t rep_q = std::min(q_len.hi(), k_len.hi() - offset.lo());
  c.representative_q = int32_t(rep_q);
  c.representative_k = int32_t(std::min(k_len.hi(), rep_q + offset.hi()));
  return c;
}

}  // namespace detail

Problem geometry_representative(const Problem& problem, TileShape tiles) {
  Problem out = problem;
  if (const std::optional<detail::GeometryClass> c = detail::geometry_class(problem, tiles)) {
    out.seqlen_q = c->representative_q;
    out.seqlen_k = c->representative_k;
  }
  return out;
}

} // namespace dash
