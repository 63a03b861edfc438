// SPDX-License-Identifier: Apache-2.0
// hopper/bwd/bwd_dq_handoff.cuh — how a visit's fp32 dQ partial leaves the CTA: the MMA warpgroups stage it in one
// of kDqStages shared-memory buffers with a hand-off record; the buffer's store warp waits for the partial's turn
// in its accumulator's order (ordered adds: runs_ordered), adds the whole tile with ONE bulk reduce-add issued by
// one lane, and publishes the next turn. The accumulator tile has the staging layout (DqStaging), so the copy is a
// flat 1-D range; bwd_convert undoes the swizzle. (Before the bulk hand-off, 32 lanes issued 2048 16-byte
// reductions per tile and fenced them: docs/history/kernel-notes-bwd-wgmma.md.)
#pragma once

#include <cstdint>

#include <cute/numeric/math.hpp>  // log_2

#include "bwd/bwd_params.h"
#include "hopper/bwd/bwd_plan_scheduler.cuh"
#include "hopper/ptx.cuh"
#include "hopper/sync.cuh"

namespace dash::hopper::bwd {

// What the MMA warpgroups hand to the store warp with each dQ staging buffer.
struct DqHandoff {
  int32_t accumulator;  // (batch * heads_q + head) * num_q_tiles + q_tile; -1 = no more work
  int32_t rank;         // dq_rank
  int32_t flags;        // dash_visit_flags
  int32_t ticket;
  int32_t visit;        // index in the unit's visit table (order log only)
};

// The fp32 dQ staging tile of kRows x kCols (and, copied flat, each accumulator tile in global memory): column
// blocks of kBlockCols floats, each block row-major, its 4-float (16-byte) chunks XOR-swizzled by the row's two low
// bits, so that the MMA threads' 8-byte stores are free of bank conflicts. A warp's store of one register pair
// writes 8 rows x 2 adjacent chunks, 16 lanes (4 rows, 128 bytes) per shared-memory wavefront: in blocks of 8 or
// more chunks the row bits go to chunk bits 1-2 (bit 0 tells the pair's two chunks apart), in 16-column blocks (4
// chunks, two rows per 32 banks) to bits 0-1. (Swizzling chunk bits 0-2 by row & 7 made every store 2-way
// conflicted: ncu, 4 wavefronts per STS.64 instead of 2.) A power-of-two head dim up to 128 is one block (64,
// 128). Otherwise a block is the largest power of two dividing half the row (16 at D = 96, 32 at 192, 128 at 256):
// one warpgroup's dQ columns (kCols / 2) are then whole blocks, which CuTe needs to partition the staging tile like
// the accumulator.
template <int kRows, int kCols>
struct DqStaging {
  static constexpr bool kPowerOfTwo = (kCols & (kCols - 1)) == 0;
  static constexpr int kBlockCols = kPowerOfTwo && kCols <= 128 ? kCols : ((kCols / 2) & -(kCols / 2));
  static constexpr int kBlocks = kCols / kBlockCols;
  static constexpr int kLog2BlockCols = cute::log_2(static_cast<unsigned>(kBlockCols));
  static constexpr int kSwizzleBits = 2;                          // the row bits XORed into the chunk index ...
  static constexpr int kSwizzleShift = kBlockCols >= 32 ? 1 : 0;  // ... at chunk bits [shift, shift + 2), i.e.
  static constexpr int kSwizzleBase = 2 + kSwizzleShift;          // ... float-offset bits [base, base + 2)
  static_assert(kBlockCols >= 16 && kBlockCols <= 128, "column blocks of 16 to 128 floats (4 to 32 swizzled chunks)");
  // Element offset of (row, col).
  __host__ __device__ __forceinline__ static int offset(int row, int col) {
    const int in_block = col % kBlockCols;
    const int row_bits = row & ((1 << kSwizzleBits) - 1);
    return col / kBlockCols * (kRows * kBlockCols) + row * kBlockCols +
           (((in_block >> 2) ^ (row_bits << kSwizzleShift)) << 2) + (in_block & 3);
  }
};

// The loop of store warp `store_warp`: it drains staging buffer `store_warp` (of Smem::kDqStages: with two, one
// buffer's hand-off - turn wait, bulk add, completion, release - overlaps the other's), in the order the MMA
// warpgroups filled it (their visit order). `Smem` has the members dq, handoff, dq_full, dq_empty and waits_done.
// The MMA threads fence.proxy.async their staging writes before their dq_full arrival (the bulk copy reads shared
// memory through the async proxy).
template <int kBlockM, int kHeadDim, class Smem>
__device__ __forceinline__ void store_warp_loop(const BwdParams& p, Smem& s, int store_warp) {
  constexpr int kTileFloats = kBlockM * kHeadDim;
  constexpr uint32_t kTileBytes = kTileFloats * sizeof(float);
  static_assert(kTileBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
  const PlanScheduler plan{p};
  const int lane = threadIdx.x % 32;
  const int stage = store_warp;
  for (uint32_t phase = 0;; phase ^= 1u) {
    // WAIT (staged partial): the MMA threads' arrivals on dq_full release the staged data and the hand-off
    // record; this wait acquires them. They fill the buffer once per visit, and their own waits end
    // (docs/DEADLOCK.md), so this one does.
    mbarrier_wait(&s.dq_full[stage], phase);
    const DqHandoff h = s.handoff[stage];
    if (h.accumulator < 0) break;  // no more work: the MMA threads keep no further handshake pending

    if (lane == 0) {
      float* accum = p.dq_accum + int64_t(h.accumulator) * kTileFloats;
      int32_t* turn = plan.dq_turn(h.accumulator);
      if (p.ordered) {
        // WAIT (dQ order). The visit of rank h.rank - 1 of this accumulator has provably been claimed by a
        // running CTA (docs/DEADLOCK.md, "Why that suffices": with the claim rule and P >= the largest wave, or
        // with a backward-only plan, every awaited visit belongs to a claimed item whose CTA is running and
        // whose own earlier waits are satisfiable), so this spin ends. Rank 0 does not wait: its counter is 0
        // (zeroed before the launch). The proxy fence extends the acquire's order to this thread's async-proxy
        // bulk operation below (generic -> async proxy), which reads and writes the same accumulator.
        PlanScheduler::wait_for_turn(turn, h.rank);
        fence_proxy_async_global();
        if (p.order_log != nullptr) {
          p.order_log[int64_t(h.accumulator) * p.num_kv_tiles + h.rank] = (int64_t(h.ticket) << 32) | uint32_t(h.visit);
        }
        // This visit's wait is satisfied: the claim rule counts these (claim the next ticket only once every
        // wait of the visits handed off so far is satisfied).
        atomicAdd(&s.waits_done, 1);
      }
      // The first contribution (ordered adds only) stores, so the accumulator needs no memset; every later one
      // adds. Unordered, all add (the accumulator was zeroed before the launch).
      // EVICT_LAST: the accumulator tile takes one add per KV tile of its sequence, from any CTA.
      if (p.ordered && (h.flags & DASH_VISIT_FIRST)) {
        bulk_copy_s2g(accum, s.dq[stage], kTileBytes, L2Hint::EVICT_LAST);
      } else {
        bulk_reduce_add_s2g(accum, s.dq[stage], kTileBytes, L2Hint::EVICT_LAST);
      }
      bulk_commit_group();
      // The staging buffer may be refilled once the bulk operation has read it (.read: its global writes may
      // still be in flight; they are awaited below before the release).
      bulk_wait_group_read_all();
    }
    // Lane 0's wait above happens before every lane's arrival (warp barrier); the MMA threads acquire the
    // arrivals before they overwrite the buffer.
    __syncwarp();
    mbarrier_arrive(&s.dq_empty[stage]);
    if (lane == 0 && p.ordered) {
      // PUBLISH (dQ order). wait_group 0 (NOT .read: the FA3 hazard in shared/docs/fa3-and-dash-fork-notes.md) returns once
      // the bulk operation is complete: its writes to the accumulator are performed and visible to this thread.
      // The proxy fence orders those async-proxy writes before this thread's later generic operations, and the
      // release is cumulative: a CTA that acquires the new value also observes the writes.
      bulk_wait_group_all();
      fence_proxy_async_global();
      PlanScheduler::publish(plan.dq_turn(h.accumulator), h.rank);
    }
  }
  // No bulk operation may outlive the CTA (non-deterministic mode only waited for the reads).
  if (lane == 0) bulk_wait_group_all();
}

}  // namespace dash::hopper::bwd
