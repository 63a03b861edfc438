// SPDX-License-Identifier: Apache-2.0
// make_auto_table — generates src/core/auto_table.inc, the table `auto` reads (src/core/auto_table.cpp), by
// simulating every (GQA mode, planner) candidate on a grid of sequence shapes with the calibrated H200 cost model
// (dash/cost_model.hpp, docs/calibration.md). Run through scripts/make_auto_table.sh, which shards the grid over
// the machine's cores and writes the file; `make_auto_table --check` compares the table in this build with fresh
// simulations instead.
//
// How a row ranks its candidates (P = 132, the SMs of an H100 SXM / H200):
//  1. Throughput: the makespan summed over canonical problems, one sequence with a range of unit counts, each a
//     multiple of 8 (canonical_problems below), so that neither the batch nor the head count of one real call
//     decides, and the unit counts are those real calls have. This rule reproduced the fastest measured planner in
//     the calibration runs (docs/calibration.md).
//  2. A guard for packed GQA units, against the split-heads candidate of the same planner, on realistic problems with
//     the fewest whole KV-head groups of at least kGuardHeads query heads: a pack-mode candidate goes after every
//     other candidate if it is more than kGuardRegret behind on one sequence (P CTAs), or if on kBusyTokens tokens
//     (the protocol's batch: 2 x 8k, 4 x 4k, ...) its slowdown from P to kBusyCtas CTAs (8 of the 132 SMs held by
//     other kernels: issue 13's busy-SM benchmark; communication kernels hold some while a training step's backward
//     runs) exceeds split's by more than kBusyRegret. Packed units are group-size times fewer and longer: without the
//     first check they won on throughput while one sequence of 28/4 heads ran 2x slower than split heads; without
//     the second, 2 x 8k tokens of 32/8 heads, causal, simulate 1.50x their time on 132 CTAs when packed and 1.24x
//     split (lock-step units finish in whole rounds: 16 units of 16 items are two rounds on 132 CTAs, three on
//     124), and measured 1.31x against 1.19x (docs/benchmarks.md, "Plans in production again").
//  3. Candidates whose wave exceeds P cannot run on this device and are left out (plan_for skips by wave anyway).
// Rows longer than kLongestSimulated (one unit there is over a million visits) keep the order of the row at
// kLongestSimulated with the same mask, head dim and group, less the candidates whose wave exceeds P at the longer
// length: there every plan is throughput-bound and the simulated ratios have converged (docs/calibration.md), and
// leaving out what cannot run spares plan_for from building a template only to skip it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "dash/kernel_table.hpp"
#include "dash/plan.hpp"
#include "dash/simulator.hpp"

namespace {

using dash::Candidate;
using dash::GqaMode;
using dash::Mask;
using dash::Plan;
using dash::Planner;
using dash::Problem;
using dash::TileGrid;

constexpr int32_t kCtas = 132;
constexpr int32_t kBusyCtas = 124;     // issue 13's busy-SM benchmark at k = 8
constexpr int32_t kBusyTokens = 16384;  // tokens per call of the busy guard problem, as the protocol's grid
constexpr double kGuardRegret = 1.15;
constexpr double kBusyRegret = 1.10;
constexpr int32_t kGuardHeads = 32;  // a 32-head model on one sequence (28/4, 32/8, 64/8 with tensor parallel 2)
constexpr int32_t kLongestSimulated = 16384;

// The problems the throughput score sums over: the row's sequence shape, mask, head dim and group, one sequence, and
// a range of unit counts (query heads in split mode, KV heads in pack mode), each a multiple of kUnitMultiple.
// Planners with long items (symmetric shift pairs KV tiles) or lock-step units of 16 items (shift, pack) finish a
// round of units together, so whether the last round is full decides between them, and that depends on the unit
// count. Real calls have batch x heads a multiple of 8: 16, 32 or 64 query heads, KV heads 4 or 8 at batch >= 2.
// There 8 lock-step units of 16 items fill one round of 132 CTAs, and the earlier range (every count over one round
// period, 18-27 at 8k) averaged in counts whose last round stood mostly empty: it kept ascending at 8k full, where
// shift measured 6% faster on 32 units, and split for GQA 32/8 at 4k-16k, where pack measured 1.03-1.15x
// (docs/calibration.md, "Unit counts in multiples of 8"). One sequence of 18, 20 or 28 heads is what this gives up.
std::vector<Problem> canonical_problems(const Problem& real, GqaMode mode, const TileGrid& grid, int32_t num_ctas,
                                        int64_t fewest_items) {
  constexpr int64_t kUnitMultiple = 8;
  // KV tiles per CTA in the smallest canonical problem. Long enough that start-up effects that real problems
  // amortise (ascending order on a full mask staggers the CTAs by one hand-off each before it runs freely)
  // do not decide: with 2, auto chose shift where ascending measured up to 13% faster (docs/calibration.md).
  constexpr int64_t kMinFills = 8;
  // All sizes together: a few seconds of simulation. Long rows (16k tokens) simulate the sizes that fit.
  constexpr int64_t kVisitBudget = int64_t(1) << 22;
  constexpr int64_t kMaxSizes = 9;
  const int64_t kv_tiles = std::max(1, grid.num_kv_tiles());
  int64_t visits_per_unit = 0;
  for (int32_t kv = 0; kv < grid.num_kv_tiles(); ++kv) visits_per_unit += int64_t(grid.q_tiles_seen_by(kv).size());
  visits_per_unit = std::max<int64_t>(1, visits_per_unit * (mode == GqaMode::PackGroup ? real.group_size() : 1));
  // The fewest items per unit any candidate makes (pairs of KV tiles, or 16 lock-step items) gives the longest
  // round period. The range starts at two rounds: at one round and a bit, any plan with few long items per unit
  // leaves most CTAs idle in its second round, and that half-empty round, not throughput, would decide.
  const int64_t period = (num_ctas + fewest_items - 1) / fewest_items;
  int64_t first = std::max(2 * period, (kMinFills * num_ctas + kv_tiles - 1) / kv_tiles);
  first = (first + kUnitMultiple - 1) / kUnitMultiple * kUnitMultiple;
  // Huge P: stay affordable.
  first = std::max(kUnitMultiple, std::min(first, kVisitBudget / (4 * visits_per_unit) / kUnitMultiple * kUnitMultiple));
  std::vector<Problem> problems;
  int64_t visits = 0;
  for (int64_t units = first, sizes = 0; sizes < kMaxSizes && visits + units * visits_per_unit <= kVisitBudget;
       units += kUnitMultiple, ++sizes) {
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

struct Scored {
  Candidate candidate;
  double throughput = 0;  // summed makespan over the canonical problems
  double small = 0;       // makespan on the guard problem
  double busy = 0;        // the busy guard problem's makespan on kBusyCtas over that on kCtas (GQA rows only)
  bool within_guard = true;
};

// The plan's template does not depend on P (only its header's CTA count and claim order): it is bound for kCtas,
// whose wave check the candidate passed, and run on `num_ctas`.
double makespan(const Problem& p, Candidate c, const dash::CostModel& cost, bool waits_only_backward,
                int32_t num_ctas = kCtas) {
  Plan plan = dash::build_plan({p, {dash::Schedule::Kind::Planner, c.planner}, kCtas, {}, c.mode, nullptr});
  if (waits_only_backward) plan.header.flags |= DASH_PLAN_WAITS_ONLY_BACKWARD;
  const dash::SimResult sim = dash::simulate(plan, num_ctas, cost, {.record_spans = false, .critical_path = false});
  if (sim.deadlocked) return std::numeric_limits<double>::infinity();
  return sim.makespan;
}

// The ranking of one row: "mode/planner ..." best first.
std::string rank_row(const Problem& shape) {
  const dash::TileShape tiles = dash::default_backward_tiles(shape.head_dim);
  const TileGrid grid(shape, tiles);
  const int32_t group = shape.group_size();
  const dash::CostModel cost = dash::CostModel::for_problem(shape, tiles);
  std::vector<GqaMode> modes = {GqaMode::SplitHeads};
  if (group > 1) modes.push_back(GqaMode::PackGroup);
  // Every candidate's unit, validated on P; the fewest items per unit of the last mode's units sets the range.
  struct Built {
    Candidate candidate;
    dash::ValidationReport report;
  };
  std::vector<Built> built;
  int64_t fewest_items = std::numeric_limits<int64_t>::max();
  for (GqaMode mode : modes) {
    for (Planner planner : dash::all_planners()) {
      const Plan unit = dash::build_unvalidated(shape, planner, tiles, mode, kCtas);
      // The items that run at once: a slot's where the template is cut into slots (plan_format.h).
      if (mode == modes.back()) fewest_items = std::min<int64_t>(fewest_items, dash::slot_items(unit.header));
      built.push_back({{mode, planner}, dash::validate_plan(unit, kCtas)});
    }
  }
  // Both modes are simulated on the same problems (whole KV-head groups), so their sums compare equal work.
  const std::vector<Problem> canonical =
      canonical_problems(shape, modes.back(), grid, kCtas, std::max<int64_t>(fewest_items, 1));
  Problem guard = shape;
  guard.batch = 1;
  guard.heads_kv = (kGuardHeads + group - 1) / group;
  guard.heads_q = guard.heads_kv * group;
  Problem busy_guard = guard;
  busy_guard.batch = std::max(1, kBusyTokens / std::max(shape.seqlen_q, shape.seqlen_k));

  std::vector<Scored> scored;
  for (const Built& b : built) {
    if (!b.report.ok) continue;  // its wave exceeds P
    Scored s{b.candidate, 0, 0, 0, true};
    for (const Problem& p : canonical) s.throughput += makespan(p, b.candidate, cost, b.report.waits_only_backward);
    s.small = makespan(guard, b.candidate, cost, b.report.waits_only_backward);
    if (group > 1)
      s.busy = makespan(busy_guard, b.candidate, cost, b.report.waits_only_backward, kBusyCtas) /
               makespan(busy_guard, b.candidate, cost, b.report.waits_only_backward);
    scored.push_back(s);
  }
  auto split_of = [&](Planner planner) -> const Scored* {
    for (const Scored& s : scored)
      if (s.candidate.mode == GqaMode::SplitHeads && s.candidate.planner == planner) return &s;
    return nullptr;  // split cannot run here: nothing to guard against
  };
  // Decided before sorting: the sort moves the elements that split_of reads (until 2026-12-03 the guard read them
  // while the sort ran, so some pack candidates it should have demoted kept their place).
  for (Scored& s : scored) {
    const Scored* split = s.candidate.mode == GqaMode::SplitHeads ? nullptr : split_of(s.candidate.planner);
    s.within_guard = split == nullptr || (s.small <= kGuardRegret * split->small && s.busy <= kBusyRegret * split->busy);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.within_guard != b.within_guard) return a.within_guard;
    return a.within_guard ? a.throughput < b.throughput : a.small < b.small;
  });
  std::string out;
  for (const Scored& s : scored)
    out += std::string(out.empty() ? "" : " ") + dash::gqa_mode_name(s.candidate.mode) + "/" +
           dash::planner_name(s.candidate.planner);
  return out;
}

// The long rows: the kLongestSimulated row's order, less the candidates whose wave exceeds P at this length.
std::string extrapolate_row(const Problem& shape) {
  Problem simulated = shape;
  simulated.seqlen_q = simulated.seqlen_k = kLongestSimulated;
  static std::map<std::tuple<int, int, int>, std::string> simulated_rows;  // one per mask, head dim and group
  const auto key = std::tuple{int(shape.mask), shape.head_dim, shape.group_size()};
  if (!simulated_rows.count(key)) simulated_rows[key] = rank_row(simulated);
  std::istringstream words(simulated_rows[key]);
  std::string out;
  for (std::string word; words >> word;) {
    const GqaMode mode = word.rfind("pack/", 0) == 0 ? GqaMode::PackGroup : GqaMode::SplitHeads;
    const Planner planner = dash::Schedule::parse(word.substr(word.find('/') + 1)).planner;
    const Plan unit = dash::build_unvalidated(shape, planner, {}, mode, kCtas);
    if (!dash::validate_plan(unit, kCtas).ok) continue;
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

Problem row_problem(Mask mask, int32_t head_dim, int32_t group, int32_t seqlen_q, int32_t seqlen_k) {
  Problem p;
  p.batch = 1;
  p.heads_kv = 1;
  p.heads_q = group;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim = head_dim;
  p.mask = mask;
  return p;
}

// The head dims the table has rows for: those of the backward kernels whose cost model the calibration runs measured
// (docs/calibration.md: the planner grid at head dims 64 and 128). Auto serves any other head dim from the nearest of
// these rows (96, 192 / 128 and 256 from 128's). Rows simulated with the uncalibrated tiles of head dim 256 (64 x 64)
// picked shift at 2k causal, where symmetric shift measured 1.10x it (docs/calibration.md, "Unit counts in multiples
// of 8"); 128's rows measured right there.
std::vector<int32_t> backward_head_dims() {
  constexpr int32_t kCalibrated[] = {64, 128};
  std::vector<int32_t> dims;
  for (const dash::KernelTableRow& row : dash::kKernelTable)
    if (dash::has_backward(row) && std::find(std::begin(kCalibrated), std::end(kCalibrated), row.head_dim) !=
                                       std::end(kCalibrated))
      dims.push_back(row.head_dim);
  std::sort(dims.begin(), dims.end());
  return dims;
}

// The grid: both masks, the backward kernels' head dims, groups 1-8, sequence lengths 64-16384 tokens with seqlen_q /
// seqlen_k within a factor of 4, then 32768-131072 tokens with seqlen_q = seqlen_k (extrapolated, above). Longer
// sequences take the 131072 rows, and plan_for still skips a candidate whose wave does not fit. The long rows come
// last so that adding them kept the indices (and shards) of the others.
std::vector<Problem> grid_shapes() {
  std::vector<Problem> shapes;
  const std::vector<int32_t> lengths = {64, 128, 256, 512, 1024, 2048, 4096, 8192, kLongestSimulated};
  for (Mask mask : {Mask::Full, Mask::Causal})
    for (int32_t head_dim : backward_head_dims())
      for (int32_t group : {1, 2, 4, 8})
        for (size_t iq = 0; iq < lengths.size(); ++iq)
          for (size_t ik = 0; ik < lengths.size(); ++ik)
            if (std::abs(int(iq) - int(ik)) <= 2)
              shapes.push_back(row_problem(mask, head_dim, group, lengths[iq], lengths[ik]));
  for (Mask mask : {Mask::Full, Mask::Causal})
    for (int32_t head_dim : backward_head_dims())
      for (int32_t group : {1, 2, 4, 8})
        for (int32_t length : {32768, 65536, 131072}) shapes.push_back(row_problem(mask, head_dim, group, length, length));
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  int shard = 0, shards = 1, min_seqlen = 0;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shard" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d/%d", &shard, &shards) != 2 || shards < 1 || shard < 0 || shard >= shards) {
        std::cerr << "--shard: expected I/N with 0 <= I < N\n";
        return 2;
      }
    } else if (a == "--check") {
      check = true;
    } else if (a == "--min-seqlen" && i + 1 < argc) {
      min_seqlen = std::atoi(argv[++i]);
    } else {
      std::cerr << "usage: make_auto_table [--shard I/N] [--check] [--min-seqlen N]\n"
                   "  prints the table rows of shard I of N (scripts/make_auto_table.sh assembles the file);\n"
                   "  --check re-simulates the rows and compares them with auto_candidates() of this build;\n"
                   "  --min-seqlen: only the rows with seqlen_q >= N\n";
      return 2;
    }
  }
  const std::vector<Problem> shapes = grid_shapes();
  int differ = 0, rows = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (int(i % size_t(shards)) != shard) continue;
    const Problem& p = shapes[i];
    if (p.seqlen_q < min_seqlen) continue;
    const std::string ranking = p.seqlen_q > kLongestSimulated ? extrapolate_row(p) : rank_row(p);
    ++rows;
    if (check) {
      std::string table;
      for (const Candidate& c : dash::auto_candidates(p, {}))
        table += std::string(table.empty() ? "" : " ") + dash::gqa_mode_name(c.mode) + "/" + dash::planner_name(c.planner);
      const std::string first_fresh = ranking.substr(0, ranking.find(' '));
      const std::string first_table = table.substr(0, table.find(' '));
      if (first_fresh != first_table) {
        ++differ;
        std::cout << "DIFFER " << p.describe() << ": table " << first_table << ", simulated " << first_fresh << "\n";
      }
      continue;
    }
    std::cout << i << "\t  {" << int(p.mask) << ", " << p.head_dim << ", " << p.group_size() << ", " << p.seqlen_q << ", "
              << p.seqlen_k << ", \"" << ranking << "\"}," << std::endl;
    std::cerr << "row " << i << "/" << shapes.size() << " done\n";
  }
  if (check) {
    std::cout << rows << " rows checked, " << differ << " first choices differ\n";
    return differ == 0 ? 0 : 1;
  }
  return 0;
}
