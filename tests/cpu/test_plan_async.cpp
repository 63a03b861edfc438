// SPDX-License-Identifier: Apache-2.0
// plan_for_async (include/dash/plan.hpp): the plan resolved on the drafts' layouts while the tables are written on a
// thread of their own. Checked against plan_for, resolved beforehand on an empty cache with the memos off: the same
// choice (template key), note and header (but for the two fields that come with validation), the same blob once the
// tables are done, a layout that is the finished blob's, and a wave within the draft's bound. Also: concurrent callers
// of one new template start one build, and plan_for during that build waits for it rather than building again.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dash/plan.hpp"
#include "plan_internal.hpp"  // dash::detail::set_plan_memo_enabled
#include "test_problems.hpp"

namespace {

using dash::GqaMode;
using dash::Mask;
using dash::test::make_problem;
using dash::test::windowed;

struct Expected {
  dash::TemplateKey key;
  dash_plan_header header{};
  std::string note;
  std::vector<uint8_t> blob;  // the template's (Plan::to_blob)
  int32_t wave = 0;
  std::string error;
};

Expected expected_of(const dash::PlanRequest& req) {
  Expected e;
  dash::detail::set_plan_memo_enabled(false);
  try {
    const dash::BoundPlan b = dash::plan_for(req);
    e.key = b.unit->key;
    e.header = b.header;
    e.note = b.note;
    e.blob = b.unit->plan.to_blob();
    e.wave = b.unit->wave;
  } catch (const dash::Error& error) {
    e.error = error.what();
  }
  dash::detail::set_plan_memo_enabled(true);
  return e;
}

// The header fields that only validation gives (plan.hpp, TemplateLayout::header) set to plan_for's.
dash_plan_header with_validated_fields(dash_plan_header h, const Expected& e) {
  h.min_coresident_ctas = e.header.min_coresident_ctas;
  h.flags = e.header.flags;
  return h;
}

struct Request {
  dash::Problem problem;
  const char* schedule;
  GqaMode mode;
  int32_t num_ctas;
};

std::string describe(const Request& r) {
  return r.problem.describe() + ", " + r.schedule + ", " + dash::gqa_mode_name(r.mode) + ", P " +
         std::to_string(r.num_ctas);
}

std::vector<Request> requests() {
  std::vector<Request> out;
  const std::vector<dash::Problem> problems = {
      make_problem(1, 1, Mask::Causal, 2, 2),        make_problem(2, 1, Mask::Full, 4, 1),
      make_problem(1, 2, Mask::Causal, 4, 2),        make_problem(300, 300, Mask::Causal, 4, 1),
      make_problem(1000, 3000, Mask::Full, 2, 2),    make_problem(4096, 4096, Mask::Causal, 32, 8, 2),
      make_problem(8000, 8000, Mask::Full, 16, 16, 2), windowed(make_problem(5000, 5000, Mask::Causal, 8, 8), 700, 0),
      make_problem(32768, 32768, Mask::Causal, 32, 8), make_problem(131072, 131072, Mask::Causal, 16, 16),
  };
  for (const dash::Problem& p : problems) {
    // auto on every P (a small P skips candidates whose wave exceeds it), the named planners on a P that fits their
    // lock-step units (16 items) and on one that does not (a named planner then throws, as plan_for does).
    for (int32_t P : {132, 16, 2}) out.push_back({p, "auto", GqaMode::Auto, P});
    for (const char* s : {"ascending", "descending", "shift", "symmetric-shift"})
      for (int32_t P : {132, 8}) out.push_back({p, s, GqaMode::Auto, P});
    if (p.group_size() > 1) out.push_back({p, "symmetric-shift", GqaMode::PackGroup, 132});
  }
  return out;
}

TEST(PlanForAsync, ChoosesWhatPlanForChooses) {
  int compared = 0, errors = 0, filling = 0;
  for (const Request& r : requests()) {
    const std::string what = describe(r);
    const dash::PlanRequest req{r.problem, dash::Schedule::parse(r.schedule), r.num_ctas, {}, r.mode, nullptr};
    dash::clear_template_cache();
    const Expected want = expected_of(req);
    dash::clear_template_cache();  // plan_for_async finds nothing: it drafts (or waits where the bound exceeds P)
    dash::AsyncBoundPlan got;
    std::string error;
    try {
      got = dash::plan_for_async(req);
    } catch (const dash::Error& e) {
      error = e.what();
    }
    ASSERT_EQ(error, want.error) << what;
    ++compared;
    if (!error.empty()) {
      ++errors;
      continue;
    }
    EXPECT_EQ(got.note, want.note) << what;
    const dash_plan_header header = with_validated_fields(got.header, want);
    EXPECT_EQ(std::memcmp(&header, &want.header, sizeof header), 0) << what;
    std::shared_ptr<const dash::UnitTemplate> unit = got.unit;
    if (unit == nullptr) {
      ++filling;
      ASSERT_NE(got.layout, nullptr) << what;
      EXPECT_EQ(got.layout->key, want.key) << what;
      unit = got.tables.get();
      ASSERT_NE(unit, nullptr) << what;
      const dash_plan_header built = unit->plan.blob_header();
      // The template's flags: the bound header's less those the request sets (bind_header).
      constexpr uint32_t kRequestFlags =
          DASH_PLAN_NONDETERMINISTIC_ONLY | DASH_PLAN_ITEM_MAJOR | DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED;
      dash_plan_header laid_out = with_validated_fields(got.layout->blob_header, want);
      laid_out.flags &= ~kRequestFlags;
      EXPECT_EQ(std::memcmp(&built, &laid_out, sizeof built), 0) << what << ": the layout is not the blob's";
      EXPECT_LE(unit->wave, got.layout->wave_bound) << what;
      EXPECT_LE(got.layout->wave_bound, r.num_ctas) << what << ": a bound above P must be waited for";
    }
    EXPECT_EQ(unit->key, want.key) << what;
    EXPECT_EQ(unit->wave, want.wave) << what;
    EXPECT_TRUE(unit->plan.to_blob() == want.blob) << what << ": the tables differ";
  }
  EXPECT_GT(errors, 0) << "no request threw: the error path went untested";
  EXPECT_GT(filling, compared / 2) << "most requests should resolve on a layout still being filled";
}

TEST(PlanForAsync, OneBuildPerNewTemplateWhateverTheCallers) {
  dash::clear_template_cache();
  const dash::PlanRequest req{make_problem(65536, 65536, Mask::Causal, 16, 16), dash::Schedule::parse("symmetric-shift"),
                              132, {}, GqaMode::Auto, nullptr};
  const int64_t runs_before = dash::planner_runs(), builds_before = dash::template_cache_stats().builds;
  std::vector<dash::AsyncBoundPlan> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[size_t(t)] = dash::plan_for_async(req); });
  for (std::thread& t : threads) t.join();
  // plan_for while the build may still run: it waits for that build.
  const dash::BoundPlan sync = dash::plan_for(req);
  for (const dash::AsyncBoundPlan& a : got) {
    const std::shared_ptr<const dash::UnitTemplate> unit = a.unit != nullptr ? a.unit : a.tables.get();
    EXPECT_EQ(unit.get(), sync.unit.get());
  }
  EXPECT_EQ(dash::planner_runs() - runs_before, 1);
  EXPECT_EQ(dash::template_cache_stats().builds - builds_before, 1);
}

// A build that fails (injected: DASH_ATTN_TEST_TEMPLATE_BUILDS=fail, as a planner bug caught by validation would) gives
// its error to whoever waits for it, plan_for_async's caller and a plan_for that found the build running alike; the
// failure is not cached: the next request builds again.
TEST(PlanForAsync, ABuildErrorReachesEveryCallerAndIsNotCached) {
  dash::clear_template_cache();
  const dash::PlanRequest req{make_problem(3001, 3001, Mask::Causal, 4, 4), dash::Schedule::parse("ascending"), 132, {},
                              GqaMode::Auto, nullptr};
  setenv("DASH_ATTN_TEST_TEMPLATE_BUILDS", "fail", 1);  // read by the build thread, started after this
  const dash::AsyncBoundPlan pending = dash::plan_for_async(req);
  ASSERT_EQ(pending.unit, nullptr) << "the build should still be running (it sleeps half a second)";
  std::string sync_error, async_error;
  try {
    dash::plan_for(req);  // finds the build running and waits for it
  } catch (const dash::Error& e) {
    sync_error = e.what();
  }
  try {
    pending.tables.get();
  } catch (const dash::Error& e) {
    async_error = e.what();
  }
  unsetenv("DASH_ATTN_TEST_TEMPLATE_BUILDS");  // both builds have ended
  EXPECT_NE(sync_error.find("on purpose"), std::string::npos) << sync_error;
  EXPECT_NE(async_error.find("on purpose"), std::string::npos) << async_error;
  const dash::BoundPlan later = dash::plan_for(req);
  EXPECT_NE(later.unit, nullptr);
}

}  // namespace
