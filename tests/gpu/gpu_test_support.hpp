// SPDX-License-Identifier: Apache-2.0
// gpu_test_support.hpp — what the GPU suites share: whether a CUDA device is present (GPU tests skip, saying so,
// without one), the rows of the kernel table, bf16 bits <-> float, and random bf16 test tensors.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"

namespace dash::test {

// One row of dash/kernel_table.hpp as the C ABI lists it (dash_kernel_rows): a (head_dim, head_dim_v) pair and
// whether it has a backward kernel.
struct KernelRow {
  int head_dim, head_dim_v;
  bool backward;
};

// Every row: the forward suites sweep all of them (192 / 128 and 256 included).
inline std::vector<KernelRow> kernel_rows() {
  std::vector<KernelRow> rows;
  for (const dash_kernel_row* r = dash_kernel_rows(); r->head_dim != 0; ++r)
    rows.push_back({r->head_dim, r->head_dim_v, r->backward != 0});
  return rows;
}

// The head dims with head_dim_v = head_dim (the C ABI's dash_supported_head_dims: 64, 96, 128, 256).
inline std::vector<int> kernel_head_dims() {
  std::vector<int> dims;
  for (const int32_t* d = dash_supported_head_dims(); *d != 0; ++d) dims.push_back(*d);
  return dims;
}

// The rows with a backward kernel, which the backward accuracy suite sweeps (every row: 64, 96, 128, 192 / 128, 256).
inline std::vector<KernelRow> backward_rows() {
  std::vector<KernelRow> rows;
  for (const KernelRow& row : kernel_rows())
    if (row.backward) rows.push_back(row);
  return rows;
}

// Of those, the head dims with head_dim_v = head_dim (64, 96, 128, 256), for suites whose tensors have one head dim.
inline std::vector<int> backward_head_dims() {
  std::vector<int> dims;
  for (const KernelRow& row : backward_rows())
    if (row.head_dim_v == row.head_dim) dims.push_back(row.head_dim);
  return dims;
}

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

// In a test body: skip, saying which suite, where no CUDA device is present.
#define DASH_SKIP_WITHOUT_GPU(suite) \
  if (!dash::test::have_gpu()) GTEST_SKIP() << "no CUDA device: " << (suite) << " GPU test skipped"

// Round to nearest even; NaN stays NaN.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// `t` becomes n bf16 values drawn uniformly from [-1, 1) by `rng`, in order (the suites' inputs and gradients).
inline void fill_uniform_bf16(std::vector<uint16_t>& t, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  t.resize(n);
  for (auto& x : t) x = to_bf16(u(rng));
}

}  // namespace dash::test
