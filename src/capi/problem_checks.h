// SPDX-License-Identifier: Apache-2.0
// problem_checks.h — the head-dim checks of dash_check_problem, for the entry points that check a call's tensors
// themselves (fwd_api.cpp, bwd/), so that every entry point refuses a pair in the same words. Defined in
// host_api.cpp.
#pragma once

#include "dash/dash_attn.h"

namespace dash::capi {

// The (head_dim, head_dim_v) pair of `problem` (head_dim >= 1, head_dim_v >= 0) is a row of the kernel table:
// DASH_OK, or DASH_ERROR_UNSUPPORTED with dash_last_error naming problem.head_dim (no row has that head dim) or
// problem.head_dim_v (a row has it, with another value head dim) and listing the pairs.
dash_status check_kernel_pair(const dash_problem& problem);

// The pair's row has a backward kernel: DASH_OK, or DASH_ERROR_UNSUPPORTED naming problem.head_dim ("256 has a
// forward kernel only in this build ..."). Call it after check_kernel_pair.
dash_status check_backward_kernel(const dash_problem& problem);

}  // namespace dash::capi
