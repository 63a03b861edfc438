// SPDX-License-Identifier: Apache-2.0
// hopper/warpgroup_mma.cuh — issuing warpgroup MMAs (wgmma) and reading their accumulators, shared by the
// forward and backward kernels: the K-major shared-memory swizzle atom, one warpgroup's share of a tiled GEMM as
// one commit group, and views of a 64xN accumulator as (row, column) and as the register A operand of the next
// GEMM.
//
// Accumulator facts used here (CuTe's CLayout_64xN for a 64xN wgmma): each thread holds values
// ((2 columns, 2 rows, N/8 column chunks), MMA_M, MMA_N). The two rows are r and r + 8; the 4 lanes of a
// quad hold the same rows, so a row reduction is a thread-local reduction plus two shuffles. The register
// A operand of a 64x16 wgmma has values (2 columns, 2 rows, 2 k-halves) in the same order, so 16 columns of
// an accumulator are exactly one k-step of an A operand: P (or dS^T) feeds the next GEMM without moving
// between threads.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

namespace dash::hopper {

// The 16-byte-row-chunk swizzle atom for a K-major tile whose rows hold kRowElems elements: the widest
// swizzle (128 / 64 / 32 bytes) that divides the row, as wgmma and TMA both require.
template <class Element, int kRowElems>
CUTE_HOST_DEVICE constexpr auto k_major_smem_atom() {
  constexpr int kRowBytes = kRowElems * int(sizeof(Element));
  if constexpr (kRowBytes % 128 == 0) {
    return cute::GMMA::Layout_K_SW128_Atom<Element>{};
  } else if constexpr (kRowBytes % 64 == 0) {
    return cute::GMMA::Layout_K_SW64_Atom<Element>{};
  } else {
    return cute::GMMA::Layout_K_SW32_Atom<Element>{};
  }
}

// Issues one warpgroup's share of a tiled wgmma GEMM as one commit group; the caller waits with
// warpgroup_wait<N>. The fences keep the compiler from moving accumulator (and register-A) accesses across
// the asynchronous MMA.
template <bool kZeroAccumulator, bool kARegisters, class TiledMma, class TensorA, class TensorB, class TensorC>
__device__ __forceinline__ void warpgroup_gemm(TiledMma& mma, TensorA& a, TensorB const& b, TensorC& c) {
  using namespace cute;
  if constexpr (kARegisters) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  // wgmma.fence: register writes made before this point (P, the rescaled O) are visible to the MMA.
  warpgroup_arrive();
  mma.accumulate_ = kZeroAccumulator ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
  if constexpr (kARegisters) warpgroup_fence_operand(a);
}

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

}  // namespace dash::hopper
