// SPDX-License-Identifier: Apache-2.0
// bwd_api.cpp — the backward half of the C ABI in dash/dash_attn.h: plan handles (built on the host by
// dash::build_plan, copied to the device once), workspace sizing, argument validation (every check before any
// CUDA work, each failure naming the argument) and dispatch to a compiled instantiation (bwd_sm90_params.h).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime_api.h>

#include "api_error.h"
#include "bwd_sm90_params.h"
#include "bwd_kernel_choice.hpp"
#include "bwd_wgmma_dispatch.h"
#include "dash/dash_attn.h"
#include "dash/geometry.hpp"
#include "dash/plan.hpp"

struct dash_plan_s {
  std::vector<uint8_t> blob;  // host copy, what the device copy holds
  dash_plan_header header{};
  void* device_blob = nullptr;
  int device = -1;
};

namespace dash::cuda::bwd {

BwdWorkspaceLayout bwd_workspace_layout(const dash_problem& p, const dash_plan_header& h) {
  auto align = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t dq_accumulators = size_t(p.batch) * p.heads_q * h.num_q_tiles;
  const size_t kv_tiles = size_t(p.batch) * p.heads_kv * h.num_kv_tiles;
  const bool split_dkv = h.gqa_mode == DASH_GQA_SPLIT_HEADS && h.group_size > 1;
  BwdWorkspaceLayout w;
  size_t at = 0;
  w.ticket = at;
  at = align(at + sizeof(int32_t));
  w.dq_counters = at;
  at = align(at + dq_accumulators * sizeof(int32_t));
  w.dkv_counters = at;
  at = align(at + (split_dkv ? kv_tiles * sizeof(int32_t) : 0));
  w.counters_end = at;
  w.delta = at;
  at = align(at + dq_accumulators * h.block_m * sizeof(float));
  w.lse_log2 = at;
  at = align(at + dq_accumulators * h.block_m * sizeof(float));
  w.dq_accum = at;
  at = align(at + dq_accumulators * h.block_m * p.head_dim * sizeof(float));
  w.dk_accum = at;
  at = align(at + (split_dkv ? kv_tiles * h.block_n * p.head_dim * sizeof(float) : 0));
  w.dv_accum = at;
  at = align(at + (split_dkv ? kv_tiles * h.block_n * p.head_dim * sizeof(float) : 0));
  w.total = at;
  return w;
}

}  // namespace dash::cuda::bwd

namespace {

using dash::capi::set_last_error;
using namespace dash::cuda::bwd;

dash_status fail(dash_status status, std::string message) {
  set_last_error(std::move(message));
  return status;
}

dash_status cuda_fail(const char* what, cudaError_t status) {
  cudaGetLastError();  // clear the (non-sticky) error the failed call recorded, so later calls do not see it
  return fail(DASH_ERROR_CUDA, std::string(what) + ": " + cudaGetErrorString(status));
}

bool same_problem(const dash_problem& a, const dash_problem& b) {
  return a.batch == b.batch && a.heads_q == b.heads_q && a.heads_kv == b.heads_kv && a.seqlen_q == b.seqlen_q &&
         a.seqlen_k == b.seqlen_k && a.head_dim == b.head_dim && a.mask_kind == b.mask_kind &&
         (a.mask_kind != DASH_MASK_WINDOW ||
          (a.window_left == b.window_left && a.window_right == b.window_right));
}

std::string describe(const dash_problem& p) {
  return "batch=" + std::to_string(p.batch) + " heads_q=" + std::to_string(p.heads_q) +
         " heads_kv=" + std::to_string(p.heads_kv) + " seqlen_q=" + std::to_string(p.seqlen_q) +
         " seqlen_k=" + std::to_string(p.seqlen_k) + " head_dim=" + std::to_string(p.head_dim) +
         " mask_kind=" + std::to_string(p.mask_kind);
}

// 16-byte copies (cp.async) need 16-byte aligned rows: base pointer and every used stride.
dash_status check_tensor(const char* name, dash_tensor& t, int32_t batch, int32_t seqlen, int32_t heads,
                         int32_t head_dim) {
  const std::string n(name);
  if (t.data == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, n + ".data: null pointer");
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, n + ".data: must be 16-byte aligned");
  }
  struct Dim {
    const char* field;
    int64_t* stride;
    int32_t extent;
  } dims[] = {{"batch_stride", &t.batch_stride, batch}, {"seq_stride", &t.seq_stride, seqlen},
              {"head_stride", &t.head_stride, heads}};
  for (Dim& d : dims) {
    if (d.extent == 1) {
      *d.stride = 0;  // never used
      continue;
    }
    const std::string f = n + "." + d.field;
    if (*d.stride <= 0) {
      return fail(DASH_ERROR_INVALID_ARGUMENT,
                  f + ": must be positive when the dimension has more than one element (got " +
                      std::to_string(*d.stride) + ")");
    }
    if (*d.stride % 8 != 0) {
      return fail(DASH_ERROR_INVALID_ARGUMENT, f + ": must be a multiple of 8 elements (16 bytes) (got " +
                                                   std::to_string(*d.stride) + ")");
    }
  }
  if (heads > 1 && t.head_stride < head_dim) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, n + ".head_stride: must be >= head_dim (got " +
                                                 std::to_string(t.head_stride) + ")");
  }
  return DASH_OK;
}

dash_status check_plan(dash_plan_t plan) {
  if (plan == nullptr || plan->device_blob == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "plan: null handle");
  return DASH_OK;
}

// Everything decidable on the host. Fills `a` with the normalised copy.
dash_status validate(const dash_bwd_args* args, dash_plan_t plan, dash_bwd_args& a) {
  if (args == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "args: null pointer");
  if (dash_status s = check_plan(plan); s != DASH_OK) return s;
  a = *args;
  const dash_problem& p = a.problem;
  const dash_plan_header& h = plan->header;
  if (!same_problem(p, h.problem)) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "args.problem: differs from the plan's problem (args: " + describe(p) +
                                                 "; plan: " + describe(h.problem) + ")");
  }
  if (p.head_dim != 64 && p.head_dim != 128) {
    return fail(DASH_ERROR_UNSUPPORTED, "problem.head_dim: " + std::to_string(p.head_dim) +
                                            " is not supported by the backward kernel (supported: 64, 128)");
  }
  if (p.mask_kind != DASH_MASK_FULL && p.mask_kind != DASH_MASK_CAUSAL) {
    return fail(DASH_ERROR_UNSUPPORTED, "problem.mask_kind: only DASH_MASK_FULL and DASH_MASK_CAUSAL are supported "
                                        "by the backward kernel (got " + std::to_string(p.mask_kind) + ")");
  }
  const dash::TileShape tiles = dash::default_backward_tiles(p.head_dim);
  if (h.block_m != tiles.block_m || h.block_n != tiles.block_n) {
    return fail(DASH_ERROR_UNSUPPORTED, "plan: tiles " + std::to_string(h.block_m) + "x" + std::to_string(h.block_n) +
                                            " differ from the kernel's " + std::to_string(tiles.block_m) + "x" +
                                            std::to_string(tiles.block_n) + " for head_dim " +
                                            std::to_string(p.head_dim));
  }
  if (a.dtype != DASH_DTYPE_BF16 && a.dtype != DASH_DTYPE_FP16) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "dtype: unknown value " + std::to_string(int(a.dtype)));
  }
  if (!std::isfinite(a.softmax_scale) || a.softmax_scale < 0.f) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "softmax_scale: must be finite and > 0, or 0 for 1/sqrt(head_dim) (got " +
                                                 std::to_string(a.softmax_scale) + ")");
  }
  if (a.softmax_scale == 0.f) a.softmax_scale = float(1.0 / std::sqrt(double(p.head_dim)));
  struct Operand {
    const char* name;
    dash_tensor* t;
    int32_t seqlen, heads;
  } ops[] = {{"q", &a.q, p.seqlen_q, p.heads_q},     {"k", &a.k, p.seqlen_k, p.heads_kv},
             {"v", &a.v, p.seqlen_k, p.heads_kv},    {"o", &a.o, p.seqlen_q, p.heads_q},
             {"dout", &a.dout, p.seqlen_q, p.heads_q}, {"dq", &a.dq, p.seqlen_q, p.heads_q},
             {"dk", &a.dk, p.seqlen_k, p.heads_kv},  {"dv", &a.dv, p.seqlen_k, p.heads_kv}};
  for (Operand& op : ops) {
    if (dash_status s = check_tensor(op.name, *op.t, p.batch, op.seqlen, op.heads, p.head_dim); s != DASH_OK) return s;
  }
  if (a.lse == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: null pointer");
  if (reinterpret_cast<uintptr_t>(a.lse) % 4 != 0) return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: must be 4-byte aligned");
  if (a.debug_order_log != nullptr && reinterpret_cast<uintptr_t>(a.debug_order_log) % 8 != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "debug_order_log: must be 8-byte aligned");
  }
  if (int64_t(p.batch) * p.heads_q > 65535) {
    return fail(DASH_ERROR_UNSUPPORTED, "problem.batch: batch * heads_q must be <= 65535 for the backward's "
                                        "preprocess grid (got " + std::to_string(int64_t(p.batch) * p.heads_q) + ")");
  }
  int64_t const tickets = int64_t(h.num_units) * h.items_per_unit;
  if (tickets >= (int64_t(1) << 31) - int64_t(h.num_ctas) - 1) {
    return fail(DASH_ERROR_UNSUPPORTED, "plan: " + std::to_string(tickets) + " tickets exceed the 32-bit ticket counter");
  }
  return DASH_OK;
}

// The value of DASH_BWD_KERNEL, read once per process (bwd_kernel_choice.hpp says what each value selects).
const std::string& bwd_kernel_env() {
  static const std::string value = [] {
    const char* env = std::getenv("DASH_BWD_KERNEL");
    return std::string(env == nullptr ? "" : env);
  }();
  return value;
}

// Calls f(head dim, dtype) with both as compile-time constants: the instantiations that exist (head dims 64
// and 128, checked by dash_bwd before; bf16 and fp16).
template <class F>
dash_status with_instantiation(int32_t head_dim, dash_dtype dtype, F&& f) {
  using D64 = std::integral_constant<int, 64>;
  using D128 = std::integral_constant<int, 128>;
  using Bf16 = std::integral_constant<dash_dtype, DASH_DTYPE_BF16>;
  using Fp16 = std::integral_constant<dash_dtype, DASH_DTYPE_FP16>;
  if (head_dim == 64) return dtype == DASH_DTYPE_BF16 ? f(D64{}, Bf16{}) : f(D64{}, Fp16{});
  return dtype == DASH_DTYPE_BF16 ? f(D128{}, Bf16{}) : f(D128{}, Fp16{});
}

// Most CTAs of `kernel`'s main kernel the current device holds at once, for this head dim and dtype.
dash_status max_coresident_ctas(BwdKernel kernel, int32_t head_dim, dash_dtype dtype, int32_t& ctas,
                                std::string& error) {
  return with_instantiation(head_dim, dtype, [&](auto hd, auto dt) {
    constexpr int kHeadDim = decltype(hd)::value;
    constexpr dash_dtype kDtype = decltype(dt)::value;
    return kernel == BwdKernel::kWgmma ? bwd_wgmma_max_coresident<kHeadDim, kDtype>(ctas, error)
                                       : bwd_sm90_max_coresident<kHeadDim, kDtype>(ctas, error);
  });
}

// Preprocess, main and convert launches of `kernel` on `stream`.
dash_status launch_backward(BwdKernel kernel, int32_t head_dim, dash_dtype dtype, const BwdParams& params,
                            int32_t ctas, bool cooperative, cudaStream_t stream, std::string& error) {
  return with_instantiation(head_dim, dtype, [&](auto hd, auto dt) {
    constexpr int kHeadDim = decltype(hd)::value;
    constexpr dash_dtype kDtype = decltype(dt)::value;
    return kernel == BwdKernel::kWgmma ? run_bwd_wgmma<kHeadDim, kDtype>(params, ctas, cooperative, stream, error)
                                       : run_bwd_sm90<kHeadDim, kDtype>(params, ctas, cooperative, stream, error);
  });
}

}  // namespace

extern "C" {

dash_status dash_plan_create(const dash_problem* problem, const char* schedule, int32_t num_ctas, int32_t gqa_mode,
                             dash_plan_t* out) {
  set_last_error("");
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
    dash::Plan built = dash::build_plan(request);
    plan->blob = built.to_blob();
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
  set_last_error("");
  if (dash_status s = check_plan(plan); s != DASH_OK) return s;
  if (data == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "data: null pointer");
  if (bytes == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "bytes: null pointer");
  *data = plan->blob.data();
  *bytes = plan->blob.size();
  return DASH_OK;
}

size_t dash_bwd_workspace_size(const dash_bwd_args* args, dash_plan_t plan) {
  set_last_error("");
  dash_bwd_args a{};
  if (validate(args, plan, a) != DASH_OK) return 0;
  return bwd_workspace_layout(a.problem, plan->header).total;
}

dash_status dash_bwd(const dash_bwd_args* args, dash_plan_t plan, int32_t deterministic, void* workspace,
                     size_t workspace_bytes, void* cuda_stream) {
  set_last_error("");
  dash_bwd_args a{};
  if (dash_status s = validate(args, plan, a); s != DASH_OK) return s;
  if (deterministic != 0 && deterministic != 1) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "deterministic: must be 0 or 1 (got " + std::to_string(deterministic) + ")");
  }
  const dash_plan_header& h = plan->header;
  const BwdWorkspaceLayout w = bwd_workspace_layout(a.problem, h);
  if (workspace == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace: null pointer");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace: must be 256-byte aligned");
  }
  if (workspace_bytes < w.total) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace_bytes: " + std::to_string(workspace_bytes) +
                                                 " bytes given, dash_bwd_workspace_size() requires " +
                                                 std::to_string(w.total));
  }

  int device = 0;
  if (cudaError_t s = cudaGetDevice(&device); s != cudaSuccess) return cuda_fail("cudaGetDevice", s);
  if (device != plan->device) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "plan: created on device " + std::to_string(plan->device) +
                                                 ", but the current device is " + std::to_string(device));
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    return fail(DASH_ERROR_UNSUPPORTED, "device " + std::to_string(device) + ": compute capability " +
                                            std::to_string(major) + "." + std::to_string(minor) +
                                            "; the backward kernel is built for sm_90a (Hopper) only");
  }

  // Kernel selection (DASH_BWD_KERNEL, read once). Every check above is shared by both kernels; asking for
  // a kernel that cannot run this problem is an error, never a silent fallback to the other.
  BwdKernel kernel = BwdKernel::kMma;
  {
    std::string error;
    if (dash_status s = select_backward_kernel(bwd_kernel_env(), kernel, error); s != DASH_OK) {
      return fail(s, error);
    }
  }

  // A plan with forward waits needs all its CTAs co-resident (docs/DEADLOCK.md): launch cooperatively, and
  // refuse when the device cannot hold them.
  const bool needs_coresidency = !(h.flags & DASH_PLAN_WAITS_ONLY_BACKWARD);
  std::string error;
  if (needs_coresidency) {
    int32_t capacity = 0;
    dash_status s = max_coresident_ctas(kernel, a.problem.head_dim, a.dtype, capacity, error);
    if (s != DASH_OK) return fail(s, "dash_bwd: " + error);
    if (h.num_ctas > capacity) {
      return fail(DASH_ERROR_UNSUPPORTED, "plan.num_ctas: " + std::to_string(h.num_ctas) +
                                              " CTAs must be co-resident for this plan's forward waits, but this "
                                              "device holds at most " + std::to_string(capacity) +
                                              " backward CTAs at once (build the plan with num_ctas <= that)");
    }
  }

  uint8_t* ws = static_cast<uint8_t*>(workspace);
  const uint8_t* blob = static_cast<const uint8_t*>(plan->device_blob);
  const dash_problem& p = a.problem;
  BwdParams params{};
  params.q = a.q;
  params.k = a.k;
  params.v = a.v;
  params.o = a.o;
  params.dout = a.dout;
  params.dq = a.dq;
  params.dk = a.dk;
  params.dv = a.dv;
  params.lse = a.lse;
  params.batch = p.batch;
  params.heads_q = p.heads_q;
  params.heads_kv = p.heads_kv;
  params.group_size = p.heads_q / p.heads_kv;
  params.seqlen_q = p.seqlen_q;
  params.seqlen_k = p.seqlen_k;
  params.causal = p.mask_kind == DASH_MASK_CAUSAL ? 1 : 0;
  params.softmax_scale = a.softmax_scale;
  params.scale_log2 = float(double(a.softmax_scale) * 1.4426950408889634);
  params.items = reinterpret_cast<const dash_item*>(blob + h.items_offset);
  params.segments = reinterpret_cast<const dash_segment*>(blob + h.segments_offset);
  params.visits = reinterpret_cast<const dash_visit*>(blob + h.visits_offset);
  params.dq_count = reinterpret_cast<const uint16_t*>(blob + h.dq_count_offset);
  params.group_head_by_rank = blob + h.group_head_by_rank_offset;
  params.items_per_unit = h.items_per_unit;
  params.num_tickets = int32_t(int64_t(h.num_units) * h.items_per_unit);
  params.gqa_mode = h.gqa_mode;
  params.plan_flags = int32_t(h.flags);
  params.num_q_tiles = h.num_q_tiles;
  params.num_kv_tiles = h.num_kv_tiles;
  params.deterministic = deterministic;
  params.split_dkv = (h.gqa_mode == DASH_GQA_SPLIT_HEADS && h.group_size > 1) ? 1 : 0;
  params.ticket_counter = reinterpret_cast<int32_t*>(ws + w.ticket);
  params.dq_counters = reinterpret_cast<int32_t*>(ws + w.dq_counters);
  params.dkv_counters = reinterpret_cast<int32_t*>(ws + w.dkv_counters);
  params.delta = reinterpret_cast<float*>(ws + w.delta);
  params.lse_log2 = reinterpret_cast<float*>(ws + w.lse_log2);
  params.dq_accum = reinterpret_cast<float*>(ws + w.dq_accum);
  params.dk_accum = reinterpret_cast<float*>(ws + w.dk_accum);
  params.dv_accum = reinterpret_cast<float*>(ws + w.dv_accum);
  params.order_log = deterministic ? a.debug_order_log : nullptr;

  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  // Zero what must start at zero: the ticket and order counters always; the dQ accumulators only when adds
  // are unordered (deterministic mode stores each accumulator's first partial); the split-GQA dK/dV
  // accumulators always (every group rank adds).
  if (cudaError_t s = cudaMemsetAsync(ws, 0, w.counters_end, stream); s != cudaSuccess) {
    return cuda_fail("cudaMemsetAsync(counters)", s);
  }
  if (!deterministic) {
    if (cudaError_t s = cudaMemsetAsync(ws + w.dq_accum, 0, w.dk_accum - w.dq_accum, stream); s != cudaSuccess) {
      return cuda_fail("cudaMemsetAsync(dq_accum)", s);
    }
  }
  if (params.split_dkv) {
    if (cudaError_t s = cudaMemsetAsync(ws + w.dk_accum, 0, w.total - w.dk_accum, stream); s != cudaSuccess) {
      return cuda_fail("cudaMemsetAsync(dk/dv accum)", s);
    }
  }
  if (dash_status s = launch_backward(kernel, p.head_dim, a.dtype, params, h.num_ctas, needs_coresidency, stream, error);
      s != DASH_OK) {
    return fail(s, std::string(kernel == BwdKernel::kWgmma ? "dash_bwd (TMA + wgmma kernel): " : "dash_bwd: ") + error);
  }
  return DASH_OK;
}

}  // extern "C"
