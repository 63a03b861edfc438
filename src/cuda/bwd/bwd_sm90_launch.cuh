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

// The launch steps both backward main kernels share (this file's bwd_main and bwd_wgmma_main).

// Most CTAs of `kernel` (threads, dynamic shared memory) that can be co-resident on the current device.
template <class Kernel>
dash_status max_coresident_ctas(Kernel kernel, int threads, int smem_bytes, char const* name, int32_t& max_ctas,
                                std::string& error) {
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (status != cudaSuccess) return detail::cuda_fail(error, std::string("cudaFuncSetAttribute(") + name + " smem)", status);
  int per_sm = 0, device = 0, sms = 0;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", status);
  status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaDeviceGetAttribute(MultiProcessorCount)", status);
  max_ctas = per_sm * sms;
  return DASH_OK;
}

// 1. delta and LSE2, per padded query row.
template <int kHeadDim, class Element>
dash_status launch_bwd_preprocess(BwdParams const& params, cudaStream_t stream, std::string& error) {
  constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  const dim3 grid(unsigned((params.num_q_tiles * kBlockM + 7) / 8), unsigned(params.batch * params.heads_q));
  bwd_preprocess<kHeadDim, Element><<<grid, 256, 0, stream>>>(params);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) {
    return detail::cuda_fail(error, "launch of bwd_preprocess", status);
  }
  return DASH_OK;
}

// 2. The plan-executing main kernel, persistent over the plan's tickets: cooperatively when the plan's forward
// waits need all num_ctas CTAs co-resident (docs/DEADLOCK.md; the host checked num_ctas against
// max_coresident_ctas before calling).
template <class Kernel, class Params>
dash_status launch_bwd_main(Kernel kernel, Params const& params, int32_t num_ctas, int threads, int smem_bytes,
                            bool cooperative, char const* name, cudaStream_t stream, std::string& error) {
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (status != cudaSuccess) return detail::cuda_fail(error, std::string("cudaFuncSetAttribute(") + name + " smem)", status);
  if (cooperative) {
    void* args[] = {const_cast<Params*>(&params)};
    status = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(unsigned(num_ctas)),
                                         dim3(unsigned(threads)), args, size_t(smem_bytes), stream);
    if (status != cudaSuccess) return detail::cuda_fail(error, std::string("cudaLaunchCooperativeKernel(") + name + ")", status);
  } else {
    kernel<<<unsigned(num_ctas), unsigned(threads), smem_bytes, stream>>>(params);
    if ((status = cudaGetLastError()) != cudaSuccess) return detail::cuda_fail(error, std::string("launch of ") + name, status);
  }
  return DASH_OK;
}

// 3. fp32 accumulators -> outputs.
template <int kHeadDim, class Element>
dash_status launch_bwd_convert(BwdParams const& params, cudaStream_t stream, std::string& error) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  bwd_convert<kHeadDim, Element><<<unsigned(sms * 8), 256, 0, stream>>>(params);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) {
    return detail::cuda_fail(error, "launch of bwd_convert", status);
  }
  return DASH_OK;
}

template <int kHeadDim, dash_dtype kDtype>
dash_status bwd_sm90_max_coresident(int32_t& max_ctas, std::string& error) {
  using Element = typename BwdElementOf<kDtype>::type;
  return max_coresident_ctas(bwd_main<kHeadDim, Element>, kThreads, int(sizeof(BwdSmem<kHeadDim, Element>)),
                             "bwd_main", max_ctas, error);
}

template <int kHeadDim, dash_dtype kDtype>
dash_status run_bwd_sm90(BwdParams const& params, int32_t num_ctas, bool cooperative, cudaStream_t stream,
                         std::string& error) {
  using Element = typename BwdElementOf<kDtype>::type;
  dash_status s = launch_bwd_preprocess<kHeadDim, Element>(params, stream, error);
  if (s == DASH_OK) {
    s = launch_bwd_main(bwd_main<kHeadDim, Element>, params, num_ctas, kThreads,
                        int(sizeof(BwdSmem<kHeadDim, Element>)), cooperative, "bwd_main", stream, error);
  }
  if (s == DASH_OK) s = launch_bwd_convert<kHeadDim, Element>(params, stream, error);
  return s;
}

}  // namespace dash::cuda::bwd

#define DASH_INSTANTIATE_BWD_SM90(HDIM, DTYPE)                                                                 \
  template dash_status dash::cuda::bwd::run_bwd_sm90<HDIM, DTYPE>(dash::cuda::bwd::BwdParams const&, int32_t, \
                                                                  bool, cudaStream_t, std::string&);          \
  template dash_status dash::cuda::bwd::bwd_sm90_max_coresident<HDIM, DTYPE>(int32_t&, std::string&);
