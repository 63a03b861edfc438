// SPDX-License-Identifier: Apache-2.0
// hopper/bwd/bwd_plan_scheduler.cuh — the plan as the backward kernel walks it (dash/plan_format.h), shaped like
// CUTLASS's tile schedulers: CLAIM the next work item (a ticket of one global counter, decoded into the plan's
// item and its unit's coordinates), walk its segments and visits in the plan's order, WAIT FOR THE TURN of an
// accumulator (dQ, or dK/dV for split-head GQA) and PUBLISH the next turn. The kernel holds the math; every
// order it follows comes through here from the plan's tables.
//
// Why the waits end (the progress argument): docs/DEADLOCK.md. In short, a contribution only ever waits for one
// of a claimed item, whose CTA is running (with the claim rule: a CTA claims its next ticket only when every
// wait of its current item is satisfied), and tickets are claimed in order.
#pragma once

#include <cstdint>

#include "bwd/bwd_params.h"
#include "dash/plan_format.h"
#include "hopper/ptx.cuh"
#include "hopper/varlen.cuh"

namespace dash::hopper::bwd {

using kernels::bwd::BwdParams;

// What a claimed ticket names: the plan item and its unit's coordinates (batch, heads, group rank), decoded
// with plan_format.h's decoder (the simulator and the CPU backend use it too), the unit template's tables, and the
// sequence: its lengths, first rows and first global tiles (0 for fixed-length batches, whose tensors address the
// batch entry; in a varlen pack every unit is of a batch-1 problem, so unit.batch is 0).
struct TicketWork {
  int32_t ticket;
  dash_item item;
  dash_unit_coords unit;
  const dash_segment* segments;
  const dash_visit* visits;
  int32_t gqa_mode;
  int32_t split_dkv;
  int32_t seqlen_q, seqlen_k;
  int32_t q_row, k_row;
  int32_t q_tile_begin, kv_tile_begin;
};

// Spins until *counter == expected. Every lane that calls it performs its own acquire load, so each lane's later
// memory operations are ordered after the releasing thread's prior writes (no reliance on the warp barrier's
// cumulativity on the acquire side). Backs off with __nanosleep to spare the L2, to at most 128 ns: at ~500
// TFLOP/s a visit takes ~2.6 us per SM and a shift-type schedule gives each hand-off about one visit of slack,
// so every 100 ns between the release and its detection is on the critical path (one poll is itself an L2
// round trip; at most two warps per SM poll).
__device__ __forceinline__ void wait_counter_equals(const int32_t* counter, int32_t expected) {
  uint32_t backoff = 32;
  while (ld_acquire_gpu(counter) != expected) {
    __nanosleep(backoff);
    if (backoff < 128) backoff *= 2;
  }
}

struct PlanScheduler {
  BwdParams const& p;

  // CLAIM: the next ticket of the global counter (tickets go out in order), decoded; false once the plan is
  // exhausted (every CTA's last claim lands past the end: the counter has headroom for num_ctas of them).
  __device__ __forceinline__ bool claim(TicketWork& work) const {
    const int ticket = atomicAdd(p.ticket_counter, 1);
    if (ticket >= p.num_tickets) return false;
    work.ticket = ticket;
    if (p.sequences == nullptr) {
      decode(p.fixed, ticket, work);
      work.seqlen_q = p.mask.seqlen_q;
      work.seqlen_k = p.mask.seqlen_k;
      work.q_row = work.k_row = work.q_tile_begin = work.kv_tile_begin = 0;
      return true;
    }
    // Varlen: the sequence owning the ticket, then its template's item as for a batch-1 problem.
    const dash_pack_sequence& seq = p.sequences[pack_position<&dash_pack_sequence::ticket_begin>(
        p.sequences, p.ticket_chunks, p.num_sequences, ticket)];
    decode(p.templates[seq.template_index], ticket - seq.ticket_begin, work);
    work.seqlen_q = seq.seqlen_q;
    work.seqlen_k = seq.seqlen_k;
    work.q_row = seq.q_row;
    work.k_row = seq.k_row;
    work.q_tile_begin = seq.q_tile_begin;
    work.kv_tile_begin = seq.kv_tile_begin;
    return true;
  }

  // Ticket `local` of template t (counted from the template's first), claimed in the template's order (a pack's
  // templates too: each sequence's units slot by slot where its template is cut into slots): its item and its unit's
  // coordinates.
  __device__ __forceinline__ void decode(const kernels::bwd::BwdTemplate& t, int local, TicketWork& work) const {
    const dash_ticket_place place = dash_ticket_locate(t.claim_flags, t.ticket_group_units, t.items_per_slot,
                                                       t.num_units, t.items_per_unit, local);
    work.item = t.items[place.item];
    work.unit = dash_unit_coords_from(t.gqa_mode, p.heads_q, p.heads_kv, p.group_size, t.group_head_by_rank,
                                      place.unit);
    work.segments = t.segments;
    work.visits = t.visits;
    work.gqa_mode = t.gqa_mode;
    work.split_dkv = t.split_dkv;
  }

  // The item's i-th segment (a KV tile) and a segment's i-th visit (a Q tile), in the plan's order. A visit's
  // index in the unit's visit table identifies it in the order log.
  __device__ __forceinline__ dash_segment segment(const TicketWork& work, int i) const {
    return work.segments[work.item.first_segment + i];
  }
  __device__ __forceinline__ int visit_index(const dash_segment& segment, int i) const {
    return segment.first_visit + i;
  }
  __device__ __forceinline__ dash_visit visit(const TicketWork& work, int index) const { return work.visits[index]; }
  // The query head of a visit: the unit's own, or (packed GQA) the visit's head within its KV head's group.
  __device__ __forceinline__ int head_of(const TicketWork& work, const dash_visit& visit) const {
    return work.gqa_mode == DASH_GQA_PACK_GROUP ? work.unit.head_kv * p.group_size + visit.head_in_unit
                                                : work.unit.head_q;
  }
  // The dQ accumulator (and its turn counter, LSE2 / delta rows) of a visit: (batch, query head, Q tile), over
  // global Q tiles in a varlen pack.
  __device__ __forceinline__ int accumulator(const TicketWork& work, int head, int q_tile) const {
    return (work.unit.batch * p.heads_q + head) * p.num_q_tiles + work.q_tile_begin + q_tile;
  }

  // The turn counters: one per dQ accumulator (batch, query head, Q tile) and, for split-head GQA, one per
  // (batch, KV head, KV tile) for the group's dK/dV adds (kv_tile global in a varlen pack). Zeroed before every
  // launch.
  __device__ __forceinline__ int32_t* dq_turn(int64_t accumulator) const { return p.dq_counters + accumulator; }
  __device__ __forceinline__ int32_t* dkv_turn(int b, int head_kv, int kv_tile) const {
    return p.dkv_counters + (int64_t(b) * p.heads_kv + head_kv) * p.num_kv_tiles + kv_tile;
  }

  // WAIT FOR TURN: the contribution of rank `rank` may add once its counter equals `rank` (rank 0 at once).
  // The acquire orders the previous rank's released writes before what the calling thread does next.
  __device__ __forceinline__ static void wait_for_turn(const int32_t* turn, int32_t rank) {
    wait_counter_equals(turn, rank);
  }
  // PUBLISH: hands the turn to rank `rank + 1`. st.release.gpu is cumulative: whoever acquires the new value
  // also observes every write this thread observed or performed before it (the caller makes its adds
  // visible first: see each call site).
  __device__ __forceinline__ static void publish(int32_t* turn, int32_t rank) { st_release_gpu(turn, rank + 1); }
};

}  // namespace dash::hopper::bwd
