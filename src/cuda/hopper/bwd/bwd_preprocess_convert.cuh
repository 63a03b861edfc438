// SPDX-License-Identifier: Apache-2.0
// hopper/bwd/bwd_preprocess_convert.cuh — the two small kernels around the plan-executing main kernel:
//   bwd_preprocess: delta = rowsum(dO * O) in fp32 and LSE in base 2, padded to whole Q tiles (the main kernel
//                   bulk-copies one tile's rows without bounds);
//   bwd_convert:    the fp32 accumulators -> dQ (times softmax_scale), and dK / dV for split-head GQA.
// Plain CUDA (no wgmma, no TMA): they are bound by memory bandwidth.
#pragma once

#include <cstdint>

#include "bwd/bwd_params.h"
#include "hopper/bwd/bwd_dq_handoff.cuh"  // swz_f32: the accumulator tiles' layout
#include "hopper/ptx.cuh"                 // pack_pair

namespace dash::hopper::bwd {

using kernels::bwd::BwdTiles;

// ---------------------------------------------------------------------------------------------------------
// Preprocess: delta and base-2 LSE per (batch, head, padded row). One warp per row.

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(256) bwd_preprocess(BwdParams p) {
  constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  const int padded_rows = p.num_q_tiles * kBlockM;
  const int row = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int bh = blockIdx.y;  // batch * heads_q + head
  if (row >= padded_rows) return;
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  const size_t out = size_t(bh) * padded_rows + row;
  if (row >= p.mask.seqlen_q) {
    if (lane == 0) {
      p.delta[out] = 0.f;
      p.lse_log2[out] = __int_as_float(0x7f800000);  // +inf: P = exp2(s - inf) = 0 on padding rows
    }
    return;
  }
  const Element* o = static_cast<const Element*>(p.o.data) + b * p.o.batch_stride + int64_t(row) * p.o.seq_stride +
                     h * p.o.head_stride;
  const Element* dout = static_cast<const Element*>(p.dout.data) + b * p.dout.batch_stride +
                        int64_t(row) * p.dout.seq_stride + h * p.dout.head_stride;
  float sum = 0.f;
  for (int d = lane * 2; d < kHeadDim; d += 64) {
    sum += float(o[d]) * float(dout[d]) + float(o[d + 1]) * float(dout[d + 1]);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    const float lse = p.lse[size_t(bh) * p.mask.seqlen_q + row];
    p.delta[out] = sum;
    // A row that sees no key has LSE = -inf: +inf here makes its P (and so dS, dQ, and its dK/dV share) 0.
    p.lse_log2[out] = (lse == -__int_as_float(0x7f800000)) ? __int_as_float(0x7f800000) : lse * 1.4426950408889634f;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Convert: dq_accum -> dQ (times softmax_scale; zero for Q tiles no visit contributes to), and for split-head
// GQA dk/dv_accum -> dK/dV. 4 elements per thread.

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(256) bwd_convert(BwdParams p) {
  constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  constexpr int kBlockN = BwdTiles<kHeadDim>::kBlockN;
  constexpr int kQuads = kHeadDim / 4;
  const int64_t dq_quads = int64_t(p.batch) * p.heads_q * p.mask.seqlen_q * kQuads;
  const int64_t dkv_quads = p.split_dkv ? int64_t(p.batch) * p.heads_kv * p.mask.seqlen_k * kQuads : 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < dq_quads + dkv_quads;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < dq_quads) {
      const int d = int(i % kQuads) * 4;
      int64_t rest = i / kQuads;
      const int h = int(rest % p.heads_q);
      rest /= p.heads_q;
      const int row = int(rest % p.mask.seqlen_q);
      const int b = int(rest / p.mask.seqlen_q);
      const int q_tile = row / kBlockM;
      const int head_in_unit = p.gqa_mode == DASH_GQA_PACK_GROUP ? h % p.group_size : 0;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      // A Q tile with no contribution was never written (deterministic mode stores its first partial).
      if (p.dq_count[head_in_unit * p.num_q_tiles + q_tile] != 0) {
        const int64_t accumulator = (int64_t(b) * p.heads_q + h) * p.num_q_tiles + q_tile;
        // The tile is in the staging layout (store_warp_loop copies it as one flat range); d is a multiple
        // of 4, so the 4-float chunk stays contiguous.
        acc = *reinterpret_cast<const float4*>(p.dq_accum + accumulator * (kBlockM * kHeadDim) +
                                               swz_f32<kHeadDim>(row % kBlockM, d));
      }
      Element* out = static_cast<Element*>(p.dq.data) + b * p.dq.batch_stride + int64_t(row) * p.dq.seq_stride +
                     h * p.dq.head_stride + d;
      uint2 packed;
      packed.x = pack_pair<Element>(acc.x * p.softmax_scale, acc.y * p.softmax_scale);
      packed.y = pack_pair<Element>(acc.z * p.softmax_scale, acc.w * p.softmax_scale);
      *reinterpret_cast<uint2*>(out) = packed;
    } else {
      const int64_t j = i - dq_quads;
      const int d = int(j % kQuads) * 4;
      int64_t rest = j / kQuads;
      const int hk = int(rest % p.heads_kv);
      rest /= p.heads_kv;
      const int row = int(rest % p.mask.seqlen_k);
      const int b = int(rest / p.mask.seqlen_k);
      const int64_t src = ((int64_t(b) * p.heads_kv + hk) * (int64_t(p.num_kv_tiles) * kBlockN) + row) * kHeadDim + d;
      const float4 dk = *reinterpret_cast<const float4*>(p.dk_accum + src);  // already times softmax_scale
      const float4 dv = *reinterpret_cast<const float4*>(p.dv_accum + src);
      Element* dk_out = static_cast<Element*>(p.dk.data) + b * p.dk.batch_stride + int64_t(row) * p.dk.seq_stride +
                        hk * p.dk.head_stride + d;
      Element* dv_out = static_cast<Element*>(p.dv.data) + b * p.dv.batch_stride + int64_t(row) * p.dv.seq_stride +
                        hk * p.dv.head_stride + d;
      *reinterpret_cast<uint2*>(dk_out) = make_uint2(pack_pair<Element>(dk.x, dk.y), pack_pair<Element>(dk.z, dk.w));
      *reinterpret_cast<uint2*>(dv_out) = make_uint2(pack_pair<Element>(dv.x, dv.y), pack_pair<Element>(dv.z, dv.w));
    }
  }
}

}  // namespace dash::hopper::bwd
