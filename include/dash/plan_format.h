/* SPDX-License-Identifier: Apache-2.0
 *
 * dash/plan_format.h — THE backward-plan format, shared by the planner, the validator, the simulator, the
 * CUDA kernels and the language bindings. Plain C, fixed-width fields, static_assert'ed sizes: gcc, nvcc
 * and ctypes all read the same bytes.
 *
 * A plan says, for the attention backward of one problem:
 *   - which work items exist and in which order CTAs claim them (a global ticket counter, ticket t = t-th item);
 *   - for each item, the KV tiles it processes (segments) and, per segment, the ordered Q tiles it visits;
 *   - for each visit, its rank in the accumulation order of the dQ tile it adds into;
 *   - for GQA with one unit per query head, the order in which the query heads of a group add into dK/dV.
 *
 * Units. Heads are alike, so the plan stores ONE unit's tables (a "template"); every unit uses them.
 *   gqa_mode == DASH_GQA_SPLIT_HEADS: a unit is one (batch, query head). The units of one KV-head group are
 *     consecutive, in the group's dK/dV accumulation order:
 *       unit u -> b = u / heads_q, r = u % heads_q, hk = r / group_size,
 *                 hq = hk * group_size + group_head_by_rank[r % group_size].
 *     Query head hq adds its dK/dV partial for a KV tile after the head of the previous rank did.
 *   gqa_mode == DASH_GQA_PACK_GROUP: a unit is one (batch, KV head) and covers all group_size query heads;
 *     visits carry head_in_unit, and dK/dV are summed in registers in visit order (no cross-CTA dK/dV adds).
 *       unit u -> b = u / heads_kv, hk = u % heads_kv; a visit's query head is hk * group_size + head_in_unit.
 *   Ticket t -> unit t / items_per_unit, item t % items_per_unit: units are claimed one after another, except
 *   in a plan with DASH_PLAN_ITEM_MAJOR: there the units form consecutive groups of ticket_group_units (the last
 *   may be smaller), claimed one group after another. Within a group of n units the tickets go in blocks of w
 *   consecutive items of one unit (w = items_per_slot, or 1 where it is 0): block b (counted from the group's
 *   first ticket) is the b / n-th block of items of the group's unit b % n. So every unit's first item (w = 1) or
 *   slot (w > 1), then every unit's second, ... dash_ticket_locate / dash_ticket_of say it in code.
 *
 * Slots. A lock-step template's items all run at once (each unit is a wave). Where every item starts a segment at
 *   the same positions, the planner cuts the items there: slot k holds the k-th piece of every item, and the items
 *   table lists the slots one after another, items_per_slot items each. The visits and their ranks stay the
 *   uncut template's, so the bits do too; a slot's items wait on each other (its wave) and on earlier slots of their
 *   unit. Claimed slot by slot across a group of units (DASH_PLAN_ITEM_MAJOR), the CTAs that would idle while the
 *   last round of whole units runs take other units' slots instead.
 *
 * Because every order lives in the unit template, the bits of one sequence depend only on its shape, mask,
 * head dim, GQA group size and planner — never on batch size, head count or batch position.
 *
 * Accumulators. A dQ accumulator is (unit, head_in_unit, q_tile). Its contributions are added in dq_rank
 * order 0, 1, ..., dq_count-1: a visit of rank r waits until the accumulator's counter equals r, adds, then
 * releases the counter to r + 1. The validator (src/core/validate.cpp) proves that no plan it accepts can
 * deadlock once `min_coresident_ctas` (its wave) of its CTAs run; docs/DEADLOCK.md states the execution model and
 * argument.
 *
 * Blob layout. A serialized plan is one contiguous, 16-byte-aligned byte blob: the header, then each table
 * at the byte offset the header gives. Kernels copy the blob to the device once and read it in place.
 */
#ifndef DASH_PLAN_FORMAT_H
#define DASH_PLAN_FORMAT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DASH_PLAN_MAGIC 0x48534144u /* "DASH" little-endian */
/* Version 2: dash_problem's last field, reserved (always 0) in version 1, is head_dim_v. A version-1 blob reads as
 * version 2 with head_dim_v = 0 (the value head dim equal to head_dim). */
#define DASH_PLAN_FORMAT_VERSION 2u

/* Largest tile index and contribution count a visit can carry (16-bit fields). */
#define DASH_PLAN_MAX_TILES 65535
#define DASH_PLAN_MAX_HEADS_PER_UNIT 255

typedef enum dash_mask_kind {
  DASH_MASK_FULL = 0,
  DASH_MASK_CAUSAL = 1, /* bottom-right aligned, as FlashAttention: key j visible to query i iff j <= i + sk - sq */
  DASH_MASK_WINDOW = 2  /* sliding window: i + sk - sq - left <= j <= i + sk - sq + right; -1 = unbounded side */
} dash_mask_kind;

typedef enum dash_planner_kind {
  DASH_PLANNER_ASCENDING = 0,       /* FA3 deterministic: Q tiles ascending, dQ added in ascending KV order */
  DASH_PLANNER_DESCENDING = 1,      /* DASH descending Q-tile iteration, same dQ order as ascending */
  DASH_PLANNER_SHIFT = 2,           /* DASH shift: cyclic Q-tile order per KV tile, dQ in lock-step arrival order */
  DASH_PLANNER_SYMMETRIC_SHIFT = 3, /* DASH symmetric shift: long/short KV tiles paired per item */
  DASH_PLANNER_COUNT = 4
} dash_planner_kind;

typedef enum dash_gqa_mode {
  DASH_GQA_SPLIT_HEADS = 0, /* one unit per query head; ordered dK/dV adds across the group */
  DASH_GQA_PACK_GROUP = 1,  /* one unit per KV head; dK/dV summed in registers over the group */
  DASH_GQA_AUTO = 2,        /* requests only (a built plan holds 0 or 1): auto's offline table picks split or
                               pack from the sequence template, so the choice does not depend on the batch */
  DASH_GQA_AUTO_NONDETERMINISTIC = 3 /* requests only, for plans that run non-deterministic backwards: packed units
                               where their work items fill the CTAs (the whole problem's, batch included), and 3
                               rounds of them where the balanced plan below fits; else, with schedule auto and a
                               causal or window mask, the balanced plan (split heads,
                               DASH_PLAN_ITEM_MAJOR) where it fits; else split heads. The plan gets
                               DASH_PLAN_NONDETERMINISTIC_ONLY. */
} dash_gqa_mode;

typedef enum dash_visit_flags {
  DASH_VISIT_PARTIAL_MASK = 1u << 0, /* some (query, key) pairs of the tile are masked: apply the mask */
  DASH_VISIT_FIRST = 1u << 1,        /* dq_rank == 0: the accumulator's first contribution */
  DASH_VISIT_LAST = 1u << 2          /* dq_rank == dq_count - 1: the accumulator is complete after this add */
} dash_visit_flags;

typedef enum dash_plan_flags {
  /* Every wait targets an item with an earlier ticket: a CTA may claim its next ticket before its current
   * item's waits are satisfied, and no co-residency is needed (min_coresident_ctas == 1). */
  DASH_PLAN_WAITS_ONLY_BACKWARD = 1u << 0,
  /* The planner could not apply its construction as published and used its generalisation; see the note. */
  DASH_PLAN_GENERALISED = 1u << 1,
  /* Made with DASH_GQA_AUTO_NONDETERMINISTIC: its GQA mode depends on the batch, so a sequence's bits would too;
   * dash_bwd refuses it with deterministic = 1. Set on the plan's header, never on a shared template's. */
  DASH_PLAN_NONDETERMINISTIC_ONLY = 1u << 2,
  /* Tickets go item by item (or slot by slot) across groups of ticket_group_units units (see "Units" above). Two
   * plans set it: the balanced non-deterministic plan of DASH_GQA_AUTO_NONDETERMINISTIC with schedule auto (one KV
   * tile per item, longest first, so that the CTAs claim a group's longest items first and finish together; with
   * DASH_PLAN_NONDETERMINISTIC_ONLY), and a plan whose template is cut into slots (items_per_slot > 1), where a
   * group of more than one unit fills the CTAs better than whole units. Set on a plan's header, never on a template
   * or in a pack. */
  DASH_PLAN_ITEM_MAJOR = 1u << 3,
  /* A non-deterministic backward of this plan runs as the deterministic one: ordered dQ adds whose first partial
   * is stored, so nothing is zeroed first (and dash_bwd_workspace_size is the deterministic one in both modes).
   * Faster where every dQ accumulator gets few partials: schedule auto sets it where num_kv_tiles <= 4, and on a
   * varlen pack whose every sequence template has it. Set on a plan's header, never on a shared template; never
   * with DASH_PLAN_NONDETERMINISTIC_ONLY. */
  DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED = 1u << 4
} dash_plan_flags;

typedef struct dash_problem {
  int32_t batch;
  int32_t heads_q;
  int32_t heads_kv; /* heads_q must be a multiple of heads_kv */
  int32_t seqlen_q;
  int32_t seqlen_k;
  int32_t head_dim;
  int32_t mask_kind;    /* dash_mask_kind */
  int32_t window_left;  /* DASH_MASK_WINDOW only; -1 = unbounded */
  int32_t window_right; /* DASH_MASK_WINDOW only; -1 = unbounded */
  int32_t head_dim_v;   /* head dim of v, o, dout, dv (DeepSeek-style MLA: 192 / 128); 0 = head_dim */
} dash_problem;

/* One claimable work item: consecutive segments, processed by one CTA without interruption. */
typedef struct dash_item {
  int32_t first_segment;
  int32_t num_segments;
} dash_item;

/* One KV tile processed inside an item; its dK/dV are complete (or handed to the group order) at its end.
 * A segment may have no visits (a KV tile no query sees): the kernel then writes zero dK/dV. */
typedef struct dash_segment {
  int32_t kv_tile;
  int32_t first_visit;
  int32_t num_visits;
  int32_t reserved;
} dash_segment;

/* One (Q tile, KV tile) block of the backward, in the order its item visits it. */
typedef struct dash_visit {
  uint16_t q_tile;
  uint16_t dq_rank;     /* position of this contribution in the accumulator's order */
  uint8_t head_in_unit; /* 0 unless gqa_mode == DASH_GQA_PACK_GROUP */
  uint8_t flags;        /* dash_visit_flags */
  uint16_t reserved;
} dash_visit;

typedef struct dash_plan_header {
  uint32_t magic;       /* DASH_PLAN_MAGIC */
  uint32_t version;     /* DASH_PLAN_FORMAT_VERSION */
  uint32_t total_bytes; /* size of the whole blob */
  uint32_t flags;       /* dash_plan_flags */

  dash_problem problem;

  int32_t block_m; /* query rows per Q tile */
  int32_t block_n; /* key rows per KV tile */
  int32_t num_q_tiles;
  int32_t num_kv_tiles;

  int32_t planner;        /* dash_planner_kind that produced the tables */
  int32_t gqa_mode;       /* dash_gqa_mode */
  int32_t group_size;     /* heads_q / heads_kv */
  int32_t heads_per_unit; /* group_size in PACK_GROUP mode, else 1 */

  int32_t num_units;      /* batch * heads_q (SPLIT_HEADS) or batch * heads_kv (PACK_GROUP) */
  int32_t items_per_unit; /* tickets per unit */
  int32_t segments_per_unit;
  int32_t visits_per_unit;

  int32_t num_ctas;            /* CTAs the backward launches (P); any P >= min_coresident_ctas gives the same bits */
  int32_t min_coresident_ctas; /* the wave: CTAs that must run at once; depends on the unit template only */
  int32_t max_visits_per_item;
  int32_t ticket_group_units; /* DASH_PLAN_ITEM_MAJOR: units per group of the claim order (>= 1); else 0 */

  /* Byte offsets from the start of the blob; each table is 16-byte aligned. */
  uint32_t items_offset;              /* dash_item[items_per_unit], in claim order */
  uint32_t segments_offset;           /* dash_segment[segments_per_unit] */
  uint32_t visits_offset;             /* dash_visit[visits_per_unit] */
  uint32_t dq_count_offset;           /* uint16_t[heads_per_unit * num_q_tiles]: contributions per dQ accumulator */
  uint32_t group_head_by_rank_offset; /* uint8_t[group_size]: query head (in group) with dK/dV rank r */
  /* Lock-step plans: every dQ accumulator's consecutive ranks come from visits at least this many positions apart
   * in their items (all items advance a position per step, so that many visits apart in time); 0 where the planner
   * promises nothing (0 in blobs of before 2026-12-06, where this was reserved). A promise of speed, not of
   * correctness: the turns enforce the order whatever it says. The backward runs its kernels whose dQ hand-off
   * leaves a visit late (head dim 64's staggered warpgroups) in the deterministic mode only where it is >= 2. */
  int32_t rank_spacing;
  /* A template cut into slots (see "Slots" above): items per slot, the uncut template's item count, which divides
   * items_per_unit; 0 where the template is not cut (0 in blobs of before 2026-12-07, where this was reserved). */
  int32_t items_per_slot;
  uint32_t reserved1;
  uint32_t reserved2[2];
} dash_plan_header;

/* ---- Packed variable-length sequences ("varlen") ----
 *
 * A pack is `batch` sequences stored back to back in (total_rows, heads, head_dim) tensors: sequence s holds query
 * rows [cu_seqlens_q[s], cu_seqlens_q[s + 1]) and key rows [cu_seqlens_k[s], cu_seqlens_k[s + 1]). The kernels
 * process its sequences in one fixed order (longest first, ties by index) and find a sequence from a work index
 * through a table of these records, in that order. Each sequence is computed exactly as a batch-1 problem of its
 * own lengths (its own unit template in the backward), so its bits do not depend on the other sequences, their
 * lengths or its position in the pack ("pack invariance"). */
typedef struct dash_pack_sequence {
  int32_t sequence;         /* its index s in cu_seqlens */
  int32_t seqlen_q, seqlen_k;
  int32_t q_row, k_row;     /* cu_seqlens_q[s], cu_seqlens_k[s]: its first row in the packed tensors */
  int32_t fwd_tile_begin;   /* forward: its first work tile; it has heads_q * ceil(seqlen_q / fwd_block_m) */
  /* Backward (set in a varlen plan's copy of the records; 0 in the pack's): */
  int32_t template_index;   /* its unit template in the plan's template table (-1: no ticket, see below) */
  int32_t ticket_begin;     /* its first ticket; it has units * items_per_unit of its template */
  int32_t q_tile_begin;     /* its first "global" Q tile: dQ accumulators, delta and LSE2 are per global tile */
  int32_t kv_tile_begin;    /* its first global KV tile: split-GQA dK/dV accumulators and turn counters */
  int32_t reserved[2];
} dash_pack_sequence;

/* Records per look-up chunk: entry c of a chunk table holds the position (in processing order) of the sequence
 * that owns work index c * DASH_PACK_CHUNK; a kernel then steps forward over the records (begin <= index). */
#define DASH_PACK_CHUNK 32

#if defined(__CUDACC__)
#define DASH_HOST_DEVICE __host__ __device__
#else
#define DASH_HOST_DEVICE
#endif

/* A unit's place in the problem (see "Units" above): batch, KV head, group rank, and the query head in
 * SPLIT_HEADS mode (-1 in PACK_GROUP mode, where each visit's head_in_unit names it). One definition for the
 * kernels, the simulator and the CPU backend. */
typedef struct dash_unit_coords {
  int32_t batch;
  int32_t head_kv;
  int32_t head_q;
  int32_t group_rank;
} dash_unit_coords;

DASH_HOST_DEVICE static inline dash_unit_coords dash_unit_coords_from(int32_t gqa_mode, int32_t heads_q,
                                                                      int32_t heads_kv, int32_t group_size,
                                                                      const uint8_t* group_head_by_rank,
                                                                      int32_t unit) {
  dash_unit_coords c;
  if (gqa_mode == DASH_GQA_PACK_GROUP) {
    c.batch = unit / heads_kv;
    c.head_kv = unit % heads_kv;
    c.head_q = -1;
    c.group_rank = 0;
  } else {
    const int32_t r = unit % heads_q;
    c.batch = unit / heads_q;
    c.head_kv = r / group_size;
    c.group_rank = r % group_size;
    c.head_q = c.head_kv * group_size + group_head_by_rank[c.group_rank];
  }
  return c;
}

/* The same from a plan header (the kernels pass the fields they hold in their parameters). */
DASH_HOST_DEVICE static inline dash_unit_coords dash_unit_coords_of(const dash_plan_header* h,
                                                                    const uint8_t* group_head_by_rank,
                                                                    int32_t unit) {
  return dash_unit_coords_from(h->gqa_mode, h->problem.heads_q, h->problem.heads_kv, h->group_size,
                               group_head_by_rank, unit);
}

/* Ticket t of a fixed-length plan (flags, ticket_group_units, items_per_slot, num_units and items_per_unit of its
 * header): its unit and its item, and back (see "Units" above). Tickets are below 2^31 (the planner's limit: one
 * 32-bit ticket counter). One definition for the kernels, the simulator and the tests. */
DASH_HOST_DEVICE static inline int32_t dash_ticket_group_size(int32_t group, int32_t num_units, int32_t first) {
  return num_units - first < group ? num_units - first : group;
}
/* The block of consecutive items claimed together: a slot, or one item. */
DASH_HOST_DEVICE static inline int32_t dash_ticket_block(int32_t items_per_slot) {
  return items_per_slot > 1 ? items_per_slot : 1;
}
/* Where ticket t lands: its unit, and its item within the unit. */
typedef struct dash_ticket_place {
  int32_t unit;
  int32_t item;
} dash_ticket_place;
DASH_HOST_DEVICE static inline dash_ticket_place dash_ticket_locate(uint32_t flags, int32_t group,
                                                                    int32_t items_per_slot, int32_t num_units,
                                                                    int32_t items_per_unit, int32_t ticket) {
  dash_ticket_place place;
  if (!(flags & DASH_PLAN_ITEM_MAJOR)) {
    place.unit = ticket / items_per_unit;
    place.item = ticket % items_per_unit;
    return place;
  }
  /* Item-major: the group's units take blocks of w items in turn, w consecutive tickets per block. */
  const int32_t w = dash_ticket_block(items_per_slot);
  const int32_t first = ticket / (group * items_per_unit) * group;
  const int32_t units = dash_ticket_group_size(group, num_units, first);
  const int32_t in_group = ticket - first * items_per_unit;
  place.unit = first + in_group / w % units;
  place.item = in_group / w / units * w + in_group % w;
  return place;
}
DASH_HOST_DEVICE static inline int32_t dash_ticket_of(uint32_t flags, int32_t group, int32_t items_per_slot,
                                                     int32_t num_units, int32_t items_per_unit, int32_t unit,
                                                     int32_t item) {
  if (!(flags & DASH_PLAN_ITEM_MAJOR)) return unit * items_per_unit + item;
  const int32_t w = dash_ticket_block(items_per_slot);
  const int32_t first = unit / group * group;
  const int32_t block = item / w * dash_ticket_group_size(group, num_units, first) + (unit - first);
  return first * items_per_unit + block * w + item % w;
}

/* Whether the plan's units add dK/dV in group order: split-head GQA (one unit per query head) with more than one query
 * head per KV head. Such a backward has fp32 dK/dV accumulators and, when deterministic, dK/dV turn counters. */
DASH_HOST_DEVICE static inline int dash_plan_splits_dkv(const dash_plan_header* h) {
  return h->gqa_mode == DASH_GQA_SPLIT_HEADS && h->group_size > 1;
}

#ifdef __cplusplus
} /* extern "C" */
#define DASH_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define DASH_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

DASH_STATIC_ASSERT(sizeof(dash_problem) == 40, "dash_problem layout");
DASH_STATIC_ASSERT(sizeof(dash_item) == 8, "dash_item layout");
DASH_STATIC_ASSERT(sizeof(dash_segment) == 16, "dash_segment layout");
DASH_STATIC_ASSERT(sizeof(dash_visit) == 8, "dash_visit layout");
DASH_STATIC_ASSERT(sizeof(dash_plan_header) == 160, "dash_plan_header layout");
DASH_STATIC_ASSERT(sizeof(dash_pack_sequence) == 48, "dash_pack_sequence layout");

#endif /* DASH_PLAN_FORMAT_H */
