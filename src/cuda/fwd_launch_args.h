// SPDX-License-Identifier: Apache-2.0
// fwd_launch_args.h — what the forward's host API (fwd_api.cpp) hands a forward kernel of any architecture: a
// validated call. No device code, no CuTe types.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"

namespace dash::kernels {

// A forward call that passed validation: strides of size-1 dimensions are already replaced by valid ones
// and softmax_scale is resolved (never 0).
// A varlen pack's device tables for a launch (dash/plan_format.h, "varlen"); sequences == nullptr for fixed-length
// batches.
struct VarlenLaunch {
  const dash_pack_sequence* sequences = nullptr;  // processing order
  const int32_t* tile_chunks = nullptr;           // the forward's work-tile chunk table
  int32_t num_sequences = 0;
  int32_t total_q = 0;                            // rows of the packed q / o: the LSE's row stride per head
  int32_t num_tiles = 0;                          // the forward's work tiles
};

struct FwdLaunch {
  dash_fwd_args args;
  void* workspace;  // kFwdWorkspaceBytes, 4-byte aligned: the kernels' work-tile counter
  cudaStream_t stream;
  dash_pack_t pack;     // varlen only: the pack whose tables `varlen` points at
  VarlenLaunch varlen;
};

// The forward's device workspace: one int32 work-tile counter (the persistent kernel takes tiles from it),
// rounded up to 16 bytes.
inline constexpr size_t kFwdWorkspaceBytes = 16;

}  // namespace dash::kernels
