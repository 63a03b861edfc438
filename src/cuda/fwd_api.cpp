// SPDX-License-Identifier: Apache-2.0
// fwd_api.cpp — the C ABI of dash/dash_attn.h for the forward pass: argument validation (every check before
// any CUDA call, each failure naming the argument), defaults, and dispatch to a compiled kernel
// instantiation (fwd_dispatch.h). Plain C++; the kernels live in the .cu instantiations.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"
#include "api_error.h"
#include "fwd_dispatch.h"

namespace {

dash_status fail(dash_status status, std::string message) {
  dash::capi::set_last_error(std::move(message));
  return status;
}

constexpr int64_t kTmaStrideAlignElems = 8;  // 16 bytes of 2-byte elements
constexpr int64_t kMaxTmaStrideBytes = int64_t(1) << 40;

std::string supported_head_dims_text() {
  std::string text;
  for (const int32_t* d = dash_supported_head_dims(); *d != 0; ++d) {
    if (!text.empty()) text += ", ";
    text += std::to_string(*d);
  }
  return text;
}

// Checks one stride of a tensor. A dimension of extent 1 never uses its stride; it is replaced by a value
// the TMA descriptor accepts (`fallback`) so that callers may pass 0 or anything there.
dash_status check_stride(const char* tensor, const char* field, int64_t& stride, int64_t extent, int64_t fallback,
                         bool is_output, int32_t head_dim) {
  std::string const name = std::string(tensor) + "." + field;
  if (extent == 1) {
    stride = fallback;
    return DASH_OK;
  }
  if (stride <= 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                name + ": must be positive when the dimension has more than one element (got " +
                    std::to_string(stride) + ")");
  }
  if (stride % kTmaStrideAlignElems != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, name + ": must be a multiple of 8 elements (16 bytes) for TMA (got " +
                                                 std::to_string(stride) + ")");
  }
  if (stride >= kMaxTmaStrideBytes / 2) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                name + ": must be below 2^39 elements (TMA stride limit of 2^40 bytes; got " + std::to_string(stride) +
                    ")");
  }
  if (is_output && stride < head_dim) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, name + ": must be >= head_dim (" + std::to_string(head_dim) +
                                                 ") so that output rows do not overlap (got " +
                                                 std::to_string(stride) + ")");
  }
  return DASH_OK;
}

dash_status check_device_pointer(const char* name, const void* ptr) {
  cudaPointerAttributes attributes{};
  cudaError_t const status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the error this query may have recorded
    return fail(DASH_ERROR_CUDA, std::string(name) + ": cudaPointerGetAttributes failed: " +
                                     cudaGetErrorString(status));
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                std::string(name) + ": is not device memory (a device or managed allocation is required)");
  }
  return DASH_OK;
}

// Validates a tensor's pointer and strides for TMA and normalises the strides of extent-1 dimensions.
dash_status check_tensor(const char* name, dash_tensor& t, int32_t batch, int32_t seqlen, int32_t heads,
                         int32_t head_dim, bool is_output) {
  if (t.data == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, std::string(name) + ".data: null pointer");
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                std::string(name) + ".data: must be 16-byte aligned for TMA (the last dimension is contiguous)");
  }
  // Fallbacks: the stride a packed (batch, seqlen, heads, head_dim) tensor would have.
  int64_t const packed_head = head_dim;
  int64_t const packed_seq = int64_t(heads) * head_dim;
  int64_t const packed_batch = packed_seq * seqlen;
  dash_status s = check_stride(name, "batch_stride", t.batch_stride, batch,
                               packed_batch < kMaxTmaStrideBytes / 2 ? packed_batch : kTmaStrideAlignElems,
                               is_output, head_dim);
  if (s != DASH_OK) return s;
  s = check_stride(name, "seq_stride", t.seq_stride, seqlen, packed_seq, is_output, head_dim);
  if (s != DASH_OK) return s;
  return check_stride(name, "head_stride", t.head_stride, heads, packed_head, is_output, head_dim);
}

dash_status check_positive(const char* field, int32_t value) {
  if (value <= 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                std::string("problem.") + field + ": must be > 0 (got " + std::to_string(value) + ")");
  }
  return DASH_OK;
}

// Everything that can be decided on the host without CUDA. Fills `launch.args` with the normalised copy.
dash_status validate(const dash_fwd_args* args, dash::cuda::FwdLaunch& launch) {
  if (args == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "args: null pointer");
  launch.args = *args;
  dash_fwd_args& a = launch.args;
  dash_problem const& p = a.problem;

  for (auto [field, value] : {std::pair{"batch", p.batch}, std::pair{"heads_q", p.heads_q},
                              std::pair{"heads_kv", p.heads_kv}, std::pair{"seqlen_q", p.seqlen_q},
                              std::pair{"seqlen_k", p.seqlen_k}, std::pair{"head_dim", p.head_dim}}) {
    if (dash_status s = check_positive(field, value); s != DASH_OK) return s;
  }
  if (p.heads_q % p.heads_kv != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "problem.heads_q: must be a multiple of problem.heads_kv (got " +
                                                 std::to_string(p.heads_q) + " and " + std::to_string(p.heads_kv) +
                                                 ")");
  }
  bool head_dim_supported = false;
  for (const int32_t* d = dash_supported_head_dims(); *d != 0; ++d) head_dim_supported |= (*d == p.head_dim);
  if (!head_dim_supported) {
    return fail(DASH_ERROR_UNSUPPORTED, "problem.head_dim: " + std::to_string(p.head_dim) +
                                            " is not supported; supported head dims: " + supported_head_dims_text());
  }
  if (p.mask_kind == DASH_MASK_WINDOW) {
    return fail(DASH_ERROR_UNSUPPORTED,
                "problem.mask_kind: DASH_MASK_WINDOW is not supported by the forward kernel (use FULL or CAUSAL)");
  }
  if (p.mask_kind != DASH_MASK_FULL && p.mask_kind != DASH_MASK_CAUSAL) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                "problem.mask_kind: unknown value " + std::to_string(p.mask_kind) +
                    " (expected DASH_MASK_FULL=0 or DASH_MASK_CAUSAL=1)");
  }
  // The size limits (dash_check_problem): the same answer the bindings get before they allocate.
  if (dash_status s = dash_check_problem(&p, 0); s != DASH_OK) return s;
  if (a.dtype != DASH_DTYPE_BF16 && a.dtype != DASH_DTYPE_FP16) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "dtype: unknown value " + std::to_string(int(a.dtype)) +
                                                 " (expected DASH_DTYPE_BF16=0 or DASH_DTYPE_FP16=1)");
  }
  if (!std::isfinite(a.softmax_scale) || a.softmax_scale < 0.f) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                "softmax_scale: must be finite and > 0, or 0 for 1/sqrt(head_dim) (got " +
                    std::to_string(a.softmax_scale) + ")");
  }
  if (a.softmax_scale == 0.f) a.softmax_scale = float(1.0 / std::sqrt(double(p.head_dim)));

  struct Operand {
    const char* name;
    dash_tensor* tensor;
    int32_t seqlen;
    int32_t heads;
    bool is_output;
  };
  Operand const operands[] = {{"q", &a.q, p.seqlen_q, p.heads_q, false},
                              {"k", &a.k, p.seqlen_k, p.heads_kv, false},
                              {"v", &a.v, p.seqlen_k, p.heads_kv, false},
                              {"o", &a.o, p.seqlen_q, p.heads_q, true}};
  for (Operand const& op : operands) {
    dash_status s = check_tensor(op.name, *op.tensor, p.batch, op.seqlen, op.heads, p.head_dim, op.is_output);
    if (s != DASH_OK) return s;
  }
  if (a.lse == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: null pointer");
  if (reinterpret_cast<uintptr_t>(a.lse) % alignof(float) != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: must be 4-byte aligned (fp32)");
  }
  return DASH_OK;
}

// Checks that need the CUDA runtime but launch nothing: the current device is a Hopper GPU and the
// pointers are device memory.
dash_status check_device(dash::cuda::FwdLaunch const& launch) {
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fail(DASH_ERROR_CUDA, std::string("cudaGetDevice: ") + cudaGetErrorString(status));
  }
  int major = 0, minor = 0;
  status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fail(DASH_ERROR_CUDA, std::string("cudaDeviceGetAttribute(compute capability): ") +
                                     cudaGetErrorString(status));
  }
  if (major != 9 || minor != 0) {
    return fail(DASH_ERROR_UNSUPPORTED, "device " + std::to_string(device) + ": compute capability " +
                                            std::to_string(major) + "." + std::to_string(minor) +
                                            "; the forward kernel is built for sm_90a (Hopper) only");
  }
  dash_fwd_args const& a = launch.args;
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"q.data", a.q.data}, {"k.data", a.k.data},
                           {"v.data", a.v.data}, {"o.data", a.o.data}, {"lse", a.lse}}) {
    if (dash_status s = check_device_pointer(name, ptr); s != DASH_OK) return s;
  }
  return DASH_OK;
}

template <int kHeadDim>
dash_status dispatch_dtype(dash::cuda::FwdLaunch const& launch, std::string& error) {
  return launch.args.dtype == DASH_DTYPE_BF16 ? dash::cuda::run_fwd_sm90<kHeadDim, DASH_DTYPE_BF16>(launch, error)
                                              : dash::cuda::run_fwd_sm90<kHeadDim, DASH_DTYPE_FP16>(launch, error);
}

}  // namespace

extern "C" {

const int32_t* dash_fwd_supported_head_dims(void) { return dash_supported_head_dims(); }

size_t dash_fwd_workspace_size(const dash_fwd_args* args) {
  (void)args;  // the forward kernel keeps everything on chip and in O / LSE
  return 0;
}

dash_status dash_fwd(const dash_fwd_args* args, void* workspace, size_t workspace_bytes, void* cuda_stream) {
  dash::capi::set_last_error("");
  dash::cuda::FwdLaunch launch{};
  if (dash_status s = validate(args, launch); s != DASH_OK) return s;
  size_t const needed = dash_fwd_workspace_size(args);
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr)) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace_bytes: " + std::to_string(workspace_bytes) +
                                                 " bytes given, dash_fwd_workspace_size() requires " +
                                                 std::to_string(needed));
  }
  if (dash_status s = check_device(launch); s != DASH_OK) return s;
  launch.stream = static_cast<cudaStream_t>(cuda_stream);

  std::string error;
  dash_status const status = launch.args.problem.head_dim == 64 ? dispatch_dtype<64>(launch, error)
                                                                : dispatch_dtype<128>(launch, error);
  if (status != DASH_OK) return fail(status, "dash_fwd: " + error);
  return DASH_OK;
}

}  // extern "C"
