// SPDX-License-Identifier: Apache-2.0
// dash/cost_model.hpp — what the simulator charges for each step of a plan: a visit's compute, a dQ reduce, the
// latency of an ordered hand-off, per-segment overheads. The H200 constants live in src/core/cost_model.cpp with
// their sources; docs/calibration.md compares the model's ranking with measurements.
#pragma once

#include <string>

#include "dash/geometry.hpp"

namespace dash {

// Times in microseconds (any unit works; the closed-form tests use c = 1, r = 0.25).
struct CostModel {
  double compute_full = 1.0;     // one visit of an unmasked block
  double compute_partial = 1.0;  // one visit of a partly masked block (masking skips work: often < full)
  double reduce = 0.25;          // one dQ tile reduce-add into the fp32 accumulator
  double signal_latency = 0.0;   // from a release until the next-ranked waiter sees it
  double segment_overhead = 0.0; // per segment: load K/V, write dK/dV
  double dkv_reduce = 0.0;       // per segment in SPLIT_HEADS mode with group_size > 1: ordered dK/dV add
  // false: the CTA does compute then reduce, one after the other (the DASH paper's model).
  // true:  a store warp reduces while the MMA warps compute the next visit, with one staging buffer
  //        (FA3's layout): a visit's partial is handed off only once the previous reduce has finished.
  bool overlap_reduce = false;
  // Overlap mode only. false (the kernels' behaviour): a CTA claims its next ticket once the last wait of
  // its item is satisfied. true: plans with DASH_PLAN_WAITS_ONLY_BACKWARD may claim as soon as the item's
  // computes are done — allowed by docs/DEADLOCK.md, but a CTA whose store warp still waits then holds a
  // ticket another CTA could start, and delays convoy across heads (ascending causal: several-fold).
  bool claim_ahead = false;

  // H200 estimate for a problem's tile shape (src/core/cost_model.cpp: each constant and its source).
  static CostModel for_problem(const Problem& problem, TileShape tiles);
  // The DASH paper's abstract model: c, r, no latency, blocking reduce.
  static CostModel paper(double c, double r);
  std::string describe() const;
};

} // namespace dash
