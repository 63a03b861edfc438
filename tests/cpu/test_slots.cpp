// SPDX-License-Identifier: Apache-2.0
// Slots (dash/plan_format.h, "Slots"): lock-step templates cut where every item starts a segment, their ranks, their
// claim order slot by slot across groups of units, the group, and what the validator accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dash/plan.hpp"
#include "dash/simulator.hpp"
#include "plan_internal.hpp"
#include "test_plans.hpp"
#include "test_problems.hpp"

namespace {

using dash::Planner;
using dash::test::make_problem;

struct CutCase {
  dash::Problem problem;
  Planner planner;
  int32_t slots;  // the construction's: KV tiles (shift) or pairs (symmetric shift) per chunked item
};

// Chunked lock-step templates whose items are equally long: 16 items (kMaxLockstepItems) of 2 or 4 KV tiles / pairs.
std::vector<CutCase> cut_cases() {
  return {
      {make_problem(16384, 16384, dash::Mask::Causal, 2, 2, 1, 64), Planner::SymmetricShift, 4},  // 128 tiles, 64 pairs
      {make_problem(8192, 8192, dash::Mask::Causal, 2, 2, 1, 128), Planner::SymmetricShift, 2},   // 64 tiles
      {make_problem(4096, 4096, dash::Mask::Full, 2, 1, 1, 128), Planner::Shift, 2},               // 32 tiles
      {make_problem(8192, 8192, dash::Mask::Full, 4, 2, 1, 64), Planner::Shift, 4},                // 64 tiles
  };
}

dash::Plan named(const dash::Problem& p, Planner planner, int32_t ctas,
                 dash::GqaMode mode = dash::GqaMode::SplitHeads) {
  return dash::build_plan({p, {dash::Schedule::Kind::Planner, planner}, ctas, {}, mode, nullptr});
}

std::string label_of(const dash::Plan& plan) {
  return plan.problem().describe() + " " + dash::planner_name(plan.planner());
}

// The uncut template, rebuilt from the cut one: item i is the concatenation of items i, W + i, 2W + i, ... Walking
// its visits by (position, item) must give every dQ accumulator its ranks 0, 1, 2, ... in turn: the lock-step
// arrival order of the uncut items, which is how the planners rank a lock-step template. So the cut kept the ranks
// (and the bits). Independent of the planner's code: it rebuilds the order from the tables alone.
TEST(Slots, CutTemplatesKeepTheUncutLockstepRanks) {
  for (const CutCase& c : cut_cases()) {
    for (const dash::GqaMode mode : {dash::GqaMode::SplitHeads, dash::GqaMode::PackGroup}) {
      if (mode == dash::GqaMode::PackGroup && c.problem.group_size() == 1) continue;
      const dash::Plan plan = named(c.problem, c.planner, 132, mode);
      const std::string label = label_of(plan);
      const dash_plan_header& h = plan.header;
      ASSERT_EQ(h.items_per_slot, 16) << label << ": " << plan.note;
      ASSERT_EQ(h.items_per_unit, 16 * c.slots) << label;
      const int32_t width = h.items_per_slot;
      const std::vector<std::vector<int32_t>> uncut = dash::test::lockstep_items(plan);
      size_t longest = 0;
      for (const auto& item : uncut) longest = std::max(longest, item.size());
      std::vector<int32_t> next_rank(plan.dq_count.size(), 0);
      int64_t walked = 0;
      for (size_t position = 0; position < longest; ++position)
        for (const auto& item : uncut) {
          if (position >= item.size()) continue;
          const dash_visit& vis = plan.visits[size_t(item[position])];
          const size_t a = size_t(vis.head_in_unit) * size_t(h.num_q_tiles) + vis.q_tile;
          ASSERT_EQ(vis.dq_rank, next_rank[a]++) << label << ": visit " << item[position] << " (q " << vis.q_tile
                                                 << ") at position " << position;
          ++walked;
        }
      EXPECT_EQ(walked, h.visits_per_unit) << label;
      for (size_t a = 0; a < plan.dq_count.size(); ++a) EXPECT_EQ(next_rank[a], plan.dq_count[a]) << label;
      // The cut is at positions common to all items, so a slot's items are equally long.
      for (int32_t slot = 0; slot < c.slots; ++slot) {
        std::vector<int32_t> lengths;
        for (int32_t i = slot * width; i < (slot + 1) * width; ++i) {
          const dash_item& item = plan.items[size_t(i)];
          const dash_segment& last = plan.segments[size_t(item.first_segment + item.num_segments - 1)];
          lengths.push_back(last.first_visit + last.num_visits - plan.segments[size_t(item.first_segment)].first_visit);
        }
        EXPECT_EQ(std::count(lengths.begin(), lengths.end(), lengths[0]), width) << label << ": slot " << slot;
      }
      const dash::ValidationReport report = dash::validate_plan(plan, 16);
      EXPECT_TRUE(report.ok) << label << ": " << report.reason;
      EXPECT_LE(report.min_coresident_ctas, width) << label;
    }
  }
}

// Templates whose items differ in length, or that have 16 items or fewer, are not cut; claim-order templates never.
TEST(Slots, OnlyEqualChunkedLockstepItemsAreCut) {
  const auto short_causal = make_problem(2048, 2048, dash::Mask::Causal, 2, 2, 1, 128);  // 16 KV tiles
  EXPECT_EQ(named(short_causal, Planner::Shift, 132).header.items_per_slot, 0);
  // Causal shift at 64 KV tiles: item j takes tiles j, j + 16, ... of unequal lengths.
  const auto causal = make_problem(8192, 8192, dash::Mask::Causal, 2, 2, 1, 128);
  EXPECT_EQ(named(causal, Planner::Shift, 132).header.items_per_slot, 0);
  EXPECT_EQ(named(causal, Planner::Descending, 132).header.items_per_slot, 0);
  EXPECT_EQ(named(causal, Planner::Ascending, 132).header.items_per_slot, 0);
}

// The claim order of a bound plan cut into slots: a bijection of tickets onto (unit, item) that keeps each unit's
// items in order (a wait on an earlier item is a wait on an earlier ticket) and each slot's items on consecutive
// tickets (a slot is the wave: its items wait on each other), with units taken group by group.
TEST(Slots, ClaimOrderIsABijectionKeepingUnitOrderAndSlotsWhole) {
  for (const int32_t heads : {1, 3, 12, 20, 28, 32, 36}) {
    for (const int32_t ctas : {16, 124, 132}) {
      const auto p = make_problem(16384, 16384, dash::Mask::Causal, heads, heads, 1, 64);
      const dash::Plan plan = named(p, Planner::SymmetricShift, ctas);
      const dash_plan_header& h = plan.header;
      const std::string label = label_of(plan) + " on " + std::to_string(ctas) + " CTAs";
      ASSERT_TRUE(h.flags & DASH_PLAN_ITEM_MAJOR) << label;
      ASSERT_FALSE(h.flags & DASH_PLAN_NONDETERMINISTIC_ONLY) << label;
      ASSERT_GE(h.ticket_group_units, 1) << label;
      const int32_t w = h.items_per_slot, items = h.items_per_unit, g = h.ticket_group_units;
      std::vector<int32_t> next_item(size_t(h.num_units), 0);
      for (int32_t t = 0; t < h.num_units * items; ++t) {
        const auto [unit, item] = dash_ticket_locate(h.flags, g, w, h.num_units, items, t);
        ASSERT_TRUE(unit >= 0 && unit < h.num_units && item >= 0 && item < items) << label << ", ticket " << t;
        ASSERT_EQ(dash_ticket_of(h.flags, g, w, h.num_units, items, unit, item), t) << label;
        ASSERT_EQ(item, next_item[size_t(unit)]++) << label << ": unit " << unit << " out of order at ticket " << t;
        ASSERT_EQ(unit / g, t / (g * items)) << label << ": ticket " << t << " outside its unit's group";
        if (item % w != 0) {  // the slot's previous item is the previous ticket
          ASSERT_EQ(dash_ticket_locate(h.flags, g, w, h.num_units, items, t - 1).unit, unit) << label;
        }
      }
      for (const int32_t n : next_item) ASSERT_EQ(n, items) << label;
      const dash::SimResult sim =
          dash::simulate(plan, ctas, dash::CostModel::for_problem(p, {h.block_m, h.block_n}));
      EXPECT_FALSE(sim.deadlocked) << label;
    }
  }
}

// The group: values of an independent implementation of the same model (a heap of CTA free times, item by item,
// docs/history/prepared/2026-12-07-slot-claims/slot_model.py), 4 slots of 16 items on 132 CTAs. Unit counts that
// fill whole rounds of 8 units keep 8; the others take a group that spreads the last round's units over the CTAs.
TEST(Slots, GroupFollowsTheListSchedulingModel) {
  struct Expected {
    int32_t units, group;
  };
  for (const Expected e : {Expected{1, 1}, {4, 4}, {8, 8}, {10, 10}, {12, 12}, {14, 14}, {16, 8}, {20, 10},
                           {28, 10}, {32, 8}, {36, 9}, {64, 8}, {100, 10}}) {
    EXPECT_EQ(dash::detail::slot_claim_group(e.units, 4, 16, 132), e.group) << e.units << " units";
  }
  EXPECT_EQ(dash::detail::slot_claim_group(4, 4, 16, 8), 1) << "a slot wider than the CTAs has no plan";
}

// The validator: a wait may not reach past its slot (the claim order puts other units' slots between two slots of
// one unit), and items_per_slot must divide the items.
TEST(Slots, ValidatorRejectsWaitsAcrossSlotsAndBadSlotSizes) {
  const dash::Plan plan = named(cut_cases()[0].problem, Planner::SymmetricShift, 132);
  ASSERT_EQ(plan.header.items_per_slot, 16);
  dash::Plan narrower = plan;
  narrower.header.items_per_slot = 8;  // a slot's items wait on each other: half slots have waits across
  const dash::ValidationReport report = dash::validate_plan(narrower, 132);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.reason.find("later slot"), std::string::npos) << report.reason;
  for (const int32_t bad : {1, 3, -1}) {
    dash::Plan broken = plan;
    broken.header.items_per_slot = bad;
    const dash::ValidationReport r = dash::validate_plan(broken, 132);
    EXPECT_FALSE(r.ok) << bad;
    EXPECT_NE(r.reason.find("items_per_slot"), std::string::npos) << r.reason;
  }
}

// A blob may claim item by item (no slots) only as the balanced non-deterministic plan.
TEST(Slots, BlobRefusesItemMajorWithoutSlotsOnADeterministicPlan) {
  dash::Plan plan = named(make_problem(4096, 4096, dash::Mask::Causal, 2, 2, 1, 128), Planner::Ascending, 132);
  plan.header.flags |= DASH_PLAN_ITEM_MAJOR;
  plan.header.ticket_group_units = 2;
  const std::vector<uint8_t> blob = plan.to_blob();
  try {
    dash::Plan::from_blob(blob.data(), blob.size());
    FAIL() << "accepted";
  } catch (const dash::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DASH_PLAN_NONDETERMINISTIC_ONLY"), std::string::npos) << e.what();
  }
}

}  // namespace
