// SPDX-License-Identifier: Apache-2.0
// One instantiation of the TMA + wgmma backward (head dim 128, bf16); one file each so they compile in parallel.
#include "bwd_wgmma_launch.cuh"

DASH_INSTANTIATE_BWD_WGMMA(128, DASH_DTYPE_BF16)
