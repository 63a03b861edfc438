// SPDX-License-Identifier: Apache-2.0
// hopper/element_types.cuh — the 16-bit element types of a dash_dtype, as CuTe names them (wgmma, TMA) and as
// CUDA names them (global stores, conversions).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/numeric/numeric_types.hpp>

#include "dash/dash_attn.h"

namespace dash::hopper {

template <dash_dtype kDtype>
struct CuteElement;
template <>
struct CuteElement<DASH_DTYPE_BF16> {
  using type = cute::bfloat16_t;
};
template <>
struct CuteElement<DASH_DTYPE_FP16> {
  using type = cute::half_t;
};

template <dash_dtype kDtype>
struct CudaElement;
template <>
struct CudaElement<DASH_DTYPE_BF16> {
  using type = __nv_bfloat16;
};
template <>
struct CudaElement<DASH_DTYPE_FP16> {
  using type = __half;
};

}  // namespace dash::hopper
