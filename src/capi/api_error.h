// SPDX-License-Identifier: Apache-2.0
// api_error.h — the C ABI's per-thread error slot behind dash_last_error(), shared by every entry point
// (host API, forward, backward). Defined in last_error.cpp.
#pragma once

#include <string>

#include "dash/dash_attn.h"

namespace dash::capi {
// Replaces the calling thread's dash_last_error() message ("" clears it).
void set_last_error(std::string message);

// Records `message` as the calling thread's error and returns `status`: `return fail(status, "q.data: ...")`.
inline dash_status fail(dash_status status, std::string message) {
  set_last_error(std::move(message));
  return status;
}
} // namespace dash::capi
