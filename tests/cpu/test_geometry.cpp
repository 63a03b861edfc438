// SPDX-License-Identifier: Apache-2.0
// The tile geometry against a brute-force element-by-element evaluation of the mask.
#include <gtest/gtest.h>

#include <random>

#include "dash/attention_mask.hpp"
#include "dash/geometry.hpp"

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

TEST(Geometry, MatchesBruteForceOnAwkwardShapes) {
  const std::vector<std::pair<int, int>> lengths = {{1, 1}, {17, 17}, {113, 203}, {203, 113}, {128, 128}, {129, 257}, {300, 50}};
  const std::vector<dash::TileShape> tiles = {{64, 128}, {128, 128}, {80, 128}, {16, 16}};
  struct MaskCase { dash::Mask mask; int left, right; };
  const std::vector<MaskCase> masks = {{dash::Mask::Full, -1, -1}, {dash::Mask::Causal, -1, -1},
                                       {dash::Mask::Window, 37, 5}, {dash::Mask::Window, -1, 3},
                                       {dash::Mask::Window, 100, -1}, {dash::Mask::Window, 0, 0}};
  for (auto [sq, sk] : lengths)
    for (auto t : tiles)
      for (auto m : masks) {
        dash::Problem p;
        p.seqlen_q = sq;
        p.seqlen_k = sk;
        p.mask = m.mask;
        p.window_left = m.left;
        p.window_right = m.right;
        expect_grid_matches_brute_force(p, t);
      }
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
