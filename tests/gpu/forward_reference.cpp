// SPDX-License-Identifier: Apache-2.0
// forward_reference.cpp — the CPU oracle of forward_reference.hpp.
#include "forward_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include <cuda_fp16.h>

namespace dash::test {

uint16_t float_to_bits(float x, dash_dtype dtype) {
  if (dtype == DASH_DTYPE_FP16) {
    __half const h = __float2half_rn(x);
    uint16_t bits;
    std::memcpy(&bits, &h, sizeof(bits));
    return bits;
  }
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                           // round to nearest even
  return uint16_t(u >> 16);
}

float bits_to_float(uint16_t bits, dash_dtype dtype) {
  if (dtype == DASH_DTYPE_FP16) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
  uint32_t const u = uint32_t(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

float round_to_dtype(float x, dash_dtype dtype) { return bits_to_float(float_to_bits(x, dtype), dtype); }

ForwardReference reference_forward(const DenseTensor& q, const DenseTensor& k, const DenseTensor& v, bool causal,
                                   float softmax_scale, dash_dtype dtype) {
  int const batch = q.batch, seqlen_q = q.seqlen, seqlen_k = k.seqlen, heads_q = q.heads, d = q.head_dim;
  int const dv = v.head_dim;  // O's head dim
  int const group = q.heads / k.heads;
  ForwardReference ref;
  ref.seqlen_q = seqlen_q;
  ref.heads_q = heads_q;
  ref.head_dim_v = dv;
  ref.o_exact.assign(size_t(batch) * seqlen_q * heads_q * dv, 0.0);
  ref.o_lowp.assign(ref.o_exact.size(), 0.0);
  ref.lse.assign(size_t(batch) * heads_q * seqlen_q, -std::numeric_limits<double>::infinity());

  // One work unit: a block of query rows of one (batch, head).
  constexpr int kRowsPerUnit = 32;
  int const row_blocks = (seqlen_q + kRowsPerUnit - 1) / kRowsPerUnit;
  auto run_unit = [&](int b, int h, int row_block) {
    int const hk = h / group;
    std::vector<double> scores(seqlen_k), exact(dv), lowp(dv);
    int const row_end = std::min(seqlen_q, (row_block + 1) * kRowsPerUnit);
    for (int i = row_block * kRowsPerUnit; i < row_end; ++i) {
      double row_max = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < seqlen_k; ++j) {
        if (!key_visible(i, j, seqlen_q, seqlen_k, causal)) continue;
        double dot = 0.0;
        for (int x = 0; x < d; ++x) dot += double(q.at(b, i, h, x)) * double(k.at(b, j, hk, x));
        scores[j] = dot * double(softmax_scale);
        row_max = std::max(row_max, scores[j]);
      }
      if (row_max == -std::numeric_limits<double>::infinity()) continue;  // no visible key: O = 0, LSE = -inf
      std::fill(exact.begin(), exact.end(), 0.0);
      std::fill(lowp.begin(), lowp.end(), 0.0);
      double sum = 0.0;
      for (int j = 0; j < seqlen_k; ++j) {
        if (!key_visible(i, j, seqlen_q, seqlen_k, causal)) continue;
        double const p = std::exp(scores[j] - row_max);
        double const p_rounded = round_to_dtype(float(p), dtype);
        sum += p;
        for (int x = 0; x < dv; ++x) {
          double const vx = v.at(b, j, hk, x);
          exact[x] += p * vx;
          lowp[x] += p_rounded * vx;
        }
      }
      size_t const row = ref.o_index(b, i, h, 0);
      for (int x = 0; x < dv; ++x) {
        ref.o_exact[row + x] = exact[x] / sum;
        ref.o_lowp[row + x] = round_to_dtype(float(lowp[x] / sum), dtype);
      }
      ref.lse[(size_t(b) * heads_q + h) * seqlen_q + i] = row_max + std::log(sum);
    }
  };

  int const units = batch * heads_q * row_blocks;
  int const workers = std::max(1, std::min<int>(units, int(std::thread::hardware_concurrency())));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      for (int u = w; u < units; u += workers) {
        run_unit(u / (heads_q * row_blocks), (u / row_blocks) % heads_q, u % row_blocks);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return ref;
}

}  // namespace dash::test
