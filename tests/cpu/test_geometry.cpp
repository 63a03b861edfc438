// SPDX-License-Identifier: Apache-2.0
// The tile geometry against a brute-force element-by-element evaluation of the mask, and the lengths that stand for
// a geometry (geometry_representative, the lengths of a unit template's key).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "dash/attention_mask.hpp"
#include "dash/geometry.hpp"
#include "planner_internal.hpp"  // dash::detail::geometry_class
#include "test_problems.hpp"

namespace {

// Query row i sees key j: the definition written out directly, independent of TileGrid's interval algebra.
bool visible(const dash::Problem& p, int64_t i, int64_t j) {
  const int64_t diag = i + p.seqlen_k - p.seqlen_q;
  switch (p.mask) {
    case dash::Mask::Full: return true;
    case dash::Mask::Causal: return j <= diag;
    case dash::Mask::Window:
      return (p.window_left < 0 || j >= diag - p.window_left) && (p.window_right < 0 || j <= diag + p.window_right);
  }
  return false;
}

void expect_grid_matches_brute_force(const dash::Problem& p, dash::TileShape t) {
  const dash::TileGrid grid(p, t);
  int64_t total = 0;
  for (int32_t q = 0; q < grid.num_q_tiles(); ++q) {
    for (int32_t kv = 0; kv < grid.num_kv_tiles(); ++kv) {
      int64_t pairs = 0, cells = 0;
      for (int64_t i = int64_t(q) * t.block_m; i < std::min<int64_t>(p.seqlen_q, (q + 1) * int64_t(t.block_m)); ++i)
        for (int64_t j = int64_t(kv) * t.block_n; j < std::min<int64_t>(p.seqlen_k, (kv + 1) * int64_t(t.block_n)); ++j) {
          ++cells;
          pairs += visible(p, i, j);
        }
      const dash::BlockKind expected =
          pairs == 0 ? dash::BlockKind::Empty : (pairs == cells ? dash::BlockKind::Full : dash::BlockKind::Partial);
      ASSERT_EQ(int(grid.kind(q, kv)), int(expected)) << p.describe() << " block q" << q << " kv" << kv;
      ASSERT_EQ(grid.unmasked_pairs(q, kv), pairs) << p.describe() << " block q" << q << " kv" << kv;
      total += pairs;
    }
  }
  EXPECT_EQ(grid.total_unmasked_pairs(), total) << p.describe();
}

// A mask and its window (-1 = unbounded side).
struct MaskCase {
  dash::Mask mask;
  int left, right;
  dash::Problem problem(int seqlen_q, int seqlen_k) const {
    const dash::Problem p = dash::test::make_problem(seqlen_q, seqlen_k, mask);
    return mask == dash::Mask::Window ? dash::test::windowed(p, left, right) : p;
  }
};

TEST(Geometry, MatchesBruteForceOnAwkwardShapes) {
  const std::vector<std::pair<int, int>> lengths = {{1, 1}, {17, 17}, {113, 203}, {203, 113}, {128, 128}, {129, 257}, {300, 50}};
  const std::vector<dash::TileShape> tiles = {{64, 128}, {128, 128}, {80, 128}, {16, 16}};
  const std::vector<MaskCase> masks = {{dash::Mask::Full, -1, -1}, {dash::Mask::Causal, -1, -1},
                                       {dash::Mask::Window, 37, 5}, {dash::Mask::Window, -1, 3},
                                       {dash::Mask::Window, 100, -1}, {dash::Mask::Window, 0, 0}};
  for (auto [sq, sk] : lengths)
    for (auto t : tiles)
      for (auto m : masks) expect_grid_matches_brute_force(m.problem(sq, sk), t);
}

TEST(Geometry, TotalPairsMatchTheRowByRowCount) {
  // total_unmasked_pairs counts in closed form; every pair of lengths up to 160 under each mask and window (narrower
  // and wider than the sequences) against the sum of each row's visible keys.
  const std::vector<MaskCase> masks = {{dash::Mask::Full, -1, -1},   {dash::Mask::Causal, -1, -1},
                                       {dash::Mask::Window, 37, 5},  {dash::Mask::Window, -1, 3},
                                       {dash::Mask::Window, 100, -1}, {dash::Mask::Window, 0, 0},
                                       {dash::Mask::Window, 200, 150}};
  for (const MaskCase& m : masks)
    for (int sq = 1; sq <= 160; ++sq)
      for (int sk = 1; sk <= 160; ++sk) {
        const dash::Problem p = m.problem(sq, sk);
        const dash::TileGrid grid(p, {1, 1});
        int64_t rows = 0;
        for (int64_t i = 0; i < sq; ++i) {
          int64_t first, last;
          grid.visible_keys(i, first, last);
          rows += std::max<int64_t>(0, last - first + 1);
        }
        ASSERT_EQ(grid.total_unmasked_pairs(), rows) << p.describe();
      }
  // And at the longest lengths, where the products need 64 bits.
  const dash::Problem longest = dash::test::make_problem(INT32_MAX, INT32_MAX, dash::Mask::Causal);
  EXPECT_EQ(dash::TileGrid(longest, {64, 128}).total_unmasked_pairs(),
            int64_t(INT32_MAX) * (int64_t(INT32_MAX) + 1) / 2);
}

TEST(Geometry, CausalSquareCountsTheLowerTriangle) {
  dash::Problem p;
  p.seqlen_q = p.seqlen_k = 1000;
  p.mask = dash::Mask::Causal;
  EXPECT_EQ(dash::TileGrid(p, {64, 128}).total_unmasked_pairs(), 1000LL * 1001 / 2);
}

TEST(Geometry, QueriesBeforeTheFirstKeyOfAShorterKeySequenceSeeNothing) {
  dash::Problem p; // bottom-right alignment: with sq > sk the first sq - sk queries see no key
  p.seqlen_q = 300;
  p.seqlen_k = 100;
  p.mask = dash::Mask::Causal;
  const dash::TileGrid grid(p, {64, 64});
  EXPECT_EQ(grid.kind(0, 0), dash::BlockKind::Empty);     // rows 0..63
  EXPECT_EQ(grid.kind(3, 0), dash::BlockKind::Partial);   // rows 192..255 meet the diagonal at key 0
  EXPECT_EQ(grid.q_tiles_seen_by(1), (std::vector<int32_t>{4})); // key 64 is first seen by row 264
}

TEST(Geometry, InvalidProblemsNameTheArgument) {
  auto error_of = [](dash::Problem p) {
    try {
      p.validate();
    } catch (const dash::Error& e) {
      return e.argument();
    }
    return std::string("no error");
  };
  dash::Problem p;
  p.seqlen_q = p.seqlen_k = 128;
  EXPECT_EQ(error_of(p), "no error");
  { auto q = p; q.heads_q = 6; q.heads_kv = 4; EXPECT_EQ(error_of(q), "heads_kv"); }
  { auto q = p; q.seqlen_k = 0; EXPECT_EQ(error_of(q), "seqlen_k"); }
  { auto q = p; q.batch = -1; EXPECT_EQ(error_of(q), "batch"); }
  { auto q = p; q.window_left = 3; EXPECT_EQ(error_of(q), "window"); }
  { auto q = p; q.mask = dash::Mask::Window; q.window_right = -5; EXPECT_EQ(error_of(q), "window_right"); }
  EXPECT_THROW(dash::parse_mask("diagonal"), dash::Error);
  EXPECT_THROW(dash::TileGrid(p, {0, 128}), dash::Error);
}

// The kernels' mask (AttentionMask::of, which makes a window side wider than the sequences unbounded) sees exactly
// the keys of the definition, row by row, on windows narrower and wider than the sequences.
TEST(AttentionMask, KeyRangesMatchTheDefinition) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    dash::Problem p;
    p.seqlen_q = 1 + int32_t(rng() % 300);
    p.seqlen_k = 1 + int32_t(rng() % 300);
    p.mask = static_cast<dash::Mask>(rng() % 3);
    if (p.mask == dash::Mask::Window) {
      auto side = [&] { return int32_t(rng() % 5 == 0 ? -1 : rng() % 700); };
      p.window_left = side();
      p.window_right = side();
    }
    const dash::AttentionMask mask = dash::AttentionMask::of(p.to_c());
    for (int32_t i = 0; i < p.seqlen_q; ++i) {
      int32_t begin = p.seqlen_k, end = 0;  // the visible keys of row i, as an interval
      for (int32_t j = 0; j < p.seqlen_k; ++j)
        if (visible(p, i, j)) begin = std::min(begin, j), end = j + 1;
      if (begin >= end) {
        EXPECT_GE(mask.key_begin(i), mask.key_end(i)) << p.describe() << " row " << i << " sees no key";
      } else {
        EXPECT_EQ(mask.key_begin(i), begin) << p.describe() << " row " << i;
        EXPECT_EQ(mask.key_end(i), end) << p.describe() << " row " << i;
      }
    }
  }
}

} // namespace

// dash_problem.head_dim_v (format version 2): 0 means head_dim; FLOPs count 2 * (head_dim + head_dim_v) per pair, as
// FlashAttention counts separate qk and v head dims; the problem text names a differing value head dim.
TEST(Geometry, ValueHeadDimDefaultsToHeadDimAndEntersTheFlops) {
  dash::Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 3;
  p.seqlen_q = p.seqlen_k = 100;
  p.head_dim = 128;
  EXPECT_EQ(p.value_head_dim(), 128);
  const double pairs = 100.0 * 100.0;
  EXPECT_DOUBLE_EQ(dash::attention_flops(p, dash::Pass::Forward), 4.0 * 2 * 3 * 128 * pairs);
  p.head_dim = 192;
  p.head_dim_v = 128;
  EXPECT_EQ(p.value_head_dim(), 128);
  EXPECT_DOUBLE_EQ(dash::attention_flops(p, dash::Pass::Forward), 2.0 * 2 * 3 * (192 + 128) * pairs);
  EXPECT_DOUBLE_EQ(dash::attention_flops(p, dash::Pass::Backward), 2.5 * 2.0 * 2 * 3 * (192 + 128) * pairs);
  EXPECT_NE(p.describe().find("(v 128)"), std::string::npos) << p.describe();
  const dash::Problem round_trip = dash::Problem::from_c(p.to_c());
  EXPECT_EQ(round_trip.head_dim_v, 128);
  p.head_dim_v = -1;
  try {
    p.validate();
    ADD_FAILURE() << "a negative head_dim_v was accepted";
  } catch (const dash::Error& e) {
    EXPECT_EQ(e.argument(), "head_dim_v");
  }
}

// ---- geometry_representative ----

namespace {

// The tile counts and every block's kind: all that the planners and the validator read of a problem's lengths.
std::vector<int> tile_geometry(const dash::Problem& p, dash::TileShape t) {
  const dash::TileGrid grid(p, t);
  std::vector<int> g = {grid.num_q_tiles(), grid.num_kv_tiles()};
  for (int32_t q = 0; q < grid.num_q_tiles(); ++q)
    for (int32_t kv = 0; kv < grid.num_kv_tiles(); ++kv) g.push_back(int(grid.kind(q, kv)));
  return g;
}

// The masks the geometry sweeps run: each kind, and windows narrower than the sequences, wider, and of one side.
const std::vector<MaskCase>& sweep_masks() {
  static const std::vector<MaskCase> masks = {{dash::Mask::Full, -1, -1},  {dash::Mask::Causal, -1, -1},
                                              {dash::Mask::Window, 37, 5}, {dash::Mask::Window, -1, 0},
                                              {dash::Mask::Window, 100, -1}, {dash::Mask::Window, 0, 0},
                                              {dash::Mask::Window, 130, 70}};
  return masks;
}

} // namespace

TEST(GeometryRepresentative, KeepsTheTileCountsAndEveryBlockKind) {
  // Every pair of lengths up to 200 (90 at the small tiles, whose grids have more tiles): the kernels' tiles, tiles
  // where neither side divides the other, each mask, and windows narrower than the sequences, wider, and of one side.
  const std::vector<MaskCase>& masks = sweep_masks();
  const std::vector<dash::TileShape> tiles = {{64, 128}, {128, 128}, {80, 128}, {16, 24}, {24, 16}};
  int64_t checked = 0;
  for (const dash::TileShape t : tiles) {
    const int longest = t.block_m < 64 ? 90 : 200;
    for (const MaskCase& m : masks) {
      std::map<std::vector<int>, std::set<std::pair<int, int>>> representatives;  // geometry -> its representatives
      for (int sq = 1; sq <= longest; ++sq)
        for (int sk = 1; sk <= longest; ++sk) {
          const dash::Problem p = m.problem(sq, sk);
          dash::Problem r = dash::geometry_representative(p, t);
          const std::vector<int> geometry = tile_geometry(p, t);
          ASSERT_EQ(tile_geometry(r, t), geometry) << p.describe() << " -> " << r.seqlen_q << " x " << r.seqlen_k
                                                   << ", tiles " << t.block_m << "x" << t.block_n;
          const dash::Problem again = dash::geometry_representative(r, t);
          ASSERT_EQ(again.seqlen_q, r.seqlen_q) << p.describe() << ": not idempotent";
          ASSERT_EQ(again.seqlen_k, r.seqlen_k) << p.describe() << ": not idempotent";
          ASSERT_GE(r.seqlen_q, sq) << p.describe() << ": the class's longest seqlen_q comes first";
          r.seqlen_q = p.seqlen_q;  // nothing else changes
          r.seqlen_k = p.seqlen_k;
          ASSERT_EQ(r.describe(), p.describe());
          representatives[geometry].insert({again.seqlen_q, again.seqlen_k});
          ++checked;
        }
      // Full and causal geometries have one representative each (windows may split a geometry into a few classes).
      if (m.mask != dash::Mask::Window)
        for (const auto& [geometry, reps] : representatives)
          EXPECT_EQ(reps.size(), 1u) << dash::mask_name(m.mask) << ", tiles " << t.block_m << "x" << t.block_n;
    }
  }
  EXPECT_GT(checked, 900000);
}

TEST(GeometryRepresentative, CollapsesSelfAttentionLengthsToTheirGeometries) {
  // Causal self-attention at head dim 128's tiles, as a pack of documents has it: lengths 1..2048 have 32 Q-tile
  // counts, and within one the last Q tile is full against its diagonal KV tile only when it holds one row. So at
  // most 64 geometries, and exactly one representative for each.
  std::map<std::vector<int>, std::set<std::pair<int, int>>> representatives;
  for (int s = 1; s <= 2048; ++s) {
    dash::Problem p;
    p.seqlen_q = p.seqlen_k = s;
    p.mask = dash::Mask::Causal;
    const dash::Problem r = dash::geometry_representative(p, {64, 128});
    representatives[tile_geometry(p, {64, 128})].insert({r.seqlen_q, r.seqlen_k});
  }
  EXPECT_LE(representatives.size(), 64u);
  for (const auto& [geometry, reps] : representatives) EXPECT_EQ(reps.size(), 1u);
}

TEST(GeometryRepresentative, EveryMemberOfAClassHasItsClass) {
  // geometry_class's box: every pair of lengths it holds has the same class (box and representative), which is what
  // lets plan_for_pack take a shape's representative from the last shape's class. Each pair up to 200 (90 at small
  // tiles) is compared with the class of the pair before it in both orders, and with a few far members of its own.
  const std::vector<MaskCase>& masks = sweep_masks();
  const std::vector<dash::TileShape> tiles = {{64, 128}, {128, 128}, {80, 128}, {16, 24}, {24, 16}};
  std::mt19937 rng(7);
  int64_t held = 0;
  for (const dash::TileShape t : tiles) {
    const int longest = t.block_m < 64 ? 90 : 200;
    for (const MaskCase& m : masks) {
      for (bool by_rows : {true, false}) {
        std::optional<dash::detail::GeometryClass> last;
        for (int i = 1; i <= longest; ++i)
          for (int j = 1; j <= longest; ++j) {
            const dash::Problem p = by_rows ? m.problem(i, j) : m.problem(j, i);
            const std::optional<dash::detail::GeometryClass> c = dash::detail::geometry_class(p, t);
            ASSERT_TRUE(c.has_value()) << p.describe();
            ASSERT_TRUE(c->contains(p.seqlen_q, p.seqlen_k)) << p.describe();
            const dash::Problem r = dash::geometry_representative(p, t);
            ASSERT_EQ(r.seqlen_q, c->representative_q) << p.describe();
            ASSERT_EQ(r.seqlen_k, c->representative_k) << p.describe();
            if (last && last->contains(p.seqlen_q, p.seqlen_k)) {
              ASSERT_TRUE(*last == *c) << p.describe() << ", tiles " << t.block_m << "x" << t.block_n;
              ++held;
            }
            last = c;
            // Members anywhere in the box (the box may reach far past the lengths checked here).
            for (int k = 0; k < 2; ++k) {
              const int64_t q_hi = std::min<int64_t>(c->q_hi, 100000), k_hi = std::min<int64_t>(c->k_hi, 100000);
              const int64_t q = std::uniform_int_distribution<int64_t>(c->q_lo, q_hi)(rng);
              const int64_t kk = std::clamp<int64_t>(q + std::uniform_int_distribution<int64_t>(
                                                             std::max<int64_t>(c->offset_lo, -100000),
                                                             std::min<int64_t>(c->offset_hi, 100000))(rng),
                                                     c->k_lo, k_hi);
              if (!c->contains(q, kk)) continue;
              const std::optional<dash::detail::GeometryClass> member =
                  dash::detail::geometry_class(m.problem(int(q), int(kk)), t);
              ASSERT_TRUE(member.has_value());
              ASSERT_TRUE(*member == *c) << p.describe() << " and its member " << q << " x " << kk;
              ++held;
            }
          }
      }
    }
  }
  EXPECT_GT(held, 500000);
}

TEST(Geometry, KvTileRowsInOneSweepMatchThoseOfEachTile) {
  // KvTileGeometry::all_rows (the planners' and the validator's, one sweep over the grid) against rows() of each KV
  // tile (q_tile_range's bisection and the kinds at its ends), over every pair of lengths up to 150 (60 at small
  // tiles), each mask and windows narrower and wider than the sequences.
  const std::vector<MaskCase>& masks = sweep_masks();
  const std::vector<dash::TileShape> tiles = {{64, 128}, {128, 128}, {80, 128}, {16, 24}, {24, 16}, {1, 1}};
  int64_t checked = 0;
  for (const dash::TileShape t : tiles) {
    const int longest = t.block_m < 64 ? 60 : 150;
    for (const MaskCase& m : masks)
      for (int sq = 1; sq <= longest; ++sq)
        for (int sk = 1; sk <= longest; ++sk) {
          const dash::Problem p = m.problem(sq, sk);
          const dash::TileGrid grid(p, t);
          const dash::detail::KvTileGeometry geometry(p, grid);
          const std::pmr::vector<dash::detail::KvTileRows> all = geometry.all_rows();
          ASSERT_EQ(all.size(), size_t(grid.num_kv_tiles()));
          for (int32_t kv = 0; kv < grid.num_kv_tiles(); ++kv) {
            const dash::detail::KvTileRows one = geometry.rows(kv);
            const auto [first, end] = dash::detail::q_tile_range(p, grid, kv);
            ASSERT_EQ(all[size_t(kv)].q_begin, one.q_begin) << p.describe() << ", KV tile " << kv;
            ASSERT_EQ(all[size_t(kv)].q_end, one.q_end) << p.describe() << ", KV tile " << kv;
            ASSERT_EQ(all[size_t(kv)].full_begin, one.full_begin) << p.describe() << ", KV tile " << kv;
            ASSERT_EQ(all[size_t(kv)].full_end, one.full_end) << p.describe() << ", KV tile " << kv;
            ASSERT_EQ(one.q_begin, first);
            ASSERT_EQ(one.q_end, end);
            ++checked;
          }
        }
  }
  EXPECT_GT(checked, 1000000);
}
