// SPDX-License-Identifier: Apache-2.0
// dash/varlen.hpp — packs of variable-length sequences (dash/plan_format.h, "varlen"): the order in which the kernels
// process a pack's sequences, the forward's work-tile tables, and the backward's varlen plan (one unit template per
// sequence shape). Host code only; no CUDA.
//
// Pack invariance rests on two rules kept here: a sequence's unit template is chosen from its own lengths (never
// from the pack), and every per-sequence quantity the kernels use (rows, tiles, tickets) is an offset, never an
// input to the arithmetic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dash/geometry.hpp"
#include "dash/plan.hpp"
#include "dash/plan_format.h"

namespace dash {

// A validated pack: the caller's problem and host cu_seqlens, the sequences in processing order (longest first),
// and the forward's work-tile look-up tables.
struct Pack {
  Problem problem;                                  // batch = sequences; seqlen_q / seqlen_k = the longest
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;  // [batch + 1], as given
  std::vector<dash_pack_sequence> sequences;        // processing order; backward fields 0
  int32_t fwd_block_m = 0;                          // query rows per forward work tile (kernel table)
  int64_t fwd_tiles = 0;                            // forward work tiles of the whole pack
  std::vector<int32_t> fwd_chunks;                  // [ceil(fwd_tiles / DASH_PACK_CHUNK)]

  int64_t total_q() const { return cu_seqlens_q.back(); }
  int64_t total_k() const { return cu_seqlens_k.back(); }
};

// Checks the problem (batch = number of sequences; seqlen fields ignored) and the host cu_seqlens (non-null,
// cu[0] = 0, non-decreasing, totals within int32), then orders the sequences: decreasing unmasked (query, key)
// pairs, ties by increasing index. Throws dash::Error naming the argument ("cu_seqlens_q[3]", "problem.batch").
Pack build_pack(const Problem& problem, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k);

// The batch-1 problem of one sequence of the pack.
Problem sequence_problem(const Pack& pack, const dash_pack_sequence& sequence);

// The position (in processing order) of the sequence that owns work index `index` (a forward tile or a backward
// ticket), given the records' begins and the chunk table, as the kernels look it up.
int32_t pack_sequence_at(const std::vector<int32_t>& begins, const std::vector<int32_t>& chunks, int64_t index);

// The backward plan of a pack.
struct VarlenPlan {
  std::vector<dash_pack_sequence> sequences;  // the pack's order, backward fields set
  std::vector<BoundPlan> templates;           // distinct unit templates, bound for the batch-1 problem of their
                                              // representative lengths (TemplateKey); sequence_header binds one
                                              // for a sequence's own lengths
  std::vector<int32_t> ticket_chunks;         // [ceil(num_tickets / DASH_PACK_CHUNK)]
  std::vector<int32_t> q_tile_sequence;       // [total_q_tiles]: position of the sequence owning a global Q tile
  std::vector<int32_t> kv_tile_sequence;      // [total_kv_tiles]
  int64_t num_tickets = 0;
  int32_t total_q_tiles = 0, total_kv_tiles = 0;
  TileShape tiles{};
  int32_t wave = 1;           // the largest min_coresident_ctas of its templates
  bool any_split_dkv = false; // some template is split-heads with group_size > 1 (dK/dV accumulators needed)
  std::string note;           // the notes of its shapes' plans (auto's choices, generalisations), once each
};

// The unit templates of the pack's sequence shapes, each what plan_for gives the batch-1 problem of that shape with
// `schedule`, `num_ctas` and `gqa_mode` (auto and DASH_GQA_AUTO decide per sequence, from its own shape). plan_for
// runs once per resolution class (auto's table row and the tile geometry: shapes of one class get the same outcome),
// and shapes whose plans share a unit template (TemplateKey) share its index. Sequences
// with seqlen_q == 0 or seqlen_k == 0 get template_index -1 and no tickets (the kernels write their zero
// gradients). Throws dash::Error naming the argument.
VarlenPlan plan_for_pack(const Pack& pack, const Schedule& schedule, int32_t num_ctas, GqaMode gqa_mode);

// The header plan_for gives the batch-1 problem of `sequence` (a record of plan.sequences with a template): its
// template's, with the sequence's own lengths. Sequences of one template differ only there; the kernels read the
// lengths from the records, the CPU backend from this header.
dash_plan_header sequence_header(const VarlenPlan& plan, const Pack& pack, const dash_pack_sequence& sequence);

}  // namespace dash
