// SPDX-License-Identifier: Apache-2.0
// bwd/bwd_params.h — the seam between the backward's host API (plain C++: validation, workspace, launch) and the
// backward kernels of any architecture: the kernel parameter block, the tile shapes and the workspace layout.
// No device code here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <vector_types.h>  // uint4

#include "dash/attention_mask.hpp"
#include "dash/dash_attn.h"
#include "dash/kernel_table.hpp"
#include "dash/plan_format.h"

namespace dash::kernels::bwd {

// The backward's tiles for a head dim: its row of dash/kernel_table.hpp, which dash::default_backward_tiles
// also reads, so the plan's tables are expressed in these tiles (the host still refuses a plan with others).
template <int kHeadDim, int kHeadDimV>
struct BwdTiles {
  static constexpr KernelTableRow kRow = kernel_table_row(kHeadDim, kHeadDimV);
  static_assert(kRow.head_dim == kHeadDim, "no row for this head-dim pair in dash/kernel_table.hpp");
  static constexpr int kBlockM = kRow.bwd_block_m;  // query rows per Q tile
  static constexpr int kBlockN = kRow.bwd_block_n;  // key rows per KV tile
};

// One unit template as the kernels read it (pointers into a plan's device blob): a fixed-length plan has one
// (BwdParams::fixed), a varlen pack one per distinct sequence shape (BwdParams::templates).
struct BwdTemplate {
  const dash_item* items;
  const dash_segment* segments;
  const dash_visit* visits;
  const uint16_t* dq_count;
  const uint8_t* group_head_by_rank;
  int32_t items_per_unit;
  int32_t gqa_mode;   // dash_gqa_mode
  int32_t split_dkv;  // SPLIT_HEADS with group_size > 1
  int32_t num_q_tiles;  // of the template's sequence shape
  // Its tickets' claim order (dash_ticket_locate), from its bound header: DASH_PLAN_ITEM_MAJOR or 0,
  // ticket_group_units, items_per_slot and num_units (a pack's: one sequence's units).
  uint32_t claim_flags;
  int32_t ticket_group_units, items_per_slot, num_units;
};

// A template's tables in a device blob laid out as `blob_header` says, bound as `bound` says.
inline BwdTemplate bwd_template_of(const uint8_t* blob, const dash_plan_header& blob_header,
                                   const dash_plan_header& bound) {
  return BwdTemplate{reinterpret_cast<const dash_item*>(blob + blob_header.items_offset),
                     reinterpret_cast<const dash_segment*>(blob + blob_header.segments_offset),
                     reinterpret_cast<const dash_visit*>(blob + blob_header.visits_offset),
                     reinterpret_cast<const uint16_t*>(blob + blob_header.dq_count_offset),
                     blob + blob_header.group_head_by_rank_offset,
                     bound.items_per_unit,
                     bound.gqa_mode,
                     dash_plan_splits_dkv(&bound),
                     bound.num_q_tiles,
                     bound.flags & DASH_PLAN_ITEM_MAJOR,
                     bound.ticket_group_units,
                     bound.items_per_slot,
                     bound.num_units};
}

// Everything the three backward kernels (preprocess, main, convert) read. Pointers to the plan tables
// point into the device copy of the plan blob.
struct BwdParams {
  // Inputs and outputs (element strides, head-dim stride 1), as validated by bwd/validation.cpp.
  dash_tensor q, k, v, o, dout, dq, dk, dv;
  const float* lse;  // [batch, heads_q, seqlen_q], natural log, -inf for rows that see no key

  int32_t batch, heads_q, heads_kv, group_size;
  AttentionMask mask;  // which keys each query row sees; the sequence lengths
  float softmax_scale;
  float scale_log2;  // softmax_scale * log2(e)

  // Plan (device copy of the blob): a fixed-length plan's one unit template (varlen: `templates` below instead).
  BwdTemplate fixed;
  int32_t num_tickets;
  int32_t num_q_tiles, num_kv_tiles;

  // Modes.
  int32_t ordered;        // runs_ordered: 1, dQ (and dK/dV) adds in the plan's order; 0, unordered atomic adds
  int32_t rank_spacing;   // the plan header's (dash_plan_header::rank_spacing): host-side kernel choice only
  int32_t split_dkv;      // some unit's dK/dV go through the fp32 accumulators (the workspace has them; convert adds)

  // Workspace (bwd_workspace_layout).
  int32_t* ticket_counter;
  int32_t* dq_counters;   // [batch * heads_q * num_q_tiles] (ordered only)
  int32_t* dkv_counters;  // [batch * heads_kv * num_kv_tiles] (ordered split_dkv only)
  float* delta;           // [batch * heads_q * num_q_tiles * kBlockM]
  float* lse_log2;        // same; +inf for rows past seqlen_q or rows with LSE = -inf (so P = 0 there)
  float* dq_accum;        // [batch * heads_q * num_q_tiles][kBlockM * head_dim], per tile in the staging layout
                          // DqStaging (column blocks, swizzled 4-float chunks: hopper/bwd/bwd_dq_handoff.cuh)
  float* dk_accum;        // [batch * heads_kv * num_kv_tiles * kBlockN][head_dim] (split_dkv only)
  float* dv_accum;

  // What must start at zero, in 16-byte words: the counters (zero_counters, always) and the split-GQA dK/dV
  // accumulators (zero_dkv, where split_dkv; else 0 words). The preprocess kernel zeroes both before the main kernel
  // runs; where it does not run (no query rows), the launcher zeroes them with cudaMemsetAsync.
  uint4* zero_counters;
  int64_t zero_counters_words;
  uint4* zero_dkv;
  int64_t zero_dkv_words;

  // Testing: when non-null, the store warp writes (ticket << 32 | visit) into
  // order_log[accumulator * num_kv_tiles + rank] at the moment it acquires its turn.
  int64_t* order_log;

  // Varlen (dash/plan_format.h, "varlen"); sequences == nullptr for fixed-length batches. Then batch = 1 and every
  // per-tile array above is indexed by GLOBAL tiles: num_q_tiles / num_kv_tiles are the pack's totals, a sequence's
  // tile t is global tile q_tile_begin + t (kv_tile_begin + t), and its unit template is templates[template_index]
  // (`fixed` is unused).
  // The tensors are packed (rows counted from the sequence's q_row / k_row) and lse is [heads_q, total_q].
  const dash_pack_sequence* sequences;
  const BwdTemplate* templates;
  const int32_t* ticket_chunks;     // [ceil(num_tickets / DASH_PACK_CHUNK)]
  const int32_t* q_tile_sequence;   // [num_q_tiles]: position of the sequence owning a global Q tile
  const int32_t* kv_tile_sequence;  // [num_kv_tiles]
  int32_t num_sequences;
  int32_t total_q;                  // rows of the packed q: the LSE's row stride per head
};

// Whether a call's dQ (and split dK/dV) adds go in the plan's order: in the deterministic mode, and in the
// non-deterministic one on a plan flagged DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED. The workspace layout, the
// kernels and the zeroing follow this, not the mode argument.
inline bool runs_ordered(int32_t deterministic, const dash_plan_header& h) {
  return deterministic != 0 || (h.flags & DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED) != 0;
}

// Byte offsets of the workspace regions (each 256-byte aligned) for a problem, plan and ordering (runs_ordered).
struct BwdWorkspaceLayout {
  size_t ticket = 0, dq_counters = 0, dkv_counters = 0, delta = 0, lse_log2 = 0, dq_accum = 0, dk_accum = 0,
         dv_accum = 0;
  size_t counters_end = 0;  // [0, counters_end) holds every counter: zeroed per call
  size_t total = 0;
};
BwdWorkspaceLayout bwd_workspace_layout(const dash_problem& problem, const dash_plan_header& header, bool ordered);
// The problem whose layout a plan's workspace has: the call's, with batch 1 for a varlen plan (whose header's tile
// counts are the pack's global tiles).
dash_problem workspace_problem(const dash_problem& problem, const ::dash_plan_s& plan);

}  // namespace dash::kernels::bwd
