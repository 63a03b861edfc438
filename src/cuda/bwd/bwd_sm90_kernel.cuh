// SPDX-License-Identifier: Apache-2.0
// bwd_sm90_kernel.cuh — the attention backward kernels that execute a plan (include/dash/plan_format.h):
//   bwd_preprocess: delta = rowsum(dO * O) in fp32 and LSE in base 2, padded to whole Q tiles;
//   bwd_main:       persistent CTAs claim tickets in order, run the plan's visits, keep dK/dV in registers
//                   and hand each visit's fp32 dQ partial to a store warp that adds it in the plan's order;
//   bwd_convert:    fp32 accumulators -> dQ (times softmax_scale), and dK/dV for split-head GQA.
//
// Kernel shape (version 1, written for correctness first): 384 threads, one CTA per SM: 8 compute warps, one
// store warp, and 3 warps that only exist to make the store warp's warpgroup whole for setmaxnreg. Compute
// warp w owns key rows [16w, 16w + 16) of the KV tile and computes, with
// mma.sync m16n8k16 (bf16/fp16 in, fp32 accumulate) on ldmatrix-loaded shared-memory tiles:
//   S^T = K Q^T, dP^T = V dO^T, P^T = exp2(S^T * scale * log2e - LSE2), dS^T = P^T (dP^T - delta),
//   dV += P^T dO, dK += dS^T Q (registers, for the whole segment), dS^T -> shared memory,
//   dQ_partial = dS K (the 8 warps split the Q tile x head dim), fp32 -> a shared staging buffer.
// Q/dO tiles come in with cp.async, double-buffered one visit ahead. This does NOT use TMA or wgmma yet
// (docs/kernel-notes-bwd.md: the plan-execution and ordering machinery is the point of this version; the
// MMA path is the part to replace for speed).
//
// The kernel holds math, not policy: which KV tiles, which Q tiles in which order, and in which order the
// dQ partials are added all come from the plan tables.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "bwd_sm90_params.h"

namespace dash::cuda::bwd {

// k-loop unrolling of the S/dP and dQ products (tuning experiments build other values; see kernel notes).
#ifndef DASH_BWD_UNROLL_K
#define DASH_BWD_UNROLL_K 1
#endif
constexpr int kUnrollK = DASH_BWD_UNROLL_K;

constexpr int kComputeWarps = 8;
constexpr int kComputeThreads = kComputeWarps * 32;
// Three warpgroups: two of compute warps and one whose first warp is the store warp (the other three exit
// at once). Registers are rebalanced with setmaxnreg: the store warpgroup drops to kStoreRegisters so that
// the compute warps get kComputeRegisters (the register file holds 2 x 128 x 240 + 128 x 24 <= 64K).
constexpr int kThreads = kComputeThreads + 128;
constexpr int kComputeRegisters = 240;
constexpr int kStoreRegisters = 24;
constexpr int kDqStages = 2;                    // dQ staging buffers between compute warps and store warp

// Hardware named barrier among the 256 compute threads (0 is __syncthreads, used once at the start). The dQ
// hand-off between compute warps and store warp uses mbarriers (full/empty per staging buffer): their arrive
// has release and their wait acquire semantics (CTA scope), which orders the staged data and the hand-off
// record between the two roles.
constexpr uint32_t kBarCompute = 1;

// ---------------------------------------------------------------------------------------------------------
// Small PTX wrappers.

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// bar.sync is the .aligned form: every lane of the warp must execute it together. Callers often come straight
// out of an `if (tid == 0)` block, so reconverge the warp first.
__device__ __forceinline__ void bar_sync(uint32_t id, uint32_t n) {
  __syncwarp();
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void compute_barrier() { bar_sync(kBarCompute, kComputeThreads); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Arrive (release.cta by default): this thread's prior shared-memory writes are visible to whoever completes
// a wait on the phase this arrival completes.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.shared::cta.b64 state, [%0];\n\t}" ::"r"(smem_addr(bar))
               : "memory");
}
// Wait (acquire.cta by default) until the phase with this parity has completed. On a fresh mbarrier the phase
// "before phase 0" counts as completed, so waiting for parity 1 returns at once.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// 16-byte global -> shared copy; `valid == false` writes 16 zero bytes (rows past the sequence end).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <class Element>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  // Not volatile: a pure register operation the compiler may schedule freely.
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <class Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Acquire load / release store / fence at GPU scope on the order counters.
__device__ __forceinline__ int32_t ld_acquire_gpu(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int32_t* p, int32_t v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// fp32 reductions into the split-GQA dK/dV accumulators (generic proxy).
__device__ __forceinline__ void red_add_v2(float* p, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1,%2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// 1-D bulk operations shared -> global (async proxy), tracked per thread in bulk async-groups. `bytes` is a
// multiple of 16; both addresses are 16-byte aligned.
__device__ __forceinline__ void bulk_reduce_add_s2g(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_copy_s2g(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(src)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Every committed group has finished reading its shared-memory source.
__device__ __forceinline__ void bulk_wait_group_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
// Every committed group is complete: its writes are performed and visible to the executing thread.
__device__ __forceinline__ void bulk_wait_group_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Orders this thread's generic-proxy and async-proxy accesses to global memory.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
// Makes this thread's generic-proxy shared-memory writes visible to later async-proxy reads (bulk copies).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Spin until *counter == expected. Every lane that calls it performs its own acquire load, so each lane's
// later memory operations are ordered after the releasing thread's prior writes (no reliance on the
// warp barrier's cumulativity on the acquire side). Backs off with __nanosleep to spare the L2, to at most
// 128 ns: at ~500 TFLOP/s a visit takes ~2.6 us per SM and a shift-type schedule gives each hand-off about one
// visit of slack, so every 100 ns between the release and its detection is on the critical path (one poll
// is itself an L2 round trip; at most two warps per SM poll).
__device__ __forceinline__ void wait_counter_equals(const int32_t* counter, int32_t expected) {
  uint32_t backoff = 32;
  while (ld_acquire_gpu(counter) != expected) {
    __nanosleep(backoff);
    if (backoff < 128) backoff *= 2;
  }
}

// Element offset of (row, col) in a row-major bf16/fp16 tile with kCols columns, 16-byte chunks XOR-swizzled
// by the row's low 3 bits: the 8 rows one ldmatrix phase reads land in 8 different bank groups.
template <int kCols>
__device__ __forceinline__ int swz(int row, int col) {
  return row * kCols + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}
// Same for the fp32 dQ staging tile (4-float chunks).
template <int kCols>
__device__ __forceinline__ int swz_f32(int row, int col) {
  return row * kCols + ((((col >> 2) ^ (row & 7))) << 2) + (col & 3);
}

// ---------------------------------------------------------------------------------------------------------
// Shared memory.

// What the compute warps hand to the store warp with each dQ staging buffer.
struct DqHandoff {
  int32_t accumulator;  // (batch * heads_q + head) * num_q_tiles + q_tile; -1 = no more work
  int32_t rank;         // dq_rank
  int32_t flags;        // dash_visit_flags
  int32_t ticket;
  int32_t visit;        // index in the unit's visit table (order log only)
};

// What a claimed ticket names: the plan item and its unit's coordinates (batch, heads, group rank). Both
// kernels decode tickets here, with plan_format.h's decoder (the simulator and the CPU backend use it too).
struct TicketWork {
  dash_item item;
  dash_unit_coords unit;
};
__device__ __forceinline__ TicketWork decode_ticket(const BwdParams& p, int ticket) {
  return TicketWork{p.items[ticket % p.items_per_unit],
                    dash_unit_coords_from(p.gqa_mode, p.heads_q, p.heads_kv, p.group_size, p.group_head_by_rank,
                                          ticket / p.items_per_unit)};
}

// The part of a visit record the compute warps use after the loads are issued (written by thread 0 with
// the Q/dO stage, so the plan tables cost the MMA code no registers).
struct VisitStage {
  int32_t head;     // query head
  int32_t q_tile;
  int32_t rank;
  int32_t flags;
  int32_t visit;
};

template <int kHeadDim, class Element>
struct BwdSmem {
  static constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  static constexpr int kBlockN = BwdTiles<kHeadDim>::kBlockN;
  Element q[2][kBlockM * kHeadDim];
  Element dout[2][kBlockM * kHeadDim];
  Element k[kBlockN * kHeadDim];
  Element v[kBlockN * kHeadDim];
  Element ds_t[kBlockN * kBlockM];  // dS^T: rows = keys, columns = queries
  float dq[kDqStages][kBlockM * kHeadDim];
  float lse2[2][kBlockM];
  float delta[2][kBlockM];
  VisitStage stage[2];
  DqHandoff handoff[kDqStages];
  uint64_t dq_full[kDqStages];   // compute threads arrive (kComputeThreads) when a staging buffer is filled
  uint64_t dq_empty[kDqStages];  // store-warp lanes arrive (32) when it has been drained
  int32_t ticket;
  int32_t waits_done;  // store warp -> claim rule: visits whose dQ wait has been satisfied (atomics)
};

// ---------------------------------------------------------------------------------------------------------
// Preprocess: delta and base-2 LSE per (batch, head, padded row). One warp per row.

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(256) bwd_preprocess(BwdParams p) {
  constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  const int padded_rows = p.num_q_tiles * kBlockM;
  const int row = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int bh = blockIdx.y;  // batch * heads_q + head
  if (row >= padded_rows) return;
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  const size_t out = size_t(bh) * padded_rows + row;
  if (row >= p.seqlen_q) {
    if (lane == 0) {
      p.delta[out] = 0.f;
      p.lse_log2[out] = __int_as_float(0x7f800000);  // +inf: P = exp2(s - inf) = 0 on padding rows
    }
    return;
  }
  const Element* o = static_cast<const Element*>(p.o.data) + b * p.o.batch_stride + int64_t(row) * p.o.seq_stride +
                     h * p.o.head_stride;
  const Element* dout = static_cast<const Element*>(p.dout.data) + b * p.dout.batch_stride +
                        int64_t(row) * p.dout.seq_stride + h * p.dout.head_stride;
  float sum = 0.f;
  for (int d = lane * 2; d < kHeadDim; d += 64) {
    sum += float(o[d]) * float(dout[d]) + float(o[d + 1]) * float(dout[d + 1]);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    const float lse = p.lse[size_t(bh) * p.seqlen_q + row];
    p.delta[out] = sum;
    // A row that sees no key has LSE = -inf: +inf here makes its P (and so dS, dQ, and its dK/dV share) 0.
    p.lse_log2[out] = (lse == -__int_as_float(0x7f800000)) ? __int_as_float(0x7f800000) : lse * 1.4426950408889634f;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Convert: dq_accum -> dQ (times softmax_scale; zero for Q tiles no visit contributes to), and for split-head
// GQA dk/dv_accum -> dK/dV. 4 elements per thread.

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(256) bwd_convert(BwdParams p) {
  constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  constexpr int kBlockN = BwdTiles<kHeadDim>::kBlockN;
  constexpr int kQuads = kHeadDim / 4;
  const int64_t dq_quads = int64_t(p.batch) * p.heads_q * p.seqlen_q * kQuads;
  const int64_t dkv_quads = p.split_dkv ? int64_t(p.batch) * p.heads_kv * p.seqlen_k * kQuads : 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < dq_quads + dkv_quads;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < dq_quads) {
      const int d = int(i % kQuads) * 4;
      int64_t rest = i / kQuads;
      const int h = int(rest % p.heads_q);
      rest /= p.heads_q;
      const int row = int(rest % p.seqlen_q);
      const int b = int(rest / p.seqlen_q);
      const int q_tile = row / kBlockM;
      const int head_in_unit = p.gqa_mode == DASH_GQA_PACK_GROUP ? h % p.group_size : 0;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      // A Q tile with no contribution was never written (deterministic mode stores its first partial).
      if (p.dq_count[head_in_unit * p.num_q_tiles + q_tile] != 0) {
        const int64_t accumulator = (int64_t(b) * p.heads_q + h) * p.num_q_tiles + q_tile;
        // The tile is in the staging layout (store_warp_loop copies it as one flat range); d is a multiple
        // of 4, so the 4-float chunk stays contiguous.
        acc = *reinterpret_cast<const float4*>(p.dq_accum + accumulator * (kBlockM * kHeadDim) +
                                               swz_f32<kHeadDim>(row % kBlockM, d));
      }
      Element* out = static_cast<Element*>(p.dq.data) + b * p.dq.batch_stride + int64_t(row) * p.dq.seq_stride +
                     h * p.dq.head_stride + d;
      uint2 packed;
      packed.x = pack2<Element>(acc.x * p.softmax_scale, acc.y * p.softmax_scale);
      packed.y = pack2<Element>(acc.z * p.softmax_scale, acc.w * p.softmax_scale);
      *reinterpret_cast<uint2*>(out) = packed;
    } else {
      const int64_t j = i - dq_quads;
      const int d = int(j % kQuads) * 4;
      int64_t rest = j / kQuads;
      const int hk = int(rest % p.heads_kv);
      rest /= p.heads_kv;
      const int row = int(rest % p.seqlen_k);
      const int b = int(rest / p.seqlen_k);
      const int64_t src = ((int64_t(b) * p.heads_kv + hk) * (int64_t(p.num_kv_tiles) * kBlockN) + row) * kHeadDim + d;
      const float4 dk = *reinterpret_cast<const float4*>(p.dk_accum + src);  // already times softmax_scale
      const float4 dv = *reinterpret_cast<const float4*>(p.dv_accum + src);
      Element* dk_out = static_cast<Element*>(p.dk.data) + b * p.dk.batch_stride + int64_t(row) * p.dk.seq_stride +
                        hk * p.dk.head_stride + d;
      Element* dv_out = static_cast<Element*>(p.dv.data) + b * p.dv.batch_stride + int64_t(row) * p.dv.seq_stride +
                        hk * p.dv.head_stride + d;
      *reinterpret_cast<uint2*>(dk_out) = make_uint2(pack2<Element>(dk.x, dk.y), pack2<Element>(dk.z, dk.w));
      *reinterpret_cast<uint2*>(dv_out) = make_uint2(pack2<Element>(dv.x, dv.y), pack2<Element>(dv.z, dv.w));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// The store warp: consumes dQ staging buffers in the order the compute warps filled them (= the CTA's visit
// order) and adds each into its accumulator at its turn.

// `Smem` is BwdSmem here; the wgmma kernel (bwd_wgmma_kernel.cuh) passes its own shared-memory
// struct, which has the same dq / handoff / dq_full / dq_empty / waits_done members.
//
// kStoreWarps = 1: one warp drains both staging buffers, alternately (= the CTA's visit order).
// kStoreWarps = kDqStages: warp `store_warp` drains staging buffer `store_warp` only, so one buffer's hand-off
// (wait for its turn, reduce, complete, release) overlaps the other's.
// Either way each staging buffer has one draining warp (dq_empty counts 32 arrivals) and tiles of one buffer
// are drained in the order they were filled.
// The tile goes to global memory as ONE bulk operation issued by lane 0 (cp.reduce.async.bulk .add.f32, or a
// plain bulk copy for a deterministic first contribution): the accumulator tile has the staging buffer's
// layout (swz_f32 order, which bwd_convert undoes), so the copy is a flat 1-D range. Before this, the warp's
// 32 lanes issued 2048 16-byte reductions per tile and fenced them (docs/kernel-notes-bwd-wgmma.md, log).
// The compute threads fence.proxy.async their staging writes before their dq_full arrival (the bulk copy
// reads shared memory through the async proxy).
template <int kHeadDim, class Smem, int kStoreWarps = 1>
__device__ __forceinline__ void store_warp_loop(const BwdParams& p, Smem& s, int store_warp = 0) {
  constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  constexpr int kTileFloats = kBlockM * kHeadDim;
  constexpr uint32_t kTileBytes = kTileFloats * sizeof(float);
  static_assert(kTileBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
  static_assert(kStoreWarps == 1 || kStoreWarps == kDqStages, "one warp for all staging buffers, or one per buffer");
  const int lane = threadIdx.x % 32;
  int stage = store_warp;
  uint32_t phase = 0;
  for (;; stage += kStoreWarps, phase ^= (stage >= kDqStages), stage %= kDqStages) {
    // Wait for the compute warps to fill this buffer (their mbarrier arrivals release the staged data and the
    // hand-off record; this wait acquires them).
    mbar_wait(&s.dq_full[stage], phase);
    const DqHandoff h = s.handoff[stage];
    if (h.accumulator < 0) break;  // no more work: the compute warps keep no further handshake pending

    if (lane == 0) {
      float* accum = p.dq_accum + int64_t(h.accumulator) * kTileFloats;
      int32_t* counter = p.dq_counters + h.accumulator;
      if (p.deterministic) {
        // WAIT (dQ order). The visit of rank h.rank - 1 of this accumulator has provably been claimed by a
        // running CTA (docs/DEADLOCK.md, "Why that suffices": with the claim rule and P >= the largest wave, or
        // with a backward-only plan, every awaited visit belongs to a claimed item whose CTA is running and
        // whose own earlier waits are satisfiable), so this spin ends. Rank 0 does not wait: its counter is 0
        // (zeroed before the launch). The acquire orders the previous rank's released writes before what
        // follows in this thread; the proxy fence extends that order to this thread's async-proxy bulk
        // operation below (generic -> async proxy), which reads and writes the same accumulator.
        wait_counter_equals(counter, h.rank);
        fence_proxy_async_global();
        if (p.order_log != nullptr) {
          p.order_log[int64_t(h.accumulator) * p.num_kv_tiles + h.rank] = (int64_t(h.ticket) << 32) | uint32_t(h.visit);
        }
        // This visit's wait is satisfied: the claim rule counts these (claim the next ticket only once every
        // wait of the visits handed off so far is satisfied).
        atomicAdd(&s.waits_done, 1);
      }
      // The first contribution (deterministic mode only) stores, so the accumulator needs no memset; every
      // later one adds. In non-deterministic mode all add (the accumulator was zeroed before the launch).
      if (p.deterministic && (h.flags & DASH_VISIT_FIRST)) {
        bulk_copy_s2g(accum, s.dq[stage], kTileBytes);
      } else {
        bulk_reduce_add_s2g(accum, s.dq[stage], kTileBytes);
      }
      bulk_commit_group();
      // The staging buffer may be refilled once the bulk operation has read it (.read: its global writes may
      // still be in flight; they are awaited below before the release).
      bulk_wait_group_read_all();
    }
    // Lane 0's wait above happens before every lane's arrival (warp barrier); the compute warps acquire the
    // arrivals before they overwrite the buffer.
    __syncwarp();
    mbar_arrive(&s.dq_empty[stage]);
    if (lane == 0 && p.deterministic) {
      // RELEASE (dQ order). wait_group 0 (NOT .read, the FA3 hazard in fa3-and-dash-fork-notes.md) returns
      // once the bulk operation is complete: its writes to the accumulator are performed and visible to this
      // thread. The proxy fence orders those async-proxy writes before this thread's later generic
      // operations, and st.release.gpu is cumulative: a CTA that observes the new value with ld.acquire.gpu
      // (wait_counter_equals) also observes the writes.
      bulk_wait_group_all();
      fence_proxy_async_global();
      st_release_gpu(p.dq_counters + h.accumulator, h.rank + 1);
    }
  }
  // No bulk operation may outlive the CTA (non-deterministic mode only waited for the reads).
  if (lane == 0) bulk_wait_group_all();
}

// ---------------------------------------------------------------------------------------------------------
// The compute warps.

template <int kHeadDim, class Element>
struct ComputeWarps {
  using Smem = BwdSmem<kHeadDim, Element>;
  static constexpr int kBlockM = BwdTiles<kHeadDim>::kBlockM;
  static constexpr int kBlockN = BwdTiles<kHeadDim>::kBlockN;
  // Query columns of S^T / dP^T held in registers at once (bounds registers: 2 * 16 x kChunkM fp32 per warp).
  static constexpr int kChunkM = kHeadDim <= 64 ? 32 : 16;
  static constexpr int kNumChunks = kBlockM / kChunkM;
  static constexpr int kDBlocks = kHeadDim / 8;  // n-blocks of 8 columns over the head dim
  // dQ split: warps over (Q tile rows / 16) x (head dim / kDqCols).
  static constexpr int kDqRowGroups = kBlockM / 16;
  static constexpr int kDqCols = kHeadDim * kDqRowGroups / kComputeWarps;
  static_assert(kBlockN == 16 * kComputeWarps, "one 16-row key slab per compute warp");
  static_assert(kDqCols % 16 == 0 && kDqCols * (kComputeWarps / kDqRowGroups) == kHeadDim, "dQ warp split");

  // Issue cp.async for the Q/dO tiles and the LSE/delta rows of a visit into `stage`. All 256 threads.
  static __device__ __forceinline__ void load_visit(const BwdParams& p, Smem& s, int stage, int b, int head,
                                                    int q_tile, int tid) {
    constexpr int kChunksPerRow = kHeadDim / 8;
    constexpr int kChunks = kBlockM * kChunksPerRow;
    const Element* q = static_cast<const Element*>(p.q.data) + b * p.q.batch_stride + head * p.q.head_stride;
    const Element* dout =
        static_cast<const Element*>(p.dout.data) + b * p.dout.batch_stride + head * p.dout.head_stride;
#pragma unroll
    for (int i = 0; i < kChunks / kComputeThreads; ++i) {
      const int idx = tid + i * kComputeThreads;
      const int row = idx / kChunksPerRow, col = (idx % kChunksPerRow) * 8;
      const int seq = q_tile * kBlockM + row;
      const bool valid = seq < p.seqlen_q;
      const int64_t safe_seq = valid ? seq : 0;
      cp_async_16(smem_addr(&s.q[stage][swz<kHeadDim>(row, col)]), q + safe_seq * p.q.seq_stride + col, valid);
      cp_async_16(smem_addr(&s.dout[stage][swz<kHeadDim>(row, col)]), dout + safe_seq * p.dout.seq_stride + col,
                  valid);
    }
    const int64_t row0 = ((int64_t(b) * p.heads_q + head) * p.num_q_tiles + q_tile) * kBlockM;
    if (tid < kBlockM / 4) {
      cp_async_16(smem_addr(&s.lse2[stage][tid * 4]), p.lse_log2 + row0 + tid * 4, true);
    } else if (tid < kBlockM / 2) {
      const int t = tid - kBlockM / 4;
      cp_async_16(smem_addr(&s.delta[stage][t * 4]), p.delta + row0 + t * 4, true);
    }
  }

  static __device__ __forceinline__ void load_kv(const BwdParams& p, Smem& s, int b, int head_kv, int kv_tile,
                                                 int tid) {
    constexpr int kChunksPerRow = kHeadDim / 8;
    constexpr int kChunks = kBlockN * kChunksPerRow;
    const Element* k = static_cast<const Element*>(p.k.data) + b * p.k.batch_stride + head_kv * p.k.head_stride;
    const Element* v = static_cast<const Element*>(p.v.data) + b * p.v.batch_stride + head_kv * p.v.head_stride;
#pragma unroll
    for (int i = 0; i < kChunks / kComputeThreads; ++i) {
      const int idx = tid + i * kComputeThreads;
      const int row = idx / kChunksPerRow, col = (idx % kChunksPerRow) * 8;
      const int seq = kv_tile * kBlockN + row;
      const bool valid = seq < p.seqlen_k;
      const int64_t safe_seq = valid ? seq : 0;
      cp_async_16(smem_addr(&s.k[swz<kHeadDim>(row, col)]), k + safe_seq * p.k.seq_stride + col, valid);
      cp_async_16(smem_addr(&s.v[swz<kHeadDim>(row, col)]), v + safe_seq * p.v.seq_stride + col, valid);
    }
  }

  // One visit: everything from the staged Q/dO to the dQ partial in registers; dK/dV accumulate.
  static __device__ __forceinline__ void compute_visit(const BwdParams& p, Smem& s, int stage, int kv_tile,
                                                       float (&dk)[kDBlocks][4], float (&dv)[kDBlocks][4],
                                                       float (&dq)[kDqCols / 8][4]) {
    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int q_tile = s.stage[stage].q_tile;
    // Masking is needed where the plan says the block is partly masked, and on the last KV tile when the
    // keys do not fill it (rows past seqlen_q need nothing: their LSE2 is +inf, so P = 0).
    const bool need_mask =
        (s.stage[stage].flags & DASH_VISIT_PARTIAL_MASK) || (kv_tile + 1) * kBlockN > p.seqlen_k;
    const Element* q_s = s.q[stage];
    const Element* do_s = s.dout[stage];
    const int key0 = kv_tile * kBlockN + warp * 16 + g;  // this thread's first key row; the second is +8
    const int causal_offset = p.seqlen_k - p.seqlen_q;

#pragma unroll
    for (int chunk = 0; chunk < kNumChunks; ++chunk) {
      const int m0 = chunk * kChunkM;
      float sc[kChunkM / 8][4];  // S^T, then P^T
      float dp[kChunkM / 8][4];  // dP^T, then dS^T
#pragma unroll
      for (int j = 0; j < kChunkM / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[j][e] = dp[j][e] = 0.f;

      // S^T = K Q^T and dP^T = V dO^T over the head dim. (Not fully unrolled: that lets the scheduler hoist
      // every k-step's fragments at once, which spills.)
#pragma unroll kUnrollK
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        uint32_t ka[4], va[4];
        ldsm_x4(smem_addr(&s.k[swz<kHeadDim>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)]), ka);
        ldsm_x4(smem_addr(&s.v[swz<kHeadDim>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8)]), va);
#pragma unroll
        for (int jj = 0; jj < kChunkM / 16; ++jj) {
          const int row = m0 + jj * 16 + (lane & 7) + (lane >> 4) * 8;
          const int col = kk * 16 + ((lane >> 3) & 1) * 8;
          uint32_t qb[4], ob[4];
          ldsm_x4(smem_addr(&q_s[swz<kHeadDim>(row, col)]), qb);
          ldsm_x4(smem_addr(&do_s[swz<kHeadDim>(row, col)]), ob);
          mma_16816<Element>(sc[2 * jj], ka, qb[0], qb[1]);
          mma_16816<Element>(sc[2 * jj + 1], ka, qb[2], qb[3]);
          mma_16816<Element>(dp[2 * jj], va, ob[0], ob[1]);
          mma_16816<Element>(dp[2 * jj + 1], va, ob[2], ob[3]);
        }
      }

      // P^T and dS^T. Accumulator element e of n-block j: key = key0 + 8 * (e >= 2), query column
      // m0 + 8j + 2t + (e & 1).
#pragma unroll
      for (int j = 0; j < kChunkM / 8; ++j) {
        const int m = m0 + 8 * j + 2 * t;
        const float2 lse2 = *reinterpret_cast<const float2*>(&s.lse2[stage][m]);
        const float2 delta = *reinterpret_cast<const float2*>(&s.delta[stage][m]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float prob = exp2f(sc[j][e] * p.scale_log2 - ((e & 1) ? lse2.y : lse2.x));
          if (need_mask) {
            const int key = key0 + ((e >= 2) ? 8 : 0);
            const int query = q_tile * kBlockM + m + (e & 1);
            const bool masked = key >= p.seqlen_k || (p.causal && key > query + causal_offset);
            prob = masked ? 0.f : prob;
          }
          sc[j][e] = prob;
          dp[j][e] = prob * (dp[j][e] - ((e & 1) ? delta.y : delta.x));
        }
      }

      // dV += P^T dO and dK += dS^T Q over this chunk's queries; dS^T -> shared memory for dQ.
#pragma unroll
      for (int kb = 0; kb < kChunkM / 16; ++kb) {
        const uint32_t pa[4] = {pack2<Element>(sc[2 * kb][0], sc[2 * kb][1]),
                                pack2<Element>(sc[2 * kb][2], sc[2 * kb][3]),
                                pack2<Element>(sc[2 * kb + 1][0], sc[2 * kb + 1][1]),
                                pack2<Element>(sc[2 * kb + 1][2], sc[2 * kb + 1][3])};
        const uint32_t da[4] = {pack2<Element>(dp[2 * kb][0], dp[2 * kb][1]),
                                pack2<Element>(dp[2 * kb][2], dp[2 * kb][3]),
                                pack2<Element>(dp[2 * kb + 1][0], dp[2 * kb + 1][1]),
                                pack2<Element>(dp[2 * kb + 1][2], dp[2 * kb + 1][3])};
        const int row = m0 + kb * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int dd = 0; dd < kHeadDim / 16; ++dd) {
          const int col = dd * 16 + (lane >> 4) * 8;
          uint32_t ob[4], qb[4];
          ldsm_x4_trans(smem_addr(&do_s[swz<kHeadDim>(row, col)]), ob);
          ldsm_x4_trans(smem_addr(&q_s[swz<kHeadDim>(row, col)]), qb);
          mma_16816<Element>(dv[2 * dd], pa, ob[0], ob[1]);
          mma_16816<Element>(dv[2 * dd + 1], pa, ob[2], ob[3]);
          mma_16816<Element>(dk[2 * dd], da, qb[0], qb[1]);
          mma_16816<Element>(dk[2 * dd + 1], da, qb[2], qb[3]);
        }
        // dS^T rows key0-local (warp*16 + g, +8), columns m0 + 16kb + {2t, 8 + 2t}.
        Element* ds = s.ds_t;
        const int r0 = warp * 16 + g;
        const int c0 = m0 + kb * 16 + 2 * t;
        *reinterpret_cast<uint32_t*>(&ds[swz<kBlockM>(r0, c0)]) = da[0];
        *reinterpret_cast<uint32_t*>(&ds[swz<kBlockM>(r0 + 8, c0)]) = da[1];
        *reinterpret_cast<uint32_t*>(&ds[swz<kBlockM>(r0, c0 + 8)]) = da[2];
        *reinterpret_cast<uint32_t*>(&ds[swz<kBlockM>(r0 + 8, c0 + 8)]) = da[3];
      }
    }

    // All of dS^T is in shared memory (every compute warp wrote its key slab).
    compute_barrier();

    // dQ_partial = dS K: warp -> rows [16 * (warp % kDqRowGroups), +16), columns [kDqCols * (warp / ...), ...).
    const int mrow0 = 16 * (warp % kDqRowGroups);
    const int dcol0 = kDqCols * (warp / kDqRowGroups);
#pragma unroll
    for (int j = 0; j < kDqCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[j][e] = 0.f;
#pragma unroll kUnrollK
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4_trans(smem_addr(&s.ds_t[swz<kBlockM>(kk * 16 + (lane & 7) + (lane >> 4) * 8,
                                                   mrow0 + ((lane >> 3) & 1) * 8)]),
                    a);
#pragma unroll
      for (int dd = 0; dd < kDqCols / 16; ++dd) {
        uint32_t kb[4];
        ldsm_x4_trans(smem_addr(&s.k[swz<kHeadDim>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                   dcol0 + dd * 16 + (lane >> 4) * 8)]),
                      kb);
        mma_16816<Element>(dq[2 * dd], a, kb[0], kb[1]);
        mma_16816<Element>(dq[2 * dd + 1], a, kb[2], kb[3]);
      }
    }
  }

  // End of a segment: dK/dV of this KV tile (this unit's share) out of registers.
  static __device__ __forceinline__ void segment_epilogue(const BwdParams& p, int b, int head_kv, int group_rank,
                                                          int kv_tile, float (&dk)[kDBlocks][4],
                                                          float (&dv)[kDBlocks][4]) {
    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int local_key = warp * 16 + g;
#pragma unroll
    for (int j = 0; j < kDBlocks; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[j][e] *= p.softmax_scale;

    if (!p.split_dkv) {
      // This CTA holds the complete dK/dV of the tile (MHA, or GQA packed per KV head): store them.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = kv_tile * kBlockN + local_key + 8 * half;
        if (key >= p.seqlen_k) continue;
        Element* dk_row = static_cast<Element*>(p.dk.data) + b * p.dk.batch_stride + int64_t(key) * p.dk.seq_stride +
                          head_kv * p.dk.head_stride;
        Element* dv_row = static_cast<Element*>(p.dv.data) + b * p.dv.batch_stride + int64_t(key) * p.dv.seq_stride +
                          head_kv * p.dv.head_stride;
#pragma unroll
        for (int j = 0; j < kDBlocks; ++j) {
          const int col = 8 * j + 2 * t;
          *reinterpret_cast<uint32_t*>(dk_row + col) = pack2<Element>(dk[j][2 * half], dk[j][2 * half + 1]);
          *reinterpret_cast<uint32_t*>(dv_row + col) = pack2<Element>(dv[j][2 * half], dv[j][2 * half + 1]);
        }
      }
      return;
    }

    // Split-head GQA: add this query head's share into the fp32 accumulators in group_head_by_rank order.
    int32_t* counter = p.dkv_counters + (int64_t(b) * p.heads_kv + head_kv) * p.num_kv_tiles + kv_tile;
    if (p.deterministic) {
      // WAIT (dK/dV group order). The head of group rank `group_rank - 1` is the previous unit, i.e. items with
      // earlier tickets (docs/DEADLOCK.md: "Waits across units ... always target the previous unit"); all of
      // them were claimed before ours, by running CTAs, and the previous unit's own waits are satisfiable by the
      // same argument, so this spin ends. Every compute thread acquires for itself.
      wait_counter_equals(counter, group_rank);
    }
    const int64_t base_row = (int64_t(b) * p.heads_kv + head_kv) * (int64_t(p.num_kv_tiles) * kBlockN) +
                             int64_t(kv_tile) * kBlockN;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = base_row + local_key + 8 * half;
#pragma unroll
      for (int j = 0; j < kDBlocks; ++j) {
        const int col = 8 * j + 2 * t;
        red_add_v2(p.dk_accum + row * kHeadDim + col, dk[j][2 * half], dk[j][2 * half + 1]);
        red_add_v2(p.dv_accum + row * kHeadDim + col, dv[j][2 * half], dv[j][2 * half + 1]);
      }
    }
    if (p.deterministic) {
      // RELEASE (dK/dV group order). Each thread fences its adds (fence.acq_rel.gpu), the compute barrier
      // orders all 256 threads' fences before thread 0's st.release.gpu, and release is cumulative: the next
      // rank's acquire observes all of them.
      fence_acq_rel_gpu();
      compute_barrier();
      if (tid == 0) st_release_gpu(counter, group_rank + 1);
    }
  }

  static __device__ void run(const BwdParams& p, Smem& s) {
    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const bool pack_group = p.gqa_mode == DASH_GQA_PACK_GROUP;
    // Claim rule (docs/DEADLOCK.md): without DASH_PLAN_WAITS_ONLY_BACKWARD, claim the next ticket only after
    // the current item's last wait is satisfied. Backward-only plans would allow claiming ahead, but this
    // kernel does not: its store warp adds in visit order, so an item claimed ahead would queue behind the
    // current item's waits (head-of-line blocking), and the waits of every later item of its unit would
    // inherit that delay. Measured on the H200 (docs/kernel-notes-bwd.md): ascending, causal, hdim128, 4x4096,
    // 33.5 ms with claim-ahead, 9.4 ms without. Without ordered adds there are no waits at all.
    const bool claim_after_waits = p.deterministic != 0;
    int dq_stage = 0;
    uint32_t dq_phase = 0;  // parity of the staging buffer's current use (flips when dq_stage wraps)
    int visits_handed_off = 0;  // thread 0's count, for the claim rule

    float dk[kDBlocks][4], dv[kDBlocks][4], dq[kDqCols / 8][4];

    for (;;) {
      // Claim the next ticket. The barrier before makes sure every thread has read the previous one.
      compute_barrier();
      if (tid == 0) s.ticket = atomicAdd(p.ticket_counter, 1);
      compute_barrier();
      const int ticket = s.ticket;
      if (ticket >= p.num_tickets) break;

      const TicketWork work = decode_ticket(p, ticket);
      const dash_item item = work.item;
      const int b = work.unit.batch, head_kv = work.unit.head_kv, unit_head = work.unit.head_q,
                group_rank = work.unit.group_rank;

      for (int sgi = 0; sgi < item.num_segments; ++sgi) {
        const dash_segment seg = p.segments[item.first_segment + sgi];
        // Everyone is done with K/V and the Q/dO stages of the previous segment.
        compute_barrier();
        load_kv(p, s, b, head_kv, seg.kv_tile, tid);
#pragma unroll
        for (int j = 0; j < kDBlocks; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.f;

        if (seg.num_visits > 0) {
          const dash_visit first = p.visits[seg.first_visit];
          const int head = pack_group ? head_kv * p.group_size + first.head_in_unit : unit_head;
          load_visit(p, s, 0, b, head, first.q_tile, tid);
          if (tid == 0) s.stage[0] = VisitStage{head, first.q_tile, first.dq_rank, first.flags, seg.first_visit};
        }
        cp_async_commit();

        for (int vi = 0; vi < seg.num_visits; ++vi) {
          const int stage = vi & 1;
          // This visit's tiles have landed (our own copies), and after the barrier everyone's have; everyone
          // is also done with the other stage (the previous visit), which the prefetch below overwrites.
          cp_async_wait_all();
          compute_barrier();
          if (vi + 1 < seg.num_visits) {
            const int index = seg.first_visit + vi + 1;
            const dash_visit next = p.visits[index];
            const int head = pack_group ? head_kv * p.group_size + next.head_in_unit : unit_head;
            load_visit(p, s, stage ^ 1, b, head, next.q_tile, tid);
            if (tid == 0) s.stage[stage ^ 1] = VisitStage{head, next.q_tile, next.dq_rank, next.flags, index};
          }
          cp_async_commit();

          compute_visit(p, s, stage, seg.kv_tile, dk, dv, dq);

          // Hand the dQ partial to the store warp. WAIT (staging buffer) until it has drained this buffer: the
          // store warp drains buffers in order and can only be held up by a dQ-order wait, which ends
          // (docs/DEADLOCK.md; see store_warp_loop), so this wait ends too.
          mbar_wait(&s.dq_empty[dq_stage], dq_phase ^ 1);
          {
            const int mrow0 = 16 * (warp % kDqRowGroups);
            const int dcol0 = kDqCols * (warp / kDqRowGroups);
            float* staged = s.dq[dq_stage];
#pragma unroll
            for (int j = 0; j < kDqCols / 8; ++j) {
              const int col = dcol0 + 8 * j + 2 * t;
              *reinterpret_cast<float2*>(&staged[swz_f32<kHeadDim>(mrow0 + g, col)]) = make_float2(dq[j][0], dq[j][1]);
              *reinterpret_cast<float2*>(&staged[swz_f32<kHeadDim>(mrow0 + g + 8, col)]) =
                  make_float2(dq[j][2], dq[j][3]);
            }
          }
          if (tid == 0) {
            const VisitStage& vs = s.stage[stage];
            DqHandoff h;
            h.accumulator = (b * p.heads_q + vs.head) * p.num_q_tiles + vs.q_tile;
            h.rank = vs.rank;
            h.flags = vs.flags;
            h.ticket = ticket;
            h.visit = vs.visit;
            s.handoff[dq_stage] = h;
            ++visits_handed_off;
          }
          // The store warp's bulk copy reads the staged values through the async proxy: each writer fences its
          // generic writes for that proxy, then its arrival releases them (and thread 0's hand-off record).
          fence_proxy_async_shared();
          mbar_arrive(&s.dq_full[dq_stage]);
          dq_stage ^= 1;
          dq_phase ^= (dq_stage == 0);
        }
        cp_async_wait_all();  // a segment without visits still loaded K/V: drain before reuse

        segment_epilogue(p, b, head_kv, group_rank, seg.kv_tile, dk, dv);
      }

      if (claim_after_waits && tid == 0) {
        // CLAIM RULE WAIT. The store warp of this CTA counts the visits whose dQ wait is satisfied; once that is
        // all visits handed off, the item's last wait is satisfied. Those waits end by docs/DEADLOCK.md (the
        // awaited visits belong to claimed items of running CTAs).
        while (atomicAdd(&s.waits_done, 0) < visits_handed_off) __nanosleep(64);
      }
    }

    // No more tickets: tell the store warp (it drains the buffers in order, so it finishes every earlier add
    // before it reads this record and exits).
    mbar_wait(&s.dq_empty[dq_stage], dq_phase ^ 1);
    if (tid == 0) s.handoff[dq_stage].accumulator = -1;
    mbar_arrive(&s.dq_full[dq_stage]);
    (void)g;
    (void)t;
  }
};

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(kThreads, 1) bwd_main(const __grid_constant__ BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<BwdSmem<kHeadDim, Element>*>(smem_raw);
  if (threadIdx.x == 0) {
    s.waits_done = 0;
    for (int stage = 0; stage < kDqStages; ++stage) {
      mbar_init(&s.dq_full[stage], kComputeThreads);
      mbar_init(&s.dq_empty[stage], 32);
    }
  }
  __syncthreads();  // the only full-CTA barrier: initial shared state before the roles split
  if (threadIdx.x >= kComputeThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kStoreRegisters));
    if (threadIdx.x < kComputeThreads + 32) store_warp_loop<kHeadDim, BwdSmem<kHeadDim, Element>>(p, s);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kComputeRegisters));
    ComputeWarps<kHeadDim, Element>::run(p, s);
  }
}

}  // namespace dash::cuda::bwd
