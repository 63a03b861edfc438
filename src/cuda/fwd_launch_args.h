// SPDX-License-Identifier: Apache-2.0
// fwd_launch_args.h — what the forward's host API (fwd_api.cpp) hands a forward kernel of any architecture: a
// validated call. No device code, no CuTe types.
#pragma once

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"

namespace dash::kernels {

// A forward call that passed validation: strides of size-1 dimensions are already replaced by valid ones
// and softmax_scale is resolved (never 0).
struct FwdLaunch {
  dash_fwd_args args;
  cudaStream_t stream;
};

}  // namespace dash::kernels
