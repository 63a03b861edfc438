// SPDX-License-Identifier: Apache-2.0
// The C ABI's per-thread error slot and status names (see api_error.h).
#include <string>

#include "dash/dash_attn.h"
#include "api_error.h"

namespace {
thread_local std::string t_last_error;
} // namespace

namespace dash::capi {
void set_last_error(std::string message) { t_last_error = std::move(message); }
} // namespace dash::capi

extern "C" {
const char* dash_last_error(void) { return t_last_error.c_str(); }

const char* dash_status_name(dash_status status) {
  switch (status) {
    case DASH_OK: return "DASH_OK";
    case DASH_ERROR_INVALID_ARGUMENT: return "DASH_ERROR_INVALID_ARGUMENT";
    case DASH_ERROR_UNSUPPORTED: return "DASH_ERROR_UNSUPPORTED";
    case DASH_ERROR_CUDA: return "DASH_ERROR_CUDA";
  }
  return "DASH_STATUS_UNKNOWN";
}
} // extern "C"
