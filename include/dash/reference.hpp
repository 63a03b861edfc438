// SPDX-License-Identifier: Apache-2.0
// dash/reference.hpp — the CPU backend: attention forward and a backward that follows a plan's visit and
// accumulation orders, with fp32 tensors and fp32 accumulators added in the same orders as the kernels (sums
// inside one block are carried in double and rounded once: src/core/reference.cpp). It lets the order semantics be
// tested without a GPU (its bits are not expected to equal the GPU's), and serves as the oracle for the GPU
// tests. Slow by design: plain loops, no threads.
//
// Two head dims: q, k, dq and dk have problem.head_dim columns; v, o, dO and dv have problem.value_head_dim()
// (MLA-style 192 / 128). Being a float reference, it runs both passes for any pair, so the C ABI's CPU backend
// takes every row of dash/kernel_table.hpp.
#pragma once

#include <cstdint>

#include "dash/plan.hpp"

namespace dash::reference {

// A host (batch, seqlen, heads, head_dim) tensor of floats (head_dim: the tensor's own, head_dim or head_dim_v);
// strides in elements, head_dim contiguous.
struct Tensor {
  float* data = nullptr;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
  float* at(int64_t b, int64_t s, int64_t h) const { return data + b * batch_stride + s * seq_stride + h * head_stride; }
};

// A dense (batch, seqlen, heads, head_dim) tensor for `rows` positions and `heads` heads.
inline Tensor dense(float* data, int64_t seqlen, int64_t heads, int64_t head_dim) {
  return {data, seqlen * heads * head_dim, heads * head_dim, head_dim};
}

// O = softmax(Q K^T * scale, masked) V; LSE (natural log) in [batch, heads_q, seqlen_q]. A row that sees no
// key gets O = 0 and LSE = -inf.
void forward(const Problem& problem, float softmax_scale, const Tensor& q, const Tensor& k, const Tensor& v,
             const Tensor& o, float* lse);

// dQ, dK, dV for the plan's problem (its header carries head_dim_v). dQ tiles are summed in each accumulator's
// dq_rank order, dK/dV in each segment's visit order and, for SPLIT_HEADS GQA, across the group in
// group_head_by_rank order: the orders the kernels promise: fp32 accumulators, each block's partial summed in double
// and rounded once.
void backward(const Plan& plan, float softmax_scale, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& o, const Tensor& d_o, const float* lse, const Tensor& dq, const Tensor& dk,
              const Tensor& dv);

} // namespace dash::reference
