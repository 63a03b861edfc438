// SPDX-License-Identifier: Apache-2.0
// The simulator: exact makespans of hand-built plans (ranks, signal latency, overlapped reduce, claim rule,
// deadlock, GQA dK/dV order), the DASH paper's closed forms through the real planners, determinism and the
// critical path's consistency, and the Gantt chart's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dash/plan.hpp"
#include "dash/simulator.hpp"

namespace {

// ---- hand-built plans ----

struct VisitSpec {
  int q_tile;
  int rank;
  bool partial = false;
  int head = 0;
};
struct SegmentSpec {
  int kv_tile;
  std::vector<VisitSpec> visits;
};
using ItemSpec = std::vector<SegmentSpec>;

struct TinyOptions {
  int num_units = 1;
  int group_size = 1; // SPLIT_HEADS group: units of one group are consecutive
  uint32_t flags = 0;
};

// A unit template from item specs; every unit of the problem uses it (dash/plan_format.h).
dash::Plan tiny_plan(const std::vector<ItemSpec>& items, TinyOptions options = {}) {
  dash::Plan plan;
  int num_q = 1, num_kv = 1, heads = 1;
  for (const ItemSpec& item : items) {
    plan.items.push_back({int32_t(plan.segments.size()), int32_t(item.size())});
    for (const SegmentSpec& seg : item) {
      plan.segments.push_back({seg.kv_tile, int32_t(plan.visits.size()), int32_t(seg.visits.size()), 0});
      num_kv = std::max(num_kv, seg.kv_tile + 1);
      for (const VisitSpec& v : seg.visits) {
        dash_visit visit{};
        visit.q_tile = uint16_t(v.q_tile);
        visit.dq_rank = uint16_t(v.rank);
        visit.head_in_unit = uint8_t(v.head);
        visit.flags = v.partial ? DASH_VISIT_PARTIAL_MASK : 0;
        plan.visits.push_back(visit);
        num_q = std::max(num_q, v.q_tile + 1);
        heads = std::max(heads, v.head + 1);
      }
    }
  }
  plan.dq_count.assign(size_t(heads) * num_q, 0);
  for (const dash_visit& v : plan.visits) ++plan.dq_count[size_t(v.head_in_unit) * num_q + v.q_tile];
  plan.group_head_by_rank.resize(options.group_size);
  for (int g = 0; g < options.group_size; ++g) plan.group_head_by_rank[g] = uint8_t(g);

  dash_plan_header& h = plan.header;
  h.magic = DASH_PLAN_MAGIC;
  h.version = DASH_PLAN_FORMAT_VERSION;
  h.flags = options.flags;
  h.problem.batch = 1;
  h.problem.heads_q = options.num_units;
  h.problem.heads_kv = options.num_units / options.group_size;
  h.problem.seqlen_q = 128 * num_q;
  h.problem.seqlen_k = 128 * num_kv;
  h.problem.head_dim = 128;
  h.block_m = h.block_n = 128;
  h.num_q_tiles = num_q;
  h.num_kv_tiles = num_kv;
  h.gqa_mode = heads > 1 ? DASH_GQA_PACK_GROUP : DASH_GQA_SPLIT_HEADS;
  h.group_size = options.group_size;
  h.heads_per_unit = heads;
  h.num_units = options.num_units;
  h.items_per_unit = int32_t(plan.items.size());
  h.segments_per_unit = int32_t(plan.segments.size());
  h.visits_per_unit = int32_t(plan.visits.size());
  h.num_ctas = 1;
  h.min_coresident_ctas = 1;
  return plan;
}

dash::CostModel paper() { return dash::CostModel::paper(1.0, 0.25); }

dash::CostModel overlapped(double c, double r) {
  dash::CostModel cost = dash::CostModel::paper(c, r);
  cost.overlap_reduce = true;
  return cost;
}

// The critical path must tile [0, makespan] exactly: each step starts where the previous one ended, plus the
// signal latency when it waited for a release.
void expect_consistent_critical_path(const dash::SimResult& sim, const dash::CostModel& cost) {
  ASSERT_FALSE(sim.critical_path.empty());
  EXPECT_EQ(sim.critical_path.front().start, 0.0);
  EXPECT_EQ(sim.critical_path.back().end, sim.makespan);
  double length = 0;
  for (size_t i = 0; i < sim.critical_path.size(); ++i) {
    const auto& step = sim.critical_path[i];
    EXPECT_NE(step.kind, dash::SpanKind::Wait);
    EXPECT_GE(step.end, step.start);
    length += step.end - step.start;
    if (i == 0) continue;
    const double expected =
        sim.critical_path[i - 1].end + (step.after_signal ? cost.signal_latency : 0.0);
    EXPECT_EQ(step.start, expected) << "step " << i;
    if (step.after_signal) length += cost.signal_latency;
  }
  EXPECT_DOUBLE_EQ(length, sim.makespan);
}

// ---- blocking mode ----

TEST(SimTiny, SingleCtaRunsVisitsBackToBack) {
  const auto plan = tiny_plan({{{0, {{0, 0}, {1, 0}, {2, 0}}}}, {{1, {{0, 1}, {1, 1}, {2, 1}}}}});
  const auto sim = dash::simulate(plan, 1, paper());
  ASSERT_FALSE(sim.deadlocked) << sim.deadlock_detail;
  EXPECT_DOUBLE_EQ(sim.makespan, 6 * 1.25);
  EXPECT_DOUBLE_EQ(sim.total_compute, 6.0);
  EXPECT_DOUBLE_EQ(sim.total_reduce, 1.5);
  EXPECT_DOUBLE_EQ(sim.total_wait, 0.0);
  ASSERT_EQ(sim.cta_busy.size(), 1u);
  EXPECT_DOUBLE_EQ(sim.cta_busy[0], 7.5);
  EXPECT_DOUBLE_EQ(sim.idle_fraction, 0.0);
  expect_consistent_critical_path(sim, paper());
  EXPECT_EQ(sim.critical_path.size(), 12u); // every compute and reduce
}

TEST(SimTiny, PartialBlocksUseThePartialCost) {
  const auto plan = tiny_plan({{{0, {{0, 0, true}, {1, 0}}}}});
  auto cost = paper();
  cost.compute_partial = 0.5;
  EXPECT_DOUBLE_EQ(dash::simulate(plan, 1, cost).makespan, 0.5 + 0.25 + 1 + 0.25);
}

TEST(SimTiny, SegmentOverheadPrecedesEachSegment) {
  const auto plan = tiny_plan({{{0, {{0, 0}}}, {1, {{0, 1}}}}});
  auto cost = paper();
  cost.segment_overhead = 0.5;
  const auto sim = dash::simulate(plan, 1, cost);
  EXPECT_DOUBLE_EQ(sim.makespan, 2 * (0.5 + 1.25));
  EXPECT_DOUBLE_EQ(sim.total_overhead, 1.0);
  EXPECT_DOUBLE_EQ(sim.cta_busy[0], 3.5);
}

// FA3's ascending order on 2 KV tiles x 2 Q tiles: K1 waits r for K0's first reduce and then lags by r.
dash::Plan ascending_two_by_two() {
  return tiny_plan({{{0, {{0, 0}, {1, 0}}}}, {{1, {{0, 1}, {1, 1}}}}});
}

TEST(SimTiny, RankDependencyBetweenTwoCtas) {
  dash::SimOptions options;
  options.record_spans = true;
  const auto sim = dash::simulate(ascending_two_by_two(), 2, paper(), options);
  ASSERT_FALSE(sim.deadlocked);
  EXPECT_DOUBLE_EQ(sim.makespan, 2 * 1.25 + 0.25); // n(c+r) + (n-1)r
  EXPECT_DOUBLE_EQ(sim.cta_wait[0], 0.0);
  EXPECT_DOUBLE_EQ(sim.cta_wait[1], 0.25); // q0: compute ends at 1, K0's reduce releases at 1.25
  EXPECT_DOUBLE_EQ(sim.wait_fraction, 0.25 / (2 * 2.75));
  // The wait is a span of CTA 1 from 1 to 1.25.
  bool found = false;
  for (const auto& s : sim.spans)
    if (s.kind == dash::SpanKind::Wait) {
      EXPECT_EQ(s.cta, 1);
      EXPECT_DOUBLE_EQ(s.start, 1.0);
      EXPECT_DOUBLE_EQ(s.end, 1.25);
      found = true;
    }
  EXPECT_TRUE(found);
  expect_consistent_critical_path(sim, paper());
}

TEST(SimTiny, SignalLatencyAddsExactly) {
  auto cost = paper();
  cost.signal_latency = 0.5;
  const auto sim = dash::simulate(ascending_two_by_two(), 2, cost);
  // CTA 1: q0 reduce waits until 1.25 + 0.5, ends 2.0; q1 computes 2..3; K0's q1 release at 2.5 is seen at 3.0.
  EXPECT_DOUBLE_EQ(sim.makespan, 3.25);
  EXPECT_DOUBLE_EQ(sim.cta_wait[1], 0.75);
  expect_consistent_critical_path(sim, cost);
  const bool crosses_a_signal = std::any_of(sim.critical_path.begin(), sim.critical_path.end(),
                                            [](const dash::CriticalStep& s) { return s.after_signal; });
  EXPECT_TRUE(crosses_a_signal);
}

TEST(SimTiny, CtasClaimTicketsInOrderAndStopWhenNoneAreLeft) {
  // Three independent items on two CTAs: CTA 0 (free first, lower index on ties) takes ticket 2.
  const auto plan = tiny_plan({{{0, {{0, 0}}}}, {{1, {{1, 0}}}}, {{2, {{2, 0}}}}});
  dash::SimOptions options;
  options.record_spans = true;
  const auto sim = dash::simulate(plan, 2, paper(), options);
  EXPECT_DOUBLE_EQ(sim.makespan, 2.5);
  for (const auto& s : sim.spans) EXPECT_EQ(s.cta, int(s.ticket % 2)) << "ticket " << s.ticket;
  EXPECT_DOUBLE_EQ(sim.idle_fraction, 1.0 - 3.75 / (2 * 2.5));
}

// ---- overlap mode ----

TEST(SimTiny, OverlapHidesTheReduceBehindTheNextCompute) {
  const auto plan = tiny_plan({{{0, {{0, 0}, {1, 0}, {2, 0}}}}});
  EXPECT_DOUBLE_EQ(dash::simulate(plan, 1, paper()).makespan, 3.75);
  const auto sim = dash::simulate(plan, 1, overlapped(1.0, 0.25));
  EXPECT_DOUBLE_EQ(sim.makespan, 3.25); // computes back to back, the last reduce sticks out
  EXPECT_DOUBLE_EQ(sim.cta_wait[0], 0.0);
  EXPECT_DOUBLE_EQ(sim.cta_busy[0], 3.0); // compute stream only
  EXPECT_DOUBLE_EQ(sim.cta_reduce[0], 0.75);
  expect_consistent_critical_path(sim, overlapped(1.0, 0.25));
}

TEST(SimTiny, OverlapStallsWhileTheSingleBufferIsOccupied) {
  // Reduce 2 > compute 1: hand-off k waits for reduce k-1.
  // Computes [0,1] [1,2] [3,4], reduces [1,3] [3,5] [5,7].
  const auto plan = tiny_plan({{{0, {{0, 0}, {1, 0}, {2, 0}}}}});
  const auto sim = dash::simulate(plan, 1, overlapped(1.0, 2.0));
  EXPECT_DOUBLE_EQ(sim.makespan, 7.0);
  EXPECT_DOUBLE_EQ(sim.cta_wait[0], 2.0); // stalled 2..3 and 4..5
  expect_consistent_critical_path(sim, overlapped(1.0, 2.0));
}

// Item 0 computes q3, q4, q0 (q0's first contribution ends at 3.25); item 1 adds q1, then q0 second;
// item 2 is independent. CTA 1's compute stream finishes item 1 at 2 but its last reduce waits until 3.25.
dash::Plan claim_rule_plan(uint32_t flags) {
  return tiny_plan({{{0, {{3, 0}, {4, 0}, {0, 0}}}}, {{1, {{1, 0}, {0, 1}}}}, {{2, {{2, 0}}}}}, {1, 1, flags});
}

TEST(SimTiny, OverlapClaimsAheadOnlyForBackwardOnlyPlans) {
  // Without the flag CTA 1 may not claim before 3.25; CTA 0 claims ticket 2 at 3 and ends at 4.25.
  const auto gated = dash::simulate(claim_rule_plan(0), 2, overlapped(1.0, 0.25));
  ASSERT_FALSE(gated.deadlocked) << gated.deadlock_detail;
  EXPECT_DOUBLE_EQ(gated.makespan, 4.25);
  // With it, and claim-ahead enabled, CTA 1 claims ticket 2 at 2, computes 2..3, hands off once its q0
  // reduce ends at 3.5.
  dash::CostModel claim_ahead = overlapped(1.0, 0.25);
  claim_ahead.claim_ahead = true;
  const auto ahead = dash::simulate(claim_rule_plan(DASH_PLAN_WAITS_ONLY_BACKWARD), 2, claim_ahead);
  ASSERT_FALSE(ahead.deadlocked) << ahead.deadlock_detail;
  EXPECT_DOUBLE_EQ(ahead.makespan, 3.75);
  EXPECT_DOUBLE_EQ(ahead.cta_wait[1], 0.5);
  expect_consistent_critical_path(gated, overlapped(1.0, 0.25));
  expect_consistent_critical_path(ahead, claim_ahead);
  // Without claim-ahead (the kernels' rule) the flag changes nothing.
  EXPECT_DOUBLE_EQ(dash::simulate(claim_rule_plan(DASH_PLAN_WAITS_ONLY_BACKWARD), 2, overlapped(1.0, 0.25)).makespan,
                   4.25);
  // Blocking mode never claims ahead: the flag changes nothing there.
  EXPECT_DOUBLE_EQ(dash::simulate(claim_rule_plan(0), 2, paper()).makespan,
                   dash::simulate(claim_rule_plan(DASH_PLAN_WAITS_ONLY_BACKWARD), 2, paper()).makespan);
}

// ---- deadlock ----

TEST(SimTiny, CyclicWaitsAreReportedAsDeadlock) {
  // Item 0 first adds dQ0 at rank 1, awaiting item 1's second visit; item 1 first adds dQ1 at rank 1,
  // awaiting item 0's second visit.
  const auto plan = tiny_plan({{{0, {{0, 1}, {1, 0}}}}, {{1, {{1, 1}, {0, 0}}}}});
  for (bool overlap : {false, true}) {
    auto cost = paper();
    cost.overlap_reduce = overlap;
    const auto sim = dash::simulate(plan, 2, cost);
    EXPECT_TRUE(sim.deadlocked) << "overlap " << overlap;
    EXPECT_NE(sim.deadlock_detail.find("rank 1"), std::string::npos) << sim.deadlock_detail;
    EXPECT_NE(sim.deadlock_detail.find("CTA 0"), std::string::npos) << sim.deadlock_detail;
    EXPECT_NE(sim.deadlock_detail.find("CTA 1"), std::string::npos) << sim.deadlock_detail;
  }
}

TEST(SimTiny, ForwardWaitNeedsCoresidentCtas) {
  // Ticket 0 waits for ticket 1's contribution: one CTA can never get there, two can.
  const auto plan = tiny_plan({{{0, {{0, 1}}}}, {{1, {{0, 0}}}}});
  const auto alone = dash::simulate(plan, 1, paper());
  EXPECT_TRUE(alone.deadlocked);
  EXPECT_NE(alone.deadlock_detail.find("never claimed"), std::string::npos) << alone.deadlock_detail;
  const auto pair = dash::simulate(plan, 2, paper());
  ASSERT_FALSE(pair.deadlocked) << pair.deadlock_detail;
  EXPECT_DOUBLE_EQ(pair.makespan, 1.5);
}

// ---- the non-deterministic mode: adds in any order ----

TEST(SimNondeterministic, NoAddWaitsForItsTurn) {
  dash::SimOptions options;
  options.nondeterministic = true;
  // Deterministic, CTA 1's first reduce waits 0.25 for CTA 0's (RankDependencyBetweenTwoCtas): here both run
  // compute, reduce, compute, reduce back to back.
  const auto sim = dash::simulate(ascending_two_by_two(), 2, paper(), options);
  ASSERT_FALSE(sim.deadlocked);
  EXPECT_DOUBLE_EQ(sim.makespan, 2 * 1.25);
  EXPECT_DOUBLE_EQ(sim.cta_wait[0], 0.0);
  EXPECT_DOUBLE_EQ(sim.cta_wait[1], 0.0);
  EXPECT_DOUBLE_EQ(sim.wait_fraction, 0.0);
  expect_consistent_critical_path(sim, paper());
}

TEST(SimNondeterministic, ARankOrderThatCannotRunOnOneCtaDoesNotMatter) {
  // Ticket 0 adds at rank 1, after ticket 1 (ForwardWaitNeedsCoresidentCtas): one CTA deadlocks deterministically,
  // and runs both items back to back unordered, under the option or under the plan's own flag.
  const auto plan = tiny_plan({{{0, {{0, 1}}}}, {{1, {{0, 0}}}}});
  dash::SimOptions options;
  options.nondeterministic = true;
  const auto sim = dash::simulate(plan, 1, paper(), options);
  ASSERT_FALSE(sim.deadlocked) << sim.deadlock_detail;
  EXPECT_DOUBLE_EQ(sim.makespan, 2 * 1.25);

  auto flagged = plan;
  flagged.header.flags |= DASH_PLAN_NONDETERMINISTIC_ONLY;
  const auto by_flag = dash::simulate(flagged, 1, paper());
  ASSERT_FALSE(by_flag.deadlocked) << by_flag.deadlock_detail;
  EXPECT_DOUBLE_EQ(by_flag.makespan, 2 * 1.25);
}

TEST(SimNondeterministic, GqaDkvAddsWaitForNoGroupRank) {
  // GqaSplitHeadsAddsDkvInGroupRankOrder's plan: rank 1 heads no longer wait for rank 0's dK/dV add.
  const auto plan = tiny_plan({{{0, {{0, 0}}}}}, {4, 2, 0});
  auto cost = paper();
  cost.dkv_reduce = 0.5;
  dash::SimOptions options;
  options.nondeterministic = true;
  const auto sim = dash::simulate(plan, 4, cost, options);
  ASSERT_FALSE(sim.deadlocked) << sim.deadlock_detail;
  EXPECT_DOUBLE_EQ(sim.makespan, 1.75);
  for (int c = 0; c < 4; ++c) EXPECT_DOUBLE_EQ(sim.cta_wait[c], 0.0) << "CTA " << c;
  EXPECT_DOUBLE_EQ(sim.total_reduce, 4 * 0.25 + 4 * 0.5);
}

// ---- GQA: ordered dK/dV adds across a group (SPLIT_HEADS) ----

TEST(SimTiny, GqaSplitHeadsAddsDkvInGroupRankOrder) {
  // 4 query heads in 2 groups of 2; each unit: one KV tile, one visit.
  const auto plan = tiny_plan({{{0, {{0, 0}}}}}, {4, 2, 0});
  auto cost = paper();
  cost.dkv_reduce = 0.5;
  const auto sim = dash::simulate(plan, 4, cost);
  ASSERT_FALSE(sim.deadlocked) << sim.deadlock_detail;
  // Rank 0 heads: 1 + 0.25 + 0.5. Rank 1 heads wait for their own group's rank 0 (not the other group's).
  EXPECT_DOUBLE_EQ(sim.makespan, 1.75 + 0.5);
  EXPECT_DOUBLE_EQ(sim.cta_wait[0], 0.0);
  EXPECT_DOUBLE_EQ(sim.cta_wait[1], 0.5);
  EXPECT_DOUBLE_EQ(sim.cta_wait[2], 0.0);
  EXPECT_DOUBLE_EQ(sim.cta_wait[3], 0.5);
  EXPECT_DOUBLE_EQ(sim.total_reduce, 4 * 0.25 + 4 * 0.5);
  expect_consistent_critical_path(sim, cost);

  cost.signal_latency = 0.125;
  EXPECT_DOUBLE_EQ(dash::simulate(plan, 4, cost).makespan, 1.75 + 0.125 + 0.5);
  cost.dkv_reduce = 0; // no dK/dV add modelled: no order either
  EXPECT_DOUBLE_EQ(dash::simulate(plan, 4, cost).makespan, 1.25);
}

TEST(SimTiny, GqaDkvOrderIsPerKvTile) {
  // Two KV tiles per unit. Rank 1 waits at the end of each segment for rank 0's add of the same KV tile.
  const auto plan = tiny_plan({{{0, {{0, 0}}}, {1, {{0, 1}}}}}, {2, 2, 0});
  auto cost = paper();
  cost.dkv_reduce = 0.5;
  const auto sim = dash::simulate(plan, 2, cost);
  ASSERT_FALSE(sim.deadlocked) << sim.deadlock_detail;
  // CTA 0: [0,1] [1,1.25] dkv [1.25,1.75]; [1.75,2.75] [2.75,3] dkv [3,3.5].
  // CTA 1: [0,1] [1,1.25] waits, dkv [1.75,2.25]; [2.25,3.25] [3.25,3.5] dkv [3.5,4].
  EXPECT_DOUBLE_EQ(sim.makespan, 4.0);
  EXPECT_DOUBLE_EQ(sim.cta_wait[1], 0.5);
  expect_consistent_critical_path(sim, cost);
}

// ---- the DASH paper's closed forms, through the real planners ----

struct ClosedFormCase {
  const char* schedule;
  dash::Mask mask;
  bool needs_even_m;
  bool needs_even_n;
  double (*formula)(double m, double n, double c, double r);
};

const ClosedFormCase kClosedForms[] = {
    {"ascending", dash::Mask::Full, false, false,
     [](double m, double n, double c, double r) { return m * n * (c + r) + (n - 1) * r; }},
    {"shift", dash::Mask::Full, false, false,
     [](double m, double n, double c, double r) { return m * n * (c + r); }},
    {"descending", dash::Mask::Causal, true, false,
     [](double m, double n, double c, double r) { return m * (n + 1) * (c + r) / 2 + (n - 1) * r; }},
    {"symmetric-shift", dash::Mask::Causal, true, true,
     [](double m, double n, double c, double r) { return m * (n + 1) * (c + r) / 2; }},
};

// n KV tiles per head = n CTAs, m heads, 128 x 128 tiles, head dim 128.
dash::Plan paper_plan(const char* schedule, dash::Mask mask, int m, int n) {
  dash::PlanRequest request;
  request.problem.batch = 1;
  request.problem.heads_q = request.problem.heads_kv = m;
  request.problem.seqlen_q = request.problem.seqlen_k = 128 * n;
  request.problem.head_dim = 128;
  request.problem.mask = mask;
  request.schedule = dash::Schedule::parse(schedule);
  request.num_ctas = n;
  request.tiles = {128, 128};
  return dash::build_plan(request);
}

TEST(SimClosedForms, MatchThePaperExactly) {
  const double c = 1.0, r = 0.25; // exact in binary floating point
  const auto cost = dash::CostModel::paper(c, r);
  for (const auto& form : kClosedForms) {
    for (int n : {2, 4, 8, 16}) {
      if (form.needs_even_n && n % 2) continue;
      for (int m = 1; m <= 6; ++m) {
        if (form.needs_even_m && m % 2) continue;
        const auto plan = paper_plan(form.schedule, form.mask, m, n);
        const auto sim = dash::simulate(plan, n, cost);
        ASSERT_FALSE(sim.deadlocked) << form.schedule << " n=" << n << " m=" << m << ": "
                                     << sim.deadlock_detail;
        EXPECT_DOUBLE_EQ(sim.makespan, form.formula(m, n, c, r))
            << form.schedule << " (" << dash::mask_name(form.mask) << ") n=" << n << " m=" << m;
        expect_consistent_critical_path(sim, cost);
      }
    }
  }
}

// ---- determinism ----

TEST(SimDeterminism, SameInputsGiveIdenticalResults) {
  for (const auto& form : kClosedForms) {
    const auto plan = paper_plan(form.schedule, form.mask, 4, 8);
    dash::CostModel cost = dash::CostModel::paper(1.0, 0.3);
    cost.signal_latency = 0.7;
    cost.compute_partial = 0.45;
    cost.segment_overhead = 0.2;
    for (bool overlap : {false, true}) {
      cost.overlap_reduce = overlap;
      dash::SimOptions options;
      options.record_spans = true;
      const auto a = dash::simulate(plan, 8, cost, options);
      const auto b = dash::simulate(plan, 8, cost, options);
      ASSERT_FALSE(a.deadlocked) << a.deadlock_detail;
      EXPECT_EQ(a.makespan, b.makespan);
      EXPECT_EQ(a.cta_busy, b.cta_busy);
      EXPECT_EQ(a.cta_wait, b.cta_wait);
      ASSERT_EQ(a.spans.size(), b.spans.size());
      for (size_t i = 0; i < a.spans.size(); ++i) {
        EXPECT_EQ(a.spans[i].cta, b.spans[i].cta);
        EXPECT_EQ(a.spans[i].start, b.spans[i].start);
        EXPECT_EQ(a.spans[i].end, b.spans[i].end);
        EXPECT_EQ(a.spans[i].ticket, b.spans[i].ticket);
        EXPECT_EQ(a.spans[i].visit, b.spans[i].visit);
      }
      ASSERT_EQ(a.critical_path.size(), b.critical_path.size());
      for (size_t i = 0; i < a.critical_path.size(); ++i) {
        EXPECT_EQ(a.critical_path[i].start, b.critical_path[i].start);
        EXPECT_EQ(a.critical_path[i].ticket, b.critical_path[i].ticket);
      }
      expect_consistent_critical_path(a, cost);
      // Accounting: busy + wait never exceeds the CTA-time available.
      double busy = 0;
      for (double x : a.cta_busy) busy += x;
      EXPECT_NEAR(busy, overlap ? a.total_compute + a.total_overhead
                                : a.total_compute + a.total_overhead + a.total_reduce,
                  1e-9);
      EXPECT_LE(a.wait_fraction, a.idle_fraction + 1e-12);
      // Without spans or critical path the numbers are the same.
      dash::SimOptions lean;
      lean.critical_path = false;
      const auto c = dash::simulate(plan, 8, cost, lean);
      EXPECT_EQ(c.makespan, a.makespan);
      EXPECT_TRUE(c.critical_path.empty());
      EXPECT_TRUE(c.spans.empty());
    }
  }
}

TEST(SimDeterminism, RejectsBadArguments) {
  EXPECT_THROW(dash::simulate(ascending_two_by_two(), 0, paper()), dash::Error);
  auto broken = ascending_two_by_two();
  broken.visits[0].q_tile = 9;
  EXPECT_THROW(dash::simulate(broken, 2, paper()), dash::Error);
}

// ---- cost models ----

TEST(SimCostModel, PaperAndH200Estimates) {
  const auto p = dash::CostModel::paper(2.0, 0.5);
  EXPECT_EQ(p.compute_full, 2.0);
  EXPECT_EQ(p.compute_partial, 2.0);
  EXPECT_EQ(p.reduce, 0.5);
  EXPECT_EQ(p.signal_latency, 0.0);
  EXPECT_FALSE(p.overlap_reduce);

  dash::Problem problem;
  problem.seqlen_q = problem.seqlen_k = 4096;
  problem.head_dim = 128;
  const auto h = dash::CostModel::for_problem(problem, {128, 128});
  // 10 * 128^3 FLOPs at 777 TFLOP/s / 132 SMs * 0.71 (the backward kernel's measured fraction at hdim 128).
  EXPECT_NEAR(h.compute_full, 10.0 * 128 * 128 * 128 / (777e6 / 132 * 0.71), 1e-9);
  EXPECT_LT(h.compute_partial, h.compute_full);
  EXPECT_GT(h.reduce, 0.0);
  EXPECT_LT(h.reduce, h.compute_full);
  EXPECT_EQ(h.signal_latency, 2.5);
  // Head dim 64 reaches a smaller fraction of the ceiling (0.60): a block of the same FLOPs costs more.
  dash::Problem problem64 = problem;
  problem64.head_dim = 64;
  EXPECT_GT(dash::CostModel::for_problem(problem64, {128, 128}).compute_full,
            dash::CostModel::for_problem(problem, {128, 64}).compute_full);
  EXPECT_GT(h.segment_overhead, 0.0);
  EXPECT_EQ(h.dkv_reduce, 0.0); // MHA: no group
  EXPECT_TRUE(h.overlap_reduce);
  EXPECT_NE(h.describe().find("overlapped"), std::string::npos);
  problem.heads_q = 8;
  problem.heads_kv = 2;
  EXPECT_GT(dash::CostModel::for_problem(problem, {128, 128}).dkv_reduce, 0.0);
}

// ---- Gantt chart ----

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SimGantt, DrawsRowsSpansAxisAndLegend) {
  const auto plan = paper_plan("ascending", dash::Mask::Causal, 2, 4);
  dash::SimOptions options;
  options.record_spans = true;
  const auto sim = dash::simulate(plan, 4, paper(), options);
  const std::string svg = dash::gantt_svg(plan, sim, 3, "a <test> & more");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find("a &lt;test&gt; &amp; more"), std::string::npos);
  EXPECT_NE(svg.find(">CTA 2<"), std::string::npos);
  EXPECT_EQ(svg.find(">CTA 3<"), std::string::npos); // only the first max_ctas rows
  EXPECT_NE(svg.find("first 3 of 4 CTAs"), std::string::npos);
  EXPECT_NE(svg.find("critical path"), std::string::npos);
  EXPECT_NE(svg.find("#e15759"), std::string::npos); // waits are drawn (causal ascending has some)
  EXPECT_GT(count(svg, "<rect"), 20u);
  EXPECT_EQ(count(svg, "<svg"), count(svg, "</svg>"));
  EXPECT_EQ(count(svg, "<g"), count(svg, "</g>"));
}

TEST(SimGantt, WithoutSpansSaysSo) {
  const auto plan = ascending_two_by_two();
  const auto sim = dash::simulate(plan, 2, paper());
  const std::string svg = dash::gantt_svg(plan, sim);
  EXPECT_NE(svg.find("no spans recorded"), std::string::npos);
}

TEST(SimGantt, StaysSmallForLargeProblems) {
  // 16 heads x 64 KV tiles, causal: ~33k visits, ~100k spans on 132 CTAs.
  dash::PlanRequest request;
  request.problem.heads_q = request.problem.heads_kv = 16;
  request.problem.seqlen_q = request.problem.seqlen_k = 8192;
  request.problem.mask = dash::Mask::Causal;
  request.schedule = dash::Schedule::parse("descending");
  request.num_ctas = 132;
  request.tiles = {128, 128};
  const auto plan = dash::build_plan(request);
  dash::SimOptions options;
  options.record_spans = true;
  const auto cost = dash::CostModel::for_problem(request.problem, request.tiles);
  const auto sim = dash::simulate(plan, 132, cost, options);
  ASSERT_FALSE(sim.deadlocked) << sim.deadlock_detail;
  EXPECT_GT(sim.spans.size(), 50000u);
  const std::string svg = dash::gantt_svg(plan, sim, 64);
  EXPECT_LT(svg.size(), 4u << 20);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

} // namespace
