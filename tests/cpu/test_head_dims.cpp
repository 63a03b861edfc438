// SPDX-License-Identifier: Apache-2.0
// The kernel table's (head_dim, head_dim_v) pairs through every non-kernel layer: dash_check_problem accepts the
// table's pairs and refuses others naming the field; the rows of head dims 256 and 192 / 128 are planned with their
// 64 x 64 column-split tiles, simulated and run by the CPU backend; and the CPU backend with head_dim_v != head_dim,
// forward and backward, fixed-length and varlen, against an fp64 evaluation written here from the definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dash/dash_attn.h"
#include "dash/kernel_table.hpp"
#include "dash/plan.hpp"
#include "dash/simulator.hpp"
#include "test_problems.hpp"

namespace {

dash_problem c_problem(int32_t head_dim, int32_t head_dim_v, int32_t seqlen = 256, int32_t batch = 1,
                       int32_t heads = 2) {
  dash_problem p{};
  p.batch = batch;
  p.heads_q = p.heads_kv = heads;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.mask_kind = DASH_MASK_CAUSAL;
  p.window_left = p.window_right = -1;
  return p;
}

struct Checked {
  dash_status status;
  std::string message;
};

Checked check(const dash_problem& p, int32_t pass) {
  const dash_status status = dash_check_problem(&p, pass);
  return {status, dash_last_error()};
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// ---- the table as the C ABI lists it ----

TEST(KernelRows, TheCAbiListsTheTablesRowsAndTheirPasses) {
  const dash_kernel_row* rows = dash_kernel_rows();
  int n = 0;
  for (; rows[n].head_dim != 0; ++n) {
    ASSERT_LT(n, dash::kKernelTableRows) << "dash_kernel_rows is not terminated by a row with head_dim 0";
    const dash::KernelTableRow& row = dash::kKernelTable[n];
    EXPECT_EQ(rows[n].head_dim, row.head_dim);
    EXPECT_EQ(rows[n].head_dim_v, row.head_dim_v);
    EXPECT_EQ(rows[n].forward, 1);
    EXPECT_EQ(rows[n].backward, dash::has_backward(row) ? 1 : 0);
  }
  EXPECT_EQ(n, dash::kKernelTableRows);
  EXPECT_EQ(dash_abi_struct_size("dash_kernel_row"), sizeof(dash_kernel_row));
  // The rows issue 16 asked for: 192 / 128 and 256, forward and backward.
  EXPECT_EQ(dash::kernel_table_row(192, 128).head_dim, 192);
  EXPECT_TRUE(dash::has_backward(dash::kernel_table_row(192, 128)));
  EXPECT_EQ(dash::kernel_table_row(256).head_dim, 256);
  EXPECT_TRUE(dash::has_backward(dash::kernel_table_row(256)));
  EXPECT_TRUE(dash::has_backward(dash::kernel_table_row(128)));
}

TEST(KernelRows, SupportedHeadDimsAreTheRowsWithEqualHeadDims) {
  const std::vector<int32_t> expected = {64, 96, 128, 256};
  EXPECT_EQ(dash::kernel_head_dims(), expected);
  std::vector<int32_t> listed;
  for (const int32_t* d = dash_supported_head_dims(); *d != 0; ++d) listed.push_back(*d);
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(dash::kernel_pairs_text(), "64, 96, 128, 192/128 and 256");
  EXPECT_EQ(dash::kernel_pairs_text(dash::KernelRows::WithBackward), "64, 96, 128, 192/128 and 256");
  EXPECT_EQ(dash::kernel_pairs_text(dash::KernelRows::ForwardOnly), "");
}

// ---- dash_check_problem ----

TEST(CheckProblem, EveryRowRunsForwardAndBothBackwards) {
  for (const dash::KernelTableRow& row : dash::kKernelTable) {
    for (int32_t head_dim_v : {row.head_dim_v, row.head_dim_v == row.head_dim ? 0 : row.head_dim_v}) {
      const dash_problem p = c_problem(row.head_dim, head_dim_v);
      const std::string pair = std::to_string(row.head_dim) + "/" + std::to_string(head_dim_v);
      const Checked fwd = check(p, DASH_CHECK_FORWARD);
      EXPECT_EQ(fwd.status, DASH_OK) << pair << ": " << fwd.message;
      const Checked cpu = check(p, DASH_CHECK_CPU_BACKWARD);
      EXPECT_EQ(cpu.status, DASH_OK) << pair << ": " << cpu.message;
      EXPECT_TRUE(dash::has_backward(row)) << pair;
      const Checked gpu = check(p, DASH_CHECK_BACKWARD);
      EXPECT_EQ(gpu.status, DASH_OK) << pair << ": " << gpu.message;
    }
  }
}

TEST(CheckProblem, APairWithoutARowIsRefusedNamingTheFieldAndListingThePairs) {
  struct Case {
    int32_t head_dim, head_dim_v;
    const char* field;
  };
  // A head dim no row has is head_dim's fault; a head dim some row has, with another value head dim, head_dim_v's.
  for (const Case c : {Case{72, 0, "problem.head_dim: 72 is not supported"}, Case{72, 72, "problem.head_dim: 72"},
                       Case{320, 128, "problem.head_dim: 320"}, Case{192, 0, "problem.head_dim_v: 192 (0: equal"},
                       Case{192, 192, "problem.head_dim_v: 192 is not supported with head_dim 192"},
                       Case{128, 64, "problem.head_dim_v: 64 is not supported with head_dim 128"},
                       Case{256, 128, "problem.head_dim_v: 128"}, Case{128, 192, "problem.head_dim_v: 192"}}) {
    for (int32_t pass : {DASH_CHECK_FORWARD, DASH_CHECK_BACKWARD, DASH_CHECK_CPU_BACKWARD}) {
      const Checked r = check(c_problem(c.head_dim, c.head_dim_v), pass);
      EXPECT_EQ(r.status, DASH_ERROR_UNSUPPORTED) << c.field;
      EXPECT_TRUE(starts_with(r.message, c.field)) << r.message;
      EXPECT_NE(r.message.find("64, 96, 128, 192/128 and 256"), std::string::npos) << r.message;
    }
  }
}

TEST(CheckProblem, InvalidValuesAreInvalidArguments) {
  const Checked negative = check(c_problem(192, -1), DASH_CHECK_FORWARD);
  EXPECT_EQ(negative.status, DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with(negative.message, "problem.head_dim_v: must be >= 1")) << negative.message;
  const dash_problem p = c_problem(128, 0);
  const Checked pass = check(p, 3);
  EXPECT_EQ(pass.status, DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with(pass.message, "needs_backward: must be 0 (DASH_CHECK_FORWARD)")) << pass.message;
}

TEST(CheckProblem, SizeLimitsStillApplyToTheNewRows) {
  // The plan format's 16-bit Q tile index, for the CPU backend's backward as for the GPU's.
  const dash_problem long_mla = c_problem(192, 128, 10'000'000, 1, 1);
  EXPECT_EQ(check(long_mla, DASH_CHECK_FORWARD).status, DASH_OK);
  const Checked cpu = check(long_mla, DASH_CHECK_CPU_BACKWARD);
  EXPECT_EQ(cpu.status, DASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(starts_with(cpu.message, "problem.seqlen_q: 10000000 needs 156250 Q tiles of 64 rows")) << cpu.message;
  // The forward's work-tile limit and the backward's (batch, head) limit.
  const Checked forward = check(c_problem(256, 0, 1 << 20, 1 << 10, 1 << 10), DASH_CHECK_FORWARD);
  EXPECT_EQ(forward.status, DASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(starts_with(forward.message, "problem.batch: batch x heads_q x 128-row query tiles")) << forward.message;
  const Checked heads = check(c_problem(192, 128, 64, 300, 300), DASH_CHECK_CPU_BACKWARD);
  EXPECT_EQ(heads.status, DASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(starts_with(heads.message, "problem.batch: batch x heads_q = 90000 exceeds")) << heads.message;
}

// ---- planning and simulating the column-split rows (the GPU backward and the CPU backend follow these plans) ----

TEST(HeadDimV, TilesComeFromTheRowOfTheQkHeadDim) {
  EXPECT_EQ(dash::default_backward_tiles(64).block_m, 128);
  EXPECT_EQ(dash::default_backward_tiles(128).block_m, 64);
  EXPECT_EQ(dash::default_backward_tiles(128).block_n, 128);
  // The column-split rows (192 / 128 and 256): 64 x 64 tiles, whatever the value head dim.
  for (int32_t head_dim : {192, 256}) {
    const dash::TileShape tiles = dash::default_backward_tiles(head_dim);
    EXPECT_EQ(tiles.block_m, 64) << head_dim;
    EXPECT_EQ(tiles.block_n, 64) << head_dim;
  }
  // A head dim without a row (planner studies): the table's rule.
  EXPECT_EQ(dash::default_backward_tiles(160).block_m, 64);
  EXPECT_EQ(dash::default_backward_tiles(160).block_n, 128);
  EXPECT_EQ(dash::default_backward_tiles(32).block_m, 128);
}

TEST(HeadDimV, PlansCarryTheValueHeadDimAndTheirTablesDoNotDependOnIt) {
  dash::Problem mla = dash::test::make_problem(1000, 1300, dash::Mask::Causal, 8, 2, 2, 192);
  mla.head_dim_v = 128;
  dash::Problem equal = mla;
  equal.head_dim_v = 0;
  for (const char* schedule : {"auto", "shift", "symmetric-shift"}) {
    dash::PlanRequest req{mla, dash::Schedule::parse(schedule), 132, {}, dash::GqaMode::Auto, nullptr};
    const dash::Plan plan = dash::build_plan(req);
    EXPECT_EQ(plan.header.problem.head_dim_v, 128);
    EXPECT_EQ(plan.header.block_m, 64);
    EXPECT_TRUE(dash::validate_plan(plan, plan.header.num_ctas).ok);
    const std::vector<uint8_t> blob = plan.to_blob();
    const dash::Plan back = dash::Plan::from_blob(blob.data(), blob.size());
    EXPECT_EQ(back.problem().value_head_dim(), 128);
    EXPECT_NE(back.problem().describe().find("hdim 192 (v 128)"), std::string::npos) << back.problem().describe();
    req.problem = equal;
    const dash::Plan same_tables = dash::build_plan(req);
    EXPECT_EQ(same_tables.to_blob().size(), blob.size()) << schedule;
    EXPECT_EQ(same_tables.visits.size(), plan.visits.size()) << schedule;
    EXPECT_TRUE(std::equal(plan.visits.begin(), plan.visits.end(), same_tables.visits.begin(),
                           [](const dash_visit& a, const dash_visit& b) { return std::memcmp(&a, &b, sizeof a) == 0; }))
        << schedule;
  }
  // The simulator runs such a plan, its cost model counting 2 * (d + dv) per pair: less work than 192 / 192.
  dash::PlanRequest req{mla, dash::Schedule::parse("ascending"), 132, {}, dash::GqaMode::SplitHeads, nullptr};
  const dash::Plan plan = dash::build_plan(req);
  const dash::CostModel mla_cost = dash::CostModel::for_problem(mla, {64, 128});
  const dash::CostModel equal_cost = dash::CostModel::for_problem(equal, {64, 128});
  EXPECT_LT(mla_cost.compute_full, equal_cost.compute_full);
  EXPECT_DOUBLE_EQ(mla_cost.compute_full / equal_cost.compute_full, (192.0 + 128.0) / (2 * 192.0));
  EXPECT_DOUBLE_EQ(mla_cost.reduce, equal_cost.reduce);  // dQ has head_dim columns either way
  const dash::SimResult sim = dash::simulate(plan, 132, mla_cost);
  EXPECT_FALSE(sim.deadlocked);
  EXPECT_GT(sim.makespan, 0.0);
}

// ---- the CPU backend against fp64 ----

// Whether query i sees key j, written from the definition (dash/dash_attn.h), not from the library's geometry.
bool visible(const dash_problem& p, int64_t i, int64_t j) {
  const int64_t diagonal = i + p.seqlen_k - p.seqlen_q;
  switch (p.mask_kind) {
    case DASH_MASK_FULL: return true;
    case DASH_MASK_CAUSAL: return j <= diagonal;
    default:
      return (p.window_left < 0 || j >= diagonal - p.window_left) &&
             (p.window_right < 0 || j <= diagonal + p.window_right);
  }
}

// Dense [batch, seqlen, heads, width] row-major host tensors.
struct Dense {
  int64_t seqlen = 0, heads = 0, width = 0;
  std::vector<float> x;
  Dense() = default;
  Dense(int64_t batch, int64_t seqlen_, int64_t heads_, int64_t width_, float fill)
      : seqlen(seqlen_), heads(heads_), width(width_), x(size_t(batch * seqlen_ * heads_ * width_), fill) {}
  float* at(int64_t b, int64_t s, int64_t h) { return x.data() + ((b * seqlen + s) * heads + h) * width; }
  const float* at(int64_t b, int64_t s, int64_t h) const { return x.data() + ((b * seqlen + s) * heads + h) * width; }
  dash_tensor tensor() { return {x.data(), seqlen * heads * width, heads * width, width}; }
};

struct Inputs {
  dash_problem p{};
  Dense q, k, v, dout;
};

Inputs random_inputs(const dash_problem& p, uint32_t seed) {
  const int32_t dv = p.head_dim_v != 0 ? p.head_dim_v : p.head_dim;
  Inputs in{p, Dense(p.batch, p.seqlen_q, p.heads_q, p.head_dim, 0.f),
            Dense(p.batch, p.seqlen_k, p.heads_kv, p.head_dim, 0.f), Dense(p.batch, p.seqlen_k, p.heads_kv, dv, 0.f),
            Dense(p.batch, p.seqlen_q, p.heads_q, dv, 0.f)};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (Dense* t : {&in.q, &in.k, &in.v, &in.dout})
    for (float& e : t->x) e = normal(rng);
  return in;
}

// The results of both passes; fp64 ones are rounded to float for the comparison only.
struct Outputs {
  std::vector<double> o, lse, dq, dk, dv;
};

// Attention and its gradients in fp64 from the definitions: S = scale Q K^T (over head_dim), P = softmax(S) over the
// visible keys, O = P V (head_dim_v columns), dV = P^T dO, dP = dO V^T, dS = P o (dP - rowsum(dO o O)),
// dQ = scale dS K, dK = scale dS^T Q; GQA query heads summed into their KV head. A row that sees no key: O = 0,
// LSE = -inf, no gradient.
Outputs fp64_attention(const Inputs& in, double scale) {
  const dash_problem& p = in.p;
  const int64_t d = p.head_dim, dv = p.head_dim_v != 0 ? p.head_dim_v : p.head_dim, sq = p.seqlen_q, sk = p.seqlen_k;
  const int64_t group = p.heads_q / p.heads_kv;
  Outputs out{std::vector<double>(in.dout.x.size(), 0.0), std::vector<double>(size_t(p.batch * p.heads_q * sq), 0.0),
              std::vector<double>(in.q.x.size(), 0.0), std::vector<double>(in.k.x.size(), 0.0),
              std::vector<double>(in.v.x.size(), 0.0)};
  auto idx = [](int64_t b, int64_t s, int64_t h, int64_t seqlen, int64_t heads, int64_t width) {
    return size_t(((b * seqlen + s) * heads + h) * width);
  };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < sq; ++i) {
        std::vector<double> s(size_t(sk), -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < sk; ++j) {
          if (!visible(p, i, j)) continue;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += double(in.q.at(b, i, h)[e]) * in.k.at(b, j, hk)[e];
          s[size_t(j)] = scale * dot;
          m = std::max(m, s[size_t(j)]);
        }
        double& lse = out.lse[size_t((b * p.heads_q + h) * sq + i)];
        if (std::isinf(m)) {
          lse = -std::numeric_limits<double>::infinity();
          continue;
        }
        double l = 0;
        for (int64_t j = 0; j < sk; ++j) l += std::isinf(s[size_t(j)]) ? 0.0 : std::exp(s[size_t(j)] - m);
        lse = m + std::log(l);
        std::vector<double> prob(size_t(sk), 0.0);
        for (int64_t j = 0; j < sk; ++j)
          prob[size_t(j)] = std::isinf(s[size_t(j)]) ? 0.0 : std::exp(s[size_t(j)] - lse);
        double* o = &out.o[idx(b, i, h, sq, p.heads_q, dv)];
        for (int64_t j = 0; j < sk; ++j)
          for (int64_t e = 0; e < dv; ++e) o[e] += prob[size_t(j)] * in.v.at(b, j, hk)[e];
        double delta = 0;
        for (int64_t e = 0; e < dv; ++e) delta += double(in.dout.at(b, i, h)[e]) * o[e];
        for (int64_t j = 0; j < sk; ++j) {
          if (prob[size_t(j)] == 0.0) continue;
          double dp = 0;
          for (int64_t e = 0; e < dv; ++e) dp += double(in.dout.at(b, i, h)[e]) * in.v.at(b, j, hk)[e];
          const double ds = prob[size_t(j)] * (dp - delta);
          for (int64_t e = 0; e < d; ++e) {
            out.dq[idx(b, i, h, sq, p.heads_q, d) + size_t(e)] += scale * ds * in.k.at(b, j, hk)[e];
            out.dk[idx(b, j, hk, sk, p.heads_kv, d) + size_t(e)] += scale * ds * in.q.at(b, i, h)[e];
          }
          for (int64_t e = 0; e < dv; ++e)
            out.dv[idx(b, j, hk, sk, p.heads_kv, dv) + size_t(e)] += prob[size_t(j)] * in.dout.at(b, i, h)[e];
        }
      }
    }
  return out;
}

// max |a - b| / max(max |b|, 1); a NaN or infinity in `a` where b is finite is an infinite error, and an infinity
// of b must be matched. The floor of 1: the inputs are standard normal, so every output's natural magnitude is about
// 1, and a reference that vanishes (seqlen_k = 1 gives dS = P (dP - delta) = 0, so dQ = dK = 0 exactly) is compared
// absolutely, where its fp32 rounding (about 1e-7) would otherwise be divided by the fp64 residue (about 1e-16).
double relative_error(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i])) {
      if (!(std::isinf(a[i]) && (a[i] < 0) == (b[i] < 0))) return INFINITY;
      continue;
    }
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

// The CPU backend through the C ABI: dash_cpu_fwd, a host plan, dash_cpu_bwd. Outputs start as NaN so that an
// unwritten element fails the comparison.
struct CpuRun {
  Dense o, dq, dk, dv;
  std::vector<float> lse;
};

CpuRun run_cpu_backend(Inputs& in, const char* schedule, int32_t gqa_mode) {
  const dash_problem& p = in.p;
  const int32_t dv = p.head_dim_v != 0 ? p.head_dim_v : p.head_dim;
  CpuRun r{Dense(p.batch, p.seqlen_q, p.heads_q, dv, NAN), Dense(p.batch, p.seqlen_q, p.heads_q, p.head_dim, NAN),
           Dense(p.batch, p.seqlen_k, p.heads_kv, p.head_dim, NAN), Dense(p.batch, p.seqlen_k, p.heads_kv, dv, NAN),
           std::vector<float>(size_t(p.batch * p.heads_q * p.seqlen_q), NAN)};
  dash_fwd_args fwd{p, DASH_DTYPE_FP32, in.q.tensor(), in.k.tensor(), in.v.tensor(), r.o.tensor(), r.lse.data(), 0.f};
  EXPECT_EQ(dash_cpu_fwd(&fwd), DASH_OK) << dash_last_error();
  void* blob = nullptr;
  size_t bytes = 0;
  EXPECT_EQ(dash_plan_build_host(&p, schedule, 132, gqa_mode, &blob, &bytes), DASH_OK) << dash_last_error();
  dash_bwd_args bwd{p,           DASH_DTYPE_FP32, in.q.tensor(),  in.k.tensor(),  in.v.tensor(),  r.o.tensor(),
                    in.dout.tensor(), r.lse.data(), r.dq.tensor(), r.dk.tensor(), r.dv.tensor(), 0.f, nullptr};
  EXPECT_EQ(dash_cpu_bwd(&bwd, blob, bytes), DASH_OK) << dash_last_error();
  dash_plan_free_host(blob);
  return r;
}

dash_problem shape(int32_t head_dim, int32_t head_dim_v, int32_t sq, int32_t sk, int32_t mask, int32_t hq = 2,
                   int32_t hk = 2, int32_t batch = 1) {
  dash_problem p = c_problem(head_dim, head_dim_v, sq, batch, hq);
  p.heads_kv = hk;
  p.seqlen_k = sk;
  p.mask_kind = mask;
  if (mask == DASH_MASK_WINDOW) {
    p.window_left = 5;
    p.window_right = 2;
  }
  return p;
}

// Tolerances (relative to the largest reference magnitude): the forward's sums are carried in double and rounded
// once (src/core/reference.cpp), so O and LSE are within a few fp32 ulps; the backward adds fp32 partials per tile in
// the plan's order, as test_reference.cpp's oracle comparison allows (1e-4).
constexpr double kForwardTolerance = 1e-5, kBackwardTolerance = 1e-4;

void expect_matches_fp64(const dash_problem& p, uint32_t seed, const char* schedule = "auto",
                         int32_t gqa_mode = DASH_GQA_AUTO) {
  Inputs in = random_inputs(p, seed);
  const std::string name = dash::Problem::from_c(p).describe() + ", " + schedule;
  const Outputs ref = fp64_attention(in, 1.0 / std::sqrt(double(p.head_dim)));
  const CpuRun r = run_cpu_backend(in, schedule, gqa_mode);
  EXPECT_LT(relative_error(r.o.x, ref.o), kForwardTolerance) << name;
  EXPECT_LT(relative_error(r.lse, ref.lse), kForwardTolerance) << name;
  EXPECT_LT(relative_error(r.dq.x, ref.dq), kBackwardTolerance) << name;
  EXPECT_LT(relative_error(r.dk.x, ref.dk), kBackwardTolerance) << name;
  EXPECT_LT(relative_error(r.dv.x, ref.dv), kBackwardTolerance) << name;
}

// Lengths 1 and 2 on each side, a tile edge and a few tiles (64 x 128 tiles at these head dims).
const std::vector<std::pair<int32_t, int32_t>> kLengths = {{1, 1}, {1, 2}, {2, 1}, {2, 2},   {1, 70},
                                                           {70, 1}, {2, 65}, {65, 2}, {130, 129}};

TEST(CpuBackendHeadDimV, Mla192By128MatchesFp64ForEveryMaskAndLength) {
  uint32_t seed = 1;
  for (int32_t mask : {DASH_MASK_FULL, DASH_MASK_CAUSAL, DASH_MASK_WINDOW})
    for (auto [sq, sk] : kLengths) expect_matches_fp64(shape(192, 128, sq, sk, mask), seed++);
}

TEST(CpuBackendHeadDimV, HeadDim256MatchesFp64ForEveryMaskAndLength) {
  uint32_t seed = 100;
  for (int32_t mask : {DASH_MASK_FULL, DASH_MASK_CAUSAL, DASH_MASK_WINDOW})
    for (auto [sq, sk] : kLengths) expect_matches_fp64(shape(256, 0, sq, sk, mask), seed++);
}

TEST(CpuBackendHeadDimV, GqaBatchesAndSchedulesMatchFp64) {
  // Two batches, a group of 3 query heads per KV head, both GQA modes and several planners' orders.
  const dash_problem p = shape(192, 128, 150, 200, DASH_MASK_CAUSAL, 6, 2, 2);
  uint32_t seed = 200;
  for (const char* schedule : {"ascending", "descending", "shift", "symmetric-shift"})
    for (int32_t mode : {DASH_GQA_SPLIT_HEADS, DASH_GQA_PACK_GROUP}) expect_matches_fp64(p, seed++, schedule, mode);
}

// A plan made with DASH_GQA_AUTO_NONDETERMINISTIC picks its GQA mode by the batch: the CPU backend, which always adds
// in the plan's order, refuses it, naming the plan.
TEST(CpuBackendHeadDimV, RefusesAPlanForNondeterministicBackwardsOnly) {
  const dash_problem p = shape(128, 128, 64, 64, DASH_MASK_CAUSAL, 4, 2, 2);
  Inputs in = random_inputs(p, 11);
  CpuRun r{Dense(p.batch, p.seqlen_q, p.heads_q, 128, NAN), Dense(p.batch, p.seqlen_q, p.heads_q, 128, NAN),
           Dense(p.batch, p.seqlen_k, p.heads_kv, 128, NAN), Dense(p.batch, p.seqlen_k, p.heads_kv, 128, NAN),
           std::vector<float>(size_t(p.batch * p.heads_q * p.seqlen_q), NAN)};
  dash_fwd_args fwd{p, DASH_DTYPE_FP32, in.q.tensor(), in.k.tensor(), in.v.tensor(), r.o.tensor(), r.lse.data(), 0.f};
  ASSERT_EQ(dash_cpu_fwd(&fwd), DASH_OK) << dash_last_error();
  void* blob = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(dash_plan_build_host(&p, "auto", 132, DASH_GQA_AUTO_NONDETERMINISTIC, &blob, &bytes), DASH_OK)
      << dash_last_error();
  dash_bwd_args bwd{p,           DASH_DTYPE_FP32, in.q.tensor(),  in.k.tensor(),  in.v.tensor(),  r.o.tensor(),
                    in.dout.tensor(), r.lse.data(), r.dq.tensor(), r.dk.tensor(), r.dv.tensor(), 0.f, nullptr};
  EXPECT_EQ(dash_cpu_bwd(&bwd, blob, bytes), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("DASH_GQA_AUTO_NONDETERMINISTIC"), std::string::npos)
      << dash_last_error();
  dash_plan_free_host(blob);
}

TEST(CpuBackendHeadDimV, TensorsAreReadWithTheirOwnHeadDim) {
  // v, o, dout and dv padded to 256 columns (strides of the wider head dim) give the same bits as dense ones: the
  // backend reads head_dim_v columns of each row, wherever the next row starts.
  const dash_problem p = shape(192, 128, 40, 50, DASH_MASK_FULL, 2, 1);
  Inputs in = random_inputs(p, 7);
  const CpuRun dense = run_cpu_backend(in, "ascending", DASH_GQA_SPLIT_HEADS);
  auto padded = [](const Dense& t, float fill) {
    Dense out(1, t.seqlen, t.heads, 256, fill);
    for (int64_t s = 0; s < t.seqlen; ++s)
      for (int64_t h = 0; h < t.heads; ++h) std::copy_n(t.at(0, s, h), t.width, out.at(0, s, h));
    return out;
  };
  Dense v = padded(in.v, 1e30f), dout = padded(in.dout, 1e30f), o(1, p.seqlen_q, p.heads_q, 256, -7.f),
        dv(1, p.seqlen_k, p.heads_kv, 256, -7.f), dq(1, p.seqlen_q, p.heads_q, 192, NAN),
        dk(1, p.seqlen_k, p.heads_kv, 192, NAN);
  std::vector<float> lse(size_t(p.heads_q * p.seqlen_q), NAN);
  dash_fwd_args fwd{p, DASH_DTYPE_FP32, in.q.tensor(), in.k.tensor(), v.tensor(), o.tensor(), lse.data(), 0.f};
  ASSERT_EQ(dash_cpu_fwd(&fwd), DASH_OK) << dash_last_error();
  void* blob = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(dash_plan_build_host(&p, "ascending", 132, DASH_GQA_SPLIT_HEADS, &blob, &bytes), DASH_OK);
  dash_bwd_args bwd{p, DASH_DTYPE_FP32, in.q.tensor(), in.k.tensor(), v.tensor(), o.tensor(), dout.tensor(),
                    lse.data(), dq.tensor(), dk.tensor(), dv.tensor(), 0.f, nullptr};
  ASSERT_EQ(dash_cpu_bwd(&bwd, blob, bytes), DASH_OK) << dash_last_error();
  dash_plan_free_host(blob);
  for (int64_t s = 0; s < p.seqlen_q; ++s)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      ASSERT_EQ(std::memcmp(o.at(0, s, h), dense.o.at(0, s, h), 128 * sizeof(float)), 0) << s;
      ASSERT_EQ(o.at(0, s, h)[128], -7.f) << "o written past head_dim_v";
    }
  for (int64_t s = 0; s < p.seqlen_k; ++s)
    for (int64_t h = 0; h < p.heads_kv; ++h) {
      ASSERT_EQ(std::memcmp(dv.at(0, s, h), dense.dv.at(0, s, h), 128 * sizeof(float)), 0) << s;
      ASSERT_EQ(dv.at(0, s, h)[255], -7.f) << "dv written past head_dim_v";
    }
  EXPECT_EQ(dq.x, dense.dq.x);
  EXPECT_EQ(dk.x, dense.dk.x);
}

TEST(CpuBackendHeadDimV, VarlenMatchesFp64PerSequence) {
  // A pack with empty sequences on either side and lengths 1 and 2: each sequence against its own fp64 evaluation,
  // and the rows of a sequence without keys (O = 0, LSE = -inf, zero gradients) with head_dim_v columns.
  const std::vector<int32_t> lengths_q = {3, 0, 1, 2, 70, 5, 2};
  const std::vector<int32_t> lengths_k = {0, 4, 2, 1, 90, 5, 2};
  for (int32_t head_dim_v : {128, 0}) {
    const int32_t head_dim = head_dim_v == 0 ? 256 : 192;
    dash_problem given = shape(head_dim, head_dim_v, 1, 1, DASH_MASK_CAUSAL, 4, 2, int32_t(lengths_q.size()));
    std::vector<int32_t> cu_q = {0}, cu_k = {0};
    for (size_t s = 0; s < lengths_q.size(); ++s) {
      cu_q.push_back(cu_q.back() + lengths_q[s]);
      cu_k.push_back(cu_k.back() + lengths_k[s]);
    }
    dash_pack_t pack = nullptr;
    ASSERT_EQ(dash_pack_create(&given, cu_q.data(), cu_k.data(), &pack), DASH_OK) << dash_last_error();
    dash_problem p{};
    ASSERT_EQ(dash_pack_problem(pack, &p), DASH_OK);
    EXPECT_EQ(p.head_dim_v, head_dim_v);
    const int32_t dv = head_dim_v != 0 ? head_dim_v : head_dim;
    // The packed tensors as batch-1 dense ones of all their rows.
    dash_problem all = p;
    all.batch = 1;
    all.seqlen_q = cu_q.back();
    all.seqlen_k = cu_k.back();
    Inputs in = random_inputs(all, 300 + uint32_t(head_dim));
    CpuRun r{Dense(1, all.seqlen_q, p.heads_q, dv, NAN), Dense(1, all.seqlen_q, p.heads_q, head_dim, NAN),
             Dense(1, all.seqlen_k, p.heads_kv, head_dim, NAN), Dense(1, all.seqlen_k, p.heads_kv, dv, NAN),
             std::vector<float>(size_t(p.heads_q * all.seqlen_q), NAN)};
    auto rows = [](Dense& t) { return dash_tensor{t.x.data(), 0, t.heads * t.width, t.width}; };
    dash_fwd_args fwd{p, DASH_DTYPE_FP32, rows(in.q), rows(in.k), rows(in.v), rows(r.o), r.lse.data(), 0.f};
    ASSERT_EQ(dash_cpu_fwd_varlen(&fwd, pack), DASH_OK) << dash_last_error();
    dash_bwd_args bwd{p, DASH_DTYPE_FP32, rows(in.q), rows(in.k), rows(in.v), rows(r.o), rows(in.dout), r.lse.data(),
                      rows(r.dq), rows(r.dk), rows(r.dv), 0.f, nullptr};
    ASSERT_EQ(dash_cpu_bwd_varlen(&bwd, pack, "auto", 132, DASH_GQA_AUTO), DASH_OK) << dash_last_error();
    dash_pack_destroy(pack);

    for (size_t s = 0; s < lengths_q.size(); ++s) {
      // Sequence s alone, as a batch-1 problem, in fp64.
      dash_problem one = p;
      one.batch = 1;
      one.seqlen_q = lengths_q[s];
      one.seqlen_k = lengths_k[s];
      if (one.seqlen_q == 0) continue;
      Inputs alone{one, Dense(1, one.seqlen_q, p.heads_q, head_dim, 0.f),
                   Dense(1, one.seqlen_k, p.heads_kv, head_dim, 0.f), Dense(1, one.seqlen_k, p.heads_kv, dv, 0.f),
                   Dense(1, one.seqlen_q, p.heads_q, dv, 0.f)};
      auto take = [](const Dense& from, Dense& to, int32_t first_row) {
        std::copy_n(from.at(0, first_row, 0), to.x.size(), to.x.data());
      };
      take(in.q, alone.q, cu_q[s]);
      take(in.dout, alone.dout, cu_q[s]);
      if (one.seqlen_k > 0) {
        take(in.k, alone.k, cu_k[s]);
        take(in.v, alone.v, cu_k[s]);
      }
      const Outputs ref = fp64_attention(alone, 1.0 / std::sqrt(double(head_dim)));
      auto slice = [](const Dense& t, int32_t first_row, int32_t count) {
        return std::vector<float>(t.at(0, first_row, 0), t.at(0, first_row, 0) + size_t(count) * t.heads * t.width);
      };
      const std::string name = "sequence " + std::to_string(s) + " (" + std::to_string(one.seqlen_q) + " x " +
                               std::to_string(one.seqlen_k) + "), head dims " + std::to_string(head_dim) + "/" +
                               std::to_string(dv);
      std::vector<float> lse;
      for (int32_t h = 0; h < p.heads_q; ++h)
        lse.insert(lse.end(), r.lse.begin() + h * all.seqlen_q + cu_q[s],
                   r.lse.begin() + h * all.seqlen_q + cu_q[s] + one.seqlen_q);
      EXPECT_LT(relative_error(slice(r.o, cu_q[s], one.seqlen_q), ref.o), kForwardTolerance) << name;
      EXPECT_LT(relative_error(lse, ref.lse), kForwardTolerance) << name;
      EXPECT_LT(relative_error(slice(r.dq, cu_q[s], one.seqlen_q), ref.dq), kBackwardTolerance) << name;
      if (one.seqlen_k > 0) {
        EXPECT_LT(relative_error(slice(r.dk, cu_k[s], one.seqlen_k), ref.dk), kBackwardTolerance) << name;
        EXPECT_LT(relative_error(slice(r.dv, cu_k[s], one.seqlen_k), ref.dv), kBackwardTolerance) << name;
      }
    }
    // Sequence 0 has no keys: its O rows are zero over head_dim_v columns (none left NaN).
    const std::vector<float> o0(r.o.at(0, 0, 0), r.o.at(0, 0, 0) + size_t(lengths_q[0]) * p.heads_q * dv);
    EXPECT_TRUE(std::all_of(o0.begin(), o0.end(), [](float x) { return x == 0.f; }));
    // Sequence 1 has no queries: its dK / dV rows are zero.
    const float* dv1_begin = r.dv.at(0, cu_k[1], 0);
    const std::vector<float> dv1(dv1_begin, dv1_begin + size_t(lengths_k[1]) * p.heads_kv * dv);
    EXPECT_TRUE(std::all_of(dv1.begin(), dv1.end(), [](float x) { return x == 0.f; }));
  }
}

TEST(CpuBackendHeadDimV, TheCpuBackendRefusesAPairWithoutARowNamingIt) {
  dash_problem p = shape(192, 96, 4, 4, DASH_MASK_FULL);
  std::vector<float> q(size_t(4 * 2 * 192)), k(q.size()), v(size_t(4 * 2 * 96)), o(v.size()), lse(8);
  dash_fwd_args fwd{p,
                    DASH_DTYPE_FP32,
                    {q.data(), 0, 2 * 192, 192},
                    {k.data(), 0, 2 * 192, 192},
                    {v.data(), 0, 2 * 96, 96},
                    {o.data(), 0, 2 * 96, 96},
                    lse.data(),
                    0.f};
  EXPECT_EQ(dash_cpu_fwd(&fwd), DASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(starts_with(dash_last_error(), "problem.head_dim_v: 96 is not supported with head_dim 192"))
      << dash_last_error();
  dash_pack_t pack = nullptr;
  const int32_t cu[] = {0, 4};
  p.batch = 1;
  EXPECT_EQ(dash_pack_create(&p, cu, cu, &pack), DASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(starts_with(dash_last_error(), "problem.head_dim_v: 96")) << dash_last_error();
  EXPECT_EQ(pack, nullptr);
}

}  // namespace
