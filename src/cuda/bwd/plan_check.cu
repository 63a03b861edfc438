// SPDX-License-Identifier: Apache-2.0
// bwd/plan_check.cu — the check at the end of a plan copy queued on a stream (plan_handle.cpp, "Tables still being
// written"): the copy writes the blob's header without the plan magic when the template's build failed, and this
// kernel then stops the stream's work with a trap, so that no backward runs on tables that were never validated.
#include <cuda_runtime.h>

#include "api_error.h"
#include "bwd/plan_handle.h"
#include "cuda_errors.h"
#include "dash/plan_format.h"

namespace dash::kernels::bwd {
namespace {
__global__ void trap_unless_plan_magic(const dash_plan_header* header) {
  if (header->magic != DASH_PLAN_MAGIC) __trap();
}
}  // namespace

void load_plan_magic_check() {
  cudaFuncAttributes attributes;
  if (cudaFuncGetAttributes(&attributes, trap_unless_plan_magic) != cudaSuccess) cudaGetLastError();
}

dash_status launch_plan_magic_check(const void* device_blob, cudaStream_t stream) {
  trap_unless_plan_magic<<<1, 1, 0, stream>>>(static_cast<const dash_plan_header*>(device_blob));
  if (cudaError_t s = cudaGetLastError(); s != cudaSuccess) return cuda_fail("launch of the plan copy's check", s);
  return DASH_OK;
}
}  // namespace dash::kernels::bwd
