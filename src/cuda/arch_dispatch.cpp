// SPDX-License-Identifier: Apache-2.0
// arch_dispatch.cpp — see arch_dispatch.h.
#include "arch_dispatch.h"

#include <string>
#include <type_traits>
#include <utility>

#include "dash/kernel_table.hpp"
#include "hopper/entry_points.h"

namespace dash::kernels {
namespace {

// Calls f(row, dtype) with the row of the kernel table for (head_dim, head_dim_v) (a KernelTableRow constant) and
// the dtype as compile-time constants; DASH_ERROR_UNSUPPORTED if no row holds the pair (the entry points check the
// head dims first).
template <class F, size_t... Row>
dash_status with_row(int32_t head_dim, int32_t head_dim_v, dash_dtype dtype, F&& f, std::index_sequence<Row...>) {
  dash_status status = DASH_ERROR_UNSUPPORTED;
  if (head_dim_v == 0) head_dim_v = head_dim;
  auto try_row = [&](auto row) {
    if (decltype(row)::value.head_dim != head_dim || decltype(row)::value.head_dim_v != head_dim_v) return;
    using Bf16 = std::integral_constant<dash_dtype, DASH_DTYPE_BF16>;
    using Fp16 = std::integral_constant<dash_dtype, DASH_DTYPE_FP16>;
    status = dtype == DASH_DTYPE_BF16 ? f(row, Bf16{}) : f(row, Fp16{});
  };
  (try_row(std::integral_constant<KernelTableRow, kKernelTable[Row]>{}), ...);
  return status;
}
template <class F>
dash_status with_instantiation(int32_t head_dim, int32_t head_dim_v, dash_dtype dtype, F&& f) {
  return with_row(head_dim, head_dim_v, dtype, std::forward<F>(f), std::make_index_sequence<kKernelTableRows>{});
}

}  // namespace

dash_status current_kernel_family(const char* what, KernelFamily& family, std::string& error) {
  int device = 0, major = 0, minor = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error the failed query recorded
    error = std::string("cudaDeviceGetAttribute(compute capability): ") + cudaGetErrorString(status);
    return DASH_ERROR_CUDA;
  }
  if (major == 9 && minor == 0) {
    family = KernelFamily::kHopper;
    return DASH_OK;
  }
  error = "device " + std::to_string(device) + ": compute capability " + std::to_string(major) + "." +
          std::to_string(minor) + "; the " + what + " is built for sm_90a (Hopper) only";
  return DASH_ERROR_UNSUPPORTED;
}

dash_status run_forward(KernelFamily family, const FwdLaunch& launch, std::string& error) {
  switch (family) {
    case KernelFamily::kHopper:
      return with_instantiation(launch.args.problem.head_dim, launch.args.problem.head_dim_v, launch.args.dtype,
                                [&](auto row, auto dt) {
                                  constexpr KernelTableRow kRow = decltype(row)::value;
                                  return hopper::fwd::run<kRow.head_dim, kRow.head_dim_v, decltype(dt)::value>(
                                      launch, error);
                                });
  }
  error = "forward: unknown kernel family";
  return DASH_ERROR_UNSUPPORTED;
}

dash_status run_backward(KernelFamily family, const bwd::BwdParams& params, int32_t head_dim, int32_t head_dim_v,
                         dash_dtype dtype, int32_t num_ctas, int device, cudaStream_t stream, std::string& error) {
  switch (family) {
    case KernelFamily::kHopper:
      return with_instantiation(head_dim, head_dim_v, dtype, [&](auto row, auto dt) {
        constexpr KernelTableRow kRow = decltype(row)::value;
        if constexpr (has_backward(kRow)) {
          return hopper::bwd::run<kRow.head_dim, kRow.head_dim_v, decltype(dt)::value>(params, num_ctas, device,
                                                                                         stream, error);
        } else {
          error = "backward: head dim " + std::to_string(kRow.head_dim) + " has a forward kernel only";
          return DASH_ERROR_UNSUPPORTED;
        }
      });
  }
  error = "backward: unknown kernel family";
  return DASH_ERROR_UNSUPPORTED;
}

}  // namespace dash::kernels
