// SPDX-License-Identifier: Apache-2.0
// bwd_wgmma_launch.cuh — host side of the TMA + wgmma backward (head dim 128): TMA descriptors
// over the caller's strided Q / dO / K / V, then the same three launches as run_bwd_sm90 (the shared
// bwd_preprocess and bwd_convert kernels around bwd_wgmma_main), cooperative when the plan needs co-residency.
// Included only by bwd_wgmma_hdim128_{bf16,fp16}.cu.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "bwd_sm90_launch.cuh"  // BwdElementOf, detail::cuda_fail, bwd_preprocess / bwd_convert via the kernel header
#include "bwd_wgmma_dispatch.h"
#include "bwd_wgmma_kernel.cuh"

namespace dash::cuda::bwd {

namespace wgmma_detail {

template <class Config>
auto make_gmem(dash_tensor const& t, int seqlen, int heads, int batch) {
  using namespace cute;
  using Element = typename Config::Element;
  return make_tensor(make_gmem_ptr(static_cast<Element*>(t.data)),
                     make_layout(make_shape(int32_t(seqlen), Int<Config::kHeadDim>{}, int32_t(heads), int32_t(batch)),
                                 make_stride(int64_t(t.seq_stride), _1{}, int64_t(t.head_stride),
                                             int64_t(t.batch_stride))));
}

inline bool descriptor_is_zero(void const* descriptor, size_t bytes) {
  unsigned char const* p = static_cast<unsigned char const*>(descriptor);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace wgmma_detail

template <dash_dtype kDtype>
dash_status bwd_wgmma_hdim128_max_coresident(int32_t& max_ctas, std::string& error) {
  using Config = wgmma::WgConfig<kDtype>;
  auto kernel = wgmma::bwd_wgmma_main<Config>;
  const int smem_bytes = wgmma::wg_smem_bytes<Config>();
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaFuncSetAttribute(bwd_wgmma_main smem)", status);
  int per_sm = 0, device = 0, sms = 0;
  status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Config::kThreads, smem_bytes);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", status);
  status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return detail::cuda_fail(error, "cudaDeviceGetAttribute(MultiProcessorCount)", status);
  max_ctas = per_sm * sms;
  return DASH_OK;
}

template <dash_dtype kDtype>
dash_status run_bwd_wgmma_hdim128(BwdParams const& params, int32_t num_ctas, bool cooperative, cudaStream_t stream,
                                  std::string& error) {
  using namespace cute;
  using Config = wgmma::WgConfig<kDtype>;
  using StdElement = typename Config::StdElement;
  constexpr int kHeadDim = Config::kHeadDim;
  constexpr int kBlockM = Config::kBlockM;
  cudaError_t status;

  // 1. delta and LSE2 (shared with the mma.sync kernel).
  {
    const dim3 grid(unsigned((params.num_q_tiles * kBlockM + 7) / 8), unsigned(params.batch * params.heads_q));
    bwd_preprocess<kHeadDim, StdElement><<<grid, 256, 0, stream>>>(params);
    if ((status = cudaGetLastError()) != cudaSuccess) return detail::cuda_fail(error, "launch of bwd_preprocess", status);
  }

  // 2. The plan-executing kernel, TMA + wgmma.
  {
    auto gQ = wgmma_detail::make_gmem<Config>(params.q, params.seqlen_q, params.heads_q, params.batch);
    auto gdO = wgmma_detail::make_gmem<Config>(params.dout, params.seqlen_q, params.heads_q, params.batch);
    auto gK = wgmma_detail::make_gmem<Config>(params.k, params.seqlen_k, params.heads_kv, params.batch);
    auto gV = wgmma_detail::make_gmem<Config>(params.v, params.seqlen_k, params.heads_kv, params.batch);
    wgmma::WgParams<Config> wp{
        params,
        make_tma_copy(SM90_TMA_LOAD{}, gQ, typename Config::SmemLayoutQStage{}),
        make_tma_copy(SM90_TMA_LOAD{}, gdO, typename Config::SmemLayoutQStage{}),
        make_tma_copy(SM90_TMA_LOAD{}, gK, typename Config::SmemLayoutKV{}),
        make_tma_copy(SM90_TMA_LOAD{}, gV, typename Config::SmemLayoutKV{}),
        gQ.shape(),
        gK.shape(),
    };
    struct Named {
      char const* name;
      void const* descriptor;
    };
    Named const descriptors[] = {{"q", wp.tma_q.get_tma_descriptor()},
                                 {"dout", wp.tma_do.get_tma_descriptor()},
                                 {"k", wp.tma_k.get_tma_descriptor()},
                                 {"v", wp.tma_v.get_tma_descriptor()}};
    for (Named const& d : descriptors) {
      // CuTe leaves a descriptor zeroed when cuTensorMapEncodeTiled fails (its assert is compiled out).
      if (wgmma_detail::descriptor_is_zero(d.descriptor, sizeof(cute::TmaDescriptor))) {
        error = std::string(d.name) + ": cuTensorMapEncodeTiled rejected the tensor (TMA descriptor not encoded)";
        return DASH_ERROR_CUDA;
      }
    }
    auto kernel = wgmma::bwd_wgmma_main<Config>;
    const int smem_bytes = wgmma::wg_smem_bytes<Config>();
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (status != cudaSuccess) return detail::cuda_fail(error, "cudaFuncSetAttribute(bwd_wgmma_main smem)", status);
    if (cooperative) {
      // Co-residency of all num_ctas CTAs is what the plan's forward waits need (docs/DEADLOCK.md); the
      // host checked num_ctas against this kernel's occupancy limit before calling.
      void* args[] = {&wp};
      status = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(unsigned(num_ctas)),
                                           dim3(Config::kThreads), args, size_t(smem_bytes), stream);
      if (status != cudaSuccess) return detail::cuda_fail(error, "cudaLaunchCooperativeKernel(bwd_wgmma_main)", status);
    } else {
      kernel<<<unsigned(num_ctas), Config::kThreads, smem_bytes, stream>>>(wp);
      if ((status = cudaGetLastError()) != cudaSuccess) return detail::cuda_fail(error, "launch of bwd_wgmma_main", status);
    }
  }

  // 3. fp32 accumulators -> outputs (shared with the mma.sync kernel).
  {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    bwd_convert<kHeadDim, StdElement><<<unsigned(sms * 8), 256, 0, stream>>>(params);
    if ((status = cudaGetLastError()) != cudaSuccess) return detail::cuda_fail(error, "launch of bwd_convert", status);
  }
  return DASH_OK;
}

}  // namespace dash::cuda::bwd

#define DASH_INSTANTIATE_BWD_WGMMA_HDIM128(DTYPE)                                                          \
  template dash_status dash::cuda::bwd::run_bwd_wgmma_hdim128<DTYPE>(dash::cuda::bwd::BwdParams const&,  \
                                                                     int32_t, bool, cudaStream_t,          \
                                                                     std::string&);                        \
  template dash_status dash::cuda::bwd::bwd_wgmma_hdim128_max_coresident<DTYPE>(int32_t&, std::string&);
