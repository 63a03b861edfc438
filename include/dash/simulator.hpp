// SPDX-License-Identifier: Apache-2.0
// dash/simulator.hpp — event simulation of a plan on P co-resident CTAs under a cost model: makespan,
// per-CTA busy / waiting / idle time, and the critical path. It executes the same model the kernels and the
// validator use (docs/DEADLOCK.md): CTAs claim tickets in order from a global counter; a visit computes,
// then waits until its dQ accumulator's counter equals its rank, reduce-adds, and releases.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dash/plan.hpp"

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

  // Uncalibrated H200 estimate for a problem's tile shape (see cost_model notes in simulator.cpp).
  static CostModel for_problem(const Problem& problem, TileShape tiles);
  // The DASH paper's abstract model: c, r, no latency, blocking reduce.
  static CostModel paper(double c, double r);
  std::string describe() const;
};

enum class SpanKind : uint8_t { Compute, Reduce, Wait, Overhead };

struct Span {
  int32_t cta;
  SpanKind kind;
  double start;
  double end;
  int64_t ticket; // item's global ticket
  int32_t visit;  // index within the unit's visit table, -1 for overhead
};

struct CriticalStep {
  int64_t ticket;
  int32_t visit;
  SpanKind kind;
  double start, end;
};

struct SimResult {
  bool deadlocked = false;       // some CTA waited forever (only for plans the validator would reject)
  std::string deadlock_detail;
  double makespan = 0;
  double total_compute = 0, total_reduce = 0, total_wait = 0, total_overhead = 0;
  std::vector<double> cta_busy;  // compute + reduce + overhead per CTA
  std::vector<double> cta_wait;  // blocked on a turn per CTA
  double idle_fraction = 0;      // 1 - sum(busy) / (P * makespan): waiting plus tail idleness
  double wait_fraction = 0;      // sum(wait) / (P * makespan)
  std::vector<CriticalStep> critical_path; // from time 0 to the makespan, in time order
  std::vector<Span> spans;       // filled when record_spans (Gantt charts)
};

struct SimOptions {
  bool record_spans = false;
};

// Simulates the whole problem (all units) on `num_ctas` CTAs.
SimResult simulate(const Plan& plan, int32_t num_ctas, const CostModel& cost, const SimOptions& options = {});

// SVG Gantt chart: one row per CTA (the first max_ctas), compute / reduce / wait / overhead spans.
std::string gantt_svg(const Plan& plan, const SimResult& result, int32_t max_ctas = 64,
                      const std::string& title = "");

} // namespace dash
