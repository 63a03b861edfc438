// SPDX-License-Identifier: Apache-2.0
// bwd_wgmma_launch.cuh — host side of the TMA + wgmma backward (head dims 64 and 128): TMA descriptors
// over the caller's strided Q / dO / K / V, then the same three launches as run_bwd_sm90 (the shared
// bwd_preprocess and bwd_convert kernels around bwd_wgmma_main), cooperative when the plan needs co-residency.
// Included only by the instantiation files bwd_wgmma_hdim{64,128}_{bf16,fp16}.cu.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "bwd_sm90_launch.cuh"  // the launch steps shared with the mma.sync kernel
#include "bwd_wgmma_dispatch.h"
#include "bwd_wgmma_kernel.cuh"
#include "tma_host.cuh"

namespace dash::cuda::bwd {

template <int kHeadDim, dash_dtype kDtype>
dash_status bwd_wgmma_max_coresident(int32_t& max_ctas, std::string& error) {
  using Config = wgmma::WgConfig<kHeadDim, kDtype>;
  return max_coresident_ctas(wgmma::bwd_wgmma_main<Config>, Config::kThreads, wgmma::wg_smem_bytes<Config>(),
                             "bwd_wgmma_main", max_ctas, error);
}

template <int kHeadDim, dash_dtype kDtype>
dash_status run_bwd_wgmma(BwdParams const& params, int32_t num_ctas, bool cooperative, cudaStream_t stream,
                          std::string& error) {
  using namespace cute;
  using Config = wgmma::WgConfig<kHeadDim, kDtype>;
  using StdElement = typename Config::StdElement;

  // TMA descriptors over the caller's strided Q / dO / K / V.
  auto gQ = tma::make_gmem_tensor<Config>(params.q, params.seqlen_q, params.heads_q, params.batch);
  auto gdO = tma::make_gmem_tensor<Config>(params.dout, params.seqlen_q, params.heads_q, params.batch);
  auto gK = tma::make_gmem_tensor<Config>(params.k, params.seqlen_k, params.heads_kv, params.batch);
  auto gV = tma::make_gmem_tensor<Config>(params.v, params.seqlen_k, params.heads_kv, params.batch);
  wgmma::WgParams<Config> wp{
      params,
      make_tma_copy(SM90_TMA_LOAD{}, gQ, typename Config::SmemLayoutQStage{}),
      make_tma_copy(SM90_TMA_LOAD{}, gdO, typename Config::SmemLayoutQStage{}),
      make_tma_copy(SM90_TMA_LOAD{}, gK, typename Config::SmemLayoutKV{}),
      make_tma_copy(SM90_TMA_LOAD{}, gV, typename Config::SmemLayoutKV{}),
      gQ.shape(),
      gK.shape(),
  };
  dash_status s = tma::check_descriptors({{"q", wp.tma_q.get_tma_descriptor()},
                                          {"dout", wp.tma_do.get_tma_descriptor()},
                                          {"k", wp.tma_k.get_tma_descriptor()},
                                          {"v", wp.tma_v.get_tma_descriptor()}},
                                         error);
  // Preprocess and convert are shared with the mma.sync kernel (bwd_sm90_launch.cuh).
  if (s == DASH_OK) s = launch_bwd_preprocess<kHeadDim, StdElement>(params, stream, error);
  if (s == DASH_OK) {
    s = launch_bwd_main(wgmma::bwd_wgmma_main<Config>, wp, num_ctas, Config::kThreads, wgmma::wg_smem_bytes<Config>(),
                        cooperative, "bwd_wgmma_main", stream, error);
  }
  if (s == DASH_OK) s = launch_bwd_convert<kHeadDim, StdElement>(params, stream, error);
  return s;
}

}  // namespace dash::cuda::bwd

#define DASH_INSTANTIATE_BWD_WGMMA(HDIM, DTYPE)                                                                 \
  template dash_status dash::cuda::bwd::run_bwd_wgmma<HDIM, DTYPE>(dash::cuda::bwd::BwdParams const&, int32_t, \
                                                                   bool, cudaStream_t, std::string&);          \
  template dash_status dash::cuda::bwd::bwd_wgmma_max_coresident<HDIM, DTYPE>(int32_t&, std::string&);
