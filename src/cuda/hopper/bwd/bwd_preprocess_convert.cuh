// SPDX-License-Identifier: Apache-2.0
// hopper/bwd/bwd_preprocess_convert.cuh — the two small kernels around the plan-executing main kernel:
//   bwd_preprocess: delta = rowsum(dO * O) in fp32 and LSE in base 2, padded to whole Q tiles (the main kernel
//                   bulk-copies one tile's rows without bounds); the zeroed counters and split-GQA dK / dV
//                   accumulators; in non-deterministic mode the zeroed dQ accumulators;
//   bwd_convert:    the fp32 accumulators -> dQ (times softmax_scale), and dK / dV for split-head GQA.
// Plain CUDA (no wgmma, no TMA): they are bound by memory bandwidth.
#pragma once

#include <cstdint>

#include "bwd/bwd_params.h"
#include "hopper/bwd/bwd_dq_handoff.cuh"  // DqStaging: the accumulator tiles' layout
#include "hopper/ptx.cuh"                 // pack_pair
#include "dash/plan_format.h"

namespace dash::hopper::bwd {

// Both kernels give each thread 8 consecutive head-dim elements of one row (16-byte loads and stores of the 2-byte
// tensors) and 256 threads to a block; blockIdx.y is the (batch, head) pair. A row takes kThreadsPerRow
// consecutive lanes, kHeadDim / 8 rounded up to a power of two so that rows stay aligned within warps for the
// shuffles: at D = 96, 12 of a row's 16 lanes hold elements (`active`), the other 4 only take part in them. Rows are
// sliced by the qk head dim (the wider one: the kernel table's value head dims are at most it); the tensors of the
// value head dim (o, dout, dv) use the slices that start below it.
template <int kHeadDim>
struct RowSlices {
  static constexpr int kSlices = kHeadDim / 8;
  static constexpr int kThreadsPerRow = kSlices <= 8 ? 8 : kSlices <= 16 ? 16 : 32;
  static constexpr int kRowsPerBlock = 256 / kThreadsPerRow;
  static_assert(kHeadDim % 8 == 0 && kSlices <= 32 && kSlices * 2 > kThreadsPerRow);
  int row;      // this thread's row
  int first;    // its first head-dim element (a multiple of 8)
  bool active;  // first < kHeadDim

  __device__ __forceinline__ RowSlices()
      : row(int(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / kThreadsPerRow),
        first(int(threadIdx.x) % kThreadsPerRow * 8),
        active(first < kHeadDim) {}
};

// Where padded row `row` of the per-tile arrays lies: in a varlen pack the arrays run over global tiles (row / kRows
// is a global tile of the sequence q_tile_sequence / kv_tile_sequence names), in a fixed-length batch over the
// batch entry's tiles. `local` is the row within its sequence (>= length: padding), `first` the sequence's first
// packed row (0 for fixed length), `seq` its record (varlen only).
struct SequenceRow {
  int local, length, first;
  const dash_pack_sequence* seq;
};
template <int kRows>
__device__ __forceinline__ SequenceRow sequence_row(const int32_t* tile_sequence, const dash_pack_sequence* sequences,
                                                    int row, int fixed_length, bool of_keys) {
  if (sequences == nullptr) return {row, fixed_length, 0, nullptr};
  const dash_pack_sequence* seq = &sequences[tile_sequence[row / kRows]];
  const int tile_begin = of_keys ? seq->kv_tile_begin : seq->q_tile_begin;
  return {row - tile_begin * kRows, of_keys ? seq->seqlen_k : seq->seqlen_q, of_keys ? seq->k_row : seq->q_row, seq};
}

// ---------------------------------------------------------------------------------------------------------
// Preprocess: delta and base-2 LSE per (batch, head, padded row); with unordered adds (BwdParams::ordered) also the
// zeros the dQ accumulators start from (ordered adds store each accumulator's first partial instead).

template <int kBlockM, int kHeadDim, int kHeadDimV, class Element>
__global__ void __launch_bounds__(256) bwd_preprocess(BwdParams p) {
  static_assert(kHeadDimV <= kHeadDim, "rows are sliced by the wider head dim");
  constexpr int kThreadsPerRow = RowSlices<kHeadDim>::kThreadsPerRow;
  const RowSlices<kHeadDim> slice;
  const int padded_rows = p.num_q_tiles * kBlockM;
  const int bh = blockIdx.y;  // batch * heads_q + head (varlen: the head, batch = 1)
  // The main kernel (launched as this grid's programmatic dependent: bwd_launch.cuh) may place its CTAs once every
  // block of this grid has started; they wait for this grid to complete before they touch the workspace.
  griddepcontrol_launch_dependents();
  {
    // The counters and split-GQA accumulators (BwdParams::zero_*), over every thread of the grid. The main kernel
    // reads them only after this grid has completed (its griddepcontrol_wait), so its first reads see the zeros.
    const int64_t threads = int64_t(gridDim.x) * gridDim.y * blockDim.x;
    const int64_t first = (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t i = first; i < p.zero_counters_words; i += threads) p.zero_counters[i] = make_uint4(0, 0, 0, 0);
    for (int64_t i = first; i < p.zero_dkv_words; i += threads) p.zero_dkv[i] = make_uint4(0, 0, 0, 0);
  }
  // Every thread of a row leaves here or below together (the row's shuffles name only its own lanes).
  if (slice.row >= padded_rows) return;
  const size_t out = size_t(bh) * padded_rows + slice.row;
  const SequenceRow at = sequence_row<kBlockM>(p.q_tile_sequence, p.sequences, slice.row, p.mask.seqlen_q, false);
  if (!p.ordered && slice.active) {
    // The accumulator of (bh, q_tile) holds the kBlockM x kHeadDim floats starting at its first padded row times
    // kHeadDim (in the DqStaging order): the slices of all its rows, each at out * kHeadDim + first, cover it.
    float4* acc = reinterpret_cast<float4*>(p.dq_accum + out * kHeadDim + slice.first);
    acc[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    acc[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  if (at.local >= at.length) {
    if (slice.first == 0) {
      p.delta[out] = 0.f;
      p.lse_log2[out] = __int_as_float(0x7f800000);  // +inf: P = exp2(s - inf) = 0 on padding rows
    }
    return;
  }
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  auto row_slice = [&](dash_tensor const& t) {  // the thread's 8 elements (16-byte aligned: tensor_checks.cpp)
    return *reinterpret_cast<const uint4*>(static_cast<const Element*>(t.data) + b * t.batch_stride +
                                           int64_t(at.first + at.local) * t.seq_stride + h * t.head_stride +
                                           slice.first);
  };
  float sum = 0.f;
  if (slice.first < kHeadDimV) {
    const uint4 o_bits = row_slice(p.o), dout_bits = row_slice(p.dout);
    const Element* o = reinterpret_cast<const Element*>(&o_bits);
    const Element* dout = reinterpret_cast<const Element*>(&dout_bits);
#pragma unroll
    for (int i = 0; i < 8; ++i) sum += float(o[i]) * float(dout[i]);
  }
  // The row's kThreadsPerRow lanes are consecutive and aligned within the warp.
  const unsigned lane = threadIdx.x % 32;
  const unsigned row_lanes = (kThreadsPerRow == 32 ? 0xffffffffu : ((1u << kThreadsPerRow) - 1u))
                             << (lane / kThreadsPerRow * kThreadsPerRow);
#pragma unroll
  for (int off = kThreadsPerRow / 2; off > 0; off /= 2) sum += __shfl_xor_sync(row_lanes, sum, off);
  if (slice.first == 0) {
    const float lse = p.lse[p.sequences != nullptr ? size_t(h) * p.total_q + at.first + at.local
                                                   : size_t(bh) * p.mask.seqlen_q + slice.row];
    p.delta[out] = sum;
    // A row that sees no key has LSE = -inf: +inf here makes its P (and so dS, dQ, and its dK/dV share) 0.
    p.lse_log2[out] = (lse == -__int_as_float(0x7f800000)) ? __int_as_float(0x7f800000) : lse * 1.4426950408889634f;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Convert: dq_accum -> dQ (times softmax_scale; zero for Q tiles no visit contributes to) for blockIdx.z == 0, and
// for split-head GQA dk/dv_accum -> dK/dV for blockIdx.z == 1 (blockIdx.y the (batch, KV head) pair there).

template <int kBlockM, int kBlockN, int kHeadDim, int kHeadDimV, class Element>
__global__ void __launch_bounds__(256) bwd_convert(BwdParams p) {
  static_assert(kHeadDimV <= kHeadDim, "rows are sliced by the wider head dim");
  const RowSlices<kHeadDim> slice;
  const bool has_v = slice.first < kHeadDimV;  // the slice has elements of dv too
  if (!slice.active) return;  // no shuffles below
  const int bh = blockIdx.y;
  SequenceRow at{};  // the output row: (first + local) of batch entry b
  auto store = [&](dash_tensor const& t, int b, int h, float4 lo, float4 hi, float scale) {
    Element* dst = static_cast<Element*>(t.data) + b * t.batch_stride + int64_t(at.first + at.local) * t.seq_stride +
                   h * t.head_stride + slice.first;
    *reinterpret_cast<uint4*>(dst) = make_uint4(pack_pair<Element>(lo.x * scale, lo.y * scale),
                                                pack_pair<Element>(lo.z * scale, lo.w * scale),
                                                pack_pair<Element>(hi.x * scale, hi.y * scale),
                                                pack_pair<Element>(hi.z * scale, hi.w * scale));
  };
  if (blockIdx.z == 0) {
    // Rows of the fixed-length batch entry, or (varlen) padded rows of global Q tiles.
    if (slice.row >= (p.sequences != nullptr ? p.num_q_tiles * kBlockM : p.mask.seqlen_q)) return;
    at = sequence_row<kBlockM>(p.q_tile_sequence, p.sequences, slice.row, p.mask.seqlen_q, false);
    if (at.local >= at.length) return;
    const int b = bh / p.heads_q, h = bh % p.heads_q;
    const int q_tile = at.local / kBlockM;  // the sequence's own tile: its template's dq_count entry
    // The unit template of the row's sequence (fields copied: the address of a kernel parameter would copy all of
    // `p` to local memory).
    const uint16_t* dq_count = p.fixed.dq_count;
    int gqa_mode = p.fixed.gqa_mode, num_q_tiles = p.fixed.num_q_tiles;
    if (at.seq != nullptr) {
      // A sequence without keys has no template: its dQ is 0.
      dq_count = nullptr;
      if (at.seq->template_index >= 0) {
        const kernels::bwd::BwdTemplate& t = p.templates[at.seq->template_index];
        dq_count = t.dq_count;
        gqa_mode = t.gqa_mode;
        num_q_tiles = t.num_q_tiles;
      }
    }
    const int head_in_unit = gqa_mode == DASH_GQA_PACK_GROUP ? h % p.group_size : 0;
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    // A Q tile with no contribution was never written (deterministic mode stores its first partial).
    if (dq_count != nullptr && dq_count[head_in_unit * num_q_tiles + q_tile] != 0) {
      // The tile is in the staging layout (store_warp_loop copies it as one flat range); each 4-float chunk
      // stays contiguous under the swizzle.
      const float* tile = p.dq_accum + (int64_t(bh) * p.num_q_tiles + slice.row / kBlockM) * (kBlockM * kHeadDim);
      using Staging = DqStaging<kBlockM, kHeadDim>;
      lo = *reinterpret_cast<const float4*>(tile + Staging::offset(slice.row % kBlockM, slice.first));
      hi = *reinterpret_cast<const float4*>(tile + Staging::offset(slice.row % kBlockM, slice.first + 4));
    }
    store(p.dq, b, h, lo, hi, p.softmax_scale);
  } else {
    if (bh >= p.batch * p.heads_kv) return;
    if (slice.row >= (p.sequences != nullptr ? p.num_kv_tiles * kBlockN : p.mask.seqlen_k)) return;
    at = sequence_row<kBlockN>(p.kv_tile_sequence, p.sequences, slice.row, p.mask.seqlen_k, true);
    if (at.local >= at.length) return;
    const int b = bh / p.heads_kv, hk = bh % p.heads_kv;
    if (at.seq != nullptr) {
      // Varlen: this slice runs for every sequence. One without queries has no template and gets dK = dV = 0; one
      // whose template keeps dK / dV in registers had them stored by the main kernel.
      if (at.seq->template_index < 0) {
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        store(p.dk, b, hk, zero, zero, 1.f);
        if (has_v) store(p.dv, b, hk, zero, zero, 1.f);
        return;
      }
      if (!p.templates[at.seq->template_index].split_dkv) return;
    }
    const int64_t row = int64_t(bh) * (int64_t(p.num_kv_tiles) * kBlockN) + slice.row;
    // Already times softmax_scale.
    const float* dk = p.dk_accum + row * kHeadDim + slice.first;
    store(p.dk, b, hk, *reinterpret_cast<const float4*>(dk), *reinterpret_cast<const float4*>(dk + 4), 1.f);
    if (has_v) {
      const float* dv = p.dv_accum + row * kHeadDimV + slice.first;
      store(p.dv, b, hk, *reinterpret_cast<const float4*>(dv), *reinterpret_cast<const float4*>(dv + 4), 1.f);
    }
  }
}

}  // namespace dash::hopper::bwd
