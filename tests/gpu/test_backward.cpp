// SPDX-License-Identifier: Apache-2.0
// test_backward.cpp — the plan-executing backward kernel (src/cuda/bwd/) against a float64 CPU reference:
// dQ/dK/dV for full/causal masks, every row of the kernel table (64, 96, 128, 192 / 128, 256), odd and unequal
// lengths, GQA (split and packed) and MQA; bitwise reproducibility over 5 runs for every deterministic schedule; the
// dQ accumulation order the kernel actually executed (the debug order log) equals the plan's; a single-CTA plan;
// non-deterministic mode within tolerance; argument checks.
// GPU tests skip, saying so, where no CUDA device is present.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu_test_support.hpp"

#include "test_problems.hpp"
#include "dash/dash_attn.h"
#include "dash/plan.hpp"

namespace {

using dash::test::from_bf16;
using dash::test::to_bf16;

#define SKIP_WITHOUT_GPU() DASH_SKIP_WITHOUT_GPU("backward")

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

struct Case {
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  dash_mask_kind mask;
  int head_dim_v = 0;  // of v, o, dout, dv; 0: head_dim
  int dv() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
  std::string name() const {
    return "b" + std::to_string(batch) + "_h" + std::to_string(heads_q) + "-" + std::to_string(heads_kv) + "_sq" +
           std::to_string(seqlen_q) + "_sk" + std::to_string(seqlen_k) + "_d" + std::to_string(head_dim) +
           (dv() != head_dim ? "v" + std::to_string(dv()) : std::string()) +
           (mask == DASH_MASK_CAUSAL ? "_causal" : "_full");
  }
  dash_problem problem() const {
    dash_problem p = dash::test::make_problem(seqlen_q, seqlen_k, static_cast<dash::Mask>(mask), heads_q, heads_kv,
                                              batch, head_dim)
                         .to_c();
    p.head_dim_v = head_dim_v;
    return p;
  }
};

// Host tensors (packed [batch, seq, heads, dim], values exactly representable in bf16) and the float64
// reference gradients.
struct Problem {
  Case c;
  float scale;
  std::vector<uint16_t> q, k, v, o, dout;
  std::vector<float> lse;
  std::vector<double> dq, dk, dv;

  // Element of q, k, dq, dk (idx: head_dim columns) and of v, o, dout, dv (idxv: head_dim_v columns).
  size_t idx(int b, int s, int h, int d, int seqlen, int heads) const {
    return ((size_t(b) * seqlen + s) * heads + h) * c.head_dim + d;
  }
  size_t idxv(int b, int s, int h, int d, int seqlen, int heads) const {
    return ((size_t(b) * seqlen + s) * heads + h) * c.dv() + d;
  }

  // with_reference = false: no float64 gradients (O and LSE stay 0), for tests that check only the executed order.
  explicit Problem(const Case& cs, uint32_t seed, bool with_reference = true) : c(cs) {
    scale = float(1.0 / std::sqrt(double(c.head_dim)));
    std::mt19937 rng(seed);
    auto fill = [&](std::vector<uint16_t>& t, size_t n) { dash::test::fill_uniform_bf16(t, n, rng); };
    const size_t nq = size_t(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
    const size_t nk = size_t(c.batch) * c.seqlen_k * c.heads_kv * c.head_dim;
    const size_t nqv = size_t(c.batch) * c.seqlen_q * c.heads_q * c.dv();
    const size_t nkv = size_t(c.batch) * c.seqlen_k * c.heads_kv * c.dv();
    fill(q, nq);
    fill(k, nk);
    fill(v, nkv);
    fill(dout, nqv);
    o.assign(nqv, 0);
    lse.assign(size_t(c.batch) * c.heads_q * c.seqlen_q, 0.f);
    dq.assign(nq, 0.0);
    dk.assign(nk, 0.0);
    dv.assign(nkv, 0.0);
    if (with_reference) reference();
  }

  // Forward (its own LSE and O, rounded to bf16 as the forward kernel would store O), then the backward in fp64.
  void reference() {
    const int D = c.head_dim, DV = c.dv(), sq = c.seqlen_q, sk = c.seqlen_k, G = c.heads_q / c.heads_kv;
    std::vector<double> p(sk), dp(sk);
    for (int b = 0; b < c.batch; ++b)
      for (int h = 0; h < c.heads_q; ++h) {
        const int hk = h / G;
        for (int i = 0; i < sq; ++i) {
          const int last_key = c.mask == DASH_MASK_CAUSAL ? std::min(sk - 1, i + sk - sq) : sk - 1;
          double mx = -std::numeric_limits<double>::infinity();
          for (int j = 0; j <= last_key; ++j) {
            double s = 0;
            for (int d = 0; d < D; ++d) s += double(from_bf16(q[idx(b, i, h, d, sq, c.heads_q)])) *
                                            from_bf16(k[idx(b, j, hk, d, sk, c.heads_kv)]);
            p[j] = s * scale;
            mx = std::max(mx, p[j]);
          }
          float& lse_out = lse[(size_t(b) * c.heads_q + h) * sq + i];
          if (last_key < 0) {  // the row sees no key: O = 0, LSE = -inf, zero gradients
            lse_out = -std::numeric_limits<float>::infinity();
            continue;
          }
          double sum = 0;
          for (int j = 0; j <= last_key; ++j) sum += std::exp(p[j] - mx);
          const double l = mx + std::log(sum);
          lse_out = float(l);
          for (int j = 0; j <= last_key; ++j) p[j] = std::exp(p[j] - double(lse_out));
          std::vector<double> orow(DV, 0.0);
          for (int j = 0; j <= last_key; ++j)
            for (int d = 0; d < DV; ++d) orow[d] += p[j] * from_bf16(v[idxv(b, j, hk, d, sk, c.heads_kv)]);
          double delta = 0;
          for (int d = 0; d < DV; ++d) {
            const uint16_t ob = to_bf16(float(orow[d]));
            o[idxv(b, i, h, d, sq, c.heads_q)] = ob;
            delta += double(from_bf16(ob)) * from_bf16(dout[idxv(b, i, h, d, sq, c.heads_q)]);
          }
          for (int j = 0; j <= last_key; ++j) {
            double s = 0;
            for (int d = 0; d < DV; ++d) s += double(from_bf16(dout[idxv(b, i, h, d, sq, c.heads_q)])) *
                                             from_bf16(v[idxv(b, j, hk, d, sk, c.heads_kv)]);
            dp[j] = s;
          }
          for (int j = 0; j <= last_key; ++j) {
            const double ds = p[j] * (dp[j] - delta);
            for (int d = 0; d < D; ++d) {
              dq[idx(b, i, h, d, sq, c.heads_q)] += scale * ds * from_bf16(k[idx(b, j, hk, d, sk, c.heads_kv)]);
              dk[idx(b, j, hk, d, sk, c.heads_kv)] += scale * ds * from_bf16(q[idx(b, i, h, d, sq, c.heads_q)]);
            }
            for (int d = 0; d < DV; ++d)
              dv[idxv(b, j, hk, d, sk, c.heads_kv)] += p[j] * from_bf16(dout[idxv(b, i, h, d, sq, c.heads_q)]);
          }
        }
      }
  }
};

// Device buffers for one problem, the plan, and the workspace.
struct BwdRun {
  const Problem& pr;
  uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr;
  uint16_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float* lse = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int64_t* order_log = nullptr;
  dash_plan_t plan = nullptr;
  dash_bwd_args args{};

  explicit BwdRun(const Problem& p) : pr(p) {}
  ~BwdRun() {
    for (void* ptr : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)dout, (void*)dq, (void*)dk, (void*)dv,
                      (void*)lse, workspace, (void*)order_log})
      if (ptr) cudaFree(ptr);
    dash_plan_destroy(plan);
  }

  static dash_tensor tensor(void* data, int seqlen, int heads, int dim) {
    return dash_tensor{data, int64_t(seqlen) * heads * dim, int64_t(heads) * dim, int64_t(dim)};
  }

  // Returns an empty string on success, else the failure. async: the plan of dash_plan_create_async, made last, so
  // that a new template's tables are still being written when the test's first run follows.
  std::string setup(const char* schedule, int num_ctas, int gqa_mode, bool async = false) {
    const Case& c = pr.c;
    dash_problem problem = c.problem();
    if (!async && dash_plan_create(&problem, schedule, num_ctas, gqa_mode, &plan) != DASH_OK) {
      return std::string("dash_plan_create: ") + dash_last_error();
    }
    auto upload = [](uint16_t*& dst, const std::vector<uint16_t>& src) {
      cudaMalloc(reinterpret_cast<void**>(&dst), src.size() * 2);
      cudaMemcpy(dst, src.data(), src.size() * 2, cudaMemcpyHostToDevice);
    };
    upload(q, pr.q);
    upload(k, pr.k);
    upload(v, pr.v);
    upload(o, pr.o);
    upload(dout, pr.dout);
    cudaMalloc(reinterpret_cast<void**>(&dq), pr.q.size() * 2);
    cudaMalloc(reinterpret_cast<void**>(&dk), pr.k.size() * 2);
    cudaMalloc(reinterpret_cast<void**>(&dv), pr.v.size() * 2);
    cudaMalloc(reinterpret_cast<void**>(&lse), pr.lse.size() * 4);
    cudaMemcpy(lse, pr.lse.data(), pr.lse.size() * 4, cudaMemcpyHostToDevice);
    args.problem = problem;
    args.dtype = DASH_DTYPE_BF16;
    args.q = tensor(q, c.seqlen_q, c.heads_q, c.head_dim);
    args.k = tensor(k, c.seqlen_k, c.heads_kv, c.head_dim);
    args.v = tensor(v, c.seqlen_k, c.heads_kv, c.dv());
    args.o = tensor(o, c.seqlen_q, c.heads_q, c.dv());
    args.dout = tensor(dout, c.seqlen_q, c.heads_q, c.dv());
    args.dq = tensor(dq, c.seqlen_q, c.heads_q, c.head_dim);
    args.dk = tensor(dk, c.seqlen_k, c.heads_kv, c.head_dim);
    args.dv = tensor(dv, c.seqlen_k, c.heads_kv, c.dv());
    args.lse = lse;
    args.softmax_scale = 0.f;
    if (async) {
      if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return cudaGetErrorString(e);
      if (dash_plan_create_async(&problem, schedule, num_ctas, gqa_mode, &plan) != DASH_OK) {
        return std::string("dash_plan_create_async: ") + dash_last_error();
      }
    }
    // The larger of the two modes' sizes (a DASH_GQA_AUTO_NONDETERMINISTIC plan refuses deterministic mode);
    // run() uses the end of it.
    for (int deterministic : {1, 0}) {
      workspace_bytes = std::max(workspace_bytes, dash_bwd_workspace_size(&args, plan, deterministic));
    }
    if (workspace_bytes == 0) return std::string("dash_bwd_workspace_size: ") + dash_last_error();
    if (cudaMalloc(&workspace, workspace_bytes) != cudaSuccess) return "cudaMalloc(workspace)";
    // Poison the workspace: deterministic mode must not depend on its contents.
    cudaMemset(workspace, 0x7f, workspace_bytes);
    if (!async) {
      if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return cudaGetErrorString(e);
    }
    return "";
  }

  // One backward; outputs poisoned first (0xFFFF = NaN in bf16) so that unwritten elements show. The mode's
  // workspace is the last size(mode) bytes of the allocation, so that an access past the mode's layout leaves the
  // allocation (compute-sanitizer memcheck reports it); sizes are multiples of 256. A size of 0 (a mode the plan
  // refuses) leaves dash_bwd to say why.
  std::string run(int deterministic) {
    cudaMemset(dq, 0xff, pr.q.size() * 2);
    cudaMemset(dk, 0xff, pr.k.size() * 2);
    cudaMemset(dv, 0xff, pr.v.size() * 2);
    const size_t bytes = dash_bwd_workspace_size(&args, plan, deterministic);
    if (dash_bwd(&args, plan, deterministic, static_cast<char*>(workspace) + (workspace_bytes - bytes), bytes,
                 nullptr) != DASH_OK) {
      return std::string("dash_bwd: ") + dash_last_error();
    }
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return std::string("kernel: ") + cudaGetErrorString(e);
    return "";
  }

  void download(std::vector<uint16_t>& hq, std::vector<uint16_t>& hk, std::vector<uint16_t>& hv) {
    hq.resize(pr.q.size());
    hk.resize(pr.k.size());
    hv.resize(pr.v.size());
    cudaMemcpy(hq.data(), dq, hq.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hk.data(), dk, hk.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hv.data(), dv, hv.size() * 2, cudaMemcpyDeviceToHost);
  }
};

// ||out - ref|| / ||ref|| (NaN if any output is NaN), and max |out - ref|.
struct GradError {
  double rel = 0, max_abs = 0;
  bool nan = false;
};
GradError compare(const std::vector<uint16_t>& out, const std::vector<double>& ref) {
  GradError e;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double x = from_bf16(out[i]);
    if (std::isnan(x)) e.nan = true;
    num += (x - ref[i]) * (x - ref[i]);
    den += ref[i] * ref[i];
    e.max_abs = std::max(e.max_abs, std::abs(x - ref[i]));
  }
  e.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

void expect_close(BwdRun& r, const std::string& what) {
  std::vector<uint16_t> hq, hk, hv;
  r.download(hq, hk, hv);
  const char* names[] = {"dQ", "dK", "dV"};
  const std::vector<uint16_t>* outs[] = {&hq, &hk, &hv};
  const std::vector<double>* refs[] = {&r.pr.dq, &r.pr.dk, &r.pr.dv};
  for (int t = 0; t < 3; ++t) {
    const GradError e = compare(*outs[t], *refs[t]);
    // bf16 inputs and outputs: relative errors land between 1e-3 and 1e-2.
    EXPECT_FALSE(e.nan) << what << " " << names[t] << ": NaN (unwritten or invalid output)";
    EXPECT_LT(e.rel, 2e-2) << what << " " << names[t] << ": rel " << e.rel << " max_abs " << e.max_abs;
    std::printf("  %-48s %s rel %.3e max_abs %.3e\n", what.c_str(), names[t], e.rel, e.max_abs);
  }
}

// Checks the executed dQ order (debug log) against the plan: entry [accumulator][rank] holds the (ticket,
// visit) the plan assigns to that rank; ranks beyond dq_count stay untouched (-1).
void expect_order_matches_plan(BwdRun& r) {
  const void* data = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(dash_plan_blob(r.plan, &data, &bytes), DASH_OK);
  const dash::Plan plan = dash::Plan::from_blob(static_cast<const uint8_t*>(data), bytes);
  const dash_plan_header& h = plan.header;
  const Case& c = r.pr.c;
  const size_t accumulators = size_t(c.batch) * c.heads_q * h.num_q_tiles;
  std::vector<int64_t> log(accumulators * h.num_kv_tiles);
  cudaMemcpy(log.data(), r.order_log, log.size() * 8, cudaMemcpyDeviceToHost);
  std::vector<int64_t> expected(log.size(), -1);
  const int G = c.heads_q / c.heads_kv;
  for (int unit = 0; unit < h.num_units; ++unit) {
    for (int item = 0; item < h.items_per_unit; ++item) {
      const int64_t ticket =
          dash_ticket_of(h.flags, h.ticket_group_units, h.items_per_slot, h.num_units, h.items_per_unit, unit, item);
      const dash_item& it = plan.items[item];
      for (int s = it.first_segment; s < it.first_segment + it.num_segments; ++s) {
        const dash_segment& seg = plan.segments[s];
        for (int vi = seg.first_visit; vi < seg.first_visit + seg.num_visits; ++vi) {
          const dash_visit& v = plan.visits[vi];
          int b, head;
          if (h.gqa_mode == DASH_GQA_PACK_GROUP) {
            b = unit / c.heads_kv;
            head = (unit % c.heads_kv) * G + v.head_in_unit;
          } else {
            b = unit / c.heads_q;
            const int rr = unit % c.heads_q;
            head = (rr / G) * G + plan.group_head_by_rank[rr % G];
          }
          const size_t acc = (size_t(b) * c.heads_q + head) * h.num_q_tiles + v.q_tile;
          expected[acc * h.num_kv_tiles + v.dq_rank] = (ticket << 32) | uint32_t(vi);
        }
      }
    }
  }
  size_t mismatches = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i] != expected[i] && mismatches++ < 5) {
      ADD_FAILURE() << "order log [acc " << i / h.num_kv_tiles << ", rank " << i % h.num_kv_tiles << "]: executed "
                    << (log[i] >> 32) << "/" << (log[i] & 0xffffffff) << ", plan " << (expected[i] >> 32) << "/"
                    << (expected[i] & 0xffffffff);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "executed dQ accumulation order differs from the plan";
}

// ---- correctness against the reference ----------------------------------------------------------------

struct AccuracyParam {
  Case c;
  const char* schedule;
  int gqa_mode;
  int deterministic;
};
// Test names already spell the case out; keep ctest's listing free of raw parameter bytes.
void PrintTo(const AccuracyParam& p, std::ostream* os) { *os << p.schedule; }

class BackwardAccuracy : public ::testing::TestWithParam<AccuracyParam> {};

TEST_P(BackwardAccuracy, MatchesReference) {
  SKIP_WITHOUT_GPU();
  const AccuracyParam& ap = GetParam();
  Problem pr(ap.c, 1234);
  BwdRun r(pr);
  const std::string err = r.setup(ap.schedule, 0, ap.gqa_mode);
  ASSERT_EQ(err, "");
  ASSERT_EQ(r.run(ap.deterministic), "");
  expect_close(r, ap.c.name() + "/" + ap.schedule + (ap.deterministic ? "/det" : "/nondet") +
                      (ap.gqa_mode == DASH_GQA_PACK_GROUP ? "/pack" : ""));
}

std::vector<AccuracyParam> accuracy_params() {
  std::vector<AccuracyParam> out;
  for (const dash::test::KernelRow& row : dash::test::backward_rows()) {
    const int d = row.head_dim, dv = row.head_dim_v == row.head_dim ? 0 : row.head_dim_v;
    for (dash_mask_kind m : {DASH_MASK_FULL, DASH_MASK_CAUSAL}) {
      for (auto [sq, sk] : {std::pair{1, 1}, {2, 2}, {1, 2}, {2, 1}, {113, 113}, {127, 129}, {129, 127}, {1000, 1000},
                            {64, 300}, {300, 64}}) {
        const int batch = sq >= 1000 ? 1 : 2;
        out.push_back({{batch, 2, 2, sq, sk, d, m, dv}, "auto", DASH_GQA_SPLIT_HEADS, 1});
      }
      out.push_back({{1, 2, 2, 257, 257, d, m, dv}, "auto", DASH_GQA_SPLIT_HEADS, 0});  // ordered (<= 4 KV tiles)
      out.push_back({{1, 2, 2, 1000, 1000, d, m, dv}, "auto", DASH_GQA_SPLIT_HEADS, 0});  // unordered adds
      out.push_back({{1, 8, 2, 200, 200, d, m, dv}, "auto", DASH_GQA_SPLIT_HEADS, 1});  // GQA 8/2 split
      out.push_back({{1, 8, 2, 200, 200, d, m, dv}, "auto", DASH_GQA_PACK_GROUP, 1});   // GQA 8/2 packed
      out.push_back({{1, 4, 1, 150, 150, d, m, dv}, "auto", DASH_GQA_SPLIT_HEADS, 1});  // MQA
      out.push_back({{1, 4, 1, 150, 150, d, m, dv}, "auto", DASH_GQA_SPLIT_HEADS, 0});  // MQA non-det
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardAccuracy, ::testing::ValuesIn(accuracy_params()),
                         [](const ::testing::TestParamInfo<AccuracyParam>& info) {
                           std::string n = info.param.c.name() + "_" + info.param.schedule +
                                           (info.param.deterministic ? "_det" : "_nondet") +
                                           (info.param.gqa_mode == DASH_GQA_PACK_GROUP ? "_pack" : "");
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// ---- determinism and executed order, every schedule ---------------------------------------------------

struct ScheduleParam {
  Case c;
  const char* schedule;
  int gqa_mode;
};
void PrintTo(const ScheduleParam& p, std::ostream* os) { *os << p.schedule; }
class BackwardDeterminism : public ::testing::TestWithParam<ScheduleParam> {};

TEST_P(BackwardDeterminism, BitwiseAcrossRunsAndOrderFollowsPlan) {
  SKIP_WITHOUT_GPU();
  const ScheduleParam& sp = GetParam();
  Problem pr(sp.c, 99);
  BwdRun r(pr);
  const std::string err = r.setup(sp.schedule, 0, sp.gqa_mode);
  if (err.find("cannot") != std::string::npos) GTEST_SKIP() << err;  // planner not applicable to this shape
  ASSERT_EQ(err, "");
  const void* data = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(dash_plan_blob(r.plan, &data, &bytes), DASH_OK);
  const auto* header = static_cast<const dash_plan_header*>(data);
  const size_t log_entries = size_t(sp.c.batch) * sp.c.heads_q * header->num_q_tiles * header->num_kv_tiles;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&r.order_log), log_entries * 8), cudaSuccess);
  r.args.debug_order_log = r.order_log;

  std::vector<uint16_t> q0, k0, v0, q1, k1, v1;
  for (int run = 0; run < 5; ++run) {
    cudaMemset(r.order_log, 0xff, log_entries * 8);
    ASSERT_EQ(r.run(1), "") << "run " << run;
    if (run == 0) {
      r.download(q0, k0, v0);
      expect_close(r, sp.c.name() + "/" + sp.schedule);
      expect_order_matches_plan(r);
    } else {
      r.download(q1, k1, v1);
      EXPECT_TRUE(q0 == q1) << "dQ differs in run " << run;
      EXPECT_TRUE(k0 == k1) << "dK differs in run " << run;
      EXPECT_TRUE(v0 == v1) << "dV differs in run " << run;
    }
  }
}

std::vector<ScheduleParam> schedule_params() {
  std::vector<ScheduleParam> out;
  for (const char* s : {"ascending", "descending", "shift", "symmetric-shift", "auto"}) {
    out.push_back({{2, 2, 2, 1000, 1000, 64, DASH_MASK_CAUSAL}, s, DASH_GQA_SPLIT_HEADS});
    out.push_back({{1, 2, 2, 777, 777, 128, DASH_MASK_CAUSAL}, s, DASH_GQA_SPLIT_HEADS});
    out.push_back({{1, 2, 2, 640, 640, 128, DASH_MASK_FULL}, s, DASH_GQA_SPLIT_HEADS});
    out.push_back({{1, 8, 2, 300, 300, 128, DASH_MASK_CAUSAL}, s, DASH_GQA_SPLIT_HEADS});
    out.push_back({{1, 4, 2, 555, 555, 96, DASH_MASK_CAUSAL}, s, DASH_GQA_SPLIT_HEADS});
    // The column-split rows (64 x 64 tiles, one dQ staging buffer; one Q stage at 256).
    out.push_back({{1, 4, 2, 601, 601, 192, DASH_MASK_CAUSAL, 128}, s, DASH_GQA_SPLIT_HEADS});
    out.push_back({{1, 2, 2, 450, 450, 256, DASH_MASK_FULL}, s, DASH_GQA_SPLIT_HEADS});
    out.push_back({{1, 8, 2, 300, 300, 256, DASH_MASK_CAUSAL}, s, DASH_GQA_SPLIT_HEADS});
  }
  out.push_back({{1, 8, 2, 300, 300, 128, DASH_MASK_CAUSAL}, "ascending", DASH_GQA_PACK_GROUP});
  // Head dim 64, full mask, 34 KV tiles: shift chunks it and spaces its dQ chains 2 visits apart (rank_spacing 2), so
  // the deterministic mode runs the staggered kernel (its hand-off a visit late) on this plan.
  out.push_back({{1, 1, 1, 4352, 4352, 64, DASH_MASK_FULL}, "shift", DASH_GQA_SPLIT_HEADS});
  // Head dim 64, causal, 36 KV tiles (18 pairs, 2 per item): symmetric shift deals its pairs out in blocks and spaces
  // its dQ chains 2 visits apart, so the deterministic mode runs the staggered kernel here too.
  out.push_back({{1, 1, 1, 4608, 4608, 64, DASH_MASK_CAUSAL}, "symmetric-shift", DASH_GQA_SPLIT_HEADS});
  // Templates cut into slots (plan_format.h, "Slots"), claimed slot by slot across a group of units: 6 units of 2
  // slots of 9 items (the blocks above), and split-head GQA (dK/dV adds in group order across units) at head dim 128,
  // 32 KV tiles dealt 2 per item under the full mask (2 slots of 16).
  out.push_back({{1, 6, 6, 4608, 4608, 64, DASH_MASK_CAUSAL}, "symmetric-shift", DASH_GQA_SPLIT_HEADS});
  out.push_back({{1, 4, 2, 4096, 4096, 128, DASH_MASK_FULL}, "shift", DASH_GQA_SPLIT_HEADS});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Schedules, BackwardDeterminism, ::testing::ValuesIn(schedule_params()),
                         [](const ::testing::TestParamInfo<ScheduleParam>& info) {
                           std::string n = info.param.c.name() + "_" + info.param.schedule +
                                           (info.param.gqa_mode == DASH_GQA_PACK_GROUP ? "_pack" : "");
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// A log of `entries` (accumulator, rank) slots, unwritten (-1), for expect_order_matches_plan.
cudaError_t attach_order_log(BwdRun& r, size_t entries) {
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&r.order_log), entries * 8); e != cudaSuccess) return e;
  r.args.debug_order_log = r.order_log;
  return cudaMemset(r.order_log, 0xff, entries * 8);
}

// Two deterministic runs: the first executes exactly the plan's dQ order, the second gives the first's bits.
// `after_first` runs between them.
void expect_plan_order_and_repeat(BwdRun& r, const std::string& what, const std::function<void()>& after_first = {}) {
  std::vector<uint16_t> q0, k0, v0, q1, k1, v1;
  ASSERT_EQ(r.run(1), "") << what;
  if (after_first) after_first();
  r.download(q0, k0, v0);
  expect_order_matches_plan(r);
  ASSERT_EQ(r.run(1), "") << what;
  r.download(q1, k1, v1);
  EXPECT_TRUE(q0 == q1 && k0 == k1 && v0 == v1) << what << ": gradients differ between two runs";
}

// A plan whose tables fill 2 MB and more is uploaded through the pinned staging buffers in 2 MB chunks
// (bwd/plan_handle.cpp), every smaller one straight from its tables: the kernel must execute exactly the plan's order
// from the staged copy too. 49152 tokens, full mask: 768 x 384 tiles, 2.4 MB of visits over two chunks. No float64
// reference at this length (the order log checks every visit the kernel read); two runs bitwise equal.
TEST(Backward, StagedPlanUploadIsExecutedInThePlansOrder) {
  SKIP_WITHOUT_GPU();
  const Problem pr({1, 1, 1, 49152, 49152, 128, DASH_MASK_FULL}, 5, /*with_reference=*/false);
  for (const char* schedule : {"shift", "ascending"}) {
    BwdRun r(pr);
    ASSERT_EQ(r.setup(schedule, 0, DASH_GQA_SPLIT_HEADS), "");
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(dash_plan_blob(r.plan, &data, &bytes), DASH_OK);
    const auto* header = static_cast<const dash_plan_header*>(data);
    ASSERT_GE(size_t(header->visits_per_unit) * sizeof(dash_visit), size_t(2) << 20) << "not the staged path";
    ASSERT_EQ(attach_order_log(r, size_t(header->num_q_tiles) * header->num_kv_tiles), cudaSuccess);
    expect_plan_order_and_repeat(r, schedule);
  }
}

// dash_plan_create_async: the backward is queued while the template's tables are still being written, so its stream
// copies them in (bwd/plan_handle.cpp, "Tables still being written"). The builds are made half a second slower
// (DASH_ATTN_TEST_TEMPLATE_BUILDS=slow), so that this path is taken whatever the host's speed. 49280 tokens, full mask,
// one head: 770 x 385 tiles at head dim 128, 2.4 MB of visits in two 2 MB chunks. The kernel must execute exactly the
// plan's order (the order log against dash_plan_blob's validated tables), bitwise the same twice.
TEST(Backward, AsyncPlanTablesCopiedOnTheStreamAreExecutedInThePlansOrder) {
  SKIP_WITHOUT_GPU();
  constexpr int kTokens = 49280;
  const Problem pr({1, 1, 1, kTokens, kTokens, 128, DASH_MASK_FULL}, 11, /*with_reference=*/false);
  for (const char* schedule : {"shift", "ascending"}) {
    BwdRun r(pr);
    setenv("DASH_ATTN_TEST_TEMPLATE_BUILDS", "slow", 1);  // read by the build, which starts after this
    const std::string made = r.setup(schedule, 0, DASH_GQA_SPLIT_HEADS, /*async=*/true);
    ASSERT_EQ(made, "") << schedule;
    const dash::TileShape tiles = dash::default_backward_tiles(128);  // (dash_plan_blob would wait for the tables)
    const size_t log_entries = size_t((kTokens + tiles.block_m - 1) / tiles.block_m) *
                               ((kTokens + tiles.block_n - 1) / tiles.block_n);
    ASSERT_EQ(attach_order_log(r, log_entries), cudaSuccess);
    expect_plan_order_and_repeat(r, schedule, [&] {
      int32_t tables = -1;
      ASSERT_EQ(dash_plan_tables(r.plan, &tables), DASH_OK);
      EXPECT_EQ(tables, DASH_PLAN_TABLES_COPY_QUEUED)
          << schedule << ": the tables were written before the backward was queued; the stream's copy went untested";
      EXPECT_EQ(dash_plan_wait(r.plan), DASH_OK) << dash_last_error();
      unsetenv("DASH_ATTN_TEST_TEMPLATE_BUILDS");  // the build has ended: dash_plan_wait returned
    });
  }
}

// A template whose build fails after its backward was queued (a planner bug that validation catches; injected here,
// half a second after the plan was made) stops the stream with a trap instead of running on unvalidated tables, and
// says why on stderr and from dash_plan_wait. A trap ends the CUDA context, so the test runs in a child process.
TEST(BackwardDeathTest, AFailedBuildAfterItsBackwardWasQueuedStopsTheStream) {
  SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts afresh: no CUDA context inherited by fork
  EXPECT_EXIT(
      {
        const Problem pr({1, 1, 1, 49408, 49408, 128, DASH_MASK_FULL}, 13, /*with_reference=*/false);
        BwdRun r(pr);
        setenv("DASH_ATTN_TEST_TEMPLATE_BUILDS", "fail", 1);
        const bool made = r.setup("ascending", 0, DASH_GQA_SPLIT_HEADS, /*async=*/true).empty();
        // The trap may stop the stream while dash_bwd is still launching: its next launch then reports the CUDA error.
        // Either way not the build's own error, which would mean that the build had failed before the launch.
        const dash_status launched = made ? dash_bwd(&r.args, r.plan, 1, r.workspace, r.workspace_bytes, nullptr)
                                          : DASH_ERROR_INVALID_ARGUMENT;
        const std::string launch_error = dash_last_error();
        const bool queued = made && launch_error.find("on purpose") == std::string::npos;
        const bool stopped = queued && (launched != DASH_OK || cudaDeviceSynchronize() != cudaSuccess);
        const bool named = stopped && dash_plan_wait(r.plan) != DASH_OK &&
                           std::string(dash_last_error()).find("on purpose") != std::string::npos;
        std::fprintf(stderr, "made %d queued %d stopped %d named %d (launch: %s; wait: %s)\n", made, queued, stopped,
                     named, launch_error.c_str(), dash_last_error());
        std::_Exit(named ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "failed after its kernels were queued.*on purpose");
}

// The same failure known before the backward is queued: dash_plan_wait and dash_bwd return it (nothing launched).
TEST(Backward, AFailedBuildKnownBeforeTheBackwardIsReturned) {
  SKIP_WITHOUT_GPU();
  const Problem pr({1, 1, 1, 1337, 1337, 64, DASH_MASK_CAUSAL}, 17, /*with_reference=*/false);
  BwdRun r(pr);
  setenv("DASH_ATTN_TEST_TEMPLATE_BUILDS", "fail", 1);  // read by the build (no other is running: tests run in turn)
  const std::string made = r.setup("descending", 0, DASH_GQA_SPLIT_HEADS, /*async=*/true);
  const dash_status waited = made.empty() ? dash_plan_wait(r.plan) : DASH_OK;  // the build has ended when it returns
  unsetenv("DASH_ATTN_TEST_TEMPLATE_BUILDS");
  const std::string wait_error = dash_last_error();
  const std::string ran = made.empty() ? r.run(1) : "";
  ASSERT_EQ(made, "");
  EXPECT_NE(waited, DASH_OK);
  EXPECT_NE(wait_error.find("on purpose"), std::string::npos) << wait_error;
  EXPECT_NE(ran.find("on purpose"), std::string::npos) << ran;
}

TEST(Backward, SingleCtaAscendingCompletes) {
  SKIP_WITHOUT_GPU();
  Problem pr({1, 2, 2, 500, 500, 128, DASH_MASK_CAUSAL}, 7);
  BwdRun r(pr);
  ASSERT_EQ(r.setup("ascending", 1, DASH_GQA_SPLIT_HEADS), "");
  ASSERT_EQ(r.run(1), "");
  expect_close(r, "single-cta/ascending");
}

// ---- the kernel table's rows ------------------------------------------------------------------------------

// The accuracy suite sweeps backward_rows(): every row of the table has a backward kernel, and every one is swept.
TEST(BackwardRows, EveryRowHasABackwardAndIsSwept) {
  const std::vector<dash::test::KernelRow> rows = dash::test::kernel_rows();
  const std::vector<dash::test::KernelRow> swept = dash::test::backward_rows();
  EXPECT_EQ(swept.size(), rows.size());
  for (const dash::test::KernelRow& row : rows) EXPECT_TRUE(row.backward) << row.head_dim << "/" << row.head_dim_v;
}

// ---- argument checks (run without a GPU only as far as they touch no device) ----------------------------

TEST(BackwardArgs, PlanCreateRejectsBadSchedule) {
  SKIP_WITHOUT_GPU();
  dash_problem p = Case{1, 2, 2, 128, 128, 64, DASH_MASK_FULL}.problem();
  dash_plan_t plan = nullptr;
  EXPECT_EQ(dash_plan_create(&p, "no-such-schedule", 0, DASH_GQA_SPLIT_HEADS, &plan), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("schedule"), std::string::npos) << dash_last_error();
  EXPECT_EQ(plan, nullptr);
}

TEST(BackwardArgs, NullsAndMismatchesAreNamed) {
  SKIP_WITHOUT_GPU();
  Problem pr({1, 2, 2, 128, 128, 64, DASH_MASK_FULL}, 3);
  BwdRun r(pr);
  ASSERT_EQ(r.setup("ascending", 0, DASH_GQA_SPLIT_HEADS), "");
  dash_bwd_args a = r.args;
  a.dq.data = nullptr;
  EXPECT_EQ(dash_bwd(&a, r.plan, 1, r.workspace, r.workspace_bytes, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("dq.data"), std::string::npos) << dash_last_error();
  a = r.args;
  a.problem.seqlen_q = 129;
  EXPECT_EQ(dash_bwd(&a, r.plan, 1, r.workspace, r.workspace_bytes, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("problem"), std::string::npos) << dash_last_error();
  a = r.args;
  a.k.seq_stride = 100;
  EXPECT_EQ(dash_bwd(&a, r.plan, 1, r.workspace, r.workspace_bytes, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("k.seq_stride"), std::string::npos) << dash_last_error();
  EXPECT_EQ(dash_bwd(&r.args, r.plan, 1, r.workspace, r.workspace_bytes - 256, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("workspace_bytes"), std::string::npos) << dash_last_error();
  EXPECT_EQ(dash_bwd(&r.args, r.plan, 2, r.workspace, r.workspace_bytes, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("deterministic"), std::string::npos) << dash_last_error();
  EXPECT_EQ(dash_bwd_workspace_size(&r.args, r.plan, 2), 0u);
  EXPECT_NE(std::string(dash_last_error()).find("deterministic"), std::string::npos) << dash_last_error();
}

// Only a deterministic backward has turn counters: its workspace is the non-deterministic one plus one int32 per dQ
// accumulator and, for split-head GQA, one per dK/dV tile (each region 256-byte aligned; counts from the plan's
// header). A deterministic call refuses the non-deterministic size; a plan for non-deterministic backwards only
// has no deterministic size.
TEST(BackwardArgs, WorkspaceSizeFollowsTheMode) {
  SKIP_WITHOUT_GPU();
  auto region = [](size_t count) { return (count * 4 + 255) / 256 * 256; };
  for (const Case c : {Case{3, 4, 4, 300, 300, 64, DASH_MASK_CAUSAL}, Case{2, 8, 2, 200, 520, 128, DASH_MASK_FULL}}) {
    for (const int gqa : {int(DASH_GQA_SPLIT_HEADS), int(DASH_GQA_PACK_GROUP)}) {
      SCOPED_TRACE(c.name() + " gqa mode " + std::to_string(gqa));
      const Problem pr(c, 5, /*with_reference=*/false);
      BwdRun r(pr);
      ASSERT_EQ(r.setup("shift", 0, gqa), "");
      const void* data = nullptr;
      size_t bytes = 0;
      ASSERT_EQ(dash_plan_blob(r.plan, &data, &bytes), DASH_OK);
      const dash_plan_header h = dash::Plan::from_blob(static_cast<const uint8_t*>(data), bytes).header;
      const bool split = gqa == DASH_GQA_SPLIT_HEADS && c.heads_q != c.heads_kv;
      const size_t counters = region(size_t(c.batch) * c.heads_q * h.num_q_tiles) +
                              (split ? region(size_t(c.batch) * c.heads_kv * h.num_kv_tiles) : 0);
      const size_t nondet = dash_bwd_workspace_size(&r.args, r.plan, 0);
      const size_t det = dash_bwd_workspace_size(&r.args, r.plan, 1);
      ASSERT_GT(nondet, 0u) << dash_last_error();
      EXPECT_EQ(det, nondet + counters);
      EXPECT_EQ(dash_bwd(&r.args, r.plan, 1, r.workspace, nondet, nullptr), DASH_ERROR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(dash_last_error()).find("workspace_bytes"), std::string::npos) << dash_last_error();
    }
  }
  const Problem gqa(Case{2, 8, 2, 256, 256, 128, DASH_MASK_CAUSAL}, 6, /*with_reference=*/false);
  BwdRun r(gqa);
  ASSERT_EQ(r.setup("auto", 0, DASH_GQA_AUTO_NONDETERMINISTIC), "");
  EXPECT_GT(dash_bwd_workspace_size(&r.args, r.plan, 0), 0u) << dash_last_error();
  EXPECT_EQ(dash_bwd_workspace_size(&r.args, r.plan, 1), 0u);
  EXPECT_NE(std::string(dash_last_error()).find("DASH_GQA_AUTO_NONDETERMINISTIC"), std::string::npos)
      << dash_last_error();
}

// DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED (schedule auto, at most 4 KV tiles): the non-deterministic mode runs the
// ordered adds. Its workspace is the deterministic one; it matches the float64 reference, executes the plan's dQ
// order, and gives the deterministic mode's bits, over repeated runs of both modes. Where the flag is absent (a named
// schedule, or more KV tiles) the non-deterministic workspace has no turn counters.
TEST(Backward, NondeterministicRunsOfAnOrderedPlanAreTheDeterministicRun) {
  SKIP_WITHOUT_GPU();
  struct Flagged {
    Case c;
    const char* schedule;
    bool ordered;
  };
  for (const Flagged f : {Flagged{{2, 2, 2, 512, 512, 128, DASH_MASK_CAUSAL}, "auto", true},
                          Flagged{{3, 2, 2, 300, 300, 64, DASH_MASK_FULL}, "auto", true},
                          Flagged{{2, 8, 2, 200, 250, 128, DASH_MASK_CAUSAL}, "auto", true},
                          Flagged{{1, 2, 2, 1, 2, 96, DASH_MASK_CAUSAL}, "auto", true},
                          Flagged{{2, 2, 2, 512, 512, 128, DASH_MASK_CAUSAL}, "shift", false},
                          Flagged{{1, 2, 2, 700, 700, 128, DASH_MASK_CAUSAL}, "auto", false}}) {
    const std::string what = f.c.name() + "/" + f.schedule;
    SCOPED_TRACE(what);
    const Problem pr(f.c, 31);
    BwdRun r(pr);
    ASSERT_EQ(r.setup(f.schedule, 0, DASH_GQA_SPLIT_HEADS), "");
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(dash_plan_blob(r.plan, &data, &bytes), DASH_OK);
    const auto* header = static_cast<const dash_plan_header*>(data);
    ASSERT_EQ(bool(header->flags & DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED), f.ordered) << dash_plan_note(r.plan);
    const size_t nondet = dash_bwd_workspace_size(&r.args, r.plan, 0);
    const size_t det = dash_bwd_workspace_size(&r.args, r.plan, 1);
    if (f.ordered) {
      EXPECT_EQ(nondet, det);
    } else {
      EXPECT_LT(nondet, det);
      continue;  // the unordered mode: BackwardAccuracy's non-deterministic rows
    }
    const size_t log_entries = size_t(f.c.batch) * f.c.heads_q * header->num_q_tiles * header->num_kv_tiles;
    ASSERT_EQ(attach_order_log(r, log_entries), cudaSuccess);
    std::vector<uint16_t> q0, k0, v0, q1, k1, v1;
    for (int run = 0; run < 4; ++run) {
      const int deterministic = run % 2 == 0 ? 0 : 1;
      ASSERT_EQ(cudaMemset(r.order_log, 0xff, log_entries * 8), cudaSuccess);
      ASSERT_EQ(r.run(deterministic), "") << "run " << run;
      if (run == 0) {
        r.download(q0, k0, v0);
        expect_close(r, what + "/nondet");
        expect_order_matches_plan(r);
      } else {
        r.download(q1, k1, v1);
        EXPECT_TRUE(q0 == q1 && k0 == k1 && v0 == v1) << "run " << run << (deterministic ? " (det)" : " (nondet)")
                                                      << ": gradients differ from the first non-deterministic run";
      }
    }
  }
}

}  // namespace
