// SPDX-License-Identifier: Apache-2.0
// dash/plan.hpp — building, validating and (de)serialising backward plans. Host code only; no CUDA.
//
//   dash::PlanRequest req{problem};           // shape, mask, GQA
//   req.schedule = dash::Schedule::parse("symmetric-shift");  // or ascending / descending / shift / auto / ...
//   req.num_ctas = 132;                       // co-resident CTAs the kernel will launch
//   dash::Plan plan = dash::build_plan(req);  // validated; throws dash::Error with the reason
//   std::vector<uint8_t> blob = plan.to_blob();  // the bytes described by dash/plan_format.h
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
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
// The planner planner_name calls `name`, if any.
std::optional<Planner> planner_named(std::string_view name);
const std::vector<Planner>& all_planners();

// Auto and AutoNondeterministic are requests only: build_plan resolves them (a Plan's gqa_mode() is SplitHeads or
// PackGroup). Auto follows the offline table per sequence template; AutoNondeterministic packs where the packed
// units' work items fill the CTAs (3 rounds of them where the balanced plan fits; whatever the table says), for plans
// that only non-deterministic backwards run.
enum class GqaMode : int32_t {
  SplitHeads = DASH_GQA_SPLIT_HEADS,
  PackGroup = DASH_GQA_PACK_GROUP,
  Auto = DASH_GQA_AUTO,
  AutoNondeterministic = DASH_GQA_AUTO_NONDETERMINISTIC
};
constexpr bool is_auto(GqaMode mode) { return mode == GqaMode::Auto || mode == GqaMode::AutoNondeterministic; }
// Whether a C ABI caller's gqa_mode is one of the four requests (dash_gqa_mode).
constexpr bool is_gqa_request(int32_t mode) {
  return mode >= DASH_GQA_SPLIT_HEADS && mode <= DASH_GQA_AUTO_NONDETERMINISTIC;
}
const char* gqa_mode_name(GqaMode mode);
// The mode gqa_mode_name gives `name` ("split", "pack", "auto", "auto-nondeterministic"); nullopt for any other.
std::optional<GqaMode> gqa_mode_named(std::string_view name);

// A schedule as users name it: one planner, or a rule that picks one.
struct Schedule {
  enum class Kind {
    Planner,     // exactly this planner; an error if it cannot run on the shape or P
    Auto,        // the first candidate of the offline table (src/core/auto_table.inc, scripts/make_auto_table.sh)
                 // for the sequence shape, mask, head dim and GQA group that runs on P CTAs: nothing is simulated
                 // at call time, and the choice is the same whatever the batch size, head count or P (as long as
                 // P holds the candidate's wave; below it, auto takes the next candidate, see plan_for)
    AutoFastest  // lowest simulated makespan on the actual problem: simulates at call time (up to seconds), and
                 // may pick differently when batch, heads or P change
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
  int32_t num_ctas = 132;           // P: the CTAs the kernel launches (docs/DEADLOCK.md: a plan needs only its
                                    // wave of them running at once)
  TileShape tiles{};                // 0 = default_backward_tiles(head_dim)
  GqaMode gqa_mode = GqaMode::SplitHeads;
  const CostModel* cost = nullptr;  // for auto; nullptr = CostModel::for_problem(problem, tiles)
};

namespace detail {
// TableAllocator's storage (src/core/table_memory.cpp): throws std::bad_alloc.
void* allocate_table(size_t bytes);
void free_table(void* table) noexcept;
// Copies `bytes` from `source` to `destination` (not overlapping) on the threads that build large templates, in
// parts of at least 256 KiB (src/core/planners.cpp). For the host copies of large tables (the CUDA layer's uploads),
// which one thread does at a fraction of the host's memory bandwidth.
void parallel_copy(void* destination, const void* source, size_t bytes);
}  // namespace detail

// The storage of the visit table, the one table that grows with the tile pairs (8 MB of a 128k-token causal unit):
// - resize() leaves new elements uninitialised: the planners write every visit, and zero-filling first cost about
//   0.6 ms per 8 MB (a vector cannot otherwise grow without writing every element);
// - a table of 2 MiB and more is 2 MiB-aligned and advised for transparent huge pages where the kernel offers them,
//   so that its fresh memory is faulted in 2 MiB pages instead of 4 KiB ones (8 MB: about 2 ms -> 0.6 ms on the
//   2-core development machine).
template <class T>
struct TableAllocator {
  using value_type = T;
  TableAllocator() = default;
  template <class U>
  TableAllocator(const TableAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(detail::allocate_table(n * sizeof(T))); }
  void deallocate(T* p, size_t) noexcept { detail::free_table(p); }
  // Default-initialisation: nothing is written for a plain struct. Every other construction as usual.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const TableAllocator<U>&) const noexcept {
    return true;
  }
};
using VisitTable = std::vector<dash_visit, TableAllocator<dash_visit>>;

// An owning, validated plan. The vectors are the unit template's tables of dash/plan_format.h.
struct Plan {
  dash_plan_header header{};
  std::vector<dash_item> items;
  std::vector<dash_segment> segments;
  VisitTable visits;                       // new elements of resize() are uninitialised (TableAllocator)
  std::vector<uint16_t> dq_count;          // [heads_per_unit * num_q_tiles]
  std::vector<uint8_t> group_head_by_rank; // [group_size]
  std::string note;                        // generalisations, auto's choice and fallbacks, in words

  Problem problem() const { return Problem::from_c(header.problem); }
  Planner planner() const { return static_cast<Planner>(header.planner); }
  GqaMode gqa_mode() const { return static_cast<GqaMode>(header.gqa_mode); }
  int64_t num_tickets() const { return int64_t(header.num_units) * header.items_per_unit; }

  // Serialised blob (header with offsets + tables); from_blob() checks magic, version and bounds.
  std::vector<uint8_t> to_blob() const;
  // The blob's header (offsets and total_bytes set), and where each of its parts lies, so that a copy (to the GPU)
  // can be written part by part without assembling the blob first. The zero padding between parts is not listed.
  dash_plan_header blob_header() const;
  struct BlobPart {
    uint32_t offset;
    const void* data;
    size_t bytes;
  };
  std::vector<BlobPart> blob_parts(const dash_plan_header& blob_header) const;
  static Plan from_blob(const uint8_t* data, size_t size);
};

// The items of a unit that run side by side (a lock-step wave at most): one slot's where the template is cut into
// slots (dash/plan_format.h, "Slots"), else all of them.
inline int32_t slot_items(const dash_plan_header& h) {
  return h.items_per_slot > 1 ? h.items_per_slot : h.items_per_unit;
}
// Whether the tickets go item by item across groups of units (the balanced non-deterministic plan), as opposed to
// unit by unit or slot by slot.
inline bool claimed_item_by_item(const dash_plan_header& h) {
  return (h.flags & DASH_PLAN_ITEM_MAJOR) && h.items_per_slot <= 1;
}

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

// Most tile pairs (the whole rectangle, as kMaxBlocksPerUnit) a packed GQA unit may have for auto to choose the
// pack mode (DASH_GQA_AUTO, for auto and for a named planner alike). A template's build and validation are linear
// in its visits, and packing multiplies them by the group size: at 131,072 tokens, 32/8 heads, head dim 128, causal,
// a packed unit has 4.2 M visits against 1.05 M per split head, four times the first call's planning (issue 13's 5 ms
// holds for the split template). 2^20 keeps every packed template auto builds within a 128k-token causal head's
// tables (8 MB): at head dim 128, group 4 packs up to 32k tokens and group 2 up to 64k, a self-attention of 32k
// tokens is a 512 x 256 rectangle. The bound reads the tile counts and the group only, so the choice stays the same
// for every batch, head count and CTA count. An explicit request for pack is not bounded by it.
inline constexpr int64_t kAutoPackMaxBlocks = int64_t(1) << 20;

// Whether a packed unit of `problem` (group > 1) is small enough for auto to choose the pack mode: its rectangle is at
// most kAutoPackMaxBlocks. The format's limits are plan_limit_violation's. O(1).
bool auto_may_pack(const Problem& problem, TileShape tiles);

// The longest sequence (seqlen_q = seqlen_k) whose plan fits those limits at `head_dim` (its default tiles)
// with `heads_per_unit` query heads per unit: 1,482,880 tokens at head dim 128, 2,097,152 at 64 (split heads).
int32_t longest_plannable_seqlen(int32_t head_dim, int32_t heads_per_unit = 1);

// The same as an exception (dash::Error naming the field). Mode Auto checks the split-heads plan, which auto
// can always fall back to. build_plan and build_unvalidated call it before anything else.
void check_plan_limits(const Problem& problem, TileShape tiles, GqaMode mode, int32_t num_ctas);

// Unit templates the planners have built in this process (one per build_unvalidated call): tests use it to
// show that a refusal came before any planning.
int64_t planner_runs();

// ---- Unit templates, cached per sequence template ----

// Everything a unit template depends on (dash/plan_format.h, "Units"): never the batch size, the head count or P.
// The lengths are those of geometry_representative (dash/geometry.hpp): the planners and the validator read lengths
// only through the kind of each (Q tile, KV tile) block, so lengths of the same tile geometry share one template.
struct TemplateKey {
  int32_t seqlen_q = 0, seqlen_k = 0;  // the representative lengths, not necessarily the problem's
  int32_t mask = 0, window_left = -1, window_right = -1;
  int32_t head_dim = 0, block_m = 0, block_n = 0;
  int32_t group_size = 1;
  int32_t gqa_mode = 0;  // SplitHeads or PackGroup
  int32_t planner = 0;
  // Every field, for equality and hashing (one list, so a new field cannot be left out of either).
  auto fields() const {
    return std::tie(seqlen_q, seqlen_k, mask, window_left, window_right, head_dim, block_m, block_n, group_size,
                    gqa_mode, planner);
  }
  bool operator==(const TemplateKey& o) const { return fields() == o.fields(); }
};
TemplateKey template_key(const Problem& problem, TileShape tiles, GqaMode mode, Planner planner);

// A validated unit template: tables for one unit of the problem (batch 1, one KV head, its group of query heads).
// Shared by every plan whose problem has the same TemplateKey; immutable once built.
struct UnitTemplate {
  TemplateKey key;                 // what it was built for
  Plan plan;                       // header.problem is the one-unit problem at the key's (representative)
                                   // lengths; plan_for binds the real problem; header.num_ctas is unused
  int32_t wave = 1;                // fewest CTAs that must run at once (min_coresident_ctas)
  bool waits_only_backward = false;
  size_t bytes() const;            // host memory it holds
};

// The validated template for `key`: from the process-wide cache, else built, validated and cached (thread-safe;
// the cache keeps the most recently used templates up to 1 GiB of tables). Throws dash::Error when the key's
// planner cannot build or validate it.
std::shared_ptr<const UnitTemplate> unit_template(const TemplateKey& key);

struct TemplateCacheStats {
  int64_t hits = 0, builds = 0, entries = 0;
  size_t bytes = 0;
};
TemplateCacheStats template_cache_stats();
// Empties the template cache, and with it the memos of plan_for's resolutions and of auto_candidates.
void clear_template_cache();

// A plan for one problem: a shared unit template and the header of the real problem.
struct BoundPlan {
  std::shared_ptr<const UnitTemplate> unit;
  dash_plan_header header{};  // the real problem, num_units, num_ctas, flags, min_coresident_ctas = unit->wave
  std::string note;           // auto's choice and fallbacks, generalisations, in words
};

// One (GQA mode, planner) pair that auto may choose.
struct Candidate {
  GqaMode mode = GqaMode::SplitHeads;
  Planner planner = Planner::Descending;
  bool operator==(const Candidate& o) const { return mode == o.mode && planner == o.planner; }
};

// auto's candidates for this sequence shape, best first, from the offline table (src/core/auto_table.inc): the row
// nearest to the mask, head dim, GQA group and lengths (in tokens), so a function of those only (never of the batch,
// the head count or P). Every list ends with split-heads descending and ascending, whose waits all target earlier
// tickets (wave 1), so one candidate always runs. Memoised per (mask, head dim, group, seqlen_q, seqlen_k) (bounded,
// thread-safe): a shape seen before costs a hash look-up.
std::vector<Candidate> auto_candidates(const Problem& problem, TileShape tiles);

// Resolves the schedule, fetches (or builds) the template, and checks it runs on request.num_ctas CTAs. A
// template seen before costs a cache look-up. auto takes the first table candidate the request's GQA mode allows
// whose wave fits num_ctas (the note names any it skipped); a named planner whose wave exceeds num_ctas is an
// error. Throws dash::Error naming the argument. A request seen before (auto-fastest aside) skips the resolution:
// its outcome is memoised (bounded, thread-safe) and replayed through the template cache, with the same result.
BoundPlan plan_for(const PlanRequest& request);

// The layout of a unit template whose visit table is still being written and validated (plan_for_async): everything a
// kernel launch reads of a plan, known after the planner's draft (microseconds to a fraction of a millisecond).
struct TemplateLayout {
  TemplateKey key;
  dash_plan_header header{};       // the template's header; min_coresident_ctas and the WAITS_ONLY_BACKWARD flag come
                                   // with validation (UnitTemplate::plan.header has them)
  dash_plan_header blob_header{};  // the finished template's Plan::blob_header: table offsets and total_bytes
  int32_t wave_bound = 1;          // the validated wave is at most this (1 for claim-order ranks, else a unit's items)
  std::string note;                // the template's generalisations
};

// plan_for_async's plan: the real problem's header and note, as plan_for's; `unit` when the template was cached (or
// had to be waited for), else `layout` and `tables`, which gives the validated template (cached once built) or
// rethrows the error of its build or validation.
struct AsyncBoundPlan {
  std::shared_ptr<const UnitTemplate> unit;
  std::shared_ptr<const TemplateLayout> layout;
  std::shared_future<std::shared_ptr<const UnitTemplate>> tables;
  dash_plan_header header{};
  std::string note;
};

// plan_for without waiting for a new template's visit table: the schedule is resolved on the drafts' layouts, and the
// tables are written and validated on a thread of their own. It chooses exactly what plan_for chooses (a candidate
// whose draft's wave bound exceeds P is waited for, to compare its validated wave). For callers that can start work
// that needs the tables only later (the CUDA layer's dash_plan_create_async).
AsyncBoundPlan plan_for_async(const PlanRequest& request);

// plan_for, then a Plan that owns a copy of the tables with the real problem's header (CLI, simulator, tests).
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
