// SPDX-License-Identifier: Apache-2.0
// The host half of the C ABI (dash/dash_attn.h): plans as host blobs, the CPU backend, and the struct sizes
// bindings check their mirrors against. Needs no GPU and no CUDA toolkit.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dash/dash_attn.h"
#include "dash/kernel_table.hpp"
#include "dash/plan.hpp"
#include "dash/reference.hpp"
#include "dash/varlen.hpp"
#include "api_error.h"
#include "pack_handle.h"
#include "problem_checks.h"

namespace {

using dash::capi::set_last_error;

dash_status invalid(const std::string& message) {
  set_last_error(message);
  return DASH_ERROR_INVALID_ARGUMENT;
}

// Runs `body`, turning the planner's dash::Error (which names the argument) into a status.
template <typename Body>
dash_status guarded(Body&& body) {
  set_last_error("");
  try {
    return body();
  } catch (const dash::Error& e) {
    return invalid(e.what());
  } catch (const std::exception& e) {
    return invalid(std::string("internal error: ") + e.what());
  }
}

dash::Plan plan_from_blob(const void* blob, size_t bytes) {
  if (blob == nullptr) throw dash::Error("plan", "is NULL");
  return dash::Plan::from_blob(static_cast<const uint8_t*>(blob), bytes);
}

dash::reference::Tensor host_tensor(const dash_tensor& t, const char* name) {
  if (t.data == nullptr) throw dash::Error(name, "data is NULL");
  if (t.batch_stride < 0 || t.seq_stride < 0 || t.head_stride < 0)
    throw dash::Error(name, "strides must be non-negative");
  return {static_cast<float*>(t.data), t.batch_stride, t.seq_stride, t.head_stride};
}

void require_fp32(dash_dtype dtype) {
  if (dtype != DASH_DTYPE_FP32)
    throw dash::Error("dtype", "the CPU backend takes DASH_DTYPE_FP32 host tensors (convert bf16/fp16 first)");
}

// CTAs the limit checks assume a backward launch may use (the ticket counter's headroom): more than any
// current GPU has SMs.
constexpr int32_t kMaxBackwardCtas = 1024;

// What a check is for: dash_check_problem's needs_backward (dash_check_pass).
enum class Pass { Forward = DASH_CHECK_FORWARD, Backward = DASH_CHECK_BACKWARD, CpuBackward = DASH_CHECK_CPU_BACKWARD };

// The (head_dim, head_dim_v) pair has a row of the kernel table, or an error naming the field to change: head_dim
// when no row has it, else head_dim_v (a row has the head dim, with another value head dim).
void require_kernel_pair(const dash::Problem& p) {
  if (dash::kernel_table_row(p.head_dim, p.head_dim_v).head_dim != 0) return;
  const std::string supported = " (supported head_dim/head_dim_v pairs: " + dash::kernel_pairs_text() +
                                "; one number means head_dim_v = head_dim)";
  bool head_dim_has_a_row = false;
  for (const dash::KernelTableRow& row : dash::kKernelTable) head_dim_has_a_row |= row.head_dim == p.head_dim;
  if (!head_dim_has_a_row)
    throw dash::Error("problem.head_dim", std::to_string(p.head_dim) + " is not supported" + supported);
  throw dash::Error("problem.head_dim_v", std::to_string(p.value_head_dim()) +
                                              (p.head_dim_v == 0 ? " (0: equal to head_dim)" : "") +
                                              " is not supported with head_dim " + std::to_string(p.head_dim) +
                                              supported);
}

// The pair's row has a backward kernel (after require_kernel_pair).
void require_backward_kernel(const dash::Problem& p) {
  if (dash::has_backward(dash::kernel_table_row(p.head_dim, p.head_dim_v))) return;
  throw dash::Error("problem.head_dim", dash::kernel_pair_name(p.head_dim, p.head_dim_v) +
                                            " has a forward kernel only in this build (the backward at head dims " +
                                            dash::kernel_pairs_text(dash::KernelRows::ForwardOnly) +
                                            " is not built yet; the backward runs at " +
                                            dash::kernel_pairs_text(dash::KernelRows::WithBackward) + ")");
}

// The checks of dash_check_problem, as exceptions naming "problem.<field>". `unsupported` is set when the call
// is valid but this library cannot run it (head dims, a backward kernel, size limits), so the status can say so.
// The CPU backend's backward (Pass::CpuBackward) has every limit of the GPU's, but runs every row of the kernel table:
// it is a float reference, and needs no backward kernel.
void check_problem(const dash_problem& c, Pass pass, bool& unsupported) {
  unsupported = false;
  const dash::Problem p = dash::Problem::from_c(c);
  try {
    p.validate();
  } catch (const dash::Error& e) {
    throw dash::Error("problem." + e.argument(), std::string(e.what()).substr(e.argument().size() + 2));
  }
  unsupported = true;  // every check below is of what this build can run
  require_kernel_pair(p);
  // Forward: the persistent kernel's work-tile index is 32-bit (128-row query tiles x heads x batch), and the
  // indices its CTAs take run past the last tile by up to the grid size: half the int32 range.
  const int64_t forward_tiles = (int64_t(p.seqlen_q) + 127) / 128 * p.heads_q * p.batch;
  if (forward_tiles > INT32_MAX / 2) {
    throw dash::Error("problem.batch", "batch x heads_q x 128-row query tiles = " + std::to_string(forward_tiles) +
                                           " exceeds the forward's limit of 2^30 work tiles");
  }
  if (pass == Pass::Forward) return;
  if (pass == Pass::Backward) require_backward_kernel(p);
  // Backward: the preprocess grid's y dimension holds one (batch, query head) pair each.
  if (int64_t(p.batch) * p.heads_q > 65535) {
    throw dash::Error("problem.batch", "batch x heads_q = " + std::to_string(int64_t(p.batch) * p.heads_q) +
                                           " exceeds the backward's limit of 65535");
  }
  if (const auto v = dash::plan_limit_violation(p, {}, dash::GqaMode::SplitHeads, kMaxBackwardCtas)) {
    throw dash::Error("problem." + v->field, v->message);
  }
}

dash_status checked_problem(const dash_problem& c, Pass pass) {
  bool unsupported = false;
  try {
    check_problem(c, pass, unsupported);
  } catch (const dash::Error& e) {
    set_last_error(e.what());
    return unsupported ? DASH_ERROR_UNSUPPORTED : DASH_ERROR_INVALID_ARGUMENT;
  }
  return DASH_OK;
}

float resolve_scale(float scale, int32_t head_dim) {
  if (scale == 0.f) return 1.f / std::sqrt(float(head_dim));
  if (!std::isfinite(scale) || scale < 0.f) throw dash::Error("softmax_scale", "must be finite and > 0 (or 0 for 1/sqrt(head_dim))");
  return scale;
}


// ---- varlen (packs of sequences) ----

const dash::Pack& pack_of(dash_pack_t pack) {
  if (pack == nullptr) throw dash::Error("pack", "null handle");
  return pack->pack;
}

// Varlen calls take the pack's problem (dash_pack_problem) and nothing else, so that the lengths a call was
// checked against are the pack's.
void require_pack_problem(const dash_problem& given, const dash::Pack& pack) {
  const dash_problem expected = pack.problem.to_c();
  if (std::memcmp(&expected, &given, sizeof(dash_problem)) != 0)
    throw dash::Error("problem", "differs from the pack's problem (" + pack.problem.describe() +
                                     "; take it from dash_pack_problem)");
}

// The shape the library's fixed-length limits are checked on: every sequence is computed as a batch-1 problem of
// its own lengths, so one sequence of the longest lengths (at least 1) stands for all of them. The pack-wide
// totals (forward tiles, tickets, accumulators) are checked exactly by build_pack and plan_for_pack.
dash_problem longest_sequence_problem(const dash::Pack& pack) {
  dash_problem p = pack.problem.to_c();
  p.batch = 1;
  p.seqlen_q = std::max(p.seqlen_q, 1);
  p.seqlen_k = std::max(p.seqlen_k, 1);
  return p;
}

// The common checks of the CPU varlen calls: the pack, its problem, and the library's limits.
dash_status checked_pack_call(const dash_problem& given, dash_pack_t pack, Pass pass) {
  if (dash_status s = guarded([&] {
        require_pack_problem(given, pack_of(pack));
        return DASH_OK;
      });
      s != DASH_OK) {
    return s;
  }
  return checked_problem(longest_sequence_problem(pack->pack), pass);
}

// A packed tensor's view starting at packed row `first_row`: one sequence's rows as a batch-1 tensor.
dash::reference::Tensor rows_from(const dash::reference::Tensor& t, int64_t first_row) {
  return {t.data + first_row * t.seq_stride, 0, t.seq_stride, t.head_stride};
}

void fill_rows(const dash::reference::Tensor& t, int64_t first_row, int64_t rows, int32_t heads, int32_t head_dim,
               float value) {
  for (int64_t r = 0; r < rows; ++r)
    for (int32_t h = 0; h < heads; ++h) std::fill_n(t.at(0, first_row + r, h), head_dim, value);
}

// The forward of one sequence of the pack: the batch-1 forward on its rows; the packed LSE [heads_q, total_q]
// receives its [heads_q, seqlen_q] rows.
void cpu_forward_sequence(const dash::Pack& pack, const dash_pack_sequence& s, float scale,
                          const dash::reference::Tensor& q, const dash::reference::Tensor& k,
                          const dash::reference::Tensor& v, const dash::reference::Tensor& o, float* lse) {
  const dash::Problem p = dash::sequence_problem(pack, s);
  const int64_t total_q = pack.total_q();
  if (s.seqlen_q == 0) return;
  if (s.seqlen_k == 0) {  // no key at all: every row sees none (O = 0, LSE = -inf), as a fully masked row
    fill_rows(o, s.q_row, s.seqlen_q, p.heads_q, p.value_head_dim(), 0.f);
    for (int32_t h = 0; h < p.heads_q; ++h)
      std::fill_n(lse + h * total_q + s.q_row, s.seqlen_q, -std::numeric_limits<float>::infinity());
    return;
  }
  std::vector<float> sequence_lse(size_t(p.heads_q) * s.seqlen_q);
  dash::reference::forward(p, scale, rows_from(q, s.q_row), rows_from(k, s.k_row), rows_from(v, s.k_row),
                           rows_from(o, s.q_row), sequence_lse.data());
  for (int32_t h = 0; h < p.heads_q; ++h)
    std::copy_n(sequence_lse.data() + int64_t(h) * s.seqlen_q, s.seqlen_q, lse + h * total_q + s.q_row);
}

// A template of a varlen plan as the CPU backend takes it: its tables and its batch-1 header (whose lengths each
// sequence replaces with its own, dash::sequence_header).
dash::Plan plan_of(const dash::BoundPlan& bound) {
  dash::Plan plan = bound.unit->plan;
  plan.header = bound.header;
  plan.note = bound.note;
  return plan;
}

struct PackedGradients {
  dash::reference::Tensor q, k, v, o, dout, dq, dk, dv;
};

// The backward of one sequence: the batch-1 backward on its rows with its plan, the LSE gathered from the packed
// [heads_q, total_q] rows. Without a plan (a length is 0) its gradient rows are zero.
void cpu_backward_sequence(const dash::Pack& pack, const dash_pack_sequence& s, const dash::Plan* plan, float scale,
                           const PackedGradients& t, const float* lse) {
  const dash::Problem& p = pack.problem;
  if (plan == nullptr) {
    fill_rows(t.dq, s.q_row, s.seqlen_q, p.heads_q, p.head_dim, 0.f);
    fill_rows(t.dk, s.k_row, s.seqlen_k, p.heads_kv, p.head_dim, 0.f);
    fill_rows(t.dv, s.k_row, s.seqlen_k, p.heads_kv, p.value_head_dim(), 0.f);
    return;
  }
  std::vector<float> sequence_lse(size_t(p.heads_q) * s.seqlen_q);
  for (int32_t h = 0; h < p.heads_q; ++h)
    std::copy_n(lse + h * pack.total_q() + s.q_row, s.seqlen_q, sequence_lse.data() + int64_t(h) * s.seqlen_q);
  dash::reference::backward(*plan, scale, rows_from(t.q, s.q_row), rows_from(t.k, s.k_row), rows_from(t.v, s.k_row),
                            rows_from(t.o, s.q_row), rows_from(t.dout, s.q_row), sequence_lse.data(),
                            rows_from(t.dq, s.q_row), rows_from(t.dk, s.k_row), rows_from(t.dv, s.k_row));
}

} // namespace

namespace dash::capi {

namespace {
// One of the pair checks above as a status: DASH_OK, or DASH_ERROR_UNSUPPORTED with its message.
template <typename Require>
dash_status unsupported_unless(Require require, const dash_problem& problem) {
  try {
    require(dash::Problem::from_c(problem));
  } catch (const dash::Error& e) {
    return fail(DASH_ERROR_UNSUPPORTED, e.what());
  }
  return DASH_OK;
}
}  // namespace

dash_status check_kernel_pair(const dash_problem& problem) { return unsupported_unless(require_kernel_pair, problem); }

dash_status check_backward_kernel(const dash_problem& problem) {
  return unsupported_unless(require_backward_kernel, problem);
}

} // namespace dash::capi

extern "C" {

dash_status dash_plan_build_host(const dash_problem* problem, const char* schedule, int32_t num_ctas,
                                 int32_t gqa_mode, void** blob, size_t* bytes) {
  return guarded([&] {
    if (problem == nullptr) throw dash::Error("problem", "is NULL");
    if (schedule == nullptr) throw dash::Error("schedule", "is NULL");
    if (blob == nullptr || bytes == nullptr) throw dash::Error("blob", "output pointers are NULL");
    if (num_ctas < 1) throw dash::Error("num_ctas", "must be >= 1 for a host plan (0 means 'the device's SMs' only in dash_plan_create)");
    if (!dash::is_gqa_request(gqa_mode)) throw dash::Error("gqa_mode", "unknown mode " + std::to_string(gqa_mode));
    dash::PlanRequest req{dash::Problem::from_c(*problem), dash::Schedule::parse(schedule), num_ctas, {},
                          static_cast<dash::GqaMode>(gqa_mode), nullptr};
    const std::vector<uint8_t> out = dash::build_plan(req).to_blob();
    void* copy = std::malloc(out.size());
    if (copy == nullptr) throw dash::Error("blob", "out of host memory");
    std::memcpy(copy, out.data(), out.size());
    *blob = copy;
    *bytes = out.size();
    return DASH_OK;
  });
}

void dash_plan_free_host(void* blob) { std::free(blob); }

dash_status dash_cpu_fwd(const dash_fwd_args* args) {
  if (args == nullptr) return invalid("args: is NULL");
  // The GPU's contract: the same head dims, masks and limits (dash_check_problem).
  if (dash_status s = checked_problem(args->problem, Pass::Forward); s != DASH_OK) return s;
  return guarded([&] {
    require_fp32(args->dtype);
    const dash::Problem p = dash::Problem::from_c(args->problem);
    p.validate();
    if (args->lse == nullptr) throw dash::Error("lse", "is NULL");
    dash::reference::forward(p, resolve_scale(args->softmax_scale, p.head_dim), host_tensor(args->q, "q"),
                             host_tensor(args->k, "k"), host_tensor(args->v, "v"), host_tensor(args->o, "o"), args->lse);
    return DASH_OK;
  });
}

dash_status dash_cpu_bwd(const dash_bwd_args* args, const void* plan_blob, size_t plan_bytes) {
  if (args == nullptr) return invalid("args: is NULL");
  // The GPU's limits, for every row of the kernel table (the forward-only ones too: this is a float reference).
  if (dash_status s = checked_problem(args->problem, Pass::CpuBackward); s != DASH_OK) return s;
  return guarded([&] {
    require_fp32(args->dtype);
    const dash::Plan plan = plan_from_blob(plan_blob, plan_bytes);
    if (plan.header.flags & DASH_PLAN_NONDETERMINISTIC_ONLY)
      throw dash::Error("plan", "made with DASH_GQA_AUTO_NONDETERMINISTIC, for non-deterministic backwards only; the "
                                "CPU backend adds in the plan's order (make the plan with DASH_GQA_AUTO)");
    const dash::ValidationReport report = dash::validate_plan(plan, std::max(1, plan.header.num_ctas));
    if (!report.ok) throw dash::Error("plan", "invalid: " + report.reason);
    if (std::memcmp(&plan.header.problem, &args->problem, sizeof(dash_problem)) != 0)
      throw dash::Error("problem", "differs from the plan's problem (" + plan.problem().describe() + ")");
    if (args->lse == nullptr) throw dash::Error("lse", "is NULL");
    if (args->debug_order_log != nullptr) throw dash::Error("debug_order_log", "is GPU-only; pass NULL");
    dash::reference::backward(plan, resolve_scale(args->softmax_scale, args->problem.head_dim),
                              host_tensor(args->q, "q"), host_tensor(args->k, "k"), host_tensor(args->v, "v"),
                              host_tensor(args->o, "o"), host_tensor(args->dout, "dout"), args->lse,
                              host_tensor(args->dq, "dq"), host_tensor(args->dk, "dk"), host_tensor(args->dv, "dv"));
    return DASH_OK;
  });
}

// ---- varlen ----

dash_status dash_pack_create(const dash_problem* problem, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                             dash_pack_t* out) {
  set_last_error("");
  if (out == nullptr) return invalid("out: null pointer");
  *out = nullptr;
  if (problem == nullptr) return invalid("problem: null pointer");
  // The fixed-length checks first (they tell an unsupported head dim from an invalid call); the lengths come from
  // cu_seqlens, so they stand in as 1.
  dash_problem shape = *problem;
  shape.seqlen_q = shape.seqlen_k = 1;
  if (problem->batch >= 1) {  // batch < 1 is build_pack's to name
    if (dash_status s = checked_problem(shape, Pass::Forward); s != DASH_OK) return s;
  }
  return guarded([&] {
    auto handle = std::make_unique<dash_pack_s>();
    handle->pack = dash::build_pack(dash::Problem::from_c(*problem), cu_seqlens_q, cu_seqlens_k);
    *out = handle.release();
    return DASH_OK;
  });
}

void dash_pack_destroy(dash_pack_t pack) {
  if (pack == nullptr) return;
  dash::capi::release_pack_device_copies(*pack);
  delete pack;
}

dash_status dash_pack_problem(dash_pack_t pack, dash_problem* out) {
  return guarded([&] {
    if (out == nullptr) throw dash::Error("out", "null pointer");
    *out = pack_of(pack).problem.to_c();
    return DASH_OK;
  });
}

dash_status dash_pack_rows(dash_pack_t pack, int64_t* total_q, int64_t* total_k) {
  return guarded([&] {
    if (total_q == nullptr) throw dash::Error("total_q", "null pointer");
    if (total_k == nullptr) throw dash::Error("total_k", "null pointer");
    const dash::Pack& p = pack_of(pack);
    *total_q = p.total_q();
    *total_k = p.total_k();
    return DASH_OK;
  });
}

dash_status dash_cpu_fwd_varlen(const dash_fwd_args* args, dash_pack_t pack) {
  if (args == nullptr) return invalid("args: is NULL");
  if (dash_status s = checked_pack_call(args->problem, pack, Pass::Forward); s != DASH_OK) return s;
  return guarded([&] {
    require_fp32(args->dtype);
    if (args->lse == nullptr) throw dash::Error("lse", "is NULL");
    const dash::Pack& p = pack->pack;
    const float scale = resolve_scale(args->softmax_scale, p.problem.head_dim);
    const auto q = host_tensor(args->q, "q"), k = host_tensor(args->k, "k"), v = host_tensor(args->v, "v"),
               o = host_tensor(args->o, "o");
    for (const dash_pack_sequence& s : p.sequences) cpu_forward_sequence(p, s, scale, q, k, v, o, args->lse);
    return DASH_OK;
  });
}

dash_status dash_cpu_bwd_varlen(const dash_bwd_args* args, dash_pack_t pack, const char* schedule, int32_t num_ctas,
                                int32_t gqa_mode) {
  if (args == nullptr) return invalid("args: is NULL");
  if (dash_status s = checked_pack_call(args->problem, pack, Pass::CpuBackward); s != DASH_OK) return s;
  return guarded([&] {
    if (schedule == nullptr) throw dash::Error("schedule", "is NULL");
    if (num_ctas < 1)
      throw dash::Error("num_ctas", "must be >= 1 for the CPU backend (0 means 'the device's SMs' only on a GPU)");
    // plan_for_pack refuses DASH_GQA_AUTO_NONDETERMINISTIC, naming gqa_mode.
    if (!dash::is_gqa_request(gqa_mode)) throw dash::Error("gqa_mode", "unknown mode " + std::to_string(gqa_mode));
    require_fp32(args->dtype);
    if (args->lse == nullptr) throw dash::Error("lse", "is NULL");
    if (args->debug_order_log != nullptr) throw dash::Error("debug_order_log", "is GPU-only; pass NULL");
    const dash::Pack& p = pack->pack;
    const float scale = resolve_scale(args->softmax_scale, p.problem.head_dim);
    const PackedGradients t{host_tensor(args->q, "q"),       host_tensor(args->k, "k"),   host_tensor(args->v, "v"),
                            host_tensor(args->o, "o"),       host_tensor(args->dout, "dout"),
                            host_tensor(args->dq, "dq"),     host_tensor(args->dk, "dk"), host_tensor(args->dv, "dv")};
    const dash::VarlenPlan plan =
        dash::plan_for_pack(p, dash::Schedule::parse(schedule), num_ctas, static_cast<dash::GqaMode>(gqa_mode));
    std::vector<dash::Plan> plans;  // one copy of each template's tables, shared by its sequences
    plans.reserve(plan.templates.size());
    for (const dash::BoundPlan& bound : plan.templates) plans.push_back(plan_of(bound));
    for (const dash_pack_sequence& s : plan.sequences) {
      dash::Plan* sequence_plan = s.template_index >= 0 ? &plans[size_t(s.template_index)] : nullptr;
      // Sequences of one template differ in their lengths: each runs under the header plan_for gives it alone.
      if (sequence_plan != nullptr) sequence_plan->header = dash::sequence_header(plan, p, s);
      cpu_backward_sequence(p, s, sequence_plan, scale, t, args->lse);
    }
    return DASH_OK;
  });
}

const char* const* dash_schedule_names(void) {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> n = {"auto", "auto-fastest"};
    for (dash::Planner p : dash::all_planners()) n.push_back(dash::planner_name(p));
    n.push_back(nullptr);
    return n;
  }();
  return names.data();
}

const dash_kernel_row* dash_kernel_rows(void) {
  static const std::vector<dash_kernel_row> rows = [] {
    std::vector<dash_kernel_row> r;
    for (const dash::KernelTableRow& row : dash::kKernelTable)
      r.push_back({row.head_dim, row.head_dim_v, 1, dash::has_backward(row) ? 1 : 0});
    r.push_back({0, 0, 0, 0});
    return r;
  }();
  return rows.data();
}

const int32_t* dash_supported_head_dims(void) {
  static const std::vector<int32_t> terminated = [] {
    std::vector<int32_t> dims = dash::kernel_head_dims();
    dims.push_back(0);
    return dims;
  }();
  return terminated.data();
}

dash_status dash_check_problem(const dash_problem* problem, int32_t needs_backward) {
  set_last_error("");
  if (problem == nullptr) return invalid("problem: is NULL");
  if (needs_backward != DASH_CHECK_FORWARD && needs_backward != DASH_CHECK_BACKWARD &&
      needs_backward != DASH_CHECK_CPU_BACKWARD) {
    return invalid("needs_backward: must be 0 (DASH_CHECK_FORWARD), 1 (DASH_CHECK_BACKWARD) or 2 "
                   "(DASH_CHECK_CPU_BACKWARD) (got " + std::to_string(needs_backward) + ")");
  }
  return checked_problem(*problem, static_cast<Pass>(needs_backward));
}

int64_t dash_planner_runs(void) { return dash::planner_runs(); }

double dash_attention_flops(const dash_problem* problem, int32_t backward) {
  double flops = 0;
  const dash_status status = guarded([&] {
    if (problem == nullptr) throw dash::Error("problem", "is NULL");
    const dash::Problem p = dash::Problem::from_c(*problem);
    p.validate();
    flops = dash::attention_flops(p, backward ? dash::Pass::Backward : dash::Pass::Forward);
    return DASH_OK;
  });
  return status == DASH_OK ? flops : 0.0;
}

int dash_cuda_available(void) {
#ifdef DASH_HAVE_CUDA_KERNELS
  return 1;
#else
  return 0;
#endif
}

size_t dash_abi_struct_size(const char* name) {
  if (name == nullptr) return 0;
  const std::string n(name);
  if (n == "dash_problem") return sizeof(dash_problem);
  if (n == "dash_tensor") return sizeof(dash_tensor);
  if (n == "dash_fwd_args") return sizeof(dash_fwd_args);
  if (n == "dash_bwd_args") return sizeof(dash_bwd_args);
  if (n == "dash_plan_header") return sizeof(dash_plan_header);
  if (n == "dash_pack_sequence") return sizeof(dash_pack_sequence);
  if (n == "dash_kernel_row") return sizeof(dash_kernel_row);
  return 0;
}

} // extern "C"
