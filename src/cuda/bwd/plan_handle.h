// SPDX-License-Identifier: Apache-2.0
// bwd/plan_handle.h — what a dash_plan_t holds: the header of its problem and a shared, device-resident copy of its
// unit template (dash_plan_create in plan_handle.cpp). Plans whose problems share a sequence template (same lengths,
// mask, head dim, GQA group, mode and planner; any batch or head count) share one device copy.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"
#include "dash/plan.hpp"
#include "dash/plan_format.h"
#include "dash/varlen.hpp"

namespace dash::kernels::bwd {

// One unit template's blob on one device. Freed when the last plan and the device cache drop it (cudaFree waits for
// the device, so for any copy still queued into it).
//
// A template still being written when its blob was made (dash_plan_create_async) has a PendingUpload: its tables
// reach the blob through make_ready, the first call on a stream queuing their copy there instead of waiting for them
// on the host (plan_handle.cpp, "Tables still being written").
struct PendingUpload;
struct DeviceTemplate {
  TemplateKey key;
  std::shared_ptr<const UnitTemplate> unit;  // null while pending (then PendingUpload::tables gives it)
  dash_plan_header blob_header{};            // the template blob's header: the tables' byte offsets
  void* device_blob = nullptr;
  size_t bytes = 0;
  int device = -1;
  std::unique_ptr<PendingUpload> pending;    // null once the blob was filled when made
  ~DeviceTemplate();

  // Makes kernels queued on `stream` after this call find the tables in the blob: nothing once they are there;
  // else queues their copy on `stream` (or makes `stream` wait for a copy queued on another), which waits on the
  // host side only for the template's build, never for other GPU work; or, during graph capture or without a
  // free staging buffer, waits for the build here and copies synchronously. An error of the build (or of its
  // validation) is returned, never launched on.
  dash_status make_ready(cudaStream_t stream) const;
  // Waits on the host until the tables are validated and in the blob; the build's error otherwise.
  dash_status wait_ready() const;
  // The validated template (waiting for it if pending); null and an error status if its build failed.
  dash_status validated(std::shared_ptr<const UnitTemplate>& out) const;
  // dash_plan_tables_state, as last seen.
  int32_t tables_state() const;
};

// One contiguous piece of a table blob: `bytes` at byte `offset`, copied from `data`.
struct HostPart {
  size_t offset;
  const void* data;
  size_t bytes;
};
// Copies the parts into device memory `device_blob` of `device` through a private non-blocking stream and waits for
// that copy only (never for kernels queued on other streams).
dash_status upload_to_device(int device, void* device_blob, const std::vector<HostPart>& parts);
// Starts allocating the pinned staging buffers of `device` on a thread of their own, if not started before: the
// process's first uploads and queued table copies then find them ready.
void start_staging_allocation(int device);

// A varlen plan on its device: the host plan (dash/varlen.hpp), the device copies of its unit templates, and one blob
// with the sequences, the BwdTemplate table and the look-up tables (offsets below).
struct VarlenDevicePlan {
  dash::VarlenPlan plan;
  std::vector<std::shared_ptr<const DeviceTemplate>> templates;
  int32_t total_q = 0, total_k = 0;
  void* device_blob = nullptr;
  int device = -1;
  size_t sequences_offset = 0, templates_offset = 0, ticket_chunks_offset = 0, q_tile_sequence_offset = 0,
         kv_tile_sequence_offset = 0;
  ~VarlenDevicePlan();
};

// Queues on `stream` a one-thread kernel that traps unless the blob at `device_blob` starts with a plan header's magic
// (plan_check.cu): the last step of a copy queued by DeviceTemplate::make_ready, whose failed build leaves the magic
// out, so that no kernel after it runs on tables that were never validated.
dash_status launch_plan_magic_check(const void* device_blob, cudaStream_t stream);
// Loads the check kernel's module on the calling thread (the current device's context). Under CUDA's lazy module
// loading a module is loaded at its first launch, which would otherwise fall on a backward's host path.
void load_plan_magic_check();

// SMs the current context can run on: the device's, or fewer in a green context or an MPS client with an SM limit.
dash_status usable_sms(int device, int32_t& sms);

// DASH_OK for a live handle, else DASH_ERROR_INVALID_ARGUMENT naming `plan`.
dash_status check_plan(dash_plan_t plan);

}  // namespace dash::kernels::bwd

struct dash_plan_s {
  dash_plan_header header{};  // this problem's header; table offsets are the device template's. A varlen plan's
                              // header holds the pack's problem, its total tiles and tickets, its wave.
  std::shared_ptr<const dash::kernels::bwd::DeviceTemplate> device_template;  // fixed-length plans
  std::shared_ptr<const dash::kernels::bwd::VarlenDevicePlan> varlen;         // varlen plans
  std::string note;
  int device = -1;
  // dash_plan_blob's host copy, serialised on the first call only (it copies the template's tables).
  std::once_flag blob_once;
  std::vector<uint8_t> blob;
};
