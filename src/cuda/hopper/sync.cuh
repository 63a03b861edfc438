// SPDX-License-Identifier: Apache-2.0
// hopper/sync.cuh — synchronisation inside a CTA on sm_90a: named barriers between warpgroups, mbarriers (one set
// of wrappers for every kernel), the stage/phase counter of mbarrier-guarded rings, and the register pool that
// setmaxnreg redistributes. Global-memory ordering and the async proxy are in hopper/ptx.cuh.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "hopper/ptx.cuh"  // smem_addr

namespace dash::hopper {

// setmaxnreg moves registers within the CTA's pool, which is what the launch allocated: the entry's register
// count (the __launch_bounds__ cap, 65536 / threads rounded down to the allocation granule of 8) times the
// threads. setmaxnreg.inc BLOCKS until the pool has the registers, so warpgroup budgets that add up to more
// than this pool hang the kernel at its first instruction (65536 is the SM's file, not the CTA's pool).
constexpr int launch_register_pool(int threads) { return (65536 / threads) / 8 * 8 * threads; }

// bar.sync / bar.arrive on hardware barrier `id` (1..15; 0 is __syncthreads) for `num_threads` threads.
// A sync blocks until `num_threads` threads have arrived (sync or arrive); an arrive does not block. Both are
// .aligned: every lane of a warp must execute them together (callers coming out of a divergent branch
// __syncwarp first).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// Position in a ring of kStages mbarrier-guarded buffers. `phase` flips each time the ring wraps; it is the
// parity a consumer waits for on the "full" barrier of `index`. A producer waits for the opposite parity on
// the "empty" barrier: on a fresh mbarrier the phase before phase 0 counts as completed, so the first
// kStages waits of the producer return at once.
template <int kStages>
struct PipelineState {
  int index = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

// mbarriers in shared memory (uint64_t words). Every wrapper carries a "memory" clobber: the compiler must not
// move the shared-memory writes an arrival publishes (a staged tile, a record) past it, nor the reads a wait
// guards before it.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrive_count) : "memory");
}
// Makes the initialised barriers visible to the other threads and to the TMA unit.
__device__ __forceinline__ void mbarrier_fence_init() { cutlass::arch::fence_barrier_init(); }
// Arrive (release.cta): this thread's prior shared-memory writes are visible to whoever completes a wait on the
// phase this arrival completes.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Arrive and add `bytes` to the phase's expected transaction count (the TMA / bulk copies that complete it).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Wait (acquire.cta) until the phase with this parity has completed. On a fresh mbarrier the phase "before
// phase 0" counts as completed, so waiting for parity 1 returns at once.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n\t"
      ".reg .pred ready;\n\t"
      "MBARRIER_WAIT_RETRY:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 ready, [%0], %1;\n\t"
      "@!ready bra.uni MBARRIER_WAIT_RETRY;\n\t"
      "}" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

}  // namespace dash::hopper
