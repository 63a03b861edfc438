// SPDX-License-Identifier: Apache-2.0
// fwd_api.cpp — the C ABI of dash/dash_attn.h for the forward pass: argument validation (every check before
// any CUDA call, each failure naming the argument), defaults, and dispatch to the kernel family of the device
// (arch_dispatch.h). Plain C++; the kernels live in the generated .cu instantiations.
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <string>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"
#include "api_error.h"
#include "arch_dispatch.h"
#include "fwd_launch_args.h"
#include "pack_handle.h"
#include "problem_checks.h"
#include "tensor_checks.h"
#include "varlen_device.h"

namespace {

using dash::capi::fail;

dash_status check_positive(const char* field, int32_t value) {
  if (value <= 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                std::string("problem.") + field + ": must be > 0 (got " + std::to_string(value) + ")");
  }
  return DASH_OK;
}

// Everything that can be decided on the host without CUDA. Fills `launch.args` with the normalised copy.
dash_status validate(const dash_fwd_args* args, dash::kernels::FwdLaunch& launch) {
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
  if (p.head_dim_v < 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                "problem.head_dim_v: must be > 0, or 0 for head_dim (got " + std::to_string(p.head_dim_v) + ")");
  }
  // The (head_dim, head_dim_v) pair: a row of the kernel table (dash_check_problem's check and wording, naming
  // problem.head_dim or problem.head_dim_v and listing the pairs).
  if (dash_status s = dash::capi::check_kernel_pair(p); s != DASH_OK) return s;
  const int32_t head_dim_v = p.head_dim_v != 0 ? p.head_dim_v : p.head_dim;  // of v and o
  if (p.mask_kind != DASH_MASK_FULL && p.mask_kind != DASH_MASK_CAUSAL && p.mask_kind != DASH_MASK_WINDOW) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                "problem.mask_kind: unknown value " + std::to_string(p.mask_kind) +
                    " (expected DASH_MASK_FULL=0, DASH_MASK_CAUSAL=1 or DASH_MASK_WINDOW=2)");
  }
  // The size limits (dash_check_problem): the same answer the bindings get before they allocate.
  if (dash_status s = dash_check_problem(&p, DASH_CHECK_FORWARD); s != DASH_OK) return s;
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
    int32_t head_dim;  // its columns: head_dim for q and k, head_dim_v for v and o
    bool is_output;
  };
  Operand const operands[] = {{"q", &a.q, p.seqlen_q, p.heads_q, p.head_dim, false},
                              {"k", &a.k, p.seqlen_k, p.heads_kv, p.head_dim, false},
                              {"v", &a.v, p.seqlen_k, p.heads_kv, head_dim_v, false},
                              {"o", &a.o, p.seqlen_q, p.heads_q, head_dim_v, true}};
  for (Operand const& op : operands) {
    std::string error;
    if (dash_status s = dash::kernels::check_tensor(op.name, *op.tensor, p.batch, op.seqlen, op.heads, op.head_dim,
                                                    op.is_output, error);
        s != DASH_OK) {
      return fail(s, error);
    }
  }
  if (a.lse == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: null pointer");
  if (reinterpret_cast<uintptr_t>(a.lse) % alignof(float) != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: must be 4-byte aligned (fp32)");
  }
  return DASH_OK;
}

// Checks that need the CUDA runtime but launch nothing: the device has a kernel family, and the pointers are
// device memory.
dash_status check_device(dash::kernels::FwdLaunch const& launch, dash::kernels::KernelFamily& family) {
  std::string error;
  if (dash_status s = dash::kernels::current_kernel_family("forward kernel", family, error); s != DASH_OK) {
    return fail(s, error);
  }
  dash_fwd_args const& a = launch.args;
  if (dash_status s = dash::kernels::check_device_pointers(
          {{"q.data", a.q.data},
           {"k.data", a.k.data},
           {"v.data", a.v.data},
           {"o.data", a.o.data},
           {"lse", a.lse},
           {"workspace", launch.workspace}},
          error);
      s != DASH_OK) {
    return fail(s, error);
  }
  return DASH_OK;
}

}  // namespace

extern "C" {

const int32_t* dash_fwd_supported_head_dims(void) { return dash_supported_head_dims(); }

size_t dash_fwd_workspace_size(const dash_fwd_args* args) {
  return args == nullptr ? 0 : dash::kernels::kFwdWorkspaceBytes;  // the same for every problem today
}

namespace {

// dash_fwd and dash_fwd_varlen after their own argument checks: the workspace, the device, the launch.
dash_status launch_forward(dash::kernels::FwdLaunch& launch, const dash_fwd_args* args, void* workspace,
                           size_t workspace_bytes, void* cuda_stream) {
  size_t const needed = dash_fwd_workspace_size(args);
  if (workspace == nullptr || workspace_bytes < needed) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                std::string("workspace: ") + (workspace == nullptr ? "null pointer" : "too small") + " (" +
                    std::to_string(workspace_bytes) + " bytes given; dash_fwd_workspace_size() requires " +
                    std::to_string(needed) + " bytes of device memory)");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % alignof(int32_t) != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace: must be 4-byte aligned");
  }
  launch.workspace = workspace;
  dash::kernels::KernelFamily family{};
  if (dash_status s = check_device(launch, family); s != DASH_OK) return s;
  launch.stream = static_cast<cudaStream_t>(cuda_stream);

  std::string error;
  if (launch.pack != nullptr) {
    // The pack's tables on this device (the first use here uploads them).
    int device = 0;
    if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) {
      return fail(DASH_ERROR_CUDA, std::string("cudaGetDevice: ") + cudaGetErrorString(status));
    }
    if (dash_status s = dash::kernels::pack_on_device(launch.pack, device, launch.varlen); s != DASH_OK) return s;
  }
  if (dash_status s = dash::kernels::run_forward(family, launch, error); s != DASH_OK) {
    return fail(s, "dash_fwd: " + error);
  }
  return DASH_OK;
}

}  // namespace

dash_status dash_fwd(const dash_fwd_args* args, void* workspace, size_t workspace_bytes, void* cuda_stream) {
  dash::capi::set_last_error("");
  dash::kernels::FwdLaunch launch{};
  if (dash_status s = validate(args, launch); s != DASH_OK) return s;
  return launch_forward(launch, args, workspace, workspace_bytes, cuda_stream);
}

dash_status dash_fwd_varlen(const dash_fwd_args* args, dash_pack_t pack, void* workspace, size_t workspace_bytes,
                            void* cuda_stream) {
  dash::capi::set_last_error("");
  if (args == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "args: null pointer");
  if (pack == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "pack: null handle");
  const dash::Pack& p = pack->pack;
  const dash_problem pack_problem = p.problem.to_c();
  if (std::memcmp(&args->problem, &pack_problem, sizeof(dash_problem)) != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                "problem: differs from the pack's (" + p.problem.describe() + "; dash_pack_problem gives it)");
  }
  if (p.total_q() == 0) return DASH_OK;  // no query rows: nothing to write
  // The packed tensors are checked as one sequence of all their rows; the pack problem is restored afterwards.
  dash_fwd_args packed = *args;
  packed.problem.batch = 1;
  packed.problem.seqlen_q = int32_t(p.total_q());
  // No key rows at all: every query row sees no key (O = 0, LSE = -inf) and K / V are never read. Their tensors may
  // be empty (a null pointer), so q stands in for them where the descriptors need an address.
  const bool no_keys = p.total_k() == 0;
  packed.problem.seqlen_k = no_keys ? 1 : int32_t(p.total_k());
  if (no_keys) packed.k = packed.v = dash_tensor{args->q.data, 0, args->q.seq_stride, args->q.head_stride};
  dash::kernels::FwdLaunch launch{};
  if (dash_status s = validate(&packed, launch); s != DASH_OK) return s;
  launch.args.problem = pack_problem;
  launch.pack = pack;  // its tables are resolved on the device in launch_forward
  return launch_forward(launch, args, workspace, workspace_bytes, cuda_stream);
}

}  // extern "C"
