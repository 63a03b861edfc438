// SPDX-License-Identifier: Apache-2.0
// hopper/ptx.cuh — PTX wrappers the kernels use directly: shared-memory addresses, ordering across CTAs
// (acquire / release / fences at GPU scope), the async proxy (proxy fences, 1-D bulk copies and reductions),
// fp32 reductions to global memory, and fp32 -> 16-bit packing. TMA and wgmma come from CuTe; synchronisation
// inside a CTA is in hopper/sync.cuh.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/numeric/numeric_types.hpp>

namespace dash::hopper {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- ordering across CTAs (the order counters of deterministic mode) ----
__device__ __forceinline__ int32_t ld_acquire_gpu(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int32_t* p, int32_t v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// ---- programmatic dependent launch (a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization) ----
// launch_dependents: the next kernel on the stream may start its CTAs once every CTA of this grid has executed this
// (or exited). wait: returns once the grids this kernel depends on have completed and their writes are visible; a
// kernel launched without the attribute returns at once.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void griddepcontrol_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// fp32 reduction of two adjacent floats into global memory (generic proxy).
__device__ __forceinline__ void red_add_v2(float* p, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1,%2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// ---- the async proxy: 1-D bulk operations, tracked per thread in bulk async-groups ----
// `bytes` is a multiple of 16; both addresses are 16-byte aligned. Every bulk operation states the L2 eviction
// priority of its global lines (the 64-bit cache-policy operand of .L2::cache_hint, in the encodings CuTe's
// TMA::CacheHintSm90 names; the TMA tile loads take the same values through .with()): data that other CTAs read
// or add into again soon is kept (EVICT_LAST), data read once goes first.
using L2Hint = cute::TMA::CacheHintSm90;
__device__ __forceinline__ void bulk_reduce_add_s2g(float* dst, const float* src, uint32_t bytes, L2Hint hint) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 [%0], [%1], %2, %3;" ::"l"(
                   dst),
               "r"(smem_addr(src)), "r"(bytes), "l"(uint64_t(hint))
               : "memory");
}
__device__ __forceinline__ void bulk_copy_s2g(float* dst, const float* src, uint32_t bytes, L2Hint hint) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes), "l"(uint64_t(hint))
               : "memory");
}
// Global -> shared, completing `bytes` transaction bytes on the mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar, L2Hint hint) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(uint64_t(hint))
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

// Two fp32 values -> one register holding two 16-bit values of Element (round to nearest even). Element is
// the CuTe type (cute::bfloat16_t / cute::half_t) or the CUDA one (__nv_bfloat16 / __half).
template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<Element, cute::bfloat16_t> || std::is_same_v<Element, __nv_bfloat16>) {
    __nv_bfloat162 const v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t const*>(&v);
  } else {
    static_assert(std::is_same_v<Element, cute::half_t> || std::is_same_v<Element, __half>, "bf16 or fp16");
    __half2 const v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t const*>(&v);
  }
}

}  // namespace dash::hopper
