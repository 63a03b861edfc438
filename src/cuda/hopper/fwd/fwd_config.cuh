// SPDX-License-Identifier: Apache-2.0
// hopper/fwd/fwd_config.cuh — everything the Hopper forward kernel fixes at compile time, derived from its template
// parameters (the head dims of q / k and of v, element type; the consumer warpgroups where a call runs fewer than
// the row's): tile sizes (a row of dash/kernel_table.hpp), warpgroup roles and register budgets, shared-memory
// layouts, the wgmma tiled MMAs, the TMA copy types, the kernel parameters and the shared-memory map.
//
// Adding a head dim means adding a row to dash/kernel_table.hpp: the smem atom, MMA shapes and TMA boxes below
// all follow from (kHeadDim, kHeadDimV, kBlockN, kStages). Keep the smem total under 227 KB and the consumer's live
// registers (S: kBlockN / 2, P: kBlockN / 4, O: kHeadDimV / 2 per thread) under kConsumerRegisters.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/numeric_types.h>

#include "dash/attention_mask.hpp"
#include "dash/kernel_table.hpp"
#include "dash/plan_format.h"
#include "hopper/fwd/fwd_tile_order.hpp"
#include "hopper/sync.cuh"           // launch_register_pool
#include "hopper/warpgroup_mma.cuh"  // k_major_smem_atom

namespace dash::hopper::fwd {

// kWarpgroupsRequested: 0 for the row's consumer warpgroups, else that many (dash::fwd_warpgroups_for: 2 for some
// fixed-length calls with short queries at a row of 3).
template <int kHeadDim_, int kHeadDimV_, class Element_, int kWarpgroupsRequested = 0>
struct FwdConfig {
  using Element = Element_;  // cute::bfloat16_t or cute::half_t
  static constexpr int kHeadDim = kHeadDim_;    // q and k
  static constexpr int kHeadDimV = kHeadDimV_;  // v and o

  // ---- work split ----
  // The head dim's row of the kernel table: consumer warpgroups, keys per KV tile (the S tile lives in
  // registers: wider tiles mean fewer, longer iterations), K/V ring depth, and every kExp2PolyEvery-th exp2 on the
  // FMA pipe (0: none; see exp2_polynomial).
  static constexpr KernelTableRow kTableRow = kernel_table_row(kHeadDim, kHeadDimV);
  static_assert(kTableRow.head_dim == kHeadDim, "no row for these head dims in dash/kernel_table.hpp");
  static constexpr int kConsumerWarpgroups =  // each owns 64 query rows of the Q tile
      kWarpgroupsRequested != 0 ? kWarpgroupsRequested : kTableRow.fwd_warpgroups;
  static_assert(kConsumerWarpgroups == 2 || kConsumerWarpgroups == 3, "the turn barriers are laid out for 2 or 3");
  static constexpr int kRowsPerWarpgroup = 64;  // the M of one wgmma
  static constexpr int kBlockM = kConsumerWarpgroups * kRowsPerWarpgroup;
  static constexpr int kBlockN = kTableRow.fwd_block_n;
  static constexpr int kStages = kTableRow.fwd_stages;
  static constexpr int kExp2PolyEvery = kTableRow.fwd_exp2_poly_every;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);  // warpgroup 0 produces, the others consume
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kConsumerWarps = kConsumerThreads / 32;

  // setmaxnreg budgets: the producer only issues TMA, the consumers hold S, P and O in registers and share the
  // rest of the pool (a multiple of 8, at most 240).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerShare = (launch_register_pool(kThreads) - kProducerRegisters * 128) / kConsumerThreads / 8 * 8;
  static constexpr int kConsumerRegisters = kConsumerShare < 240 ? kConsumerShare : 240;  // 240 (2), 160 (3)
  static_assert(kProducerRegisters * 128 + kConsumerRegisters * kConsumerThreads <=
                    launch_register_pool(kThreads),
                "register budgets exceed the CTA's register pool: setmaxnreg.inc would wait forever");
  static_assert(kHeadDim % 16 == 0 && kHeadDimV % 16 == 0 && kBlockN % 16 == 0 && kBlockN <= 256 &&
                    kHeadDimV <= 256,
                "wgmma shape constraints");
  static_assert(kStages >= 2, "the consumer holds one K and one V stage while the next loads");

  // ---- shared memory layouts (K-major: head_dim contiguous, as in global memory) ----
  using SmemAtom = decltype(k_major_smem_atom<Element, kHeadDim>());    // Q, K
  using SmemAtomV = decltype(k_major_smem_atom<Element, kHeadDimV>());  // V
  // Q is two stacked 64-row halves, one per consumer warpgroup, each laid out exactly like a 64-row tile
  // (so a half is one contiguous TMA box and one canonical wgmma operand).
  using SmemLayoutQHalf =
      decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kRowsPerWarpgroup>, cute::Int<kHeadDim>>{}));
  using SmemLayoutQ = decltype(cute::tile_to_shape(SmemLayoutQHalf{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  // Q buffers: two in the two-warpgroup kernel that short rows run at a row of three (dash::fwd_warpgroups_for),
  // one elsewhere. A short row's Q tile visits 1-8 KV tiles, and its Q is the one load that comes from DRAM every
  // time (each K / V tile serves several Q tiles, mostly from L2): with one buffer it loaded only after the tile
  // before's last S GEMM, exposed at every tile boundary; with two the producer loads it right after the tile
  // before's last K / V. Measured +3-4% at head dim 64 512 causal as a study and +2.6-2.9% as landed (c0ece92); at
  // head dim 128 (all rows) 1-2% slower, and within noise on head dim 64's long rows
  // (docs/history/kernel-notes-bwd-wgmma.md, 2026-12-06 12:42 and 15:48).
  static constexpr bool kShortRowKernel = kWarpgroupsRequested != 0 && kWarpgroupsRequested < kTableRow.fwd_warpgroups;
  static constexpr int kQStages = kShortRowKernel ? 2 : 1;
  // Records of announced tiles (fwd_produce): a slot is rewritten kTileSlots tiles later.
  static constexpr int kTileSlots = 2 * kQStages;
  using SmemLayoutQStages = decltype(cute::tile_to_shape(
      SmemLayoutQ{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>, cute::Int<kQStages>>{}));
  using SmemLayoutKStage =
      decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  using SmemLayoutVStage =
      decltype(cute::tile_to_shape(SmemAtomV{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDimV>>{}));
  using SmemLayoutV = decltype(cute::tile_to_shape(
      SmemAtomV{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDimV>, cute::Int<kStages>>{}));
  // V seen as the (head_dim_v, key) B operand of O += P V: the same bytes, head_dim_v contiguous (MN-major).
  using SmemLayoutVt = decltype(cute::composition(
      SmemLayoutV{},
      cute::make_ordered_layout(cute::Shape<cute::Int<kHeadDimV>, cute::Int<kBlockN>, cute::Int<kStages>>{},
                                cute::Step<cute::_2, cute::_1, cute::_3>{})));
  // Each consumer warpgroup stages its own 64 output rows in its own buffer and stores them alone. The
  // buffer is separate from Q so that the next tile's Q can load while this tile's O is being stored. Where
  // whole rows do not fit beside Q and the K / V ring (head dims 256 and 192 / 128), O goes out in blocks of 64
  // columns through a buffer of one block, each block's TMA store reading it before the next block is written.
  static constexpr int kBytesBeforeO =
      int(sizeof(Element)) * (kQStages * kBlockM * kHeadDim + kStages * kBlockN * (kHeadDim + kHeadDimV));
  static constexpr int kBytesOfWholeO = int(sizeof(Element)) * kBlockM * kHeadDimV;
  static constexpr int kOBlockCols =
      kBytesBeforeO + kBytesOfWholeO + 2048 <= 227 * 1024 ? kHeadDimV : 64;  // 2048: barriers, records, alignment
  static_assert(kHeadDimV % kOBlockCols == 0, "O leaves in whole column blocks");
  static constexpr int kOBlocks = kHeadDimV / kOBlockCols;
  using SmemLayoutOBlock = decltype(cute::tile_to_shape(
      k_major_smem_atom<Element, kOBlockCols>(),
      cute::Shape<cute::Int<kRowsPerWarpgroup>, cute::Int<kOBlockCols>>{}));

  // ---- wgmma: one 64-row atom per consumer warpgroup ----
  using WarpgroupLayout = cute::Layout<cute::Shape<cute::Int<kConsumerWarpgroups>, cute::_1, cute::_1>>;
  // S = Q K^T: both operands from shared memory.
  using MmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<kRowsPerWarpgroup>, cute::Int<kBlockN>, cute::Int<kHeadDim>>>(),
      WarpgroupLayout{}));
  // O += P V: P from registers (the softmax output), V^T from shared memory.
  using MmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<kRowsPerWarpgroup>, cute::Int<kHeadDimV>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      WarpgroupLayout{}));
  // A PV atom of one warpgroup and one column block of O: partitions a block of a warpgroup's 64 output rows in
  // the epilogue. Its accumulator is the block's slice of the whole accumulator (o_block in fwd_kernel.cuh): the
  // values of a 64xN wgmma accumulator run over 8-column chunks last, so a block's values are contiguous.
  using MmaPVOBlock = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<kRowsPerWarpgroup>, cute::Int<kOBlockCols>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));

  // ---- global tensors as TMA sees them: (seqlen, head_dim, heads, batch, 1) or the ragged view of a varlen pack
  // (hopper/varlen.cuh), strides in elements ----
  // GmemShape: q and k (kHeadDim columns); GmemShapeV: v and o (kHeadDimV).
  using GmemShape = cute::Shape<int32_t, cute::Int<kHeadDim>, int32_t, int32_t, int32_t>;
  using GmemShapeV = cute::Shape<int32_t, cute::Int<kHeadDimV>, int32_t, int32_t, int32_t>;
  using GmemStride = cute::Stride<int64_t, cute::_1, int64_t, int64_t, int64_t>;
  using GmemTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Element*>(nullptr)),
                                                cute::Layout<GmemShape, GmemStride>{}));
  using GmemTensorV = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Element*>(nullptr)),
                                                 cute::Layout<GmemShapeV, GmemStride>{}));
  using TmaLoadQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutQ{}));
  using TmaLoadK = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutKStage{}));
  using TmaLoadV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensorV{}, SmemLayoutVStage{}));
  using TmaStoreO = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{}, GmemTensorV{}, SmemLayoutOBlock{}));

  static constexpr uint32_t kQTileBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKTileBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kVTileBytes = kBlockN * kHeadDimV * sizeof(Element);
};

// One work tile: a Q tile of one (sequence, query head), with the sequence's mask and first rows (0 for
// fixed-length batches, whose tensors address the batch entry instead). index >= num_work_tiles: no more work.
struct FwdTile {
  int32_t index;
  int32_t m_block, head_q, batch;
  int32_t q_row, k_row;
  AttentionMask mask;  // the sequence's (its lengths, the window clipped to them)
};

// Kernel parameters: TMA descriptors (they must live in the kernel's parameter space, hence
// __grid_constant__), the problem sizes, the softmax scales and the work-tile counter.
template <class Config>
struct FwdParams {
  typename Config::TmaLoadQ tma_q;
  typename Config::TmaLoadK tma_k;
  typename Config::TmaLoadV tma_v;
  typename Config::TmaStoreO tma_o;
  typename Config::GmemShape shape_q;
  typename Config::GmemShape shape_k;
  typename Config::GmemShapeV shape_v;
  typename Config::GmemShapeV shape_o;
  float* lse;                           // [batch, heads_q, seqlen_q]; varlen: [heads_q, total_q]
  AttentionMask mask;                   // which keys each query row sees; the sequence lengths (varlen: the longest)
  int32_t heads_q;
  int32_t group_size;                   // heads_q / heads_kv
  FwdTileOrder order;                   // fixed length: which work tile an index is (hopper/fwd/fwd_tile_order.hpp)
  int32_t num_work_tiles;               // fixed length: m_blocks * heads_q * batch; varlen: the pack's tiles
  int32_t* tile_counter;                // in the caller's workspace, zeroed before the launch: fwd_next_tile
  float softmax_scale;                  // natural-log units (for LSE)
  float scale_log2;                     // softmax_scale * log2(e): scores go through exp2
  // Varlen (hopper/varlen.cuh): the pack's sequences in processing order and the work tiles' chunk table; null for
  // fixed-length batches. The TMA descriptors are then ragged (boxes bounded at each sequence's end).
  const dash_pack_sequence* sequences;
  const int32_t* tile_chunks;
  int32_t num_sequences;
  int32_t total_q;                      // rows of q / o: the LSE's row stride per head
};

// Shared-memory map. Tiles first, each 1024-byte aligned as the 128-byte swizzle requires; then mbarriers.
template <class Config>
struct FwdSharedStorage {
  using Element = typename Config::Element;
  cute::array_aligned<Element, cute::cosize_v<typename Config::SmemLayoutQStages>, 1024> q;
  cute::array_aligned<Element, cute::cosize_v<typename Config::SmemLayoutK>, 1024> k;
  cute::array_aligned<Element, cute::cosize_v<typename Config::SmemLayoutV>, 1024> v;
  cute::array_aligned<Element, Config::kConsumerWarpgroups * cute::cosize_v<typename Config::SmemLayoutOBlock>, 1024> o;
  alignas(8) uint64_t q_full[Config::kQStages];   // next tile announced; its Q landed (TMA transaction count)
  alignas(8) uint64_t q_empty[Config::kQStages];  // every consumer warp read the index and finished its last S GEMM
  alignas(8) uint64_t k_full[Config::kStages];   // K stage landed
  alignas(8) uint64_t k_empty[Config::kStages];  // every consumer warp is done reading the K stage
  alignas(8) uint64_t v_full[Config::kStages];
  alignas(8) uint64_t v_empty[Config::kStages];
  FwdTile tile[Config::kTileSlots];  // the work tiles announced with q_full, slot (tile number % kTileSlots)
  FwdTile tile_ahead;  // the producer's next tile, decoded ahead
};

template <class Config>
constexpr int fwd_smem_bytes() {
  // +1024: the dynamic shared-memory base is only guaranteed 16-byte aligned; the kernel rounds it up.
  constexpr int kBytes = int(sizeof(FwdSharedStorage<Config>)) + 1024;
  static_assert(kBytes <= 227 * 1024, "shared memory exceeds the 227 KB an sm_90 block may use");
  return kBytes;
}

}  // namespace dash::hopper::fwd
