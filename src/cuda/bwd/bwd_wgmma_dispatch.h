// SPDX-License-Identifier: Apache-2.0
// bwd_wgmma_dispatch.h — entry points of the TMA + wgmma backward main kernel (head dim 128).
// Same contract as run_bwd_sm90 / bwd_sm90_max_coresident (bwd_sm90_params.h): preprocess, main, convert on
// `stream`, the same BwdParams and workspace. No device code here.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "bwd_sm90_params.h"

namespace dash::cuda::bwd {

template <dash_dtype kDtype>
dash_status run_bwd_wgmma_hdim128(BwdParams const& params, int32_t num_ctas, bool cooperative, cudaStream_t stream,
                                  std::string& error);
template <dash_dtype kDtype>
dash_status bwd_wgmma_hdim128_max_coresident(int32_t& max_ctas, std::string& error);

extern template dash_status run_bwd_wgmma_hdim128<DASH_DTYPE_BF16>(BwdParams const&, int32_t, bool, cudaStream_t,
                                                                   std::string&);
extern template dash_status run_bwd_wgmma_hdim128<DASH_DTYPE_FP16>(BwdParams const&, int32_t, bool, cudaStream_t,
                                                                   std::string&);
extern template dash_status bwd_wgmma_hdim128_max_coresident<DASH_DTYPE_BF16>(int32_t&, std::string&);
extern template dash_status bwd_wgmma_hdim128_max_coresident<DASH_DTYPE_FP16>(int32_t&, std::string&);

}  // namespace dash::cuda::bwd
