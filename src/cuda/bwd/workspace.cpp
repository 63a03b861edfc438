// SPDX-License-Identifier: Apache-2.0
// bwd/workspace.cpp — the backward's device workspace: its regions (counters, delta, LSE2, the fp32 dQ
// accumulators and, for split-head GQA, the dK/dV accumulators) and dash_bwd_workspace_size.
// The layout depends on the ordering (runs_ordered): only ordered adds read the dQ and dK/dV turn counters, so an
// unordered backward gets none (its extra memory is then below FA3's, which always allocates a dQ semaphore).
#include <cstddef>

#include "api_error.h"
#include "bwd/bwd_params.h"
#include "bwd/plan_handle.h"
#include "bwd/validation.h"

namespace dash::kernels::bwd {

dash_problem workspace_problem(const dash_problem& problem, const dash_plan_s& plan) {
  dash_problem p = problem;
  if (plan.varlen != nullptr) p.batch = 1;  // its header counts the pack's global tiles
  return p;
}

BwdWorkspaceLayout bwd_workspace_layout(const dash_problem& p, const dash_plan_header& h, bool ordered) {
  auto align = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t dq_accumulators = size_t(p.batch) * p.heads_q * h.num_q_tiles;
  const size_t kv_tiles = size_t(p.batch) * p.heads_kv * h.num_kv_tiles;
  const bool split_dkv = dash_plan_splits_dkv(&h) != 0;
  BwdWorkspaceLayout w;
  size_t at = 0;
  w.ticket = at;
  at = align(at + sizeof(int32_t));
  // Unordered: empty counter regions (the kernels form the turn pointers but never dereference them).
  w.dq_counters = at;
  at = align(at + (ordered ? dq_accumulators * sizeof(int32_t) : 0));
  w.dkv_counters = at;
  at = align(at + (ordered && split_dkv ? kv_tiles * sizeof(int32_t) : 0));
  w.counters_end = at;
  w.delta = at;
  at = align(at + dq_accumulators * h.block_m * sizeof(float));
  w.lse_log2 = at;
  at = align(at + dq_accumulators * h.block_m * sizeof(float));
  w.dq_accum = at;
  at = align(at + dq_accumulators * h.block_m * p.head_dim * sizeof(float));
  // dK has head_dim columns, dV head_dim_v (MLA-style rows).
  const size_t head_dim_v = size_t(p.head_dim_v != 0 ? p.head_dim_v : p.head_dim);
  w.dk_accum = at;
  at = align(at + (split_dkv ? kv_tiles * h.block_n * p.head_dim * sizeof(float) : 0));
  w.dv_accum = at;
  at = align(at + (split_dkv ? kv_tiles * h.block_n * head_dim_v * sizeof(float) : 0));
  w.total = at;
  return w;
}

}  // namespace dash::kernels::bwd

extern "C" size_t dash_bwd_workspace_size(const dash_bwd_args* args, dash_plan_t plan, int32_t deterministic) {
  dash::capi::set_last_error("");
  dash_bwd_args a{};
  if (dash::kernels::bwd::validate(args, plan, a) != DASH_OK) return 0;
  if (dash::kernels::bwd::check_deterministic(deterministic, *plan) != DASH_OK) return 0;
  return dash::kernels::bwd::bwd_workspace_layout(dash::kernels::bwd::workspace_problem(a.problem, *plan),
                                                   plan->header,
                                                   dash::kernels::bwd::runs_ordered(deterministic, plan->header))
      .total;
}
