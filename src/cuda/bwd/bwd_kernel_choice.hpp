// SPDX-License-Identifier: Apache-2.0
// bwd_kernel_choice.hpp — which backward main kernel runs a problem, from the value of the environment variable
// DASH_BWD_KERNEL. Host-only and free of CUDA, so that the CPU tests cover every branch;
// bwd_api.cpp reads the variable once per process and calls this for every dash_bwd.
#pragma once

#include <string>

#include "dash/dash_attn.h"

namespace dash::cuda::bwd {

enum class BwdKernel {
  kMma,    // mma.sync + cp.async (bwd_sm90_kernel.cuh)
  kWgmma,  // TMA + wgmma (bwd_wgmma_kernel.cuh)
};

// Both kernels serve head dims 64 and 128 (dash_bwd refuses others before it asks). Unset, empty or "wgmma":
// the TMA + wgmma kernel. "mma": the mma.sync kernel (A/B comparisons). Anything else:
// DASH_ERROR_INVALID_ARGUMENT, since a typo must not silently run (or benchmark) another kernel; `error` then
// names the variable and its value.
inline dash_status select_backward_kernel(const std::string& env_value, BwdKernel& kernel, std::string& error) {
  if (env_value.empty() || env_value == "wgmma") {
    kernel = BwdKernel::kWgmma;
    return DASH_OK;
  }
  if (env_value == "mma") {
    kernel = BwdKernel::kMma;
    return DASH_OK;
  }
  error = "DASH_BWD_KERNEL=" + env_value + ": unknown backward kernel (use \"mma\" or \"wgmma\", or unset it)";
  return DASH_ERROR_INVALID_ARGUMENT;
}

}  // namespace dash::cuda::bwd
