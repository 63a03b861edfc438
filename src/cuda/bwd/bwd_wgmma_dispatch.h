// SPDX-License-Identifier: Apache-2.0
// bwd_wgmma_dispatch.h — entry points of the TMA + wgmma backward main kernel (head dims 64 and 128).
// Same contract as run_bwd_sm90 / bwd_sm90_max_coresident (bwd_sm90_params.h): preprocess, main, convert on
// `stream`, the same BwdParams and workspace. No device code here.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "bwd_sm90_params.h"

namespace dash::cuda::bwd {

template <int kHeadDim, dash_dtype kDtype>
dash_status run_bwd_wgmma(BwdParams const& params, int32_t num_ctas, bool cooperative, cudaStream_t stream,
                          std::string& error);
template <int kHeadDim, dash_dtype kDtype>
dash_status bwd_wgmma_max_coresident(int32_t& max_ctas, std::string& error);

#define DASH_DECLARE_BWD_WGMMA(HDIM, DTYPE)                                                                 \
  extern template dash_status run_bwd_wgmma<HDIM, DTYPE>(BwdParams const&, int32_t, bool, cudaStream_t,   \
                                                          std::string&);                                   \
  extern template dash_status bwd_wgmma_max_coresident<HDIM, DTYPE>(int32_t&, std::string&);
DASH_DECLARE_BWD_WGMMA(64, DASH_DTYPE_BF16)
DASH_DECLARE_BWD_WGMMA(64, DASH_DTYPE_FP16)
DASH_DECLARE_BWD_WGMMA(128, DASH_DTYPE_BF16)
DASH_DECLARE_BWD_WGMMA(128, DASH_DTYPE_FP16)
#undef DASH_DECLARE_BWD_WGMMA

}  // namespace dash::cuda::bwd
