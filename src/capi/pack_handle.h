// SPDX-License-Identifier: Apache-2.0
// pack_handle.h — what a dash_pack_t (dash/dash_attn.h, "varlen") holds: the validated pack (host tables) and the
// device copies of its tables, made on first use on each device. Created and destroyed in host_api.cpp; the CUDA
// half (src/cuda) uploads and frees the device copies.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "dash/dash_attn.h"
#include "dash/varlen.hpp"

struct dash_pack_s {
  dash::Pack pack;
  std::mutex mutex;                                  // guards device_copies (calls on several threads or devices)
  std::vector<std::pair<int, void*>> device_copies;  // (device, its copy of the pack's tables)
};

namespace dash::capi {
// Frees the pack's device copies and empties the list. Defined in src/cuda; a no-op in a build without CUDA
// (src/capi/no_cuda.cpp), where no copy is ever made. dash_pack_destroy calls it before deleting the handle.
void release_pack_device_copies(dash_pack_s& pack);
}  // namespace dash::capi
