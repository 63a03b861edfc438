// SPDX-License-Identifier: Apache-2.0
// hopper/fwd/fwd_tile_order.hpp — the order in which the forward's persistent CTAs take a fixed-length problem's
// work tiles: work-tile index -> (Q tile, (batch, query head) pair). Host and device code, so that the CPU tests
// check the order the kernel uses.
//
// Pair by pair, Q tiles fastest, so that the CTAs running at one time share the K and V of one or two heads in
// L2. Causal: each pair's Q tiles in decreasing order, the ones that see the most keys first, so that a pair's
// short tiles fill the gaps its long ones leave.
//
// The causal tail. A CTA takes its next tile when it *starts* its current one (fwd_next_tile), so at the end of
// the grid a CTA may hold a long tile while others have nothing left. Pair by pair, the last grid's worth of
// tiles mixes the last pairs' long and short tiles, and the SMs ran idle for 10.6% of the elapsed time at 8k
// tokens causal (ncu, 2026-12-02; 4.1% for the full mask). So the last `tail_pairs` pairs are interleaved: their
// Q tiles run longest first across all of them (the longest tile of each, then the second longest, ...), and the
// grid ends on the shortest tiles of every one. A list-scheduling model of the claim-ahead rule puts the makespan
// at 1.004-1.021 of the ideal for 1k-16k tokens with four grids' worth of tiles interleaved, against 1.049-1.105
// pair by pair; measured on the H200, the idle share at 8k causal fell from 9.7% to 2.0% and the causal forward
// gained 5-14% at head dims 64, 128 and 256 (docs/benchmarks.md). Which CTA computes a tile does not change its bits.
#pragma once

#include <cstdint>

#include "dash/plan_format.h"  // DASH_HOST_DEVICE

namespace dash::hopper::fwd {

struct FwdTileOrder {
  int32_t m_blocks;    // Q tiles per pair
  int32_t pairs;       // batch * heads_q
  int32_t tail_pairs;  // the last tail_pairs pairs run interleaved (0: none)
  bool decreasing;     // causal: each pair's Q tiles longest first
};

struct FwdTilePlace {
  int32_t m_block;
  int32_t pair;  // batch * heads_q + head_q
};

// index in [0, m_blocks * pairs): a bijection onto (m_block, pair).
DASH_HOST_DEVICE inline FwdTilePlace fwd_tile_place(FwdTileOrder const& order, int32_t index) {
  int32_t const tail_begin = (order.pairs - order.tail_pairs) * order.m_blocks;
  int32_t rank, pair;  // rank: the tile's position in its pair's order
  if (index < tail_begin) {
    rank = index % order.m_blocks;
    pair = index / order.m_blocks;
  } else {
    int32_t const local = index - tail_begin;
    rank = local / order.tail_pairs;
    pair = order.pairs - order.tail_pairs + local % order.tail_pairs;
  }
  return {order.decreasing ? order.m_blocks - 1 - rank : rank, pair};
}

// How many pairs the causal tail interleaves on a grid of `ctas`: enough for four grids' worth of tiles (the
// model's 1.004-1.021; two grids' worth model at 1.015-1.033), at most all of them. Non-causal tiles are all alike:
// none.
inline int32_t fwd_tail_pairs(bool causal, int32_t m_blocks, int32_t pairs, int32_t ctas) {
  if (!causal || m_blocks <= 1) return 0;
  int64_t const wanted = (int64_t(4) * ctas + m_blocks - 1) / m_blocks;
  return int32_t(wanted < pairs ? wanted : pairs);
}

}  // namespace dash::hopper::fwd
