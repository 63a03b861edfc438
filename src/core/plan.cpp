// SPDX-License-Identifier: Apache-2.0
// build_plan (named planners and the auto rules), blob (de)serialisation and the text rendering.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "dash/plan.hpp"
#include "dash/simulator.hpp"

namespace dash {

Schedule Schedule::parse(const std::string& name) {
  if (name == "auto") return {Kind::Auto, Planner::Ascending};
  if (name == "auto-fastest") return {Kind::AutoFastest, Planner::Ascending};
  for (Planner p : all_planners())
    if (name == planner_name(p)) return {Kind::Planner, p};
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

constexpr uint32_t kAlign = 16;
uint32_t align_up(uint64_t n) {
  return uint32_t((n + kAlign - 1) / kAlign * kAlign);
}

void finish_validation(Plan& plan, int32_t num_ctas) {
  const ValidationReport report = validate_plan(plan, num_ctas);
  if (!report.ok) {
    throw Error("schedule", std::string(planner_name(plan.planner())) + " cannot run this problem with " +
                                std::to_string(num_ctas) + " co-resident CTAs: " + report.reason);
  }
  plan.header.num_ctas = num_ctas;
  plan.header.min_coresident_ctas = report.min_coresident_ctas;
  if (report.waits_only_backward) plan.header.flags |= DASH_PLAN_WAITS_ONLY_BACKWARD;
}

// The problems `auto` simulates: the real sequence shape, mask, head dim and GQA group, one sequence, and a
// range of head counts. Planners with long items (symmetric shift pairs KV tiles) finish a round of units
// together, so a single head count can land just before or just after a round boundary and decide by
// accident; summing the makespans over head counts that span a whole round period compares steady-state
// throughput instead. The range depends on the sequence shape and P only (never on the real batch or head
// count) and is the same for every candidate, so `auto` chooses the same planner for a sequence whatever
// batch or head count it arrives with.
std::vector<Problem> canonical_problems(const Problem& real, GqaMode mode, const TileGrid& grid, int32_t num_ctas) {
  // KV tiles per CTA in the smallest canonical problem. Long enough that start-up effects that real problems
  // amortise (ascending order on a full mask staggers the CTAs by one hand-off each before it runs freely)
  // do not decide: with 2, auto chose shift where ascending measured up to 13% faster (docs/calibration.md).
  constexpr int64_t kMinFills = 8;
  constexpr int64_t kVisitBudget = int64_t(1) << 20; // all sizes together: about a second of simulation
  constexpr int64_t kMaxSizes = 9;
  const int64_t kv_tiles = std::max(1, grid.num_kv_tiles());
  int64_t visits_per_unit = 0;
  for (int32_t kv = 0; kv < grid.num_kv_tiles(); ++kv) visits_per_unit += int64_t(grid.q_tiles_seen_by(kv).size());
  visits_per_unit = std::max<int64_t>(1, visits_per_unit * (mode == GqaMode::PackGroup ? real.group_size() : 1));
  // The fewest items per unit any planner makes (pairs of KV tiles) gives the longest round period.
  const int64_t fewest_items = (kv_tiles + 1) / 2;
  const int64_t period = (num_ctas + fewest_items - 1) / fewest_items;
  int64_t first = std::max(period, (kMinFills * num_ctas + kv_tiles - 1) / kv_tiles);
  first = std::max<int64_t>(1, std::min(first, kVisitBudget / (4 * visits_per_unit))); // huge P: stay affordable
  const int64_t stride = std::max<int64_t>(1, (period + kMaxSizes - 2) / (kMaxSizes - 1));

  std::vector<Problem> problems;
  int64_t visits = 0;
  for (int64_t units = first; units <= first + period && visits + units * visits_per_unit <= kVisitBudget;
       units += stride) {
    Problem p = real;
    p.batch = 1;
    const int32_t group = real.group_size();
    p.heads_kv = int32_t(mode == GqaMode::PackGroup ? units : (units + group - 1) / group);
    p.heads_q = p.heads_kv * group;
    problems.push_back(p);
    visits += units * visits_per_unit;
  }
  if (problems.empty()) { // one unit is over the budget: simulate a single one rather than nothing
    Problem p = real;
    p.batch = 1;
    p.heads_q = real.group_size();
    p.heads_kv = 1;
    problems.push_back(p);
  }
  return problems;
}

// The GQA modes a request allows: both for DASH_GQA_AUTO with a real group (with group size 1 the two modes
// are the same plan) whose packed plan fits the plan format's limits, else the one it names.
std::vector<GqaMode> allowed_gqa_modes(const PlanRequest& req, TileShape tiles) {
  if (req.gqa_mode != GqaMode::Auto) return {req.gqa_mode};
  if (req.problem.group_size() == 1) return {GqaMode::SplitHeads};
  if (plan_limit_violation(req.problem, tiles, GqaMode::PackGroup, req.num_ctas)) return {GqaMode::SplitHeads};
  return {GqaMode::SplitHeads, GqaMode::PackGroup};
}

// auto / auto-fastest, or a named planner with DASH_GQA_AUTO: the (GQA mode, planner) candidate with the lowest
// simulated makespan.
Plan choose_automatically(const PlanRequest& req, TileShape tiles) {
  const bool canonical = req.schedule.kind != Schedule::Kind::AutoFastest;
  const std::vector<GqaMode> modes = allowed_gqa_modes(req, tiles);
  const std::vector<Planner> planners =
      req.schedule.kind == Schedule::Kind::Planner ? std::vector<Planner>{req.schedule.planner} : all_planners();
  std::ostringstream note;
  note << (req.schedule.kind == Schedule::Kind::AutoFastest ? "auto-fastest"
           : req.schedule.kind == Schedule::Kind::Auto      ? "auto"
                                                             : "GQA mode auto")
       << " on " << req.num_ctas << " CTAs";
  double best_time = std::numeric_limits<double>::infinity();
  Planner best = planners.front();
  GqaMode best_mode = modes.front();
  bool found = false;
  // Canonical: the summed makespan over the canonical problems; auto-fastest: the makespan of the real one.
  // When both GQA modes compete they are simulated on the same problems (the pack mode's list, whose head
  // counts are whole KV-head groups), so their sums compare equal work.
  const CostModel cost = req.cost ? *req.cost : CostModel::for_problem(req.problem, tiles);
  const std::vector<Problem> problems =
      canonical ? canonical_problems(req.problem, modes.back(), TileGrid(req.problem, tiles), req.num_ctas)
                : std::vector<Problem>{req.problem};
  for (GqaMode mode : modes) {
    for (Planner planner : planners) {
      const std::string name =
          modes.size() > 1 ? std::string(gqa_mode_name(mode)) + " " + planner_name(planner) : planner_name(planner);
      Plan candidate = build_unvalidated(req.problem, planner, tiles, mode, req.num_ctas);
      const ValidationReport report = validate_plan(candidate, req.num_ctas);
      if (!report.ok) {
        note << "; " << name << " skipped (" << report.reason << ")";
        continue;
      }
      double makespan = 0;
      std::string deadlock;
      for (const Problem& p : problems) {
        Plan simulated = build_unvalidated(p, planner, tiles, mode, req.num_ctas);
        simulated.header.flags |= report.waits_only_backward ? DASH_PLAN_WAITS_ONLY_BACKWARD : 0;
        const SimResult sim =
            simulate(simulated, req.num_ctas, cost, SimOptions{.record_spans = false, .critical_path = false});
        if (sim.deadlocked) deadlock = sim.deadlock_detail;
        makespan += sim.makespan;
      }
      if (!deadlock.empty()) { // cannot happen for a validated plan; refuse rather than trust it
        note << "; " << name << " skipped (simulation deadlocked: " << deadlock << ")";
        continue;
      }
      note << "; " << name << " " << makespan;
      if (makespan < best_time) {
        best_time = makespan;
        best = planner;
        best_mode = mode;
        found = true;
      }
    }
  }
  if (!found) throw Error("schedule", "no planner can run this problem: " + note.str());
  note << " (simulated makespan" << (canonical ? ", summed over one sequence with a range of head counts" : "")
       << "); chose " << (modes.size() > 1 ? std::string(gqa_mode_name(best_mode)) + " " : std::string())
       << planner_name(best);
  Plan plan = build_unvalidated(req.problem, best, tiles, best_mode, req.num_ctas);
  finish_validation(plan, req.num_ctas);
  plan.note = note.str() + (plan.note.empty() ? "" : ". " + plan.note);
  return plan;
}

} // namespace

Plan build_plan(const PlanRequest& req) {
  req.problem.validate();
  if (req.num_ctas < 1) throw Error("num_ctas", "must be >= 1, got " + std::to_string(req.num_ctas));
  TileShape tiles = req.tiles;
  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(req.problem.head_dim);
  if (tiles.block_m < 1) throw Error("block_m", "must be >= 1");
  if (tiles.block_n < 1) throw Error("block_n", "must be >= 1");
  // Every size limit before any planner or simulation runs: an impossible size fails at once.
  check_plan_limits(req.problem, tiles, req.gqa_mode, req.num_ctas);

  const std::vector<GqaMode> modes = allowed_gqa_modes(req, tiles);
  if (req.schedule.kind != Schedule::Kind::Planner || modes.size() > 1) return choose_automatically(req, tiles);
  Plan plan = build_unvalidated(req.problem, req.schedule.planner, tiles, modes.front(), req.num_ctas);
  finish_validation(plan, req.num_ctas);
  return plan;
}

std::vector<uint8_t> Plan::to_blob() const {
  dash_plan_header h = header;
  uint64_t offset = align_up(sizeof(dash_plan_header));
  auto place = [&offset](uint64_t bytes) {
    const uint32_t at = uint32_t(offset);
    offset = align_up(offset + bytes);
    return at;
  };
  h.items_offset = place(items.size() * sizeof(dash_item));
  h.segments_offset = place(segments.size() * sizeof(dash_segment));
  h.visits_offset = place(visits.size() * sizeof(dash_visit));
  h.dq_count_offset = place(dq_count.size() * sizeof(uint16_t));
  h.group_head_by_rank_offset = place(group_head_by_rank.size());
  if (offset > std::numeric_limits<uint32_t>::max()) throw Error("plan", "blob larger than 4 GiB");
  h.total_bytes = uint32_t(offset);

  std::vector<uint8_t> blob(offset, 0);
  std::memcpy(blob.data(), &h, sizeof h);
  auto copy = [&blob](uint32_t at, const void* src, size_t bytes) {
    if (bytes) std::memcpy(blob.data() + at, src, bytes);
  };
  copy(h.items_offset, items.data(), items.size() * sizeof(dash_item));
  copy(h.segments_offset, segments.data(), segments.size() * sizeof(dash_segment));
  copy(h.visits_offset, visits.data(), visits.size() * sizeof(dash_visit));
  copy(h.dq_count_offset, dq_count.data(), dq_count.size() * sizeof(uint16_t));
  copy(h.group_head_by_rank_offset, group_head_by_rank.data(), group_head_by_rank.size());
  return blob;
}

Plan Plan::from_blob(const uint8_t* data, size_t size) {
  if (data == nullptr || size < sizeof(dash_plan_header)) throw Error("plan", "blob smaller than its header");
  Plan plan;
  std::memcpy(&plan.header, data, sizeof plan.header);
  const dash_plan_header& h = plan.header;
  if (h.magic != DASH_PLAN_MAGIC) throw Error("plan", "not a dash-attn plan (bad magic)");
  if (h.version != DASH_PLAN_FORMAT_VERSION)
    throw Error("plan", "format version " + std::to_string(h.version) + ", this build reads " +
                            std::to_string(DASH_PLAN_FORMAT_VERSION));
  if (h.total_bytes != size) throw Error("plan", "blob size does not match its header");
  if (h.items_per_unit < 0 || h.segments_per_unit < 0 || h.visits_per_unit < 0 || h.heads_per_unit < 1 ||
      h.num_q_tiles < 0 || h.group_size < 1)
    throw Error("plan", "negative table size in header");
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
  s << "  CTAs           validated for " << h.num_ctas << "; needs " << h.min_coresident_ctas
    << " co-resident" << ((h.flags & DASH_PLAN_WAITS_ONLY_BACKWARD) ? " (waits only on earlier tickets)" : "")
    << "\n";
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
