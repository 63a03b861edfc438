// SPDX-License-Identifier: Apache-2.0
// varlen_device.cpp — see varlen_device.h.
#include "varlen_device.h"

#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "api_error.h"
#include "bwd/plan_handle.h"
#include "cuda_errors.h"
#include "pack_handle.h"

namespace dash::kernels {

namespace {
size_t align16(size_t n) { return (n + 15) / 16 * 16; }
}  // namespace

dash_status pack_on_device(dash_pack_t handle, int device, VarlenLaunch& out) {
  const Pack& pack = handle->pack;
  const size_t sequences_bytes = pack.sequences.size() * sizeof(dash_pack_sequence);
  const size_t chunks_offset = align16(sequences_bytes);
  void* blob = nullptr;
  {
    std::lock_guard<std::mutex> lock(handle->mutex);
    for (auto& [d, b] : handle->device_copies) {
      if (d == device) blob = b;
    }
    if (blob == nullptr) {
      const size_t bytes = chunks_offset + pack.fwd_chunks.size() * sizeof(int32_t);
      if (cudaError_t s = cudaMalloc(&blob, bytes < 16 ? 16 : bytes); s != cudaSuccess) {
        return cuda_fail("cudaMalloc(pack tables)", s);
      }
      const std::vector<bwd::HostPart> parts = {
          {0, pack.sequences.data(), sequences_bytes},
          {chunks_offset, pack.fwd_chunks.data(), pack.fwd_chunks.size() * sizeof(int32_t)}};
      if (dash_status s = bwd::upload_to_device(device, blob, parts); s != DASH_OK) {
        cudaFree(blob);
        return s;
      }
      handle->device_copies.push_back({device, blob});
    }
  }
  const uint8_t* base = static_cast<const uint8_t*>(blob);
  out.sequences = reinterpret_cast<const dash_pack_sequence*>(base);
  out.tile_chunks = reinterpret_cast<const int32_t*>(base + chunks_offset);
  out.num_sequences = int32_t(pack.sequences.size());
  out.total_q = int32_t(pack.total_q());
  out.num_tiles = int32_t(pack.fwd_tiles);
  return DASH_OK;
}

}  // namespace dash::kernels

namespace dash::capi {

void release_pack_device_copies(dash_pack_s& pack) {
  std::lock_guard<std::mutex> lock(pack.mutex);
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) current = -1;
  for (auto& [device, blob] : pack.device_copies) {
    cudaSetDevice(device);
    cudaFree(blob);
  }
  pack.device_copies.clear();
  if (current >= 0) cudaSetDevice(current);
}

}  // namespace dash::capi
