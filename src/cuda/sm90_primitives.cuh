// SPDX-License-Identifier: Apache-2.0
// sm90_primitives.cuh — the few Hopper synchronisation and math primitives the kernels use directly:
// named barriers between warpgroups, a stage/phase counter for mbarrier pipelines, quad (4-lane) reductions
// and the approximate exp2. Everything else (TMA, wgmma, mbarriers) comes from CuTe / CUTLASS.
#pragma once

#include <cstdint>

#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/barrier.h>

namespace dash::sm90 {

// setmaxnreg moves registers within the CTA's pool, which is what the launch allocated: the entry's register
// count (the __launch_bounds__ cap, 65536 / threads rounded down to the allocation granule of 8) times the
// threads. setmaxnreg.inc BLOCKS until the pool has the registers, so warpgroup budgets that add up to more
// than this pool hang the kernel at its first instruction (65536 is the SM's file, not the CTA's pool).
constexpr int launch_register_pool(int threads) { return (65536 / threads) / 8 * 8 * threads; }

// bar.sync / bar.arrive on hardware barrier `id` (1..15; 0 is __syncthreads) for `num_threads` threads.
// A sync blocks until `num_threads` threads have arrived (sync or arrive); an arrive does not block.
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

// mbarrier helpers over raw uint64_t words in shared memory.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  cutlass::arch::ClusterBarrier::init(bar, arrive_count);
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  cutlass::arch::ClusterBarrier::wait(bar, phase);
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  cutlass::arch::ClusterBarrier::arrive(bar);
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, bytes);
}

// 2^x through the MUFU unit (ex2.approx: ~2 ulp, flushes denormals; exp2(-inf) = 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA and integer pipes, for x <= 0 (x < -126, -inf included, gives exactly 0): x is rounded to
// the nearest integer j by adding 1.5 * 2^23, 2^(x - j) on [-0.5, 0.5] is a degree-4 polynomial (relative
// error < 6e-6, far below bf16 / fp16 rounding of P), and j is added to the result's exponent field. Used
// for a fraction of the scores where MUFU.EX2 is the bottleneck (head dim 64), to split the exponentials
// between the MUFU unit and the FMA pipe.
__device__ __forceinline__ float exp2_polynomial(float x) {
  constexpr float kRoundShift = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  float const shifted = x + kRoundShift;
  float const j = shifted - kRoundShift;
  float const f = x - j;
  float p = fmaf(9.570101276e-03f, f, 5.591785908e-02f);
  p = fmaf(p, f, 2.402474433e-01f);
  p = fmaf(p, f, 6.931217909e-01f);
  p = fmaf(p, f, 9.999992847e-01f);
  // The low 9 bits of the shift constant's pattern are 0, so (bits << 23) is exactly j << 23.
  int const scaled = __float_as_int(p) + (__float_as_int(shifted) << 23);
  return x < -126.f ? 0.f : __int_as_float(scaled);
}

// Reductions over the 4 lanes of a quad: the lanes that hold one accumulator row in the wgmma layout.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace dash::sm90
