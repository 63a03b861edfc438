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
struct FwdLaunch {
  dash_fwd_args args;
  void* workspace;  // kFwdWorkspaceBytes, 4-byte aligned: the kernels' work-tile counter
  cudaStream_t stream;
};

// The forward's device workspace: one int32 work-tile counter (the persistent kernel takes tiles from it),
// rounded up to 16 bytes.
inline constexpr size_t kFwdWorkspaceBytes = 16;

}  // namespace dash::kernels
