// SPDX-License-Identifier: Apache-2.0
// cuda_errors.h — turning a failed CUDA runtime call into the C ABI's error: DASH_ERROR_CUDA with a message that
// names the call and CUDA's error.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "api_error.h"

namespace dash::kernels {

inline dash_status cuda_fail(const char* what, cudaError_t status) {
  cudaGetLastError();  // clear the (non-sticky) error the failed call recorded, so later calls do not see it
  return capi::fail(DASH_ERROR_CUDA, std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace dash::kernels
