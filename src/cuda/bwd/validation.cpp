// SPDX-License-Identifier: Apache-2.0
// bwd/validation.cpp — see validation.h.
#include "bwd/validation.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "api_error.h"
#include "bwd/plan_handle.h"
#include "dash/geometry.hpp"
#include "problem_checks.h"
#include "tensor_checks.h"

namespace dash::kernels::bwd {
namespace {

using capi::fail;

bool same_problem(const dash_problem& a, const dash_problem& b) {
  return a.batch == b.batch && a.heads_q == b.heads_q && a.heads_kv == b.heads_kv && a.seqlen_q == b.seqlen_q &&
         a.seqlen_k == b.seqlen_k && a.head_dim == b.head_dim &&
         (a.head_dim_v != 0 ? a.head_dim_v : a.head_dim) == (b.head_dim_v != 0 ? b.head_dim_v : b.head_dim) &&
         a.mask_kind == b.mask_kind &&
         (a.mask_kind != DASH_MASK_WINDOW ||
          (a.window_left == b.window_left && a.window_right == b.window_right));
}

std::string describe(const dash_problem& p) {
  return "batch=" + std::to_string(p.batch) + " heads_q=" + std::to_string(p.heads_q) +
         " heads_kv=" + std::to_string(p.heads_kv) + " seqlen_q=" + std::to_string(p.seqlen_q) +
         " seqlen_k=" + std::to_string(p.seqlen_k) + " head_dim=" + std::to_string(p.head_dim) +
         " head_dim_v=" + std::to_string(p.head_dim_v) + " mask_kind=" + std::to_string(p.mask_kind);
}

}  // namespace

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
  // The problem passed dash_check_problem when the plan was created (head dims, mask, size limits). The pair is
  // checked again, with its backward kernel, before the plan's tiles are compared with the kernel's: a row with a
  // forward kernel only has no tiles to compare with, and must be refused in its own words.
  if (dash_status s = capi::check_kernel_pair(p); s != DASH_OK) return s;
  if (dash_status s = capi::check_backward_kernel(p); s != DASH_OK) return s;
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
  // A varlen pack's tensors are checked as one sequence of all their rows. A side without rows (every sequence
  // empty there) is never read or written, and its tensors may be empty (null): the other side's tensors stand in
  // where the TMA descriptors need an address.
  const VarlenDevicePlan* varlen = plan->varlen.get();
  const int32_t batch = varlen != nullptr ? 1 : p.batch;
  const int32_t rows_q = varlen != nullptr ? varlen->total_q : p.seqlen_q;
  const int32_t rows_k = varlen != nullptr ? varlen->total_k : p.seqlen_k;
  if (varlen != nullptr && rows_q == 0 && rows_k == 0) return DASH_OK;  // dash_bwd has nothing to do
  // Columns: head_dim for q, k, dq, dk; head_dim_v for v, o, dout, dv.
  const int32_t d = p.head_dim, dv = p.head_dim_v != 0 ? p.head_dim_v : p.head_dim;
  struct Operand {
    const char* name;
    dash_tensor* t;
    int32_t seqlen, heads, head_dim;
    bool is_output;
  } ops[] = {{"q", &a.q, rows_q, p.heads_q, d, false},        {"k", &a.k, rows_k, p.heads_kv, d, false},
             {"v", &a.v, rows_k, p.heads_kv, dv, false},      {"o", &a.o, rows_q, p.heads_q, dv, false},
             {"dout", &a.dout, rows_q, p.heads_q, dv, false}, {"dq", &a.dq, rows_q, p.heads_q, d, true},
             {"dk", &a.dk, rows_k, p.heads_kv, d, true},      {"dv", &a.dv, rows_k, p.heads_kv, dv, true}};
  for (Operand& op : ops) {
    if (op.seqlen == 0) continue;  // replaced below
    std::string error;
    if (dash_status s = check_tensor(op.name, *op.t, batch, op.seqlen, op.heads, op.head_dim, op.is_output, error);
        s != DASH_OK) {
      return fail(s, error);
    }
  }
  if (rows_q == 0) a.q = a.o = a.dout = a.dq = a.k;
  if (rows_k == 0) a.k = a.v = a.dk = a.dv = a.q;
  if (a.lse == nullptr && rows_q > 0) return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: null pointer");
  if (reinterpret_cast<uintptr_t>(a.lse) % 4 != 0) return fail(DASH_ERROR_INVALID_ARGUMENT, "lse: must be 4-byte aligned");
  if (a.debug_order_log != nullptr && reinterpret_cast<uintptr_t>(a.debug_order_log) % 8 != 0) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "debug_order_log: must be 8-byte aligned");
  }
  const int64_t tickets = int64_t(h.num_units) * h.items_per_unit;
  if (tickets >= (int64_t(1) << 31) - int64_t(h.num_ctas) - 1) {
    return fail(DASH_ERROR_UNSUPPORTED, "plan: " + std::to_string(tickets) + " tickets exceed the 32-bit ticket counter");
  }
  return DASH_OK;
}

dash_status check_deterministic(int32_t deterministic, const dash_plan_s& plan) {
  if (deterministic != 0 && deterministic != 1) {
    return fail(DASH_ERROR_INVALID_ARGUMENT, "deterministic: must be 0 or 1 (got " + std::to_string(deterministic) + ")");
  }
  if (deterministic && (plan.header.flags & DASH_PLAN_NONDETERMINISTIC_ONLY)) {
    return fail(DASH_ERROR_INVALID_ARGUMENT,
                "plan: made with DASH_GQA_AUTO_NONDETERMINISTIC, whose GQA mode depends on the batch; a deterministic "
                "backward needs a plan made with DASH_GQA_AUTO (or a fixed mode) to keep its bits batch-invariant");
  }
  return DASH_OK;
}

}  // namespace dash::kernels::bwd
