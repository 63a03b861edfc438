// SPDX-License-Identifier: Apache-2.0
// hopper/fwd/fwd_kernel.cuh — the Hopper (sm_90a) attention forward kernel: O = softmax(Q K^T * scale) V, LSE.
//
// A work tile is one 128-row Q tile of one (batch, query head). The grid is persistent (at most one CTA per SM;
// one fits per SM) and CTAs take work tiles dynamically: CTA c starts with tile c, then each takes the next
// untaken index from a global counter (fwd_next_tile). Three warpgroups:
//   warpgroup 0 (producer): one thread takes the tiles and issues TMA loads — each tile's Q, then its K and V
//     tiles through a kStages-deep ring of shared-memory buffers guarded by mbarriers (full: data landed;
//     empty: all consumer warps finished reading). It announces each tile to the consumers through shared
//     memory with the Q load. The ring runs on across work tiles, so the next tile's Q, K and V load while the
//     consumers finish the current one; Q has kQStages buffers (two in the short-row kernel: fwd_config.cuh).
//     It keeps 24 registers (setmaxnreg) and hands the rest on.
//   warpgroups 1.. (consumers: 2, or 3 at head dim 64, from the kernel table): each owns 64 query rows. Per KV
//     tile: S = Q K^T (wgmma, both operands in shared memory), mask, online softmax in fp32 registers, P ->
//     bf16/fp16 in registers, O += P V (wgmma with P from registers). 240 registers each (160 with three).
//
// Overlap. Inside a warpgroup, iteration j issues S_{j+1} = Q K_{j+1}^T and O += P_j V_j back to back and
// then runs the softmax of S_{j+1} while O += P_j V_j is still on the tensor cores. Between the consumer
// warpgroups, named barriers pass a "turn" round them so their GEMM issues take turns: one warpgroup's softmax
// runs while the others' GEMMs occupy the tensor cores.
//
// KV tiles are visited from the last to the first, so the tiles that need a mask (the key-length boundary
// and the causal diagonal or a window's right edge) come first and the rest run mask-free, but for a
// window's left edge at the end. Tiles that no row of the Q tile can see are never loaded. Out-of-range rows
// and keys: TMA zero-fills loads past the tensor ends, keys >= seqlen_k are masked, and the TMA store of O
// drops rows >= seqlen_q.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>

#include "hopper/fwd/fwd_config.cuh"
#include "hopper/fwd/fwd_softmax.cuh"
#include "hopper/fwd/fwd_tile_order.hpp"
#include "hopper/ptx.cuh"  // L2Hint
#include "hopper/sync.cuh"
#include "hopper/varlen.cuh"
#include "hopper/warpgroup_mma.cuh"

namespace dash::hopper::fwd {

// Hardware named-barrier ids (0 is __syncthreads).
enum FwdNamedBarrier : uint32_t {
  kBarrierTurnWarpgroup0 = 1,      // + w: consumer warpgroup w may issue its GEMMs (up to 3 ids)
  kBarrierEpilogueWarpgroup0 = 4,  // + w: warpgroup w's epilogue: its O buffer is free, then written (up to 3 ids)
};

// The KV tiles one Q tile visits: n in [begin, end), in decreasing order. A tile needs the mask when some row of
// the Q tile does not see all its keys: n >= first_masked (keys past seqlen_k or right of a row's band) or
// n < left_masked_end (keys left of a row's band: sliding windows).
struct KvTileRange {
  int begin, end;
  int first_masked, left_masked_end;

  __device__ __forceinline__ int count() const { return end - begin; }
  __device__ __forceinline__ bool needs_mask(int n) const { return n >= first_masked || n < left_masked_end; }
};

// Work-tile index -> (Q tile, head, batch). Fixed length: the order of hopper/fwd/fwd_tile_order.hpp (pair by
// pair, Q tiles fastest; causal: longest first, the last pairs interleaved). A varlen pack lists its sequences
// longest first, each with its heads' Q tiles in the same order (the shortest sequences end the grid).
template <bool kVarlen, class Config>
__device__ __forceinline__ FwdTile fwd_tile_at(FwdParams<Config> const& params, int index) {
  FwdTile tile{index, 0, 0, 0, 0, 0, params.mask};
  if (index >= params.num_work_tiles) return tile;
  if constexpr (!kVarlen) {
    FwdTilePlace const place = fwd_tile_place(params.order, index);
    tile.m_block = place.m_block;
    tile.head_q = place.pair % params.heads_q;
    tile.batch = place.pair / params.heads_q;
    return tile;
  } else {
    dash_pack_sequence const& seq = params.sequences[pack_position<&dash_pack_sequence::fwd_tile_begin>(
        params.sequences, params.tile_chunks, params.num_sequences, index)];
    tile.batch = seq.sequence;
    tile.mask = params.mask.for_lengths(seq.seqlen_q, seq.seqlen_k);
    tile.q_row = seq.q_row;
    tile.k_row = seq.k_row;
    int const m_blocks = (seq.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
    int const local = index - seq.fwd_tile_begin;
    int const m = local % m_blocks;
    tile.m_block = params.mask.causal() ? m_blocks - 1 - m : m;
    tile.head_q = local / m_blocks;
    return tile;
  }
}

// The record slot of the tile announced with Q buffer `q.index` in phase `q.phase`: the tile's number % kTileSlots,
// the same for the producer and the consumers.
template <class Config>
__device__ __forceinline__ uint32_t tile_record_slot(PipelineState<Config::kQStages> const& q) {
  return uint32_t(q.index) + Config::kQStages * q.phase;
}

template <class Config>
__device__ __forceinline__ KvTileRange kv_tile_range(AttentionMask const& mask, int m_block) {
  constexpr int kBlockM = Config::kBlockM;
  constexpr int kBlockN = Config::kBlockN;
  // A row's band [key_begin, key_end) moves right with the row: the tile's first real row has the leftmost
  // begin and end, its last real row the rightmost.
  int const first_row = m_block * kBlockM;
  int const last_row = min(mask.seqlen_q, first_row + kBlockM) - 1;
  int const keys_end = mask.key_end(last_row);  // <= 0 when no row sees a key
  KvTileRange range;
  range.begin = mask.key_begin(first_row) / kBlockN;
  range.end = keys_end <= 0 ? 0 : (keys_end + kBlockN - 1) / kBlockN;
  if (range.end < range.begin) range.end = range.begin;  // no row sees a key
  range.first_masked = max(0, mask.key_end(first_row)) / kBlockN;  // includes a partial last tile of the keys
  range.left_masked_end = (mask.key_begin(last_row) + kBlockN - 1) / kBlockN;
  return range;
}

// The index of the work tile this CTA takes after `current`. The counter (zeroed on the stream before the launch)
// hands out the indices after the first gridDim.x, which CTA c takes as c without asking. A CTA asks while it
// starts its current tile, so the answer's latency hides behind that tile's loads. Taking tiles in the order CTAs
// ask keeps causal tiles longest-first across the grid, and a CTA that starts late (its SM held by another
// stream's kernel) finds the tiles taken and exits instead of holding up the others. Which CTA computes a tile
// does not change its bits.
__device__ __forceinline__ int fwd_next_tile(int32_t* tile_counter) {
  return int(gridDim.x) + atomicAdd(tile_counter, 1);
}

// ------------------------------------------------------------------------------------------------------------
// Producer: a single thread, all work tiles of the CTA.
// ------------------------------------------------------------------------------------------------------------
template <bool kVarlen, class Config>
__device__ void fwd_produce(FwdParams<Config> const& params, FwdSharedStorage<Config>& smem) {
  using namespace cute;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr int kHeadDimV = Config::kHeadDimV;

  Tensor mQ = params.tma_q.get_tma_tensor(params.shape_q);
  Tensor mK = params.tma_k.get_tma_tensor(params.shape_k);
  Tensor mV = params.tma_v.get_tma_tensor(params.shape_v);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Config::SmemLayoutQStages{});  // (.., .., stage)
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Config::SmemLayoutK{});  // (.., .., stage)
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename Config::SmemLayoutV{});

  constexpr bool varlen = kVarlen;
  PipelineState<Config::kStages> stage;  // runs on across work tiles
  PipelineState<Config::kQStages> q_state;  // the next tile's Q buffer; runs on across work tiles
  // The next tile to announce, decoded ahead (below). Kept in shared memory, and the current tile read back from
  // its announced slot where used: the producer has 24 registers.
  smem.tile_ahead = fwd_tile_at<kVarlen>(params, blockIdx.x);
  for (;;) {
    // A Q buffer is overwritten only after every consumer warp finished the last S GEMM of the tile that used it
    // before (kQStages tiles ago) and read its record (on a buffer's first use the wait returns at once: a fresh
    // mbarrier counts its phase before 0 as completed).
    int const q_stage = q_state.index;
    mbarrier_wait(&smem.q_empty[q_stage], q_state.phase ^ 1u);
    // Announce the tile. Its record is visible to every consumer that completes the q_full phase: the arrival
    // below releases this write. An index past the end tells the consumers to stop. The slot last held the record
    // of the tile 2 x kQStages before: the wait above (the consumers' release of the tile kQStages before) comes
    // after they finished every earlier tile, epilogues included, so no consumer still reads the slot.
    uint32_t const slot = tile_record_slot<Config>(q_state);
    q_state.advance();
    smem.tile[slot] = smem.tile_ahead;
    FwdTile volatile const& tile = smem.tile[slot];
    if (tile.index >= params.num_work_tiles) {
      mbarrier_arrive(&smem.q_full[q_stage]);
      break;
    }
    int const next = fwd_next_tile(params.tile_counter);
    // From the producer's own copy (not yet overwritten by the next tile's decoding, below).
    KvTileRange const range = kv_tile_range<Config>(smem.tile_ahead.mask, smem.tile_ahead.m_block);
    if (range.count() == 0) {  // the consumers write O = 0, LSE = -inf: no data to load
      mbarrier_arrive(&smem.q_full[q_stage]);
      smem.tile_ahead = fwd_tile_at<kVarlen>(params, next);
      continue;
    }

    int const head_kv = tile.head_q / params.group_size;
    BoxRows const q_box = box_rows(varlen, tile.batch, tile.q_row, tile.m_block * kBlockM, tile.mask.seqlen_q);
    Tensor gQ = local_tile(domain_offset(make_coord(q_box.x, _0{}), mQ(_, _, tile.head_q, q_box.y, q_box.z)),
                           Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(_0{}, _0{}));  // (kBlockM, kHeadDim)
    auto [tQgQ, tQsQ] = tma_partition(params.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                      group_modes<0, 2>(gQ));
    // The KV tile n of this sequence (cols: K's or V's head dim, an Int): rows past seqlen_k are zero-filled (and
    // masked by the consumers).
    auto kv_tile = [&](auto const& mT, int n, auto cols) {
      BoxRows const box = box_rows(varlen, tile.batch, tile.k_row, n * kBlockN, tile.mask.seqlen_k);
      return local_tile(domain_offset(make_coord(box.x, _0{}), mT(_, _, head_kv, box.y, box.z)),
                        Shape<Int<kBlockN>, decltype(cols)>{}, make_coord(_0{}, _0{}));
    };

    // The full barrier completes when the arrival (this thread) and the expected bytes (the TMA) are both in.
    // L2 priorities: a Q tile is read once (EVICT_FIRST), a K/V tile by every Q tile of its head (EVICT_LAST).
    mbarrier_arrive_expect_tx(&smem.q_full[q_stage], Config::kQTileBytes);
    copy(params.tma_q.with(smem.q_full[q_stage], 0, L2Hint::EVICT_FIRST), tQgQ, tQsQ(_, q_stage));

    for (int n = range.end - 1; n >= range.begin; --n) {
      auto [tKgK, tKsK] = tma_partition(params.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                        group_modes<0, 2>(kv_tile(mK, n, Int<kHeadDim>{})));
      auto [tVgV, tVsV] = tma_partition(params.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                        group_modes<0, 2>(kv_tile(mV, n, Int<kHeadDimV>{})));
      // Reuse a K buffer only after all consumer warps released it (their S GEMM reading it completed).
      mbarrier_wait(&smem.k_empty[stage.index], stage.phase ^ 1u);
      mbarrier_arrive_expect_tx(&smem.k_full[stage.index], Config::kKTileBytes);
      copy(params.tma_k.with(smem.k_full[stage.index], 0, L2Hint::EVICT_LAST), tKgK, tKsK(_, stage.index));
      // Likewise V, released after the O += P V GEMM that read it completed.
      mbarrier_wait(&smem.v_empty[stage.index], stage.phase ^ 1u);
      mbarrier_arrive_expect_tx(&smem.v_full[stage.index], Config::kVTileBytes);
      copy(params.tma_v.with(smem.v_full[stage.index], 0, L2Hint::EVICT_LAST), tVgV, tVsV(_, stage.index));
      stage.advance();
      // The next tile is decoded once this one's first K/V loads are out: a varlen look-up reads global memory,
      // and here its latency hides behind the loads in flight instead of delaying them.
      if (n == range.end - 1) smem.tile_ahead = fwd_tile_at<kVarlen>(params, next);
    }
  }
}

// ------------------------------------------------------------------------------------------------------------
// Consumers: 128 threads per warpgroup, `warpgroup` 0.. (rows 64 * warpgroup ..), `thread` numbered among consumers.
// ------------------------------------------------------------------------------------------------------------
template <bool kVarlen, class Config>
__device__ void fwd_consume(FwdParams<Config> const& params, FwdSharedStorage<Config>& smem, int warpgroup,
                            int thread) {
  using namespace cute;
  using Element = typename Config::Element;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kHeadDimV = Config::kHeadDimV;
  constexpr int kStages = Config::kStages;
  constexpr int kWarpgroups = Config::kConsumerWarpgroups;
  constexpr uint32_t kTurnThreads = 256;  // a turn: the warpgroup that takes it and the one that passes it
  bool const lane_leader = (threadIdx.x % 32) == 0;
  bool const store_leader = (thread % 128) == 0;  // issues this warpgroup's TMA stores of O

  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename Config::SmemLayoutQStages{});  // (.., .., stage)
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename Config::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename Config::SmemLayoutVt{});
  // This warpgroup's buffer for its 64 output rows, or for one column block of them at a time (kOBlocks > 1).
  Tensor sO = make_tensor(make_smem_ptr(smem.o.data() + warpgroup * cosize_v<typename Config::SmemLayoutOBlock>),
                          typename Config::SmemLayoutOBlock{});

  typename Config::MmaQK mma_qk;
  typename Config::MmaPV mma_pv;
  // Accumulator partitions per thread; shared-memory operands (wgmma descriptors) per warpgroup, sliced by the
  // warp-uniform `warpgroup` (a shuffle from lane 0, canonical_warp_group_idx) so that ptxas keeps the
  // descriptors in uniform registers (sliced by the thread index they went through vector registers and R2UR).
  auto thr_qk = mma_qk.get_thread_slice(thread);
  auto thr_pv = mma_pv.get_thread_slice(thread);
  auto wg_qk = mma_qk.get_slice(warpgroup * 128);
  auto wg_pv = mma_pv.get_slice(warpgroup * 128);
  Tensor tSrQ = wg_qk.partition_fragment_A(sQ);   // wgmma descriptors of this warpgroup's 64 Q rows
  Tensor tSrK = wg_qk.partition_fragment_B(sK);   // (.., .., .., stage)
  Tensor tOrVt = wg_pv.partition_fragment_B(sVt);  // (.., .., .., stage)

  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});  // scores, then P in fp32
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<kBlockM>, Int<kHeadDimV>>{});  // output accumulator
  Tensor tOrP = make_tensor<Element>(tSrS.layout());                                  // P in Element
  Tensor tOrP_operand = make_tensor(tOrP.data(), accumulator_as_a_operand(tSrS.layout()));

  // (row, column) views of the accumulators and of each register's coordinate in the tile.
  Tensor scores = make_tensor(tSrS.data(), accumulator_rows_cols(tSrS.layout()));
  Tensor output = make_tensor(tOrO.data(), accumulator_rows_cols(tOrO.layout()));
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor score_coords = make_tensor(tScS.data(), accumulator_rows_cols(tScS.layout()));
  // The same for thread 0: compile-time constants (apply_mask).
  Tensor tScS0 = mma_qk.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor score_coords0 = make_tensor(tScS0.data(), accumulator_rows_cols(tScS0.layout()));
  Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
  Tensor output_coords = make_tensor(tOcO.data(), accumulator_rows_cols(tOcO.layout()));
  constexpr int kRows = decltype(size<0>(scores))::value;

  auto smem_store = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, typename Config::MmaPVOBlock{});
  auto thr_store = smem_store.get_thread_slice(thread % 128);
  Tensor tOsO_store = thr_store.partition_D(sO);
  Tensor mO = params.tma_o.get_tma_tensor(params.shape_o);

  // Turns go round WG0, WG1, (WG2,) WG0, ...: each warpgroup waits for its own turn barrier and, after issuing,
  // arrives on the next one's. Per work tile every warpgroup takes range.count() + 1 turns; the last warpgroup
  // gives warpgroup 0 its first turn up front and skips the arrival after its own last turn, so every arrival
  // is matched within the work tile (a wait on a turn therefore ends: the warpgroup before it in the round
  // takes the same turns of the same tile and passes each on).
  int const next_warpgroup = warpgroup + 1 == kWarpgroups ? 0 : warpgroup + 1;
  auto wait_turn = [&] { named_barrier_sync(kBarrierTurnWarpgroup0 + warpgroup, kTurnThreads); };
  auto pass_turn = [&] { named_barrier_arrive(kBarrierTurnWarpgroup0 + next_warpgroup, kTurnThreads); };
  // One arrival per consumer warp (the barriers count kConsumerWarps): every lane of the warp has passed
  // the wgmma wait, so the GEMM that read the buffer is complete.
  auto release = [&](uint64_t* empty_barrier) {
    if (lane_leader) mbarrier_arrive(empty_barrier);
  };

  PipelineState<kStages> k_stage;  // stage of the K tile for the next S GEMM; runs on across work tiles
  PipelineState<kStages> v_stage;  // stage of the V tile for the next O GEMM
  PipelineState<Config::kQStages> q_state;  // as the producer's
  for (;;) {
    int const q_stage = q_state.index;
    uint32_t const slot = tile_record_slot<Config>(q_state);
    Tensor tSrQ_tile = tSrQ(_, _, _, q_stage);  // this tile's Q stage
    // The producer's announcement of the next tile (and its Q, when the tile has keys to visit). Waiting here
    // cannot hang: the producer announces every tile it takes and then one index past the end, and it waits
    // only for the consumers' releases of earlier tiles, which every path below gives.
    mbarrier_wait(&smem.q_full[q_stage], q_state.phase);
    // Fixed length: only the lane that later releases q_empty for its warp reads the index (then passes it on;
    // its own release orders the read before the producer's next write), and the tile follows from the index by
    // arithmetic. Varlen: the record stays in its slot until this warp has released the NEXT tile (see the
    // producer), i.e. for the whole of this tile, so it is read where used instead of held in registers (three
    // warpgroups have 160 each); every read precedes, through the warpgroup's named barriers, the release by its
    // warp's leader that lets the producer rewrite the slot.
    FwdTile fixed_tile;
    if constexpr (!kVarlen) {
      fixed_tile = fwd_tile_at<false>(params, __shfl_sync(0xffffffffu, lane_leader ? smem.tile[slot].index : 0, 0));
    }
    FwdTile const& tile = kVarlen ? smem.tile[slot] : fixed_tile;
    if (tile.index >= params.num_work_tiles) break;
    // The sequence's mask: the kernel parameter itself at fixed length, the record's in a varlen pack, both read in
    // place (a copy made ptxas hoist its fields into registers and spill).
    KvTileRange range;
    if constexpr (kVarlen) {
      range = kv_tile_range<Config>(tile.mask, tile.m_block);
    } else {
      range = kv_tile_range<Config>(params.mask, tile.m_block);
    }
    int const row_base = tile.m_block * kBlockM;
    auto mask_tile = [&](int n) {
      if constexpr (kVarlen) {
        apply_mask(scores, score_coords, score_coords0, row_base, n * kBlockN, tile.mask);
      } else {
        apply_mask(scores, score_coords, score_coords0, row_base, n * kBlockN, params.mask);
      }
    };
    OnlineSoftmax<kRows, Config::kExp2PolyEvery> softmax(params.scale_log2);
    float o_rescale[kRows];
    clear(tOrO);

    if (range.count() == 0) {
      release(&smem.q_empty[q_stage]);  // no S GEMM reads Q: the producer may announce the next tile
    } else {
      if (warpgroup == kWarpgroups - 1) pass_turn();  // warpgroup 0's first turn

      // First KV tile: S only.
      int n = range.end - 1;
      wait_turn();
      mbarrier_wait(&smem.k_full[k_stage.index], k_stage.phase);
      warpgroup_gemm<true, false>(mma_qk, tSrQ_tile, tSrK(_, _, _, k_stage.index), tSrS);
      pass_turn();
      warpgroup_wait<0>();
      release(&smem.k_empty[k_stage.index]);
      k_stage.advance();
      if (n == range.begin) release(&smem.q_empty[q_stage]);  // that was the last S GEMM: the next Q may load
      if (range.needs_mask(n)) mask_tile(n);
      softmax.template update<true>(scores, o_rescale);
      convert_to_element(tOrP, tSrS);

      // Steady state: S for tile n-1 and O += P V for tile n in flight together.
      for (--n; n >= range.begin; --n) {
        wait_turn();
        mbarrier_wait(&smem.k_full[k_stage.index], k_stage.phase);
        warpgroup_gemm<true, false>(mma_qk, tSrQ_tile, tSrK(_, _, _, k_stage.index), tSrS);
        mbarrier_wait(&smem.v_full[v_stage.index], v_stage.phase);
        warpgroup_gemm<false, true>(mma_pv, tOrP_operand, tOrVt(_, _, _, v_stage.index), tOrO);
        pass_turn();
        warpgroup_wait<1>();  // the S GEMM (committed first) is done; O += P V may still run
        // K (and, after the last S GEMM, Q) could be released right here, but is released after the softmax:
        // ptxas issues the wait for O += P V below right after the last mbarrier arrival before it. Released before
        // the softmax, that wait came ahead of all 66 MUFU.EX2s of a head-dim-128 tile, which then no longer
        // overlapped the GEMM; released after it, 26-28 of them come first: +1.5-3.5% at head dims 96-256, +0.3-1.0%
        // at 64 (1-2% slower there while 1 in 8 exponentials ran on the FMA pipe). Arrivals made to depend on the row
        // sums (the wait after every exponential, the conversions all after it) measured 2% slower than the early
        // release (docs/history/kernel-notes-bwd-wgmma.md, 2026-12-03 09:07). The softmax waits on nothing, so the
        // release still precedes this warpgroup's next wait: the producer's wait for the stage ends. (Written as a
        // lambda called below, the form whose SASS was measured; inlined by hand, ptxas schedules the loop
        // differently.)
        auto release_s_operands = [&] {
          release(&smem.k_empty[k_stage.index]);
          k_stage.advance();
          if (n == range.begin) release(&smem.q_empty[q_stage]);
        };
        if (range.needs_mask(n)) mask_tile(n);
        softmax.template update<false>(scores, o_rescale);
        release_s_operands();
        warpgroup_wait<0>();  // O += P V done: O may be rescaled and P overwritten
        release(&smem.v_empty[v_stage.index]);
        v_stage.advance();
        scale_rows(output, o_rescale);
        convert_to_element(tOrP, tSrS);
      }

      // Last KV tile: O += P V only.
      wait_turn();
      mbarrier_wait(&smem.v_full[v_stage.index], v_stage.phase);
      warpgroup_gemm<false, true>(mma_pv, tOrP_operand, tOrVt(_, _, _, v_stage.index), tOrO);
      if (warpgroup != kWarpgroups - 1) pass_turn();
      warpgroup_wait<0>();
      release(&smem.v_empty[v_stage.index]);
      v_stage.advance();
    }

    // ---- epilogue: normalise, write LSE, stage O in shared memory, TMA-store it ----
    float inv_sum[kRows], lse[kRows];
    softmax.finalize(params.softmax_scale, inv_sum, lse);
    scale_rows(output, inv_sum);
    if (get<1>(output_coords(0, 0)) == 0) {  // the lane of each quad that holds column 0 writes the row's LSE
      float* lse_head = params.lse + (kVarlen
                                          ? int64_t(tile.head_q) * params.total_q + tile.q_row
                                          : (int64_t(tile.batch) * params.heads_q + tile.head_q) * tile.mask.seqlen_q);
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        int const row = row_base + get<0>(output_coords(r, 0));
        if (row < tile.mask.seqlen_q) lse_head[row] = lse[r];
      }
    }
    Tensor rO = make_tensor<Element>(tOrO.layout());
    convert_to_element(rO, tOrO);

    // Column block b of this warpgroup's O (all of it when kOBlocks is 1): its values are contiguous in the
    // accumulator (kOBlockCols / 2 per thread from value b * kOBlockCols / 2, see MmaPVOBlock), laid out as a
    // 64 x kOBlockCols accumulator; the host-only layout check (tests/gpu/bwd_layout_check.cu) verifies it.
    constexpr int kOBlockCols = Config::kOBlockCols;
    constexpr int kRowsO = Config::kRowsPerWarpgroup;
    auto const block_layout =
        partition_fragment_C(typename Config::MmaPVOBlock{}, Shape<Int<kRowsO>, Int<kOBlockCols>>{}).layout();
    static_assert(decltype(size(block_layout))::value * Config::kOBlocks == decltype(size(rO))::value,
                  "the blocks partition the accumulator");
    CUTE_UNROLL
    for (int b = 0; b < Config::kOBlocks; ++b) {
      Tensor o_block = make_tensor(rO.data() + b * (kOBlockCols / 2), block_layout);
      // The previous TMA store (of this tile's previous block, or of the previous work tile) must have read sO
      // before it is overwritten.
      if (store_leader) tma_store_wait<0>();
      named_barrier_sync(kBarrierEpilogueWarpgroup0 + warpgroup, 128);
      copy(smem_store, thr_store.retile_S(o_block), tOsO_store);
      // stmatrix writes through the generic proxy, the TMA store reads through the async proxy: each writer
      // fences, then the warpgroup barrier guarantees all 64 rows are written before the store is issued.
      cutlass::arch::fence_view_async_shared();
      named_barrier_sync(kBarrierEpilogueWarpgroup0 + warpgroup, 128);
      if (store_leader) {
        // Rows past the sequence's end lie outside the box's bounds: the TMA store drops them.
        BoxRows const box = box_rows(kVarlen, tile.batch, tile.q_row, row_base + warpgroup * kRowsO,
                                     tile.mask.seqlen_q);
        Tensor gO = local_tile(domain_offset(make_coord(box.x, _0{}), mO(_, _, tile.head_q, box.y, box.z)),
                               Shape<Int<kRowsO>, Int<kOBlockCols>>{}, make_coord(_0{}, b));
        auto [tOgO, tOsO] = tma_partition(params.tma_o, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sO),
                                          group_modes<0, 2>(gO));
        copy(params.tma_o, tOsO, tOgO);
        tma_store_arrive();
      }
    }
    q_state.advance();
  }
  // The CTA may exit right after: keep its shared memory alive until the last TMA store has read it.
  if (store_leader) tma_store_wait<0>();
}

// kVarlen: a packed varlen batch (params.sequences set). A template parameter because the fixed-length kernel at
// three warpgroups has no register to spare for a per-tile sequence record (it spilled with one).
template <class Config, bool kVarlen>
__global__ void __launch_bounds__(Config::kThreads, 1)
    forward_kernel(CUTE_GRID_CONSTANT FwdParams<Config> const params) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // 128-byte swizzled tiles need 1024-byte alignment; the host asked for 1 KB of slack.
  auto& smem = *reinterpret_cast<FwdSharedStorage<Config>*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  int const warp = cutlass::canonical_warp_idx_sync();
  int const warpgroup = cutlass::canonical_warp_group_idx();

  if (warp == 0 && cute::elect_one_sync()) {
    CUTE_UNROLL
    for (int s = 0; s < Config::kQStages; ++s) {
      mbarrier_init(&smem.q_full[s], 1);  // the producer's arrive_expect_tx
      mbarrier_init(&smem.q_empty[s], Config::kConsumerWarps);
    }
    CUTE_UNROLL
    for (int s = 0; s < Config::kStages; ++s) {
      mbarrier_init(&smem.k_full[s], 1);
      mbarrier_init(&smem.v_full[s], 1);
      mbarrier_init(&smem.k_empty[s], Config::kConsumerWarps);
      mbarrier_init(&smem.v_empty[s], Config::kConsumerWarps);
    }
    mbarrier_fence_init();  // make the initialised barriers visible to the TMA unit
  }
  // No thread may touch a barrier before it is initialised.
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Config::kProducerRegisters>();
    if (warp == 0 && cute::elect_one_sync()) {
      cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
      fwd_produce<kVarlen>(params, smem);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Config::kConsumerRegisters>();
    fwd_consume<kVarlen>(params, smem, warpgroup - 1, int(threadIdx.x) - 128);
  }
}

}  // namespace dash::hopper::fwd
