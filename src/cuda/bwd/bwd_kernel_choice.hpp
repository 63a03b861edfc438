// SPDX-License-Identifier: Apache-2.0
// bwd_kernel_choice.hpp — which backward main kernel runs a problem, from the value of the environment variable
// DASH_BWD_KERNEL and the head dim. Host-only and free of CUDA, so that the CPU tests cover every branch;
// bwd_api.cpp reads the variable once per process and calls this for every dash_bwd.
#pragma once

#include <cstdint>
#include <string>

#include "dash/dash_attn.h"

namespace dash::cuda::bwd {

enum class BwdKernel {
  kMma,    // mma.sync + cp.async (bwd_sm90_kernel.cuh): head dims 64 and 128
  kWgmma,  // TMA + wgmma (bwd_wgmma_kernel.cuh): head dim 128 only
};

// Unset or empty: the wgmma kernel for head dim 128, the mma.sync kernel otherwise (the wgmma kernel has no
// head-dim-64 tiling yet). "mma": the mma.sync kernel (A/B comparisons). "wgmma": the wgmma kernel, refused
// (DASH_ERROR_UNSUPPORTED) for other head dims. Anything else: DASH_ERROR_INVALID_ARGUMENT, since a typo must
// not silently run (or benchmark) another kernel. On error, `error` names the variable and its value.
inline dash_status select_backward_kernel(const std::string& env_value, int32_t head_dim, BwdKernel& kernel,
                                          std::string& error) {
  if (env_value.empty()) {
    kernel = head_dim == 128 ? BwdKernel::kWgmma : BwdKernel::kMma;
    return DASH_OK;
  }
  if (env_value == "mma") {
    kernel = BwdKernel::kMma;
    return DASH_OK;
  }
  if (env_value == "wgmma") {
    if (head_dim != 128) {
      error = "DASH_BWD_KERNEL=wgmma: the TMA + wgmma backward kernel supports head_dim 128 only (got " +
              std::to_string(head_dim) + "); unset DASH_BWD_KERNEL for the default kernel of each head dim";
      return DASH_ERROR_UNSUPPORTED;
    }
    kernel = BwdKernel::kWgmma;
    return DASH_OK;
  }
  error = "DASH_BWD_KERNEL=" + env_value + ": unknown backward kernel (use \"mma\" or \"wgmma\", or unset it)";
  return DASH_ERROR_INVALID_ARGUMENT;
}

}  // namespace dash::cuda::bwd
