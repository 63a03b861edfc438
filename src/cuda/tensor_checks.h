// SPDX-License-Identifier: Apache-2.0
// tensor_checks.h — the one check of a (batch, seqlen, heads, head_dim) tensor argument that the forward and the
// backward entry points share: pointer alignment and every stride the kernels' TMA descriptors and stores use.
// Every failure names the argument, e.g. "q.seq_stride: must be a multiple of 8 elements (16 bytes) for TMA".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "dash/dash_attn.h"

namespace dash::kernels {

// Checks `t` (named `name`) for a tensor of extents (batch, seqlen, heads, head_dim) with a contiguous last
// dimension, and replaces the strides of extent-1 dimensions, which are never used, by ones a TMA descriptor
// accepts (callers may pass anything there). Outputs must not overlap themselves (strides >= head_dim).
// DASH_OK, or DASH_ERROR_INVALID_ARGUMENT with `error` set.
dash_status check_tensor(const char* name, dash_tensor& t, int32_t batch, int32_t seqlen, int32_t heads,
                         int32_t head_dim, bool is_output, std::string& error);

// Checks that every pointer is device (or managed) memory: a CUDA query per pointer, so only the entry points
// whose host time allows it call this (the forward does).
dash_status check_device_pointers(std::initializer_list<std::pair<const char*, const void*>> pointers,
                                  std::string& error);

}  // namespace dash::kernels
