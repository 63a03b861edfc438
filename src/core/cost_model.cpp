// SPDX-License-Identifier: Apache-2.0
// cost_model.cpp — the simulator's cost models (dash/cost_model.hpp): the DASH paper's abstract one and the H200
// estimate, whose constants are listed here with their sources.
#include "dash/cost_model.hpp"

#include <cstdio>

namespace dash {

CostModel CostModel::paper(double c, double r) {
  CostModel m;
  m.compute_full = c;
  m.compute_partial = c;
  m.reduce = r;
  m.signal_latency = 0;
  m.segment_overhead = 0;
  m.dkv_reduce = 0;
  m.overlap_reduce = false;
  return m;
}

// UNCALIBRATED H200 estimate, in microseconds. Every number below is either a measured ceiling from
// shared/docs/h200-anchors.md / h200-platform-notes.md (outside the repo) or a stated assumption; calibrate the whole
// model against GPU measurements of the backward kernel before trusting absolute times. It is meant to rank
// schedules (where the ratio of compute to reduce and the signal latency matter), not to predict runtimes.
CostModel CostModel::for_problem(const Problem& problem, TileShape tiles) {
  // Measured: bf16 8192^3 matmul on our H200, 777 TFLOP/s over 132 SMs (shared/docs/h200-anchors.md).
  constexpr double kMeasuredMatmulFlopsPerUs = 777e12 / 1e6;
  constexpr double kSms = 132;
  // Measured: the fraction of that ceiling the default backward kernel (TMA + wgmma, bulk dQ hand-off) reaches,
  // non-deterministic, 8k-16k tokens (bench/results/backward-2026-11-29-run9-full-2b81935.jsonl): ~470 TFLOP/s
  // at head dim 64, ~540-560 at 128.
  const double backward_efficiency = problem.head_dim <= 64 ? 0.60 : 0.71;
  // Assumed: a masked (partial) block skips about 40% of the work of a full one.
  constexpr double kPartialComputeFraction = 0.6;
  // Assumed: per-SM bandwidth for L2 reduce-adds and tile loads/stores, ~60 GB/s per SM (~8 TB/s chip-wide:
  // above the 4.2 TB/s HBM copy ceiling because the dQ accumulator and K/V tiles are mostly L2-resident).
  constexpr double kPerSmBytesPerUs = 60e9 / 1e6;
  // Fitted: one ordered cross-CTA hand-off (wait for the turn, the bulk reduce-add, its completion, release,
  // the waiter's detection) on top of the reduce term. On that run, 2.5 us makes the simulator's first choice
  // (and auto's) within 1% of the measured-fastest planner in 23 of 26 configurations (1.0-2.0 us: 22, 3.0:
  // 21, 4.0: 18; scripts/calibration_ranking.py, docs/calibration.md). It was 3.0 us with the per-lane
  // reductions the store warps issued before the bulk hand-off.
  constexpr double kSignalLatencyUs = 2.5;
  constexpr double kBf16Bytes = 2, kFp32Bytes = 4;

  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(problem.head_dim);
  // d: of q and k (S = Q K^T, dQ, dK); dv: of v, dO and dV (dP = dO V^T, dV); equal but for MLA-style 192 / 128.
  const double bm = tiles.block_m, bn = tiles.block_n, d = problem.head_dim, dv = problem.value_head_dim();
  const double per_sm_flops_per_us = kMeasuredMatmulFlopsPerUs / kSms * backward_efficiency;

  CostModel m;
  // Backward of one block = 2.5x the forward's 2*bm*bn*(d + dv) FLOPs (S, dP, dV, dK, dQ GEMMs).
  m.compute_full = 2.5 * 2 * bm * bn * (d + dv) / per_sm_flops_per_us;
  m.compute_partial = kPartialComputeFraction * m.compute_full;
  // One dQ tile reduce-add: bm x d fp32 values into the L2-resident accumulator.
  m.reduce = bm * d * kFp32Bytes / kPerSmBytesPerUs;
  m.signal_latency = kSignalLatencyUs;
  // Per KV tile: load K and V (bf16) and write dK and dV (bf16).
  m.segment_overhead = 2 * bn * (d + dv) * kBf16Bytes / kPerSmBytesPerUs;
  // SPLIT_HEADS GQA: ordered fp32 add of dK and dV into the group's accumulators (used only in that mode).
  m.dkv_reduce = problem.group_size() > 1 ? bn * (d + dv) * kFp32Bytes / kPerSmBytesPerUs : 0.0;
  m.overlap_reduce = true; // FA3-style store warp with one staging buffer
  return m;
}

std::string CostModel::describe() const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "compute %.4g (partial %.4g), dQ reduce %.4g, signal latency %.4g, segment overhead %.4g, "
                "dK/dV add %.4g, %s%s",
                compute_full, compute_partial, reduce, signal_latency, segment_overhead, dkv_reduce,
                overlap_reduce ? "reduce overlapped with compute (one staging buffer)" : "blocking reduce",
                overlap_reduce && claim_ahead ? ", claim-ahead" : "");
  return buf;
}

} // namespace dash
