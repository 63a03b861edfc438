// SPDX-License-Identifier: Apache-2.0
// The CPU backend: against an independent fp64 evaluation of the attention gradients, and the order
// semantics the plans promise (same dQ order => same dQ bits; batch invariance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "dash/reference.hpp"
#include "test_problems.hpp"

namespace {


struct Inputs {
  dash::Problem problem;
  float scale;
  std::vector<float> q, k, v, d_o, o, lse;
};

Inputs random_inputs(const dash::Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill = [&](size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = normal(rng);
    return x;
  };
  Inputs in{p, 1.f / std::sqrt(float(p.head_dim)), {}, {}, {}, {}, {}, {}};
  const size_t d = size_t(p.head_dim);
  in.q = fill(size_t(p.batch) * p.seqlen_q * p.heads_q * d);
  in.k = fill(size_t(p.batch) * p.seqlen_k * p.heads_kv * d);
  in.v = fill(size_t(p.batch) * p.seqlen_k * p.heads_kv * d);
  in.d_o = fill(in.q.size());
  in.o.resize(in.q.size());
  in.lse.resize(size_t(p.batch) * p.heads_q * p.seqlen_q);
  using dash::reference::dense;
  dash::reference::forward(p, in.scale, dense(in.q.data(), p.seqlen_q, p.heads_q, p.head_dim),
                           dense(in.k.data(), p.seqlen_k, p.heads_kv, p.head_dim),
                           dense(in.v.data(), p.seqlen_k, p.heads_kv, p.head_dim),
                           dense(in.o.data(), p.seqlen_q, p.heads_q, p.head_dim), in.lse.data());
  return in;
}

struct Grads {
  std::vector<float> dq, dk, dv;
};

Grads run_backward(const Inputs& in, const dash::Plan& plan) {
  const dash::Problem& p = in.problem;
  Grads g{std::vector<float>(in.q.size(), NAN), std::vector<float>(in.k.size(), NAN), std::vector<float>(in.v.size(), NAN)};
  auto cast = [](const std::vector<float>& x) { return const_cast<float*>(x.data()); };
  const int d = p.head_dim;
  dash::reference::backward(plan, in.scale, dash::reference::dense(cast(in.q), p.seqlen_q, p.heads_q, d),
                            dash::reference::dense(cast(in.k), p.seqlen_k, p.heads_kv, d),
                            dash::reference::dense(cast(in.v), p.seqlen_k, p.heads_kv, d),
                            dash::reference::dense(cast(in.o), p.seqlen_q, p.heads_q, d),
                            dash::reference::dense(cast(in.d_o), p.seqlen_q, p.heads_q, d), in.lse.data(),
                            dash::reference::dense(g.dq.data(), p.seqlen_q, p.heads_q, d),
                            dash::reference::dense(g.dk.data(), p.seqlen_k, p.heads_kv, d),
                            dash::reference::dense(g.dv.data(), p.seqlen_k, p.heads_kv, d));
  return g;
}

// The gradients evaluated densely in fp64, straight from the definitions (no tiles, no plan):
// P = softmax(scale Q K^T), dV = P^T dO, dP = dO V^T, dS = P o (dP - rowsum(dO o O)), dQ = scale dS K,
// dK = scale dS^T Q, with GQA heads summed into their KV head.
Grads fp64_gradients(const Inputs& in) {
  const dash::Problem& p = in.problem;
  const int64_t d = p.head_dim, sq = p.seqlen_q, sk = p.seqlen_k, g = p.group_size();
  const dash::TileGrid grid(p, {1, 1});
  Grads out{std::vector<float>(in.q.size()), std::vector<float>(in.k.size()), std::vector<float>(in.v.size())};
  std::vector<double> dk(in.k.size(), 0.0), dv(in.v.size(), 0.0);
  // Row (b, s, h) of a dense (batch, seqlen, heads, d) tensor; queries have sq rows, keys sk.
  auto qi = [&](const std::vector<float>& x, int64_t b, int64_t s, int64_t h, int64_t heads) {
    const int64_t seqlen = (&x == &in.k || &x == &in.v) ? sk : sq;
    return x.data() + ((b * seqlen + s) * heads + h) * d;
  };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const int64_t hk = h / g;
      std::vector<double> P(size_t(sq * sk), 0.0), dS(size_t(sq * sk), 0.0);
      for (int64_t i = 0; i < sq; ++i) {
        int64_t first, last;
        grid.visible_keys(i, first, last);
        if (first > last) continue;
        double m = -1e300;
        std::vector<double> s(static_cast<size_t>(sk));
        for (int64_t j = first; j <= last; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < d; ++e) acc += double(qi(in.q, b, i, h, p.heads_q)[e]) * qi(in.k, b, j, hk, p.heads_kv)[e];
          s[size_t(j)] = acc * in.scale;
          m = std::max(m, s[size_t(j)]);
        }
        double l = 0;
        for (int64_t j = first; j <= last; ++j) l += std::exp(s[size_t(j)] - m);
        std::vector<double> o(size_t(d), 0.0);
        for (int64_t j = first; j <= last; ++j) {
          P[size_t(i * sk + j)] = std::exp(s[size_t(j)] - m) / l;
          for (int64_t e = 0; e < d; ++e) o[size_t(e)] += P[size_t(i * sk + j)] * qi(in.v, b, j, hk, p.heads_kv)[e];
        }
        double delta = 0;
        for (int64_t e = 0; e < d; ++e) delta += double(qi(in.d_o, b, i, h, p.heads_q)[e]) * o[size_t(e)];
        for (int64_t j = first; j <= last; ++j) {
          double dp = 0;
          for (int64_t e = 0; e < d; ++e) dp += double(qi(in.d_o, b, i, h, p.heads_q)[e]) * qi(in.v, b, j, hk, p.heads_kv)[e];
          dS[size_t(i * sk + j)] = P[size_t(i * sk + j)] * (dp - delta);
        }
      }
      for (int64_t i = 0; i < sq; ++i)
        for (int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < sk; ++j) acc += dS[size_t(i * sk + j)] * qi(in.k, b, j, hk, p.heads_kv)[e];
          out.dq[size_t(((b * sq + i) * p.heads_q + h) * d + e)] = float(in.scale * acc);
        }
      for (int64_t j = 0; j < sk; ++j)
        for (int64_t e = 0; e < d; ++e) {
          double ak = 0, av = 0;
          for (int64_t i = 0; i < sq; ++i) {
            ak += dS[size_t(i * sk + j)] * qi(in.q, b, i, h, p.heads_q)[e];
            av += P[size_t(i * sk + j)] * qi(in.d_o, b, i, h, p.heads_q)[e];
          }
          dk[size_t(((b * sk + j) * p.heads_kv + hk) * d + e)] += in.scale * ak;
          dv[size_t(((b * sk + j) * p.heads_kv + hk) * d + e)] += av;
        }
    }
  for (size_t x = 0; x < dk.size(); ++x) {
    out.dk[x] = float(dk[x]);
    out.dv[x] = float(dv[x]);
  }
  return out;
}

// max |a - b| / max |b|: fp32 sums of O(seqlen) terms land far below 1e-4.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

dash::Plan plan_for(const dash::Problem& p, const std::string& schedule, dash::GqaMode mode = dash::GqaMode::SplitHeads,
                    dash::TileShape tiles = {32, 64}) {
  return dash::build_plan({p, dash::Schedule::parse(schedule), 132, tiles, mode, nullptr});
}

// Head dim 32 keeps the fp64 oracle fast.
dash::Problem shape(int sq, int sk, dash::Mask mask, int hq = 1, int hk = 1, int batch = 1) {
  return dash::test::make_problem(sq, sk, mask, hq, hk, batch, 32);
}

TEST(Reference, EveryPlannerMatchesFp64Gradients) {
  const std::vector<dash::Problem> problems = {
      shape(113, 203, dash::Mask::Causal, 2, 1), shape(203, 113, dash::Mask::Causal, 1, 1),
      shape(150, 150, dash::Mask::Full, 4, 2, 2), shape(97, 97, dash::Mask::Causal, 3, 3)};
  uint32_t seed = 1;
  for (const auto& p : problems) {
    const Inputs in = random_inputs(p, seed++);
    const Grads ref = fp64_gradients(in);
    for (const std::string schedule : {"ascending", "descending", "shift", "symmetric-shift", "auto"})
      for (auto mode : {dash::GqaMode::SplitHeads, dash::GqaMode::PackGroup}) {
        const Grads g = run_backward(in, plan_for(p, schedule, mode));
        EXPECT_LT(relative_error(g.dq, ref.dq), 1e-4) << p.describe() << " " << schedule;
        EXPECT_LT(relative_error(g.dk, ref.dk), 1e-4) << p.describe() << " " << schedule;
        EXPECT_LT(relative_error(g.dv, ref.dv), 1e-4) << p.describe() << " " << schedule;
      }
  }
}

TEST(Reference, WindowMaskMatchesFp64Gradients) {
  const dash::Problem p = dash::test::windowed(shape(160, 200, dash::Mask::Full), 40, 7);
  const Inputs in = random_inputs(p, 7);
  const Grads ref = fp64_gradients(in);
  for (const std::string schedule : {"ascending", "shift", "symmetric-shift"}) {
    const Grads g = run_backward(in, plan_for(p, schedule));
    EXPECT_LT(relative_error(g.dq, ref.dq), 1e-4) << schedule;
    EXPECT_LT(relative_error(g.dk, ref.dk), 1e-4) << schedule;
  }
}

TEST(Reference, SameDqOrderGivesSameDqBitsAndOtherOrdersDiffer) {
  const dash::Problem p = shape(256, 256, dash::Mask::Full);
  const Inputs in = random_inputs(p, 11);
  const Grads asc = run_backward(in, plan_for(p, "ascending"));
  const Grads desc = run_backward(in, plan_for(p, "descending"));
  const Grads shift = run_backward(in, plan_for(p, "shift"));
  // ascending and descending add dQ tiles in the same (ascending KV) order...
  EXPECT_TRUE(bitwise_equal(asc.dq, desc.dq));
  // ...but sum dK/dV over Q tiles in opposite orders, and shift adds dQ in another order: different bits,
  // equal values to rounding.
  EXPECT_FALSE(bitwise_equal(asc.dk, desc.dk));
  EXPECT_FALSE(bitwise_equal(asc.dq, shift.dq));
  EXPECT_LT(relative_error(shift.dq, asc.dq), 1e-5);
}

TEST(Reference, ASequenceHasTheSameBitsAloneAndInABatch) {
  // Sequence 0 of a batch of 3 and the same sequence alone, with 2 heads vs 4 heads (tensor parallelism
  // halves the heads): its gradients must be bitwise identical for every schedule.
  const dash::Problem batch = shape(200, 200, dash::Mask::Causal, 4, 4, 3);
  const Inputs big = random_inputs(batch, 5);
  dash::Problem alone_shape = shape(200, 200, dash::Mask::Causal, 2, 2, 1);
  Inputs alone{alone_shape, big.scale, {}, {}, {}, {}, {}, {}};
  const size_t d = 32;
  // Copy batch 0, heads 0..1 of q/dO/o and k/v out of the big problem.
  auto slice = [&](const std::vector<float>& x, int seqlen, int heads) {
    std::vector<float> out;
    for (int s = 0; s < seqlen; ++s)
      out.insert(out.end(), x.begin() + (size_t(s) * heads) * d, x.begin() + (size_t(s) * heads + 2) * d);
    return out;
  };
  alone.q = slice(big.q, 200, 4);
  alone.k = slice(big.k, 200, 4);
  alone.v = slice(big.v, 200, 4);
  alone.d_o = slice(big.d_o, 200, 4);
  alone.o = slice(big.o, 200, 4);
  alone.lse.assign(big.lse.begin(), big.lse.begin() + 2 * 200);
  for (const std::string schedule : {"ascending", "descending", "shift", "symmetric-shift", "auto"}) {
    const Grads g_big = run_backward(big, plan_for(batch, schedule));
    const Grads g_alone = run_backward(alone, plan_for(alone_shape, schedule));
    EXPECT_TRUE(bitwise_equal(slice(g_big.dq, 200, 4), g_alone.dq)) << schedule;
    EXPECT_TRUE(bitwise_equal(slice(g_big.dk, 200, 4), g_alone.dk)) << schedule;
    EXPECT_TRUE(bitwise_equal(slice(g_big.dv, 200, 4), g_alone.dv)) << schedule;
  }
}

TEST(Reference, RowsThatSeeNoKeyGetZeroOutputAndGradient) {
  const dash::Problem p = shape(100, 40, dash::Mask::Causal); // rows 0..59 see nothing
  const Inputs in = random_inputs(p, 3);
  EXPECT_TRUE(std::isinf(in.lse[0]) && in.lse[0] < 0);
  EXPECT_EQ(in.o[0], 0.f);
  const Grads g = run_backward(in, plan_for(p, "symmetric-shift"));
  for (size_t x = 0; x < 60 * 32; ++x) ASSERT_EQ(g.dq[x], 0.f) << x;
  EXPECT_LT(relative_error(g.dq, fp64_gradients(in).dq), 1e-4);
}

} // namespace
