// SPDX-License-Identifier: Apache-2.0
// hopper/launch_host.cuh — host-side launch helpers shared by the forward and backward launchers.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"

namespace dash::hopper {

// A failed CUDA runtime call as the launcher's error (the C ABI adds the entry point's name). As the C ABI's own
// cuda_fail (cuda_errors.h) does, the non-sticky error the call recorded is cleared, so that the caller's next
// launch check (PyTorch's, say) does not report it as its own.
inline dash_status cuda_fail(std::string& error, const std::string& what, cudaError_t status) {
  cudaGetLastError();
  error = what + ": " + cudaGetErrorString(status);
  return DASH_ERROR_CUDA;
}

// The opt-in to more than 48 KB of dynamic shared memory is a property of the kernel function on its device: set
// once per device and kernel (a per-call cudaFuncSetAttribute was part of the host time per call). One bit per
// device; devices >= 64 set it on every call.
template <auto kKernel>
dash_status opt_in_dynamic_smem(int device, int bytes, char const* kernel_name, std::string& error) {
  static std::atomic<uint64_t> configured{0};
  uint64_t const bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit != 0 && (configured.load(std::memory_order_acquire) & bit) != 0) return DASH_OK;
  if (cudaError_t status = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      status != cudaSuccess) {
    return cuda_fail(error, std::string("cudaFuncSetAttribute(") + kernel_name + ", MaxDynamicSharedMemorySize = " +
                                std::to_string(bytes) + ")",
                     status);
  }
  configured.fetch_or(bit, std::memory_order_release);
  return DASH_OK;
}

}  // namespace dash::hopper
