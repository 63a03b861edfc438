// SPDX-License-Identifier: Apache-2.0
// test_varlen.cpp — packed variable-length sequences on the GPU (dash_fwd_varlen, dash_plan_create_varlen, dash_bwd
// on a varlen plan) against a float64 reference computed per sequence: forward O / LSE and backward dQ / dK / dV for
// awkward length mixes (0, 1, 2, 127, 129, seqlen_q != seqlen_k, a sequence without keys, one without queries),
// full / causal / window masks, GQA split and packed, head dims 64, 96 and 128 (and the forward alone at the rows
// without a backward kernel, 256 and 192 / 128, v with its own head dim); bitwise repeats for every schedule; pack
// invariance (a sequence's bits alone equal its bits in a permuted pack with neighbours, even when the neighbours
// hold NaN); the executed dQ order equals the plan's; the non-deterministic mode within tolerance. Skips, saying so,
// without a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu_test_support.hpp"

#include "dash/attention_mask.hpp"
#include "dash/dash_attn.h"
#include "dash/plan.hpp"
#include "dash/varlen.hpp"

namespace {

using dash::test::from_bf16;
using dash::test::to_bf16;

#define SKIP_WITHOUT_GPU() DASH_SKIP_WITHOUT_GPU("varlen")

struct PackCase {
  std::string name;
  std::vector<int> seqlens_q, seqlens_k;
  int heads_q, heads_kv, head_dim;
  dash_mask_kind mask;
  int window_left = -1, window_right = -1;
  int head_dim_v = 0;  // of v, o, dout, dv; 0: head_dim
  int value_head_dim() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
};

// gtest prints the case by its name (not its bytes).
void PrintTo(const PackCase& c, std::ostream* os) { *os << c.name; }

std::vector<int32_t> cumulative(const std::vector<int>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) cu[i + 1] = cu[i] + lengths[i];
  return cu;
}

// Host data of a pack: bf16 inputs, the float64 reference (its O rounded to bf16 and its LSE, which the backward
// takes as inputs), and reference gradients.
struct HostPack {
  PackCase c;
  std::vector<int32_t> cu_q, cu_k;
  float scale;
  std::vector<uint16_t> q, k, v, dout, o;
  std::vector<float> lse;  // [heads_q, total_q]
  std::vector<double> o_ref, dq, dk, dv;

  int total_q() const { return cu_q.back(); }
  int total_k() const { return cu_k.back(); }
  // Element of q / dq (qi), k / dk (ki): head_dim columns; of o / dout (oi), v / dv (vi): head_dim_v columns.
  size_t qi(int row, int h, int d) const { return (size_t(row) * c.heads_q + h) * c.head_dim + d; }
  size_t ki(int row, int h, int d) const { return (size_t(row) * c.heads_kv + h) * c.head_dim + d; }
  size_t oi(int row, int h, int d) const { return (size_t(row) * c.heads_q + h) * c.value_head_dim() + d; }
  size_t vi(int row, int h, int d) const { return (size_t(row) * c.heads_kv + h) * c.value_head_dim() + d; }

  dash_problem problem() const {
    dash_problem p{};
    p.batch = int32_t(c.seqlens_q.size());
    p.heads_q = c.heads_q;
    p.heads_kv = c.heads_kv;
    p.head_dim = c.head_dim;
    p.head_dim_v = c.head_dim_v;
    p.mask_kind = c.mask;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    return p;
  }

  HostPack(const PackCase& pc, uint32_t seed) : c(pc), cu_q(cumulative(pc.seqlens_q)), cu_k(cumulative(pc.seqlens_k)) {
    scale = float(1.0 / std::sqrt(double(c.head_dim)));
    std::mt19937 rng(seed);
    auto fill = [&](std::vector<uint16_t>& t, size_t n) { dash::test::fill_uniform_bf16(t, n, rng); };
    fill(q, size_t(total_q()) * c.heads_q * c.head_dim);
    fill(k, size_t(total_k()) * c.heads_kv * c.head_dim);
    fill(v, size_t(total_k()) * c.heads_kv * c.value_head_dim());
    fill(dout, size_t(total_q()) * c.heads_q * c.value_head_dim());
    reference();
  }

  void reference() {
    const int D = c.head_dim, DV = c.value_head_dim(), G = c.heads_q / c.heads_kv;
    o.assign(dout.size(), 0);
    o_ref.assign(dout.size(), 0.0);
    lse.assign(size_t(c.heads_q) * total_q(), 0.f);
    dq.assign(q.size(), 0.0);
    dk.assign(k.size(), 0.0);
    dv.assign(v.size(), 0.0);
    for (size_t s = 0; s < c.seqlens_q.size(); ++s) {
      const int sq = c.seqlens_q[s], sk = c.seqlens_k[s], q0 = cu_q[s], k0 = cu_k[s];
      dash_problem p = problem();
      p.batch = 1;
      p.seqlen_q = sq;
      p.seqlen_k = sk;
      const dash::AttentionMask mask = dash::AttentionMask::of(p);
      std::vector<double> pr(std::max(sk, 1)), dp(std::max(sk, 1));
      for (int h = 0; h < c.heads_q; ++h) {
        const int hk = h / G;
        for (int i = 0; i < sq; ++i) {
          const int j0 = mask.key_begin(i), j1 = std::min(mask.key_end(i), sk);
          float& lse_out = lse[size_t(h) * total_q() + q0 + i];
          if (j1 <= j0) {
            lse_out = -std::numeric_limits<float>::infinity();
            continue;
          }
          double mx = -std::numeric_limits<double>::infinity();
          for (int j = j0; j < j1; ++j) {
            double acc = 0;
            for (int d = 0; d < D; ++d) acc += double(from_bf16(q[qi(q0 + i, h, d)])) * from_bf16(k[ki(k0 + j, hk, d)]);
            pr[j] = acc * scale;
            mx = std::max(mx, pr[j]);
          }
          double sum = 0;
          for (int j = j0; j < j1; ++j) sum += std::exp(pr[j] - mx);
          lse_out = float(mx + std::log(sum));
          for (int j = j0; j < j1; ++j) pr[j] = std::exp(pr[j] - double(lse_out));
          double delta = 0;
          for (int d = 0; d < DV; ++d) {
            double acc = 0;
            for (int j = j0; j < j1; ++j) acc += pr[j] * from_bf16(v[vi(k0 + j, hk, d)]);
            o_ref[oi(q0 + i, h, d)] = acc;
            o[oi(q0 + i, h, d)] = to_bf16(float(acc));
            delta += double(from_bf16(o[oi(q0 + i, h, d)])) * from_bf16(dout[oi(q0 + i, h, d)]);
          }
          for (int j = j0; j < j1; ++j) {
            double acc = 0;
            for (int d = 0; d < DV; ++d)
              acc += double(from_bf16(dout[oi(q0 + i, h, d)])) * from_bf16(v[vi(k0 + j, hk, d)]);
            dp[j] = acc;
          }
          for (int j = j0; j < j1; ++j) {
            const double ds = pr[j] * (dp[j] - delta);
            for (int d = 0; d < D; ++d) {
              dq[qi(q0 + i, h, d)] += scale * ds * from_bf16(k[ki(k0 + j, hk, d)]);
              dk[ki(k0 + j, hk, d)] += scale * ds * from_bf16(q[qi(q0 + i, h, d)]);
            }
            for (int d = 0; d < DV; ++d) dv[vi(k0 + j, hk, d)] += pr[j] * from_bf16(dout[oi(q0 + i, h, d)]);
          }
        }
      }
    }
  }
};

template <class T>
T* device_copy(const std::vector<T>& host, size_t at_least = 1) {
  T* ptr = nullptr;
  const size_t n = std::max(host.size(), at_least);
  cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T));
  if (!host.empty()) cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return ptr;
}

template <class T>
std::vector<T> host_copy(const T* ptr, size_t n) {
  std::vector<T> out(n);
  if (n > 0) cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
  return out;
}

dash_tensor packed(void* data, int heads, int dim) {
  return dash_tensor{data, 0, int64_t(heads) * dim, int64_t(dim)};
}

// One pack on the device: the forward's outputs and, for a schedule, the backward's.
struct DevicePack {
  const HostPack& h;
  dash_pack_t pack = nullptr;
  dash_plan_t plan = nullptr;
  uint16_t *q, *k, *v, *dout, *o_ref, *o, *dq, *dk, *dv;
  float *lse_ref, *lse;
  void* fwd_ws = nullptr;
  void* bwd_ws = nullptr;
  size_t bwd_ws_bytes = 0;
  dash_problem problem{};

  explicit DevicePack(const HostPack& hp) : h(hp) {
    q = device_copy(h.q);
    k = device_copy(h.k);
    v = device_copy(h.v);
    dout = device_copy(h.dout);
    o_ref = device_copy(h.o);
    lse_ref = device_copy(h.lse);
    o = device_copy(std::vector<uint16_t>(h.o.size()));
    lse = device_copy(std::vector<float>(h.lse.size()));
    dq = device_copy(std::vector<uint16_t>(h.q.size()));
    dk = device_copy(std::vector<uint16_t>(h.k.size()));
    dv = device_copy(std::vector<uint16_t>(h.v.size()));
    cudaMalloc(&fwd_ws, 16);
  }
  ~DevicePack() {
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)dout, (void*)o_ref, (void*)o, (void*)dq, (void*)dk, (void*)dv,
                    (void*)lse_ref, (void*)lse, fwd_ws, bwd_ws})
      cudaFree(p);
    dash_plan_destroy(plan);
    dash_pack_destroy(pack);
  }

  std::string create_pack() {
    const dash_problem p = h.problem();
    if (dash_pack_create(&p, h.cu_q.data(), h.cu_k.data(), &pack) != DASH_OK) {
      return std::string("dash_pack_create: ") + dash_last_error();
    }
    if (dash_pack_problem(pack, &problem) != DASH_OK) return std::string("dash_pack_problem: ") + dash_last_error();
    return "";
  }

  std::string forward() {
    dash_fwd_args a{};
    a.problem = problem;
    a.dtype = DASH_DTYPE_BF16;
    a.q = packed(q, h.c.heads_q, h.c.head_dim);
    a.k = packed(k, h.c.heads_kv, h.c.head_dim);
    a.v = packed(v, h.c.heads_kv, h.c.value_head_dim());
    a.o = packed(o, h.c.heads_q, h.c.value_head_dim());
    a.lse = lse;
    cudaMemset(o, 0xff, h.o.size() * 2);  // NaN: rows the kernel leaves unwritten show
    if (dash_fwd_varlen(&a, pack, fwd_ws, 16, nullptr) != DASH_OK) return std::string("dash_fwd_varlen: ") + dash_last_error();
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return std::string("forward: ") + cudaGetErrorString(e);
    return "";
  }

  dash_bwd_args bwd_args() const {
    dash_bwd_args a{};
    a.problem = problem;
    a.dtype = DASH_DTYPE_BF16;
    a.q = packed(q, h.c.heads_q, h.c.head_dim);
    a.k = packed(k, h.c.heads_kv, h.c.head_dim);
    a.v = packed(v, h.c.heads_kv, h.c.value_head_dim());
    a.o = packed(o_ref, h.c.heads_q, h.c.value_head_dim());
    a.dout = packed(dout, h.c.heads_q, h.c.value_head_dim());
    a.dq = packed(dq, h.c.heads_q, h.c.head_dim);
    a.dk = packed(dk, h.c.heads_kv, h.c.head_dim);
    a.dv = packed(dv, h.c.heads_kv, h.c.value_head_dim());
    a.lse = lse_ref;
    return a;
  }

  std::string make_plan(const char* schedule, int gqa_mode) {
    dash_plan_destroy(plan);
    plan = nullptr;
    if (dash_plan_create_varlen(pack, schedule, 0, gqa_mode, &plan) != DASH_OK) {
      return std::string("dash_plan_create_varlen: ") + dash_last_error();
    }
    const dash_bwd_args a = bwd_args();
    const size_t bytes = dash_bwd_workspace_size(&a, plan, 1);  // the larger mode; backward() uses the end of it
    if (bytes == 0) return std::string("dash_bwd_workspace_size: ") + dash_last_error();
    if (bytes > bwd_ws_bytes) {
      cudaFree(bwd_ws);
      cudaMalloc(&bwd_ws, bytes);
      bwd_ws_bytes = bytes;
    }
    cudaMemset(bwd_ws, 0x7f, bwd_ws_bytes);  // deterministic mode must not depend on the workspace's contents
    return "";
  }

  std::string backward(int deterministic) {
    cudaMemset(dq, 0xff, h.q.size() * 2);
    cudaMemset(dk, 0xff, h.k.size() * 2);
    cudaMemset(dv, 0xff, h.v.size() * 2);
    const dash_bwd_args a = bwd_args();
    // The mode's size at the end of the allocation: an access past the mode's layout leaves it (memcheck).
    const size_t bytes = dash_bwd_workspace_size(&a, plan, deterministic);
    if (bytes == 0 || bytes > bwd_ws_bytes) return std::string("dash_bwd_workspace_size: ") + dash_last_error();
    if (dash_bwd(&a, plan, deterministic, static_cast<char*>(bwd_ws) + (bwd_ws_bytes - bytes), bytes, nullptr) !=
        DASH_OK) {
      return std::string("dash_bwd: ") + dash_last_error();
    }
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return std::string("backward: ") + cudaGetErrorString(e);
    return "";
  }

  struct Grads {
    std::vector<uint16_t> dq, dk, dv;
    bool operator==(const Grads& o) const { return dq == o.dq && dk == o.dk && dv == o.dv; }
  };
  Grads grads() const {
    return {host_copy(dq, h.q.size()), host_copy(dk, h.k.size()), host_copy(dv, h.v.size())};
  }
};

// ||out - ref|| / ||ref||; any NaN fails.
void expect_close(const std::vector<uint16_t>& out, const std::vector<double>& ref, double tolerance,
                  const std::string& what) {
  double num = 0, den = 0;
  bool nan = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const double x = from_bf16(out[i]);
    nan |= std::isnan(x);
    num += (x - ref[i]) * (x - ref[i]);
    den += ref[i] * ref[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  EXPECT_FALSE(nan) << what << ": NaN (an unwritten or wrong element)";
  EXPECT_LT(rel, tolerance) << what;
}

const std::vector<PackCase>& cases() {
  static const std::vector<PackCase> all = {
      {"mix_d128_causal", {0, 1, 2, 127, 129, 300}, {0, 1, 2, 127, 129, 300}, 4, 2, 128, DASH_MASK_CAUSAL},
      {"mix_d64_full", {1, 129, 2, 300, 127}, {1, 129, 2, 300, 127}, 2, 2, 64, DASH_MASK_FULL},
      {"uneven_d128_causal", {5, 200, 64, 1, 130}, {300, 100, 64, 7, 130}, 2, 1, 128, DASH_MASK_CAUSAL},
      {"uneven_d64_full", {70, 3, 257}, {2, 190, 129}, 4, 1, 64, DASH_MASK_FULL},
      {"no_keys_no_queries_d128", {40, 0, 150, 33}, {0, 60, 150, 90}, 2, 2, 128, DASH_MASK_CAUSAL},
      {"window_d64", {300, 31, 200}, {300, 40, 260}, 2, 2, 64, DASH_MASK_WINDOW, 64, 0},
      {"single_d128_full", {1000}, {1000}, 2, 2, 128, DASH_MASK_FULL},
      {"mix_d96_causal", {0, 1, 2, 127, 129, 300}, {0, 1, 2, 127, 129, 300}, 4, 2, 96, DASH_MASK_CAUSAL},
      {"window_d96", {300, 31, 200}, {300, 40, 260}, 2, 1, 96, DASH_MASK_WINDOW, 50, 20},
      // The column-split rows: awkward lengths (0, 1, 2, tile edges of 64), GQA, a window.
      {"mix_d192v128_causal", {0, 1, 2, 63, 65, 300}, {3, 1, 2, 64, 65, 260}, 4, 2, 192, DASH_MASK_CAUSAL, -1, -1, 128},
      {"mix_d256_full", {1, 65, 2, 300, 127}, {1, 65, 2, 300, 127}, 4, 2, 256, DASH_MASK_FULL},
      {"window_d256", {300, 31, 200}, {300, 40, 260}, 2, 1, 256, DASH_MASK_WINDOW, 50, 20},
  };
  return all;
}

// The forward of a pack against the float64 reference: O within 1e-2 (relative L2; bf16 output), LSE within 2e-3,
// -inf exactly for rows without keys.
void check_forward(const PackCase& c) {
  const HostPack h(c, 7);
  DevicePack d(h);
  ASSERT_EQ(d.create_pack(), "");
  ASSERT_EQ(d.forward(), "");
  expect_close(host_copy(d.o, h.o.size()), h.o_ref, 1e-2, "O");
  const std::vector<float> lse = host_copy(d.lse, h.lse.size());
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(h.lse[i])) {
      ASSERT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "LSE[" << i << "] of a row without keys: " << lse[i];
    } else {
      ASSERT_NEAR(lse[i], h.lse[i], 2e-3 * std::max(1.f, std::abs(h.lse[i]))) << "LSE[" << i << "]";
    }
  }
}

class VarlenGpu : public ::testing::TestWithParam<PackCase> {};

TEST_P(VarlenGpu, ForwardMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  check_forward(GetParam());
}

TEST_P(VarlenGpu, BackwardMatchesFloat64AndRepeatsBitwise) {
  SKIP_WITHOUT_GPU();
  const HostPack h(GetParam(), 11);
  DevicePack d(h);
  ASSERT_EQ(d.create_pack(), "");
  struct Mode {
    const char* schedule;
    int gqa;
  };
  for (const Mode m : {Mode{"auto", DASH_GQA_AUTO}, Mode{"ascending", DASH_GQA_SPLIT_HEADS},
                       Mode{"descending", DASH_GQA_PACK_GROUP}, Mode{"shift", DASH_GQA_SPLIT_HEADS},
                       Mode{"symmetric-shift", DASH_GQA_AUTO}}) {
    const std::string what = std::string(m.schedule) + "/gqa" + std::to_string(m.gqa);
    ASSERT_EQ(d.make_plan(m.schedule, m.gqa), "") << what;
    ASSERT_EQ(d.backward(1), "") << what;
    const DevicePack::Grads first = d.grads();
    expect_close(first.dq, h.dq, 2e-2, what + " dQ");
    expect_close(first.dk, h.dk, 2e-2, what + " dK");
    expect_close(first.dv, h.dv, 2e-2, what + " dV");
    for (int run = 0; run < 2; ++run) {
      ASSERT_EQ(d.backward(1), "") << what;
      ASSERT_TRUE(d.grads() == first) << what << ": deterministic gradients differ between runs";
    }
    ASSERT_EQ(d.backward(0), "") << what;
    const DevicePack::Grads nondet = d.grads();
    expect_close(nondet.dq, h.dq, 2e-2, what + " non-deterministic dQ");
    expect_close(nondet.dk, h.dk, 2e-2, what + " non-deterministic dK");
    expect_close(nondet.dv, h.dv, 2e-2, what + " non-deterministic dV");
  }
}

INSTANTIATE_TEST_SUITE_P(Packs, VarlenGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<PackCase>& info) { return info.param.name; });

// A sequence's rows of the outputs, for pack invariance.
struct SequenceBits {
  std::vector<uint16_t> o, dq, dk, dv;
  std::vector<float> lse;
  bool operator==(const SequenceBits& other) const {
    return o == other.o && dq == other.dq && dk == other.dk && dv == other.dv &&
           std::memcmp(lse.data(), other.lse.data(), lse.size() * 4) == 0;
  }
};

SequenceBits bits_of(const DevicePack& d, const HostPack& h, int s) {
  const int hq = h.c.heads_q, hkv = h.c.heads_kv, D = h.c.head_dim, DV = h.c.value_head_dim();
  auto rows = [&](const uint16_t* ptr, int first, int count, int heads, int width) {
    return host_copy(ptr + size_t(first) * heads * width, size_t(count) * heads * width);
  };
  SequenceBits b;
  const int q0 = h.cu_q[s], sq = h.c.seqlens_q[s], k0 = h.cu_k[s], sk = h.c.seqlens_k[s];
  b.o = rows(d.o, q0, sq, hq, DV);
  b.dq = rows(d.dq, q0, sq, hq, D);
  b.dk = rows(d.dk, k0, sk, hkv, D);
  b.dv = rows(d.dv, k0, sk, hkv, DV);
  for (int head = 0; head < hq; ++head) {
    const std::vector<float> part = host_copy(d.lse + size_t(head) * h.total_q() + q0, size_t(sq));
    b.lse.insert(b.lse.end(), part.begin(), part.end());
  }
  return b;
}

// Packs `lengths` (q and k equal) with the sequence of index `target` given the same values in every pack.
TEST(VarlenGpuInvariance, SequenceBitsDoNotDependOnThePack) {
  SKIP_WITHOUT_GPU();
  for (const int head_dim : dash::test::backward_head_dims()) {
    for (const dash_mask_kind mask : {DASH_MASK_CAUSAL, DASH_MASK_FULL}) {
      const std::string what = "d" + std::to_string(head_dim) + (mask == DASH_MASK_CAUSAL ? " causal" : " full");
      // The target sequence (333 tokens) alone, then second in a pack, then last in a longer one with NaN
      // neighbours. The values of a sequence depend only on (its lengths, the seed), so the target is identical.
      PackCase alone{"alone", {333}, {333}, 4, 2, head_dim, mask};
      PackCase second{"second", {100, 333, 7}, {100, 333, 7}, 4, 2, head_dim, mask};
      PackCase last{"last", {500, 1, 129, 333}, {500, 1, 129, 333}, 4, 2, head_dim, mask};
      HostPack h_alone(alone, 3), h_second(second, 5), h_last(last, 9);
      // Give the target the same values everywhere: copy its rows from the lone pack.
      auto implant = [&](HostPack& h, int s) {
        const int hq = h.c.heads_q, hkv = h.c.heads_kv, D = h.c.head_dim;
        std::copy(h_alone.q.begin(), h_alone.q.end(), h.q.begin() + size_t(h.cu_q[s]) * hq * D);
        std::copy(h_alone.dout.begin(), h_alone.dout.end(), h.dout.begin() + size_t(h.cu_q[s]) * hq * D);
        std::copy(h_alone.k.begin(), h_alone.k.end(), h.k.begin() + size_t(h.cu_k[s]) * hkv * D);
        std::copy(h_alone.v.begin(), h_alone.v.end(), h.v.begin() + size_t(h.cu_k[s]) * hkv * D);
        h.reference();
      };
      implant(h_second, 1);
      implant(h_last, 3);
      // NaN in every neighbour of the last pack (after the reference: its O / LSE inputs stay the neighbours'
      // NaN-free values, which the target never reads anyway).
      for (int s = 0; s < 3; ++s) {
        const int hq = h_last.c.heads_q, hkv = h_last.c.heads_kv, D = h_last.c.head_dim;
        std::fill(h_last.q.begin() + size_t(h_last.cu_q[s]) * hq * D, h_last.q.begin() + size_t(h_last.cu_q[s + 1]) * hq * D,
                  uint16_t(0x7fc0));
        std::fill(h_last.k.begin() + size_t(h_last.cu_k[s]) * hkv * D,
                  h_last.k.begin() + size_t(h_last.cu_k[s + 1]) * hkv * D, uint16_t(0x7fc0));
        std::fill(h_last.v.begin() + size_t(h_last.cu_k[s]) * hkv * D,
                  h_last.v.begin() + size_t(h_last.cu_k[s + 1]) * hkv * D, uint16_t(0x7fc0));
      }
      for (const char* schedule : {"auto", "shift", "symmetric-shift", "descending"}) {
        std::vector<SequenceBits> results;
        for (auto [h, s] : {std::pair<HostPack*, int>{&h_alone, 0}, {&h_second, 1}, {&h_last, 3}}) {
          DevicePack d(*h);
          ASSERT_EQ(d.create_pack(), "") << what;
          ASSERT_EQ(d.forward(), "") << what << " " << h->c.name;
          ASSERT_EQ(d.make_plan(schedule, DASH_GQA_AUTO), "") << what << " " << schedule;
          ASSERT_EQ(d.backward(1), "") << what << " " << h->c.name << " " << schedule;
          results.push_back(bits_of(d, *h, s));
        }
        EXPECT_TRUE(results[0] == results[1]) << what << " " << schedule << ": bits alone != bits second in a pack";
        EXPECT_TRUE(results[0] == results[2]) << what << " " << schedule
                                              << ": bits alone != bits last in a pack of NaN neighbours";
      }
    }
  }
}

// The executed dQ order of a varlen plan (the kernel's debug order log) equals the plan's: each sequence's template's
// ranks, with the sequence's tickets and global Q tiles (dash_attn.h, dash_plan_create_varlen).
TEST(VarlenGpuOrder, ExecutedDqOrderIsThePlans) {
  SKIP_WITHOUT_GPU();
  int32_t sms = 0;
  ASSERT_EQ(dash_usable_sms(&sms), DASH_OK);
  for (const PackCase& pc : {PackCase{"order_causal", {300, 1, 129, 0, 77}, {300, 1, 129, 40, 200}, 4, 2, 128,
                                      DASH_MASK_CAUSAL},
                             PackCase{"order_full", {200, 64, 3}, {130, 64, 257}, 4, 1, 64, DASH_MASK_FULL},
                             // symmetric shift cuts the 4608-token sequence's template into slots (plan_format.h)
                             PackCase{"order_slots", {4608, 100}, {4608, 100}, 4, 2, 64, DASH_MASK_CAUSAL}}) {
    const HostPack h(pc, 21);
    DevicePack d(h);
    ASSERT_EQ(d.create_pack(), "");
    const dash::Pack pack = dash::build_pack(dash::Problem::from_c(h.problem()), h.cu_q.data(), h.cu_k.data());
    for (const char* schedule : {"auto", "shift", "symmetric-shift", "ascending"}) {
      for (const int gqa : {int(DASH_GQA_SPLIT_HEADS), int(DASH_GQA_PACK_GROUP)}) {
        const std::string what = pc.name + " " + schedule + " gqa" + std::to_string(gqa);
        ASSERT_EQ(d.make_plan(schedule, gqa), "") << what;
        const dash::VarlenPlan vp =
            dash::plan_for_pack(pack, dash::Schedule::parse(schedule), sms, static_cast<dash::GqaMode>(gqa));
        const size_t entries = size_t(h.c.heads_q) * vp.total_q_tiles * vp.total_kv_tiles;
        int64_t* log = nullptr;
        ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&log), entries * 8), cudaSuccess);
        cudaMemset(log, 0xff, entries * 8);
        dash_bwd_args a = d.bwd_args();
        a.debug_order_log = log;
        ASSERT_EQ(dash_bwd(&a, d.plan, 1, d.bwd_ws, d.bwd_ws_bytes, nullptr), DASH_OK) << what << dash_last_error();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
        const std::vector<int64_t> executed = host_copy(log, entries);
        cudaFree(log);
        std::vector<int64_t> expected(entries, -1);
        const int G = h.c.heads_q / h.c.heads_kv;
        for (const dash_pack_sequence& seq : vp.sequences) {
          if (seq.template_index < 0) continue;
          const dash::BoundPlan& bound = vp.templates[size_t(seq.template_index)];
          const dash::Plan& t = bound.unit->plan;
          const dash_plan_header& th = bound.header;
          for (int64_t local = 0; local < int64_t(th.num_units) * th.items_per_unit; ++local) {
            const int64_t ticket = seq.ticket_begin + local;
            // The template's claim order (slot by slot across the sequence's units where it is cut into slots).
            const dash_ticket_place place = dash_ticket_locate(th.flags, th.ticket_group_units, th.items_per_slot,
                                                               th.num_units, th.items_per_unit, int32_t(local));
            const dash_unit_coords unit = dash_unit_coords_from(th.gqa_mode, h.c.heads_q, h.c.heads_kv, G,
                                                                t.group_head_by_rank.data(), place.unit);
            const dash_item& item = t.items[size_t(place.item)];
            for (int sg = item.first_segment; sg < item.first_segment + item.num_segments; ++sg) {
              const dash_segment& segment = t.segments[size_t(sg)];
              for (int vi = segment.first_visit; vi < segment.first_visit + segment.num_visits; ++vi) {
                const dash_visit& v = t.visits[size_t(vi)];
                const int head = th.gqa_mode == DASH_GQA_PACK_GROUP ? unit.head_kv * G + v.head_in_unit : unit.head_q;
                const size_t accumulator = size_t(head) * vp.total_q_tiles + seq.q_tile_begin + v.q_tile;
                expected[accumulator * vp.total_kv_tiles + v.dq_rank] = (ticket << 32) | uint32_t(vi);
              }
            }
          }
        }
        size_t mismatches = 0;
        for (size_t i = 0; i < entries; ++i) mismatches += executed[i] != expected[i];
        EXPECT_EQ(mismatches, 0u) << what << ": the executed dQ order differs from the plan's in " << mismatches
                                  << " of " << entries << " log entries";
      }
    }
  }
}

// A pack whose every sequence has at most 4 KV tiles (auto's templates all flagged
// DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED) runs its non-deterministic backward with the ordered adds: the
// deterministic workspace size in both modes, the float64 reference, and the deterministic run's bits on every
// non-deterministic run. One sequence of 5 KV tiles keeps the pack's adds unordered (no turn counters).
TEST(VarlenGpuOrder, AShortPackRunsItsNondeterministicBackwardWithOrderedAdds) {
  SKIP_WITHOUT_GPU();
  for (const auto& [pc, ordered] :
       {std::pair{PackCase{"short", {1, 2, 300, 512, 129}, {1, 2, 300, 512, 129}, 4, 2, 128, DASH_MASK_CAUSAL}, true},
        std::pair{PackCase{"short_d64", {64, 511, 3}, {200, 512, 1}, 2, 2, 64, DASH_MASK_FULL}, true},
        std::pair{PackCase{"one_long", {1, 2, 300, 600}, {1, 2, 300, 600}, 4, 2, 128, DASH_MASK_CAUSAL}, false}}) {
    SCOPED_TRACE(pc.name);
    const HostPack h(pc, 13);
    DevicePack d(h);
    ASSERT_EQ(d.create_pack(), "");
    ASSERT_EQ(d.make_plan("auto", DASH_GQA_AUTO), "");
    const dash_bwd_args a = d.bwd_args();
    const size_t nondet = dash_bwd_workspace_size(&a, d.plan, 0), det = dash_bwd_workspace_size(&a, d.plan, 1);
    ASSERT_GT(nondet, 0u) << dash_last_error();
    if (!ordered) {
      EXPECT_LT(nondet, det);
      continue;
    }
    EXPECT_EQ(nondet, det);
    ASSERT_EQ(d.backward(1), "");
    const DevicePack::Grads first = d.grads();
    for (int run = 0; run < 3; ++run) {
      ASSERT_EQ(d.backward(0), "");
      const DevicePack::Grads again = d.grads();
      if (run == 0) {
        expect_close(again.dq, h.dq, 2e-2, "non-deterministic dQ");
        expect_close(again.dk, h.dk, 2e-2, "non-deterministic dK");
        expect_close(again.dv, h.dv, 2e-2, "non-deterministic dV");
      }
      ASSERT_TRUE(again == first) << "run " << run << ": non-deterministic gradients differ from the deterministic ones";
    }
  }
}

TEST(VarlenGpuArguments, ErrorsNameTheArgument) {
  SKIP_WITHOUT_GPU();
  const HostPack h(PackCase{"args", {10, 20}, {10, 20}, 2, 2, 64, DASH_MASK_CAUSAL}, 1);
  DevicePack d(h);
  ASSERT_EQ(d.create_pack(), "");
  dash_fwd_args a{};
  a.problem = d.problem;
  a.problem.heads_q = 4;
  a.dtype = DASH_DTYPE_BF16;
  EXPECT_EQ(dash_fwd_varlen(&a, d.pack, d.fwd_ws, 16, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("problem"), std::string::npos) << dash_last_error();
  EXPECT_EQ(dash_fwd_varlen(&a, nullptr, d.fwd_ws, 16, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("pack"), std::string::npos) << dash_last_error();
  dash_plan_t plan = nullptr;
  EXPECT_EQ(dash_plan_create_varlen(d.pack, "no-such-schedule", 0, DASH_GQA_AUTO, &plan), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("schedule"), std::string::npos) << dash_last_error();
  EXPECT_EQ(plan, nullptr);
}

}  // namespace
