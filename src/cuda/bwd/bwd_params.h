// SPDX-License-Identifier: Apache-2.0
// bwd_sm90_params.h — the seam between the backward host API (bwd_api.cpp, plain C++) and the compiled
// backward kernels (bwd_sm90_*.cu): the kernel parameter block, the tile shapes, the workspace layout and
// the launch entry point. No device code here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"
#include "dash/plan_format.h"

namespace dash::cuda::bwd {

// Tile shapes the backward kernel is written for; they must equal dash::default_backward_tiles(head_dim),
// because the plan's tables are expressed in these tiles (the host refuses a plan with other tiles).
template <int kHeadDim>
struct BwdTiles {
  static constexpr int kBlockM = kHeadDim <= 64 ? 128 : 64;  // query rows per Q tile
  static constexpr int kBlockN = 128;                         // key rows per KV tile
};

// Everything the three backward kernels (preprocess, main, convert) read. Pointers to the plan tables
// point into the device copy of the plan blob.
struct BwdParams {
  // Inputs and outputs (element strides, head-dim stride 1), as validated by bwd_api.cpp.
  dash_tensor q, k, v, o, dout, dq, dk, dv;
  const float* lse;  // [batch, heads_q, seqlen_q], natural log, -inf for rows that see no key

  int32_t batch, heads_q, heads_kv, group_size, seqlen_q, seqlen_k;
  int32_t causal;
  float softmax_scale;
  float scale_log2;  // softmax_scale * log2(e)

  // Plan (device copy of the blob).
  const dash_item* items;
  const dash_segment* segments;
  const dash_visit* visits;
  const uint16_t* dq_count;
  const uint8_t* group_head_by_rank;
  int32_t items_per_unit;
  int32_t num_tickets;
  int32_t gqa_mode;     // dash_gqa_mode
  int32_t plan_flags;   // dash_plan_flags
  int32_t num_q_tiles, num_kv_tiles;

  // Modes.
  int32_t deterministic;  // 1: ordered dQ (and dK/dV) adds; 0: unordered atomic adds
  int32_t split_dkv;      // SPLIT_HEADS with group_size > 1: dK/dV go through fp32 accumulators

  // Workspace (bwd_workspace_layout).
  int32_t* ticket_counter;
  int32_t* dq_counters;   // [batch * heads_q * num_q_tiles]
  int32_t* dkv_counters;  // [batch * heads_kv * num_kv_tiles] (split_dkv only)
  float* delta;           // [batch * heads_q * num_q_tiles * kBlockM]
  float* lse_log2;        // same; +inf for rows past seqlen_q or rows with LSE = -inf (so P = 0 there)
  float* dq_accum;        // [batch * heads_q * num_q_tiles][kBlockM * head_dim], per tile in the staging
                          // layout swz_f32 (row-major, 4-float chunks XOR row & 7: bwd_sm90_kernel.cuh)
  float* dk_accum;        // [batch * heads_kv * num_kv_tiles * kBlockN][head_dim] (split_dkv only)
  float* dv_accum;

  // Testing: when non-null, the store warp writes (ticket << 32 | visit) into
  // order_log[accumulator * num_kv_tiles + rank] at the moment it acquires its turn.
  int64_t* order_log;
};

// Byte offsets of the workspace regions (each 256-byte aligned) for a problem and plan.
struct BwdWorkspaceLayout {
  size_t ticket = 0, dq_counters = 0, dkv_counters = 0, delta = 0, lse_log2 = 0, dq_accum = 0, dk_accum = 0,
         dv_accum = 0;
  size_t counters_end = 0;  // [0, counters_end) holds every counter: zeroed per call
  size_t total = 0;
};
BwdWorkspaceLayout bwd_workspace_layout(const dash_problem& problem, const dash_plan_header& header);

// Launches preprocess, main and convert kernels for one (head dim, dtype) on `stream`. `cooperative`
// asks for a co-resident launch (plans with forward waits). Returns DASH_ERROR_CUDA with `error` set on failure.
template <int kHeadDim, dash_dtype kDtype>
dash_status run_bwd_sm90(BwdParams const& params, int32_t num_ctas, bool cooperative, cudaStream_t stream,
                         std::string& error);

// Most CTAs of the main kernel that can be co-resident on the current device (occupancy x SMs).
template <int kHeadDim, dash_dtype kDtype>
dash_status bwd_sm90_max_coresident(int32_t& max_ctas, std::string& error);

#define DASH_DECLARE_BWD_SM90(HDIM, DTYPE)                                                                  \
  extern template dash_status run_bwd_sm90<HDIM, DTYPE>(BwdParams const&, int32_t, bool, cudaStream_t,    \
                                                         std::string&);                                    \
  extern template dash_status bwd_sm90_max_coresident<HDIM, DTYPE>(int32_t&, std::string&);
DASH_DECLARE_BWD_SM90(64, DASH_DTYPE_BF16)
DASH_DECLARE_BWD_SM90(64, DASH_DTYPE_FP16)
DASH_DECLARE_BWD_SM90(128, DASH_DTYPE_BF16)
DASH_DECLARE_BWD_SM90(128, DASH_DTYPE_FP16)
#undef DASH_DECLARE_BWD_SM90

}  // namespace dash::cuda::bwd
