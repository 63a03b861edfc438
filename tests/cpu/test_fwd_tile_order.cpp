// SPDX-License-Identifier: Apache-2.0
// The forward kernel's fixed-length work-tile order (src/cuda/hopper/fwd/fwd_tile_order.hpp), checked on the host:
// every (Q tile, pair) exactly once, each pair's tiles in the promised order, and the causal tail interleaved.
#include <gtest/gtest.h>

#include <vector>

#include "hopper/fwd/fwd_tile_order.hpp"

namespace {

using dash::hopper::fwd::fwd_tail_pairs;
using dash::hopper::fwd::fwd_tile_place;
using dash::hopper::fwd::FwdTileOrder;
using dash::hopper::fwd::FwdTilePlace;

std::vector<FwdTilePlace> all_places(FwdTileOrder const& order) {
  std::vector<FwdTilePlace> places;
  for (int32_t i = 0; i < order.m_blocks * order.pairs; ++i) places.push_back(fwd_tile_place(order, i));
  return places;
}

TEST(FwdTileOrder, EveryTileOnceInEachPairsOrder) {
  for (bool causal : {false, true}) {
    for (int32_t m_blocks : {1, 2, 3, 8, 64, 128}) {
      for (int32_t pairs : {1, 2, 5, 16, 32, 256}) {
        for (int32_t ctas : {1, 7, 132}) {
          FwdTileOrder const order{m_blocks, pairs, fwd_tail_pairs(causal, m_blocks, pairs, ctas), causal};
          ASSERT_GE(order.tail_pairs, 0);
          ASSERT_LE(order.tail_pairs, pairs);
          std::vector<int> seen(size_t(m_blocks) * pairs, 0);
          std::vector<int32_t> last_rank(pairs, -1);  // the rank in the pair's order of its last tile seen
          for (FwdTilePlace const& p : all_places(order)) {
            ASSERT_GE(p.pair, 0);
            ASSERT_LT(p.pair, pairs);
            ASSERT_GE(p.m_block, 0);
            ASSERT_LT(p.m_block, m_blocks);
            ++seen[size_t(p.pair) * m_blocks + p.m_block];
            int32_t const rank = causal ? m_blocks - 1 - p.m_block : p.m_block;
            EXPECT_EQ(rank, last_rank[p.pair] + 1) << "pair " << p.pair << ": causal tiles longest first, "
                                                   << "full in increasing order";
            last_rank[p.pair] = rank;
          }
          for (int count : seen) ASSERT_EQ(count, 1) << m_blocks << " x " << pairs;
        }
      }
    }
  }
}

TEST(FwdTileOrder, CausalTailInterleavesFourGridsOfTiles) {
  // 8k tokens in 128-row tiles, 2 x 16 pairs, 132 CTAs: ceil(4 x 132 / 64) = 9 pairs interleaved.
  FwdTileOrder const order{64, 32, fwd_tail_pairs(true, 64, 32, 132), true};
  ASSERT_EQ(order.tail_pairs, 9);
  std::vector<FwdTilePlace> const places = all_places(order);
  int32_t const tail_begin = (32 - 9) * 64;
  // Before the tail: pair by pair.
  EXPECT_EQ(places[0].pair, 0);
  EXPECT_EQ(places[63].pair, 0);
  EXPECT_EQ(places[64].pair, 1);
  // The tail: the longest tile of each of its pairs, then the next longest, ...; it ends on the shortest ones.
  for (int32_t i = 0; i < 9; ++i) {
    EXPECT_EQ(places[tail_begin + i].pair, 23 + i);
    EXPECT_EQ(places[tail_begin + i].m_block, 63);
    EXPECT_EQ(places[places.size() - 9 + i].m_block, 0);
  }
  // Full masks and single-tile pairs: nothing to interleave.
  EXPECT_EQ(fwd_tail_pairs(false, 64, 32, 132), 0);
  EXPECT_EQ(fwd_tail_pairs(true, 1, 32, 132), 0);
  // Fewer pairs than the tail wants: all of them.
  EXPECT_EQ(fwd_tail_pairs(true, 8, 16, 132), 16);
}

}  // namespace
