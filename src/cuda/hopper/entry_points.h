// SPDX-License-Identifier: Apache-2.0
// hopper/entry_points.h — the host functions of the Hopper (sm_90a) kernels, one instantiation per row of
// dash/kernel_table.hpp and dtype (generated files, src/cuda/CMakeLists.txt). Plain C++: arch_dispatch.cpp
// calls them without seeing CUDA device code or CuTe.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "bwd/bwd_params.h"
#include "dash/dash_attn.h"
#include "dash/kernel_table.hpp"
#include "fwd_launch_args.h"

namespace dash::hopper {

namespace fwd {
// Builds the TMA descriptors and launches the forward kernel for one (head dims, dtype). On failure returns
// DASH_ERROR_CUDA (or UNSUPPORTED) and sets `error` to a message naming the failing step.
template <int kHeadDim, int kHeadDimV, dash_dtype kDtype>
dash_status run(kernels::FwdLaunch const& launch, std::string& error);
// Dynamic shared memory the instantiation asks for (bytes).
template <int kHeadDim, int kHeadDimV, dash_dtype kDtype>
int smem_bytes();
}  // namespace fwd

namespace bwd {
// Launches preprocess, the plan-executing main kernel (num_ctas persistent CTAs, a plain launch: docs/DEADLOCK.md)
// and convert on `stream` (of `device`, the current device). Only for rows with a backward (has_backward).
template <int kHeadDim, int kHeadDimV, dash_dtype kDtype>
dash_status run(kernels::bwd::BwdParams const& params, int32_t num_ctas, int device, cudaStream_t stream,
                std::string& error);
}  // namespace bwd

// Every row declares its forward; a row without a backward kernel never names bwd::run (arch_dispatch.cpp), so the
// declaration of one is harmless.
#define DASH_DECLARE_HOPPER_KERNELS_FOR(HDIM, HDIM_V, DTYPE)                                                  \
  extern template dash_status fwd::run<HDIM, HDIM_V, DTYPE>(kernels::FwdLaunch const&, std::string&);        \
  extern template int fwd::smem_bytes<HDIM, HDIM_V, DTYPE>();
#define DASH_DECLARE_HOPPER_KERNELS(HDIM, HDIM_V, ...)                 \
  DASH_DECLARE_HOPPER_KERNELS_FOR(HDIM, HDIM_V, DASH_DTYPE_BF16)       \
  DASH_DECLARE_HOPPER_KERNELS_FOR(HDIM, HDIM_V, DASH_DTYPE_FP16)
DASH_KERNEL_TABLE(DASH_DECLARE_HOPPER_KERNELS)
#undef DASH_DECLARE_HOPPER_KERNELS
#undef DASH_DECLARE_HOPPER_KERNELS_FOR

}  // namespace dash::hopper
