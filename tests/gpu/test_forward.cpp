// SPDX-License-Identifier: Apache-2.0
// test_forward.cpp — GPU tests of the attention forward through the C ABI (dash/dash_attn.h).
//
// Accuracy: each case draws random normal Q, K, V (never zeros), rounds them to bf16/fp16, runs dash_fwd and
// compares O and LSE with the float64 CPU oracle (forward_reference.hpp). Every row of the kernel table is covered:
// the rows with a backward kernel (64, 96, 128) by the full sweep, the others (256, and 192 / 128 whose V and O
// have head dim 128) by a few lengths, both dtypes and masks, GQA, cross lengths and a padded layout. O passes when
//   max |O_kernel - O_exact| <= 2 * max |O_lowp - O_exact| + atol,
// O_lowp being the oracle with P and O rounded to the element type (FlashAttention's error-against-error
// rule; atol covers cases where O_lowp happens to be exact). LSE passes within 2e-3 (it is computed in fp32
// from exact products; real bugs are orders of magnitude larger), and must be -inf exactly for rows that see
// no key, whose O must be exactly 0.
//
// Coverage of every element: O's storage is filled with NaN (0xFFFF) and LSE with a sentinel before each
// run; every element of the view must be written, and every element outside it (head-dim padding of strided
// views, the slack after LSE) must still hold the poison. Input padding is NaN too, so a kernel that read
// outside its view would turn outputs into NaN.
//
// Without a CUDA device every GPU test skips with "no CUDA device: GPU test skipped"; the argument-checking
// tests run anyway, since the C ABI validates before any CUDA call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"
#include "dash/dash_attn.hpp"
#include "forward_reference.hpp"
#include "gpu_test_support.hpp"

namespace {

using dash::test::DenseTensor;
using dash::test::ForwardReference;

// ---- device presence ----------------------------------------------------------------------------------------

bool device_is_hopper() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

#define SKIP_WITHOUT_HOPPER()                                                                       \
  do {                                                                                              \
    if (!dash::test::have_gpu()) GTEST_SKIP() << "no CUDA device: GPU test skipped";              \
    if (!device_is_hopper()) GTEST_SKIP() << "not an sm_90 (Hopper) device: GPU test skipped";      \
  } while (0)

#define CUDA_ASSERT(expr)                                                                              \
  do {                                                                                                 \
    cudaError_t const cuda_assert_status = (expr);                                                     \
    ASSERT_EQ(cuda_assert_status, cudaSuccess) << #expr << ": " << cudaGetErrorString(cuda_assert_status); \
  } while (0)

// ---- cases --------------------------------------------------------------------------------------------------

enum class Layout {
  Packed,      // (batch, seqlen, heads, head_dim), contiguous
  HeadPadded,  // a (batch, seqlen, heads, head_dim) view of a (batch, seqlen, heads, head_dim + 64) tensor
  HeadsMajor,  // (batch, heads, seqlen, head_dim) storage seen as (batch, seqlen, heads, head_dim)
};

struct Case {
  std::string name;
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  dash_mask_kind mask;
  dash_dtype dtype;
  Layout layout = Layout::Packed;
  float softmax_scale = 0.f;  // 0: the default 1 / sqrt(head_dim)
  int head_dim_v = 0;         // of V and O; 0: head_dim
  int value_head_dim() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

const char* mask_name(dash_mask_kind m) { return m == DASH_MASK_CAUSAL ? "causal" : "full"; }
const char* dtype_name(dash_dtype t) { return t == DASH_DTYPE_BF16 ? "bf16" : "fp16"; }

Case make_case(std::string prefix, int batch, int hq, int hkv, int sq, int sk, int d, dash_mask_kind mask,
               dash_dtype dtype, Layout layout = Layout::Packed, float scale = 0.f) {
  std::string name = prefix + "_" + std::to_string(sq) + "x" + std::to_string(sk) + "_" + mask_name(mask) + "_d" +
                     std::to_string(d) + "_" + dtype_name(dtype);
  return Case{name, batch, hq, hkv, sq, sk, d, mask, dtype, layout, scale};
}

// A case of one row of the kernel table: its head dim, and V / O with the row's head_dim_v ("_d192v128" in the name:
// gtest names take letters, digits and underscores only).
Case make_row_case(std::string prefix, int batch, int hq, int hkv, int sq, int sk, const dash::test::KernelRow& row,
                   dash_mask_kind mask, dash_dtype dtype, Layout layout = Layout::Packed) {
  Case c = make_case(prefix, batch, hq, hkv, sq, sk, row.head_dim, mask, dtype, layout);
  if (row.head_dim_v != row.head_dim) {
    c.head_dim_v = row.head_dim_v;
    const std::string d = "_d" + std::to_string(row.head_dim) + "_";
    c.name.replace(c.name.find(d), d.size(),
                   "_d" + std::to_string(row.head_dim) + "v" + std::to_string(row.head_dim_v) + "_");
  }
  return c;
}

// Cases whose name starts with "Small" are the ones compute-sanitizer runs (scripts/gpu_check.sh).
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  auto const masks = {DASH_MASK_FULL, DASH_MASK_CAUSAL};
  auto const dtypes = {DASH_DTYPE_BF16, DASH_DTYPE_FP16};
  // The full sweep: the rows of one head dim up to 128 (64, 96, 128).
  std::vector<int> swept;
  for (int d : dash::test::kernel_head_dims())
    if (d <= 128) swept.push_back(d);
  // Length sweep: around the 128-row / 128-key tile edges, and odd lengths.
  for (int len : {1, 17, 113, 127, 128, 129, 255, 1000}) {
    for (auto mask : masks)
      for (int d : swept)
        for (auto dtype : dtypes) cases.push_back(make_case(len <= 255 ? "Small_Len" : "Len", 2, 2, 2, len, len, d, mask, dtype));
  }
  // seqlen_q != seqlen_k both ways; causal rows above the shifted diagonal see no key.
  for (auto [sq, sk] : {std::pair{113, 203}, std::pair{203, 113}, std::pair{17, 300}, std::pair{300, 17}}) {
    for (auto mask : masks)
      for (int d : swept) cases.push_back(make_case("Small_Cross", 2, 2, 2, sq, sk, d, mask, DASH_DTYPE_BF16));
  }
  // The other rows (256, and 192 / 128, whose V and O have head dim 128): a few lengths (one, a tile edge, many
  // tiles) in both dtypes and masks, cross lengths, GQA and a padded layout.
  for (const dash::test::KernelRow& row : dash::test::kernel_rows()) {
    if (row.head_dim <= 128 && row.head_dim_v == row.head_dim) continue;
    for (int len : {1, 129, 1000})
      for (auto mask : masks)
        for (auto dtype : dtypes)
          cases.push_back(make_row_case(len <= 255 ? "Small_Len" : "Len", 2, 2, 2, len, len, row, mask, dtype));
    cases.push_back(make_row_case("Small_Cross", 2, 2, 2, 203, 113, row, DASH_MASK_CAUSAL, DASH_DTYPE_BF16));
    cases.push_back(make_row_case("Small_Cross", 2, 2, 2, 113, 203, row, DASH_MASK_FULL, DASH_DTYPE_FP16));
    cases.push_back(make_row_case("Small_GQA8x2", 2, 8, 2, 255, 255, row, DASH_MASK_CAUSAL, DASH_DTYPE_BF16));
    cases.push_back(make_row_case("Small_HeadPadded", 2, 4, 2, 129, 129, row, DASH_MASK_FULL, DASH_DTYPE_BF16,
                                  Layout::HeadPadded));
  }
  for (auto mask : masks) {
    cases.push_back(make_case("Cross", 1, 2, 2, 1, 1000, 128, mask, DASH_DTYPE_BF16));
    cases.push_back(make_case("Cross", 1, 2, 2, 1000, 1, 128, mask, DASH_DTYPE_FP16));
    cases.push_back(make_case("Cross", 1, 2, 1, 1500, 700, 64, mask, DASH_DTYPE_BF16));
  }
  // GQA (8 query heads on 2 KV heads) and MQA (8 on 1).
  for (auto mask : masks)
    for (int d : swept) {
      cases.push_back(make_case("Small_GQA8x2", 2, 8, 2, 255, 255, d, mask, DASH_DTYPE_BF16));
      cases.push_back(make_case("Small_MQA8x1", 1, 8, 1, 129, 77, d, mask, DASH_DTYPE_FP16));
    }
  cases.push_back(make_case("MQA8x1", 1, 8, 1, 300, 511, 128, DASH_MASK_CAUSAL, DASH_DTYPE_BF16));
  // Strided views: padded head dim, and a heads-major tensor.
  for (auto mask : masks) {
    cases.push_back(make_case("Small_HeadPadded", 2, 4, 2, 129, 129, 128, mask, DASH_DTYPE_BF16, Layout::HeadPadded));
    cases.push_back(make_case("Small_HeadPadded", 2, 2, 2, 113, 203, 64, mask, DASH_DTYPE_FP16, Layout::HeadPadded));
    cases.push_back(make_case("Small_HeadsMajor", 2, 4, 4, 203, 113, 64, mask, DASH_DTYPE_BF16, Layout::HeadsMajor));
    cases.push_back(make_case("Small_HeadsMajor", 1, 4, 2, 255, 255, 128, mask, DASH_DTYPE_FP16, Layout::HeadsMajor));
  }
  // An explicit softmax scale, a larger batch, and long sequences (many tiles, pipeline wrap-around).
  cases.push_back(make_case("Small_Scale0p3", 2, 2, 2, 127, 127, 64, DASH_MASK_FULL, DASH_DTYPE_BF16, Layout::Packed, 0.3f));
  cases.push_back(make_case("Small_Scale0p3", 2, 2, 2, 200, 250, 128, DASH_MASK_CAUSAL, DASH_DTYPE_FP16, Layout::Packed, 0.3f));
  cases.push_back(make_case("Small_Batch5", 5, 3, 3, 77, 77, 128, DASH_MASK_CAUSAL, DASH_DTYPE_BF16));
  // More work tiles (128 query rows x heads x batch) than an H200 has SMs (132): each CTA of the persistent
  // grid runs several, some of them empty (causal rows that see no key) between non-empty ones.
  cases.push_back(make_case("Small_Persistent", 4, 16, 16, 300, 300, 64, DASH_MASK_FULL, DASH_DTYPE_BF16));
  cases.push_back(make_case("Small_Persistent", 4, 16, 4, 300, 300, 128, DASH_MASK_CAUSAL, DASH_DTYPE_FP16));
  cases.push_back(make_case("Persistent", 2, 16, 4, 1500, 300, 64, DASH_MASK_CAUSAL, DASH_DTYPE_BF16));
  cases.push_back(make_case("Persistent", 4, 8, 8, 1000, 1000, 128, DASH_MASK_FULL, DASH_DTYPE_BF16));
  cases.push_back(make_case("Persistent", 2, 16, 2, 777, 1200, 128, DASH_MASK_CAUSAL, DASH_DTYPE_BF16, Layout::HeadPadded));
  // Causal with more (batch, head) pairs than the interleaved tail takes (hopper/fwd/fwd_tile_order.hpp: 66 pairs of
  // 8 Q tiles on 132 CTAs): 30 pairs run pair by pair, then 66 interleaved.
  cases.push_back(make_case("PersistentTail", 6, 16, 4, 1000, 1000, 128, DASH_MASK_CAUSAL, DASH_DTYPE_BF16));
  cases.push_back(make_case("Long", 1, 2, 2, 2048, 2048, 128, DASH_MASK_CAUSAL, DASH_DTYPE_BF16));
  cases.push_back(make_case("Long", 1, 2, 2, 2048, 2048, 64, DASH_MASK_FULL, DASH_DTYPE_BF16));
  cases.push_back(make_case("Long", 1, 2, 1, 3000, 1100, 128, DASH_MASK_CAUSAL, DASH_DTYPE_FP16));
  return cases;
}

// ---- buffers ------------------------------------------------------------------------------------------------

struct Strides {
  int64_t batch, seq, head;
  size_t storage_elems;
};

Strides strides_for(Layout layout, int b, int s, int h, int d) {
  switch (layout) {
    case Layout::Packed:
      return {int64_t(s) * h * d, int64_t(h) * d, d, size_t(b) * s * h * d};
    case Layout::HeadPadded: {
      int64_t const dp = d + 64;
      return {int64_t(s) * h * dp, int64_t(h) * dp, dp, size_t(b) * s * h * dp};
    }
    case Layout::HeadsMajor:
      return {int64_t(h) * s * d, d, int64_t(s) * d, size_t(b) * h * s * d};
  }
  return {};
}

size_t storage_index(const Strides& st, int b, int s, int h, int x) {
  return size_t(b * st.batch + s * st.seq + h * st.head + x);
}

constexpr uint16_t kPoisonBits = 0xFFFF;  // NaN in both bf16 and fp16
constexpr uint32_t kLsePoisonBits = 0x7F7F7F7Fu;
constexpr size_t kLseSlack = 64;

// A device allocation freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
};

// Random normal values rounded to the element type, and their storage image (padding = NaN).
struct Operand {
  DenseTensor dense;
  Strides strides{};
  std::vector<uint16_t> storage;
};

// `width`: the operand's head dim (Q and K: head_dim; V: head_dim_v).
Operand make_operand(std::mt19937_64& rng, const Case& c, int seqlen, int heads, int width) {
  Operand op{DenseTensor(c.batch, seqlen, heads, width), strides_for(c.layout, c.batch, seqlen, heads, width), {}};
  op.storage.assign(op.strides.storage_elems, kPoisonBits);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int b = 0; b < c.batch; ++b)
    for (int s = 0; s < seqlen; ++s)
      for (int h = 0; h < heads; ++h)
        for (int x = 0; x < width; ++x) {
          uint16_t const bits = dash::test::float_to_bits(normal(rng), c.dtype);
          op.dense.at(b, s, h, x) = dash::test::bits_to_float(bits, c.dtype);
          op.storage[storage_index(op.strides, b, s, h, x)] = bits;
        }
  return op;
}

dash_tensor view_of(void* data, const Strides& st) { return dash_tensor{data, st.batch, st.seq, st.head}; }

struct DeviceProblem {
  Operand q, k, v;
  Strides o_strides{};
  DeviceBuffer dq, dk, dv, dout, dlse;
  DeviceBuffer workspace;  // dash_fwd_workspace_size() bytes
  size_t workspace_bytes = 0;
  dash_fwd_args args{};
};

dash_status run_forward(DeviceProblem& p, cudaStream_t stream) {
  return dash_fwd(&p.args, p.workspace.ptr, p.workspace_bytes, stream);
}

// Uploads random inputs and poisons the outputs. `seed` makes each case's inputs distinct.
void setup_problem(const Case& c, uint64_t seed, DeviceProblem& p) {
  std::mt19937_64 rng(seed);
  p.q = make_operand(rng, c, c.seqlen_q, c.heads_q, c.head_dim);
  p.k = make_operand(rng, c, c.seqlen_k, c.heads_kv, c.head_dim);
  p.v = make_operand(rng, c, c.seqlen_k, c.heads_kv, c.value_head_dim());
  p.o_strides = strides_for(c.layout, c.batch, c.seqlen_q, c.heads_q, c.value_head_dim());
  for (auto [buffer, op] : {std::pair{&p.dq, &p.q}, std::pair{&p.dk, &p.k}, std::pair{&p.dv, &p.v}}) {
    CUDA_ASSERT(cudaMalloc(&buffer->ptr, op->storage.size() * sizeof(uint16_t)));
    CUDA_ASSERT(cudaMemcpy(buffer->ptr, op->storage.data(), op->storage.size() * sizeof(uint16_t),
                           cudaMemcpyHostToDevice));
  }
  size_t const lse_elems = size_t(c.batch) * c.heads_q * c.seqlen_q + kLseSlack;
  CUDA_ASSERT(cudaMalloc(&p.dout.ptr, p.o_strides.storage_elems * sizeof(uint16_t)));
  CUDA_ASSERT(cudaMalloc(&p.dlse.ptr, lse_elems * sizeof(float)));

  dash_fwd_args& a = p.args;
  a.problem = dash_problem{c.batch, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k, c.head_dim, c.mask, -1, -1,
                           c.head_dim_v};
  a.dtype = c.dtype;
  a.q = view_of(p.dq.ptr, p.q.strides);
  a.k = view_of(p.dk.ptr, p.k.strides);
  a.v = view_of(p.dv.ptr, p.v.strides);
  a.o = view_of(p.dout.ptr, p.o_strides);
  a.lse = static_cast<float*>(p.dlse.ptr);
  a.softmax_scale = c.softmax_scale;
  p.workspace_bytes = dash_fwd_workspace_size(&p.args);
  ASSERT_GT(p.workspace_bytes, 0u);
  CUDA_ASSERT(cudaMalloc(&p.workspace.ptr, p.workspace_bytes));
}

void poison_outputs(const Case& c, DeviceProblem& p, cudaStream_t stream) {
  size_t const lse_elems = size_t(c.batch) * c.heads_q * c.seqlen_q + kLseSlack;
  CUDA_ASSERT(cudaMemsetAsync(p.dout.ptr, 0xFF, p.o_strides.storage_elems * sizeof(uint16_t), stream));
  CUDA_ASSERT(cudaMemsetAsync(p.dlse.ptr, 0x7F, lse_elems * sizeof(float), stream));
}

struct Outputs {
  std::vector<uint16_t> o;
  std::vector<float> lse;
};

void download(const Case& c, const DeviceProblem& p, Outputs& out) {
  out.o.resize(p.o_strides.storage_elems);
  out.lse.resize(size_t(c.batch) * c.heads_q * c.seqlen_q + kLseSlack);
  CUDA_ASSERT(cudaMemcpy(out.o.data(), p.dout.ptr, out.o.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  CUDA_ASSERT(cudaMemcpy(out.lse.data(), p.dlse.ptr, out.lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
}

// ---- checks -------------------------------------------------------------------------------------------------

void check_against_reference(const Case& c, const DeviceProblem& p, const Outputs& out) {
  float const scale = c.softmax_scale > 0.f ? c.softmax_scale : float(1.0 / std::sqrt(double(c.head_dim)));
  ForwardReference const ref =
      dash::test::reference_forward(p.q.dense, p.k.dense, p.v.dense, c.mask == DASH_MASK_CAUSAL, scale, c.dtype);

  // Every element outside the O view keeps its poison.
  std::vector<bool> in_view(out.o.size(), false);
  double max_err = 0.0, max_err_lowp = 0.0, sum_sq_err = 0.0, sum_sq_ref = 0.0;
  size_t worst = 0;
  int const dv = c.value_head_dim();  // O's head dim
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < c.seqlen_q; ++i)
      for (int h = 0; h < c.heads_q; ++h)
        for (int x = 0; x < dv; ++x) {
          size_t const si = storage_index(p.o_strides, b, i, h, x);
          size_t const di = ref.o_index(b, i, h, x);
          in_view[si] = true;
          double const got = dash::test::bits_to_float(out.o[si], c.dtype);
          if (!std::isfinite(got)) {
            FAIL() << c.name << ": O[b=" << b << ", s=" << i << ", h=" << h << ", d=" << x
                   << "] not written or not finite (bits 0x" << std::hex << out.o[si] << std::dec
                   << "), reference " << ref.o_exact[di];
          }
          double const err = std::fabs(got - ref.o_exact[di]);
          if (err > max_err) {
            max_err = err;
            worst = di;
          }
          max_err_lowp = std::max(max_err_lowp, std::fabs(ref.o_lowp[di] - ref.o_exact[di]));
          sum_sq_err += err * err;
          sum_sq_ref += ref.o_exact[di] * ref.o_exact[di];
        }
  for (size_t si = 0; si < out.o.size(); ++si) {
    if (!in_view[si] && out.o[si] != kPoisonBits) {
      FAIL() << c.name << ": O storage element " << si << " outside the view was overwritten";
    }
  }

  double const atol = c.dtype == DASH_DTYPE_BF16 ? 1e-3 : 2.5e-4;
  double const tolerance = 2.0 * max_err_lowp + atol;
  int const wd = worst % dv, wh = (worst / dv) % c.heads_q;
  int const ws = (worst / (size_t(dv) * c.heads_q)) % c.seqlen_q;
  int const wb = int(worst / (size_t(dv) * c.heads_q * c.seqlen_q));
  size_t const wsi = storage_index(p.o_strides, wb, ws, wh, wd);
  EXPECT_LE(max_err, tolerance) << c.name << ": worst O error at [b=" << wb << ", s=" << ws << ", h=" << wh
                                << ", d=" << wd << "]: kernel " << dash::test::bits_to_float(out.o[wsi], c.dtype)
                                << ", reference " << ref.o_exact[worst] << ", low-precision reference "
                                << ref.o_lowp[worst];

  // LSE: every row written, -inf exactly where no key is visible, slack untouched.
  double max_lse_err = 0.0;
  size_t const rows = size_t(c.batch) * c.heads_q * c.seqlen_q;
  for (size_t r = 0; r < rows; ++r) {
    uint32_t bits;
    std::memcpy(&bits, &out.lse[r], sizeof(bits));
    ASSERT_NE(bits, kLsePoisonBits) << c.name << ": LSE row " << r << " not written";
    double const want = ref.lse[r], got = out.lse[r];
    if (std::isinf(want)) {
      ASSERT_TRUE(std::isinf(got) && got < 0) << c.name << ": LSE row " << r << " sees no key: want -inf, got " << got;
      continue;
    }
    double const err = std::fabs(got - want);
    ASSERT_LE(err, 2e-3) << c.name << ": LSE row " << r << " (batch " << r / (size_t(c.heads_q) * c.seqlen_q)
                         << ", head " << (r / c.seqlen_q) % c.heads_q << ", query " << r % c.seqlen_q
                         << "): kernel " << got << ", reference " << want;
    max_lse_err = std::max(max_lse_err, err);
  }
  for (size_t r = rows; r < out.lse.size(); ++r) {
    uint32_t bits;
    std::memcpy(&bits, &out.lse[r], sizeof(bits));
    ASSERT_EQ(bits, kLsePoisonBits) << c.name << ": LSE slack element " << r - rows << " past the end was written";
  }
  std::printf("[ accuracy ] %-44s max|O-ref| %.3e  (lowp %.3e, tol %.3e)  rel-l2 %.2e  max|LSE-ref| %.2e\n",
              c.name.c_str(), max_err, max_err_lowp, tolerance,
              sum_sq_ref > 0 ? std::sqrt(sum_sq_err / sum_sq_ref) : 0.0, max_lse_err);
}

struct Stream {
  cudaStream_t handle = nullptr;
  Stream() { cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking); }
  ~Stream() {
    if (handle) cudaStreamDestroy(handle);
  }
};

uint64_t seed_of(const std::string& name) { return std::hash<std::string>{}(name) ^ 0x5eed0f0a11ce5ull; }

// ---- accuracy over the case list ----------------------------------------------------------------------------

class ForwardAccuracy : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardAccuracy, MatchesReference) {
  SKIP_WITHOUT_HOPPER();
  const Case& c = GetParam();
  DeviceProblem p;
  ASSERT_NO_FATAL_FAILURE(setup_problem(c, seed_of(c.name), p));
  Stream stream;
  ASSERT_NO_FATAL_FAILURE(poison_outputs(c, p, stream.handle));
  dash_status const status = run_forward(p, stream.handle);
  ASSERT_EQ(status, DASH_OK) << dash_last_error();
  CUDA_ASSERT(cudaStreamSynchronize(stream.handle));
  CUDA_ASSERT(cudaGetLastError());
  Outputs out;
  ASSERT_NO_FATAL_FAILURE(download(c, p, out));
  check_against_reference(c, p, out);
}

INSTANTIATE_TEST_SUITE_P(Cases, ForwardAccuracy, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- run-to-run and CUDA-graph behaviour --------------------------------------------------------------------

TEST(ForwardBehaviour, SmallBitwiseRepeatableAndGraphCapturable) {
  SKIP_WITHOUT_HOPPER();
  Case const c = make_case("Repeat", 2, 4, 2, 300, 300, 128, DASH_MASK_CAUSAL, DASH_DTYPE_BF16);
  DeviceProblem p;
  ASSERT_NO_FATAL_FAILURE(setup_problem(c, seed_of(c.name), p));
  Stream stream;
  Outputs first, second, replayed;

  ASSERT_NO_FATAL_FAILURE(poison_outputs(c, p, stream.handle));
  ASSERT_EQ(run_forward(p, stream.handle), DASH_OK) << dash_last_error();
  CUDA_ASSERT(cudaStreamSynchronize(stream.handle));
  ASSERT_NO_FATAL_FAILURE(download(c, p, first));

  ASSERT_NO_FATAL_FAILURE(poison_outputs(c, p, stream.handle));
  ASSERT_EQ(run_forward(p, stream.handle), DASH_OK) << dash_last_error();
  CUDA_ASSERT(cudaStreamSynchronize(stream.handle));
  ASSERT_NO_FATAL_FAILURE(download(c, p, second));
  EXPECT_EQ(first.o, second.o) << "O differs between two identical runs";
  EXPECT_EQ(0, std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * sizeof(float)))
      << "LSE differs between two identical runs";

  // Capture in global mode (the strictest): dash_fwd must make no call that capture forbids.
  ASSERT_NO_FATAL_FAILURE(poison_outputs(c, p, stream.handle));
  CUDA_ASSERT(cudaStreamSynchronize(stream.handle));
  cudaGraph_t graph = nullptr;
  CUDA_ASSERT(cudaStreamBeginCapture(stream.handle, cudaStreamCaptureModeGlobal));
  dash_status const captured = run_forward(p, stream.handle);
  cudaError_t const end = cudaStreamEndCapture(stream.handle, &graph);
  ASSERT_EQ(captured, DASH_OK) << dash_last_error();
  CUDA_ASSERT(end);
  cudaGraphExec_t exec = nullptr;
  CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
  // Twice: each replay must zero the tile counter the previous one used up (a replay that found it used would
  // compute no tile and leave the poison).
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_NO_FATAL_FAILURE(poison_outputs(c, p, stream.handle));
    CUDA_ASSERT(cudaGraphLaunch(exec, stream.handle));
    CUDA_ASSERT(cudaStreamSynchronize(stream.handle));
    ASSERT_NO_FATAL_FAILURE(download(c, p, replayed));
    EXPECT_EQ(first.o, replayed.o) << "graph replay " << replay << " differs from a direct launch";
    EXPECT_EQ(0, std::memcmp(first.lse.data(), replayed.lse.data(), first.lse.size() * sizeof(float)))
        << "graph replay " << replay << ": LSE differs from a direct launch";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(ForwardBehaviour, HostPointerIsRejected) {
  SKIP_WITHOUT_HOPPER();
  Case const c = make_case("HostPtr", 1, 1, 1, 16, 16, 64, DASH_MASK_FULL, DASH_DTYPE_BF16);
  DeviceProblem p;
  ASSERT_NO_FATAL_FAILURE(setup_problem(c, 1, p));
  std::vector<uint16_t> host(p.q.storage.size() + 16);
  uintptr_t const aligned = (reinterpret_cast<uintptr_t>(host.data()) + 15) & ~uintptr_t(15);
  p.args.q.data = reinterpret_cast<void*>(aligned);
  EXPECT_EQ(run_forward(p, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("q.data"), std::string::npos) << dash_last_error();
}

// ---- argument checking (no GPU needed: validation precedes every CUDA call) ----------------------------------

dash_fwd_args plausible_args() {
  // Pointers are never dereferenced by these tests: validation rejects the call before any CUDA call.
  alignas(16) static unsigned char fake[256];
  dash_fwd_args a{};
  a.problem = dash_problem{2, 8, 2, 100, 120, 128, DASH_MASK_CAUSAL, -1, -1, 0};
  a.dtype = DASH_DTYPE_BF16;
  int64_t const qs = 8 * 128, ks = 2 * 128;
  a.q = dash_tensor{fake, 100 * qs, qs, 128};
  a.k = dash_tensor{fake, 120 * ks, ks, 128};
  a.v = dash_tensor{fake, 120 * ks, ks, 128};
  a.o = dash_tensor{fake, 100 * qs, qs, 128};
  a.lse = reinterpret_cast<float*>(fake);
  a.softmax_scale = 0.f;
  return a;
}

void expect_rejected(const dash_fwd_args& a, dash_status want, const std::string& must_mention) {
  dash_status const got = dash_fwd(&a, nullptr, 0, nullptr);
  EXPECT_EQ(got, want) << dash_status_name(got) << ": " << dash_last_error();
  EXPECT_NE(std::string(dash_last_error()).find(must_mention), std::string::npos)
      << "message \"" << dash_last_error() << "\" should mention \"" << must_mention << "\"";
}

TEST(ForwardArguments, NullArgs) {
  EXPECT_EQ(dash_fwd(nullptr, nullptr, 0, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("args"), std::string::npos);
}

TEST(ForwardArguments, SizesMustBePositive) {
  for (int field = 0; field < 6; ++field) {
    dash_fwd_args a = plausible_args();
    int32_t* values[] = {&a.problem.batch, &a.problem.heads_q, &a.problem.heads_kv,
                         &a.problem.seqlen_q, &a.problem.seqlen_k, &a.problem.head_dim};
    const char* names[] = {"problem.batch", "problem.heads_q", "problem.heads_kv",
                           "problem.seqlen_q", "problem.seqlen_k", "problem.head_dim"};
    *values[field] = field % 2 ? 0 : -3;
    expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, names[field]);
  }
}

TEST(ForwardArguments, HeadsMustDivide) {
  dash_fwd_args a = plausible_args();
  a.problem.heads_kv = 3;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "problem.heads_q");
}

TEST(ForwardArguments, UnsupportedHeadDimListsSupported) {
  dash_fwd_args a = plausible_args();
  a.problem.head_dim = 80;
  expect_rejected(a, DASH_ERROR_UNSUPPORTED, "problem.head_dim: 80 is not supported");
  expect_rejected(a, DASH_ERROR_UNSUPPORTED, "head_dim/head_dim_v pairs: 64, 96, 128, 192/128 and 256");
  // The equal-head-dim rows (dash_supported_head_dims): 192 / 128 is listed by dash_kernel_rows only.
  const int32_t* dims = dash_fwd_supported_head_dims();
  EXPECT_EQ(dims[0], 64);
  EXPECT_EQ(dims[1], 96);
  EXPECT_EQ(dims[2], 128);
  EXPECT_EQ(dims[3], 256);
  EXPECT_EQ(dims[4], 0);  // the list's terminator
}

// Arguments of a (192, 128) call: q and k with 192 columns, v and o with 128 (checked with their own head dim).
dash_fwd_args mla_args() {
  dash_fwd_args a = plausible_args();
  a.problem.head_dim = 192;
  a.problem.head_dim_v = 128;
  int64_t const qs = 8 * 192, ks = 2 * 192, vs = 2 * 128, os = 8 * 128;
  a.q = dash_tensor{a.q.data, 100 * qs, qs, 192};
  a.k = dash_tensor{a.k.data, 120 * ks, ks, 192};
  a.v = dash_tensor{a.v.data, 120 * vs, vs, 128};
  a.o = dash_tensor{a.o.data, 100 * os, os, 128};
  return a;
}

TEST(ForwardArguments, ValueHeadDimOfItsRow) {
  // Every argument passes: the call gets as far as the workspace (checked last, before any CUDA call).
  dash_fwd_args a = mla_args();
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "workspace: null pointer");
  // o and v are checked with head_dim_v (128), not head_dim: a head stride of 96 overlaps o's rows.
  a = mla_args();
  a.o.head_stride = 96;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "o.head_stride: must be >= head_dim (128)");
  // Pairs without a row: head_dim_v is named (the head dim has a row), with the list.
  a = mla_args();
  a.problem.head_dim_v = 0;  // 192 / 192
  expect_rejected(a, DASH_ERROR_UNSUPPORTED, "problem.head_dim_v: 192 (0: equal to head_dim) is not supported");
  a = plausible_args();
  a.problem.head_dim_v = 64;
  expect_rejected(a, DASH_ERROR_UNSUPPORTED, "problem.head_dim_v: 64 is not supported with head_dim 128");
  a = plausible_args();
  a.problem.head_dim_v = -1;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "problem.head_dim_v");
  // Head dim 256: the arguments pass as well.
  a = plausible_args();
  a.problem.head_dim = 256;
  int64_t const qs = 8 * 256, ks = 2 * 256;
  a.q = dash_tensor{a.q.data, 100 * qs, qs, 256};
  a.k = a.v = dash_tensor{a.k.data, 120 * ks, ks, 256};
  a.o = dash_tensor{a.o.data, 100 * qs, qs, 256};
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "workspace: null pointer");
}

TEST(ForwardArguments, MaskKinds) {
  dash_fwd_args a = plausible_args();
  a.problem.mask_kind = 7;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "problem.mask_kind");
  // Window sizes: >= -1, and only with the window mask.
  a = plausible_args();
  a.problem.mask_kind = DASH_MASK_WINDOW;
  a.problem.window_left = -2;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "problem.window_left");
  a.problem.window_left = 4;
  a.problem.window_right = -3;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "problem.window_right");
  a = plausible_args();
  a.problem.window_left = 4;  // with the causal mask
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "problem.window");
}

TEST(ForwardArguments, Dtype) {
  dash_fwd_args a = plausible_args();
  a.dtype = static_cast<dash_dtype>(5);
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "dtype");
}

TEST(ForwardArguments, SoftmaxScale) {
  for (float bad : {-1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    dash_fwd_args a = plausible_args();
    a.softmax_scale = bad;
    expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "softmax_scale");
  }
}

TEST(ForwardArguments, NullPointers) {
  for (int which = 0; which < 5; ++which) {
    dash_fwd_args a = plausible_args();
    const char* names[] = {"q.data", "k.data", "v.data", "o.data", "lse"};
    switch (which) {
      case 0: a.q.data = nullptr; break;
      case 1: a.k.data = nullptr; break;
      case 2: a.v.data = nullptr; break;
      case 3: a.o.data = nullptr; break;
      case 4: a.lse = nullptr; break;
    }
    expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, names[which]);
  }
}

TEST(ForwardArguments, TmaAlignment) {
  dash_fwd_args a = plausible_args();
  a.k.data = static_cast<unsigned char*>(a.k.data) + 8;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "k.data: must be 16-byte aligned");

  a = plausible_args();
  a.q.seq_stride = 100;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "q.seq_stride: must be a multiple of 8 elements (16 bytes)");

  a = plausible_args();
  a.v.head_stride = 132;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "v.head_stride");

  a = plausible_args();
  a.o.batch_stride = -8;
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "o.batch_stride: must be positive");

  a = plausible_args();
  a.o.head_stride = 64;  // rows of two heads would overlap
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "o.head_stride");

  a = plausible_args();
  a.lse = reinterpret_cast<float*>(static_cast<unsigned char*>(a.o.data) + 2);
  expect_rejected(a, DASH_ERROR_INVALID_ARGUMENT, "lse: must be 4-byte aligned");
}

TEST(ForwardArguments, WorkspaceIsRequired) {
  dash_fwd_args a = plausible_args();
  size_t const bytes = dash_fwd_workspace_size(&a);
  EXPECT_GE(bytes, sizeof(int32_t));
  EXPECT_EQ(dash_fwd_workspace_size(nullptr), 0u);
  // Checked before any CUDA call, after the other arguments.
  alignas(16) static unsigned char fake_workspace[64];
  EXPECT_EQ(dash_fwd(&a, nullptr, bytes, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("workspace: null pointer"), std::string::npos) << dash_last_error();
  EXPECT_EQ(dash_fwd(&a, fake_workspace, bytes - 1, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("workspace: too small"), std::string::npos) << dash_last_error();
  EXPECT_EQ(dash_fwd(&a, fake_workspace + 2, bytes, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dash_last_error()).find("workspace: must be 4-byte aligned"), std::string::npos)
      << dash_last_error();
}

TEST(ForwardArguments, CppWrapperCarriesMessage) {
  dash_fwd_args a = plausible_args();
  a.problem.head_dim = 80;
  dash::Status const s = dash::attention_forward(a, nullptr, 0, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code, DASH_ERROR_UNSUPPORTED);
  EXPECT_NE(s.message.find("problem.head_dim"), std::string::npos) << s.message;
}

}  // namespace
