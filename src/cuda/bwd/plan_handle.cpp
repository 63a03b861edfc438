// SPDX-License-Identifier: Apache-2.0
// bwd/plan_handle.cpp — dash_plan_create / destroy / blob. The planner (dash::plan_for) resolves the schedule and
// returns a cached, validated unit template; this file keeps one device copy per (template, device), so a problem
// whose sequence template was seen before costs a look-up and no device work.
#include "bwd/plan_handle.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <list>
#include <string>

#include <cuda.h>  // driver types only: the functions come through cudaGetDriverEntryPointByVersion
#include <cuda_runtime_api.h>

#include "api_error.h"
#include "bwd/bwd_params.h"
#include "pack_handle.h"
#include "cuda_errors.h"
#include "problem_checks.h"
#include "dash/plan.hpp"

namespace dash::kernels::bwd {

namespace {
// Lets this thread allocate and copy while another thread captures a CUDA graph: in the default (global) capture mode
// cudaMalloc from any thread is refused then and invalidates that capture. The allocation and the upload belong to
// no graph (the upload stream is never captured), so they are safe beside one; the caller's mode is restored.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Frees device memory of `device` from whatever device is current (and leaves that one current).
void free_on_device(int device, void* blob) {
  if (blob == nullptr) return;
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(device);
  cudaFree(blob);
  cudaSetDevice(current);
}
}  // namespace

DeviceTemplate::~DeviceTemplate() { free_on_device(device, device_blob); }
VarlenDevicePlan::~VarlenDevicePlan() { free_on_device(device, device_blob); }

dash_status check_plan(dash_plan_t plan) {
  if (plan == nullptr || (plan->device_template == nullptr && plan->varlen == nullptr)) {
    return capi::fail(DASH_ERROR_INVALID_ARGUMENT, "plan: null handle");
  }
  return DASH_OK;
}

namespace {

// One non-blocking stream per device for the uploads, created on first use and kept for the process.
dash_status upload_stream(int device, cudaStream_t& stream) {
  static std::mutex mutex;
  static std::vector<std::pair<int, cudaStream_t>> streams;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& [d, s] : streams) {
    if (d == device) {
      stream = s;
      return DASH_OK;
    }
  }
  if (cudaError_t s = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); s != cudaSuccess) {
    return cuda_fail("cudaStreamCreateWithFlags(plan upload)", s);
  }
  streams.push_back({device, stream});
  return DASH_OK;
}

// The state of a template whose blob was made before its tables were written (DeviceTemplate::pending).
}  // namespace

struct PendingUpload {
  explicit PendingUpload(std::shared_future<std::shared_ptr<const UnitTemplate>> t) : tables(std::move(t)) {}
  ~PendingUpload() {
    if (copied != nullptr) cudaEventDestroy(copied);
  }
  std::shared_future<std::shared_ptr<const UnitTemplate>> tables;  // the validated template, or its build's error
  std::mutex mutex;
  enum class State { Waiting, Queued, Done } state = State::Waiting;
  cudaEvent_t copied = nullptr;  // Queued: recorded on the stream that copies, after the copy and its check
};

namespace {

// The parts of `unit`'s blob laid out by `blob_header`.
std::vector<HostPart> host_parts(const UnitTemplate& unit, const dash_plan_header& blob_header) {
  std::vector<HostPart> parts;
  for (const Plan::BlobPart& part : unit.plan.blob_parts(blob_header)) parts.push_back({part.offset, part.data, part.bytes});
  return parts;
}

// Device copies of unit templates, by template key and device, most recently used first, up to kDeviceCacheBytes (a
// plan handle keeps its own copy alive after eviction). Uploads go through a private non-blocking stream: the host
// waits for the copy only, never for kernels queued on other streams (a plain cudaMemcpy would wait for the legacy
// default stream). A template still being written gets its entry at once, with a PendingUpload.
class DeviceTemplateCache {
 public:
  static constexpr size_t kDeviceCacheBytes = size_t(1) << 30;

  // The device copy of a validated template, its tables in the blob when this returns.
  dash_status get(const std::shared_ptr<const UnitTemplate>& unit, int device,
                  std::shared_ptr<const DeviceTemplate>& out) {
    std::shared_ptr<DeviceTemplate> entry;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      entry = find(unit->key, device);
      if (entry == nullptr) {
        if (dash_status s = make(unit->key, device, unit->plan.blob_header(), entry); s != DASH_OK) return s;
        // Straight from the template's tables (no host copy of the blob: 8-16 MB at 128k tokens). The kernels read
        // the tables only; the padding between them stays unwritten.
        if (dash_status s = upload_to_device(device, entry->device_blob, host_parts(*unit, entry->blob_header));
            s != DASH_OK) {
          return s;
        }
        entry->unit = unit;
        publish(entry);
      }
    }
    if (entry->pending != nullptr) {  // made by dash_plan_create_async: wait for its copy (not under the lock)
      if (dash_status s = entry->wait_ready(); s != DASH_OK) return s;
    }
    out = entry;
    return DASH_OK;
  }

  // The device copy of a template still being written (plan_for_async): its blob allocated, its tables to come
  // (DeviceTemplate::make_ready). An entry made before for the same key is returned as it is.
  dash_status get_pending(const dash::AsyncBoundPlan& bound, int device, std::shared_ptr<const DeviceTemplate>& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<DeviceTemplate> entry = find(bound.layout->key, device);
    if (entry == nullptr) {
      if (dash_status s = make(bound.layout->key, device, bound.layout->blob_header, entry); s != DASH_OK) return s;
      entry->pending = std::make_unique<PendingUpload>(bound.tables);
      publish(entry);
    }
    out = entry;
    return DASH_OK;
  }

 private:
  // Under the lock.
  std::shared_ptr<DeviceTemplate> find(const TemplateKey& key, int device) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if ((*it)->key == key && (*it)->device == device) {
        entries_.splice(entries_.begin(), entries_, it);
        return entries_.front();
      }
    }
    return nullptr;
  }

  static dash_status make(const TemplateKey& key, int device, const dash_plan_header& blob_header,
                          std::shared_ptr<DeviceTemplate>& entry) {
    entry = std::make_shared<DeviceTemplate>();
    entry->key = key;
    entry->device = device;
    entry->blob_header = blob_header;
    entry->bytes = blob_header.total_bytes;
    RelaxedCaptureMode relaxed;
    if (cudaError_t s = cudaMalloc(&entry->device_blob, entry->bytes); s != cudaSuccess) {
      entry->device_blob = nullptr;
      return cuda_fail("cudaMalloc(plan blob)", s);
    }
    return DASH_OK;
  }

  void publish(const std::shared_ptr<DeviceTemplate>& entry) {
    entries_.push_front(entry);
    bytes_ += entry->bytes;
    while (bytes_ > kDeviceCacheBytes && entries_.size() > 1) {
      bytes_ -= entries_.back()->bytes;
      entries_.pop_back();
    }
  }

  std::mutex mutex_;
  std::list<std::shared_ptr<DeviceTemplate>> entries_;
  size_t bytes_ = 0;
};

// A driver function through the runtime (the library links the static runtime, not libcuda); nullptr if the
// driver lacks it.
template <class Fn>
Fn driver_function(const char* name, int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, unsigned(version), cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

DeviceTemplateCache& device_cache() {
  static DeviceTemplateCache* instance = new DeviceTemplateCache;  // never destroyed (CUDA may be torn down first)
  return *instance;
}

}  // namespace

namespace {

// Large uploads (a 128k-token unit's visit table is 8 MB causal, 16 MB full) go through two pinned buffers: the
// planner's threads copy the next chunk into one while the copy engine reads the other. A pageable cudaMemcpyAsync
// stages through the driver's buffers on one thread: on the H200 machine's host that is 7-8 GB/s (1.0 ms for 8 MB,
// 2.3 ms for 16 MB), where pinned memory goes at 28-40 GB/s and eight threads copy host memory about 3x faster than
// one (bench/results/upload-breakdown-h200host-2026-12-02.txt). cudaHostAlloc costs about 0.5 ms per MB there, more
// than an upload saves, so the buffers are kept for the process, and allocated on a thread of their own, started by
// the process's first upload of any size: allocated on the first large upload they added 2-3 ms to it (the first
// 128k-token shape, first-call-ab-2026-12-02-fd8c341-vs-dd0f5dd-newfirst.txt); a large upload that comes before
// the allocation has finished waits for it.
class PinnedStaging {
 public:
  static constexpr size_t kChunkBytes = size_t(2) << 20;
  static constexpr size_t kMinUploadBytes = size_t(2) << 20;  // smaller uploads take the pageable path

  // Starts the buffers' allocation on a thread of its own (the first call; on `device`, the device of the upload that
  // asks, so that no other device's context is created).
  static void start_allocation(int device) { (void)allocation(device); }
  // The buffers for an upload to `device`, once allocated (waiting for the allocation if it is still running);
  // nullptr if they cannot be had or belong to another device (their events can only be recorded on streams of the
  // device they were created on). The caller then copies from pageable memory: the same bytes, slower.
  static PinnedStaging* get(int device) {
    PinnedStaging* staging = allocation(device).get();
    return staging != nullptr && staging->device_ == device ? staging : nullptr;
  }

  // One of the buffers of copies queued on a stream (DeviceTemplate::make_ready), kChunkBytes each, for as long as that
  // copy's host functions use it; nullptr if all are taken (the caller then copies synchronously).
  uint8_t* take_queue_buffer() {
    for (int b = 0; b < kQueueBuffers; ++b)
      if (!queue_taken_[b].exchange(true, std::memory_order_acquire)) return static_cast<uint8_t*>(queue_buffers_[b]);
    return nullptr;
  }
  void release_queue_buffer(const uint8_t* buffer) {
    for (int b = 0; b < kQueueBuffers; ++b)
      if (queue_buffers_[b] == buffer) queue_taken_[b].store(false, std::memory_order_release);
  }

  // Queues the copy of `parts` to `base` on `stream`. Returns once every byte has been read from the parts (the
  // host memory may change after that); the device copies may still be in flight on `stream`.
  dash_status upload(cudaStream_t stream, uint8_t* base, const std::vector<HostPart>& parts) {
    std::lock_guard<std::mutex> lock(mutex_);  // one upload at a time through the two buffers
    int buffer = 0;
    for (const HostPart& part : parts) {
      for (size_t done = 0; done < part.bytes; done += kChunkBytes, buffer ^= 1) {
        const size_t bytes = std::min(kChunkBytes, part.bytes - done);
        // The buffer is refilled only after the copy that last read it has finished (recorded below, on this
        // upload's stream or an earlier upload's: the event remembers which). A never-recorded event is complete.
        if (cudaError_t s = cudaEventSynchronize(drained_[buffer]); s != cudaSuccess) {
          return kernels::cuda_fail("cudaEventSynchronize(plan upload staging)", s);
        }
        dash::detail::parallel_copy(buffers_[buffer], static_cast<const uint8_t*>(part.data) + done, bytes);
        if (cudaError_t s = cudaMemcpyAsync(base + part.offset + done, buffers_[buffer], bytes,
                                            cudaMemcpyHostToDevice, stream);
            s != cudaSuccess) {
          return kernels::cuda_fail("cudaMemcpyAsync(plan tables)", s);
        }
        if (cudaError_t s = cudaEventRecord(drained_[buffer], stream); s != cudaSuccess) {
          return kernels::cuda_fail("cudaEventRecord(plan upload staging)", s);
        }
      }
    }
    return DASH_OK;
  }

 private:
  explicit PinnedStaging(int device) : device_(device) {}

  // On the current device (device_).
  bool allocate() {
    for (int b = 0; b < 2; ++b) {
      if (cudaHostAlloc(&buffers_[b], kChunkBytes, cudaHostAllocPortable) != cudaSuccess ||
          cudaEventCreateWithFlags(&drained_[b], cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();  // not sticky; cleared so that the caller's next check does not see it
        for (int f = 0; f <= b; ++f) {
          if (buffers_[f] != nullptr) cudaFreeHost(buffers_[f]);
          if (drained_[f] != nullptr) cudaEventDestroy(drained_[f]);
        }
        return false;
      }
    }
    for (int b = 0; b < kQueueBuffers; ++b) {
      if (cudaHostAlloc(&queue_buffers_[b], kChunkBytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        queue_buffers_[b] = nullptr;
        queue_taken_[b].store(true);  // never handed out: copies go synchronously instead
      }
    }
    return true;
  }

  // The allocation's result. std::async's shared state makes the library's unloading wait for the thread (it ends
  // a few ms after it starts); the buffers are never freed (CUDA may be torn down before this library's statics).
  static std::shared_future<PinnedStaging*>& allocation(int device) {
    static std::shared_future<PinnedStaging*> result = std::async(std::launch::async, [device] {
      RelaxedCaptureMode relaxed;  // beside another thread's graph capture, as the uploads
      if (cudaSetDevice(device) != cudaSuccess) return static_cast<PinnedStaging*>(nullptr);
      load_plan_magic_check();  // for the queued table copies, which end with it (make_ready)
      auto* staging = new PinnedStaging(device);
      if (staging->allocate()) return staging;
      delete staging;
      return static_cast<PinnedStaging*>(nullptr);
    }).share();
    return result;
  }

  // Two copies queued at once (two new templates' first backwards before the first copy has run) cover a step's
  // usual case; a third copies synchronously.
  static constexpr int kQueueBuffers = 2;

  const int device_;
  std::mutex mutex_;
  void* buffers_[2] = {};
  cudaEvent_t drained_[2] = {};
  void* queue_buffers_[kQueueBuffers] = {};
  std::atomic<bool> queue_taken_[kQueueBuffers] = {};
};

}  // namespace

void start_staging_allocation(int device) { PinnedStaging::start_allocation(device); }

dash_status upload_to_device(int device, void* device_blob, const std::vector<HostPart>& parts) {
  RelaxedCaptureMode relaxed;
  cudaStream_t stream = nullptr;
  if (dash_status s = upload_stream(device, stream); s != DASH_OK) return s;
  uint8_t* base = static_cast<uint8_t*>(device_blob);
  size_t total = 0;
  for (const HostPart& part : parts) total += part.bytes;
  PinnedStaging::start_allocation(device);  // at the process's first upload, so that it is done by the first large one
  PinnedStaging* const staging = total >= PinnedStaging::kMinUploadBytes ? PinnedStaging::get(device) : nullptr;
  if (staging != nullptr) {
    if (dash_status s = staging->upload(stream, base, parts); s != DASH_OK) return s;
  } else {
    for (const HostPart& part : parts) {
      if (part.bytes == 0) continue;
      if (cudaError_t s = cudaMemcpyAsync(base + part.offset, part.data, part.bytes, cudaMemcpyHostToDevice, stream);
          s != cudaSuccess) {
        return cuda_fail("cudaMemcpyAsync(plan tables)", s);
      }
    }
  }
  // The tables must be on the device before any stream launches a kernel that reads them, and the pageable copies
  // read from host memory the caller may free once this returns.
  if (cudaError_t s = cudaStreamSynchronize(stream); s != cudaSuccess) {
    return cuda_fail("cudaStreamSynchronize(plan upload)", s);
  }
  return DASH_OK;
}

// ---- Tables still being written (dash_plan_create_async) ----
//
// A new template's plan is resolved on the drafts' layouts (dash::plan_for_async) and its visit table is written and
// validated on a thread of its own; its blob is allocated at once. The first backward that needs the tables before
// they are done does not wait for them on the host: make_ready queues, on the backward's own stream and ahead of its
// kernels, host functions that copy the blob chunk by chunk into a pinned buffer, each followed by the copy of that
// chunk to the device; then a one-thread kernel that traps unless the blob's header carries the plan magic; then an
// event that later backwards on other streams wait for.
//
// Why this cannot deadlock (docs/DEADLOCK.md, "Tables still being written"): the first host function waits for the
// template's build, which runs on the host and waits for no GPU work; the copies are on the same stream after it.
// Nothing the host functions wait for is queued behind them on any stream or hardware queue, which also holds with
// CUDA_DEVICE_MAX_CONNECTIONS=1, where every stream shares one queue (a copy on a private stream, waited for by the
// host function, could sit behind the host function itself there).
//
// A build that fails (a planner bug: validation refused its tables) writes a header without the magic: the check
// kernel traps, the stream's later kernels do not run, and the reason goes to stderr (dash_plan_wait returns it).
namespace {

struct QueuedCopy {
  struct Chunk {
    QueuedCopy* copy;
    size_t first, bytes;  // of the blob
  };
  std::shared_future<std::shared_ptr<const UnitTemplate>> tables;
  dash_plan_header blob_header{};  // the layout's, which the device blob was allocated for
  PinnedStaging* staging = nullptr;
  uint8_t* buffer = nullptr;       // kChunkBytes of pinned memory, this copy's until its last host function
  std::vector<Chunk> chunks;
  std::shared_ptr<const UnitTemplate> unit;  // set by the first chunk's host function, when the template is built
  std::vector<HostPart> parts;               // of unit's blob
  bool failed = false;
};

// The built template's blob header, checked against the layout its device blob was allocated for (from the draft;
// equal by construction, tests/cpu/test_plan_async.cpp): a difference would put tables outside the blob.
dash_plan_header built_blob_header(const UnitTemplate& unit, const dash_plan_header& layout) {
  const dash_plan_header h = unit.plan.blob_header();
  if (h.total_bytes != layout.total_bytes || h.items_offset != layout.items_offset ||
      h.visits_offset != layout.visits_offset || h.segments_offset != layout.segments_offset ||
      h.dq_count_offset != layout.dq_count_offset || h.group_head_by_rank_offset != layout.group_head_by_rank_offset) {
    throw Error("plan", "the built template's blob differs from its draft's layout");
  }
  return h;
}

// Host function: the template's blob bytes [first, first + bytes) into the pinned buffer. The first chunk waits for
// the template (host work only) and checks that its blob has the layout the device blob was made for.
void CUDART_CB fill_chunk(void* data) {
  const QueuedCopy::Chunk& chunk = *static_cast<QueuedCopy::Chunk*>(data);
  QueuedCopy& copy = *chunk.copy;
  if (chunk.first == 0) {
    try {
      const std::shared_ptr<const UnitTemplate> unit = copy.tables.get();
      const dash_plan_header h = built_blob_header(*unit, copy.blob_header);
      copy.unit = unit;  // the parts point into its tables
      copy.parts = host_parts(*unit, h);
      copy.parts.front().data = nullptr;  // the header part points at `h`, a local: written here instead
      std::memcpy(copy.buffer, &h, sizeof h);
    } catch (const std::exception& e) {
      copy.failed = true;
      std::fprintf(stderr, "dash_attn: the backward's plan failed after its kernels were queued: %s; the backward "
                           "stops with a device trap\n", e.what());
    }
  }
  if (copy.failed) {
    if (chunk.first == 0) std::memset(copy.buffer, 0, sizeof(dash_plan_header));  // no magic: the check traps
    return;
  }
  const size_t end = chunk.first + chunk.bytes;
  for (const HostPart& part : copy.parts) {
    if (part.data == nullptr || part.bytes == 0) continue;
    const size_t from = std::max(part.offset, chunk.first), to = std::min(part.offset + part.bytes, end);
    if (from < to) {
      std::memcpy(copy.buffer + (from - chunk.first), static_cast<const uint8_t*>(part.data) + (from - part.offset),
                  to - from);
    }
  }
}

// Host function after the last copy from the buffer: gives it back.
void CUDART_CB finish_copy(void* data) {
  auto* copy = static_cast<QueuedCopy*>(data);
  copy->staging->release_queue_buffer(copy->buffer);
  delete copy;
}

}  // namespace

dash_status DeviceTemplate::validated(std::shared_ptr<const UnitTemplate>& out) const {
  if (unit != nullptr) {
    out = unit;
    return DASH_OK;
  }
  try {
    out = pending->tables.get();
  } catch (const std::exception& e) {
    return capi::fail(DASH_ERROR_INVALID_ARGUMENT, e.what());
  }
  return DASH_OK;
}

namespace {
// Under the pending upload's lock, state Waiting: waits for the template and copies it synchronously.
dash_status upload_when_built(const DeviceTemplate& t, PendingUpload& p) {
  std::shared_ptr<const UnitTemplate> unit;
  if (dash_status s = t.validated(unit); s != DASH_OK) return s;
  std::vector<HostPart> parts;
  try {
    parts = host_parts(*unit, built_blob_header(*unit, t.blob_header));
  } catch (const std::exception& e) {
    return capi::fail(DASH_ERROR_INVALID_ARGUMENT, e.what());
  }
  if (dash_status s = upload_to_device(t.device, t.device_blob, parts); s != DASH_OK) return s;
  p.state = PendingUpload::State::Done;
  return DASH_OK;
}

// Under the pending upload's lock, state Queued: waits on the host for the queued copy (the build's error first, before
// the trap's CUDA error). The copy waits on the host only for the template's build, so this wait ends.
dash_status wait_for_queued_copy(const DeviceTemplate& t, PendingUpload& p) {
  std::shared_ptr<const UnitTemplate> unit;
  if (dash_status s = t.validated(unit); s != DASH_OK) return s;
  if (cudaError_t s = cudaEventSynchronize(p.copied); s != cudaSuccess) {
    return cuda_fail("cudaEventSynchronize(plan tables copy)", s);
  }
  p.state = PendingUpload::State::Done;
  return DASH_OK;
}
}  // namespace

int32_t DeviceTemplate::tables_state() const {
  if (pending == nullptr) return DASH_PLAN_TABLES_READY;
  std::lock_guard<std::mutex> lock(pending->mutex);
  switch (pending->state) {
    case PendingUpload::State::Done: return DASH_PLAN_TABLES_READY;
    case PendingUpload::State::Queued: return DASH_PLAN_TABLES_COPY_QUEUED;
    case PendingUpload::State::Waiting: break;
  }
  return pending->tables.wait_for(std::chrono::seconds(0)) == std::future_status::ready ? DASH_PLAN_TABLES_WRITTEN
                                                                                        : DASH_PLAN_TABLES_BEING_WRITTEN;
}

dash_status DeviceTemplate::wait_ready() const {
  if (pending == nullptr) return DASH_OK;
  PendingUpload& p = *pending;
  std::lock_guard<std::mutex> lock(p.mutex);
  switch (p.state) {
    case PendingUpload::State::Done: return DASH_OK;
    case PendingUpload::State::Queued: return wait_for_queued_copy(*this, p);
    case PendingUpload::State::Waiting: return upload_when_built(*this, p);
  }
  return DASH_OK;
}

dash_status DeviceTemplate::make_ready(cudaStream_t stream) const {
  if (pending == nullptr) return DASH_OK;
  PendingUpload& p = *pending;
  std::lock_guard<std::mutex> lock(p.mutex);
  if (p.state == PendingUpload::State::Done) return DASH_OK;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t s = cudaStreamIsCapturing(stream, &capture); s != cudaSuccess) {
    return cuda_fail("cudaStreamIsCapturing", s);
  }
  if (p.state == PendingUpload::State::Queued) {
    RelaxedCaptureMode relaxed;  // the event belongs to no capture; querying it is no graph work
    const cudaError_t done = cudaEventQuery(p.copied);
    if (done == cudaSuccess) {
      p.state = PendingUpload::State::Done;
      return DASH_OK;
    }
    if (done != cudaErrorNotReady) return cuda_fail("cudaEventQuery(plan tables copy)", done);
    cudaGetLastError();  // cudaErrorNotReady is not an error to keep
    // A graph cannot wait on an event recorded outside its capture: wait for the copy here.
    if (capture != cudaStreamCaptureStatusNone) return wait_for_queued_copy(*this, p);
    // The copy was queued on another stream (or on this one, which costs nothing): wait for it on the GPU. It waits on
    // the host only for the template's build, so this wait ends.
    if (cudaError_t s = cudaStreamWaitEvent(stream, p.copied, 0); s != cudaSuccess) {
      return cuda_fail("cudaStreamWaitEvent(plan tables copy)", s);
    }
    return DASH_OK;
  }
  // Waiting. A built template, a capturing stream (host functions and copies would become graph nodes that run
  // again at every replay) or no free pinned buffer: wait for the build here and copy synchronously. The staging
  // buffers' allocation started when the plan was made (create_plan); get() waits for it only if it is still running,
  // once per process, for milliseconds at most.
  PinnedStaging* staging = nullptr;
  uint8_t* buffer = nullptr;
  if (capture == cudaStreamCaptureStatusNone && p.tables.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    staging = PinnedStaging::get(device);
    if (staging != nullptr) buffer = staging->take_queue_buffer();
  }
  if (buffer == nullptr) return upload_when_built(*this, p);
  if (p.copied == nullptr) {
    if (cudaError_t s = cudaEventCreateWithFlags(&p.copied, cudaEventDisableTiming); s != cudaSuccess) {
      staging->release_queue_buffer(buffer);
      return cuda_fail("cudaEventCreateWithFlags(plan tables copy)", s);
    }
  }
  auto* copy = new QueuedCopy;
  copy->tables = p.tables;
  copy->blob_header = blob_header;
  copy->staging = staging;
  copy->buffer = buffer;
  const size_t total = blob_header.total_bytes;
  for (size_t first = 0; first < total; first += PinnedStaging::kChunkBytes) {
    copy->chunks.push_back({copy, first, std::min(PinnedStaging::kChunkBytes, total - first)});
  }
  // An error while queuing leaves what was queued to run (its host functions read `copy`, which is then never freed,
  // and its buffer never given back) and reports the error: the template stays Waiting, and a later call copies it
  // synchronously.
  uint8_t* blob = static_cast<uint8_t*>(device_blob);
  for (QueuedCopy::Chunk& chunk : copy->chunks) {
    if (cudaError_t s = cudaLaunchHostFunc(stream, fill_chunk, &chunk); s != cudaSuccess) {
      return cuda_fail("cudaLaunchHostFunc(plan tables copy)", s);
    }
    if (cudaError_t s = cudaMemcpyAsync(blob + chunk.first, buffer, chunk.bytes, cudaMemcpyHostToDevice, stream);
        s != cudaSuccess) {
      return cuda_fail("cudaMemcpyAsync(plan tables copy)", s);
    }
  }
  if (dash_status s = launch_plan_magic_check(device_blob, stream); s != DASH_OK) return s;
  if (cudaError_t s = cudaLaunchHostFunc(stream, finish_copy, copy); s != cudaSuccess) {
    return cuda_fail("cudaLaunchHostFunc(plan tables copy)", s);
  }
  if (cudaError_t s = cudaEventRecord(p.copied, stream); s != cudaSuccess) {
    return cuda_fail("cudaEventRecord(plan tables copy)", s);
  }
  p.state = PendingUpload::State::Queued;
  return DASH_OK;
}

dash_status usable_sms(int device, int32_t& sms) {
  if (cudaError_t s = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); s != cudaSuccess) {
    return cuda_fail("cudaDeviceGetAttribute(MultiProcessorCount)", s);
  }
  // The current context may run on fewer SMs: a green context's SM resource, or an MPS client's execution affinity.
  // CUDA graphs and plain streams see the device's count. Drivers without these calls have no such partitions.
  CUcontext context = nullptr;
  auto get_current = driver_function<CUresult (*)(CUcontext*)>("cuCtxGetCurrent", 4000);
  if (get_current == nullptr || get_current(&context) != CUDA_SUCCESS || context == nullptr) return DASH_OK;
  if (auto get_resource = driver_function<CUresult (*)(CUcontext, CUdevResource*, CUdevResourceType)>(
          "cuCtxGetDevResource", 12040)) {
    CUdevResource resource{};
    if (get_resource(context, &resource, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS && resource.sm.smCount > 0) {
      sms = std::min<int32_t>(sms, int32_t(resource.sm.smCount));
    }
  }
  if (auto get_affinity = driver_function<CUresult (*)(CUexecAffinityParam*, CUexecAffinityType)>(
          "cuCtxGetExecAffinity", 11040)) {
    CUexecAffinityParam affinity{};
    if (get_affinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS && affinity.param.smCount.val > 0) {
      sms = std::min<int32_t>(sms, int32_t(affinity.param.smCount.val));
    }
  }
  return DASH_OK;
}

}  // namespace dash::kernels::bwd

using dash::capi::fail;
using dash::kernels::cuda_fail;

extern "C" {

namespace {

// The argument checks dash_plan_create and dash_plan_create_varlen share.
dash_status check_plan_request(const char* schedule, int32_t num_ctas, int32_t gqa_mode) {
  if (schedule == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "schedule: null pointer");
  if (num_ctas < 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "num_ctas: must be >= 0 (0 = SM count), got " + std::to_string(num_ctas));
  }
  if (!dash::is_gqa_request(gqa_mode)) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "gqa_mode: unknown value " + std::to_string(gqa_mode));
  }
  return DASH_OK;
}

// The current device and the CTA count a plan there launches (0: its usable SMs).
dash_status resolve_ctas(int32_t& num_ctas, int& device) {
  if (cudaError_t s = cudaGetDevice(&device); s != cudaSuccess) return cuda_fail("cudaGetDevice", s);
  int32_t sms = 0;
  if (dash_status s = dash::kernels::bwd::usable_sms(device, sms); s != DASH_OK) return s;
  if (num_ctas == 0) num_ctas = sms;
  if (num_ctas > sms) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "num_ctas: " + std::to_string(num_ctas) + " exceeds the " +
                                                 std::to_string(sms) + " SMs this context can use on device " +
                                                 std::to_string(device) + " (the backward runs one CTA per SM)");
  }
  return DASH_OK;
}

}  // namespace

namespace {

// dash_plan_create and dash_plan_create_async: `async` resolves on the drafts' layouts (dash::plan_for_async) and
// leaves a new template's tables to come (DeviceTemplate::make_ready).
dash_status create_plan(const dash_problem* problem, const char* schedule, int32_t num_ctas, int32_t gqa_mode,
                        dash_plan_t* out, bool async) {
  dash::capi::set_last_error("");
  if (out == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "out: null pointer");
  *out = nullptr;
  if (problem == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "problem: null pointer");
  if (dash_status s = check_plan_request(schedule, num_ctas, gqa_mode); s != DASH_OK) return s;
  // Every size limit of the kernels and the plan format, before any planning or device work.
  if (dash_status s = dash_check_problem(problem, 1); s != DASH_OK) return s;
  int device = 0;
  if (dash_status s = resolve_ctas(num_ctas, device); s != DASH_OK) return s;
  dash::AsyncBoundPlan bound;
  try {
    dash::PlanRequest request;
    request.problem = dash::Problem::from_c(*problem);
    request.schedule = dash::Schedule::parse(schedule);
    request.num_ctas = num_ctas;
    request.gqa_mode = static_cast<dash::GqaMode>(gqa_mode);
    if (async) {
      bound = dash::plan_for_async(request);
    } else {
      dash::BoundPlan b = dash::plan_for(request);
      bound.unit = std::move(b.unit);
      bound.header = b.header;
      bound.note = std::move(b.note);
    }
  } catch (const dash::Error& e) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, std::string("plan: ") + e.what());
  }
  std::shared_ptr<const dash::kernels::bwd::DeviceTemplate> device_template;
  if (bound.unit != nullptr) {
    if (dash_status s = dash::kernels::bwd::device_cache().get(bound.unit, device, device_template); s != DASH_OK) {
      return s;
    }
  } else {
    if (dash_status s = dash::kernels::bwd::device_cache().get_pending(bound, device, device_template); s != DASH_OK) {
      return s;
    }
    dash::kernels::bwd::start_staging_allocation(device);  // for the copy of its tables (DeviceTemplate::make_ready)
  }
  auto plan = new dash_plan_s;
  plan->header = bound.header;
  const dash_plan_header& offsets = device_template->blob_header;
  plan->header.items_offset = offsets.items_offset;
  plan->header.segments_offset = offsets.segments_offset;
  plan->header.visits_offset = offsets.visits_offset;
  plan->header.dq_count_offset = offsets.dq_count_offset;
  plan->header.group_head_by_rank_offset = offsets.group_head_by_rank_offset;
  plan->header.total_bytes = offsets.total_bytes;
  plan->device_template = std::move(device_template);
  plan->note = std::move(bound.note);
  plan->device = device;
  *out = plan;
  return DASH_OK;
}

}  // namespace

dash_status dash_plan_create(const dash_problem* problem, const char* schedule, int32_t num_ctas, int32_t gqa_mode,
                             dash_plan_t* out) {
  return create_plan(problem, schedule, num_ctas, gqa_mode, out, false);
}

dash_status dash_plan_create_async(const dash_problem* problem, const char* schedule, int32_t num_ctas,
                                   int32_t gqa_mode, dash_plan_t* out) {
  return create_plan(problem, schedule, num_ctas, gqa_mode, out, true);
}

dash_status dash_plan_wait(dash_plan_t plan) {
  dash::capi::set_last_error("");
  if (dash_status s = dash::kernels::bwd::check_plan(plan); s != DASH_OK) return s;
  if (plan->device_template == nullptr) return DASH_OK;  // varlen plans are complete when made
  return plan->device_template->wait_ready();
}

dash_status dash_plan_tables(dash_plan_t plan, int32_t* state) {
  dash::capi::set_last_error("");
  if (state == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "state: null pointer");
  if (dash_status s = dash::kernels::bwd::check_plan(plan); s != DASH_OK) return s;
  *state = plan->device_template != nullptr ? plan->device_template->tables_state() : DASH_PLAN_TABLES_READY;
  return DASH_OK;
}

dash_status dash_plan_create_varlen(dash_pack_t pack, const char* schedule, int32_t num_ctas, int32_t gqa_mode,
                                    dash_plan_t* out) {
  using dash::kernels::bwd::BwdTemplate;
  using dash::kernels::bwd::HostPart;
  using dash::kernels::bwd::VarlenDevicePlan;
  dash::capi::set_last_error("");
  if (out == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "out: null pointer");
  *out = nullptr;
  if (pack == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "pack: null handle");
  if (dash_status s = check_plan_request(schedule, num_ctas, gqa_mode); s != DASH_OK) return s;
  // The pack's pair passed dash_check_problem's forward checks when it was made; the backward needs its kernel too,
  // checked before any planning (as dash_plan_create's dash_check_problem does).
  if (dash_status s = dash::capi::check_backward_kernel(pack->pack.problem.to_c()); s != DASH_OK) return s;
  int device = 0;
  if (dash_status s = resolve_ctas(num_ctas, device); s != DASH_OK) return s;
  auto state = std::make_shared<VarlenDevicePlan>();
  try {
    state->plan = dash::plan_for_pack(pack->pack, dash::Schedule::parse(schedule), num_ctas,
                                      static_cast<dash::GqaMode>(gqa_mode));
  } catch (const dash::Error& e) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, std::string("plan: ") + e.what());
  }
  const dash::VarlenPlan& vp = state->plan;
  state->device = device;
  state->total_q = int32_t(pack->pack.total_q());
  state->total_k = int32_t(pack->pack.total_k());
  // The templates on the device (shared with fixed-length plans of the same sequence shapes), then the table of
  // their device addresses the kernels index by template_index.
  std::vector<BwdTemplate> templates;
  for (const dash::BoundPlan& bound : vp.templates) {
    std::shared_ptr<const dash::kernels::bwd::DeviceTemplate> t;
    if (dash_status s = dash::kernels::bwd::device_cache().get(bound.unit, device, t); s != DASH_OK) return s;
    templates.push_back(dash::kernels::bwd::bwd_template_of(static_cast<const uint8_t*>(t->device_blob),
                                                            t->blob_header, bound.header));
    state->templates.push_back(std::move(t));
  }
  auto align = [](size_t n) { return (n + 15) / 16 * 16; };
  size_t at = 0;
  auto place = [&](size_t& offset, size_t bytes) {
    offset = at;
    at = align(at + bytes);
  };
  place(state->sequences_offset, vp.sequences.size() * sizeof(dash_pack_sequence));
  place(state->templates_offset, templates.size() * sizeof(BwdTemplate));
  place(state->ticket_chunks_offset, vp.ticket_chunks.size() * sizeof(int32_t));
  place(state->q_tile_sequence_offset, vp.q_tile_sequence.size() * sizeof(int32_t));
  place(state->kv_tile_sequence_offset, vp.kv_tile_sequence.size() * sizeof(int32_t));
  dash::kernels::bwd::RelaxedCaptureMode relaxed;
  if (cudaError_t s = cudaMalloc(&state->device_blob, at < 16 ? 16 : at); s != cudaSuccess) {
    state->device_blob = nullptr;
    return cuda_fail("cudaMalloc(varlen plan)", s);
  }
  const std::vector<HostPart> parts = {
      {state->sequences_offset, vp.sequences.data(), vp.sequences.size() * sizeof(dash_pack_sequence)},
      {state->templates_offset, templates.data(), templates.size() * sizeof(BwdTemplate)},
      {state->ticket_chunks_offset, vp.ticket_chunks.data(), vp.ticket_chunks.size() * sizeof(int32_t)},
      {state->q_tile_sequence_offset, vp.q_tile_sequence.data(), vp.q_tile_sequence.size() * sizeof(int32_t)},
      {state->kv_tile_sequence_offset, vp.kv_tile_sequence.data(), vp.kv_tile_sequence.size() * sizeof(int32_t)}};
  if (dash_status s = dash::kernels::bwd::upload_to_device(device, state->device_blob, parts); s != DASH_OK) return s;

  auto plan = new dash_plan_s;
  dash_plan_header& h = plan->header;
  h.magic = DASH_PLAN_MAGIC;
  h.version = DASH_PLAN_FORMAT_VERSION;
  h.problem = pack->pack.problem.to_c();
  h.block_m = vp.tiles.block_m;
  h.block_n = vp.tiles.block_n;
  h.num_q_tiles = vp.total_q_tiles;
  h.num_kv_tiles = vp.total_kv_tiles;
  h.planner = vp.templates.empty() ? 0 : vp.templates.front().header.planner;
  // The workspace needs the split-GQA dK/dV accumulators when any sequence's template adds dK/dV across the group.
  h.gqa_mode = vp.any_split_dkv ? DASH_GQA_SPLIT_HEADS : DASH_GQA_PACK_GROUP;
  h.group_size = h.problem.heads_q / h.problem.heads_kv;
  h.heads_per_unit = 1;
  h.num_units = 1;
  h.items_per_unit = int32_t(vp.num_tickets);
  h.num_ctas = num_ctas;
  h.min_coresident_ctas = vp.wave;
  // The pack keeps a spacing only as far as every sequence's template promises it, and runs its non-deterministic
  // backward with ordered adds only where every template does (the mode is the whole launch's).
  h.rank_spacing = 0;
  bool ordered = !vp.templates.empty();
  for (size_t t = 0; t < vp.templates.size(); ++t) {
    const int32_t spacing = vp.templates[t].header.rank_spacing;
    h.rank_spacing = t == 0 ? spacing : std::min(h.rank_spacing, spacing);
    ordered = ordered && (vp.templates[t].header.flags & DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED) != 0;
  }
  if (ordered) h.flags |= DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED;
  plan->varlen = std::move(state);
  plan->note = vp.note;
  plan->device = device;
  *out = plan;
  return DASH_OK;
}

void dash_plan_destroy(dash_plan_t plan) { delete plan; }

dash_status dash_plan_blob(dash_plan_t plan, const void** data, size_t* bytes) {
  dash::capi::set_last_error("");
  if (dash_status s = dash::kernels::bwd::check_plan(plan); s != DASH_OK) return s;
  if (data == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "data: null pointer");
  if (bytes == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "bytes: null pointer");
  if (plan->varlen != nullptr) {
    return fail(DASH_ERROR_UNSUPPORTED, "plan: a varlen plan has one blob per sequence shape, not one blob");
  }
  // A plan made by dash_plan_create_async waits for its template here; its wave comes with validation.
  std::shared_ptr<const dash::UnitTemplate> unit;
  if (dash_status s = plan->device_template->validated(unit); s != DASH_OK) return s;
  std::call_once(plan->blob_once, [plan, &unit] {
    dash::Plan copy = unit->plan;
    copy.header = plan->header;
    copy.header.min_coresident_ctas = unit->plan.header.min_coresident_ctas;
    // The template's flags (validation sets WAITS_ONLY_BACKWARD on it), and the request's own.
    copy.header.flags =
        unit->plan.header.flags | (plan->header.flags & (DASH_PLAN_NONDETERMINISTIC_ONLY | DASH_PLAN_ITEM_MAJOR |
                                                          DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED));
    copy.note = plan->note;
    plan->blob = copy.to_blob();
  });
  *data = plan->blob.data();
  *bytes = plan->blob.size();
  return DASH_OK;
}

dash_status dash_usable_sms(int32_t* sms) {
  dash::capi::set_last_error("");
  if (sms == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "sms: null pointer");
  int device = 0;
  if (cudaError_t s = cudaGetDevice(&device); s != cudaSuccess) return cuda_fail("cudaGetDevice", s);
  return dash::kernels::bwd::usable_sms(device, *sms);
}

const char* dash_plan_note(dash_plan_t plan) { return plan == nullptr ? nullptr : plan->note.c_str(); }

}  // extern "C"
