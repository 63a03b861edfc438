// SPDX-License-Identifier: Apache-2.0
// hopper/fwd/fwd_softmax.cuh — the per-thread math between the two GEMMs of the forward kernel: the mask (from
// dash::AttentionMask) and the online softmax (running row max and row sum, exp2 with log2(e) folded into the
// scale). The accumulator views it relies on are in hopper/warpgroup_mma.cuh.
#pragma once

#include <cmath>

#include <cute/tensor.hpp>

#include "dash/attention_mask.hpp"
#include "hopper/fast_math.cuh"
#include "hopper/ptx.cuh"  // pack_pair

namespace dash::hopper::fwd {

// Sets to -inf the scores of keys a query row may not see. `coords` holds each register's (row, column) inside the
// (kBlockM x kBlockN) tile for this thread, `coords0` the same for thread 0 (compile-time constants); row_base /
// col_base place the tile in the sequences. Visible: mask.key_begin(row) <= column < mask.key_end(row).
// A register's coordinates are this thread's first register's plus thread 0's of that register (the wgmma
// accumulator layout; the layout check verifies it), so each test compares a constant column with a per-row limit
// (one ISETP with an immediate and one FSEL per score, as FA3's mask). Without a left edge (full and causal
// masks: key_begin is 0 for every row) only the right limit is tested; the branch is uniform over the tile.
template <class ScoresRC, class CoordsRC, class Coords0RC>
__device__ __forceinline__ void apply_mask(ScoresRC& scores, CoordsRC const& coords, Coords0RC const& coords0,
                                           int row_base, int col_base, AttentionMask const& mask) {
  using namespace cute;
  int const thread_row = row_base + get<0>(coords(0, 0)) - get<0>(coords0(0, 0));
  int const thread_col = col_base + get<1>(coords(0, 0)) - get<1>(coords0(0, 0));
  if (!mask.left_bounded()) {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(scores); ++r) {
      int const col_end = mask.key_end(thread_row + get<0>(coords0(r, 0))) - thread_col;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) {
        if (get<1>(coords0(r, c)) >= col_end) scores(r, c) = -INFINITY;
      }
    }
  } else {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(scores); ++r) {
      int const row = thread_row + get<0>(coords0(r, 0));
      int const col_begin = mask.key_begin(row) - thread_col;
      int const col_end = mask.key_end(row) - thread_col;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) {
        int const col = get<1>(coords0(r, c));
        if (col < col_begin || col >= col_end) scores(r, c) = -INFINITY;
      }
    }
  }
}

// Online softmax over the rows a thread holds. Scores stay in raw units; the running max is in raw units too
// and scaled on use, so P = exp2(s * scale_log2 - max * scale_log2) is one FFMA and one MUFU.EX2 per score.
// row_sum is this thread's partial sum over its own columns; the quad reduction happens once, at the end.
// kExp2PolyEvery > 0: every kExp2PolyEvery-th column uses exp2_polynomial instead of MUFU.EX2.
template <int kRows, int kExp2PolyEvery = 0>
struct OnlineSoftmax {
  float row_max[kRows];
  float row_sum[kRows];
  float scale_log2;

  __device__ __forceinline__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // Replaces the scores of one KV tile by their unnormalised probabilities and returns, per row, the factor
  // by which the output accumulated so far must be multiplied (0 on the first tile, where it is empty).
  template <bool kFirstTile, class ScoresRC>
  __device__ __forceinline__ void update(ScoresRC& scores, float (&o_rescale)[kRows]) {
    using namespace cute;
    static_assert(decltype(size<0>(scores))::value == kRows);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      // The tile's max as four interleaved chains, joined at the end (exact: max does not round). One chain of all
      // the row's columns made the first exponential of the tile wait for ~32 dependent FMNMX. The tree measured
      // +0.4-1.4% at head dim 64, +0.5-1.0% at 128, +2% at 256 and -1.5% at 96, O and LSE bitwise unchanged
      // (docs/history/kernel-notes-bwd-wgmma.md, 2026-12-04 18:54).
      constexpr int kCols = decltype(size<1>(scores))::value;
      static_assert(kCols % 4 == 0, "the max tree takes the columns four at a time");
      float chain_max[4] = {scores(r, 0), scores(r, 1), scores(r, 2), scores(r, 3)};
      CUTE_UNROLL
      for (int c = 4; c < kCols; ++c) chain_max[c % 4] = fmaxf(chain_max[c % 4], scores(r, c));
      float const tile_max =
          fmaxf(row_max[r], fmaxf(fmaxf(chain_max[0], chain_max[1]), fmaxf(chain_max[2], chain_max[3])));
      float const new_max = quad_max(tile_max);
      // A row with every key masked so far keeps max = -inf; use 0 as its offset so that exp2 sees
      // -inf - 0 = -inf (giving 0) instead of -inf - (-inf) = NaN.
      float const offset = new_max == -INFINITY ? 0.f : new_max * scale_log2;
      if constexpr (kFirstTile) {
        o_rescale[r] = 0.f;
      } else {
        o_rescale[r] = exp2_approx(row_max[r] * scale_log2 - offset);
      }
      row_max[r] = new_max;
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) {
        float const x = fmaf(scores(r, c), scale_log2, -offset);
        float p = 0.f;
        if constexpr (kExp2PolyEvery > 0) {
          if (c % kExp2PolyEvery == kExp2PolyEvery - 1) {  // resolved at compile time: the loop is unrolled
            p = exp2_polynomial(x);
          } else {
            p = exp2_approx(x);
          }
        } else {
          p = exp2_approx(x);
        }
        scores(r, c) = p;
        sum += p;
      }
      row_sum[r] = kFirstTile ? sum : fmaf(row_sum[r], o_rescale[r], sum);
    }
  }

  // Completes the rows: returns 1 / sum per row (0 for a row that saw no key, so its O is 0) and writes the
  // natural-log LSE (-inf for such a row).
  __device__ __forceinline__ void finalize(float softmax_scale, float (&inv_sum)[kRows], float (&lse)[kRows]) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float const sum = quad_sum(row_sum[r]);
      // Only a row that saw no key sums to exactly 0 (a row that saw one has a term exp2(0) = 1). A NaN sum (a
      // NaN or Inf among the row's scores) is not empty: its O and LSE must come out NaN, as in PyTorch, and not
      // as a row without keys, whose LSE of -inf would make the backward drop its gradients.
      bool const empty = sum == 0.f;
      inv_sum[r] = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? -INFINITY : row_max[r] * softmax_scale + logf(sum);
    }
  }
};

// Multiplies every value of output row r by factor[r].
template <int kRows, class OutputRC>
__device__ __forceinline__ void scale_rows(OutputRC& out, float const (&factor)[kRows]) {
  using namespace cute;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(out); ++r) {
    CUTE_UNROLL
    for (int c = 0; c < size<1>(out); ++c) out(r, c) *= factor[r];
  }
}

// fp32 -> Element for two register tensors of the same compact layout, two values per instruction.
template <class TensorDst, class TensorSrc>
__device__ __forceinline__ void convert_to_element(TensorDst& dst, TensorSrc const& src) {
  using namespace cute;
  using Element = typename TensorDst::value_type;
  static_assert(decltype(size(src))::value % 2 == 0);
  Tensor dst_pairs = recast<uint32_t>(dst);
  CUTE_UNROLL
  for (int i = 0; i < size(dst_pairs); ++i) dst_pairs(i) = pack_pair<Element>(src(2 * i), src(2 * i + 1));
}

}  // namespace dash::hopper::fwd
