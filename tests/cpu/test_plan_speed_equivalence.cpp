// SPDX-License-Identifier: Apache-2.0
// The linear planner and validator against the straightforward ones they replaced: ranks by sorting each
// accumulator's contributions, and a validator that runs Kahn's algorithm on every plan and merges sorted wave
// intervals. Both references are kept here, small and obviously right, so that any shape can be compared.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "dash/plan.hpp"
#include "test_problems.hpp"

// Forces the thread count of build_unvalidated and validate_plan (src/core/planners.cpp): n >= 1 threads for every
// template, or 0 for the automatic choice (threads only for large templates).
#include "planner_internal.hpp"  // dash::detail::set_planner_threads

namespace {

using dash::Planner;

size_t accumulator_of(const dash::Plan& plan, const dash_visit& v) {
  return size_t(v.head_in_unit) * plan.header.num_q_tiles + v.q_tile;
}

// The item holding each visit.
std::vector<int> items_of_visits(const dash::Plan& plan) {
  std::vector<int> item_of(plan.visits.size());
  for (int i = 0; i < int(plan.items.size()); ++i) {
    const dash_item& item = plan.items[i];
    for (int s = item.first_segment; s < item.first_segment + item.num_segments; ++s)
      for (int v = plan.segments[s].first_visit; v < plan.segments[s].first_visit + plan.segments[s].num_visits; ++v)
        item_of[v] = i;
  }
  return item_of;
}

// The rank rules as first written: sort each accumulator's contributions by KV tile (ascending, descending) or
// by lock-step time (position in item, item). Returns, per visit, (rank, FIRST/LAST flags), and dq_count.
struct ReferenceRanks {
  std::vector<std::pair<int, int>> rank_and_flags;
  std::vector<int> dq_count;
};

ReferenceRanks reference_ranks(const dash::Plan& plan) {
  const bool by_kv = plan.planner() == Planner::Ascending || plan.planner() == Planner::Descending;
  const std::vector<int> item_of = items_of_visits(plan);
  std::vector<std::vector<std::tuple<int, int, int>>> contributions(plan.dq_count.size()); // (key, key, visit)
  for (const dash_segment& seg : plan.segments)
    for (int v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v) {
      const int item = item_of[v];
      const int step = v - plan.segments[plan.items[item].first_segment].first_visit;
      contributions[accumulator_of(plan, plan.visits[v])].push_back(
          by_kv ? std::make_tuple(seg.kv_tile, 0, v) : std::make_tuple(step, item, v));
    }
  ReferenceRanks ref{std::vector<std::pair<int, int>>(plan.visits.size()), {}};
  for (auto& c : contributions) {
    std::sort(c.begin(), c.end());
    ref.dq_count.push_back(int(c.size()));
    for (int rank = 0; rank < int(c.size()); ++rank)
      ref.rank_and_flags[std::get<2>(c[rank])] = {
          rank, (rank == 0 ? DASH_VISIT_FIRST : 0) | (rank == int(c.size()) - 1 ? DASH_VISIT_LAST : 0)};
  }
  return ref;
}

// The first difference between the plan's ranks and the reference's, or "".
std::string rank_difference(const dash::Plan& plan) {
  const ReferenceRanks ref = reference_ranks(plan);
  for (size_t a = 0; a < ref.dq_count.size(); ++a)
    if (plan.dq_count[a] != ref.dq_count[a])
      return "dq_count[" + std::to_string(a) + "] " + std::to_string(plan.dq_count[a]) + " != " +
             std::to_string(ref.dq_count[a]);
  for (size_t v = 0; v < plan.visits.size(); ++v) {
    const dash_visit& vis = plan.visits[v];
    const int flags = vis.flags & (DASH_VISIT_FIRST | DASH_VISIT_LAST);
    if (vis.dq_rank != ref.rank_and_flags[v].first || flags != ref.rank_and_flags[v].second)
      return "visit " + std::to_string(v) + ": rank " + std::to_string(vis.dq_rank) + " flags " +
             std::to_string(flags) + ", reference " + std::to_string(ref.rank_and_flags[v].first) + " flags " +
             std::to_string(ref.rank_and_flags[v].second);
  }
  return "";
}

// Steps (3)-(5) of the validator as first written, for plans whose ranks are permutations: Kahn's algorithm over
// the chain and wait edges, then the forward-wait intervals sorted and merged. nullopt when there is a cycle or a
// forward wait out of its slot; else (largest wave, waits only backward).
std::optional<std::pair<int, bool>> reference_waves(const dash::Plan& plan) {
  const int nv = int(plan.visits.size());
  const std::vector<int> item_of = items_of_visits(plan);
  std::vector<int> offset(plan.dq_count.size() + 1, 0);
  for (size_t a = 0; a < plan.dq_count.size(); ++a) offset[a + 1] = offset[a] + plan.dq_count[a];
  std::vector<int> visit_of_slot(nv);
  for (int v = 0; v < nv; ++v) visit_of_slot[offset[accumulator_of(plan, plan.visits[v])] + plan.visits[v].dq_rank] = v;
  std::vector<int> awaited(nv, -1), indegree(nv, 0), waiter(nv, -1);
  for (int v = 0; v < nv; ++v) {
    const dash_visit& vis = plan.visits[v];
    if (vis.dq_rank > 0) awaited[v] = visit_of_slot[offset[accumulator_of(plan, vis)] + vis.dq_rank - 1];
    if (awaited[v] >= 0) waiter[awaited[v]] = v;
    indegree[v] = (awaited[v] >= 0) + (v > 0 && item_of[v - 1] == item_of[v]);
  }
  std::vector<int> ready;
  for (int v = 0; v < nv; ++v)
    if (indegree[v] == 0) ready.push_back(v);
  int done = 0;
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    ++done;
    if (v + 1 < nv && item_of[v + 1] == item_of[v] && --indegree[v + 1] == 0) ready.push_back(v + 1);
    if (waiter[v] >= 0 && --indegree[waiter[v]] == 0) ready.push_back(waiter[v]);
  }
  if (done != nv) return std::nullopt;
  std::vector<std::pair<int, int>> intervals;
  for (int v = 0; v < nv; ++v)
    if (awaited[v] >= 0 && item_of[awaited[v]] > item_of[v]) intervals.push_back({item_of[v], item_of[awaited[v]]});
  // A template cut into slots: a forward wait out of its slot is refused (plan_format.h, "Slots").
  const int slot = plan.header.items_per_slot;
  for (auto [lo, hi] : intervals)
    if (slot > 1 && lo / slot != hi / slot) return std::nullopt;
  std::sort(intervals.begin(), intervals.end());
  int largest = 1, start = -1, end = -1;
  for (auto [lo, hi] : intervals) {
    if (lo > end) {
      start = lo;
      end = hi;
    } else {
      end = std::max(end, hi);
    }
    largest = std::max(largest, end - start + 1);
  }
  return std::make_pair(largest, intervals.empty());
}

// The validator's verdict on (3)-(5) must be the reference's.
std::string wave_difference(const dash::Plan& plan) {
  const auto report = dash::validate_plan(plan, 100000);
  const auto ref = reference_waves(plan);
  if (!ref) return report.ok ? "accepted a plan with a wait cycle or a wait out of its slot" : "";
  if (!report.ok) return "rejected: " + report.reason;
  if (report.min_coresident_ctas != ref->first || report.waits_only_backward != ref->second)
    return "wave " + std::to_string(report.min_coresident_ctas) + " backward " +
           std::to_string(report.waits_only_backward) + ", reference " + std::to_string(ref->first) + " " +
           std::to_string(ref->second);
  return "";
}

// The plan with each accumulator's rank order changed by `remap(rank, count)` (flags kept consistent): orders
// that no planner makes, so the validator's general path decides them.
template <typename Remap>
dash::Plan reranked(dash::Plan plan, Remap remap) {
  for (dash_visit& v : plan.visits) {
    const int count = plan.dq_count[accumulator_of(plan, v)];
    v.dq_rank = uint16_t(remap(int(v.dq_rank), count));
    v.flags &= ~(DASH_VISIT_FIRST | DASH_VISIT_LAST);
    v.flags |= (v.dq_rank == 0 ? DASH_VISIT_FIRST : 0) | (v.dq_rank == count - 1 ? DASH_VISIT_LAST : 0);
  }
  return plan;
}

struct MaskCase {
  dash::Mask mask;
  int left, right;
};

std::string describe(const dash::Problem& p, Planner planner, dash::GqaMode mode) {
  std::ostringstream s;
  s << p.describe() << ", " << dash::planner_name(planner) << ", " << dash::gqa_mode_name(mode);
  return s.str();
}

// Every planner over seqlens around tile boundaries (and non-square pairs of them), the full and causal masks and
// windows bounded on one side or both, both kernel head dims, and GQA groups of 1, 2 and 4 in both modes.
void for_each_plan(const std::function<void(const dash::Plan&, const std::string&)>& check) {
  const int seqlens[] = {1, 2, 63, 64, 65, 128, 300, 1000, 2048, 4100};
  const MaskCase masks[] = {{dash::Mask::Full, -1, -1}, {dash::Mask::Causal, -1, -1}, {dash::Mask::Window, 128, 0},
                            {dash::Mask::Window, 0, 256},  {dash::Mask::Window, 300, 50},  {dash::Mask::Window, -1, 64},
                            {dash::Mask::Window, 64, -1}};
  for (int sq : seqlens)
    for (int sk : seqlens)
      for (const MaskCase& m : masks)
        for (int head_dim : {64, 128})
          for (int group : {1, 2, 4})
            for (dash::GqaMode mode : {dash::GqaMode::SplitHeads, dash::GqaMode::PackGroup}) {
              dash::Problem p = dash::test::make_problem(sq, sk, m.mask, group, 1, 1, head_dim);
              if (m.mask == dash::Mask::Window) p = dash::test::windowed(p, m.left, m.right);
              for (Planner planner : dash::all_planners())
                check(dash::build_unvalidated(p, planner, {}, mode, 1), describe(p, planner, mode));
            }
}

TEST(PlanSpeedEquivalence, RanksAndCountsEqualTheSortingReference) {
  for_each_plan([](const dash::Plan& plan, const std::string& name) {
    EXPECT_EQ(rank_difference(plan), "") << name;
  });
}

TEST(PlanSpeedEquivalence, ValidatorAgreesWithTheReferenceOnPlannerAndReorderedPlans) {
  for_each_plan([](const dash::Plan& plan, const std::string& name) {
    const auto report = dash::validate_plan(plan, 100000);
    ASSERT_TRUE(report.ok) << name << ": " << report.reason;
    EXPECT_EQ(wave_difference(plan), "") << name;
    // dQ in the reverse order: for claim-ordered plans every wait points forward, one wave of all items.
    EXPECT_EQ(wave_difference(reranked(plan, [](int r, int n) { return n - 1 - r; })), "") << name << ", reversed";
    // The first contribution moved to the end: often a cycle.
    EXPECT_EQ(wave_difference(reranked(plan, [](int r, int n) { return (r + n - 1) % n; })), "")
        << name << ", rotated";
  });
}

// ---- the validator's rejections on the plans of every planner (test_validator.cpp has the basic ones) ----

dash::Plan plan_of(const dash::Problem& p, Planner planner, dash::GqaMode mode = dash::GqaMode::SplitHeads) {
  return dash::build_unvalidated(p, planner, {64, 128}, mode, 1);
}

void expect_rejected(const dash::Plan& plan, const std::string& fragment, const std::string& name) {
  const auto report = dash::validate_plan(plan, 100000);
  EXPECT_FALSE(report.ok) << name << ": expected a rejection containing '" << fragment << "'";
  EXPECT_NE(report.reason.find(fragment), std::string::npos) << name << ": " << report.reason;
}

// The FIRST / LAST flags recomputed from the ranks.
dash::Plan with_flags_of_ranks(dash::Plan plan) {
  return reranked(std::move(plan), [](int rank, int) { return rank; });
}

// The most visits an item holds.
int longest_item(const dash::Plan& plan) {
  int longest = 0;
  for (const dash_item& item : plan.items) {
    const dash_segment& first = plan.segments[item.first_segment];
    const dash_segment& last = plan.segments[item.first_segment + item.num_segments - 1];
    longest = std::max(longest, last.first_visit + last.num_visits - first.first_visit);
  }
  return longest;
}

// The visit of `kv_tile` on (head 0, `q_tile`).
int visit_of(const dash::Plan& plan, int kv_tile, int q_tile) {
  for (const dash_segment& seg : plan.segments)
    if (seg.kv_tile == kv_tile)
      for (int v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v)
        if (plan.visits[v].q_tile == q_tile && plan.visits[v].head_in_unit == 0) return v;
  return -1;
}

TEST(PlanSpeedEquivalence, RejectsADuplicatedRankInRange) {
  for (Planner planner : dash::all_planners()) {
    dash::Plan plan = plan_of(dash::test::make_problem(1000, 1000, dash::Mask::Full), planner);
    for (dash_visit& v : plan.visits)
      if (accumulator_of(plan, v) == 0 && v.dq_rank == 1) v.dq_rank = 0; // two rank-0 adds on dQ0, no rank 1
    expect_rejected(with_flags_of_ranks(plan), "ranks are not", dash::planner_name(planner));
  }
}

TEST(PlanSpeedEquivalence, RejectsADoubledOrMissingBlockInAPackedPlan) {
  const dash::Problem p = dash::test::make_problem(640, 640, dash::Mask::Causal, 2, 1);
  for (Planner planner : dash::all_planners()) {
    // A head-1 visit of the first segment moved to head 0: head 0's block is visited twice.
    dash::Plan plan = plan_of(p, planner, dash::GqaMode::PackGroup);
    int v = plan.segments[0].first_visit;
    while (plan.visits[v].head_in_unit != 1) ++v;
    plan.visits[v].head_in_unit = 0;
    expect_rejected(plan, "visited twice", dash::planner_name(planner));
    // The last visit dropped, every table kept consistent with it: only coverage is violated.
    plan = plan_of(p, planner, dash::GqaMode::PackGroup);
    plan.dq_count[accumulator_of(plan, plan.visits.back())] -= 1;
    plan.visits.pop_back();
    plan.segments.back().num_visits -= 1;
    plan.header.visits_per_unit -= 1;
    plan.header.max_visits_per_item = longest_item(plan);
    expect_rejected(plan, "never visited", dash::planner_name(planner));
  }
}

TEST(PlanSpeedEquivalence, RejectsAMaskedBlockAndAWrongPartialFlagUnderAWindow) {
  // Window of 200 keys back: KV tile k (128 keys) is seen by the 64-row Q tiles 2k .. 2k + 5 only.
  const dash::Problem p = dash::test::windowed(dash::test::make_problem(2000, 2000, dash::Mask::Full), 200, 0);
  for (Planner planner : dash::all_planners()) {
    dash::Plan plan = plan_of(p, planner);
    const int kv = plan.segments[0].kv_tile;
    plan.visits[plan.segments[0].first_visit].q_tile = uint16_t(kv < 5 ? 2 * kv + 10 : 0);
    expect_rejected(plan, "fully masked", dash::planner_name(planner));
    plan = plan_of(p, planner);
    plan.visits[plan.segments[0].first_visit].flags ^= DASH_VISIT_PARTIAL_MASK;
    expect_rejected(plan, "partial-mask flag", dash::planner_name(planner));
  }
}

TEST(PlanSpeedEquivalence, RejectsACycleInALockStepPlan) {
  // Full-mask shift on 4 x 4 tiles: K0 visits q0, q1, q2, q3 and K1 visits q1, q2, q3, q0. With dQ0 taking K1
  // before K0 and dQ1 taking K0 before K1, K0.q0 waits for K1.q0, which follows K1.q1 in K1, which waits for
  // K0.q1, which follows K0.q0: a cycle, in ranks that are neither claim nor lock-step order.
  dash::Plan plan = dash::build_unvalidated(dash::test::make_problem(512, 512, dash::Mask::Full), Planner::Shift,
                                            {128, 128}, dash::GqaMode::SplitHeads, 1);
  ASSERT_TRUE(dash::validate_plan(plan, 100000).ok);
  const auto put_first = [&](int earlier, int later) {
    if (plan.visits[earlier].dq_rank > plan.visits[later].dq_rank)
      std::swap(plan.visits[earlier].dq_rank, plan.visits[later].dq_rank);
  };
  put_first(visit_of(plan, 1, 0), visit_of(plan, 0, 0));
  put_first(visit_of(plan, 0, 1), visit_of(plan, 1, 1));
  expect_rejected(with_flags_of_ranks(plan), "wait cycle", "shift");
}

TEST(PlanSpeedEquivalence, RejectsAMissingMovedOrExtraFirstOrLastFlag) {
  // Coverage counts the FIRST and LAST flags and checks the ranks of the flagged visits; the orders then prove the
  // ranks: a flag missing, on a wrong visit, or on one visit more must each be found, in claim-order plans
  // (ascending, descending) and lock-step ones alike.
  const dash::Problem p = dash::test::make_problem(1000, 1000, dash::Mask::Causal);
  for (Planner planner : dash::all_planners()) {
    const dash::Plan plan = plan_of(p, planner);
    // dQ5's rank-0 and rank-1 visits: the accumulator has several contributions.
    const auto rank_of_q5 = [&](const dash::Plan& x, int rank) {
      for (size_t v = 0; v < x.visits.size(); ++v)
        if (x.visits[v].q_tile == 5 && x.visits[v].dq_rank == rank) return v;
      return x.visits.size();
    };
    const size_t first = rank_of_q5(plan, 0), second = rank_of_q5(plan, 1);
    ASSERT_LT(second, plan.visits.size()) << dash::planner_name(planner);
    const size_t last = rank_of_q5(plan, plan.dq_count[5] - 1);
    const std::string name = dash::planner_name(planner);
    dash::Plan bad = plan;
    bad.visits[first].flags &= ~DASH_VISIT_FIRST;
    expect_rejected(bad, "FIRST flag", name + ", FIRST missing");
    bad = plan;
    bad.visits[second].flags |= DASH_VISIT_FIRST;
    expect_rejected(bad, "FIRST flag", name + ", a second FIRST");
    bad.visits[first].flags &= ~DASH_VISIT_FIRST;
    expect_rejected(bad, "FIRST flag", name + ", FIRST moved");
    bad = plan;
    bad.visits[last].flags &= ~DASH_VISIT_LAST;
    expect_rejected(bad, "LAST flag", name + ", LAST missing");
    bad = plan;
    bad.visits[second].flags |= DASH_VISIT_LAST;
    expect_rejected(bad, "LAST flag", name + ", a second LAST");
  }
}

TEST(PlanSpeedEquivalence, AStructureFailureIsReportedBeforeACoverageFailure) {
  // Coverage rejects every visit the structure check rejects, and the per-visit structure check runs only when
  // coverage has failed: the reason must still be the structure's, even when coverage fails earlier in the table.
  for (Planner planner : dash::all_planners()) {
    dash::Plan plan = plan_of(dash::test::make_problem(1000, 1000, dash::Mask::Causal), planner);
    const int nv = int(plan.visits.size());
    plan.visits[1] = plan.visits[0];  // a doubled block at the start
    expect_rejected(plan, "visited twice", dash::planner_name(planner));
    plan.visits[nv - 1].head_in_unit = 1;  // a head the unit does not have, at the end
    expect_rejected(plan, "visit " + std::to_string(nv - 1) + " has head 1", dash::planner_name(planner));
    plan.visits[nv / 2].q_tile = uint16_t(plan.header.num_q_tiles);  // and a Q tile past the last, in the middle
    expect_rejected(plan, "visit " + std::to_string(nv / 2) + " has Q tile", dash::planner_name(planner));
  }
}

// The planner and validator's thread count for one scope.
class PlannerThreads {
 public:
  explicit PlannerThreads(int n) { dash::detail::set_planner_threads(n); }
  ~PlannerThreads() { dash::detail::set_planner_threads(0); }
  PlannerThreads(const PlannerThreads&) = delete;
  PlannerThreads& operator=(const PlannerThreads&) = delete;
};

// Timings at 128k tokens on one thread and with the automatic thread count (no assertion: run with
// --gtest_also_run_disabled_tests to see them).
TEST(PlanSpeedEquivalence, DISABLED_Timing128k) {
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  struct Case {
    dash::Mask mask;
    int group;
    dash::GqaMode mode;
  };
  for (int threads : {1, 0}) {
    const PlannerThreads scope(threads);
    std::printf("%s\n", threads == 1 ? "one thread:" : "automatic thread count:");
    for (const Case& c : {Case{dash::Mask::Full, 1, dash::GqaMode::SplitHeads},
                          Case{dash::Mask::Causal, 1, dash::GqaMode::SplitHeads},
                          Case{dash::Mask::Causal, 4, dash::GqaMode::PackGroup}}) {
      const dash::Problem p = dash::test::make_problem(131072, 131072, c.mask, c.group, 1);
      for (Planner planner : dash::all_planners()) {
        double build = 1e30, validate = 1e30;
        for (int rep = 0; rep < 5; ++rep) {
          auto t = Clock::now();
          const dash::Plan plan = dash::build_unvalidated(p, planner, {}, c.mode, 100000);
          build = std::min(build, ms(t));
          t = Clock::now();
          EXPECT_TRUE(dash::validate_plan(plan, 100000).ok);
          validate = std::min(validate, ms(t));
        }
        std::printf("%-40s build %7.2f ms  validate %7.2f ms\n", describe(p, planner, c.mode).c_str(), build,
                    validate);
      }
    }
  }
}

// ---- threads: the output and every verdict must not depend on the thread count ----

template <typename T, typename Allocator>  // the visit table has its own allocator (dash::VisitTable)
bool same_bytes(const std::vector<T, Allocator>& a, const std::vector<T, Allocator>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// The first table in which two plans differ, or "".
std::string plan_difference(const dash::Plan& a, const dash::Plan& b) {
  if (std::memcmp(&a.header, &b.header, sizeof a.header) != 0) return "header";
  if (!same_bytes(a.items, b.items)) return "items";
  if (!same_bytes(a.segments, b.segments)) return "segments";
  if (!same_bytes(a.visits, b.visits)) return "visits";
  if (!same_bytes(a.dq_count, b.dq_count)) return "dq_count";
  if (!same_bytes(a.group_head_by_rank, b.group_head_by_rank)) return "group_head_by_rank";
  if (a.note != b.note) return "note";
  return "";
}

std::string verdict(const dash::Plan& plan, int num_ctas = 100000) {
  const auto r = dash::validate_plan(plan, num_ctas);
  return r.ok ? "ok, wave " + std::to_string(r.min_coresident_ctas) + ", backward " +
                    std::to_string(r.waits_only_backward)
              : "rejected: " + r.reason;
}

// The validator's verdict on one thread and on several (forced, whatever the plan's size), which must agree.
void expect_same_verdicts(const dash::Plan& plan, const std::string& name) {
  std::string one;
  {
    const PlannerThreads scope(1);
    one = verdict(plan);
  }
  for (int threads : {2, 3, 8}) {
    const PlannerThreads scope(threads);
    EXPECT_EQ(verdict(plan), one) << name << ", " << threads << " threads";
  }
}

// ---- the bytes of the templates ----

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// FNV-1a over the header, every table and the note.
uint64_t template_digest(const dash::Plan& plan) {
  uint64_t h = fnv1a(1469598103934665603ull, &plan.header, sizeof plan.header);
  h = fnv1a(h, plan.items.data(), plan.items.size() * sizeof(dash_item));
  h = fnv1a(h, plan.segments.data(), plan.segments.size() * sizeof(dash_segment));
  h = fnv1a(h, plan.visits.data(), plan.visits.size() * sizeof(dash_visit));
  h = fnv1a(h, plan.dq_count.data(), plan.dq_count.size() * sizeof(uint16_t));
  h = fnv1a(h, plan.group_head_by_rank.data(), plan.group_head_by_rank.size());
  return fnv1a(h, plan.note.data(), plan.note.size());
}

struct RecordedTemplate {
  const char* name;
  dash::Problem problem;
  dash::GqaMode mode;
  uint64_t digest[4];  // per planner, in all_planners() order
};

// Digests recorded at 7d6e66e, before the visit table was left uninitialised (dash::TableAllocator), lock-step
// templates were written in one pass from the drafts (planners.cpp, write_by_arrival) and threads came from a pool.
// A planner changed on purpose changes them: the failure prints the new digest. (Shift at 64k full: recorded anew
// when chunked full-mask shift templates started their items 2 rows apart, dash_plan_header::rank_spacing; the chunked
// lock-step templates of equal items, symmetric shift at 64k / 32k causal and both shifts at 64k full, anew when they
// were cut into slots, plan_format.h "Slots": same visits and ranks, tables in slot order; test_slots.cpp.)
std::vector<RecordedTemplate> recorded_templates() {
  using dash::test::make_problem;
  using dash::test::windowed;
  return {
      {"4100 causal", make_problem(4100, 4100, dash::Mask::Causal), dash::GqaMode::SplitHeads,
       {0xc0c2bcd1946c5982ull, 0x82f912a0978e2169ull, 0xbb3f33b401e26a82ull, 0x518f3b6f10a84e6full}},
      {"64k causal", make_problem(65536, 65536, dash::Mask::Causal), dash::GqaMode::SplitHeads,
       {0x5c28415a224a18a6ull, 0x30db9827ebf671a9ull, 0xe90c99d63c1d91b4ull, 0x68a295b3dc905039ull}},
      {"64k full, head dim 64", make_problem(65536, 65536, dash::Mask::Full, 1, 1, 1, 64), dash::GqaMode::SplitHeads,
       {0x8f72ed0fbd147d12ull, 0x308db9e6e5746441ull, 0xd11ada5fe9ed743dull, 0xda861bdd0c3bcb11ull}},
      {"32k causal, pack 4", make_problem(32768, 32768, dash::Mask::Causal, 4, 1), dash::GqaMode::PackGroup,
       {0xa131943a750373f9ull, 0xb70c83f3a3f3dd94ull, 0x5f06b4227da4aba7ull, 0x3d7c85c11a7f6a59ull}},
      {"3000 x 700 full, pack 2", make_problem(3000, 700, dash::Mask::Full, 2, 1), dash::GqaMode::PackGroup,
       {0x98cd1a8f019ba742ull, 0x30c5691e0e78119bull, 0x863956ff60316210ull, 0x34d3cca7842c6abeull}},
      {"40k window", windowed(make_problem(40000, 40000, dash::Mask::Full), 3000, 0), dash::GqaMode::SplitHeads,
       {0x0bc88663fd759d1dull, 0x4b5770167cfc916eull, 0x024fad0e66ca30a1ull, 0xe831c8ae43b7d9b1ull}},
  };
}

TEST(PlanSpeedEquivalence, TemplatesKeepTheirRecordedBytesInRecycledStorage) {
  // The visit table is not zero-filled: a visit the build failed to write would keep whatever its storage held. Each
  // build follows a table of its size filled with a pattern and freed (storage the allocator may hand out again; it
  // does for tables under its mmap threshold, and for larger ones once it has freed one), so an unwritten byte
  // changes the digest. One thread and the automatic count (the worker pool); two patterns.
  for (const RecordedTemplate& t : recorded_templates())
    for (size_t k = 0; k < dash::all_planners().size(); ++k) {
      const Planner planner = dash::all_planners()[k];
      const size_t visits = dash::build_unvalidated(t.problem, planner, {}, t.mode, 1).visits.size();
      for (int threads : {1, 0})
        for (unsigned char pattern : {0xA5, 0x5A}) {
          {
            dash::VisitTable stale(visits);
            std::memset(stale.data(), pattern, visits * sizeof(dash_visit));
          }
          const PlannerThreads scope(threads);
          const dash::Plan plan = dash::build_unvalidated(t.problem, planner, {}, t.mode, 1);
          char expected[32];
          std::snprintf(expected, sizeof expected, "0x%016llx", static_cast<unsigned long long>(t.digest[k]));
          char got[32];
          std::snprintf(got, sizeof got, "0x%016llx", static_cast<unsigned long long>(template_digest(plan)));
          EXPECT_STREQ(got, expected) << t.name << ", " << dash::planner_name(planner) << ", " << threads
                                      << " threads, pattern " << int(pattern);
        }
    }
}

TEST(PlanSpeedEquivalence, ConcurrentBuildsGiveTheSequentialTemplates) {
  // Two callers at once: one runs its parts on the worker pool, the other (finding it busy) on its own thread.
  const std::vector<RecordedTemplate> templates = recorded_templates();
  std::vector<uint64_t> digests(templates.size() * 4);
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&, c] {
      for (size_t i = c; i < digests.size(); i += 3)
        digests[i] = template_digest(dash::build_unvalidated(templates[i / 4].problem, dash::all_planners()[i % 4], {},
                                                             templates[i / 4].mode, 1));
    });
  for (std::thread& t : callers) t.join();
  for (size_t i = 0; i < digests.size(); ++i)
    EXPECT_EQ(digests[i], templates[i / 4].digest[i % 4]) << templates[i / 4].name << ", "
                                                         << dash::planner_name(dash::all_planners()[i % 4]);
}

// Shapes of about 2^18 visits and more, where threads start on their own (forced counts reach any size).
struct LargeCase {
  dash::Problem problem;
  dash::GqaMode mode;
};

std::vector<LargeCase> large_cases() {
  using dash::test::make_problem;
  return {{make_problem(65536, 65536, dash::Mask::Causal), dash::GqaMode::SplitHeads},
          {make_problem(65536, 65536, dash::Mask::Full), dash::GqaMode::SplitHeads},
          {make_problem(32768, 32768, dash::Mask::Causal, 4, 1), dash::GqaMode::PackGroup},
          {make_problem(32768, 40000, dash::Mask::Full, 2, 1), dash::GqaMode::PackGroup},
          {dash::test::windowed(make_problem(65536, 65536, dash::Mask::Full), 20000, 3000), dash::GqaMode::SplitHeads}};
}

TEST(PlanSpeedEquivalence, ThreadedBuildAndValidationAreByteIdentical) {
  for (const LargeCase& c : large_cases())
    for (Planner planner : dash::all_planners()) {
      const std::string name = describe(c.problem, planner, c.mode);
      dash::Plan one;
      std::string one_verdict;
      {
        const PlannerThreads scope(1);
        one = dash::build_unvalidated(c.problem, planner, {}, c.mode, 1);
        one_verdict = verdict(one);
      }
      EXPECT_EQ(one_verdict.rfind("ok", 0), 0u) << name << ": " << one_verdict;
      for (int threads : {0, 2, 3, 8, 16}) { // 0: the automatic count
        const PlannerThreads scope(threads);
        const dash::Plan plan = dash::build_unvalidated(c.problem, planner, {}, c.mode, 1);
        EXPECT_EQ(plan_difference(plan, one), "") << name << ", " << threads << " threads";
        EXPECT_EQ(verdict(plan), one_verdict) << name << ", " << threads << " threads";
      }
    }
}

TEST(PlanSpeedEquivalence, ThreadedBuildIsByteIdenticalOnSmallShapes) {
  // Forced threads on shapes far below the threshold: more threads than segments, items or positions.
  const int seqlens[] = {1, 65, 300, 2048, 4100};
  const MaskCase masks[] = {{dash::Mask::Full, -1, -1}, {dash::Mask::Causal, -1, -1}, {dash::Mask::Window, 300, 50},
                            {dash::Mask::Window, -1, 64}};
  for (int sq : seqlens)
    for (int sk : seqlens)
      for (const MaskCase& m : masks)
        for (int group : {1, 4})
          for (dash::GqaMode mode : {dash::GqaMode::SplitHeads, dash::GqaMode::PackGroup}) {
            dash::Problem p = dash::test::make_problem(sq, sk, m.mask, group, 1);
            if (m.mask == dash::Mask::Window) p = dash::test::windowed(p, m.left, m.right);
            for (Planner planner : dash::all_planners()) {
              dash::Plan one;
              std::string one_verdict;
              {
                const PlannerThreads scope(1);
                one = dash::build_unvalidated(p, planner, {}, mode, 1);
                one_verdict = verdict(one);
              }
              const PlannerThreads scope(5);
              const dash::Plan plan = dash::build_unvalidated(p, planner, {}, mode, 1);
              EXPECT_EQ(plan_difference(plan, one), "") << describe(p, planner, mode);
              EXPECT_EQ(verdict(plan), one_verdict) << describe(p, planner, mode);
            }
          }
}

TEST(PlanSpeedEquivalence, ThreadedValidationGivesTheOneThreadVerdicts) {
  // Reordered and broken large plans: each check's first failure, the fallbacks from the claim-order and lock-step
  // shortcuts to the general checks, and the waves must not depend on how the table is split.
  for (const LargeCase& c : large_cases())
    for (Planner planner : dash::all_planners()) {
      const std::string name = describe(c.problem, planner, c.mode);
      dash::Plan plan;
      {
        const PlannerThreads scope(1);
        plan = dash::build_unvalidated(c.problem, planner, {}, c.mode, 1);
      }
      const int nv = int(plan.visits.size());
      expect_same_verdicts(plan, name);
      // Another order: reversed (every wait forward), rotated (a cycle on most accumulators), and each
      // accumulator's second half first (ranks that run on within any part that holds one half).
      expect_same_verdicts(reranked(plan, [](int r, int n) { return n - 1 - r; }), name + ", reversed");
      expect_same_verdicts(reranked(plan, [](int r, int n) { return (r + n - 1) % n; }), name + ", rotated");
      const dash::Plan halves = reranked(plan, [](int r, int n) { return (r + n / 2) % n; });
      expect_same_verdicts(halves, name + ", halves swapped");
      {
        const PlannerThreads scope(3);
        EXPECT_EQ(wave_difference(halves), "") << name << ", halves swapped";
      }
      // Two ranks of one late accumulator swapped: its first two, or its second and third (so that its first
      // visit in the walk still has rank 0).
      for (int low : {0, 1}) {
        dash::Plan bad = plan;
        const size_t a = accumulator_of(bad, bad.visits[nv - 1]);
        for (dash_visit& v : bad.visits)
          if (accumulator_of(bad, v) == a && (v.dq_rank == low || v.dq_rank == low + 1))
            v.dq_rank = uint16_t(2 * low + 1 - v.dq_rank);
        const std::string variant = name + ", ranks " + std::to_string(low) + " and " + std::to_string(low + 1) +
                                    " swapped";
        bad = with_flags_of_ranks(std::move(bad));
        expect_same_verdicts(bad, variant);
        const PlannerThreads scope(3); // and right, not only the same
        EXPECT_EQ(wave_difference(bad), "") << variant;
      }
      // Structure: bad Q tiles and heads at two places (the first must be reported).
      {
        dash::Plan bad = plan;
        bad.visits[nv - 2].q_tile = uint16_t(bad.header.num_q_tiles);
        bad.visits[nv / 2 + 1].head_in_unit = uint8_t(bad.header.heads_per_unit);
        expect_same_verdicts(bad, name + ", bad Q tile and head");
        bad.visits[nv / 3].q_tile = uint16_t(bad.header.num_q_tiles + 5);
        expect_same_verdicts(bad, name + ", three bad visits");
      }
      // Coverage: a doubled block late in the table and a wrong partial flag in the middle.
      {
        dash::Plan bad = plan;
        const dash_segment& last = bad.segments.back();
        if (last.num_visits >= 2) bad.visits[last.first_visit + 1] = bad.visits[last.first_visit];
        expect_same_verdicts(bad, name + ", doubled block");
        bad.visits[nv / 2].flags ^= DASH_VISIT_PARTIAL_MASK;
        expect_same_verdicts(bad, name + ", doubled block and wrong flag");
      }
      // Too few CTAs for the plan's wave.
      {
        const PlannerThreads scope(3);
        const auto r = dash::validate_plan(plan, 1);
        const PlannerThreads one(1);
        const auto r1 = dash::validate_plan(plan, 1);
        EXPECT_EQ(r.ok, r1.ok) << name;
        EXPECT_EQ(r.reason, r1.reason) << name;
      }
    }
}

} // namespace
