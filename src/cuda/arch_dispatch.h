// SPDX-License-Identifier: Apache-2.0
// arch_dispatch.h — the one place that maps the current GPU to a family of compiled kernels and a (head dim,
// dtype) to its instantiation (the rows of dash/kernel_table.hpp). The entry points (fwd_api.cpp, bwd/) ask it
// and know no architecture. A Blackwell family would be one more case here and its own src/cuda/<arch>/ tree.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "bwd/bwd_params.h"
#include "dash/dash_attn.h"
#include "fwd_launch_args.h"

namespace dash::kernels {

enum class KernelFamily {
  kHopper,  // sm_90a: TMA, wgmma, warp specialisation (src/cuda/hopper/)
};

// The family that runs on the current device, or DASH_ERROR_UNSUPPORTED naming the device and its compute
// capability (DASH_ERROR_CUDA if the device cannot be queried). `what` names the caller in the message.
dash_status current_kernel_family(const char* what, KernelFamily& family, std::string& error);

// The forward of `launch`'s (head dim, dtype) on `family`.
dash_status run_forward(KernelFamily family, const FwdLaunch& launch, std::string& error);
// Preprocess, main (a plain launch of num_ctas persistent CTAs) and convert kernels of the backward of (head_dim,
// head_dim_v; 0: equal), on the current device `device`.
dash_status run_backward(KernelFamily family, const bwd::BwdParams& params, int32_t head_dim, int32_t head_dim_v,
                         dash_dtype dtype, int32_t num_ctas, int device, cudaStream_t stream, std::string& error);

}  // namespace dash::kernels
