// SPDX-License-Identifier: Apache-2.0
// bwd/launch.cpp — dash_bwd: after validation (validation.cpp), the kernel parameters, the
// zeroing of the workspace's counters, and the kernels of the device's family (arch_dispatch.h).
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "api_error.h"
#include "arch_dispatch.h"
#include "bwd/bwd_params.h"
#include "bwd/plan_handle.h"
#include "bwd/validation.h"
#include "cuda_errors.h"
#include "dash/attention_mask.hpp"

namespace dash::kernels::bwd {
namespace {

// The kernel parameters of a validated call: the problem, the plan's tables (device copy) and the workspace.
// `ordered`: runs_ordered of the call.
BwdParams make_params(const dash_bwd_args& a, const dash_plan_s& plan, bool ordered, uint8_t* ws,
                      const BwdWorkspaceLayout& w) {
  const dash_plan_header& h = plan.header;
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
  params.mask = AttentionMask::of(p);
  params.softmax_scale = a.softmax_scale;
  params.scale_log2 = float(double(a.softmax_scale) * 1.4426950408889634);
  if (const VarlenDevicePlan* varlen = plan.varlen.get()) {
    // Varlen: one batch of global tiles (bwd_params.h); the sequences name their templates.
    const uint8_t* blob = static_cast<const uint8_t*>(varlen->device_blob);
    params.batch = 1;
    params.sequences = reinterpret_cast<const dash_pack_sequence*>(blob + varlen->sequences_offset);
    params.templates = reinterpret_cast<const BwdTemplate*>(blob + varlen->templates_offset);
    params.ticket_chunks = reinterpret_cast<const int32_t*>(blob + varlen->ticket_chunks_offset);
    params.q_tile_sequence = reinterpret_cast<const int32_t*>(blob + varlen->q_tile_sequence_offset);
    params.kv_tile_sequence = reinterpret_cast<const int32_t*>(blob + varlen->kv_tile_sequence_offset);
    params.num_sequences = int32_t(varlen->plan.sequences.size());
    params.total_q = varlen->total_q;
  } else {
    const uint8_t* blob = static_cast<const uint8_t*>(plan.device_template->device_blob);
    params.fixed = bwd_template_of(blob, h, h);
  }
  params.num_tickets = int32_t(int64_t(h.num_units) * h.items_per_unit);
  params.num_q_tiles = h.num_q_tiles;
  params.num_kv_tiles = h.num_kv_tiles;
  params.ordered = ordered;
  params.rank_spacing = h.rank_spacing;
  // A varlen header's GQA mode says whether any of its templates splits (plan_handle.cpp).
  params.split_dkv = dash_plan_splits_dkv(&h);
  params.ticket_counter = reinterpret_cast<int32_t*>(ws + w.ticket);
  // An unordered run's workspace has no counter regions (workspace.cpp): null, so that a stray use faults
  // instead of writing into the delta region that follows.
  params.dq_counters = ordered ? reinterpret_cast<int32_t*>(ws + w.dq_counters) : nullptr;
  params.dkv_counters = ordered ? reinterpret_cast<int32_t*>(ws + w.dkv_counters) : nullptr;
  params.delta = reinterpret_cast<float*>(ws + w.delta);
  params.lse_log2 = reinterpret_cast<float*>(ws + w.lse_log2);
  params.dq_accum = reinterpret_cast<float*>(ws + w.dq_accum);
  params.dk_accum = reinterpret_cast<float*>(ws + w.dk_accum);
  params.dv_accum = reinterpret_cast<float*>(ws + w.dv_accum);
  params.order_log = ordered ? a.debug_order_log : nullptr;
  // What must start at zero: the ticket and order counters always; the split-GQA dK/dV accumulators always (every
  // group rank adds). The dQ accumulators start at zero only when adds are unordered: the preprocess kernel zeroes
  // them then, in the same pass that writes delta (ordered adds store each accumulator's first partial).
  params.zero_counters = reinterpret_cast<uint4*>(ws);
  params.zero_counters_words = int64_t(w.counters_end / sizeof(uint4));
  params.zero_dkv = params.split_dkv ? reinterpret_cast<uint4*>(ws + w.dk_accum) : nullptr;
  params.zero_dkv_words = params.split_dkv ? int64_t((w.total - w.dk_accum) / sizeof(uint4)) : 0;
  return params;
}

}  // namespace
}  // namespace dash::kernels::bwd

using dash::capi::fail;
using dash::kernels::cuda_fail;
using namespace dash::kernels::bwd;

extern "C" dash_status dash_bwd(const dash_bwd_args* args, dash_plan_t plan, int32_t deterministic, void* workspace,
                                size_t workspace_bytes, void* cuda_stream) {
  dash::capi::set_last_error("");
  dash_bwd_args a{};
  // Refuses, among the rest, a pair whose row has a forward kernel only, before anything is zeroed or launched.
  if (dash_status s = validate(args, plan, a); s != DASH_OK) return s;
  if (dash_status s = check_deterministic(deterministic, *plan); s != DASH_OK) return s;
  const dash_plan_header& h = plan->header;
  const bool ordered = runs_ordered(deterministic, h);
  const BwdWorkspaceLayout w = bwd_workspace_layout(workspace_problem(a.problem, *plan), h, ordered);
  if (workspace == nullptr) return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace: null pointer");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace: must be 256-byte aligned");
  }
  if (workspace_bytes < w.total) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "workspace_bytes: " + std::to_string(workspace_bytes) +
                                                 " bytes given, dash_bwd_workspace_size() requires " +
                                                 std::to_string(w.total) + " in " +
                                                 (deterministic ? "deterministic" : "non-deterministic") + " mode");
  }

  int device = 0;
  if (cudaError_t s = cudaGetDevice(&device); s != cudaSuccess) return cuda_fail("cudaGetDevice", s);
  if (device != plan->device) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "plan: created on device " + std::to_string(plan->device) +
                                                 ", but the current device is " + std::to_string(device));
  }
  std::string error;
  dash::kernels::KernelFamily family{};
  if (dash_status s = dash::kernels::current_kernel_family("backward kernel", family, error); s != DASH_OK) {
    return fail(s, error);
  }

  // Every call is a plain launch of num_ctas CTAs (docs/DEADLOCK.md). Unordered adds have no wait between CTAs.
  // With ordered adds (runs_ordered: in either mode) a plan progresses whenever `min_coresident_ctas` (its wave) of
  // its CTAs run at once, and plan_for checked wave <= num_ctas <= the SMs the context can use: one CTA fits an SM
  // (else the launch fails), so an idle partition holds them all. CTAs whose SMs other kernels hold start when
  // those finish, or find no ticket left and exit.
  if (plan->varlen != nullptr && plan->varlen->total_q == 0 && plan->varlen->total_k == 0) return DASH_OK;
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  const BwdParams params = make_params(a, *plan, ordered, ws, w);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  // A plan of dash_plan_create_async may still be building its tables: their copy is queued here, ahead of the
  // kernels (plan_handle.cpp, "Tables still being written"), or the stream waits for a copy queued before.
  if (plan->device_template != nullptr) {
    if (dash_status s = plan->device_template->make_ready(stream); s != DASH_OK) return s;
  }
  // What must start at zero (params.zero_*) is zeroed by the backward's first kernel, or by the launcher where that
  // kernel has no rows to run (bwd_launch.cuh): one stream operation fewer per call.
  if (dash_status s = dash::kernels::run_backward(family, params, a.problem.head_dim, a.problem.head_dim_v, a.dtype,
                                                      h.num_ctas, device, stream, error);
      s != DASH_OK) {
    return fail(s, "dash_bwd: " + error);
  }
  return DASH_OK;
}
