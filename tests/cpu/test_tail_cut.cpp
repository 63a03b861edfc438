// SPDX-License-Identifier: Apache-2.0
// The tail cut (dash/plan_format.h, "Tail"; dash::TailCut): its tables, its claim order, what the validator accepts
// and refuses, and what the simulator makes of it. The CPU backend's gradients of cut plans: test_reference.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "dash/plan.hpp"
#include "dash/simulator.hpp"
#include "test_problems.hpp"

namespace {

using dash::Planner;
using dash::test::make_problem;

dash::Plan named(const dash::Problem& p, Planner planner, dash::GqaMode mode = dash::GqaMode::SplitHeads) {
  return dash::build_plan({p, {dash::Schedule::Kind::Planner, planner}, 132, {}, mode, nullptr});
}

dash::Plan cut_plan(const dash::Problem& p, Planner planner, int32_t tiles, int32_t pieces,
                    dash::GqaMode mode = dash::GqaMode::SplitHeads) {
  return dash::build_unvalidated(p, planner, {}, mode, 132, {tiles, pieces});
}

std::string reason_of(const dash::Plan& plan) { return dash::validate_plan(plan, 132).reason; }

TEST(TailCut, PiecesReplaceTheLastItemsAndKeepTheVisitTable) {
  const dash::Problem p = make_problem(2048, 2048, dash::Mask::Full, 3, 3);
  const dash::Plan whole = named(p, Planner::Ascending);
  const dash::Plan cut = cut_plan(p, Planner::Ascending, 3, 4);
  const dash_plan_header& h = cut.header;
  ASSERT_EQ(whole.header.items_per_unit, 16);
  EXPECT_EQ(h.items_per_unit, 13 + 3 * 4);
  EXPECT_EQ(h.tail_items, 12);
  EXPECT_EQ(h.cut_tiles, 3);
  EXPECT_EQ(h.max_visits_per_item, 32);  // the body's whole items: 32 Q tiles of 64 rows
  EXPECT_TRUE(std::equal(cut.visits.begin(), cut.visits.end(), whole.visits.begin(), whole.visits.end(),
                         [](const dash_visit& a, const dash_visit& b) { return std::memcmp(&a, &b, sizeof a) == 0; }));
  for (int32_t i = 0; i < 13; ++i) EXPECT_EQ(cut.segments[size_t(i)].num_pieces, 0);
  for (int32_t k = 0; k < 12; ++k) {
    const dash_segment& seg = cut.segments[size_t(13 + k)];
    EXPECT_EQ(seg.kv_tile, 13 + k / 4);
    EXPECT_EQ(seg.piece, k % 4);
    EXPECT_EQ(seg.num_pieces, 4);
    EXPECT_EQ(seg.num_visits, 8);  // 32 Q tiles in 4 pieces
  }
  const dash::ValidationReport report = dash::validate_plan(cut, 132);
  ASSERT_TRUE(report.ok) << report.reason;
  EXPECT_TRUE(report.waits_only_backward);
  EXPECT_EQ(report.min_coresident_ctas, 1);
  // The blob keeps the new fields.
  const std::vector<uint8_t> blob = cut.to_blob();
  const dash::Plan back = dash::Plan::from_blob(blob.data(), blob.size());
  EXPECT_EQ(back.header.tail_items, 12);
  EXPECT_EQ(back.header.cut_tiles, 3);
  EXPECT_EQ(back.segments[20].piece, cut.segments[20].piece);
  EXPECT_TRUE(dash::validate_plan(back, 132).ok);
}

// Every ticket once; the body unit by unit; then the tail item by item across every unit, each unit's items in table
// order (so a piece waits only on earlier tickets).
TEST(TailCut, TicketsGoUnitByUnitThenItemByItemOverTheTail) {
  const dash::Plan cut = cut_plan(make_problem(1024, 1024, dash::Mask::Full, 2, 2, 3), Planner::Ascending, 2, 3);
  const dash_plan_header& h = cut.header;
  const int32_t items = h.items_per_unit, body = items - h.tail_items;
  ASSERT_EQ(h.num_units, 6);
  ASSERT_EQ(body, 6);
  std::vector<int32_t> next_item(size_t(h.num_units), 0);
  for (int32_t t = 0; t < h.num_units * items; ++t) {
    const auto [unit, item] = dash_ticket_locate(h.flags, h.ticket_group_units, h.items_per_slot, h.num_units, items,
                                                 h.tail_items, t);
    ASSERT_TRUE(unit >= 0 && unit < h.num_units) << "ticket " << t;
    EXPECT_EQ(dash_ticket_of(h.flags, h.ticket_group_units, h.items_per_slot, h.num_units, items, h.tail_items, unit,
                             item),
              t);
    EXPECT_EQ(item, next_item[size_t(unit)]++) << "unit " << unit << " out of order at ticket " << t;
    if (t < h.num_units * body) {
      EXPECT_EQ(unit, t / body) << "ticket " << t;
    } else {
      EXPECT_EQ(unit, (t - h.num_units * body) % h.num_units) << "ticket " << t;
    }
  }
  for (int32_t n : next_item) EXPECT_EQ(n, items);
}

TEST(TailCut, RefusesWhatItCannotCut) {
  const dash::Problem p = make_problem(2048, 2048, dash::Mask::Full, 4, 2);
  const auto reason = [&](Planner planner, int32_t tiles, int32_t pieces, dash::GqaMode mode) -> std::string {
    try {
      cut_plan(p, planner, tiles, pieces, mode);
    } catch (const dash::Error& e) {
      EXPECT_EQ(e.argument(), "tail");
      return e.what();
    }
    return "not refused";
  };
  const auto pack = dash::GqaMode::PackGroup;
  EXPECT_NE(reason(Planner::Ascending, 0, 4, pack).find("1 to that many"), std::string::npos);
  EXPECT_NE(reason(Planner::Ascending, 17, 4, pack).find("1 to that many"), std::string::npos);
  EXPECT_NE(reason(Planner::Ascending, 2, 1, pack).find("2 to 255"), std::string::npos);
  // 2 heads x 32 Q tiles per item in a packed unit: 64 visits.
  EXPECT_NE(reason(Planner::Descending, 2, 65, pack).find("more than KV tile 14's 64 visits"), std::string::npos);
  EXPECT_NE(reason(Planner::Shift, 2, 2, pack).find("lock-step"), std::string::npos);
  EXPECT_NE(reason(Planner::Ascending, 2, 2, dash::GqaMode::SplitHeads).find("split-head GQA"), std::string::npos);
}

TEST(TailCut, ValidatorRefusesBrokenPieces) {
  const dash::Plan cut = cut_plan(make_problem(2048, 2048, dash::Mask::Full), Planner::Ascending, 2, 4);
  ASSERT_TRUE(dash::validate_plan(cut, 132).ok);
  const size_t first_piece = 14;
  {  // pieces out of order: piece 1 before piece 0
    dash::Plan bad = cut;
    std::swap(bad.segments[first_piece].piece, bad.segments[first_piece + 1].piece);
    EXPECT_NE(reason_of(bad).find("expected piece 0"), std::string::npos) << reason_of(bad);
  }
  {  // pieces of a KV tile that is not cut
    dash::Plan bad = cut;
    bad.header.cut_tiles = 1;
    EXPECT_NE(reason_of(bad).find("which is not cut"), std::string::npos) << reason_of(bad);
  }
  {  // a cut KV tile held whole
    dash::Plan bad = cut;
    bad.header.cut_tiles = 3;
    EXPECT_NE(reason_of(bad).find("holds cut KV tile 13 whole"), std::string::npos) << reason_of(bad);
  }
  {  // a piece that says it is one of 3 while its tile has 4
    dash::Plan bad = cut;
    bad.segments[first_piece + 3].num_pieces = 3;
    EXPECT_FALSE(dash::validate_plan(bad, 132).ok);
  }
  {  // a whole tile that names a piece
    dash::Plan bad = cut;
    bad.segments[0].piece = 1;
    EXPECT_NE(reason_of(bad).find("whole KV tile but names a piece"), std::string::npos) << reason_of(bad);
  }
  {  // pieces visiting one block twice and another never
    dash::Plan bad = cut;
    bad.visits[size_t(bad.segments[first_piece + 1].first_visit)].q_tile =
        bad.visits[size_t(bad.segments[first_piece].first_visit)].q_tile;
    EXPECT_NE(reason_of(bad).find("visited twice"), std::string::npos) << reason_of(bad);
  }
  {  // a tail claimed after item-by-item claims
    dash::Plan bad = cut;
    bad.header.flags |= DASH_PLAN_ITEM_MAJOR | DASH_PLAN_NONDETERMINISTIC_ONLY;
    bad.header.ticket_group_units = 1;
    EXPECT_NE(reason_of(bad).find("a tail after item-by-item"), std::string::npos) << reason_of(bad);
  }
  {  // cut tiles in a split-head GQA plan, whose units add dK / dV across the group
    dash::Plan bad = cut_plan(make_problem(2048, 2048, dash::Mask::Full, 2, 1), Planner::Ascending, 2, 4,
                              dash::GqaMode::PackGroup);
    ASSERT_TRUE(dash::validate_plan(bad, 132).ok);
    bad.header.gqa_mode = DASH_GQA_SPLIT_HEADS;
    EXPECT_FALSE(dash::validate_plan(bad, 132).ok);
  }
  {  // a tail on lock-step ranks (shift's), whose waits the tail's claim order does not keep backward
    dash::Plan bad = named(make_problem(2048, 2048, dash::Mask::Full, 2, 2), Planner::Shift);
    bad.header.tail_items = 4;
    EXPECT_NE(reason_of(bad).find("a tail needs ranks in claim order"), std::string::npos) << reason_of(bad);
  }
}

// The simulator reads the tables of any plan it is given without going out of bounds: a tail longer than the items
// (whose decode would name items before the table) is refused.
TEST(TailCut, SimulatorRefusesATailOutOfRange) {
  dash::Plan bad = cut_plan(make_problem(2048, 2048, dash::Mask::Full), Planner::Ascending, 2, 4);
  bad.header.tail_items = bad.header.items_per_unit + 1;
  const dash::CostModel cost = dash::CostModel::for_problem(bad.problem(), {bad.header.block_m, bad.header.block_n});
  EXPECT_THROW(dash::simulate(bad, 132, cost, {}), dash::Error);
}

// What the study is for: 16 heads of 16k full at head dim 128 are 2,048 equal items, 15.5 rounds on 132 CTAs. Cut,
// the last round fills: the simulator's makespan drops in both modes (the deterministic one pays each piece's ordered
// dK / dV add), and the gradients' order waits stay satisfiable.
TEST(TailCut, FillsTheLastRoundInTheSimulator) {
  const dash::Problem p = make_problem(16384, 16384, dash::Mask::Full, 16, 16);
  const dash::Plan whole = named(p, Planner::Ascending);
  const dash::Plan cut = cut_plan(p, Planner::Ascending, 5, 8);
  const dash::CostModel cost = dash::CostModel::for_problem(p, {whole.header.block_m, whole.header.block_n});
  for (bool nondeterministic : {false, true}) {
    const dash::SimOptions options{.critical_path = false, .nondeterministic = nondeterministic};
    const dash::SimResult a = dash::simulate(whole, 132, cost, options), b = dash::simulate(cut, 132, cost, options);
    ASSERT_FALSE(b.deadlocked);
    EXPECT_LT(b.makespan, 0.99 * a.makespan) << (nondeterministic ? "non-deterministic" : "deterministic");
    EXPECT_LT(b.idle_fraction, a.idle_fraction);
  }
}

}  // namespace
