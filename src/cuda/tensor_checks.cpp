// SPDX-License-Identifier: Apache-2.0
// tensor_checks.cpp — see tensor_checks.h.
#include "tensor_checks.h"

#include <initializer_list>
#include <utility>

#include <cuda_runtime_api.h>

namespace dash::kernels {
namespace {

constexpr int64_t kTmaStrideAlignElems = 8;  // 16 bytes of 2-byte elements
constexpr int64_t kMaxTmaStrideBytes = int64_t(1) << 40;

// Checks one stride. A dimension of extent 1 never uses its stride; it is replaced by `fallback`, a value the
// TMA descriptor accepts.
dash_status check_stride(const std::string& tensor, const char* field, int64_t& stride, int64_t extent,
                         int64_t fallback, bool is_output, int32_t head_dim, std::string& error) {
  const std::string name = tensor + "." + field;
  if (extent == 1) {
    stride = fallback;
    return DASH_OK;
  }
  if (stride <= 0) {
    error = name + ": must be positive when the dimension has more than one element (got " + std::to_string(stride) + ")";
    return DASH_ERROR_INVALID_ARGUMENT;
  }
  if (stride % kTmaStrideAlignElems != 0) {
    error = name + ": must be a multiple of 8 elements (16 bytes) for TMA (got " + std::to_string(stride) + ")";
    return DASH_ERROR_INVALID_ARGUMENT;
  }
  if (stride >= kMaxTmaStrideBytes / 2) {
    error = name + ": must be below 2^39 elements (TMA stride limit of 2^40 bytes; got " + std::to_string(stride) + ")";
    return DASH_ERROR_INVALID_ARGUMENT;
  }
  if (is_output && stride < head_dim) {
    error = name + ": must be >= head_dim (" + std::to_string(head_dim) + ") so that output rows do not overlap (got " +
            std::to_string(stride) + ")";
    return DASH_ERROR_INVALID_ARGUMENT;
  }
  return DASH_OK;
}

}  // namespace

dash_status check_tensor(const char* name, dash_tensor& t, int32_t batch, int32_t seqlen, int32_t heads,
                         int32_t head_dim, bool is_output, std::string& error) {
  const std::string n(name);
  if (t.data == nullptr) {
    error = n + ".data: null pointer";
    return DASH_ERROR_INVALID_ARGUMENT;
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    error = n + ".data: must be 16-byte aligned for TMA (the last dimension is contiguous)";
    return DASH_ERROR_INVALID_ARGUMENT;
  }
  // Fallbacks: the strides a packed (batch, seqlen, heads, head_dim) tensor would have.
  const int64_t packed_head = head_dim;
  const int64_t packed_seq = int64_t(heads) * head_dim;
  const int64_t packed_batch = packed_seq * seqlen;
  dash_status s = check_stride(n, "batch_stride", t.batch_stride, batch,
                               packed_batch < kMaxTmaStrideBytes / 2 ? packed_batch : kTmaStrideAlignElems, is_output,
                               head_dim, error);
  if (s == DASH_OK) s = check_stride(n, "seq_stride", t.seq_stride, seqlen, packed_seq, is_output, head_dim, error);
  if (s == DASH_OK) s = check_stride(n, "head_stride", t.head_stride, heads, packed_head, is_output, head_dim, error);
  return s;
}

dash_status check_device_pointers(std::initializer_list<std::pair<const char*, const void*>> pointers,
                                  std::string& error) {
  for (const auto& [name, ptr] : pointers) {
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the error this query may have recorded
      error = std::string(name) + ": cudaPointerGetAttributes failed: " + cudaGetErrorString(status);
      return DASH_ERROR_CUDA;
    }
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
      error = std::string(name) + ": is not device memory (a device or managed allocation is required)";
      return DASH_ERROR_INVALID_ARGUMENT;
    }
  }
  return DASH_OK;
}

}  // namespace dash::kernels
