// SPDX-License-Identifier: Apache-2.0
// bwd_sm90_launch.cuh — host side of the backward kernels for one (head dim, dtype): launches preprocess,
// the persistent plan-executing main kernel (cooperatively when the plan needs co-residency) and convert on
// the caller's stream. Included only by the per-instantiation files bwd_sm90_hdim*_*.cu. Validation and the
// zeroing of the workspace live in bwd_api.cpp.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "bwd_sm90_kernel.cuh"
#include "bwd_sm90_params.h"

namespace dash::cuda::bwd {

template <dash_dtype kDtype>
struct BwdElementOf;
template <>
struct BwdElementOf<DASH_DTYPE_BF16> {
  using type = __nv_bfloat16;
};
template <>
struct BwdElementOf<DASH_DTYPE_FP16> {
  using type = __half;
};

namespace detail {
inline dash_status cuda_fail(std::string& error, const std::string& what, cudaError_t status) {
  error = what + ": " + cudaGetErrorString(status);
  return DASH_ERROR_CUDA;
}
}  // namespace detail

template <int kHeadDim, dash_dtype kDtype>
dash_status bwd_sm90_max_coresident(int32_t& max_ctas, std::string& error) {
  using Element = typename BwdElementOf<kDtype>::type;
  auto kernel = bwd_main<kHeadDim, Element>;
  const int smem_bytes = int(sizeof(BwdSmem<kHeadDim, Element>));
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaFuncSetAttribute(bwd_main smem)", status);
  int per_sm = 0, device = 0, sms = 0;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem_bytes);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", status);
  status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaDeviceGetAttribute(MultiProcessorCount)", status);
  max_ctas = per_sm * sms;
  return DASH_OK;
}

template <int kHeadDim, dash_dtype kDtype>
dash_status run_bwd_sm90(BwdParams const& params, int32_t num_ctas, bool cooperative, cudaStream_t stream,
                         std::string& error) {
  using Element = typename BwdElementOf<kDtype>::type;
  constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  cudaError_t status;

  // 1. delta and LSE2, per padded query row.
  {
    const dim3 grid(unsigned((params.num_q_tiles * kBlockM + 7) / 8), unsigned(params.batch * params.heads_q));
    bwd_preprocess<kHeadDim, Element><<<grid, 256, 0, stream>>>(params);
    if ((status = cudaGetLastError()) != cudaSuccess) return detail::cuda_fail(error, "launch of bwd_preprocess", status);
  }

  // 2. The plan-executing kernel.
  {
    auto kernel = bwd_main<kHeadDim, Element>;
    const int smem_bytes = int(sizeof(BwdSmem<kHeadDim, Element>));
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (status != cudaSuccess) return detail::cuda_fail(error, "cudaFuncSetAttribute(bwd_main smem)", status);
    if (cooperative) {
      // Co-residency of all num_ctas CTAs is what the plan's forward waits need (docs/DEADLOCK.md); the
      // host checked num_ctas against the occupancy limit before calling.
      void* args[] = {const_cast<BwdParams*>(&params)};
      status = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(unsigned(num_ctas)),
                                           dim3(kThreads), args, size_t(smem_bytes), stream);
      if (status != cudaSuccess) return detail::cuda_fail(error, "cudaLaunchCooperativeKernel(bwd_main)", status);
    } else {
      kernel<<<unsigned(num_ctas), kThreads, smem_bytes, stream>>>(params);
      if ((status = cudaGetLastError()) != cudaSuccess) return detail::cuda_fail(error, "launch of bwd_main", status);
    }
  }

  // 3. fp32 accumulators -> outputs.
  {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    bwd_convert<kHeadDim, Element><<<unsigned(sms * 8), 256, 0, stream>>>(params);
    if ((status = cudaGetLastError()) != cudaSuccess) return detail::cuda_fail(error, "launch of bwd_convert", status);
  }
  return DASH_OK;
}

}  // namespace dash::cuda::bwd

#define DASH_INSTANTIATE_BWD_SM90(HDIM, DTYPE)                                                                 \
  template dash_status dash::cuda::bwd::run_bwd_sm90<HDIM, DTYPE>(dash::cuda::bwd::BwdParams const&, int32_t, \
                                                                  bool, cudaStream_t, std::string&);          \
  template dash_status dash::cuda::bwd::bwd_sm90_max_coresident<HDIM, DTYPE>(int32_t&, std::string&);
