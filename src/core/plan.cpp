// SPDX-License-Identifier: Apache-2.0
// plan_for / build_plan (the template cache, named planners and the auto rules), blob (de)serialisation and the
// text rendering.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "dash/plan.hpp"
#include "dash/simulator.hpp"
#include "plan_internal.hpp"

namespace dash {

Schedule Schedule::parse(const std::string& name) {
  if (name == "auto") return {Kind::Auto, Planner::Ascending};
  if (name == "auto-fastest") return {Kind::AutoFastest, Planner::Ascending};
  if (const std::optional<Planner> p = planner_named(name)) return {Kind::Planner, *p};
  std::string known = "auto, auto-fastest";
  for (Planner p : all_planners()) known += std::string(", ") + planner_name(p);
  throw Error("schedule", "unknown schedule '" + name + "' (expected one of: " + known + ")");
}

std::string Schedule::name() const {
  switch (kind) {
    case Kind::Planner: return planner_name(planner);
    case Kind::Auto: return "auto";
    case Kind::AutoFastest: return "auto-fastest";
  }
  return "?";
}

namespace {
// template_key for a problem whose lengths are already its geometry's representative (plan_for finds them once for
// all its candidates; geometry_representative is O(KV tiles)). `tiles` resolved.
TemplateKey representative_template_key(const Problem& representative, TileShape tiles, GqaMode mode,
                                        Planner planner) {
  if (is_auto(mode)) throw Error("gqa_mode", "a template key needs a resolved GQA mode (split or pack)");
  TemplateKey k;
  k.seqlen_q = representative.seqlen_q;
  k.seqlen_k = representative.seqlen_k;
  k.mask = int32_t(representative.mask);
  // Window sizes change the template only for the window mask; other masks ignore them.
  k.window_left = representative.mask == Mask::Window ? representative.window_left : -1;
  k.window_right = representative.mask == Mask::Window ? representative.window_right : -1;
  k.head_dim = representative.head_dim;
  k.block_m = tiles.block_m;
  k.block_n = tiles.block_n;
  // With a group of 1 the two GQA modes build the same tables; one key serves both.
  k.group_size = representative.group_size();
  k.gqa_mode = int32_t(k.group_size == 1 ? GqaMode::SplitHeads : mode);
  k.planner = int32_t(planner);
  return k;
}
}  // namespace

TemplateKey template_key(const Problem& problem, TileShape tiles, GqaMode mode, Planner planner) {
  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(problem.head_dim);
  // Lengths whose blocks are all of the same kind build the same tables: one key (and template) serves them all.
  return representative_template_key(geometry_representative(problem, tiles), tiles, mode, planner);
}

size_t UnitTemplate::bytes() const {
  return sizeof(UnitTemplate) + plan.items.size() * sizeof(dash_item) + plan.segments.size() * sizeof(dash_segment) +
         plan.visits.size() * sizeof(dash_visit) + plan.dq_count.size() * sizeof(uint16_t) +
         plan.group_head_by_rank.size() + plan.note.size();
}

namespace {

constexpr uint32_t kAlign = 16;
uint32_t align_up(uint64_t n) {
  return uint32_t((n + kAlign - 1) / kAlign * kAlign);
}

// The problem a unit template is built and validated on: one sequence, one KV head and its group of query heads.
Problem unit_problem(const TemplateKey& k) {
  Problem p;
  p.batch = 1;
  p.heads_kv = 1;
  p.heads_q = k.group_size;
  p.seqlen_q = k.seqlen_q;
  p.seqlen_k = k.seqlen_k;
  p.head_dim = k.head_dim;
  p.mask = static_cast<Mask>(k.mask);
  p.window_left = k.window_left;
  p.window_right = k.window_right;
  return p;
}

// Waves are a property of the template (docs/DEADLOCK.md): validate it for as many CTAs as a plan could ever
// launch, record its wave, and let each request compare the wave with its own P.
constexpr int32_t kValidateForAnyP = std::numeric_limits<int32_t>::max();

// The validated template of a filled unit; `wave_bound`: the draft's bound on its wave.
std::shared_ptr<UnitTemplate> validated_template(Plan plan, const Problem& unit, int32_t wave_bound) {
  auto t = std::make_shared<UnitTemplate>();
  t->plan = std::move(plan);
  const ValidationReport report = validate_plan(t->plan, kValidateForAnyP);
  if (!report.ok) {
    throw Error("schedule", std::string(planner_name(t->plan.planner())) + " built an invalid plan for " +
                                unit.describe() + ": " + report.reason);
  }
  // plan_for_async resolves a template still being filled by this bound (a candidate whose bound fits P is taken
  // without its wave): a larger wave would break that resolution's promise.
  if (report.min_coresident_ctas > wave_bound) {
    throw Error("schedule", std::string(planner_name(t->plan.planner())) + " built a plan for " + unit.describe() +
                                " whose wave (" + std::to_string(report.min_coresident_ctas) +
                                " CTAs) exceeds its draft's bound (" + std::to_string(wave_bound) + ")");
  }
  t->wave = report.min_coresident_ctas;
  t->waits_only_backward = report.waits_only_backward;
  t->plan.header.min_coresident_ctas = t->wave;
  if (t->waits_only_backward) t->plan.header.flags |= DASH_PLAN_WAITS_ONLY_BACKWARD;
  return t;
}

detail::UnitDraftPtr draft_template(const TemplateKey& key) {
  return detail::draft_unit(unit_problem(key), static_cast<Planner>(key.planner), {key.block_m, key.block_n},
                            static_cast<GqaMode>(key.gqa_mode), 1);
}

// Fault injection for the tests of the paths a slow or failing build takes (dash_plan_create_async's backward then
// copies the tables on its stream, or stops it): DASH_ATTN_TEST_TEMPLATE_BUILDS=slow makes every build take half a
// second more after its fill; =fail then makes it fail, as a planner bug that validation catches would.
void inject_build_faults() {
  const char* value = std::getenv("DASH_ATTN_TEST_TEMPLATE_BUILDS");
  if (value == nullptr) return;
  const std::string mode = value;
  if (mode != "slow" && mode != "fail") return;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  if (mode == "fail") throw Error("schedule", "the template's build failed on purpose (DASH_ATTN_TEST_TEMPLATE_BUILDS=fail)");
}

std::shared_ptr<const UnitTemplate> finish_template(const TemplateKey& key, detail::UnitDraftPtr draft) {
  const int32_t bound = detail::drafted_wave_bound(*draft);
  Plan filled = detail::fill_unit(std::move(draft));
  inject_build_faults();
  std::shared_ptr<UnitTemplate> t = validated_template(std::move(filled), unit_problem(key), bound);
  t->key = key;
  return t;
}

std::shared_ptr<const UnitTemplate> build_template(const TemplateKey& key) {
  return finish_template(key, draft_template(key));
}

// Offsets and total size of a blob whose header is `h`, with tables of these lengths (Plan::blob_header).
dash_plan_header blob_header_for(dash_plan_header h, size_t items, size_t segments, size_t visits, size_t dq_counts,
                                 size_t group) {
  uint64_t offset = align_up(sizeof(dash_plan_header));
  auto place = [&offset](uint64_t bytes) {
    const uint32_t at = uint32_t(offset);
    offset = align_up(offset + bytes);
    return at;
  };
  h.items_offset = place(items * sizeof(dash_item));
  h.segments_offset = place(segments * sizeof(dash_segment));
  h.visits_offset = place(visits * sizeof(dash_visit));
  h.dq_count_offset = place(dq_counts * sizeof(uint16_t));
  h.group_head_by_rank_offset = place(group);
  if (offset > std::numeric_limits<uint32_t>::max()) throw Error("plan", "blob larger than 4 GiB");
  h.total_bytes = uint32_t(offset);
  return h;
}

std::shared_ptr<const TemplateLayout> layout_of(const TemplateKey& key, const detail::UnitDraft& draft) {
  const Plan& plan = detail::drafted_layout(draft);
  auto layout = std::make_shared<TemplateLayout>();
  layout->key = key;
  layout->header = plan.header;
  layout->blob_header = blob_header_for(plan.header, plan.items.size(), plan.segments.size(),
                                        size_t(plan.header.visits_per_unit), plan.dq_count.size(),
                                        plan.group_head_by_rank.size());
  layout->wave_bound = detail::drafted_wave_bound(draft);
  layout->note = plan.note;
  return layout;
}

struct KeyHash {
  size_t operator()(const TemplateKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    std::apply([&h](auto... f) { ((h = (h ^ uint32_t(f)) * 1099511628211ull), ...); }, k.fields());
    return size_t(h);
  }
};

// A template `get` found: validated, or (start_or_get) still being filled with its layout known.
struct Fetched {
  std::shared_ptr<const UnitTemplate> unit;
  std::shared_ptr<const TemplateLayout> layout;
  std::shared_future<std::shared_ptr<const UnitTemplate>> tables;
};

// Process-wide, least-recently-used first out once the tables exceed kCacheBytes. Templates are built outside
// the lock (a large one takes milliseconds); two threads asking for the same new key both build it, and the
// second insert finds the first one's. A template being filled on a thread of its own (start_or_get) is in
// `filling_` until it is cached: asking for it then waits for that build instead of starting another.
class TemplateCache {
 public:
  static constexpr size_t kCacheBytes = size_t(1) << 30;

  std::shared_ptr<const UnitTemplate> get(const TemplateKey& key) {
    std::shared_future<std::shared_ptr<const UnitTemplate>> filling;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto found = find(key)) return found;
      if (auto it = filling_.find(key); it != filling_.end()) filling = it->second.tables;
    }
    if (filling.valid()) return filling.get();  // rethrows its build's error
    std::shared_ptr<const UnitTemplate> built = build_template(key);
    std::lock_guard<std::mutex> lock(mutex_);
    return insert(key, std::move(built));
  }

  // The validated template if cached; else its layout, with its fill and validation started on a thread of its own
  // (or already running): `tables` gives the template (cached once built) or the build's error.
  Fetched start_or_get(const TemplateKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = find(key)) return {found, nullptr, {}};
    if (auto it = filling_.find(key); it != filling_.end()) return it->second;
    // The draft runs under the lock (microseconds to a fraction of a millisecond): a second caller of the same key
    // then finds it in `filling_` instead of drafting it again.
    detail::UnitDraftPtr draft = draft_template(key);
    auto promise = std::make_shared<std::promise<std::shared_ptr<const UnitTemplate>>>();
    Fetched pending{nullptr, layout_of(key, *draft), promise->get_future().share()};
    filling_[key] = pending;
    // Detached: it owns what it reads (the draft, the key, the promise) and ends by publishing the template. The cache
    // is never destroyed (cache()), so `this` outlives it.
    std::thread([this, key, promise, draft = std::move(draft), generation = generation_]() mutable {
      std::shared_ptr<const UnitTemplate> built;
      std::exception_ptr error;
      try {
        built = finish_template(key, std::move(draft));
      } catch (...) {
        error = std::current_exception();
      }
      {
        // Cached and out of `filling_` in one step, before the promise is kept: whoever then asks finds it cached. A
        // clear() since the draft dropped this build's entry (and maybe started another): it is neither cached nor
        // erased then.
        std::lock_guard<std::mutex> lock(mutex_);
        if (generation == generation_) {
          if (built != nullptr) built = insert(key, std::move(built));
          filling_.erase(key);
        }
      }
      if (error) promise->set_exception(error);
      else promise->set_value(std::move(built));
    }).detach();
    return pending;
  }

  TemplateCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    TemplateCacheStats s = stats_;
    s.entries = int64_t(order_.size());
    return s;
  }

  // Builds still running finish for their callers but are not cached.
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    index_.clear();
    order_.clear();
    filling_.clear();
    ++generation_;
    stats_.bytes = 0;
  }

 private:
  // Under the lock.
  std::shared_ptr<const UnitTemplate> find(const TemplateKey& key) {
    if (auto it = index_.find(key); it != index_.end()) {
      ++stats_.hits;
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    return nullptr;
  }

  // Under the lock.
  std::shared_ptr<const UnitTemplate> insert(const TemplateKey& key, std::shared_ptr<const UnitTemplate> built) {
    if (auto it = index_.find(key); it != index_.end()) return it->second->second;
    ++stats_.builds;
    order_.emplace_front(key, built);
    index_[key] = order_.begin();
    stats_.bytes += built->bytes();
    while (stats_.bytes > kCacheBytes && order_.size() > 1) {  // the newest entry always stays
      stats_.bytes -= order_.back().second->bytes();
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return built;
  }

  using Entry = std::pair<TemplateKey, std::shared_ptr<const UnitTemplate>>;
  std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<TemplateKey, std::list<Entry>::iterator, KeyHash> index_;
  std::unordered_map<TemplateKey, Fetched, KeyHash> filling_;
  uint64_t generation_ = 0;  // clear()s so far
  TemplateCacheStats stats_;
};

TemplateCache& cache() {
  static TemplateCache* instance = new TemplateCache;  // never destroyed: usable from other static destructors
  return *instance;
}

// Appends in place: a resolution builds its note from these, and temporaries were a good part of its cost.
void append_candidate_name(std::string& note, Candidate c, bool with_mode) {
  if (with_mode) {
    note += gqa_mode_name(c.mode);
    note += ' ';
  }
  note += planner_name(c.planner);
}

std::string candidate_name(Candidate c, bool with_mode) {
  std::string name;
  append_candidate_name(name, c, with_mode);
  return name;
}

// DASH_GQA_AUTO_NONDETERMINISTIC on a grouped problem: the GQA mode follows the whole problem (batch included).
bool gqa_mode_by_problem(const PlanRequest& req) {
  return req.problem.group_size() > 1 && req.gqa_mode == GqaMode::AutoNondeterministic;
}

// DASH_GQA_AUTO_NONDETERMINISTIC with schedule auto, causal or window mask: the BALANCED non-deterministic plan. A
// non-deterministic backward has no waits, so only how evenly the CTAs' work ends matters. The lock-step
// templates' items are equal (several KV tiles each), and where their count is not a multiple of the CTAs the last
// round leaves CTAs idle (512 items on 132 CTAs: 3%). Here each KV tile is its own item (the ascending planner's
// template: Q tiles from the diagonal up, as FA3 walks them, so the CTAs of one head add into different dQ tiles),
// and the tickets go item by item across groups of units (DASH_PLAN_ITEM_MAJOR), longest first. A full mask's KV
// tiles are all alike, so it keeps the table's plan (whose shifted orders keep CTAs off each other's dQ tiles).
bool balanced_nondeterministic(const PlanRequest& req) {
  return req.gqa_mode == GqaMode::AutoNondeterministic && req.schedule.kind == Schedule::Kind::Auto &&
         req.problem.mask != Mask::Full;
}

// The balanced plan's group of units: as many as keep their Q, dO and fp32 dQ accumulators within 40 MiB of L2,
// rounded down to a power of two (FA3's backward sizes the head sections of its LPT grid so; all units at once, on
// the H100 2026-12-05, ran 0.54-1.00 of the table's plan: 0.77 at head dim 64 2 x 8k causal, 64 units of 2 CTAs
// each; groups giving 4 rounds of items ran 0.96-1.03). At least one unit, at most all. The rows are the Q tiles'
// (the accumulator's), so every length of a geometry class gets the same group. `h`: bound (problem, units).
int32_t balanced_group_units(const dash_plan_header& h) {
  constexpr int64_t kL2Budget = int64_t(40) << 20;
  const int64_t rows = int64_t(h.num_q_tiles) * h.block_m;
  const int64_t head_dim_v = h.problem.head_dim_v ? h.problem.head_dim_v : h.problem.head_dim;
  const int64_t bytes_per_row = 2 * (h.problem.head_dim + head_dim_v) + 4 * int64_t(h.problem.head_dim);
  const int64_t bytes_per_unit = rows * std::max(h.heads_per_unit, 1) * bytes_per_row;
  int64_t group = 1;
  while (2 * group * bytes_per_unit <= kL2Budget) group *= 2;
  return int32_t(std::clamp<int64_t>(group, 1, std::max(h.num_units, 1)));
}

dash_plan_header bind_header(const dash_plan_header& template_header, const PlanRequest& req, bool balanced);  // below

// The candidates a request allows, best first. Named planner: that planner, in the GQA mode requested (for Auto,
// the table's preference between split and pack for it). auto: the table's list, filtered by the GQA mode.
// auto-fastest: every allowed pair, ordered by the simulated makespan of the real problem.
std::vector<Candidate> requested_candidates(const PlanRequest& req, TileShape tiles, std::string& note) {
  const Problem& p = req.problem;
  const bool grouped = p.group_size() > 1;
  // Whether auto may pack is decided once (a table row lists several pack candidates), and said in the note when
  // the size of a packed template (its planning time) rules it out.
  std::optional<bool> pack_fits;
  auto mode_allowed = [&](GqaMode m) {
    if (!grouped) return m == GqaMode::SplitHeads;
    if (!is_auto(req.gqa_mode)) return m == req.gqa_mode;
    if (m == GqaMode::SplitHeads) return true;
    if (!pack_fits) {
      pack_fits = !plan_limit_violation(p, tiles, GqaMode::PackGroup, req.num_ctas);
      if (*pack_fits && !auto_may_pack(p, tiles)) {
        pack_fits = false;
        note += "; pack left out (a packed unit would exceed auto's 2^20 tile pairs, a long first call to plan)";
      }
    }
    return *pack_fits;
  };
  std::vector<Candidate> out;
  out.reserve(2 * all_planners().size());  // every (GQA mode, planner) pair at most
  if (req.schedule.kind == Schedule::Kind::AutoFastest) {
    const CostModel cost = req.cost ? *req.cost : CostModel::for_problem(p, tiles);
    std::vector<std::pair<double, Candidate>> scored;
    for (GqaMode m : {GqaMode::SplitHeads, GqaMode::PackGroup}) {
      if (!mode_allowed(m)) continue;
      for (Planner planner : all_planners()) {
        const Candidate c{m, planner};
        Plan plan = build_unvalidated(p, planner, tiles, m, req.num_ctas);
        const ValidationReport report = validate_plan(plan, req.num_ctas);
        if (!report.ok) {
          note += "; " + candidate_name(c, grouped) + " skipped (" + report.reason + ")";
          continue;
        }
        if (report.waits_only_backward) plan.header.flags |= DASH_PLAN_WAITS_ONLY_BACKWARD;
        plan.header = bind_header(plan.header, req, false);  // the claim order it would run in (slots)
        const SimResult sim =
            simulate(plan, req.num_ctas, cost, SimOptions{.record_spans = false, .critical_path = false});
        if (sim.deadlocked) continue;  // cannot happen for a validated plan; never choose it
        std::ostringstream makespan;  // as streams print a double
        makespan << sim.makespan;
        note += "; " + candidate_name(c, grouped) + " " + makespan.str();
        scored.push_back({sim.makespan, c});
      }
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& s : scored) out.push_back(s.second);
    return out;
  }
  // A request that fixes the GQA mode (or has no group) takes the table's order of planners in that mode.
  // AutoNondeterministic takes it in pack mode first, then in split mode: resolve takes a packed candidate only where
  // its work items fill the CTAs.
  const bool fixed_mode = !grouped || !is_auto(req.gqa_mode);
  const GqaMode fixed = grouped ? req.gqa_mode : GqaMode::SplitHeads;
  const bool pack_first = gqa_mode_by_problem(req);
  for (int pass = 0; pass < (pack_first ? 2 : 1); ++pass) {
    for (Candidate c : auto_candidates(p, tiles)) {
      if (fixed_mode) c.mode = fixed;
      if (pack_first) c.mode = pass == 0 ? GqaMode::PackGroup : GqaMode::SplitHeads;
      if (!mode_allowed(c.mode)) continue;
      if (req.schedule.kind == Schedule::Kind::Planner && c.planner != req.schedule.planner) continue;
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
  }
  if (req.schedule.kind == Schedule::Kind::Planner && out.empty()) {  // the table ranks every pair; be safe
    out.push_back({fixed_mode ? fixed : GqaMode::SplitHeads, req.schedule.planner});
  }
  return out;
}

// Schedule auto: where no dQ accumulator can get more partials than this (one per KV tile), a non-deterministic
// backward runs the ordered adds (DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED). Their first partial is a store, where
// the unordered adds need zeros written first (the preprocess's pass over the accumulators) and add into them: with
// 1-4 partials per accumulator that is 25-50% more add traffic plus the zeroing. In the records of 2026-12-06 at 512
// tokens (4 KV tiles) our deterministic backward beat our non-deterministic one on the same plan, causal by 11-24%
// at head dim 128 (H100 211 against 170 TFLOP/s, H200 244 against 218) and 3-10% at 64, full by 0-3%; at 1k
// (8 tiles) it was 1-4% slower at head dim 128.
constexpr int32_t kOrderedNondeterministicMaxPartials = 4;

bool nondeterministic_runs_ordered(const dash_plan_header& h, const PlanRequest& req) {
  return req.schedule.kind != Schedule::Kind::Planner && !(h.flags & DASH_PLAN_NONDETERMINISTIC_ONLY) &&
         h.num_kv_tiles <= kOrderedNondeterministicMaxPartials;
}

// `balanced`: the resolution chose the balanced plan (balanced_nondeterministic) with this template.
dash_plan_header bind_header(const dash_plan_header& template_header, const PlanRequest& req, bool balanced) {
  dash_plan_header h = template_header;
  h.problem = req.problem.to_c();
  h.num_units = req.problem.batch * (h.gqa_mode == DASH_GQA_PACK_GROUP ? req.problem.heads_kv : req.problem.heads_q);
  h.num_ctas = req.num_ctas;
  // The GQA mode chosen by the batch: a sequence's bits would depend on it (dash_bwd refuses a deterministic run).
  if (gqa_mode_by_problem(req)) h.flags |= DASH_PLAN_NONDETERMINISTIC_ONLY;
  // The balanced plan: its claim order is the problem's (balanced_nondeterministic).
  if (balanced) {
    h.flags |= DASH_PLAN_NONDETERMINISTIC_ONLY | DASH_PLAN_ITEM_MAJOR;
    h.ticket_group_units = balanced_group_units(h);
  }
  if (nondeterministic_runs_ordered(h, req)) h.flags |= DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED;
  // A template cut into slots (never the balanced plan's, whose ranks are in claim order) is claimed slot by slot
  // across groups of units: unit by unit, a slot's successors would be claimed before it ends and their CTAs would
  // wait. The claim order does not enter the bits.
  if (h.items_per_slot > 1) {
    h.flags |= DASH_PLAN_ITEM_MAJOR;
    h.ticket_group_units =
        detail::slot_claim_group(h.num_units, h.items_per_unit / h.items_per_slot, h.items_per_slot, req.num_ctas);
  }
  return h;
}

// The resolution's note, then the template's own (its generalisations). `h`: the bound header.
std::string bound_note(const std::string& note, const std::string& generalised, const dash_plan_header& h) {
  std::string out;
  out.reserve(note.size() + 2 + generalised.size());
  out = note;
  if (h.flags & DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED)
    out += "; non-deterministic backwards run the ordered adds too (at most " +
           std::to_string(kOrderedNondeterministicMaxPartials) + " partials per dQ tile: the first is stored, no "
           "zeroing)";
  if (!generalised.empty()) {
    if (!out.empty()) out += ". ";
    out += generalised;
  }
  return out;
}

BoundPlan bound_plan(std::shared_ptr<const UnitTemplate> unit, const PlanRequest& req, const std::string& note,
                     bool balanced) {
  BoundPlan out;
  out.header = bind_header(unit->plan.header, req, balanced);
  out.note = bound_note(note, unit->plan.note, out.header);
  out.unit = std::move(unit);
  return out;
}

// What a resolution fetches for a template key. plan_for: the validated template. plan_for_async: the cache's
// template or, while it is being filled, its layout, which is taken when its wave bound fits P; the validated
// template is waited for only when the bound does not fit (then only its wave says whether it runs). Either way a
// candidate is taken exactly when plan_for takes it: the validated wave is at most the bound.
Fetched fetch_template(const TemplateKey& key, bool allow_filling, int32_t num_ctas) {
  if (!allow_filling) return {unit_template(key), nullptr, {}};
  Fetched f = cache().start_or_get(key);
  if (f.unit == nullptr && f.layout->wave_bound > num_ctas) return {f.tables.get(), nullptr, {}};
  return f;
}

int32_t fetched_wave(const Fetched& f) { return f.unit ? f.unit->wave : f.layout->wave_bound; }
const dash_plan_header& fetched_header(const Fetched& f) { return f.unit ? f.unit->plan.header : f.layout->header; }

// ---- The resolution memo (plan_internal.hpp) ----

// Everything plan_for's resolution reads of a request: every problem field (the size limits see batch and heads),
// the tiles (defaults applied), P, the requested GQA mode and the schedule. Not the cost model: auto-fastest, the
// one schedule that reads it, is never memoised.
using ResolutionKey = std::array<int32_t, 16>;

ResolutionKey resolution_key(const PlanRequest& req, TileShape tiles) {
  const Problem& p = req.problem;
  return {p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim, p.value_head_dim(), int32_t(p.mask),
          p.window_left, p.window_right, tiles.block_m, tiles.block_n, req.num_ctas, int32_t(req.gqa_mode),
          int32_t(req.schedule.kind), int32_t(req.schedule.planner)};
}

struct ResolutionKeyHash {
  size_t operator()(const ResolutionKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int32_t f : k) h = (h ^ uint32_t(f)) * 1099511628211ull;
    return size_t(h);
  }
};

// Why a resolution passed over a template it fetched: its wave exceeds P, or (DASH_GQA_AUTO_NONDETERMINISTIC) it
// is a packed template whose work items leave CTAs idle or wait for the balanced plan, or a packed one after such a
// template.
enum class SkipReason : uint8_t { Wave, Items };

struct Skipped {
  TemplateKey key;
  SkipReason reason;
};

// What a full resolution did: the templates it fetched and skipped (in order, with why), the one it chose, and its
// note up to the choice. Replaying it fetches the same templates in the same order from the template cache (which
// counts, builds and orders them as the full resolution would), so only the candidate search is saved.
struct Resolution {
  std::vector<Skipped> skipped;
  TemplateKey chosen;
  bool balanced = false;  // the chosen template runs as the balanced plan (bind_header)
  std::string note;
};

// Entries are a few hundred bytes (the note); no templates are held here.
using ResolutionMemo = detail::LruMemo<ResolutionKey, std::shared_ptr<const Resolution>, ResolutionKeyHash>;
ResolutionMemo& resolution_memo() {
  static ResolutionMemo* memo = new ResolutionMemo(16384);  // never destroyed
  return *memo;
}

std::atomic<int64_t> g_resolution_hits{0};
std::atomic<int64_t> g_resolution_misses{0};

// A resolution's outcome: the template it chose, whether as the balanced plan, and its note up to the choice.
struct Resolved {
  Fetched chosen;
  bool balanced;
  std::string note;
};

// The outcome a memoised resolution gives; nullopt if a template's wave no longer agrees with it (templates are
// deterministic, so this does not happen; resolving afresh would then be right). Templates skipped for their items
// are fetched again only: their items follow from the template and the memo key (batch, heads, P).
std::optional<Resolved> replay(const Resolution& r, const PlanRequest& req, bool allow_filling) {
  for (const Skipped& s : r.skipped) {
    const Fetched f = fetch_template(s.key, allow_filling, req.num_ctas);
    if (s.reason == SkipReason::Wave && fetched_wave(f) <= req.num_ctas) return std::nullopt;
  }
  Fetched chosen = fetch_template(r.chosen, allow_filling, req.num_ctas);
  if (fetched_wave(chosen) > req.num_ctas) return std::nullopt;
  return Resolved{std::move(chosen), r.balanced, r.note};
}

} // namespace

std::shared_ptr<const UnitTemplate> unit_template(const TemplateKey& key) { return cache().get(key); }
TemplateCacheStats template_cache_stats() { return cache().stats(); }
void clear_template_cache() {
  cache().clear();
  resolution_memo().clear();
  detail::clear_auto_candidates_memo();
}

namespace detail {

// plan_internal.hpp: the group of units whose slots are claimed together (plan_format.h, "Slots") for `units` units
// of `slots` slots of `width` items each on `ctas` CTAs. A list-scheduling model with slots of equal length: CTAs
// claim tickets as they free up, and a slot runs (one time step) once its last item is claimed and its unit's
// previous slot has ended. Groups of fewer than ctas / width units leave CTAs idle while a slot's successor waits for
// it; past twice that, a unit's later slots queue behind other units' first ones (a model sweep found every best
// group in between, notes of 2026-12-07). The least makespan, the smallest such group among equals. Times are whole
// steps, so the free CTAs are counted per step: O(units x slots) per group. bind_header runs on every plan_for, a
// seen request's too, so the answer is memoised (a few thousand entries at most: the memo is emptied when full).
int32_t slot_claim_group(int32_t units, int32_t slots, int32_t width, int32_t ctas) {
  if (units < 1 || width > ctas) return 1;  // no plan to run: the validated wave (a slot) exceeds the CTAs
  static std::mutex memo_mutex;
  static std::map<std::array<int32_t, 4>, int32_t> memo;
  const std::array<int32_t, 4> key{units, slots, width, ctas};
  {
    const std::lock_guard<std::mutex> lock(memo_mutex);
    if (const auto it = memo.find(key); it != memo.end()) return it->second;
  }
  const int32_t per_round = std::max(ctas / width, 1);
  const int32_t steps = units * slots + 1;  // no run is longer than its slots one after another
  std::vector<int32_t> free_at(size_t(steps) + 1, 0), slot_end(size_t(units), 0);
  const auto makespan = [&](int32_t group) {
    std::fill(free_at.begin(), free_at.end(), 0);
    std::fill(slot_end.begin(), slot_end.end(), 0);
    free_at[0] = ctas;
    int32_t earliest = 0, end = 0;
    for (int32_t first = 0; first < units; first += group)
      for (int32_t slot = 0; slot < slots; ++slot)
        for (int32_t u = first; u < std::min(units, first + group); ++u) {
          int32_t wanted = width, claimed_by = 0;  // the step at which the slot's last item is claimed
          while (wanted > 0) {
            while (free_at[size_t(earliest)] == 0) ++earliest;
            const int32_t take = std::min(wanted, free_at[size_t(earliest)]);
            free_at[size_t(earliest)] -= take;
            wanted -= take;
            claimed_by = earliest;
          }
          const int32_t start = std::max(claimed_by, slot_end[size_t(u)]);
          slot_end[size_t(u)] = start + 1;
          free_at[size_t(start) + 1] += width;
          end = std::max(end, start + 1);
        }
    return end;
  };
  // At most per_round slots run at a time, so no group beats ceil(units x slots / per_round) steps: unit counts that
  // are a multiple of per_round reach it with a group of per_round and take no search.
  const int32_t bound = (units * slots + per_round - 1) / per_round;
  const int32_t smallest = std::min(units, per_round), largest = std::min(units, 2 * per_round);
  int32_t best = smallest, best_time = makespan(smallest);
  for (int32_t group = smallest + 1; group <= largest && best_time > bound; ++group)
    if (const int32_t t = makespan(group); t < best_time) best = group, best_time = t;
  const std::lock_guard<std::mutex> lock(memo_mutex);
  if (memo.size() >= 4096) memo.clear();
  memo.emplace(key, best);
  return best;
}

PlanMemoStats plan_memo_stats() {
  PlanMemoStats stats;
  auto_candidates_memo_stats(stats);
  stats.resolution_hits = g_resolution_hits.load(std::memory_order_relaxed);
  stats.resolution_misses = g_resolution_misses.load(std::memory_order_relaxed);
  stats.resolution_entries = int64_t(resolution_memo().size());
  return stats;
}

}  // namespace detail

namespace {

// plan_for's checks of a request, before anything is resolved; its tiles, defaults applied.
TileShape checked_tiles(const PlanRequest& req) {
  req.problem.validate();
  if (req.num_ctas < 1) throw Error("num_ctas", "must be >= 1, got " + std::to_string(req.num_ctas));
  TileShape tiles = req.tiles;
  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(req.problem.head_dim);
  if (tiles.block_m < 1) throw Error("block_m", "must be >= 1");
  if (tiles.block_n < 1) throw Error("block_n", "must be >= 1");
  // Every size limit before any planner or simulation runs: an impossible size fails at once.
  check_plan_limits(req.problem, tiles, req.gqa_mode, req.num_ctas);
  return tiles;
}

}  // namespace

namespace detail {

// Why the class holds: requested_candidates reads auto_candidates (the row) and the tile counts (the pack mode's
// limits and auto's pack bound, auto_may_pack); the candidate loop reads the limits (tile counts), the templates
// (template_key's representative lengths) and their waves; the note names candidates and waves. Only a limit's
// message quotes the lengths themselves.
std::optional<ResolutionClass> resolution_class(const PlanRequest& req) {
  const TileShape tiles = checked_tiles(req);
  if (req.schedule.kind == Schedule::Kind::AutoFastest || !plan_memo_enabled()) return std::nullopt;
  if (req.problem.group_size() > 1 && plan_limit_violation(req.problem, tiles, GqaMode::PackGroup, req.num_ctas))
    return std::nullopt;  // the split mode passed checked_tiles
  const bool reads_row = req.schedule.kind == Schedule::Kind::Auto ||
                         (req.problem.group_size() > 1 && is_auto(req.gqa_mode));
  const Problem representative = geometry_representative(req.problem, tiles);
  return ResolutionClass{reads_row ? auto_table_row(req.problem) : ResolutionClass::kUnread,
                         representative.seqlen_q, representative.seqlen_k};
}

ResolutionClassifier::ResolutionClassifier(const PlanRequest& base, int32_t longest_q, int32_t longest_k) {
  PlanRequest longest = base;
  longest.problem.seqlen_q = longest_q;
  longest.problem.seqlen_k = longest_k;
  try {
    tiles_ = checked_tiles(longest);
  } catch (const Error&) {
    return;  // some request may fail: each is checked (and fails) as resolution_class would
  }
  if (base.schedule.kind == Schedule::Kind::AutoFastest || !plan_memo_enabled()) {
    mode_ = Mode::NoClass;
    return;
  }
  if (longest.problem.group_size() > 1 &&
      plan_limit_violation(longest.problem, tiles_, GqaMode::PackGroup, longest.num_ctas))
    return;  // some requests may have no class: each is checked
  reads_row_ = base.schedule.kind == Schedule::Kind::Auto ||
               (base.problem.group_size() > 1 && is_auto(base.gqa_mode));
  mode_ = Mode::Classes;
}

std::optional<ResolutionClass> ResolutionClassifier::classify(const PlanRequest& req) {
  if (mode_ == Mode::PerRequest) return resolution_class(req);
  if (mode_ == Mode::NoClass) return std::nullopt;
  const Problem& p = req.problem;
  if (!last_ || !last_->contains(p.seqlen_q, p.seqlen_k)) last_ = geometry_class(p, tiles_);
  // Without a class of lengths (never, once the limits pass) geometry_representative keeps the lengths.
  const int32_t rep_q = last_ ? last_->representative_q : p.seqlen_q;
  const int32_t rep_k = last_ ? last_->representative_k : p.seqlen_k;
  return ResolutionClass{reads_row_ ? auto_table_row(p) : ResolutionClass::kUnread, rep_q, rep_k};
}

}  // namespace detail

namespace {

// Why the balanced plan (bound header `bound`) is not taken on P CTAs; empty where it is. Taken where one group of
// units holds an item for every CTA (else the end is ragged: the greedy model ends 12-28% late with one packed unit of
// 64 items), and where an item holds 8 visits on average: shorter ones cost a ticket, a prologue and a dK/dV epilogue
// per KV tile, which the table's several-tile items share (on the H200, 2026-12-05, head dim 64 causal: 0.96 / 0.97
// at 512 / 1k, 2.5 / 4.5 visits per item; 1.00-1.03 from 2k, 8.5; head dim 128: 1.00 at 512, 5; 1.01-1.04 from 1k,
// 9).
std::string balanced_unfit(const dash_plan_header& bound, int32_t num_ctas) {
  constexpr int32_t kMinVisitsPerItem = 8;
  const int64_t group_items = int64_t(bound.ticket_group_units) * bound.items_per_unit;
  if (group_items < num_ctas)
    return "a group of " + std::to_string(bound.ticket_group_units) + " unit(s) has " + std::to_string(group_items) +
           " work items for " + std::to_string(num_ctas) + " CTAs";
  if (bound.visits_per_unit < int64_t(kMinVisitsPerItem) * bound.items_per_unit)
    return std::to_string(bound.visits_per_unit) + " visits over " + std::to_string(bound.items_per_unit) +
           " items, under " + std::to_string(kMinVisitsPerItem) + " each";
  return {};
}

// What a packed candidate does under DASH_GQA_AUTO_NONDETERMINISTIC (gqa_mode_by_problem), given its work items
// (batch x KV heads x the template's items per unit): run, be skipped, or wait for the balanced plan (run where that
// plan does not fit).
// Packed units are faster wherever they keep every CTA busy, and slower where they leave some idle (issue 14,
// 2026-12-04: +13% at 32/8 heads, 8 x 2k; -1.5% at 28/4, 2 x 8k with 128 items on 132 CTAs). Where the balanced split
// plan follows, packed items must also fill 3 rounds, else they wait for it: with 256 packed items (32/8 heads, 2 x 8k
// causal; 28/4, 4 x 4k) the balanced plan ran 1.016 / 1.010 of the packed one on the H200 (2026-12-05), 1.016 / 1.100
// on an H100 (2026-12-06); with 512 (32/8 at 1k-4k) packing led by 6-24%.
enum class PackVerdict : uint8_t { Run, Skip, Defer };
constexpr int64_t kPackRoundsBeforeBalanced = 3;
PackVerdict pack_verdict(const PlanRequest& req, int64_t items) {
  if (items < req.num_ctas) return PackVerdict::Skip;
  if (balanced_nondeterministic(req) && items < kPackRoundsBeforeBalanced * req.num_ctas) return PackVerdict::Defer;
  return PackVerdict::Run;
}

// plan_for's resolution: the schedule's candidates in order, the first whose template runs on P CTAs.
Resolved resolve(const PlanRequest& req, bool allow_filling) {
  const TileShape tiles = checked_tiles(req);

  // A request seen before replays its resolution: one memo look-up, then the template cache as before.
  const bool memoise = req.schedule.kind != Schedule::Kind::AutoFastest && detail::plan_memo_enabled();
  ResolutionKey memo_key{};
  if (memoise) {
    memo_key = resolution_key(req, tiles);
    std::shared_ptr<const Resolution> seen;
    if (resolution_memo().find(memo_key, &seen)) {
      if (std::optional<Resolved> out = replay(*seen, req, allow_filling)) {
        g_resolution_hits.fetch_add(1, std::memory_order_relaxed);
        return std::move(*out);
      }
    }
  }
  auto record = std::make_shared<Resolution>();

  const bool grouped = req.problem.group_size() > 1;
  // Built by appending into one buffer: a string stream or temporaries cost more than the rest of a resolution whose
  // template is cached.
  std::string note;
  note.reserve(160);
  const bool automatic = req.schedule.kind != Schedule::Kind::Planner || (grouped && is_auto(req.gqa_mode));
  const bool pack_by_items = gqa_mode_by_problem(req);
  bool pack_decided = false;  // pack_by_items: the first packed candidate was skipped or deferred; so are the rest
  if (automatic) {
    note = req.schedule.kind == Schedule::Kind::AutoFastest ? "auto-fastest (simulated on this problem)"
           : req.schedule.kind == Schedule::Kind::Auto      ? "auto (offline table)"
                                                             : "GQA mode auto (offline table)";
    if (balanced_nondeterministic(req))
      note += ", the balanced non-deterministic plan where it fits (one KV tile per item, claimed item by item across "
              "groups of units sized by the L2)";
    if (pack_by_items) note += ", GQA packed where its work items fill the CTAs (non-deterministic only)";
    note += " on " + std::to_string(req.num_ctas) + " CTAs";
  }
  const Problem representative = geometry_representative(req.problem, tiles);  // the key's lengths, every candidate's
  // The balanced plan runs in split heads, ahead of the table's split candidates and behind its packed ones: on the
  // H200 (2026-12-05) the balanced split plan ran 0.81 / 0.90 / 0.95 of the packed table plan at 32/8 heads 1k / 2k /
  // 4k causal (1.02 at 2 x 8k). Packed balanced units would rarely fill the CTAs (below): one packed unit of 4-7
  // heads takes most of the L2 budget alone. In split heads a group's consecutive units are the query heads that
  // share a KV head, so they read its K and V from the L2 at the same time.
  std::vector<std::pair<Candidate, bool>> order;  // (candidate, as the balanced plan)
  for (const Candidate& c : requested_candidates(req, tiles, note)) {
    const bool first_split = c.mode == GqaMode::SplitHeads && (order.empty() || order.back().first.mode != c.mode);
    if (first_split && balanced_nondeterministic(req))
      order.push_back({{GqaMode::SplitHeads, Planner::Ascending}, true});
    order.push_back({c, false});
  }
  // Records the choice (with the templates skipped before it, for the memo) and returns it.
  auto choose = [&](const Candidate& c, const TemplateKey& key, bool balanced, Fetched fetched) {
    if (automatic) {
      note += balanced ? "; chose balanced " : "; chose ";
      append_candidate_name(note, c, grouped);
    }
    record->chosen = key;
    record->balanced = balanced;
    record->note = std::move(note);
    if (memoise) {
      g_resolution_misses.fetch_add(1, std::memory_order_relaxed);
      resolution_memo().insert(memo_key, record);
    }
    return Resolved{std::move(fetched), record->balanced, record->note};
  };
  // A packed candidate that waits for the balanced plan (below): it runs where that plan does not, i.e. once the
  // loop passes the balanced candidate (skipped for its limits, wave or items) to a split one, or runs out.
  // Fetched again when taken, as a memoised replay fetches its chosen template: both ask the cache alike.
  std::optional<std::pair<Candidate, TemplateKey>> deferred_pack;
  auto take_deferred_pack = [&] {
    return choose(deferred_pack->first, deferred_pack->second, false,
                  fetch_template(deferred_pack->second, allow_filling, req.num_ctas));
  };
  for (const auto& [c, balanced] : order) {
    if (deferred_pack && !balanced && c.mode == GqaMode::SplitHeads) return take_deferred_pack();
    if (const auto violation = plan_limit_violation(req.problem, tiles, c.mode, req.num_ctas)) {
      if (!automatic) throw Error(violation->field, violation->message);
      note += "; " + candidate_name(c, grouped) + " skipped (" + violation->message + ")";
      continue;
    }
    const TemplateKey key = representative_template_key(representative, tiles, c.mode, c.planner);
    Fetched fetched = fetch_template(key, allow_filling, req.num_ctas);
    const int32_t wave = fetched_wave(fetched);  // the validated one: a bound that does not fit was waited for
    if (wave > req.num_ctas) {
      const std::string why = "the plan's waits need " + std::to_string(wave) +
                              " co-resident CTAs (its largest wave) but only " + std::to_string(req.num_ctas) +
                              " are launched";
      if (!automatic)
        throw Error("schedule", std::string(planner_name(c.planner)) + " cannot run this problem on " +
                                    std::to_string(req.num_ctas) + " CTAs: " + why);
      note += "; " + candidate_name(c, grouped) + " skipped (" + why + ")";
      record->skipped.push_back({key, SkipReason::Wave});
      continue;
    }
    if (balanced) {
      const std::string why = balanced_unfit(bind_header(fetched_header(fetched), req, true), req.num_ctas);
      if (!why.empty()) {
        note += "; balanced " + candidate_name(c, grouped) + " skipped (" + why + ")";
        record->skipped.push_back({key, SkipReason::Items});
        continue;
      }
    } else if (pack_by_items && c.mode == GqaMode::PackGroup) {
      // A slot's items where the template is cut into slots (the later slots wait for them).
      const int64_t items = int64_t(req.problem.batch) * req.problem.heads_kv * slot_items(fetched_header(fetched));
      // The first packed candidate decides for all (run, skipped or deferred): another planner's packed items never
      // outrank the table's split order.
      const PackVerdict verdict = pack_decided ? PackVerdict::Skip : pack_verdict(req, items);
      if (verdict != PackVerdict::Run) {
        if (verdict == PackVerdict::Defer) deferred_pack.emplace(c, key);
        if (!pack_decided) {
          const std::string n = std::to_string(items), ctas = std::to_string(req.num_ctas);
          note += verdict == PackVerdict::Skip
                      ? "; pack skipped (" + n + " work items for " + ctas + " CTAs)"
                      : "; pack deferred (" + n + " work items, under " + std::to_string(kPackRoundsBeforeBalanced) +
                            " rounds of " + ctas + " CTAs: the balanced plan first)";
        }
        pack_decided = true;
        record->skipped.push_back({key, SkipReason::Items});
        continue;
      }
    }
    return choose(c, key, balanced, std::move(fetched));
  }
  if (deferred_pack) return take_deferred_pack();
  throw Error("schedule", "no planner can run this problem" + note);
}

}  // namespace

BoundPlan plan_for(const PlanRequest& req) {
  Resolved r = resolve(req, false);
  return bound_plan(std::move(r.chosen.unit), req, r.note, r.balanced);
}

AsyncBoundPlan plan_for_async(const PlanRequest& req) {
  Resolved r = resolve(req, true);
  AsyncBoundPlan out;
  if (r.chosen.unit != nullptr) {
    BoundPlan bound = bound_plan(std::move(r.chosen.unit), req, r.note, r.balanced);
    out.unit = std::move(bound.unit);
    out.header = bound.header;
    out.note = std::move(bound.note);
    return out;
  }
  out.header = bind_header(r.chosen.layout->header, req, r.balanced);
  out.note = bound_note(r.note, r.chosen.layout->note, out.header);
  out.layout = std::move(r.chosen.layout);
  out.tables = std::move(r.chosen.tables);
  return out;
}


Plan build_plan(const PlanRequest& req) {
  BoundPlan bound = plan_for(req);
  Plan plan = bound.unit->plan;
  plan.header = bound.header;
  plan.note = bound.note;
  return plan;
}


dash_plan_header Plan::blob_header() const {
  return blob_header_for(header, items.size(), segments.size(), visits.size(), dq_count.size(),
                         group_head_by_rank.size());
}

std::vector<Plan::BlobPart> Plan::blob_parts(const dash_plan_header& h) const {
  return {{0, &h, sizeof h},
          {h.items_offset, items.data(), items.size() * sizeof(dash_item)},
          {h.segments_offset, segments.data(), segments.size() * sizeof(dash_segment)},
          {h.visits_offset, visits.data(), visits.size() * sizeof(dash_visit)},
          {h.dq_count_offset, dq_count.data(), dq_count.size() * sizeof(uint16_t)},
          {h.group_head_by_rank_offset, group_head_by_rank.data(), group_head_by_rank.size()}};
}

std::vector<uint8_t> Plan::to_blob() const {
  const dash_plan_header h = blob_header();
  std::vector<uint8_t> blob(h.total_bytes, 0);
  for (const BlobPart& part : blob_parts(h))
    if (part.bytes) std::memcpy(blob.data() + part.offset, part.data, part.bytes);
  return blob;
}

Plan Plan::from_blob(const uint8_t* data, size_t size) {
  if (data == nullptr || size < sizeof(dash_plan_header)) throw Error("plan", "blob smaller than its header");
  Plan plan;
  std::memcpy(&plan.header, data, sizeof plan.header);
  const dash_plan_header& h = plan.header;
  if (h.magic != DASH_PLAN_MAGIC) throw Error("plan", "not a dash-attn plan (bad magic)");
  if (h.version != DASH_PLAN_FORMAT_VERSION && h.version != 1)  // version 1: head_dim_v was reserved (0)
    throw Error("plan", "format version " + std::to_string(h.version) + ", this build reads " +
                            std::to_string(DASH_PLAN_FORMAT_VERSION));
  if (h.total_bytes != size) throw Error("plan", "blob size does not match its header");
  if (h.items_per_unit < 0 || h.segments_per_unit < 0 || h.visits_per_unit < 0 || h.heads_per_unit < 1 ||
      h.num_q_tiles < 0 || h.group_size < 1)
    throw Error("plan", "negative table size in header");
  // The claim order decodes tickets with ticket_group_units (a division): a group of at least one unit, and only
  // on the plans that have one (dash_ticket_locate).
  if ((h.flags & DASH_PLAN_ITEM_MAJOR) ? h.ticket_group_units < 1 : h.ticket_group_units != 0)
    throw Error("plan", "ticket_group_units " + std::to_string(h.ticket_group_units) +
                            " does not match the flags (DASH_PLAN_ITEM_MAJOR needs >= 1; otherwise 0)");
  // Item by item (no slots) only for the balanced plan, whose ranks are in claim order: a lock-step template's items
  // wait on each other, so its tickets must stay whole units or whole slots.
  if (claimed_item_by_item(h) && !(h.flags & DASH_PLAN_NONDETERMINISTIC_ONLY))
    throw Error("plan", "DASH_PLAN_ITEM_MAJOR without slots (items_per_slot " + std::to_string(h.items_per_slot) +
                            ") needs DASH_PLAN_NONDETERMINISTIC_ONLY");
  // Never together (plan_format.h): the ordered adds run only on plans that a deterministic backward accepts.
  if ((h.flags & DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED) && (h.flags & DASH_PLAN_NONDETERMINISTIC_ONLY))
    throw Error("plan", "flags DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED and DASH_PLAN_NONDETERMINISTIC_ONLY together");
  auto read = [&](uint32_t at, size_t count, size_t elem, auto& out) {
    const uint64_t bytes = uint64_t(count) * elem;
    if (at % kAlign != 0 || uint64_t(at) + bytes > size) throw Error("plan", "table outside the blob");
    out.resize(count);
    if (bytes) std::memcpy(out.data(), data + at, bytes);
  };
  read(h.items_offset, size_t(h.items_per_unit), sizeof(dash_item), plan.items);
  read(h.segments_offset, size_t(h.segments_per_unit), sizeof(dash_segment), plan.segments);
  read(h.visits_offset, size_t(h.visits_per_unit), sizeof(dash_visit), plan.visits);
  read(h.dq_count_offset, size_t(h.heads_per_unit) * size_t(h.num_q_tiles), sizeof(uint16_t), plan.dq_count);
  read(h.group_head_by_rank_offset, size_t(h.group_size), 1, plan.group_head_by_rank);
  return plan;
}

std::string describe_plan(const Plan& plan, int32_t max_items, int32_t max_q_tiles) {
  const dash_plan_header& h = plan.header;
  std::ostringstream s;
  s << "plan " << planner_name(plan.planner()) << " (format v" << h.version << ")\n";
  s << "  problem        " << plan.problem().describe() << "\n";
  s << "  tiles          " << h.block_m << "x" << h.block_n << ": " << h.num_q_tiles << " Q tiles, "
    << h.num_kv_tiles << " KV tiles\n";
  s << "  units          " << h.num_units << " (" << (plan.gqa_mode() == GqaMode::PackGroup ? "one per KV head, " : "one per query head, ")
    << h.heads_per_unit << " head(s) each); " << h.items_per_unit << " items, " << h.visits_per_unit
    << " visits per unit\n";
  s << "  tickets        "
    << (!(h.flags & DASH_PLAN_ITEM_MAJOR)
            ? std::string("unit by unit (all of unit 0's items, then unit 1's, ...)")
        : h.items_per_slot > 1
            ? "slot by slot across groups of " + std::to_string(h.ticket_group_units) + " units (each unit's " +
                  std::to_string(h.items_per_slot) + " items of slot 0, then of slot 1, ...; then the next group)"
            : "item by item across groups of " + std::to_string(h.ticket_group_units) +
                  " units (each unit's item 0, then item 1, ...; then the next group)")
    << "\n";
  s << "  CTAs           " << h.num_ctas << " launched; its waits need " << h.min_coresident_ctas
    << " of them running at once"
    << ((h.flags & DASH_PLAN_WAITS_ONLY_BACKWARD) ? " (waits only on earlier tickets)" : " (its largest wave)") << "\n";
  s << "  blob           " << plan.to_blob().size() << " bytes\n";
  if (!plan.note.empty()) s << "  note           " << plan.note << "\n";

  s << "\nitems of unit 0 in claim order (K<kv tile>: Q tiles visited, #rank in that dQ tile's order, "
       "* = partly masked):\n";
  for (int32_t i = 0; i < h.items_per_unit && i < max_items; ++i) {
    const dash_item& item = plan.items[i];
    s << "  item " << i << ":";
    for (int32_t sg = item.first_segment; sg < item.first_segment + item.num_segments; ++sg) {
      const dash_segment& seg = plan.segments[sg];
      s << (sg == item.first_segment ? " " : " | ") << "K" << seg.kv_tile << ":";
      for (int32_t v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v) {
        const dash_visit& vis = plan.visits[v];
        s << " ";
        if (h.heads_per_unit > 1) s << "h" << int(vis.head_in_unit) << ".";
        s << "q" << vis.q_tile << "#" << vis.dq_rank << ((vis.flags & DASH_VISIT_PARTIAL_MASK) ? "*" : "");
      }
    }
    s << "\n";
  }
  if (h.items_per_unit > max_items) s << "  ... " << (h.items_per_unit - max_items) << " more items\n";

  s << "\ndQ accumulation order of unit 0, head 0 (KV tiles in the order they add):\n";
  std::vector<std::vector<std::pair<int, int>>> order(h.num_q_tiles); // q -> (rank, kv)
  for (const dash_segment& seg : plan.segments)
    for (int32_t v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v)
      if (plan.visits[v].head_in_unit == 0) order[plan.visits[v].q_tile].push_back({plan.visits[v].dq_rank, seg.kv_tile});
  for (int32_t q = 0; q < h.num_q_tiles && q < max_q_tiles; ++q) {
    std::sort(order[q].begin(), order[q].end());
    s << "  dQ" << q << ":";
    for (size_t k = 0; k < order[q].size(); ++k) s << (k ? ", " : " ") << "K" << order[q][k].second;
    s << "\n";
  }
  if (h.num_q_tiles > max_q_tiles) s << "  ... " << (h.num_q_tiles - max_q_tiles) << " more Q tiles\n";
  return s.str();
}

} // namespace dash
