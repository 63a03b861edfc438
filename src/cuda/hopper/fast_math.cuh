// SPDX-License-Identifier: Apache-2.0
// hopper/fast_math.cuh — the elementwise math of the attention kernels: exp2 on the MUFU unit or the FMA pipe,
// and reductions over the 4 lanes of a quad (the lanes that hold one accumulator row in the wgmma layout).
#pragma once

#include <cstdint>

namespace dash::hopper {

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
  // The integer add above turns a NaN x into a finite float (NaN bits plus NaN bits << 23 is FLT_MAX), which then
  // reached dV as Inf where PyTorch has NaN. 0 * x is 0 for finite x (the sum keeps its bits) and NaN for NaN or
  // +-Inf; -Inf still takes the 0 below, and +Inf gives NaN, as non-finite as MUFU.EX2's +Inf. One FFMA.
  float const propagated = fmaf(0.f, x, __int_as_float(scaled));
  return x < -126.f ? 0.f : propagated;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace dash::hopper
