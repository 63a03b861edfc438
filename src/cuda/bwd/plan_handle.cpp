// SPDX-License-Identifier: Apache-2.0
// bwd/plan_handle.cpp — dash_plan_create / destroy / blob: a plan is built and validated on the host by the
// planner (dash::build_plan, which checks every size limit before planning) and copied to the device once.
#include "bwd/plan_handle.h"

#include <cstring>
#include <exception>
#include <string>

#include <cuda_runtime_api.h>

#include "api_error.h"
#include "cuda_errors.h"
#include "dash/plan.hpp"

namespace dash::kernels::bwd {

dash_status check_plan(dash_plan_t plan) {
  if (plan == nullptr || plan->device_blob == nullptr) return capi::fail(DASH_ERROR_INVALID_ARGUMENT, "plan: null handle");
  return DASH_OK;
}

}  // namespace dash::kernels::bwd

using dash::capi::fail;
using dash::kernels::cuda_fail;

extern "C" {

dash_status dash_plan_create(const dash_problem* problem, const char* schedule, int32_t num_ctas, int32_t gqa_mode,
                             dash_plan_t* out) {
  dash::capi::set_last_error("");
  if (out == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "out: null pointer");
  *out = nullptr;
  if (problem == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "problem: null pointer");
  if (schedule == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "schedule: null pointer");
  if (num_ctas < 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "num_ctas: must be >= 0 (0 = SM count), got " + std::to_string(num_ctas));
  }
  if (gqa_mode != DASH_GQA_SPLIT_HEADS && gqa_mode != DASH_GQA_PACK_GROUP && gqa_mode != DASH_GQA_AUTO) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "gqa_mode: unknown value " + std::to_string(gqa_mode));
  }
  // Every size limit of the kernels and the plan format, before any planning or device work.
  if (dash_status s = dash_check_problem(problem, 1); s != DASH_OK) return s;
  int device = 0;
  if (cudaError_t s = cudaGetDevice(&device); s != cudaSuccess) return cuda_fail("cudaGetDevice", s);
  if (num_ctas == 0) {
    if (cudaError_t s = cudaDeviceGetAttribute(&num_ctas, cudaDevAttrMultiProcessorCount, device); s != cudaSuccess) {
      return cuda_fail("cudaDeviceGetAttribute(MultiProcessorCount)", s);
    }
  }
  auto plan = new dash_plan_s;
  try {
    dash::PlanRequest request;
    request.problem = dash::Problem::from_c(*problem);
    request.schedule = dash::Schedule::parse(schedule);
    request.num_ctas = num_ctas;
    request.gqa_mode = static_cast<dash::GqaMode>(gqa_mode);
    plan->blob = dash::build_plan(request).to_blob();
  } catch (const dash::Error& e) {
    delete plan;
    return fail(DASH_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    delete plan;
    return fail(DASH_ERROR_INVALID_ARGUMENT, std::string("plan: ") + e.what());
  }
  std::memcpy(&plan->header, plan->blob.data(), sizeof(dash_plan_header));
  plan->device = device;
  if (cudaError_t s = cudaMalloc(&plan->device_blob, plan->blob.size()); s != cudaSuccess) {
    delete plan;
    return cuda_fail("cudaMalloc(plan blob)", s);
  }
  if (cudaError_t s = cudaMemcpy(plan->device_blob, plan->blob.data(), plan->blob.size(), cudaMemcpyHostToDevice);
      s != cudaSuccess) {
    cudaFree(plan->device_blob);
    delete plan;
    return cuda_fail("cudaMemcpy(plan blob)", s);
  }
  *out = plan;
  return DASH_OK;
}

void dash_plan_destroy(dash_plan_t plan) {
  if (plan == nullptr) return;
  if (plan->device_blob != nullptr) cudaFree(plan->device_blob);
  delete plan;
}

dash_status dash_plan_blob(dash_plan_t plan, const void** data, size_t* bytes) {
  dash::capi::set_last_error("");
  if (dash_status s = dash::kernels::bwd::check_plan(plan); s != DASH_OK) return s;
  if (data == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "data: null pointer");
  if (bytes == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "bytes: null pointer");
  *data = plan->blob.data();
  *bytes = plan->blob.size();
  return DASH_OK;
}

}  // extern "C"
