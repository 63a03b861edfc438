// SPDX-License-Identifier: Apache-2.0
// fwd_dispatch.h — the seam between the host API (fwd_api.cpp, plain C++) and the compiled kernel
// instantiations (instantiations/*.cu). Holds no CUDA device code and no CuTe types.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"

namespace dash::cuda {

// A forward call that passed validation: strides of size-1 dimensions are already replaced by valid ones
// and softmax_scale is resolved (never 0).
struct FwdLaunch {
  dash_fwd_args args;
  cudaStream_t stream;
};

// Builds the TMA descriptors and launches the sm_90a kernel for one (head dim, dtype). On failure returns
// DASH_ERROR_CUDA and sets `error` to a message naming the failing step.
template <int kHeadDim, dash_dtype kDtype>
dash_status run_fwd_sm90(FwdLaunch const& launch, std::string& error);

// Dynamic shared memory the instantiation asks for (bytes); for tests and notes.
template <int kHeadDim, dash_dtype kDtype>
int fwd_sm90_smem_bytes();

#define DASH_DECLARE_FWD_SM90(HDIM, DTYPE)                                                 \
  extern template dash_status run_fwd_sm90<HDIM, DTYPE>(FwdLaunch const&, std::string&); \
  extern template int fwd_sm90_smem_bytes<HDIM, DTYPE>();
DASH_DECLARE_FWD_SM90(64, DASH_DTYPE_BF16)
DASH_DECLARE_FWD_SM90(64, DASH_DTYPE_FP16)
DASH_DECLARE_FWD_SM90(128, DASH_DTYPE_BF16)
DASH_DECLARE_FWD_SM90(128, DASH_DTYPE_FP16)
#undef DASH_DECLARE_FWD_SM90

}  // namespace dash::cuda
