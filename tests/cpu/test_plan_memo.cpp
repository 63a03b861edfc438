// SPDX-License-Identifier: Apache-2.0
// The memos that make a repeat plan_for a hash look-up (src/core/plan_internal.hpp): auto_candidates against the
// full table scan it replaced, plan_for against its unmemoised resolution (same template, header bytes, note and
// template-cache traffic), their bounds, threads; unit templates shared by lengths of one tile geometry against the
// templates of the exact lengths; resolution classes (one plan_for outcome for all the lengths of a class); and that
// plan_for_pack of ~800 distinct sequence shapes resolves once per class, and a repeat scans the auto table and
// resolves the candidates for none of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "dash/plan.hpp"
#include "dash/varlen.hpp"
#include "plan_internal.hpp"  // dash::detail: the reference scan, memo statistics and switch
#include "test_problems.hpp"

namespace {

using dash::GqaMode;
using dash::Mask;
using dash::test::make_problem;
using dash::test::windowed;

// Leaves the memos on (as they are in production) whatever a test does.
struct MemoSwitch {
  explicit MemoSwitch(bool enabled) { dash::detail::set_plan_memo_enabled(enabled); }
  ~MemoSwitch() { dash::detail::set_plan_memo_enabled(true); }
};

std::string describe(const std::vector<dash::Candidate>& list) {
  std::string s;
  for (const dash::Candidate& c : list)
    s += std::string(s.empty() ? "" : " ") + dash::gqa_mode_name(c.mode) + "/" + dash::planner_name(c.planner);
  return s;
}

// seqlen_q = seqlen_k over 1..4096 step 7, some unequal pairs, and lengths at and around the table's samples.
std::vector<std::pair<int32_t, int32_t>> length_pairs() {
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (int32_t s = 1; s <= 4096; s += 7) pairs.push_back({s, s});
  for (int32_t s = 1; s <= 4096; s += 61) {
    pairs.push_back({s, 3 * s + 1});
    pairs.push_back({5 * s + 2, s});
    pairs.push_back({s, 4097 - s});
  }
  for (int32_t base : {64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072})
    for (int32_t d : {-1, 0, 1})
      for (int32_t ratio : {1, 2, 4}) {
        pairs.push_back({base + d, (base + d) * ratio});
        pairs.push_back({(base + d) * ratio, base + d});
      }
  // Every pair of powers of two, where rows off the problem's diagonal lie at exactly equal distances (ties that
  // the first row in table order must win).
  for (int32_t i = 0; i <= 21; ++i)
    for (int32_t j = 0; j <= 21; ++j) pairs.push_back({int32_t(1) << i, int32_t(1) << j});
  // Geometric means of neighbouring samples, where two rows are nearly equally near.
  for (int32_t s : {90, 91, 181, 362, 724, 1448, 2896, 5792, 11585, 23170, 46341, 92682, 185364, 1 << 20, 1482880})
    pairs.push_back({s, s});
  return pairs;
}

// ---- auto_candidates ----

TEST(AutoCandidatesMemo, MatchesTheFullTableScanBitForBit) {
  dash::clear_template_cache();  // and the memos: every first look-up below scans
  std::vector<dash::Problem> shapes;
  const std::vector<std::pair<int32_t, int32_t>> groups = {{1, 1}, {4, 1}, {2, 1}, {3, 1}, {8, 1}, {16, 1}, {32, 8}};
  for (const auto& [q, k] : length_pairs())
    for (int32_t head_dim : {64, 128, 32, 91, 256})
      for (const auto& [hq, hkv] : groups)
        for (int m = 0; m < 4; ++m) {
          dash::Problem p = make_problem(q, k, m == 0 ? Mask::Full : Mask::Causal, hq, hkv, 1, head_dim);
          if (m == 2) p = windowed(p, 256, 0);
          if (m == 3) p = windowed(p, 100, 37);
          shapes.push_back(p);
        }
  int64_t checked = 0;
  for (const dash::Problem& p : shapes) {
    const std::vector<dash::Candidate> reference = dash::detail::auto_candidates_reference(p, {});
    const std::vector<dash::Candidate> first = dash::auto_candidates(p, {});  // scans (or hits a window twin)
    const std::vector<dash::Candidate> again = dash::auto_candidates(p, {});  // memo hit
    ASSERT_EQ(describe(first), describe(reference)) << p.describe();
    ASSERT_EQ(describe(again), describe(reference)) << p.describe();
    ++checked;
  }
  EXPECT_GT(checked, 100000);
}

TEST(AutoCandidatesMemo, ScansTheTableOncePerShape) {
  dash::clear_template_cache();
  const dash::detail::PlanMemoStats before = dash::detail::plan_memo_stats();
  EXPECT_EQ(before.candidate_entries, 0);
  for (int round = 0; round < 3; ++round)
    for (int32_t s = 1; s <= 500; ++s) dash::auto_candidates(make_problem(s, s, Mask::Causal, 32, 8), {});
  // The window mask reads the causal rows and ignores the window sizes: the same entries serve it.
  for (int32_t s = 1; s <= 500; ++s)
    dash::auto_candidates(windowed(make_problem(s, s, Mask::Causal, 32, 8), 64, 3), {});
  // Batch and head count (beyond the group) are not read either.
  for (int32_t s = 1; s <= 500; ++s) dash::auto_candidates(make_problem(s, s, Mask::Causal, 8, 2, 7), {});
  const dash::detail::PlanMemoStats after = dash::detail::plan_memo_stats();
  EXPECT_EQ(after.table_scans - before.table_scans, 500);
  EXPECT_EQ(after.candidate_hits - before.candidate_hits, 2 * 500 + 500 + 500);
  EXPECT_EQ(after.candidate_entries, 500);
}

// ---- plan_for ----

// What a plan_for call gave: the plan, or the error it threw.
struct Outcome {
  dash::BoundPlan plan;
  std::string error;
  int64_t cache_traffic = 0;  // template cache hits + builds during the call
};

Outcome outcome_of(const dash::PlanRequest& req) {
  Outcome o;
  const dash::TemplateCacheStats before = dash::template_cache_stats();
  try {
    o.plan = dash::plan_for(req);
  } catch (const dash::Error& e) {
    o.error = std::string(e.argument()) + " | " + e.what();
  }
  const dash::TemplateCacheStats after = dash::template_cache_stats();
  o.cache_traffic = (after.hits + after.builds) - (before.hits + before.builds);
  return o;
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.error, b.error) << what;
  if (!a.error.empty()) return;
  ASSERT_EQ(a.plan.unit.get(), b.plan.unit.get()) << what;  // the same cached template
  ASSERT_EQ(std::memcmp(&a.plan.header, &b.plan.header, sizeof a.plan.header), 0) << what;
  ASSERT_EQ(a.plan.note, b.plan.note) << what;
  ASSERT_EQ(a.cache_traffic, b.cache_traffic) << what << ": the template cache was asked differently";
}

// A request's schedule, GQA mode and P.
struct Variant {
  const char* schedule;
  GqaMode mode;
  int32_t num_ctas;
};

TEST(PlanForMemo, MatchesTheUnmemoisedResolution) {
  dash::clear_template_cache();
  // auto on few CTAs skips the candidates whose wave exceeds P (the replay must fetch them too); a named planner
  // on too few CTAs throws (never memoised). AutoNondeterministic skips packed templates whose items leave CTAs idle
  // (on 132 CTAs, these problems' 2 x 1 packed units always do; on 4-16, the short ones do), and those too are
  // fetched again by the replay.
  const std::vector<Variant> variants = {{"auto", GqaMode::Auto, 132},
                                         {"auto", GqaMode::Auto, 2},
                                         {"auto", GqaMode::SplitHeads, 132},
                                         {"auto", GqaMode::PackGroup, 1},
                                         {"descending", GqaMode::Auto, 132},
                                         {"symmetric-shift", GqaMode::Auto, 2},
                                         {"shift", GqaMode::PackGroup, 132},
                                         {"auto", GqaMode::AutoNondeterministic, 132},
                                         {"auto", GqaMode::AutoNondeterministic, 4},
                                         {"symmetric-shift", GqaMode::AutoNondeterministic, 16}};
  int64_t compared = 0, errors = 0;
  const int64_t hits_before = dash::detail::plan_memo_stats().resolution_hits;
  int64_t expected_hits = 0;
  for (int32_t s = 1; s <= 4096; s += 7) {
    if ((s / 7) % 128 == 0) dash::clear_template_cache();  // bounds the templates kept (and empties the memos)
    for (int m = 0; m < 3; ++m) {
      for (int32_t head_dim : {64, 128}) {
        for (int32_t group : {1, 4}) {
          // Unequal lengths too, on a sparser grid.
          const int32_t k = (s % 3 == 0) ? s / 3 + 1 : s;
          dash::Problem p = make_problem(s, k, m == 1 ? Mask::Full : Mask::Causal, 4, 4 / group, 2, head_dim);
          if (m == 2) p = windowed(p, 300, 0);
          for (const Variant& v : variants) {
            if ((s / 7) % 4 != 0 && v.num_ctas != 132) continue;  // the small-P variants on a quarter of the shapes
            dash::PlanRequest req{p, dash::Schedule::parse(v.schedule), v.num_ctas, {}, v.mode, nullptr};
            Outcome fresh;
            {
              MemoSwitch off(false);
              fresh = outcome_of(req);
            }
            const Outcome first = outcome_of(req);   // resolves and memoises
            const Outcome second = outcome_of(req);  // replays
            const std::string what = p.describe() + ", " + v.schedule + ", " + dash::gqa_mode_name(v.mode) + ", P " +
                                     std::to_string(v.num_ctas);
            expect_same(fresh, first, what + " (first)");
            expect_same(fresh, second, what + " (repeat)");
            if (::testing::Test::HasFatalFailure()) return;
            ++compared;
            if (fresh.error.empty()) ++expected_hits;
            else ++errors;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 20000);
  EXPECT_GT(errors, 0) << "no request threw: the error path went untested";
  EXPECT_EQ(dash::detail::plan_memo_stats().resolution_hits - hits_before, expected_hits);
}

// The non-deterministic GQA request packs or splits by the whole problem (batch x KV heads x the packed template's
// items against P), and takes the balanced plan or not by the whole problem too (a group of units' items against
// P): its memo entry replays each choice, item skips included, as resolving afresh does.
TEST(PlanForMemo, ReplaysTheNondeterministicGqaChoiceBothWays) {
  dash::clear_template_cache();
  struct Case {
    dash::Problem problem;
    GqaMode expected;
    bool balanced;
  };
  // Full masks take the table's plan: 32 / 8 heads at 8 x 1k, 64 packed units fill 132 CTAs (the GPU test's
  // problem); 28 / 4 at 2 x 8k, 8 packed units of 16 items leave 4 CTAs idle, so heads are split (issue 14's
  // measurement, 2026-12-04). Causal ones whose packed units leave CTAs idle take the balanced plan where a group of
  // units fills the CTAs (2 x 8k at 28 / 4: 4 units of 64 KV tiles), else the table's (1 x 2k at 4 / 2: 4 of 16).
  const std::vector<Case> cases = {{make_problem(1024, 1024, Mask::Full, 32, 8, 8), GqaMode::PackGroup, false},
                                   {make_problem(8192, 8192, Mask::Full, 28, 4, 2), GqaMode::SplitHeads, false},
                                   {make_problem(8192, 8192, Mask::Causal, 28, 4, 2), GqaMode::SplitHeads, true},
                                   {make_problem(2048, 2048, Mask::Causal, 4, 2, 1), GqaMode::SplitHeads, false},
                                   // 256 packed items, under 3 rounds: the balanced plan first; where it does not
                                   // fit (head dim 64 at 1k: items of 4.5 visits), the packed plan after all.
                                   {make_problem(8192, 8192, Mask::Causal, 32, 8, 2), GqaMode::SplitHeads, true},
                                   {make_problem(1024, 1024, Mask::Causal, 32, 8, 8, 64), GqaMode::PackGroup, false}};
  for (const Case& c : cases) {
    const dash::PlanRequest req{c.problem, dash::Schedule::parse("auto"), 132, {}, GqaMode::AutoNondeterministic,
                                nullptr};
    Outcome fresh;
    {
      MemoSwitch off(false);
      fresh = outcome_of(req);
    }
    const dash::detail::PlanMemoStats before = dash::detail::plan_memo_stats();
    const Outcome first = outcome_of(req), second = outcome_of(req);
    const dash::detail::PlanMemoStats after = dash::detail::plan_memo_stats();
    ASSERT_TRUE(fresh.error.empty()) << fresh.error;
    EXPECT_EQ(dash::GqaMode(fresh.plan.header.gqa_mode), c.expected) << c.problem.describe();
    EXPECT_NE(fresh.plan.header.flags & DASH_PLAN_NONDETERMINISTIC_ONLY, 0u) << c.problem.describe();
    expect_same(fresh, first, c.problem.describe() + " (first)");
    expect_same(fresh, second, c.problem.describe() + " (repeat)");
    EXPECT_EQ(after.resolution_misses - before.resolution_misses, 1) << c.problem.describe();
    EXPECT_EQ(after.resolution_hits - before.resolution_hits, 1) << c.problem.describe();
    // Item by item (balanced) or slot by slot (a template cut into slots).
    EXPECT_EQ((fresh.plan.header.flags & DASH_PLAN_ITEM_MAJOR) != 0, c.balanced || fresh.plan.header.items_per_slot > 1)
        << fresh.plan.note;
    if (c.expected == GqaMode::SplitHeads && !c.balanced)
      EXPECT_NE(fresh.plan.note.find("pack skipped"), std::string::npos) << fresh.plan.note;
  }
}

TEST(PlanForMemo, AutoFastestIsNotMemoised) {
  dash::clear_template_cache();
  const dash::PlanRequest req{make_problem(300, 300, Mask::Causal, 4, 1), dash::Schedule::parse("auto-fastest"), 132,
                              {}, GqaMode::Auto, nullptr};
  const dash::detail::PlanMemoStats before = dash::detail::plan_memo_stats();
  const dash::BoundPlan a = dash::plan_for(req), b = dash::plan_for(req);
  const dash::detail::PlanMemoStats after = dash::detail::plan_memo_stats();
  EXPECT_EQ(a.unit.get(), b.unit.get());
  EXPECT_EQ(a.note, b.note);
  EXPECT_EQ(after.resolution_hits, before.resolution_hits);
  EXPECT_EQ(after.resolution_misses, before.resolution_misses);
  EXPECT_EQ(after.resolution_entries, 0);
}

TEST(PlanForMemo, ClearTemplateCacheEmptiesTheMemos) {
  dash::plan_for({make_problem(777, 777, Mask::Causal, 4, 1), dash::Schedule::parse("auto"), 132, {}, GqaMode::Auto,
                  nullptr});
  EXPECT_GT(dash::detail::plan_memo_stats().resolution_entries, 0);
  EXPECT_GT(dash::detail::plan_memo_stats().candidate_entries, 0);
  dash::clear_template_cache();
  EXPECT_EQ(dash::detail::plan_memo_stats().resolution_entries, 0);
  EXPECT_EQ(dash::detail::plan_memo_stats().candidate_entries, 0);
}

TEST(PlanForMemo, ThreadsAgreeWithOneThread) {
  dash::clear_template_cache();
  auto request = [](int32_t s) {
    return dash::PlanRequest{make_problem(s, s, s % 2 ? Mask::Causal : Mask::Full, 8, 2), dash::Schedule::parse("auto"),
                             s % 3 ? 132 : 2, {}, GqaMode::Auto, nullptr};
  };
  std::vector<dash::BoundPlan> expected;
  {
    MemoSwitch off(false);
    for (int32_t s = 1; s <= 600; ++s) expected.push_back(dash::plan_for(request(s)));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (int32_t i = 0; i < 600; ++i) {
          const int32_t s = 1 + (i * 7 + t * 151) % 600;  // each thread in its own order, overlapping
          const dash::BoundPlan got = dash::plan_for(request(s));
          const dash::BoundPlan& want = expected[size_t(s - 1)];
          if (got.unit.get() != want.unit.get() || got.note != want.note ||
              std::memcmp(&got.header, &want.header, sizeof got.header) != 0)
            ++mismatches[size_t(t)];
        }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[size_t(t)], 0) << "thread " << t;
}

TEST(PlanForMemo, LruMemoKeepsTheMostRecentlyUsed) {
  dash::detail::LruMemo<int, int, std::hash<int>> memo(2);
  int v = 0;
  memo.insert(1, 10);
  memo.insert(2, 20);
  EXPECT_TRUE(memo.find(1, &v));  // 1 becomes the most recently used
  EXPECT_EQ(v, 10);
  memo.insert(3, 30);  // drops 2
  EXPECT_EQ(memo.size(), 2u);
  EXPECT_FALSE(memo.find(2, &v));
  EXPECT_TRUE(memo.find(1, &v));
  EXPECT_TRUE(memo.find(3, &v));
  EXPECT_EQ(v, 30);
  memo.insert(3, 31);  // replaces
  EXPECT_TRUE(memo.find(3, &v));
  EXPECT_EQ(v, 31);
  EXPECT_EQ(memo.size(), 2u);
  memo.clear();
  EXPECT_EQ(memo.size(), 0u);
}

TEST(PlanForMemo, LruMemoMatchesAListModel) {
  // The flat memo against the list it replaced: random keys over a small range, so that entries are found, replaced
  // and evicted often, across the index's growth and its deletions.
  for (size_t capacity : {1u, 3u, 50u, 700u}) {
    dash::detail::LruMemo<int, int, std::hash<int>> memo(capacity);
    std::list<std::pair<int, int>> model;  // most recently used first
    const auto in_model = [&](int key) {
      return std::find_if(model.begin(), model.end(), [&](const auto& e) { return e.first == key; });
    };
    std::mt19937 rng(static_cast<uint32_t>(capacity));
    std::uniform_int_distribution<int> key_of(0, int(3 * capacity));
    for (int step = 0; step < 20000; ++step) {
      const int key = key_of(rng);
      const auto it = in_model(key);
      switch (step % 3) {
        case 0: {
          int got = -1;
          ASSERT_EQ(memo.find(key, &got), it != model.end()) << "capacity " << capacity << ", step " << step;
          if (it != model.end()) {
            ASSERT_EQ(got, it->second);
            model.splice(model.begin(), model, it);
          }
          break;
        }
        case 1: {
          memo.insert(key, step);
          if (it != model.end()) model.erase(it);
          model.emplace_front(key, step);
          if (model.size() > capacity) model.pop_back();
          break;
        }
        default: {
          bool found = false;
          const int got = memo.find_or_insert(key, [&] { return -step; }, &found);
          ASSERT_EQ(found, it != model.end());
          if (it != model.end()) {
            ASSERT_EQ(got, it->second);
            model.splice(model.begin(), model, it);
          } else {
            ASSERT_EQ(got, -step);
            model.emplace_front(key, -step);
            if (model.size() > capacity) model.pop_back();
          }
        }
      }
      ASSERT_EQ(memo.size(), model.size());
    }
    for (const auto& [key, value] : model) {  // and every entry the model holds, the memo holds
      int got = -1;
      ASSERT_TRUE(memo.find(key, &got));
      ASSERT_EQ(got, value);
    }
    memo.clear();
    EXPECT_EQ(memo.size(), 0u);
    int got = 0;
    EXPECT_FALSE(memo.find(model.front().first, &got));
  }
}

// ---- unit templates shared across lengths (TemplateKey's representative lengths) ----

// The unit template of `p`'s exact lengths, as the template cache would build it: built, validated, its wave recorded.
// Written out rather than calling src/core/plan.cpp's build_template, which is file-local there (reachable only
// through unit_template, i.e. the cache under test) and takes a TemplateKey, whose tiles and GQA mode (pack collapsed
// to split for a group of 1) template_key has already resolved: built from the problem, the comparison checks those
// too.
dash::Plan exact_template(const dash::Problem& p, GqaMode mode, dash::Planner planner) {
  dash::Problem unit = p;
  unit.batch = 1;
  unit.heads_kv = 1;
  unit.heads_q = p.group_size();
  dash::Plan plan = dash::build_unvalidated(unit, planner, {}, mode, 1);
  const dash::ValidationReport report = dash::validate_plan(plan, std::numeric_limits<int32_t>::max());
  EXPECT_TRUE(report.ok) << unit.describe() << ": " << report.reason;
  plan.header.min_coresident_ctas = report.min_coresident_ctas;
  if (report.waits_only_backward) plan.header.flags |= DASH_PLAN_WAITS_ONLY_BACKWARD;
  return plan;
}

template <class T, class Allocator>  // the visit table has its own allocator (dash::VisitTable)
bool same_bytes(const std::vector<T, Allocator>& a, const std::vector<T, Allocator>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

TEST(TemplateKey, ASharedTemplateIsTheOneBuiltForEachLength) {
  // Lengths of one tile geometry share one cached template. For every planner and GQA mode, over self-attention
  // lengths 1..2100 (head dim 128's tiles: a varlen pack of documents) and a grid of unequal lengths under each mask
  // and both kernel tile shapes, the shared template is what the exact lengths build: the same tables (all that the
  // kernels read: items, segments, visits with their ranks and flags, dq_count, group_head_by_rank), the same header
  // but for the lengths, the same wave; and bound to the exact problem it validates.
  dash::clear_template_cache();
  std::vector<dash::Problem> shapes;
  for (int32_t s = 1; s <= 2100; ++s) shapes.push_back(make_problem(s, s, Mask::Causal, 4, 2, 1, 128));
  for (int32_t head_dim : {64, 128})
    for (int32_t q = 1; q <= 400; q += 13)
      for (int32_t k = 1; k <= 400; k += 11)
        for (int m = 0; m < 4; ++m) {
          const dash::Problem p = make_problem(q, k, m == 0 ? Mask::Full : Mask::Causal, 4, 2, 1, head_dim);
          shapes.push_back(m == 2 ? windowed(p, 100, 0) : m == 3 ? windowed(p, 37, 5) : p);
        }
  int64_t compared = 0, shared = 0, planned = 0;
  for (const dash::Problem& p : shapes) {
    if (++planned % 1000 == 0) dash::clear_template_cache();  // bounds the templates kept
    for (GqaMode mode : {GqaMode::SplitHeads, GqaMode::PackGroup}) {
      for (dash::Planner planner : dash::all_planners()) {
        const dash::TemplateKey key = dash::template_key(p, {}, mode, planner);
        const std::shared_ptr<const dash::UnitTemplate> unit = dash::unit_template(key);
        const dash::Plan exact = exact_template(p, mode, planner);
        const dash::Plan& got = unit->plan;
        const std::string what = p.describe() + ", " + dash::gqa_mode_name(mode) + " " + dash::planner_name(planner) +
                                 " (key lengths " + std::to_string(key.seqlen_q) + " x " +
                                 std::to_string(key.seqlen_k) + ")";
        ASSERT_TRUE(same_bytes(got.items, exact.items)) << what;
        ASSERT_TRUE(same_bytes(got.segments, exact.segments)) << what;
        ASSERT_TRUE(same_bytes(got.visits, exact.visits)) << what;
        ASSERT_TRUE(same_bytes(got.dq_count, exact.dq_count)) << what;
        ASSERT_TRUE(same_bytes(got.group_head_by_rank, exact.group_head_by_rank)) << what;
        ASSERT_EQ(got.note, exact.note) << what;
        ASSERT_EQ(unit->wave, exact.header.min_coresident_ctas) << what;
        dash_plan_header header = got.header;
        header.problem = exact.header.problem;
        ASSERT_EQ(std::memcmp(&header, &exact.header, sizeof header), 0) << what;
        dash::Plan bound = got;
        bound.header.problem = exact.header.problem;
        const dash::ValidationReport report = dash::validate_plan(bound, unit->wave);
        ASSERT_TRUE(report.ok) << what << ": " << report.reason;
        ++compared;
        shared += key.seqlen_q != p.seqlen_q || key.seqlen_k != p.seqlen_k;
      }
    }
  }
  EXPECT_GT(compared, 80000);
  EXPECT_GT(shared, compared / 2) << "most lengths should share their geometry's template";
}

// ---- resolution classes (plan_for_pack runs plan_for once per class) ----

TEST(PlanForMemo, RequestsOfOneResolutionClassGetOnePlan) {
  // Requests that differ in their lengths alone and have one resolution class get the same template and note, and
  // the same header but for the lengths (or the same error): over self-attention and unequal lengths, each mask,
  // GQA groups, auto and named schedules in each GQA mode, and a P of 2 where candidates are skipped for their wave.
  dash::clear_template_cache();
  const std::vector<Variant> variants = {{"auto", GqaMode::Auto, 132},
                                         {"auto", GqaMode::Auto, 2},
                                         {"auto", GqaMode::SplitHeads, 132},
                                         {"descending", GqaMode::Auto, 132},
                                         {"symmetric-shift", GqaMode::PackGroup, 2},
                                         {"shift", GqaMode::SplitHeads, 132}};
  std::vector<std::pair<int32_t, int32_t>> lengths;
  for (int32_t s = 1; s <= 3000; s += 3) lengths.push_back({s, s});
  for (int32_t q = 1; q <= 700; q += 23)
    for (int32_t k = 1; k <= 700; k += 19) lengths.push_back({q, k});
  int64_t compared = 0, classes = 0;
  for (int m = 0; m < 3; ++m) {
    for (int32_t group : {1, 4}) {
      for (const Variant& v : variants) {
        std::map<std::tuple<uint32_t, int32_t, int32_t>, Outcome> first;  // class -> its first request's outcome
        for (const auto& [q, k] : lengths) {
          dash::Problem p = make_problem(q, k, m == 1 ? Mask::Full : Mask::Causal, 8, 8 / group, 1, 128);
          if (m == 2) p = windowed(p, 300, 0);
          const dash::PlanRequest req{p, dash::Schedule::parse(v.schedule), v.num_ctas, {}, v.mode, nullptr};
          const std::optional<dash::detail::ResolutionClass> c = dash::detail::resolution_class(req);
          ASSERT_TRUE(c.has_value()) << p.describe();
          Outcome got = outcome_of(req);
          const auto [it, added] = first.emplace(std::make_tuple(c->row, c->seqlen_q, c->seqlen_k), got);
          if (added) {
            ++classes;
            continue;
          }
          const Outcome& want = it->second;
          const std::string what = p.describe() + ", " + v.schedule + ", " + dash::gqa_mode_name(v.mode) + ", P " +
                                   std::to_string(v.num_ctas) + ": class of " + want.plan.note;
          ASSERT_EQ(got.error, want.error) << what;
          if (!got.error.empty()) continue;
          ASSERT_EQ(got.plan.unit.get(), want.plan.unit.get()) << what;
          ASSERT_EQ(got.plan.note, want.plan.note) << what;
          got.plan.header.problem = want.plan.header.problem;
          ASSERT_EQ(std::memcmp(&got.plan.header, &want.plan.header, sizeof got.plan.header), 0) << what;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 20000);
  EXPECT_LT(classes * 5, compared) << "lengths should fall into a few classes";
}

TEST(PlanForMemo, TheClassifierAgreesWithResolutionClass) {
  // ResolutionClassifier (plan_for_pack's) against resolution_class, request by request: the same class, or the same
  // error. Lengths in the order of a pack's shapes (longest first) and mixed, up to lengths past the plan format's
  // limits (where each request is checked), over schedules, GQA modes, masks and a P of 2.
  struct Base {
    const char* schedule;
    GqaMode mode;
    int32_t num_ctas;
    int32_t heads_q, heads_kv;
    int mask;  // 0 full, 1 causal, 2 window
  };
  const std::vector<Base> bases = {
      {"auto", GqaMode::Auto, 132, 32, 8, 1},          {"auto", GqaMode::Auto, 2, 32, 8, 1},
      {"auto", GqaMode::PackGroup, 132, 32, 8, 0},     {"descending", GqaMode::SplitHeads, 132, 8, 8, 2},
      {"shift", GqaMode::Auto, 132, 4, 1, 1},          {"auto-fastest", GqaMode::Auto, 132, 4, 4, 1},
      {"symmetric-shift", GqaMode::PackGroup, 132, 64, 1, 1}};
  std::vector<std::pair<int32_t, int32_t>> lengths;
  for (int32_t s = 3000; s >= 1; s -= 7) lengths.push_back({s, s});
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> length(1, 5000);
  for (int i = 0; i < 400; ++i) lengths.push_back({length(rng), length(rng)});
  const auto outcome = [](auto&& classify) {
    try {
      const std::optional<dash::detail::ResolutionClass> c = classify();
      return c ? std::to_string(c->row) + " " + std::to_string(c->seqlen_q) + " " + std::to_string(c->seqlen_k)
               : std::string("no class");
    } catch (const dash::Error& e) {
      return e.argument() + " | " + e.what();
    }
  };
  int64_t compared = 0, errors = 0;
  for (const Base& b : bases)
    for (int32_t longest : {0, 1 << 22}) {  // 0: the lengths' own longest; else a longest past the limits
      std::vector<std::pair<int32_t, int32_t>> these = lengths;
      if (longest) these.push_back({longest, longest});
      int32_t longest_q = 0, longest_k = 0;
      for (const auto& [q, k] : these) {
        longest_q = std::max(longest_q, q);
        longest_k = std::max(longest_k, k);
      }
      dash::Problem p = make_problem(1, 1, b.mask == 0 ? Mask::Full : Mask::Causal, b.heads_q, b.heads_kv, 1, 128);
      if (b.mask == 2) p = windowed(p, 300, 0);
      const dash::PlanRequest base{p, dash::Schedule::parse(b.schedule), b.num_ctas, {}, b.mode, nullptr};
      dash::detail::ResolutionClassifier classifier(base, longest_q, longest_k);
      for (const auto& [q, k] : these) {
        dash::PlanRequest req = base;
        req.problem.seqlen_q = q;
        req.problem.seqlen_k = k;
        const std::string want = outcome([&] { return dash::detail::resolution_class(req); });
        ASSERT_EQ(outcome([&] { return classifier.classify(req); }), want)
            << b.schedule << ", " << q << " x " << k << ", longest " << longest_q << " x " << longest_k;
        errors += want.find(" | ") != std::string::npos;
        ++compared;
      }
    }
  EXPECT_GT(compared, 10000);
  EXPECT_GT(errors, 0) << "some requests should exceed the plan format's limits";
}

TEST(PlanForMemo, AResolutionClassIsNotFormedWhereTheOutcomeReadsTheLengths) {
  const auto has_class = [](const dash::Problem& p, const char* schedule, int32_t num_ctas) {
    return dash::detail::resolution_class({p, dash::Schedule::parse(schedule), num_ctas, {}, GqaMode::Auto, nullptr})
        .has_value();
  };
  const dash::Problem p = make_problem(300, 300, Mask::Causal, 4, 1);
  EXPECT_TRUE(has_class(p, "auto", 132));
  EXPECT_FALSE(has_class(p, "auto-fastest", 132));
  {
    MemoSwitch off(false);
    EXPECT_FALSE(has_class(p, "auto", 132));
  }
  // 32 query heads per KV head past the pack mode's visit limit: auto may only split, and a limit's message would
  // name the lengths.
  EXPECT_FALSE(has_class(make_problem(1 << 20, 1 << 20, Mask::Causal, 32, 1), "auto", 132));
  // An invalid request throws what plan_for throws.
  std::string argument;
  try {
    has_class(p, "auto", 0);
  } catch (const dash::Error& e) {
    argument = e.argument();
  }
  EXPECT_EQ(argument, "num_ctas");
}

// ---- plan_for_pack ----

// 1000 sequences of lengths drawn from [1, 2048] (about 790 distinct), 32/8 heads, head dim 128, causal.
dash::Pack distinct_pack() {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int32_t> uniform(1, 2048);
  std::vector<int32_t> lengths(1000);
  for (int32_t& l : lengths) l = uniform(rng);
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  dash::Problem p = make_problem(0, 0, Mask::Causal, 32, 8, 1000, 128);
  return dash::build_pack(p, cu.data(), cu.data());
}

TEST(PlanForMemo, ARepeatPackResolvesNothingAgain) {
  const dash::Pack pack = distinct_pack();
  const dash::Schedule schedule = dash::Schedule::parse("auto");
  std::set<std::pair<int32_t, int32_t>> shapes;
  std::set<std::tuple<uint32_t, int32_t, int32_t>> classes;  // resolution_class: row and representative lengths
  for (const dash_pack_sequence& s : pack.sequences) {
    shapes.insert({s.seqlen_q, s.seqlen_k});
    const auto c = dash::detail::resolution_class(
        {dash::sequence_problem(pack, s), schedule, 132, {}, GqaMode::Auto, nullptr});
    ASSERT_TRUE(c.has_value());
    classes.insert({c->row, c->seqlen_q, c->seqlen_k});
  }
  const int64_t distinct = int64_t(shapes.size());
  ASSERT_GT(distinct, 700);
  ASSERT_LT(classes.size(), 100u) << "783 lengths of 33 tile counts fall into a few dozen classes";

  dash::clear_template_cache();
  const dash::detail::PlanMemoStats s0 = dash::detail::plan_memo_stats();
  const dash::VarlenPlan first = dash::plan_for_pack(pack, schedule, 132, GqaMode::Auto);
  const dash::detail::PlanMemoStats s1 = dash::detail::plan_memo_stats();
  EXPECT_EQ(s1.table_scans - s0.table_scans, distinct) << "one auto-table scan per distinct shape";
  EXPECT_EQ(s1.resolution_misses - s0.resolution_misses, int64_t(classes.size())) << "one resolution per class";
  EXPECT_EQ(s1.resolution_hits - s0.resolution_hits, 0);

  const dash::TemplateCacheStats c1 = dash::template_cache_stats();
  const dash::VarlenPlan again = dash::plan_for_pack(pack, schedule, 132, GqaMode::Auto);
  const dash::detail::PlanMemoStats s2 = dash::detail::plan_memo_stats();
  const dash::TemplateCacheStats c2 = dash::template_cache_stats();
  EXPECT_EQ(s2.table_scans, s1.table_scans) << "a repeat scanned the auto table";
  EXPECT_EQ(s2.candidate_hits - s1.candidate_hits, distinct) << "one row look-up per distinct shape (its class)";
  EXPECT_EQ(s2.resolution_misses, s1.resolution_misses);
  EXPECT_EQ(s2.resolution_hits - s1.resolution_hits, int64_t(classes.size())) << "one memo hit per class";
  EXPECT_EQ(c2.builds, c1.builds);
  EXPECT_EQ((c2.hits + c2.builds) - (c1.hits + c1.builds), int64_t(classes.size()))
      << "one template-cache look-up per class";

  // And the same plan as without the memos.
  dash::VarlenPlan fresh;
  {
    MemoSwitch off(false);
    fresh = dash::plan_for_pack(pack, schedule, 132, GqaMode::Auto);
  }
  for (const dash::VarlenPlan* v : {&first, &again}) {
    ASSERT_EQ(v->templates.size(), fresh.templates.size());
    for (size_t t = 0; t < fresh.templates.size(); ++t) {
      EXPECT_EQ(v->templates[t].unit.get(), fresh.templates[t].unit.get());
      EXPECT_EQ(std::memcmp(&v->templates[t].header, &fresh.templates[t].header, sizeof(dash_plan_header)), 0);
      EXPECT_EQ(v->templates[t].note, fresh.templates[t].note);
    }
    ASSERT_EQ(v->sequences.size(), fresh.sequences.size());
    EXPECT_EQ(std::memcmp(v->sequences.data(), fresh.sequences.data(),
                          fresh.sequences.size() * sizeof(dash_pack_sequence)),
              0);
    EXPECT_EQ(v->ticket_chunks, fresh.ticket_chunks);
    EXPECT_EQ(v->num_tickets, fresh.num_tickets);
    EXPECT_EQ(v->note, fresh.note);
  }
}

}  // namespace
