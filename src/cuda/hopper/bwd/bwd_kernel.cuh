// SPDX-License-Identifier: Apache-2.0
// hopper/bwd/bwd_kernel.cuh — the plan-executing attention backward main kernel for Hopper: TMA loads, wgmma,
// warp-specialised (tiles from dash/kernel_table.hpp: 128 x 128 at head dim 64, 64 x 128 at 96 and 128, 64 x 64 at
// 192 / 128 and 256).
// Design, shared-memory and register budgets, measurements: docs/design.md, docs/history/kernel-notes-bwd-wgmma.md.
//
// The plan's orders reach the kernel through PlanScheduler (bwd_plan_scheduler.cuh); the dQ partials leave it
// through the store warps (bwd_dq_handoff.cuh); preprocess and convert run around it (bwd_preprocess_convert.cuh).
// Who does what inside the CTA:
//   warpgroup 0 (24 registers): warp 0, one elected lane = PRODUCER: claims tickets (claim rule below), reads
//     the plan's item / segment / visit records, TMA-loads K and V per segment (one buffer) and Q, dO (TMA)
//     plus LSE2, delta (bulk copies) per visit into a 2-stage ring, and publishes each segment's and visit's
//     record in shared memory next to the data. Warps 1 and 2 = the STORE warps (store_warp_loop), one per
//     dQ staging buffer (warp 1 alone in the column split). The others exit.
//   warpgroups 1-2 (240 registers) = MMA warpgroups; warpgroup w owns keys [64w, 64w + 64) of the KV tile
//   (M = 64 keys, N = kBlockM queries, D = head dim):
//     S^T = K_w Q^T, dP^T = V_w dO^T               (wgmma SS, 64 x M x D, fp32 in registers)
//     P^T = exp2(S^T * scale_log2 - LSE2), dS^T = P^T (dP^T - delta)   (mask from the visit's flags)
//     dV_w += P^T dO, dK_w += dS^T Q                (wgmma RS: P^T / dS^T from registers, 64 x D x M)
//     dS^T -> shared memory (both warpgroups), then the dQ partial dS K (wgmma SS, K = 128 keys), split
//                                                    between the warpgroups by head-dim columns when
//                                                    kBlockM = 64 (64 x D/2 each) and by query rows at
//                                                    D = 64 (64 x 64 each); fp32 -> the store warp's
//                                                    staging buffer.
//   That is the KEY SPLIT (128-key tiles). In the COLUMN SPLIT (64 x 64 tiles: 192 / 128, 256; BwdConfig::
//   kColumnSplit) both warpgroups take the same 64 keys: warpgroup w computes S^T / dP^T for queries [32w, 32w + 32),
//   writes its halves of P^T and dS^T to shared memory, and after the "dS ready" barrier computes its half of the
//   head-dim columns of dQ, dV and dK (wgmma SS, A = dS / P^T / dS^T from shared memory). One staging buffer and one
//   store warp there (shared memory).
//   dK / dV stay in registers for the whole segment and are written at its end (or added in group order for
//   split-head GQA).
#pragma once

#include <climits>
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>

#include "bwd/bwd_params.h"
#include "hopper/bwd/bwd_dq_handoff.cuh"
#include "hopper/bwd/bwd_plan_scheduler.cuh"
#include "hopper/element_types.cuh"
#include "hopper/fast_math.cuh"
#include "hopper/ptx.cuh"
#include "hopper/sync.cuh"
#include "hopper/warpgroup_mma.cuh"

namespace dash::hopper::bwd {

using kernels::bwd::BwdTiles;

// kStaggerRequested: the staggered warpgroups below, where the tiles allow them. The launcher asks for them in the
// non-deterministic mode, and in the deterministic one where the plan spaces each dQ chain's adds two visits apart
// (bwd_launch.cuh), so a head dim that allows them has two instantiations of the kernel.
template <int kHeadDim_, int kHeadDimV_, dash_dtype kDtype, bool kStaggerRequested = false>
struct BwdConfig {
  using Element = typename CuteElement<kDtype>::type;     // for CuTe (wgmma, TMA)
  using StdElement = typename CudaElement<kDtype>::type;  // for preprocess / convert and global stores
  static constexpr int kHeadDim = kHeadDim_;    // of q, k, dq, dk
  static constexpr int kHeadDimV = kHeadDimV_;  // of v, dout, dv
  static_assert(kHeadDim % 32 == 0 && kHeadDimV % 32 == 0 && kHeadDim <= 256 && kHeadDimV <= kHeadDim,
                "the tilings below cover head dims 32k up to 256, the value head dim at most the qk one");
  // The plan's tiles (default_backward_tiles): the host refuses a plan with other tiles.
  static constexpr int kBlockM = BwdTiles<kHeadDim, kHeadDimV>::kBlockM;  // query rows per Q tile
  static constexpr int kBlockN = BwdTiles<kHeadDim, kHeadDimV>::kBlockN;  // keys per KV tile
  // Every kExp2PolyEvery-th exponential of P^T on the FMA pipe (exp2_polynomial) instead of MUFU (0: none).
  static constexpr int kExp2PolyEvery = BwdTiles<kHeadDim, kHeadDimV>::kRow.bwd_exp2_poly_every;
  // P^T is converted to Element before the visit's mask branch (a masked visit converts again) where every
  // exponential is a MUFU.EX2 and the Q tile has 64 rows: ptxas then issues the conversions between the MUFU.EX2s.
  // Converted after the branch, a thread's 32 MUFU.EX2s went back to back and the MMA warps stalled on them 4.5x as
  // often as on FA3's (ncu); the early conversion measured +1-5% deterministic, +1-9% non-deterministic at head dim
  // 128, neutral at 96 (docs/history/kernel-notes-bwd-wgmma.md, 2026-12-03 06:32). With 128-row tiles (head dim
  // 64) the early conversion happens while S^T, dP^T, dK and dV hold 192 of the 240 registers: ptxas scattered
  // the packed P^T and gathered it again with 33-34 moves per visit before the register-A dV GEMM, and the
  // lock-step kernel spilled 4 bytes; converted after the branch it takes S^T's dead registers (2 moves, no spill).
  static constexpr bool kConvertBeforeMask = kExp2PolyEvery == 0 && kBlockM == 64;
  // Two layouts of the two MMA warpgroups (file comment): KEY SPLIT (128-key tiles), warpgroup w owns keys
  // [64w, 64w + 64) and all head-dim columns of their dK / dV; COLUMN SPLIT (64-key tiles, head dims 192 / 128 and
  // 256), both own the 64 keys, warpgroup w owns queries [32w, 32w + 32) of S^T / dP^T and half of the head-dim
  // columns of dK, dV and dQ, and P^T / dS^T go through shared memory to the dK / dV GEMMs.
  static constexpr bool kColumnSplit = kBlockN == 64;
  static_assert(kBlockN == 128 || (kBlockN == 64 && kBlockM == 64), "128-key tiles, or 64 x 64 column-split tiles");
  static_assert(kBlockM == 64 || kBlockM == 128, "the dQ GEMM splits 128 rows or 128 columns between the warpgroups");
  static_assert(kColumnSplit || kHeadDim == kHeadDimV, "the key split keeps dK and dV of one shape");
  static constexpr int kMmaWarpgroups = 2;
  static constexpr int kKeyWarpgroups = kColumnSplit ? 1 : 2;  // warpgroups along the keys (M of S^T, dK, dV)
  static constexpr int kColWarpgroups = kColumnSplit ? 2 : 1;  // along S^T's queries and dK / dV's columns
  static constexpr int kMmaThreads = 128 * kMmaWarpgroups;
  static constexpr int kThreads = 128 + kMmaThreads;
  // setmaxnreg budgets. They must fit the CTA's pool, 168 x 384 = 64,512 (not the SM's 65,536: the first
  // version asked for 32 x 128 + 240 x 256 = 65,536 and hung in setmaxnreg.inc on its first run).
  // 24 / 240 as in the forward kernel; ptxas reports no spills with it.
  static constexpr int kProducerRegisters = 24;  // producer lane and store warps
  static constexpr int kMmaRegisters =
      (launch_register_pool(kThreads) - kProducerRegisters * 128) / kMmaThreads / 8 * 8;  // 240
  static_assert(kProducerRegisters * 128 + kMmaRegisters * kMmaThreads <= launch_register_pool(kThreads),
                "register budgets exceed the CTA's register pool: setmaxnreg.inc would wait forever");
  // Shared memory decides the ring depths of the column split (227 KB): at 192 / 128 two Q / dO stages fit with
  // one dQ staging buffer (48 KB of fp32; two would pass the limit), at 256 one stage and one buffer (Q, dO, K, V
  // are 32 KB each, the staging buffer 64 KB), so there each visit's Q / dO load waits for the previous visit.
  // (One Q / dO stage with two staging buffers at 192 / 128 measured 0.95x deterministic and 0.56x
  // non-deterministic: docs/history/kernel-notes-bwd-wgmma.md.)
  static constexpr int kQStages = kColumnSplit && kHeadDim > 192 ? 1 : 2;  // Q / dO / LSE2 / delta ring depth
  // dQ staging buffers, one store warp each: two where shared memory holds them beside two dS^T buffers (head dims 96,
  // 128). At head dim 64 (128-row Q tiles: 32 KB dS^T and staging buffers) the four fill the 227 KB only without the
  // 1 KB alignment slack (smem_has_slack): there the warpgroups in lock step have one (two dS^T buffers measured +1-6%
  // over two staging buffers, 2026-12-02 16:18 in docs/history/kernel-notes-bwd-wgmma.md), the staggered ones two
  // (with one, the follower waits for the leader's late rows to drain: +0-4% against +2-5%, 2026-12-04 14:31). The
  // column split holds only one.
  static constexpr bool kCanStagger = !kColumnSplit && kBlockM == 128;  // see kStaggered
  static constexpr bool kStaggered = kStaggerRequested && kCanStagger;
  static constexpr int kDqStages = kColumnSplit || (kBlockM == 128 && !kStaggered) ? 1 : 2;
  // Warps 1 .. kDqStages of warpgroup 0 drain the dQ staging buffers, one buffer each (store_warp_loop): with two,
  // one buffer's hand-off (turn wait, bulk reduce-add, completion, release) overlaps the other's.
  static constexpr int kStoreWarps = kDqStages;

  // dQ = dS K: M = queries, N = head dim, K = keys. Each warpgroup computes a 64 x kDqCols block: head-dim columns
  // [kDqCols w, kDqCols (w + 1)) when kBlockM = 64 (D = 96, 128, and the column split), query rows [64w, 64w + 64)
  // when kBlockM = 128 (D = 64).
  static constexpr int kDqWarpgroupsM = kBlockM / 64;
  static constexpr int kDqWarpgroupsN = kMmaWarpgroups / kDqWarpgroupsM;
  static constexpr int kDqCols = kHeadDim / kDqWarpgroupsN;
  // STAGGERED warpgroups (key split with 128-row Q tiles, i.e. head dim 64): each warpgroup's dQ rows need both
  // warpgroups' halves of dS^T, so with one shared "dS ready" barrier the two meet every visit and run their
  // elementwise phases at the same time. Staggered, warpgroup 0 (the LEADER) computes its dQ rows of visit v one visit
  // late, after its own dS^T of visit v + 1 is stored, so neither waits for the other's exponentials: warpgroup 1 (the
  // FOLLOWER) waits only for the leader's half of the current visit (written earlier), the leader only for the
  // follower's half of the previous one. TURNS (two more named barriers) make the two issue their S^T / dP^T GEMMs
  // alternately, so that one warpgroup's exponentials run during the other's GEMMs. The arithmetic is the base's: the
  // same GEMMs on the same data, bitwise the same gradients. Measured +2-5% non-deterministic at head dim 64 with two
  // staging buffers; in the deterministic mode it cost the lock-step schedules of short sequences 5-7% (a dQ chain
  // waits a visit longer for the leader's rows at every rank; plans whose chains have that visit to spare say so in
  // dash_plan_header::rank_spacing), and chosen at run time inside one kernel it made both modes slower: hence a
  // separate instantiation (kStaggerRequested). docs/history/kernel-notes-bwd-wgmma.md, 2026-12-04 14:31.
  // (kStaggered is declared with kDqStages above.)
  static_assert(kDqWarpgroupsM * 64 == kBlockM && kDqWarpgroupsN * kDqCols == kHeadDim && kDqCols % 16 == 0,
                "a 64 x kDqCols dQ block per warpgroup");
  // The query columns of S^T a thread holds (the wgmma accumulator layout): col_base + 8j + {0, 1}, j < kStatCols / 2,
  // i.e. thread 0's register-i column c0 = 8j + {0, 1} (BwdKernel.LayoutCheck checks it). Where they are few (16 at
  // 64-query tiles: head dims 96, 128 and the column split) the visit keeps their LSE2 and delta in registers,
  // loaded as 8-byte pairs: LSE2 right after the visit's wait, before the S^T / dP^T GEMMs read shared memory, and
  // delta after the exponentials. Loaded after the S^T wait instead (the SS dP^T GEMM then reads shared memory),
  // the first exponential waited on its load for 8% of the MMA warps' time; this placement (FA3's) measured +3-6%
  // non-deterministic, 0-5% deterministic at head dim 128. At head dim 64 (32 columns) the loops read shared memory.
  static constexpr int kStatCols = 2 * (kBlockM / kColWarpgroups / 8);
  static constexpr bool kStatsInRegisters = kStatCols <= 16;
  __host__ __device__ static constexpr int stat_slot(int c0) { return c0 / 8 * 2 + c0 % 2; }
  // Columns of dK / dV per warpgroup.
  static constexpr int kDkCols = kHeadDim / kColWarpgroups;
  static constexpr int kDvCols = kHeadDimV / kColWarpgroups;

  // ---- shared-memory layouts: every tile K-major (head dim contiguous, as in global memory) ----
  // A wgmma operand must be whole swizzle atoms. Each tile gets the widest swizzle (128 / 64 / 32 bytes) that
  // divides the columns one warpgroup's GEMM reads of it: Q and dO as the B operand of dK += dS^T Q and dV += P^T dO
  // (all columns in the key split, kDkCols / kDvCols in the column split), K as the B operand of dQ = dS K (kDqCols
  // columns: SW32 at D = 96, whose 48-column halves are three 16-column atoms; SW64 at 192; FA3 picks the same), V
  // only as a whole (SW128 where its rows allow). S^T = K Q^T and dP^T = V dO^T read every column of all four.
  using SmemAtomQ = decltype(k_major_smem_atom<Element, kDkCols>());
  using SmemAtomdO = decltype(k_major_smem_atom<Element, kDvCols>());
  using SmemAtomK = decltype(k_major_smem_atom<Element, kDqCols>());
  using SmemAtomV = decltype(k_major_smem_atom<Element, kHeadDimV>());
  using SmemLayoutQStage =
      decltype(cute::tile_to_shape(SmemAtomQ{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutdOStage =
      decltype(cute::tile_to_shape(SmemAtomdO{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDimV>>{}));
  using SmemLayoutQ = decltype(cute::tile_to_shape(
      SmemAtomQ{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>, cute::Int<kQStages>>{}));
  using SmemLayoutdO = decltype(cute::tile_to_shape(
      SmemAtomdO{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDimV>, cute::Int<kQStages>>{}));
  // Q and dO seen as the (head dim, query) B operand of dK += dS^T Q and dV += P^T dO: same bytes, MN-major.
  using SmemLayoutQt = decltype(cute::composition(
      SmemLayoutQ{},
      cute::make_ordered_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockM>, cute::Int<kQStages>>{},
                                cute::Step<cute::_2, cute::_1, cute::_3>{})));
  using SmemLayoutdOt = decltype(cute::composition(
      SmemLayoutdO{},
      cute::make_ordered_layout(cute::Shape<cute::Int<kHeadDimV>, cute::Int<kBlockM>, cute::Int<kQStages>>{},
                                cute::Step<cute::_2, cute::_1, cute::_3>{})));
  using SmemLayoutK =
      decltype(cute::tile_to_shape(SmemAtomK{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));
  using SmemLayoutV =
      decltype(cute::tile_to_shape(SmemAtomV{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDimV>>{}));
  // K seen as the (head dim, key) B operand of dQ = dS K: same bytes, MN-major.
  using SmemLayoutKt = decltype(cute::composition(
      SmemLayoutK{}, cute::make_ordered_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>{},
                                               cute::Step<cute::_2, cute::_1>{})));
  // dS^T buffers (and, in the column split, P^T buffers of the same layout): one per Q stage, indexed by the visit's
  // stage. With two, a warpgroup may write visit v's dS^T while the other warpgroup's dQ GEMM of visit v - 1 still
  // reads the other buffer, so the "dS free" barrier goes (visit v - 2's GEMMs, which read this buffer, completed
  // before that warpgroup reached visit v - 1's "dS ready" barrier). Every row with two Q stages has two; head dim 256
  // has one of each.
  static constexpr int kDsStages = kQStages;
  // dS^T as the MMA warpgroups produce it: (key, query, stage), query contiguous, SW128 (64 queries = 128 bytes),
  // written with stmatrix straight from the dS^T accumulator layout (no transpose) ...
  using SmemLayoutdSt = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_K_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kBlockN>, cute::Int<kBlockM>, cute::Int<kDsStages>>{}));
  // ... and the same bytes seen as the (query, key, stage) A operand of dQ = dS K: MN-major (query contiguous).
  using SmemLayoutdS = decltype(cute::composition(
      SmemLayoutdSt{},
      cute::make_ordered_layout(cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>, cute::Int<kDsStages>>{},
                                cute::Step<cute::_2, cute::_1, cute::_3>{})));

  // The store warp's fp32 staging tile (DqStaging in bwd_dq_handoff.cuh: column blocks of kBlockCols floats, each
  // row-major with its 4-float chunks XOR the row's two low bits) as a CuTe swizzle on the blocked offset: bits
  // [kSwizzleBase, kSwizzleBase + 2) ^= the row's low bits, which start at bit log2(kBlockCols) (Swizzle<2, 3, 4> at
  // D = 128, <2, 3, 3> at 64, <2, 2, 2> at 96); the block offsets (multiples of kBlockM x kBlockCols floats) lie above
  // them.
  using Staging = DqStaging<kBlockM, kHeadDim>;
  using SmemLayoutdQStaging = decltype(cute::composition(
      cute::Swizzle<Staging::kSwizzleBits, Staging::kSwizzleBase, Staging::kLog2BlockCols - Staging::kSwizzleBase>{},
      cute::Layout<cute::Shape<cute::Int<kBlockM>, cute::Shape<cute::Int<Staging::kBlockCols>, cute::Int<Staging::kBlocks>>>,
                   cute::Stride<cute::Int<Staging::kBlockCols>,
                                cute::Stride<cute::_1, cute::Int<kBlockM * Staging::kBlockCols>>>>{}));

  // ---- wgmma ----
  // Warpgroups laid out along (M, N): key split (2, 1), column split (1, 2).
  using WarpgroupLayout = cute::Layout<cute::Shape<cute::Int<kKeyWarpgroups>, cute::Int<kColWarpgroups>, cute::_1>>;
  // S^T = K Q^T and dP^T = V dO^T: M = keys, N = queries, K = head dim; both from smem. (The K extent only sizes the
  // op selector's check; dP^T's K = kHeadDimV comes from its operands.)
  using MmaSdP = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kBlockM / kColWarpgroups>, cute::Int<kHeadDim>>>(),
      WarpgroupLayout{}));
  // dK += dS^T Q and dV += P^T dO: M = keys, N = head dim, K = queries. Key split: A (P^T, dS^T) from registers.
  // Column split: A from the shared P^T / dS^T tiles, K-major (query contiguous), since a warpgroup's GEMM reads
  // both warpgroups' queries.
  template <int kCols>
  static constexpr auto dkv_op() {
    using Shape = cute::Shape<cute::_64, cute::Int<kCols>, cute::Int<kBlockM>>;
    if constexpr (kColumnSplit) {
      return cute::GMMA::ss_op_selector<Element, Element, float, Shape, cute::GMMA::Major::K, cute::GMMA::Major::MN>();
    } else {
      return cute::GMMA::rs_op_selector<Element, Element, float, Shape, cute::GMMA::Major::K, cute::GMMA::Major::MN>();
    }
  }
  using MmadK = decltype(cute::make_tiled_mma(dkv_op<kDkCols>(), WarpgroupLayout{}));
  using MmadV = decltype(cute::make_tiled_mma(dkv_op<kDvCols>(), WarpgroupLayout{}));
  // dQ = dS K: both operands from smem, both MN-major; a 64 x kDqCols block per warpgroup (above).
  using MmadQ = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kDqCols>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::Int<kDqWarpgroupsM>, cute::Int<kDqWarpgroupsN>, cute::_1>>{}));

  // ---- TMA: global tensors as (seqlen, head dim, heads, batch, 1) or a varlen pack's ragged view (hopper/varlen.cuh),
  // element strides ----
  template <int kCols>
  using GmemShapeOf = cute::Shape<int32_t, cute::Int<kCols>, int32_t, int32_t, int32_t>;
  using GmemShape = GmemShapeOf<kHeadDim>;    // q, k
  using GmemShapeV = GmemShapeOf<kHeadDimV>;  // dout, v
  using GmemStride = cute::Stride<int64_t, cute::_1, int64_t, int64_t, int64_t>;
  template <int kCols>
  using GmemTensorOf = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<Element*>(nullptr)),
                                                  cute::Layout<GmemShapeOf<kCols>, GmemStride>{}));
  using TmaLoadQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensorOf<kHeadDim>{}, SmemLayoutQStage{}));
  using TmaLoaddO =
      decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensorOf<kHeadDimV>{}, SmemLayoutdOStage{}));
  using TmaLoadK = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensorOf<kHeadDim>{}, SmemLayoutK{}));
  using TmaLoadV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensorOf<kHeadDimV>{}, SmemLayoutV{}));
  // dK / dV leave through the K / V buffer (the segment epilogue): the same boxes, stored.
  using TmaStoredK = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{}, GmemTensorOf<kHeadDim>{}, SmemLayoutK{}));
  using TmaStoredV = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{}, GmemTensorOf<kHeadDimV>{}, SmemLayoutV{}));

  static constexpr uint32_t kQTileBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kdOTileBytes = kBlockM * kHeadDimV * sizeof(Element);
  static constexpr uint32_t kKTileBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kVTileBytes = kBlockN * kHeadDimV * sizeof(Element);
  static constexpr uint32_t kRowFloatsBytes = kBlockM * sizeof(float);  // one LSE2 or delta row block
};

template <class Config>
struct BwdKernelParams {
  BwdParams base;  // the architecture-neutral part: problem, plan tables, workspace, modes
  typename Config::TmaLoadQ tma_q;
  typename Config::TmaLoaddO tma_do;
  typename Config::TmaLoadK tma_k;
  typename Config::TmaLoadV tma_v;
  typename Config::TmaStoredK tma_dk;  // dK / dV have K's / V's shapes (shape_k, shape_v)
  typename Config::TmaStoredV tma_dv;
  typename Config::GmemShape shape_q;
  typename Config::GmemShapeV shape_do;
  typename Config::GmemShape shape_k;
  typename Config::GmemShapeV shape_v;
};

// What the producer publishes with each segment's K/V (guarded by kv_full) ...
struct SegmentRecord {
  int32_t exit;         // 1: no more work (no K/V were loaded with this record)
  int32_t b, head_kv, kv_tile, group_rank;
  int32_t num_visits;
  int32_t end_of_item;  // last segment of its item: the MMA warpgroups report the item done after it
  int32_t split_dkv;    // the unit's dK/dV go through the group's ordered fp32 adds
  int32_t seqlen_k, k_row, kv_tile_begin;  // the sequence (TicketWork)
};
// ... and with each visit's Q / dO / LSE2 / delta (guarded by q_full[stage]).
// kv_tile repeats the segment's: the MMA warps take it from here so that nothing of the mask is invariant
// over a segment's visit loop (ptxas hoisted such values out of the loop and spilled them).
// seqlen_k and the band bounds (key - query in [band_lo, band_hi], kUnboundedBand for an open side) are the
// sequence's, repeated per visit for the same reason.
struct VisitRecord {
  int32_t head, q_tile, rank, flags, visit, ticket, kv_tile;
  int32_t accumulator;  // the dQ accumulator this visit adds into (PlanScheduler::accumulator)
  int32_t seqlen_k, band_lo, band_hi;
};
// Far outside any key - query difference (sequences have fewer than 2^24 rows: 16-bit tile indices), and far
// from overflow when a difference is subtracted from it.
constexpr int32_t kUnboundedBand = 1 << 29;

template <class Config>
struct BwdSmem {
  using Element = typename Config::Element;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kDqStages = Config::kDqStages;
  // Tiles first, 1024-byte aligned (as SW128 requires; the narrower swizzles need less).
  cute::array_aligned<Element, cute::cosize_v<typename Config::SmemLayoutQ>, 1024> q;      // kQStages
  cute::array_aligned<Element, cute::cosize_v<typename Config::SmemLayoutdO>, 1024> dout;  // kQStages
  cute::array_aligned<Element, cute::cosize_v<typename Config::SmemLayoutK>, 1024> k;
  cute::array_aligned<Element, cute::cosize_v<typename Config::SmemLayoutV>, 1024> v;
  // dS^T (kDsStages), then in the column split P^T (kDsStages; the key split keeps P^T in registers) in one array,
  // so that the key split's struct is unchanged (at head dim 128 it fills the 227 KB exactly).
  static constexpr int kDsElements = cute::cosize_v<typename Config::SmemLayoutdSt>;
  cute::array_aligned<Element, kDsElements * (Config::kColumnSplit ? 2 : 1), 1024> ds;
  __device__ Element* pt() { return ds.data() + kDsElements; }  // column split only
  // The store warps' staging buffers: fp32 in the DqStaging layout (bwd_dq_handoff.cuh).
  alignas(128) float dq[kDqStages][kBlockM * kHeadDim];
  alignas(128) float lse2[Config::kQStages][kBlockM];   // bulk-copy destinations: 16-byte aligned
  alignas(128) float delta[Config::kQStages][kBlockM];
  VisitRecord visit[Config::kQStages];
  // Two slots, alternating with kv_full's phase: the MMA warps may release the K/V buffer before their segment
  // epilogue ends (split-head GQA: before its adds) but still read the segment's record there; the producer
  // rewrites a slot only after the following segment's kv_empty, i.e. after that epilogue.
  SegmentRecord segment[2];
  DqHandoff handoff[kDqStages];
  alignas(8) uint64_t kv_full;                     // producer arrive + K/V bytes
  alignas(8) uint64_t kv_empty;                    // 256 MMA threads: done with the segment's K/V and its record
  alignas(8) uint64_t q_full[Config::kQStages];    // producer arrive + Q/dO/LSE2/delta bytes
  alignas(8) uint64_t q_empty[Config::kQStages];   // 256 MMA threads: done with the stage and its record
  alignas(8) uint64_t dq_full[kDqStages];          // 256 MMA-thread arrivals: a partial is staged
  alignas(8) uint64_t dq_empty[kDqStages];         // 32 store-warp arrivals: the buffer is drained
  int32_t waits_done;      // store warps -> producer: visits whose dQ wait is satisfied
  int32_t items_mma_done;  // MMA warpgroups -> producer (split-head GQA only): items whose dK/dV adds are done
};

// Whether the launch asks for 1 KB of slack so that the kernel can align its shared-memory base up to 1024 bytes
// (what SW128 tiles need). Where the struct alone fills the 227 KB, there is none, and the kernel checks instead that
// the base is aligned (it is, for a kernel without static shared memory, as CUTLASS's kernels assume).
template <class Config>
constexpr bool smem_has_slack() {
  return int(sizeof(BwdSmem<Config>)) + 1024 <= 227 * 1024;
}
template <class Config>
constexpr int smem_bytes_of() {
  constexpr int kBytes = int(sizeof(BwdSmem<Config>)) + (smem_has_slack<Config>() ? 1024 : 0);
  static_assert(kBytes <= 227 * 1024, "shared memory exceeds the 227 KB an sm_90 block may use");
  return kBytes;
}

// Named barriers among the 256 MMA threads (ids 1..3; 0 is __syncthreads; the store warps and the producer
// use none).
enum MmaNamedBarrier : uint32_t {
  kBarMma = 1,      // generic: all MMA threads (split-GQA release, item done)
  kBarDsFree = 2,   // (one dS^T buffer: head dim 256) both warpgroups' previous GEMMs reading sdS / sPt are complete
  kBarDsReady = 3,  // both warpgroups' dS^T halves are written and fenced for the async proxy
  // Staggered warpgroups (BwdConfig::kStaggered): one warpgroup arrives, the other syncs (256 counted).
  kBarLeaderDsReady = 4,    // the leader's dS^T half of visit v is written and fenced
  kBarFollowerDsReady = 5,  // the follower's dS^T half of visit v is written and fenced
  kBarLeaderTurn = 6,       // the leader may issue its S^T / dP^T GEMMs
  kBarFollowerTurn = 7,     // the follower may issue its S^T / dP^T GEMMs
};
__device__ __forceinline__ void mma_barrier(uint32_t id) {
  __syncwarp();  // bar.sync is .aligned: reconverge first (callers may come out of a divergent branch)
  named_barrier_sync(id, 256);
}

// Every intra-CTA mbarrier wait of the producer and the MMA warpgroups goes through watchdog_wait. A protocol bug
// must not hang: a wait that has not completed after DASH_BWD_WATCHDOG_CYCLES clock cycles (default 2^40, ~9 minutes
// at 1.98 GHz) ends the kernel with an error instead of a hang. Legitimate waits can be long: with a plain launch, a
// deterministic plan whose wave is not yet running waits until kernels of other streams release their SMs
// (docs/DEADLOCK.md), so the limit sits far above any such wait, and only a protocol bug can reach it. To end the
// kernel it writes to the invalid address 256 x (site + 1), so the launch fails with
// "illegal address", and compute-sanitizer memcheck names the site (the address), the block and the thread.
// The whole wait is one asm block, like CUTLASS's ClusterBarrier::wait: a C++ retry loop around try_wait put
// control flow between the wgmmas and tripled the spills (40 -> ~1200 bytes). 0 compiles the plain wait.
#ifndef DASH_BWD_WATCHDOG_CYCLES
#define DASH_BWD_WATCHDOG_CYCLES (1ull << 40)
#endif
// kSiteSmemAlignment is not a wait: the kernel's check of its shared-memory base (backward_kernel).
enum WaitSite : uint32_t { kSiteKvEmpty, kSiteKvFull, kSiteQEmpty, kSiteQFull, kSiteDqEmpty, kSiteClaim, kSiteSmemAlignment };
__device__ __forceinline__ void watchdog_wait(uint64_t* bar, uint32_t parity, WaitSite site) {
#if DASH_BWD_WATCHDOG_CYCLES > 0
  asm volatile(
      "{\n\t"
      ".reg .pred ready, late;\n\t"
      ".reg .u64 t0, t1;\n\t"
      "mov.u64 t0, %%clock64;\n\t"
      "WG_WAIT_RETRY:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n\t"
      "@ready bra.uni WG_WAIT_DONE;\n\t"
      "mov.u64 t1, %%clock64;\n\t"
      "sub.u64 t1, t1, t0;\n\t"
      "setp.gt.u64 late, t1, %2;\n\t"
      "@late st.global.u32 [%3], %1;\n\t"
      "@late trap;\n\t"
      "bra.uni WG_WAIT_RETRY;\n\t"
      "WG_WAIT_DONE:\n\t"
      "}" ::"r"(smem_addr(bar)),
      "r"(parity), "l"(uint64_t(DASH_BWD_WATCHDOG_CYCLES)), "l"(uint64_t(site + 1) * 256u)
      : "memory");
#else
  (void)site;
  mbarrier_wait(bar, parity);
#endif
}

// ------------------------------------------------------------------------------------------------------------
// Producer: one lane. Claims work from the plan (PlanScheduler) and issues all loads.
// ------------------------------------------------------------------------------------------------------------
template <class Config>
__device__ void produce(BwdKernelParams<Config> const& P, BwdSmem<Config>& s) {
  using namespace cute;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  const BwdParams& p = P.base;
  const PlanScheduler plan{p};

  Tensor mQ = P.tma_q.get_tma_tensor(P.shape_q);
  Tensor mdO = P.tma_do.get_tma_tensor(P.shape_do);
  Tensor mK = P.tma_k.get_tma_tensor(P.shape_k);
  Tensor mV = P.tma_v.get_tma_tensor(P.shape_v);
  Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Config::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(s.dout.data()), typename Config::SmemLayoutdO{});
  Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Config::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(s.v.data()), typename Config::SmemLayoutV{});

  PipelineState<Config::kQStages> q_state;
  uint32_t kv_phase = 0;
  int visits_issued = 0;   // every visit has one dQ wait (rank 0's is satisfied at once)
  int items_with_mma = 0;  // claimed split-head GQA items that have at least one segment
  const bool varlen = p.sequences != nullptr;

  for (;;) {
    if (p.ordered) {
      // CLAIM RULE WAIT (docs/DEADLOCK.md, "Claim rule"): claim the next ticket only after every wait of the
      // current item is satisfied: its dQ waits (the store warps count satisfied visits) and, for split-head
      // GQA, its dK/dV group-order waits (the MMA warpgroups count finished items). Without split heads the
      // segment epilogue has no wait, so the next item's loads may overlap it. Both counters are advanced by
      // threads of this CTA whose own waits end by the DEADLOCK.md argument (awaited visits belong to claimed
      // items of running CTAs).
      const long long start = clock64();
      while (atomicAdd(&s.waits_done, 0) < visits_issued || atomicAdd(&s.items_mma_done, 0) < items_with_mma) {
        __nanosleep(64);
        if (DASH_BWD_WATCHDOG_CYCLES > 0 && uint64_t(clock64() - start) > DASH_BWD_WATCHDOG_CYCLES) {
          *reinterpret_cast<volatile uint32_t*>(uintptr_t(kSiteClaim + 1) * 256u) = 0;  // see watchdog_wait
          __trap();
        }
      }
    }
    TicketWork work;
    if (!plan.claim(work)) break;
    const dash_item item = work.item;
    const int b = work.unit.batch, head_kv = work.unit.head_kv, group_rank = work.unit.group_rank;
    // The sequence's band of visible keys, as the MMA warps test it (bwd mask comment there).
    const AttentionMask mask = p.mask.for_lengths(work.seqlen_q, work.seqlen_k);
    const int band_hi = mask.right_bounded() ? mask.diagonal_offset() + mask.right() : kUnboundedBand;
    const int band_lo = mask.left_bounded() ? mask.diagonal_offset() - mask.left() : -kUnboundedBand;
    // KV tile n of this sequence (hopper/varlen.cuh: bounded at the sequence's end in a varlen pack), all the
    // tensor's head-dim columns.
    auto kv_tile = [&](auto const& mT, int n) {
      const BoxRows box = box_rows(varlen, b, work.k_row, n * kBlockN, work.seqlen_k);
      return local_tile(domain_offset(make_coord(box.x, _0{}), mT(_, _, head_kv, box.y, box.z)),
                        make_shape(Int<kBlockN>{}, get<1>(shape(mT))), make_coord(_0{}, _0{}));
    };

    for (int sgi = 0; sgi < item.num_segments; ++sgi) {
      const dash_segment seg = plan.segment(work, sgi);
      auto [tKgK, tKsK] = tma_partition(P.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                        group_modes<0, 2>(kv_tile(mK, seg.kv_tile)));
      auto [tVgV, tVsV] = tma_partition(P.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                        group_modes<0, 2>(kv_tile(mV, seg.kv_tile)));
      // PREFETCH (L2) the tile's K / V while the MMA warps still work on the previous segment: the load below
      // waits for them to free the buffer, and then reads L2 instead of HBM.
      cute::prefetch(P.tma_k, tKgK);
      cute::prefetch(P.tma_v, tVgV);
      // WAIT (K/V buffer free): every MMA thread arrived on kv_empty after its last GEMM reading K/V of the
      // previous segment completed (warpgroup_wait), after it copied the segment record, and (a segment whose
      // dK / dV leave through the buffer) after the TMA stores of its dK / dV read it. The MMA warps only wait on
      // this CTA's producer and store warps, whose waits end (DEADLOCK.md), so this ends too.
      watchdog_wait(&s.kv_empty, kv_phase ^ 1u, kSiteKvEmpty);
      s.segment[kv_phase] = SegmentRecord{0,
                                          b,
                                          head_kv,
                                          int32_t(seg.kv_tile),
                                          group_rank,
                                          int32_t(seg.num_visits),
                                          sgi + 1 == item.num_segments ? 1 : 0,
                                          work.split_dkv,
                                          work.seqlen_k,
                                          work.k_row,
                                          work.kv_tile_begin};
      // The arrive (release.cta) publishes the record above; the TMA completes the transaction bytes. The MMA
      // warps' wait on kv_full acquires both. Rows past seqlen_k are zero-filled by TMA and still counted.
      mbarrier_arrive_expect_tx(&s.kv_full, Config::kKTileBytes + Config::kVTileBytes);
      copy(P.tma_k.with(s.kv_full), tKgK, tKsK);
      copy(P.tma_v.with(s.kv_full), tVgV, tVsV);
      kv_phase ^= 1u;

      for (int vi = 0; vi < seg.num_visits; ++vi) {
        const int index = plan.visit_index(seg, vi);
        const dash_visit vis = plan.visit(work, index);
        const int head = plan.head_of(work, vis);
        const int accumulator = plan.accumulator(work, head, vis.q_tile);
        const int st = q_state.index;
        // WAIT (Q stage free): every MMA thread arrived on q_empty[st] after the GEMMs that read this stage
        // (two visits ago) completed and after it copied the visit record.
        watchdog_wait(&s.q_empty[st], q_state.phase ^ 1u, kSiteQEmpty);
        s.visit[st] = VisitRecord{head,         int32_t(vis.q_tile), int32_t(vis.dq_rank), int32_t(vis.flags),
                                  index,        work.ticket,         int32_t(seg.kv_tile), accumulator,
                                  work.seqlen_k, band_lo,            band_hi};
        // Release of the record + expected bytes of the four loads (two TMA tiles, two kBlockM-float rows).
        mbarrier_arrive_expect_tx(&s.q_full[st],
                                  Config::kQTileBytes + Config::kdOTileBytes + 2 * Config::kRowFloatsBytes);
        const BoxRows q_box = box_rows(varlen, b, work.q_row, vis.q_tile * kBlockM, work.seqlen_q);
        auto q_rows = [&](auto const& mT) {
          return local_tile(domain_offset(make_coord(q_box.x, _0{}), mT(_, _, head, q_box.y, q_box.z)),
                            make_shape(Int<kBlockM>{}, get<1>(shape(mT))), make_coord(_0{}, _0{}));
        };
        auto [tQgQ, tQsQ] =
            tma_partition(P.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(q_rows(mQ)));
        auto [tdOgdO, tdOsdO] =
            tma_partition(P.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(q_rows(mdO)));
        // EVICT_LAST: a Q tile's rows (Q, dO, LSE2, delta) are read again by the visit of every KV tile that sees
        // them, while a segment's K/V are read once per CTA (default priority).
        copy(P.tma_q.with(s.q_full[st], 0, L2Hint::EVICT_LAST), tQgQ, tQsQ(_, st));
        copy(P.tma_do.with(s.q_full[st], 0, L2Hint::EVICT_LAST), tdOgdO, tdOsdO(_, st));
        // LSE2 / delta are padded to whole Q tiles by bwd_preprocess (kBlockM floats per tile, 256- or 512-byte
        // aligned rows), so one bulk copy each, no bounds.
        const int64_t row0 = int64_t(accumulator) * kBlockM;
        bulk_copy_g2s(s.lse2[st], p.lse_log2 + row0, Config::kRowFloatsBytes, &s.q_full[st], L2Hint::EVICT_LAST);
        bulk_copy_g2s(s.delta[st], p.delta + row0, Config::kRowFloatsBytes, &s.q_full[st], L2Hint::EVICT_LAST);
        q_state.advance();
        ++visits_issued;
      }
    }
    if (item.num_segments > 0 && work.split_dkv) ++items_with_mma;
  }

  // No more tickets: an exit record instead of a segment (no bytes: the plain arrive completes the phase).
  watchdog_wait(&s.kv_empty, kv_phase ^ 1u, kSiteKvEmpty);
  s.segment[kv_phase].exit = 1;
  mbarrier_arrive(&s.kv_full);
}

// ------------------------------------------------------------------------------------------------------------
// MMA warpgroups: 256 threads, `thread` = threadIdx.x - 128.
// ------------------------------------------------------------------------------------------------------------
template <class Config>
__device__ void mma_warpgroups(BwdKernelParams<Config> const& P, BwdSmem<Config>& s, int thread) {
  using namespace cute;
  using Element = typename Config::Element;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr int kHeadDimV = Config::kHeadDimV, kDqStages = Config::kDqStages;
  const BwdParams& p = P.base;
  const PlanScheduler plan{p};

  Tensor sQ = make_tensor(make_smem_ptr(s.q.data()), typename Config::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(s.dout.data()), typename Config::SmemLayoutdO{});
  Tensor sQt = make_tensor(make_smem_ptr(s.q.data()), typename Config::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(s.dout.data()), typename Config::SmemLayoutdOt{});
  Tensor sK = make_tensor(make_smem_ptr(s.k.data()), typename Config::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(s.v.data()), typename Config::SmemLayoutV{});
  Tensor sKt = make_tensor(make_smem_ptr(s.k.data()), typename Config::SmemLayoutKt{});
  Tensor sdS = make_tensor(make_smem_ptr(s.ds.data()), typename Config::SmemLayoutdS{});
  Tensor sdSt = make_tensor(make_smem_ptr(s.ds.data()), typename Config::SmemLayoutdSt{});
  Tensor sPt = make_tensor(make_smem_ptr(s.pt()), typename Config::SmemLayoutdSt{});  // column split only

  typename Config::MmaSdP mma_sdp;
  typename Config::MmadK mma_dk;
  typename Config::MmadV mma_dv;
  typename Config::MmadQ mma_dq;
  // Accumulator partitions (registers, coordinates) per thread ...
  auto thr_sdp = mma_sdp.get_thread_slice(thread);
  auto thr_dk = mma_dk.get_thread_slice(thread);
  auto thr_dv = mma_dv.get_thread_slice(thread);
  auto thr_dq = mma_dq.get_thread_slice(thread);
  // ... but the shared-memory operands per warpgroup: a wgmma descriptor depends only on the warpgroup, and
  // sliced by an index the compiler can prove warp-uniform (a shuffle from lane 0) the descriptors live in
  // uniform registers. Sliced by the thread index, ptxas built them in vector registers and moved every
  // k-step's descriptor with an R2UR (ncu: ~400 R2UR per visit at head dim 128).
  const int warpgroup_first_thread = __shfl_sync(0xffffffffu, thread / 128, 0) * 128;
  auto wg_sdp = mma_sdp.get_slice(warpgroup_first_thread);
  auto wg_dk = mma_dk.get_slice(warpgroup_first_thread);
  auto wg_dv = mma_dv.get_slice(warpgroup_first_thread);
  auto wg_dq = mma_dq.get_slice(warpgroup_first_thread);

  // wgmma descriptors (no data in registers).
  Tensor tSrK = wg_sdp.partition_fragment_A(sK);      // key split: this warpgroup's 64 keys; column split: all 64
  Tensor tSrV = wg_sdp.partition_fragment_A(sV);
  Tensor tSrQ = wg_sdp.partition_fragment_B(sQ);      // (.., .., .., stage); column split: this warpgroup's queries
  Tensor tSrdO = wg_sdp.partition_fragment_B(sdO);
  Tensor tdVrdOt = wg_dv.partition_fragment_B(sdOt);  // (.., .., .., stage); column split: this warpgroup's columns
  Tensor tdKrQt = wg_dk.partition_fragment_B(sQt);
  Tensor tdQrdS = wg_dq.partition_fragment_A(sdS);
  Tensor tdQrKt = wg_dq.partition_fragment_B(sKt);    // this warpgroup's kDqCols head-dim columns

  // Accumulators per thread: S^T, dP^T kBlockN x kBlockM / 256 fp32 each; dK, dV kBlockN x (head dim) / 256 (whole
  // segment); dQ kDqCols / 2 (D = 128: 32 + 32 + 64 + 64 + 32; D = 96: 32 + 32 + 48 + 48 + 24; D = 64: 64 + 64 + 32 +
  // 32 + 32; column split 192 / 128: 16 + 16 + 48 + 32 + 48, 256: 16 + 16 + 64 + 64 + 64).
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
  Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
  Tensor tdKrdK = partition_fragment_C(mma_dk, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  Tensor tdVrdV = partition_fragment_C(mma_dv, Shape<Int<kBlockN>, Int<kHeadDimV>>{});
  // dQ (tdQrdQ) is declared per visit, below: a staggered leader skips its dQ GEMM at a segment's first visit,
  // and an accumulator declared out here would then carry over loop iterations (ptxas kept it in local memory).
  auto make_dq_accumulator = [&] { return partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{}); };
  // P^T and dS^T in Element, in the accumulator's register order; in the key split also viewed as the RS A operand
  // (16 columns of S^T = one 16-query k-step: the forward's P -> O += P V trick).
  Tensor tPr = make_tensor<Element>(tSrS.layout());
  Tensor tdSr = make_tensor<Element>(tSrS.layout());
  Tensor tPa = make_tensor(tPr.data(), accumulator_as_a_operand(tSrS.layout()));
  Tensor tdSa = make_tensor(tdSr.data(), accumulator_as_a_operand(tSrS.layout()));
  // Column split: the dK / dV GEMMs' A operands are the shared P^T / dS^T tiles (.., .., .., stage).
  Tensor tdVrPt = wg_dv.partition_fragment_A(sPt);
  Tensor tdKrdSt = wg_dk.partition_fragment_A(sdSt);
  // (row, column) of every accumulator register in its tile.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));      // (key, query)
  // The same for thread 0 (constant-folded): every thread's coordinates are its (tScS(0)) plus these.
  Tensor tScS0 = mma_sdp.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
  Tensor tdKc = thr_dk.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));   // (key, dim)
  Tensor tdVc = thr_dv.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDimV>>{}));  // (key, dim)
  // dS^T (and P^T) registers -> shared memory with stmatrix (the forward's O-store idiom), addresses = base +
  // constants. The store goes through the position-independent form of the swizzled tile (the swizzle applied to
  // 32-bit element offsets): through the pointer form, every visit recomputed the addresses as 64-bit generic
  // pointers.
  auto ds_store = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, typename Config::MmaSdP{});
  auto thr_ds_store = ds_store.get_thread_slice(thread);
  Tensor tdSsdS = thr_ds_store.partition_D(as_position_independent_swizzle_tensor(sdSt));
  Tensor tPsPt = thr_ds_store.partition_D(as_position_independent_swizzle_tensor(sPt));
  Tensor tdSr_store = thr_ds_store.retile_S(tdSr);
  Tensor tPr_store = thr_ds_store.retile_S(tPr);
  // The segment epilogue's dK / dV into the K / V buffer, the same way, and the global tensors it stores to.
  auto dk_store = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, typename Config::MmadK{});
  auto dv_store = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, typename Config::MmadV{});
  auto thr_dk_store = dk_store.get_thread_slice(thread);
  auto thr_dv_store = dv_store.get_thread_slice(thread);
  Tensor tdKsK_store = thr_dk_store.partition_D(as_position_independent_swizzle_tensor(sK));
  Tensor tdVsV_store = thr_dv_store.partition_D(as_position_independent_swizzle_tensor(sV));
  Tensor mdK = P.tma_dk.get_tma_tensor(P.shape_k);
  Tensor mdV = P.tma_dv.get_tma_tensor(P.shape_v);

  PipelineState<Config::kQStages> q_state;
  uint32_t kv_phase = 0;
  int dq_stage = 0;
  uint32_t dq_phase = 0;  // parity of the staging buffer's current use (flips when dq_stage wraps)
  auto next_dq_stage = [&] {
    if (++dq_stage == kDqStages) {
      dq_stage = 0;
      dq_phase ^= 1u;
    }
  };
  // Hand this warpgroup's dQ block (tdQrdQ, complete) to the store warp of the current staging buffer
  // (bwd_dq_handoff.cuh), with the visit's `record` written by `record_writer` (a pointer to the record, tried
  // instead, put the visit record in local memory).
  // WAIT (staging buffer) until that store warp drained it: it drains in order and is only held up by a dQ-order
  // wait, which ends (docs/DEADLOCK.md; see store_warp_loop), so this wait ends too.
  auto hand_off_dq = [&](auto const& tdQrdQ, const VisitRecord& record, bool record_writer) {
    watchdog_wait(&s.dq_empty[dq_stage], dq_phase ^ 1, kSiteDqEmpty);
    {
      // The staging layout is the store warp's (DqStaging, Config::SmemLayoutdQStaging), partitioned
      // like the accumulator. Registers 2j and 2j + 1 hold adjacent columns of one row starting at an even
      // column, i.e. 8 aligned bytes inside one swizzled 4-float chunk (BwdKernel.LayoutCheck checks both):
      // one 64-bit store per pair (CuTe's copy cannot see through the swizzle and issued two 32-bit stores,
      // 12% of the MMA warps' stall samples at head dim 128; halving them changed no measured speed).
      Tensor sdQ = make_tensor(make_smem_ptr(s.dq[dq_stage]), typename Config::SmemLayoutdQStaging{});
      Tensor tdQsdQ = thr_dq.partition_C(sdQ);
      CUTE_UNROLL
      for (int i = 0; i < size(tdQrdQ); i += 2) {
        *reinterpret_cast<float2*>(&tdQsdQ(i)) = make_float2(tdQrdQ(i), tdQrdQ(i + 1));
      }
    }
    if (record_writer) {
      s.handoff[dq_stage] = DqHandoff{record.accumulator, record.rank, record.flags, record.ticket, record.visit};
    }
    // The store warp's bulk copy reads the staged values through the async proxy: each writer fences its
    // generic writes for that proxy, then its arrival releases them (and the record).
    fence_proxy_async_shared();
    mbarrier_arrive(&s.dq_full[dq_stage]);
    next_dq_stage();
  };
  // Staggered warpgroups (Config::kStaggered): which one this is (warp-uniform), and the stage of the previous
  // visit, whose dQ rows the leader still owes.
  const bool leader = warpgroup_first_thread == 0;
  int previous_stage = 0;
  // Both warpgroups' barrier waits and arrivals below are .aligned: reconverge first.
  auto sync_on = [](uint32_t id) {
    __syncwarp();
    named_barrier_sync(id, 256);
  };
  auto arrive_on = [](uint32_t id) {
    __syncwarp();
    named_barrier_arrive(id, 256);
  };
  // TURNS: the leader issues visit v's S^T / dP^T GEMMs first, then the follower, then the leader visit v + 1's,
  // and so on. The follower's arrival here grants the leader its first turn; each later turn of one warpgroup is
  // granted by the other's previous one, so neither arrives twice on a barrier before the other synced on it.
  if constexpr (Config::kStaggered) {
    if (!leader) arrive_on(kBarLeaderTurn);
  }

  for (;;) {
    // WAIT (segment): the producer's arrive released the record, the TMA completed K and V. The producer's
    // own waits (claim rule, free buffers) end by DEADLOCK.md, so this does.
    watchdog_wait(&s.kv_full, kv_phase, kSiteKvFull);
    // Only the loop bound is kept in registers; the epilogue reads the rest of the record from its slot
    // (holding it across the visit loop made ptxas spill it).
    const SegmentRecord& seg = s.segment[kv_phase];
    kv_phase ^= 1u;
    if (seg.exit) break;
    const int num_visits = seg.num_visits;
    clear(tdVrdV);
    clear(tdKrdK);

    for (int vi = 0; vi < num_visits; ++vi) {
      const int st = q_state.index;
      // WAIT (visit): Q, dO, LSE2, delta of this stage landed and its record is published (acquire).
      watchdog_wait(&s.q_full[st], q_state.phase, kSiteQFull);
      const VisitRecord vis = s.visit[st];
      const int col_base = get<1>(tScS(0));
      Tensor tdQrdQ = make_dq_accumulator();
      // The visit's dQ block, complete after its GEMM's wait, to the store warps. The record is written by the
      // warpgroup that stages the visit's rows on time (staggered: the follower; the leader's rows of the same
      // visit arrive one visit later, and dq_full counts both).
      auto stage_dq = [&](auto& dq) {
        warpgroup_fence_operand(dq);  // keep the reads of dQ below the wait
        hand_off_dq(dq, vis, thread == (Config::kStaggered ? 128 : 0));
      };
      // This thread's LSE2 and delta (Config::kStatsInRegisters): LSE2 now, before the GEMMs below read shared
      // memory; delta after the exponentials.
      float lse2_reg[Config::kStatCols], delta_reg[Config::kStatCols];
      auto load_stats = [&](float* reg, const float* row) {
        CUTE_UNROLL
        for (int j = 0; j < Config::kStatCols / 2; ++j) {
          const float2 pair = *reinterpret_cast<const float2*>(row + col_base + 8 * j);
          reg[2 * j] = pair.x;
          reg[2 * j + 1] = pair.y;
        }
      };
      if constexpr (Config::kStatsInRegisters) load_stats(lse2_reg, s.lse2[st]);

      // WAIT (turn): granted by the other warpgroup right after it issued its own S^T / dP^T GEMMs (of visit v - 1
      // for the leader, v for the follower), which needs only waits that end before its own turn wait.
      if constexpr (Config::kStaggered) sync_on(leader ? kBarLeaderTurn : kBarFollowerTurn);
      // S^T = K Q^T and dP^T = V dO^T (this warpgroup's keys, or queries), one commit group each.
      warpgroup_gemm<true, false>(mma_sdp, tSrK, tSrQ(_, _, _, st), tSrS);
      warpgroup_gemm<true, false>(mma_sdp, tSrV, tSrdO(_, _, _, st), tSrdP);
      if constexpr (Config::kStaggered) arrive_on(leader ? kBarFollowerTurn : kBarLeaderTurn);

      // Masking where the plan says the block is partly masked, and on a last KV tile that the keys do not
      // fill; rows past seqlen_q or with LSE = -inf have LSE2 = +inf, so P = 0 there.
      // Register i sits at (key_base + r0_i, col_base + c0_i) with (r0_i, c0_i) = thread 0's coordinates,
      // compile-time constants. Key visible to query iff key < seqlen_k and band_lo <= key - query <= band_hi
      // (mask.key_begin / key_end); each test becomes one runtime value per visit compared with constants
      // (written this way because ptxas hoisted 16 per-column values out of the loops and spilled).
      const bool need_mask = (vis.flags & DASH_VISIT_PARTIAL_MASK) || (vis.kv_tile + 1) * kBlockN > vis.seqlen_k;
      const int key_base = vis.kv_tile * kBlockN + get<0>(tScS(0));
      // Column c0 of thread 0's register i (a compile-time constant) is this thread's col_base + c0: its LSE2 or
      // delta from the registers (kStatsInRegisters) or from the stage's row in shared memory.
      auto stat_of = [&](const float* reg, const float* row, int c0) {
        return Config::kStatsInRegisters ? reg[Config::stat_slot(c0)] : row[col_base + c0];
      };

      // WAIT (wgmma): S^T's group (committed first) is complete; dP^T's may still run while P is computed.
      warpgroup_wait<1>();
      warpgroup_fence_operand(tSrS);  // keep the reads of S^T below the wait
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) {
        const float x = tSrS(i) * p.scale_log2 - stat_of(lse2_reg, s.lse2[st], get<1>(tScS0(i)));
        // i is a compile-time constant here (unrolled): the choice costs nothing at run time.
        if constexpr (Config::kExp2PolyEvery > 0) {
          tSrS(i) = i % Config::kExp2PolyEvery == Config::kExp2PolyEvery - 1 ? exp2_polynomial(x) : exp2_approx(x);
        } else {
          tSrS(i) = exp2_approx(x);
        }
      }
      // P^T in Element, the dV GEMM's operand (Config::kConvertBeforeMask says where).
      auto convert_p = [&] {
        CUTE_UNROLL
        for (int i = 0; i < size(tSrS); ++i) tPr(i) = Element(tSrS(i));
      };
      if constexpr (Config::kConvertBeforeMask) convert_p();
      if (need_mask) {
        // One branch per visit (uniform across the warpgroup); the loop inside has no branches.
        // key - query = base + r0 - c0.
        const int base = key_base - col_base - vis.q_tile * kBlockM;
        // The band of keys a query sees, as bounds on key - query (dash/attention_mask.hpp): band_lo <= key -
        // query <= band_hi, an open side at kUnboundedBand (so its test below never masks).
        const int keys_left = vis.seqlen_k - key_base;  // masked iff r0 >= it
        const int above = base - vis.band_hi;           // masked iff > c0 - r0
        const int below = base - vis.band_lo;           // masked iff < c0 - r0
        CUTE_UNROLL
        for (int i = 0; i < size(tSrS); ++i) {
          const int r0 = get<0>(tScS0(i)), c0 = get<1>(tScS0(i));
          tSrS(i) = (r0 >= keys_left || above > c0 - r0 || below < c0 - r0) ? 0.f : tSrS(i);
        }
        if constexpr (Config::kConvertBeforeMask) convert_p();
      }
      if constexpr (!Config::kConvertBeforeMask) convert_p();
      if constexpr (Config::kStatsInRegisters) load_stats(delta_reg, s.delta[st]);

      if constexpr (!Config::kColumnSplit) {
        // WAIT (wgmma): dP^T complete (no other group is pending).
        warpgroup_wait<0>();
        warpgroup_fence_operand(tSrdP);
        CUTE_UNROLL
        for (int i = 0; i < size(tSrS); ++i) {
          tdSr(i) = Element(tSrS(i) * (tSrdP(i) - stat_of(delta_reg, s.delta[st], get<1>(tScS0(i)))));
        }

        // No "dS free" barrier: this visit's dS^T buffer (two, Config::kDsStages) was last read by visit v - 2's dQ
        // GEMMs, complete before either warpgroup passed visit v - 1's "dS ready" barrier below. tdSr is not yet an
        // operand of any wgmma here: PTX makes even reading the A registers of an in-flight wgmma undefined, which
        // is why dK += dS^T Q is issued only after this store.
        // Staggered, the same holds through the one-sided barriers: WAIT (the other warpgroup's half). The leader
        // waits for the follower's half of visit v - 1 (none at a segment's first visit), the follower for the
        // leader's half of visit v. The follower arrived after its visit v - 2 dQ GEMM completed; the leader, for
        // visit v, after its (late) visit v - 2 dQ GEMM completed; so both readers of this buffer are done. Each
        // arrival comes from the other warpgroup's visit that this one already passed or is in, and needs no wait
        // of this warpgroup's that comes after, so these waits end; and neither warpgroup arrives twice before the
        // other synced (the leader's next arrival waits for the follower's, which follows the follower's sync).
        static_assert(Config::kDsStages == 2, "the key split alternates two dS^T buffers");
        if constexpr (Config::kStaggered) {
          if (!leader) {
            sync_on(kBarLeaderDsReady);
          } else if (vi > 0) {
            sync_on(kBarFollowerDsReady);
          }
        }
        copy(ds_store, tdSr_store, tdSsdS(_, _, _, st));
        // dV_w += P^T dO (A = P^T from registers), issued only now, after the dS^T store (FA3's order): it runs
        // during the barrier below and the dQ GEMM. Issued before dS^T was computed, its in-flight A registers
        // made ptxas serialise every wgmma at 128-row Q tiles (16% slower), and it measured 1-3% slower at 64-row
        // ones; issued between the dS^T loop and the store, 3-6% slower at 128 rows, its issue queued with the
        // stmatrix stores (docs/history/kernel-notes-bwd-wgmma.md, 2026-12-03).
        warpgroup_gemm<false, true>(mma_dv, tPa, tdVrdOt(_, _, _, st), tdVrdV);
        // Generic-proxy writes read by wgmma (async proxy): each writer fences, then the barrier makes all
        // 128 x kBlockM values (both warpgroups' halves) visible before either warpgroup issues dQ.
        cutlass::arch::fence_view_async_shared();
        if constexpr (Config::kStaggered) {
          arrive_on(leader ? kBarLeaderDsReady : kBarFollowerDsReady);
        } else {
          mma_barrier(kBarDsReady);
        }

        // dQ[64w.., :] = dS K (both from smem) first, then dK_w += dS^T Q (A = dS^T from registers): the dQ partial
        // is handed to the store warps while the dK GEMM still runs, which hides the staging copy and gives the
        // ordered add of a deterministic run a head start on the next visit. Staggered, the leader's rows are those
        // of visit v - 1 (both halves of its dS^T: the follower's arrived above), none at a segment's first visit.
        // The GEMMs, the wait and the hand-off sit in ONE branch, with the dK GEMM written out in both arms: with
        // the hand-off in a second `if` on the same condition, the compiler merged tdQrdQ between the two (the
        // GEMM's result, or undefined on the leader's first visit), materialised the undefined side as zeros and
        // so cleared 32 registers every visit of the staggered kernel (docs/history/kernel-notes-bwd-wgmma.md,
        // 2026-12-05 06:18).
        if (!Config::kStaggered || !leader || vi > 0) {
          Tensor tdQrdS_stage = tdQrdS(_, _, _, Config::kStaggered && leader ? previous_stage : st);
          warpgroup_gemm<true, false>(mma_dq, tdQrdS_stage, tdQrKt, tdQrdQ);
          warpgroup_gemm<false, true>(mma_dk, tdSa, tdKrQt(_, _, _, st), tdKrdK);
          // WAIT (wgmma): groups complete in commit order (dV, dQ, dK), so at most one pending means dV and dQ are
          // complete. Only the dK GEMM (accumulator tdKrdK, A registers tdSr) is in flight below: its registers
          // are not touched until the warpgroup_wait<0> after the hand-off.
          warpgroup_wait<1>();
          stage_dq(tdQrdQ);
        } else {
          warpgroup_gemm<false, true>(mma_dk, tdSa, tdKrQt(_, _, _, st), tdKrdK);
        }
      } else {
        // WAIT (wgmma): dP^T complete.
        warpgroup_wait<0>();
        warpgroup_fence_operand(tSrdP);
        CUTE_UNROLL
        for (int i = 0; i < size(tSrS); ++i) {
          tdSr(i) = Element(tSrS(i) * (tSrdP(i) - stat_of(delta_reg, s.delta[st], get<1>(tScS0(i)))));
        }
        // BARRIER (P / dS free), with one buffer each: the other warpgroup's GEMMs of the previous visit read sPt
        // and sdS; they completed (warpgroup_wait<0> below) before that warpgroup reached this barrier. With two
        // buffers, as in the key split (no barrier).
        if constexpr (Config::kDsStages == 1) mma_barrier(kBarDsFree);
        copy(ds_store, tPr_store, tPsPt(_, _, _, st));
        copy(ds_store, tdSr_store, tdSsdS(_, _, _, st));
        // Each warpgroup wrote its 32 queries of P^T and dS^T; every GEMM below reads all 64. Each writer fences its
        // generic-proxy writes for the async proxy (wgmma), then the barrier makes both halves visible.
        cutlass::arch::fence_view_async_shared();
        mma_barrier(kBarDsReady);

        // dQ[:, cols_w] = dS K[:, cols_w] first (handed to the store warp while the others run), then dV_w += P^T
        // dO[:, cols_w] and dK_w += dS^T Q[:, cols_w], all from shared memory.
        Tensor tdQrdS_stage = tdQrdS(_, _, _, st);
        Tensor tdVrPt_stage = tdVrPt(_, _, _, st);
        Tensor tdKrdSt_stage = tdKrdSt(_, _, _, st);
        warpgroup_gemm<true, false>(mma_dq, tdQrdS_stage, tdQrKt, tdQrdQ);
        warpgroup_gemm<false, false>(mma_dv, tdVrPt_stage, tdVrdOt(_, _, _, st), tdVrdV);
        warpgroup_gemm<false, false>(mma_dk, tdKrdSt_stage, tdKrQt(_, _, _, st), tdKrdK);
        // WAIT (wgmma): groups complete in commit order (dQ, dV, dK): at most two pending means dQ is complete.
        warpgroup_wait<2>();
        stage_dq(tdQrdQ);
      }

      // All GEMMs of this visit complete: Q/dO of the stage, sdS (and sPt) and the RS operands are free.
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdKrdK);
      if constexpr (Config::kColumnSplit) warpgroup_fence_operand(tdVrdV);
      // RELEASE (Q stage) to the producer: every MMA thread arrives after its own last read of the stage (the
      // GEMMs: the wait above; the record, LSE2 and delta: before it). One arrival per thread, not per warp: a
      // lane's reads are then ordered before the producer's next write by that lane's own release, which is
      // what racecheck checks (with one arrival per warp after __syncwarp it reported every read as a hazard).
      mbarrier_arrive(&s.q_empty[st]);
      q_state.advance();
      previous_stage = st;
    }
    if constexpr (Config::kStaggered) {
      // The leader's dQ rows of the segment's last visit, before the epilogue frees K (the dQ GEMM reads it).
      // WAIT (the follower's half of that visit): the follower arrives after its own store, with no wait on the
      // leader that comes after this point.
      if (leader && num_visits > 0) {
        sync_on(kBarFollowerDsReady);
        Tensor tdQrdS_last = tdQrdS(_, _, _, previous_stage);
        Tensor tdQrdQ = make_dq_accumulator();
        warpgroup_gemm<true, false>(mma_dq, tdQrdS_last, tdQrKt, tdQrdQ);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tdQrdQ);
        hand_off_dq(tdQrdQ, VisitRecord{}, false);  // the record went with the follower's half
      }
    }
    // ---- segment epilogue: dK / dV of this KV tile (this unit's share) ----
    // The record's slot stays valid until the next segment's kv_empty (see BwdSmem::segment).
    const int seg_b = seg.b, seg_head_kv = seg.head_kv, seg_kv_tile = seg.kv_tile, seg_group_rank = seg.group_rank;
    const bool seg_end_of_item = seg.end_of_item != 0, seg_split_dkv = seg.split_dkv != 0;
    const int seg_seqlen_k = seg.seqlen_k, seg_k_row = seg.k_row, seg_kv_tile_begin = seg.kv_tile_begin;
    CUTE_UNROLL
    for (int i = 0; i < size(tdKrdK); ++i) tdKrdK(i) *= p.softmax_scale;
    if (!seg_split_dkv) {
      // This CTA holds the complete dK/dV of the tile. They leave through the K/V buffer, which no GEMM reads any
      // more, as two TMA stores: stmatrix into the buffer, then one thread stores both boxes (rows past the
      // sequence's end lie outside the boxes' bounds and are dropped). Stored from registers, 4 bytes per lane and
      // instruction, the epilogue held a quarter of the MMA warps' time at 1k tokens (ncu, 2026-12-03).
      // BARRIER (K/V buffer): each thread's GEMMs of the last visit completed at its warpgroup_wait<0>; the other
      // warpgroup's (dQ = dS K reads every key of K) have completed once all 256 threads are here.
      mma_barrier(kBarMma);
      Tensor rdK = make_tensor<Element>(tdKrdK.layout());
      Tensor rdV = make_tensor<Element>(tdVrdV.layout());
      CUTE_UNROLL
      for (int i = 0; i < size(tdKrdK); ++i) rdK(i) = Element(tdKrdK(i));
      CUTE_UNROLL
      for (int i = 0; i < size(tdVrdV); ++i) rdV(i) = Element(tdVrdV(i));
      copy(dk_store, thr_dk_store.retile_S(rdK), tdKsK_store);
      copy(dv_store, thr_dv_store.retile_S(rdV), tdVsV_store);
      // Generic-proxy writes read by the TMA store (async proxy): each writer fences, then the barrier makes the
      // whole tile visible before thread 0 issues the stores.
      cutlass::arch::fence_view_async_shared();
      mma_barrier(kBarMma);
      if (thread == 0) {
        const bool varlen = p.sequences != nullptr;
        auto kv_tile_out = [&](auto const& mT) {
          const BoxRows box = box_rows(varlen, seg_b, seg_k_row, seg_kv_tile * kBlockN, seg_seqlen_k);
          return local_tile(domain_offset(make_coord(box.x, _0{}), mT(_, _, seg_head_kv, box.y, box.z)),
                            make_shape(Int<kBlockN>{}, get<1>(shape(mT))), make_coord(_0{}, _0{}));
        };
        auto [tdKgdK, tdKsK] = tma_partition(P.tma_dk, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                             group_modes<0, 2>(kv_tile_out(mdK)));
        auto [tdVgdV, tdVsV] = tma_partition(P.tma_dv, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                             group_modes<0, 2>(kv_tile_out(mdV)));
        copy(P.tma_dk, tdKsK, tdKgdK);
        copy(P.tma_dv, tdVsV, tdVgdV);
        tma_store_arrive();
        // WAIT (bulk read): the stores have read the buffer before the producer may load the next K / V into it.
        // Their global writes complete on their own (nothing in this kernel reads dK / dV).
        tma_store_wait<0>();
      }
      // RELEASE (K/V buffer) to the producer, one arrival per thread as for the Q stage: thread 0's after its
      // stores read the buffer, so the phase completes only then.
      mbarrier_arrive(&s.kv_empty);
    } else {
      // RELEASE (K/V buffer) to the producer, one arrival per thread as for the Q stage: every GEMM reading K/V
      // completed at the last visit's warpgroup_wait<0> (or none ran). The next segment's K/V load then overlaps
      // the adds below, which read registers only.
      mbarrier_arrive(&s.kv_empty);
      // Split-head GQA: add this query head's share into the fp32 accumulators in group_head_by_rank order.
      int32_t* turn = plan.dkv_turn(seg_b, seg_head_kv, seg_kv_tile_begin + seg_kv_tile);
      if (p.ordered) {
        // WAIT (dK/dV group order). The head of group rank `group_rank - 1` is the previous unit, i.e. items
        // with earlier tickets (docs/DEADLOCK.md: "Waits across units ... always target the previous unit");
        // all of them were claimed before ours, by running CTAs, and the previous unit's own waits are
        // satisfiable by the same argument, so this spin ends. Every MMA thread acquires for itself.
        PlanScheduler::wait_for_turn(turn, seg_group_rank);
      }
      const int64_t base_row = (int64_t(seg_b) * p.heads_kv + seg_head_kv) * (int64_t(p.num_kv_tiles) * kBlockN) +
                               int64_t(seg_kv_tile_begin + seg_kv_tile) * kBlockN;
      auto add_rows = [&](float* accum, int cols, auto const& acc, auto const& coords) {
        CUTE_UNROLL
        for (int i = 0; i < size(acc); i += 2) {
          red_add_v2(accum + (base_row + get<0>(coords(i))) * cols + get<1>(coords(i)), acc(i), acc(i + 1));
        }
      };
      add_rows(p.dk_accum, kHeadDim, tdKrdK, tdKc);
      add_rows(p.dv_accum, kHeadDimV, tdVrdV, tdVc);
      if (p.ordered) {
        // PUBLISH (dK/dV group order). Each thread fences its adds (fence.acq_rel.gpu), the MMA barrier
        // orders all 256 threads' fences before thread 0's release, and release is cumulative: the next
        // rank's acquire observes all of them.
        fence_acq_rel_gpu();
        mma_barrier(kBarMma);
        if (thread == 0) PlanScheduler::publish(turn, seg_group_rank);
      }
    }
    if (seg_split_dkv && seg_end_of_item) {
      // The item's dK/dV waits are all satisfied and its adds released: tell the producer's claim rule. The
      // barrier makes "done" mean all 256 threads.
      mma_barrier(kBarMma);
      if (thread == 0) atomicAdd(&s.items_mma_done, 1);
    }
  }

  // The follower's arrival after its last turn, taken here so that no arrival is left pending at exit.
  if constexpr (Config::kStaggered) {
    if (leader) sync_on(kBarLeaderTurn);
  }
  // No more work: an exit record in each staging buffer, for the store warp that drains it (it drains its
  // buffer in order, so it finishes every earlier add before it reads this record and exits).
  for (int i = 0; i < kDqStages; ++i) {
    watchdog_wait(&s.dq_empty[dq_stage], dq_phase ^ 1, kSiteDqEmpty);
    if (thread == 0) s.handoff[dq_stage].accumulator = -1;
    mbarrier_arrive(&s.dq_full[dq_stage]);
    next_dq_stage();
  }
}

template <class Config>
__global__ void __launch_bounds__(Config::kThreads, 1)
    backward_kernel(CUTE_GRID_CONSTANT BwdKernelParams<Config> const P) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // SW128 tiles need 1024-byte alignment; the host asked for 1 KB of slack where it fits (smem_has_slack).
  // The offset is added to smem_raw itself (not through an integer) so that the compiler still knows every
  // pointer derived from `s` is in shared memory and emits shared loads (LDS) instead of generic ones.
  if constexpr (!smem_has_slack<Config>()) {
    // No slack to align up into (smem_has_slack): a misaligned base ends the kernel as a failed wait does
    // (watchdog_wait: the invalid address names the site), never with shifted tiles. (A printf here made ptxas
    // compile the whole kernel 20% slower.)
    if ((smem_addr(smem_raw) & 1023u) != 0) {
      *reinterpret_cast<volatile uint32_t*>(uintptr_t(kSiteSmemAlignment + 1) * 256u) = 0;
      __trap();
    }
  }
  auto& s = *reinterpret_cast<BwdSmem<Config>*>(smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u));
  const int warp = cutlass::canonical_warp_idx_sync();
  const int warpgroup = cutlass::canonical_warp_group_idx();

  if (threadIdx.x == 0) {
    s.waits_done = 0;
    s.items_mma_done = 0;
    mbarrier_init(&s.kv_full, 1);  // the producer's arrive(_expect_tx)
    mbarrier_init(&s.kv_empty, Config::kMmaThreads);
    for (int i = 0; i < Config::kQStages; ++i) {
      mbarrier_init(&s.q_full[i], 1);
      mbarrier_init(&s.q_empty[i], Config::kMmaThreads);
    }
    for (int i = 0; i < Config::kDqStages; ++i) {
      mbarrier_init(&s.dq_full[i], Config::kMmaThreads);  // every MMA thread
      mbarrier_init(&s.dq_empty[i], 32);                  // every lane of its store warp
    }
    mbarrier_fence_init();  // make the initialised barriers visible to the other threads and the TMA unit
  }
  // The only full-CTA barrier: no thread touches a barrier or counter before it is initialised.
  __syncthreads();
  // WAIT (preprocess). This kernel is the preprocess grid's programmatic dependent (bwd_launch.cuh): its CTAs may
  // start while that grid still runs, and everything from here on reads what it wrote (delta, LSE2, the zeroed
  // counters and accumulators). It ends: this kernel was launched only after every preprocess block had started
  // (griddepcontrol.launch_dependents, executed first by each), and those blocks wait for nothing.
  griddepcontrol_wait();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Config::kProducerRegisters>();
    if (warp == 0) {
      if (cute::elect_one_sync()) {
        cute::prefetch_tma_descriptor(P.tma_q.get_tma_descriptor());
        cute::prefetch_tma_descriptor(P.tma_do.get_tma_descriptor());
        cute::prefetch_tma_descriptor(P.tma_k.get_tma_descriptor());
        cute::prefetch_tma_descriptor(P.tma_v.get_tma_descriptor());
        produce(P, s);
      }
    } else if (warp <= Config::kStoreWarps) {
      store_warp_loop<Config::kBlockM, Config::kHeadDim, BwdSmem<Config>>(P.base, s, warp - 1);
    }
    // Warp 3 exits; warp 0's other lanes exit (nothing after this waits for them).
  } else {
    cutlass::arch::warpgroup_reg_alloc<Config::kMmaRegisters>();
    mma_warpgroups(P, s, int(threadIdx.x) - 128);
  }
}

}  // namespace dash::hopper::bwd
