// SPDX-License-Identifier: Apache-2.0
// The validator, adversarially: plans that must be rejected, with the reason, and the window bound
// checked against the simulator (the same execution model run event by event).
#include <gtest/gtest.h>

#include "dash/plan.hpp"
#include "dash/simulator.hpp"

namespace {

dash::Problem square(int seqlen, dash::Mask mask) {
  dash::Problem p;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.mask = mask;
  return p;
}

dash::Plan ascending(const dash::Problem& p, dash::TileShape t) {
  return dash::build_unvalidated(p, dash::Planner::Ascending, t, dash::GqaMode::SplitHeads, 1);
}

void expect_rejected(const dash::Plan& plan, int ctas, const std::string& fragment) {
  const auto report = dash::validate_plan(plan, ctas);
  EXPECT_FALSE(report.ok) << "expected rejection containing '" << fragment << "'";
  EXPECT_NE(report.reason.find(fragment), std::string::npos) << report.reason;
}

int find_visit(const dash::Plan& plan, int kv_tile, int q_tile) {
  for (const auto& seg : plan.segments)
    if (seg.kv_tile == kv_tile)
      for (int v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v)
        if (plan.visits[v].q_tile == q_tile) return v;
  return -1;
}

TEST(Validator, AcceptsTheUnmodifiedPlan) {
  const auto plan = ascending(square(512, dash::Mask::Causal), {128, 128});
  const auto report = dash::validate_plan(plan, 1);
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_EQ(report.min_coresident_ctas, 1);
  EXPECT_TRUE(report.waits_only_backward);
}

TEST(Validator, RejectsAVisitedTwiceBlock) {
  auto plan = ascending(square(512, dash::Mask::Full), {128, 128});
  plan.visits[find_visit(plan, 1, 2)].q_tile = 3; // K1 now visits q3 twice and never q2
  expect_rejected(plan, 132, "visited twice");
}

TEST(Validator, RejectsAMissingBlock) {
  auto plan = ascending(square(512, dash::Mask::Full), {128, 128});
  // Drop the last visit (K3 on q3) and keep every table consistent with it: only coverage is violated.
  const dash_visit dropped = plan.visits.back();
  plan.visits.pop_back();
  plan.segments.back().num_visits -= 1;
  plan.header.visits_per_unit -= 1;
  plan.dq_count[dropped.q_tile] -= 1;
  for (auto& v : plan.visits)
    if (v.q_tile == dropped.q_tile && v.dq_rank == dropped.dq_rank - 1) v.flags |= DASH_VISIT_LAST;
  expect_rejected(plan, 132, "never visited");
}

TEST(Validator, RejectsAFullyMaskedBlock) {
  auto plan = ascending(square(512, dash::Mask::Causal), {128, 128});
  plan.visits[find_visit(plan, 1, 3)].q_tile = 0; // causal: K1 never meets q0
  expect_rejected(plan, 132, "fully masked");
}

TEST(Validator, RejectsRankGapsAndWrongCounts) {
  auto plan = ascending(square(512, dash::Mask::Full), {128, 128});
  const int v = find_visit(plan, 3, 0); // last contributor of dQ0, rank 3
  plan.visits[v].dq_rank = 5;
  expect_rejected(plan, 132, "ranks are not");
  plan = ascending(square(512, dash::Mask::Full), {128, 128});
  plan.dq_count[0] = 3;
  expect_rejected(plan, 132, "dq_count");
}

TEST(Validator, RejectsWrongFlags) {
  auto plan = ascending(square(500, dash::Mask::Causal), {128, 128});
  plan.visits[find_visit(plan, 0, 0)].flags &= ~DASH_VISIT_PARTIAL_MASK; // the diagonal block is partial
  expect_rejected(plan, 132, "partial-mask flag");
  plan = ascending(square(512, dash::Mask::Full), {128, 128});
  plan.visits[find_visit(plan, 2, 1)].flags |= DASH_VISIT_LAST;
  expect_rejected(plan, 132, "LAST flag");
}

TEST(Validator, RejectsAKvTileInTwoSegments) {
  auto plan = ascending(square(512, dash::Mask::Full), {128, 128});
  plan.segments[3].kv_tile = 2;
  expect_rejected(plan, 132, "segments");
}

TEST(Validator, RejectsBrokenTables) {
  auto plan = ascending(square(512, dash::Mask::Full), {128, 128});
  plan.items[1].first_segment = 0;
  expect_rejected(plan, 132, "does not continue");
  plan = ascending(square(512, dash::Mask::Full), {128, 128});
  plan.header.magic = 0;
  expect_rejected(plan, 132, "magic");
  plan = ascending(square(512, dash::Mask::Full), {128, 128});
  plan.group_head_by_rank = {};
  expect_rejected(plan, 132, "group_head_by_rank");
  plan = ascending(square(512, dash::Mask::Full), {128, 128});
  EXPECT_FALSE(dash::validate_plan(plan, 0).ok);
}

TEST(Validator, RejectsAWaitCycle) {
  // Two KV tiles, two Q tiles. K1 visits q1 then q0. dQ0 order K1, K0; dQ1 order K0, K1:
  // K1.q1 waits for K0.q1, which follows K0.q0, which waits for K1.q0, which follows K1.q1.
  auto plan = ascending(square(256, dash::Mask::Full), {128, 128});
  auto& k1 = plan.segments[1];
  std::swap(plan.visits[k1.first_visit], plan.visits[k1.first_visit + 1]);
  plan.visits[find_visit(plan, 0, 0)].dq_rank = 1;
  plan.visits[find_visit(plan, 1, 0)].dq_rank = 0;
  for (auto& v : plan.visits) {
    v.flags &= ~(DASH_VISIT_FIRST | DASH_VISIT_LAST);
    v.flags |= v.dq_rank == 0 ? DASH_VISIT_FIRST : DASH_VISIT_LAST;
  }
  expect_rejected(plan, 132, "wait cycle");
  // The simulator agrees: it never finishes.
  const auto sim = dash::simulate(plan, 2, dash::CostModel::paper(1, 0.25));
  EXPECT_TRUE(sim.deadlocked);
}

TEST(Validator, RejectsAnItemWaitingOnItsOwnLaterVisit) {
  // Multi-segment items could visit the same dQ tile twice; a wait on the later of the two is a cycle.
  auto plan = dash::build_unvalidated(square(512, dash::Mask::Full), dash::Planner::SymmetricShift, {128, 128},
                                      dash::GqaMode::SplitHeads, 1);
  ASSERT_EQ(plan.items.size(), 2u); // (K0, K3) and (K1, K2)
  // In item 0, K0 visits q3 before K3 does. Reverse their ranks on dQ3.
  const int early = find_visit(plan, 0, 3), late = find_visit(plan, 3, 3);
  ASSERT_LT(early, late);
  std::swap(plan.visits[early].dq_rank, plan.visits[late].dq_rank);
  for (auto& v : plan.visits) {
    const int count = plan.dq_count[v.q_tile];
    v.flags &= ~(DASH_VISIT_FIRST | DASH_VISIT_LAST);
    if (v.dq_rank == 0) v.flags |= DASH_VISIT_FIRST;
    if (v.dq_rank == count - 1) v.flags |= DASH_VISIT_LAST;
  }
  expect_rejected(plan, 132, "wait cycle");
}

TEST(Validator, WaveBoundIsExactForShiftAndTheSimulatorDeadlocksBelowIt) {
  // Full-mask shift with N KV tiles: item k's first contributions are awaited by items with smaller
  // tickets, so the whole head must be co-resident.
  for (int n : {2, 3, 5, 8}) {
    const auto plan = dash::build_unvalidated(square(128 * n, dash::Mask::Full), dash::Planner::Shift, {128, 128},
                                              dash::GqaMode::SplitHeads, 1);
    const auto ok = dash::validate_plan(plan, n);
    ASSERT_TRUE(ok.ok) << ok.reason;
    EXPECT_EQ(ok.min_coresident_ctas, n);
    EXPECT_FALSE(ok.waits_only_backward);
    expect_rejected(plan, n - 1, "co-resident");
    EXPECT_FALSE(dash::simulate(plan, n, dash::CostModel::paper(1, 0.25)).deadlocked);
    // With one CTA fewer, some item waits for one that can only start after it: the model hangs.
    EXPECT_TRUE(dash::simulate(plan, n - 1, dash::CostModel::paper(1, 0.25)).deadlocked) << n;
  }
}

TEST(Validator, WavesAcrossUnitsAreCountedPerUnit) {
  // 4 heads of a 3-KV-tile shift plan: each head is its own wave of 3; 3 CTAs suffice for 12 items.
  dash::Problem p = square(384, dash::Mask::Full);
  p.heads_q = p.heads_kv = 4;
  p.batch = 2;
  const auto plan = dash::build_unvalidated(p, dash::Planner::Shift, {128, 128}, dash::GqaMode::SplitHeads, 1);
  EXPECT_TRUE(dash::validate_plan(plan, 3).ok);
  EXPECT_FALSE(dash::simulate(plan, 3, dash::CostModel::paper(1, 0.25)).deadlocked);
  EXPECT_FALSE(dash::validate_plan(plan, 2).ok);
}

TEST(Validator, SingleCtaAndHugeCtaCounts) {
  for (auto mask : {dash::Mask::Full, dash::Mask::Causal}) {
    for (auto planner : {dash::Planner::Ascending, dash::Planner::Descending}) {
      const auto plan = dash::build_unvalidated(square(1000, mask), planner, {64, 128}, dash::GqaMode::SplitHeads, 1);
      EXPECT_TRUE(dash::validate_plan(plan, 1).ok);
      EXPECT_TRUE(dash::validate_plan(plan, 1 << 20).ok); // more CTAs than work: the rest exit at once
      EXPECT_FALSE(dash::simulate(plan, 1, dash::CostModel::paper(1, 0.25)).deadlocked);
      EXPECT_FALSE(dash::simulate(plan, 4096, dash::CostModel::paper(1, 0.25)).deadlocked);
    }
  }
}

} // namespace
