// SPDX-License-Identifier: Apache-2.0
// forward_reference.hpp — CPU oracle for the attention forward: softmax(Q K^T * scale + mask) V and LSE,
// in float64 from the same bf16/fp16-rounded inputs the kernel sees (V, and so O, with a head dim of its own where
// it differs from Q and K's: MLA-style 192 / 128), plus a "low-precision" twin that
// rounds P and O to the element type the way any bf16/fp16 kernel must. The kernel is judged against the
// float64 result with a tolerance scaled by the low-precision twin's own error (FlashAttention's
// error-against-error rule).
#pragma once

#include <cstdint>
#include <vector>

#include "dash/dash_attn.h"

namespace dash::test {

// Dense (batch, seqlen, heads, head_dim) values, already rounded to the element type.
struct DenseTensor {
  int batch = 0, seqlen = 0, heads = 0, head_dim = 0;
  std::vector<float> values;

  DenseTensor() = default;
  DenseTensor(int b, int s, int h, int d) : batch(b), seqlen(s), heads(h), head_dim(d), values(size_t(b) * s * h * d) {}
  size_t index(int b, int s, int h, int d) const {
    return ((size_t(b) * seqlen + s) * heads + h) * head_dim + d;
  }
  float& at(int b, int s, int h, int d) { return values[index(b, s, h, d)]; }
  float at(int b, int s, int h, int d) const { return values[index(b, s, h, d)]; }
};

struct ForwardReference {
  int seqlen_q = 0, heads_q = 0, head_dim_v = 0;  // O's extents (head_dim_v: v's head dim)
  std::vector<double> o_exact;  // dense (batch, seqlen_q, heads_q, head_dim_v)
  std::vector<double> o_lowp;   // P rounded to the element type before P V, O rounded at the end
  std::vector<double> lse;      // (batch, heads_q, seqlen_q); -inf for rows that see no key
  size_t o_index(int b, int i, int h, int x) const {
    return ((size_t(b) * seqlen_q + i) * heads_q + h) * head_dim_v + x;
  }
};

// Key j is visible to query i (FlashAttention's bottom-right alignment for the causal mask).
inline bool key_visible(int i, int j, int seqlen_q, int seqlen_k, bool causal) {
  return j < seqlen_k && (!causal || j <= i + seqlen_k - seqlen_q);
}

// Rounds to the nearest bf16 / fp16 value (round to nearest even) and back to float.
float round_to_dtype(float x, dash_dtype dtype);
// Element bits <-> float.
uint16_t float_to_bits(float x, dash_dtype dtype);
float bits_to_float(uint16_t bits, dash_dtype dtype);

// Computes the reference on all hardware threads. q and k share a head dim; v's (v.head_dim) is O's.
ForwardReference reference_forward(const DenseTensor& q, const DenseTensor& k, const DenseTensor& v, bool causal,
                                   float softmax_scale, dash_dtype dtype);

}  // namespace dash::test
