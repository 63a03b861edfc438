// SPDX-License-Identifier: Apache-2.0
// The GPU half of the C ABI in a build without nvcc: every GPU entry point says so instead of pretending.
// (A CUDA build compiles src/cuda/ in its place.)
#include <string>

#include "dash/dash_attn.h"
#include "api_error.h"
#include "pack_handle.h"

namespace {
dash_status no_kernels(const char* call) {
  dash::capi::set_last_error(std::string(call) + ": this library was built without CUDA kernels (nvcc was not "
                             "found at build time); use the CPU backend (dash_cpu_fwd / dash_cpu_bwd)");
  return DASH_ERROR_UNSUPPORTED;
}
constexpr int32_t kNoHeadDims[] = {0};
} // namespace

extern "C" {
const int32_t* dash_fwd_supported_head_dims(void) { return kNoHeadDims; }
size_t dash_fwd_workspace_size(const dash_fwd_args*) { return 0; }
dash_status dash_fwd(const dash_fwd_args*, void*, size_t, void*) { return no_kernels("dash_fwd"); }
dash_status dash_plan_create(const dash_problem*, const char*, int32_t, int32_t, dash_plan_t*) {
  return no_kernels("dash_plan_create");
}
dash_status dash_plan_create_async(const dash_problem*, const char*, int32_t, int32_t, dash_plan_t*) {
  return no_kernels("dash_plan_create_async");
}
dash_status dash_plan_wait(dash_plan_t) { return no_kernels("dash_plan_wait"); }
dash_status dash_plan_tables(dash_plan_t, int32_t*) { return no_kernels("dash_plan_tables"); }
void dash_plan_destroy(dash_plan_t) {}
dash_status dash_plan_blob(dash_plan_t, const void**, size_t*) { return no_kernels("dash_plan_blob"); }
const char* dash_plan_note(dash_plan_t) { return nullptr; }
dash_status dash_usable_sms(int32_t*) { return no_kernels("dash_usable_sms"); }
size_t dash_bwd_workspace_size(const dash_bwd_args*, dash_plan_t, int32_t) {
  no_kernels("dash_bwd_workspace_size");
  return 0;
}
dash_status dash_bwd(const dash_bwd_args*, dash_plan_t, int32_t, void*, size_t, void*) { return no_kernels("dash_bwd"); }
dash_status dash_fwd_varlen(const dash_fwd_args*, dash_pack_t, void*, size_t, void*) {
  return no_kernels("dash_fwd_varlen");
}
dash_status dash_plan_create_varlen(dash_pack_t, const char*, int32_t, int32_t, dash_plan_t*) {
  return no_kernels("dash_plan_create_varlen");
}
} // extern "C"

// No device copies are ever made without CUDA.
void dash::capi::release_pack_device_copies(dash_pack_s&) {}
