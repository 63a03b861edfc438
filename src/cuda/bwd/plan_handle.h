// SPDX-License-Identifier: Apache-2.0
// bwd/plan_handle.h — what a dash_plan_t holds: the plan's bytes on the host and their one copy on the device it
// was created on (dash_plan_create in plan_handle.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "dash/dash_attn.h"
#include "dash/plan_format.h"

struct dash_plan_s {
  std::vector<uint8_t> blob;  // host copy, what the device copy holds
  dash_plan_header header{};
  void* device_blob = nullptr;
  int device = -1;
};

namespace dash::kernels::bwd {
// DASH_OK for a live handle, else DASH_ERROR_INVALID_ARGUMENT naming `plan`.
dash_status check_plan(dash_plan_t plan);
}  // namespace dash::kernels::bwd
