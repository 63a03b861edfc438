// SPDX-License-Identifier: Apache-2.0
// One instantiation of the Hopper backward kernels (head dim 64, fp16); one file each so they compile in parallel.
#include "bwd_sm90_launch.cuh"

DASH_INSTANTIATE_BWD_SM90(64, DASH_DTYPE_FP16)
