// SPDX-License-Identifier: Apache-2.0
// dash/plan.hpp — building, validating and (de)serialising backward plans. Host code only; no CUDA.
//
//   dash::PlanRequest req{problem};           // shape, mask, GQA
//   req.schedule = dash::Schedule::parse("symmetric-shift");  // or ascending / descending / shift / auto / ...
//   req.num_ctas = 132;                       // co-resident CTAs the kernel will launch
//   dash::Plan plan = dash::build_plan(req);  // validated; throws dash::Error with the reason
//   std::vector<uint8_t> blob = plan.to_blob();  // the bytes described by dash/plan_format.h
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dash/geometry.hpp"
#include "dash/plan_format.h"

namespace dash {

enum class Planner : int32_t {
  Ascending = DASH_PLANNER_ASCENDING,
  Descending = DASH_PLANNER_DESCENDING,
  Shift = DASH_PLANNER_SHIFT,
  SymmetricShift = DASH_PLANNER_SYMMETRIC_SHIFT,
};
const char* planner_name(Planner planner);
const std::vector<Planner>& all_planners();

// Auto is a request only: build_plan resolves it (a Plan's gqa_mode() is SplitHeads or PackGroup).
enum class GqaMode : int32_t {
  SplitHeads = DASH_GQA_SPLIT_HEADS,
  PackGroup = DASH_GQA_PACK_GROUP,
  Auto = DASH_GQA_AUTO
};
const char* gqa_mode_name(GqaMode mode);

// A schedule as users name it: one planner, or a rule that picks one.
struct Schedule {
  enum class Kind {
    Planner,     // exactly this planner; an error if it cannot run on the shape or P
    Auto,        // lowest simulated makespan on a canonical problem derived from the sequence shape and P only:
                 // the choice (and so every order) is the same whatever the batch size, head count or position
    AutoFastest  // lowest simulated makespan on the actual problem: may pick differently when batch or heads change
  };
  Kind kind = Kind::Auto;
  Planner planner = Planner::Ascending;

  static Schedule parse(const std::string& name); // throws dash::Error("schedule", ...)
  std::string name() const;
};

struct CostModel; // dash/simulator.hpp

struct PlanRequest {
  Problem problem;
  Schedule schedule;
  int32_t num_ctas = 132;           // P: CTAs guaranteed co-resident (cooperative launch) or launched
  TileShape tiles{};                // 0 = default_backward_tiles(head_dim)
  GqaMode gqa_mode = GqaMode::SplitHeads;
  const CostModel* cost = nullptr;  // for auto; nullptr = CostModel::for_problem(problem, tiles)
};

// An owning, validated plan. The vectors are the unit template's tables of dash/plan_format.h.
struct Plan {
  dash_plan_header header{};
  std::vector<dash_item> items;
  std::vector<dash_segment> segments;
  std::vector<dash_visit> visits;
  std::vector<uint16_t> dq_count;          // [heads_per_unit * num_q_tiles]
  std::vector<uint8_t> group_head_by_rank; // [group_size]
  std::string note;                        // generalisations, auto's choice and fallbacks, in words

  Problem problem() const { return Problem::from_c(header.problem); }
  Planner planner() const { return static_cast<Planner>(header.planner); }
  GqaMode gqa_mode() const { return static_cast<GqaMode>(header.gqa_mode); }
  int64_t num_tickets() const { return int64_t(header.num_units) * header.items_per_unit; }

  // Serialised blob (header with offsets + tables); from_blob() checks magic, version and bounds.
  std::vector<uint8_t> to_blob() const;
  static Plan from_blob(const uint8_t* data, size_t size);
};

// ---- Size limits, checked from the shape alone before any planner or simulation runs ----

// Most (Q tile, KV tile) pairs one unit's plan may cover (its whole tile rectangle, times the heads of a packed
// GQA unit): 2^28 visits of 8 bytes keep the blob's 32-bit offsets and the kernels' 32-bit visit indices safe.
inline constexpr int64_t kMaxBlocksPerUnit = int64_t(1) << 28;

struct LimitViolation {
  std::string field;    // the problem field to change (seqlen_q, seqlen_k, heads_q, batch)
  std::string message;  // the sizes involved and the limit they exceed
};

// The first limit of the plan format (16-bit tile indices, 8-bit heads per unit, kMaxBlocksPerUnit) or of the
// 32-bit ticket counter that a plan of `problem` in GQA mode `mode` (not Auto) would exceed; nullopt if none.
// Throws dash::Error for an invalid problem. Costs O(1): nothing is planned.
std::optional<LimitViolation> plan_limit_violation(const Problem& problem, TileShape tiles, GqaMode mode,
                                                   int32_t num_ctas);

// The longest sequence (seqlen_q = seqlen_k) whose plan fits those limits at `head_dim` (its default tiles)
// with `heads_per_unit` query heads per unit: 1,482,880 tokens at head dim 128, 2,097,152 at 64 (split heads).
int32_t longest_plannable_seqlen(int32_t head_dim, int32_t heads_per_unit = 1);

// The same as an exception (dash::Error naming the field). Mode Auto checks the split-heads plan, which auto
// can always fall back to. build_plan and build_unvalidated call it before anything else.
void check_plan_limits(const Problem& problem, TileShape tiles, GqaMode mode, int32_t num_ctas);

// Unit templates the planners have built in this process (one per build_unvalidated call): tests use it to
// show that a refusal came before any planning.
int64_t planner_runs();

// Builds and validates a plan. Throws dash::Error naming the argument when the request is invalid or the
// named planner cannot run on this shape / P (only the auto schedules fall back, and record why in `note`).
Plan build_plan(const PlanRequest& request);

// Builds the unit template of one planner without validating it (tests use it to feed the validator).
Plan build_unvalidated(const Problem& problem, Planner planner, TileShape tiles, GqaMode gqa_mode,
                       int32_t num_ctas);

struct ValidationReport {
  bool ok = false;
  std::string reason;               // first violated property, in words
  int32_t min_coresident_ctas = 0;  // largest wave of forward waits (1 if all waits target earlier tickets)
  bool waits_only_backward = false;
};

// Checks every property docs/DEADLOCK.md lists: structure and bounds, exact coverage of the unmasked blocks,
// total dQ (and dK/dV group) orders, an acyclic wait graph, and that every awaited item is claimed while its
// waiter runs given `num_ctas` co-resident CTAs. Does not throw.
ValidationReport validate_plan(const Plan& plan, int32_t num_ctas);

// Text rendering for `dash-attn plan`: header, per-item visit sequences, per-dQ-tile orders.
std::string describe_plan(const Plan& plan, int32_t max_items = 16, int32_t max_q_tiles = 16);

} // namespace dash
