// SPDX-License-Identifier: Apache-2.0
// dash/kernel_table.hpp — THE table of the head dims the kernels are built for, with their tile shapes.
//
// One row per (head dim of q / k, head dim of v) pair. Everything that depends on the head dims reads it from here:
//   * the planner's tiles (dash::default_backward_tiles), so plans match the backward kernel by construction;
//   * the supported pairs (dash_kernel_rows in the C ABI; dash_check_problem accepts exactly these, and refuses a
//     backward on a row without one), which the GPU entry points, the CPU backend, the Python package and the CLI
//     check against;
//   * the kernels' compile-time tile structs (src/cuda/hopper/fwd/fwd_config.cuh, src/cuda/bwd/bwd_params.h);
//   * the kernel instantiations: src/cuda/CMakeLists.txt reads the DASH_KERNEL_ROW lines below and generates one
//     .cu file per (row, dtype) and pass, and the dispatchers iterate over the same rows.
// Adding a head dim is one more row (and whatever the kernels need to support it: see docs/design.md).
#pragma once

#include <cstdint>

// DASH_KERNEL_ROW(head_dim, head_dim_v, bwd_block_m, bwd_block_n, fwd_warpgroups, fwd_block_n, fwd_stages,
//                 fwd_exp2_poly_every, bwd_exp2_poly_every)
//   head_dim: of q and k; head_dim_v: of v, o, dout, dv (MLA-style models: 192 / 128). A row is one pair.
//   bwd_block_m x bwd_block_n: query rows x keys of the backward's (and the plan's) tiles. 128-key tiles: each of
//     the two MMA warpgroups owns 64 keys and all head-dim columns of their dK / dV. 64-key tiles: the column-split
//     layout, where both warpgroups share the 64 keys and each owns half of the head-dim columns of dK, dV and dQ
//     (hopper/bwd/bwd_kernel.cuh). 0 x 0 would mean a forward kernel only (dash_check_problem then refuses the
//     backward with needs_backward); no row has that now.
//   fwd_warpgroups: the forward's consumer warpgroups, 64 query rows each. They take turns at the tensor cores,
//     so one's softmax must fit in the others' GEMMs: at head dim 64 a warpgroup's two GEMMs are shorter than its
//     softmax, and three warpgroups (160 registers each) keep the tensor cores fed where two do not.
//   fwd_block_n: keys per forward KV tile (the S tile lives in registers); fwd_stages: K/V ring depth.
//   fwd_exp2_poly_every: every n-th exp2 of the forward on the FMA pipe instead of MUFU (0: none). At head dim 64
//     MUFU has as many exp2 per tile as the tensor cores need clocks; 1 in 8 measured +3-27% on the kernel of
//     2026-11, but 5-10% slower than none on that of 2026-12-03, in short runs and in the sustained power state,
//     where every instruction costs energy under the power cap (docs/benchmarks.md, "Power state"). No row uses it;
//     with it, the forward's late K release (hopper/fwd/fwd_kernel.cuh) measured 1-2% slower than the early one.
//   bwd_exp2_poly_every: the same for the backward's exponentials of P^T. At head dim 64 (128 x 128 tiles: 16,384
//     exp2 per visit beside ~2,500 tensor-core clocks of GEMMs) 1 in 8 measured +1-4% over none and 1 in 4 another
//     -1% to +5% on the kernel of 2026-12-02; on that of 2026-12-04 (staggered warpgroups in the non-deterministic
//     mode) none measured +0-5% over 1 in 4 deterministic and -1% to +2% non-deterministic
//     (docs/history/kernel-notes-bwd-wgmma.md, 2026-12-04 16:57). No row uses it now.
// Backward tiles: 128-row Q tiles fit the registers at head dim <= 64; above it the dK/dV accumulators
// (2 x 128 x head_dim fp32 over two warpgroups) leave room for 64-row Q tiles only.
// Head dim 96 (Phi-class models) has the tiles of 128: its forward's three-warpgroup variant would need
// 48 O registers more than head dim 64's, past the 160 each of three warpgroups gets.
// Head dims 256 and 192 / 128: 64-key forward tiles at 256 (K and V stages of 128 keys would be 128 KB each);
// their O leaves through shared memory in 64-column blocks (hopper/fwd/fwd_config.cuh), which is what lets
// 128-key tiles fit at 192 / 128. Their backward splits the head-dim columns between the warpgroups: dK and dV of
// 128 keys would need (192 + 128) or 2 x 256 fp32 registers per thread.
#define DASH_KERNEL_TABLE(DASH_KERNEL_ROW) \
  DASH_KERNEL_ROW(64, 64, 128, 128, 3, 128, 2, 0, 0) \
  DASH_KERNEL_ROW(96, 96, 64, 128, 2, 128, 2, 0, 0) \
  DASH_KERNEL_ROW(128, 128, 64, 128, 2, 128, 2, 0, 0) \
  DASH_KERNEL_ROW(192, 128, 64, 64, 2, 128, 2, 0, 0) \
  DASH_KERNEL_ROW(256, 256, 64, 64, 2, 64, 2, 0, 0)

namespace dash {

struct KernelTableRow {
  int32_t head_dim, head_dim_v;
  int32_t bwd_block_m, bwd_block_n;
  int32_t fwd_warpgroups, fwd_block_n, fwd_stages, fwd_exp2_poly_every;
  int32_t bwd_exp2_poly_every;
};

#define DASH_KERNEL_TABLE_ENTRY(hd, hdv, bm, bn, fwg, fbn, fst, fpoly, bpoly) \
  KernelTableRow{hd, hdv, bm, bn, fwg, fbn, fst, fpoly, bpoly},
inline constexpr KernelTableRow kKernelTable[] = {DASH_KERNEL_TABLE(DASH_KERNEL_TABLE_ENTRY)};
#undef DASH_KERNEL_TABLE_ENTRY
inline constexpr int kKernelTableRows = int(sizeof(kKernelTable) / sizeof(kKernelTable[0]));

// The row of (head_dim, head_dim_v), head_dim_v 0 meaning head_dim; a pair without a row gives {0, ...} (callers
// check head_dim != 0).
constexpr KernelTableRow kernel_table_row(int32_t head_dim, int32_t head_dim_v = 0) {
  if (head_dim_v == 0) head_dim_v = head_dim;
  for (const KernelTableRow& row : kKernelTable)
    if (row.head_dim == head_dim && row.head_dim_v == head_dim_v) return row;
  return KernelTableRow{0, 0, 0, 0, 0, 0, 0, 0, 0};
}

// Whether the row has a backward kernel (see bwd_block_m above).
constexpr bool has_backward(const KernelTableRow& row) { return row.bwd_block_m != 0; }

// The forward's consumer warpgroups for one fixed-length call: the row's, except that a row of three (192-row Q
// tiles) runs two (128-row tiles) for at most kFwdShortBandRows queries where the tile height cannot change a bit
// (`height_invariant`, below). A Q tile that straddles a causal band computes scores its rows mask, about half a
// tile's height per tile: at 512 / 1k causal queries 59% / 67% of the scores 192-row tiles compute are visible,
// 80% / 89% with 128-row tiles. Longer rows amortise it, and three warpgroups keep the tensor cores busier at head
// dim 64: on the H200, two warpgroups measured +10% at 512 and +12% at 1k causal queries, -3% at 2k, -5% at 4k
// (docs/benchmarks.md).
// height_invariant: the mask hides only keys right of each row's visible ones (causal, or a window without a left
// side) and every row sees a key. Then a row's O and LSE (finite inputs) do not depend on its tile's height: it
// visits the same KV tiles in the same order, last to first, so the tiles a taller tile adds, entirely masked for
// the row, come before its first visible one, while its running max is still -inf, and leave its sum and O at
// zero. Tests compare the heights bitwise (a varlen pack runs the row's warpgroups). With a left side a row's masked
// tiles come after visible ones, where the rescale is exp2 of a fused multiply-add's rounding error, not exactly 1
// (the bits differed, 2026-12-04); a row without keys would keep the sign of 0 x V over the tiles it visits.
inline constexpr int32_t kFwdShortBandRows = 1024;
constexpr int32_t fwd_warpgroups_for(const KernelTableRow& row, bool height_invariant, int32_t seqlen_q) {
  return row.fwd_warpgroups == 3 && height_invariant && seqlen_q <= kFwdShortBandRows ? 2 : row.fwd_warpgroups;
}

}  // namespace dash
