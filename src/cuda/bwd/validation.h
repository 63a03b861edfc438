// SPDX-License-Identifier: Apache-2.0
// bwd/validation.h — every check of a dash_bwd call that the host can decide, before any CUDA work; each failure
// names the argument (dash_last_error).
#pragma once

#include "dash/dash_attn.h"

namespace dash::kernels::bwd {

// Checks `args` against `plan` and the kernels' contract and fills `normalised` (strides of extent-1 dimensions
// replaced, softmax_scale resolved). DASH_OK or the error status, with dash_last_error set.
dash_status validate(const dash_bwd_args* args, dash_plan_t plan, dash_bwd_args& normalised);

// The mode argument of dash_bwd and dash_bwd_workspace_size: 0 or 1, and 1 only with a plan whose bits are
// batch-invariant (not DASH_PLAN_NONDETERMINISTIC_ONLY).
dash_status check_deterministic(int32_t deterministic, const ::dash_plan_s& plan);

}  // namespace dash::kernels::bwd
