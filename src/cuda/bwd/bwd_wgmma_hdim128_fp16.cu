// SPDX-License-Identifier: Apache-2.0
// TMA + wgmma backward, head dim 128, fp16.
#include "bwd_wgmma_launch.cuh"

DASH_INSTANTIATE_BWD_WGMMA_HDIM128(DASH_DTYPE_FP16)
