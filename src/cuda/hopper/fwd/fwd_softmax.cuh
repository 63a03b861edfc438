// SPDX-License-Identifier: Apache-2.0
// fwd_sm90_softmax.cuh — the per-thread math between the two GEMMs of the forward kernel: views of the wgmma
// accumulator as (row, column), the causal / key-length mask, and the online softmax (running row max and
// row sum, exp2 with log2(e) folded into the scale).
//
// Accumulator facts used here (CuTe's CLayout_64xN for a 64xN wgmma): each thread holds values
// ((2 columns, 2 rows, N/8 column chunks), MMA_M, MMA_N). The two rows are r and r + 8; the 4 lanes of a
// quad hold the same rows, so a row reduction is a thread-local reduction plus two shuffles. The register
// A operand of a 64x16 wgmma has values (2 columns, 2 rows, 2 k-halves) in the same order, so 16 columns of
// S are exactly one k-step of P: P can feed O += P V without moving between threads.
#pragma once

#include <cmath>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>

#include "sm90_primitives.cuh"

namespace dash::sm90 {

// ((2 cols, 2 rows, V), MMA_M, MMA_N) -> ((2 rows, MMA_M), (2 cols, V, MMA_N)).
template <class Layout>
CUTE_HOST_DEVICE constexpr auto accumulator_rows_cols(Layout const& acc) {
  using namespace cute;
  auto values = layout<0>(acc);
  return make_layout(make_layout(layout<1>(values), layout<1>(acc)),
                     make_layout(layout<0>(values), layout<2>(values), layout<2>(acc)));
}

// ((2 cols, 2 rows, V), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, (V / 2, MMA_N)): pairs of 8-column chunks become
// the k-halves of one 16-wide k-step of the register A operand.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto accumulator_as_a_operand(Layout const& acc) {
  using namespace cute;
  auto values = layout<0>(acc);
  auto chunk_pairs = logical_divide(layout<2>(values), Int<2>{});  // (2, V / 2)
  return make_layout(make_layout(layout<0>(values), layout<1>(values), layout<0>(chunk_pairs)), layout<1>(acc),
                     make_layout(layout<1>(chunk_pairs), layout<2>(acc)));
}

// Sets to -inf the scores of keys a query row may not see. `coords` holds each register's (row, column)
// inside the (kBlockM x kBlockN) tile; row_base / col_base place the tile in the sequences.
// Visible: column < seqlen_k and, when causal, column <= row + (seqlen_k - seqlen_q).
template <class ScoresRC, class CoordsRC>
__device__ __forceinline__ void apply_mask(ScoresRC& scores, CoordsRC const& coords, int row_base, int col_base,
                                           int seqlen_q, int seqlen_k, bool causal) {
  using namespace cute;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(scores); ++r) {
    int const row = row_base + get<0>(coords(r, 0));
    int col_limit = seqlen_k;
    if (causal) col_limit = min(col_limit, row + 1 + seqlen_k - seqlen_q);
    col_limit -= col_base;  // in tile-local columns
    CUTE_UNROLL
    for (int c = 0; c < size<1>(scores); ++c) {
      if (get<1>(coords(r, c)) >= col_limit) scores(r, c) = -INFINITY;
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
      float tile_max = row_max[r];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(scores); ++c) tile_max = fmaxf(tile_max, scores(r, c));
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

// Two fp32 values -> one register holding two Element values (cvt.rn.{bf16,f16}x2.f32: round to nearest).
template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack_pair<cute::bfloat16_t>(float lo, float hi) {
  __nv_bfloat162 const v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t const*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack_pair<cute::half_t>(float lo, float hi) {
  __half2 const v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t const*>(&v);
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

}  // namespace dash::sm90
