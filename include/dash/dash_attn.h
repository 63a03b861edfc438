/* SPDX-License-Identifier: Apache-2.0
 *
 * dash/dash_attn.h — the C ABI of the attention kernels: the single boundary that bindings (ctypes, the
 * PyTorch extension, the CLI) call. Plain C, fixed-width fields, no CUDA types: a CUDA stream is passed as
 * `void*` (a cudaStream_t; NULL is the legacy default stream).
 *
 * Forward: O = softmax(Q K^T * softmax_scale + mask) V and LSE = log(sum_j exp(Q_i . K_j * scale)) per row.
 *
 * Tensors are (batch, seqlen, heads, head_dim) with arbitrary batch / seq / head strides, counted in
 * ELEMENTS, and a contiguous last dimension (stride 1). Two head dims: q and k (and dq, dk) have
 * dash_problem.head_dim columns; v, o, dout and dv have dash_problem.head_dim_v (0: equal to head_dim). They differ
 * only in MLA-style (DeepSeek) shapes: head_dim 192, head_dim_v 128.
 *
 * Head dims (dash/kernel_table.hpp, one row per (head_dim, head_dim_v) pair; dash_kernel_rows lists them): the
 * forward for 64, 96, 128, 256 and 192 / 128; the backward for 64, 96 and 128 (256 and 192 / 128 have a forward
 * kernel only for now: their GPU backward is refused, DASH_ERROR_UNSUPPORTED naming problem.head_dim). The CPU
 * backend runs both passes for every row.
 *
 * The kernels load and store through the Hopper TMA engine, which needs every base pointer 16-byte aligned and every
 * stride a multiple of 16 bytes (8 bf16 / fp16 elements). For a dimension of size 1 the stride is never used and may
 * be anything.
 *
 * Masks (dash_problem.mask_kind), aligned bottom-right as FlashAttention aligns them when seqlen_q != seqlen_k
 * (offset = seqlen_k - seqlen_q): DASH_MASK_FULL; DASH_MASK_CAUSAL, query i sees key j iff j <= i + offset;
 * DASH_MASK_WINDOW, a sliding window: i + offset - window_left <= j <= i + offset + window_right, -1 leaving
 * that side unbounded (FlashAttention's window_size; its causal window is window_right = 0). A query row that
 * sees no key gets O = 0 and LSE = -inf, and its gradients are 0.
 *
 * GQA / MQA: heads_q must be a multiple of heads_kv; query head h reads KV head h / (heads_q / heads_kv).
 *
 * Errors: every entry point returns a dash_status. On failure dash_last_error() returns a message, kept per
 * calling thread until its next call, that names the offending argument, e.g.
 *   "q.seq_stride: must be a multiple of 8 elements (16 bytes) for TMA (got 100)".
 * Arguments are checked before any CUDA call, so an invalid call never touches the device.
 *
 * CUDA graphs: dash_fwd zeroes its workspace and launches one kernel on the given stream, allocates nothing
 * and does not synchronise, so it can be captured. The caller passes the workspace (device memory,
 * dash_fwd_workspace_size() bytes, 4-byte aligned): a counter the persistent kernel takes its work tiles from.
 * Calls that may run at the same time (on other streams) need workspaces of their own.
 */
#ifndef DASH_DASH_ATTN_H
#define DASH_DASH_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "dash/plan_format.h" /* dash_problem, dash_mask_kind */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dash_status {
  DASH_OK = 0,
  DASH_ERROR_INVALID_ARGUMENT = 1, /* the call is wrong: a null pointer, a bad size, a misaligned stride */
  DASH_ERROR_UNSUPPORTED = 2,      /* the call is valid but this build cannot run it (head dim, mask, GPU) */
  DASH_ERROR_CUDA = 3              /* a CUDA call failed; the message names the call and the CUDA error */
} dash_status;

typedef enum dash_dtype {
  DASH_DTYPE_BF16 = 0,
  DASH_DTYPE_FP16 = 1,
  DASH_DTYPE_FP32 = 2 /* CPU backend only (dash_cpu_fwd / dash_cpu_bwd) */
} dash_dtype;

/* A (batch, seqlen, heads, head_dim) device tensor. Strides in elements; the head_dim stride is 1. */
typedef struct dash_tensor {
  void* data;
  int64_t batch_stride;
  int64_t seq_stride;
  int64_t head_stride;
} dash_tensor;

typedef struct dash_fwd_args {
  dash_problem problem; /* batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, mask_kind, window, head_dim_v */
  dash_dtype dtype;     /* of q, k, v and o alike */
  dash_tensor q;        /* [batch, seqlen_q, heads_q,  head_dim] */
  dash_tensor k;        /* [batch, seqlen_k, heads_kv, head_dim] */
  dash_tensor v;        /* [batch, seqlen_k, heads_kv, head_dim_v] */
  dash_tensor o;        /* [batch, seqlen_q, heads_q,  head_dim_v], written */
  float* lse;           /* [batch, heads_q, seqlen_q] fp32, contiguous, written; natural log */
  float softmax_scale;  /* > 0 and finite; 0 selects the default 1 / sqrt(head_dim) (q and k's head dim) */
} dash_fwd_args;

/* Head dims the forward kernel is built for with head_dim_v = head_dim, in increasing order, terminated by 0 (as
 * dash_supported_head_dims; 0 alone in a build without CUDA). dash_kernel_rows lists every pair, 192 / 128 too. */
const int32_t* dash_fwd_supported_head_dims(void);

/* Bytes of device workspace dash_fwd needs for these arguments (16 today, whatever the problem). Only `problem`
 * and `dtype` are read; returns 0 for a NULL pointer. */
size_t dash_fwd_workspace_size(const dash_fwd_args* args);

/* Validates the arguments, then zeroes the workspace and launches the forward kernel on `cuda_stream` (a
 * cudaStream_t), and returns without waiting for them. `workspace`: device memory of at least
 * dash_fwd_workspace_size() bytes, 4-byte aligned, not in use by another call until this one has run. */
dash_status dash_fwd(const dash_fwd_args* args, void* workspace, size_t workspace_bytes, void* cuda_stream);

/* ---- Backward (src/cuda/bwd/) -------------------------------------------------------------------------
 *
 * The backward executes a PLAN (dash/plan_format.h): which KV tiles each work item processes, the order in
 * which it visits Q tiles, and the order in which dQ partials (and, for split-head GQA, dK/dV partials) are
 * added. A plan is made once per (problem, schedule, num_ctas): its tables (a "unit template") depend only on the
 * sequence lengths, mask, head dim, GQA group, GQA mode and planner, are built and validated once per process and
 * copied to each device once, and are shared by every plan with the same template, whatever its batch or heads:
 *
 *   dash_plan_t plan;
 *   dash_plan_create(&args.problem, "auto", 0, DASH_GQA_AUTO, &plan);
 *   size_t bytes = dash_bwd_workspace_size(&args, plan, 1);     // caller allocates `bytes` of device memory
 *   dash_bwd(&args, plan, 1, workspace, bytes, stream);          // deterministic: same bits on every run
 *   dash_plan_destroy(plan);
 *
 * dash_bwd launches 3 kernels on the stream (a varlen pack without query rows: 2 kernels and up to 2
 * cudaMemsetAsync), allocates nothing and does not synchronise (CUDA-graph capturable). Deterministic mode adds
 * every dQ partial in the plan's order, so the gradients are bitwise reproducible; deterministic = 0 adds them in
 * arrival order (faster, not reproducible), except on a plan flagged DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED (schedule
 * auto where no dQ tile gets more than 4 partials), whose non-deterministic backward runs the ordered adds.
 * Every row of dash_kernel_rows with backward = 1 (64, 96, 128, 192 / 128, 256; dash_plan_create refuses another
 * pair with DASH_ERROR_UNSUPPORTED naming problem.head_dim), FULL, CAUSAL and WINDOW masks, bf16 and fp16. */

typedef struct dash_plan_s* dash_plan_t;

/* Resolves the schedule (dash::plan_for), takes the unit template from the process's cache (building and validating
 * it on first use) and its device copy from the device's cache (uploading it on first use, waiting for that copy
 * only). schedule: "auto", "auto-fastest", "ascending", "descending", "shift" or "symmetric-shift".
 * num_ctas: CTAs the backward launches, at most dash_usable_sms(); 0 = dash_usable_sms(). Pass that less sm_margin
 * to leave sm_margin SMs to other kernels. Every CTA count from the SM count down to the plan's wave
 * (min_coresident_ctas in the header: the CTAs its waits need running at once; 1 for descending and ascending)
 * gives the same plan and the same bits; below the wave, a named planner is refused (DASH_ERROR_INVALID_ARGUMENT
 * naming `schedule`) and auto takes the next candidate of its table whose wave fits (different bits).
 * gqa_mode: DASH_GQA_SPLIT_HEADS, DASH_GQA_PACK_GROUP, or DASH_GQA_AUTO (auto's offline table picks one; the same
 * choice, and so the same bits per sequence, whatever the batch, head count or num_ctas), or, for a plan that only
 * non-deterministic backwards will run, DASH_GQA_AUTO_NONDETERMINISTIC: packed units wherever the whole problem's
 * packed units (batch x heads_kv x the template's items) fill num_ctas, and 3 rounds of it where the balanced plan
 * below fits (else they run where it does not); else, with schedule "auto" and a causal or window mask (MHA too),
 * the balanced plan: split heads, one KV tile per item (the ascending planner's), claimed
 * item by item across groups of units sized by the L2 (DASH_PLAN_ITEM_MAJOR), so that a group's longest go first,
 * taken where one group's items fill num_ctas and an item holds 8 visits on average; else split heads. dash_bwd
 * refuses such a plan with deterministic = 1 (DASH_PLAN_NONDETERMINISTIC_ONLY), and dash_plan_create_varlen refuses
 * the mode. */
dash_status dash_plan_create(const dash_problem* problem, const char* schedule, int32_t num_ctas, int32_t gqa_mode,
                             dash_plan_t* out);
/* dash_plan_create without waiting for a new sequence template's tables: the schedule is resolved as dash_plan_create
 * resolves it (the same plan, the same bits) on the planners' drafts, which take microseconds; the tables are
 * written and validated on a thread of the library. dash_bwd on the plan does not wait for them on the host: it
 * queues their copy on its stream ahead of its kernels (the stream waits; the host goes on), or makes its stream
 * wait for a copy queued by an earlier call. During CUDA-graph capture it waits for them on the host. A template
 * whose tables fail validation (a planner bug) stops that stream's work with a device trap, its reason on stderr and
 * from dash_plan_wait: a backward never runs on unvalidated tables. */
dash_status dash_plan_create_async(const dash_problem* problem, const char* schedule, int32_t num_ctas,
                                   int32_t gqa_mode, dash_plan_t* out);
/* Waits until the plan's tables are validated and on its device (at once for dash_plan_create's plans): DASH_OK, or
 * the error of their build, naming what failed. */
dash_status dash_plan_wait(dash_plan_t plan);
/* Where a plan's tables stand (no wait): in the device blob; still being written; written and validated but not yet
 * copied (the next backward copies them before it launches); or their copy queued on a stream by a backward (done or
 * not: the library notices when a later call looks). Diagnostics: which path the first backward of a new shape took. */
typedef enum dash_plan_tables_state {
  DASH_PLAN_TABLES_READY = 0,
  DASH_PLAN_TABLES_BEING_WRITTEN = 1,
  DASH_PLAN_TABLES_COPY_QUEUED = 2,
  DASH_PLAN_TABLES_WRITTEN = 3
} dash_plan_tables_state;
dash_status dash_plan_tables(dash_plan_t plan, int32_t* state);
void dash_plan_destroy(dash_plan_t plan);
/* The plan's host copy: the serialized blob (dash/plan_format.h) with this problem's header, made on the first call
 * (it copies the tables); valid until dash_plan_destroy. */
dash_status dash_plan_blob(dash_plan_t plan, const void** data, size_t* bytes);
/* SMs the current context can run on (the current device's; fewer in a green context or an MPS client with an SM
 * limit): the largest num_ctas dash_plan_create accepts, and what 0 means there. */
dash_status dash_usable_sms(int32_t* sms);
/* What auto chose and why, and the planner's generalisations, in words ("" if nothing to say); valid until
 * dash_plan_destroy. NULL for a null handle. */
const char* dash_plan_note(dash_plan_t plan);

typedef struct dash_bwd_args {
  dash_problem problem; /* must equal the plan's problem */
  dash_dtype dtype;     /* of q, k, v, o, dout, dq, dk, dv alike */
  dash_tensor q;        /* [batch, seqlen_q, heads_q,  head_dim] */
  dash_tensor k;        /* [batch, seqlen_k, heads_kv, head_dim] */
  dash_tensor v;        /* [batch, seqlen_k, heads_kv, head_dim_v] */
  dash_tensor o;        /* [batch, seqlen_q, heads_q,  head_dim_v], the forward's output */
  dash_tensor dout;     /* [batch, seqlen_q, heads_q,  head_dim_v] */
  const float* lse;     /* [batch, heads_q, seqlen_q] fp32, contiguous, as dash_fwd writes it */
  dash_tensor dq;       /* [batch, seqlen_q, heads_q,  head_dim], written */
  dash_tensor dk;       /* [batch, seqlen_k, heads_kv, head_dim], written */
  dash_tensor dv;       /* [batch, seqlen_k, heads_kv, head_dim_v], written */
  float softmax_scale;  /* > 0 and finite; 0 selects the default 1 / sqrt(head_dim) (q and k's head dim) */
  /* Testing only, normally NULL. Else int64[batch * heads_q * num_q_tiles * num_kv_tiles]: where the adds are
   * ordered (deterministic mode, or DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED), when the contribution of
   * (ticket, visit) to dQ accumulator (b, h, q_tile) acquires its turn, the kernel writes (ticket << 32 | visit)
   * at [((b * heads_q + h) * num_q_tiles + q_tile) * num_kv_tiles + rank]. */
  int64_t* debug_order_log;
} dash_bwd_args;

/* Bytes of device workspace dash_bwd needs in the mode `deterministic` (as dash_bwd's): fp32 dQ accumulators, delta,
 * LSE, a ticket counter; dK/dV accumulators for split-head GQA; the turn counters where the adds are ordered (the
 * deterministic mode, and both modes on a DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED plan; a deterministic call
 * refuses the smaller non-deterministic size). 0 on invalid arguments (dash_last_error says why). */
size_t dash_bwd_workspace_size(const dash_bwd_args* args, dash_plan_t plan, int32_t deterministic);

/* Validates every argument (naming the offending one), then launches the backward on `cuda_stream`.
 * deterministic: 1 = ordered adds (bitwise reproducible), 0 = unordered atomic adds. `workspace` must be
 * 256-byte aligned device memory of at least dash_bwd_workspace_size(args, plan, deterministic) bytes. Always a
 * plain launch of the plan's num_ctas CTAs (docs/DEADLOCK.md): kernels of other streams that hold SMs delay the
 * CTAs they displace. Unordered adds have no wait between CTAs; with ordered adds a plan progresses while its
 * wave of CTAs runs, and otherwise resumes when the other kernels release their SMs. The bits never depend on how
 * many CTAs ran. */
dash_status dash_bwd(const dash_bwd_args* args, dash_plan_t plan, int32_t deterministic, void* workspace,
                     size_t workspace_bytes, void* cuda_stream);

/* ---- end of backward ---------------------------------------------------------------------------------- */

/* ---- Packed variable-length sequences (varlen) ---------------------------------------------------------
 *
 * A pack holds `batch` sequences of different lengths back to back, as flash-attn's varlen API takes them:
 * q, dq are [total_q, heads_q, head_dim], dout, o [total_q, heads_q, head_dim_v], k, dk are [total_k, heads_kv,
 * head_dim], v, dv [total_k, heads_kv, head_dim_v] (batch_stride unused), and sequence s holds query rows
 * [cu_seqlens_q[s], cu_seqlens_q[s + 1]) and key rows [cu_seqlens_k[s], cu_seqlens_k[s + 1]); lengths may differ
 * between q and k and may be 0. The mask applies per sequence (causal aligned bottom-right per sequence). LSE is
 * [heads_q, total_q] fp32, contiguous.
 *
 * Lengths come from the HOST: dash_pack_create reads host cu_seqlens once, orders the sequences (longest first)
 * and builds the tables the kernels read, so no call reads lengths back from the device, and the forward and the
 * backward of a pack can be captured in a CUDA graph (the tables are copied to a device on its first use there,
 * waiting for that copy only). Each sequence is computed as the batch-1 problem of its own lengths (its own unit
 * template in the backward), so in deterministic mode a sequence's gradients are bitwise the same whatever else is
 * in the pack and wherever it sits ("pack invariance", docs/semantics.md).
 *
 *   dash_problem pr = {.batch = num_seqs, .heads_q = 32, .heads_kv = 8, .head_dim = 128, .mask_kind = CAUSAL};
 *   dash_pack_t pack;  dash_pack_create(&pr, host_cu_seqlens_q, host_cu_seqlens_k, &pack);
 *   dash_pack_problem(pack, &args.problem);               // seqlen_q / seqlen_k = the longest sequences
 *   dash_fwd_varlen(&args, pack, fwd_workspace, 16, stream);
 *   dash_plan_create_varlen(pack, "auto", 0, DASH_GQA_AUTO, &plan);
 *   dash_bwd(&bwd_args, plan, 1, workspace, dash_bwd_workspace_size(&bwd_args, plan, 1), stream);
 */
typedef struct dash_pack_s* dash_pack_t;

/* problem: batch = number of sequences (>= 1), heads, head_dim, mask and window as for a fixed-length call; its
 * seqlen_q / seqlen_k are ignored. cu_seqlens_q, cu_seqlens_k: HOST int32[batch + 1], starting at 0,
 * non-decreasing. Errors name the argument (e.g. "cu_seqlens_q[3]: 100 is less than cu_seqlens_q[2] = 120"). */
dash_status dash_pack_create(const dash_problem* problem, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                             dash_pack_t* out);
void dash_pack_destroy(dash_pack_t pack);
/* The pack's problem: the caller's, with seqlen_q / seqlen_k = its longest sequences. Varlen calls require
 * args->problem to equal it. */
dash_status dash_pack_problem(dash_pack_t pack, dash_problem* out);
/* Rows of the packed tensors: cu_seqlens_q[batch] and cu_seqlens_k[batch]. */
dash_status dash_pack_rows(dash_pack_t pack, int64_t* total_q, int64_t* total_k);

/* The forward over a pack: as dash_fwd (same workspace), with packed tensors and LSE [heads_q, total_q]. */
dash_status dash_fwd_varlen(const dash_fwd_args* args, dash_pack_t pack, void* workspace, size_t workspace_bytes,
                            void* cuda_stream);

/* A backward plan for a pack: each sequence gets the unit template dash_plan_create would give a batch-1 problem of
 * its lengths (auto and DASH_GQA_AUTO choose per sequence, from its own shape), ordered longest first. dash_bwd and
 * dash_bwd_workspace_size take it like any plan; their args hold packed tensors and LSE [heads_q, total_q], and
 * debug_order_log holds int64[heads_q * total_q_tiles * total_kv_tiles] (the pack's global tiles: the sum over its
 * sequences of their Q / KV tile counts) and is indexed [accumulator * total_kv_tiles + rank], accumulator = head *
 * total_q_tiles + the sequence's q_tile_begin + q_tile (dash_pack_sequence). */
dash_status dash_plan_create_varlen(dash_pack_t pack, const char* schedule, int32_t num_ctas, int32_t gqa_mode,
                                    dash_plan_t* out);

/* ---- end of varlen --------------------------------------------------------------------------------------- */

/* ---- host API: plans as bytes and the CPU backend (no GPU needed) ------------------------------------- */

/* Builds and validates a plan for `num_ctas` (>= 1) co-resident CTAs and returns its bytes
 * (dash/plan_format.h) in a malloc'd buffer; free it with dash_plan_free_host. */
dash_status dash_plan_build_host(const dash_problem* problem, const char* schedule, int32_t num_ctas,
                                 int32_t gqa_mode, void** blob, size_t* bytes);
void dash_plan_free_host(void* blob);

/* The CPU backend: fp32 HOST tensors (dtype DASH_DTYPE_FP32), same layouts and LSE convention as the GPU
 * calls. dash_cpu_bwd follows the plan's visit and accumulation orders (its bits are not the GPU's). Slow:
 * for tests and small problems. It takes the GPU's head dims and limits, and runs the backward for every row of the
 * kernel table (a row without a backward kernel too: it is a float reference and needs no backward kernel)
 * (dash_check_problem with DASH_CHECK_CPU_BACKWARD says whether it can run a problem). */
dash_status dash_cpu_fwd(const dash_fwd_args* args);
dash_status dash_cpu_bwd(const dash_bwd_args* args, const void* plan_blob, size_t plan_bytes);

/* The CPU backend over a pack (fp32 HOST tensors, layouts as dash_fwd_varlen / dash_bwd on a varlen plan). The
 * backward follows, per sequence, the plan dash_plan_create_varlen would give on `num_ctas` CTAs. */
dash_status dash_cpu_fwd_varlen(const dash_fwd_args* args, dash_pack_t pack);
dash_status dash_cpu_bwd_varlen(const dash_bwd_args* args, dash_pack_t pack, const char* schedule, int32_t num_ctas,
                                int32_t gqa_mode);

/* The schedule names dash_plan_create and dash_plan_build_host accept ("auto", "auto-fastest", then every
 * planner's), terminated by NULL. Bindings list these instead of spelling them again. */
const char* const* dash_schedule_names(void);

/* Head dims the kernels are built for with head_dim_v = head_dim (dash_problem.head_dim_v 0 or equal to head_dim),
 * ascending, terminated by 0, in every build (with or without CUDA): 64, 96, 128, 256. Rows of two head dims
 * (192 / 128) are not listed here: dash_kernel_rows lists every row. */
const int32_t* dash_supported_head_dims(void);

/* One row of the kernel table (dash/kernel_table.hpp): a (head_dim, head_dim_v) pair, and whether this library has
 * its forward (always 1) and its backward kernel (0: the GPU backward is refused; the CPU backend runs it). */
typedef struct dash_kernel_row {
  int32_t head_dim;   /* of q and k */
  int32_t head_dim_v; /* of v, o, dout, dv (equal to head_dim but for MLA-style rows) */
  int32_t forward;    /* 1: dash_fwd runs the pair */
  int32_t backward;   /* 1: dash_plan_create / dash_bwd run the pair; 0: forward only */
} dash_kernel_row;

/* The kernel table's rows, in table order, terminated by a row with head_dim 0; the same in every build (a build
 * without CUDA runs them on the CPU backend only). The GPU entry points and the CPU backend accept exactly these
 * pairs. Bindings list these instead of spelling them again. */
const dash_kernel_row* dash_kernel_rows(void);

/* What dash_check_problem checks a problem for (its needs_backward argument). */
typedef enum dash_check_pass {
  DASH_CHECK_FORWARD = 0,     /* the forward, on the GPU or the CPU backend */
  DASH_CHECK_BACKWARD = 1,    /* the forward and the GPU backward: the pair's row must have a backward kernel */
  DASH_CHECK_CPU_BACKWARD = 2 /* the forward and the CPU backend's backward: every limit of the GPU's, every row */
} dash_check_pass;

/* Checks from the shape alone, before any planning or allocation, that this library can run `problem`:
 * its fields, the (head_dim, head_dim_v) pair (a row of dash_kernel_rows; else DASH_ERROR_UNSUPPORTED naming
 * problem.head_dim, or problem.head_dim_v when a row has the head dim with another value head dim, and listing the
 * pairs), the mask, and every size limit of the forward kernel and, with needs_backward = DASH_CHECK_BACKWARD or
 * DASH_CHECK_CPU_BACKWARD, of the backward (plan format: 16-bit tile indices, at most 2^28 tile pairs per unit;
 * 32-bit ticket counter; at most 65535 (batch, query head) pairs). DASH_CHECK_BACKWARD also refuses a row without a
 * backward kernel (DASH_ERROR_UNSUPPORTED naming problem.head_dim: "... has a forward kernel only in this build
 * ..."; every row of this build's table has one). The answer is the same on CPU and GPU and needs no device.
 * DASH_OK, or an error whose message (dash_last_error) names the field and the limit. */
dash_status dash_check_problem(const dash_problem* problem, int32_t needs_backward);

/* FLOPs of the forward (backward = 0) or backward (backward = 1) pass over `problem`, as every dash-attn
 * benchmark counts them (dash::attention_flops): 2 * (head_dim + head_dim_v) (4 * head_dim when they are equal) per
 * (query, key) pair per (batch, query head),
 * counting all pairs for the full mask, exactly half for causal with seqlen_q = seqlen_k, and the unmasked pairs
 * exactly otherwise; the backward is 2.5 x the forward. 0 for an invalid problem (dash_last_error says why). */
double dash_attention_flops(const dash_problem* problem, int32_t backward);

/* Unit templates the planners have built in this process (diagnostics and tests: a refused problem must not
 * have reached a planner). */
int64_t dash_planner_runs(void);

/* 1 if this library was built with the sm_90a kernels, else 0 (then the GPU calls return
 * DASH_ERROR_UNSUPPORTED). */
int dash_cuda_available(void);

/* sizeof the named ABI struct ("dash_problem", "dash_tensor", "dash_fwd_args", "dash_bwd_args",
 * "dash_plan_header", "dash_pack_sequence", "dash_kernel_row"), 0 for an unknown name: bindings check their mirrors
 * against it. */
size_t dash_abi_struct_size(const char* name);

/* ---- end of host API -------------------------------------------------------------------------------- */

/* The message of the calling thread's last failed call ("" if none). Valid until that thread's next call. */
const char* dash_last_error(void);

/* A short name for a status code ("DASH_OK", "DASH_ERROR_INVALID_ARGUMENT", ...). */
const char* dash_status_name(dash_status status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DASH_DASH_ATTN_H */
