// SPDX-License-Identifier: Apache-2.0
// api_error.h — the C ABI's per-thread error slot behind dash_last_error(), shared by every entry point
// (host API, forward, backward). Defined in last_error.cpp.
#pragma once

#include <string>

namespace dash::capi {
// Replaces the calling thread's dash_last_error() message ("" clears it).
void set_last_error(std::string message);
} // namespace dash::capi
