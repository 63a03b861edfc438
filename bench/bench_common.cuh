// SPDX-License-Identifier: Apache-2.0
// bench_common.cuh — what the benchmark programs share: a CUDA error check that exits with the failing call,
// and random normal inputs generated on the device.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "dash/dash_attn.h"

#define CUDA_CHECK(expr)                                                                                 \
  do {                                                                                                   \
    cudaError_t const status_ = (expr);                                                                  \
    if (status_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(status_));   \
      std::exit(2);                                                                                      \
    }                                                                                                    \
  } while (0)

// A self-attention problem (seqlen_q = seqlen_k) of the benchmark grid, full or causal.
inline dash_problem grid_problem(int batch, int heads_q, int heads_kv, int seqlen, int head_dim, bool causal) {
  dash_problem p{};
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.head_dim = head_dim;
  p.mask_kind = causal ? DASH_MASK_CAUSAL : DASH_MASK_FULL;
  p.window_left = p.window_right = -1;
  return p;
}

// Standard normal values from a counter-based hash (Box-Muller), written as bf16 / fp16 bits.
__global__ inline void fill_normal(uint16_t* out, size_t n, uint64_t seed, int dtype) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29; x *= 0x94D049BB133111EBull; x ^= x >> 32;
    float const u1 = (float(uint32_t(x)) + 1.f) * 2.3283064e-10f;  // (0, 1]
    float const u2 = float(uint32_t(x >> 32)) * 2.3283064e-10f;
    float const value = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    out[i] = dtype == DASH_DTYPE_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(value))
                                      : __half_as_ushort(__float2half_rn(value));
  }
}
