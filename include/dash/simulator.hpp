// SPDX-License-Identifier: Apache-2.0
// dash/simulator.hpp — event simulation of a plan on P co-resident CTAs under a cost model: makespan,
// per-CTA busy / waiting / idle time, and the critical path. It executes the same model the kernels and the
// validator use (docs/DEADLOCK.md): CTAs claim tickets in order from a global counter; a visit computes,
// then waits until its dQ accumulator's counter equals its rank, reduce-adds, and releases (the deterministic
// backward; SimOptions::nondeterministic models the unordered one, whose adds wait for nothing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dash/cost_model.hpp"
#include "dash/plan.hpp"

namespace dash {

// Reduce with visit == -1 is a segment's ordered dK/dV add (SPLIT_HEADS GQA). Wait spans are time a CTA is
// held up by an order: in blocking mode, compute end -> reduce start, and dK/dV turns; in overlap mode, the
// compute stream stalled by the staging buffer, a dK/dV turn or the claim rule (the store warp's own waits
// for a turn are not spans: they cost nothing until the buffer is needed).
enum class SpanKind : uint8_t { Compute, Reduce, Wait, Overhead };

struct Span {
  int32_t cta;
  SpanKind kind;
  double start;
  double end;
  int64_t ticket; // item's global ticket
  int32_t visit;  // index within the unit's visit table; -1 for overheads, dK/dV adds and claim waits
};

struct CriticalStep {
  int64_t ticket;
  int32_t visit;
  SpanKind kind;
  double start, end;
  int32_t cta = -1;          // the CTA that ran it
  bool after_signal = false; // starts at the previous step's end + signal_latency (a release it waited for);
                             // otherwise at the previous step's end exactly (or at 0 for the first step)
};

struct SimResult {
  bool deadlocked = false;       // some CTA waited forever (only for plans the validator would reject)
  std::string deadlock_detail;
  double makespan = 0;
  double total_compute = 0, total_reduce = 0, total_wait = 0, total_overhead = 0; // reduce: dQ + dK/dV adds
  // Blocking mode: compute + reduce + overhead (+ dK/dV adds) per CTA. Overlap mode: the compute stream's
  // work only (compute + overhead + dK/dV adds, which run on it); dQ reduces run on the store warp
  // concurrently and are counted in cta_reduce, so idle_fraction is then the compute stream's idleness.
  std::vector<double> cta_busy;
  std::vector<double> cta_wait;   // blocked on an order per CTA (the Wait spans' total; see SpanKind)
  std::vector<double> cta_reduce; // dQ reduces + dK/dV adds per CTA (both modes)
  double idle_fraction = 0;      // 1 - sum(busy) / (P * makespan): waiting plus tail idleness
  double wait_fraction = 0;      // sum(wait) / (P * makespan)
  std::vector<CriticalStep> critical_path; // from time 0 to the makespan, in time order
  std::vector<Span> spans;       // filled when record_spans (Gantt charts)
};

struct SimOptions {
  bool record_spans = false;
  bool critical_path = true; // false saves the per-span memory when only the makespan is wanted
  // The non-deterministic backward: dQ partials (and split-heads dK/dV) are added in whatever order they come
  // (atomics), so no add waits for a turn. A plan with DASH_PLAN_NONDETERMINISTIC_ONLY runs only so, and is
  // simulated so whatever this says; one with DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED never does.
  bool nondeterministic = false;
};

// Simulates the whole problem (all units) on `num_ctas` CTAs.
SimResult simulate(const Plan& plan, int32_t num_ctas, const CostModel& cost, const SimOptions& options = {});

// SVG Gantt chart: one lane per CTA (every CTA, or the first max_ctas), compute / reduce / wait / overhead
// spans coloured by head and batch, and the critical path (src/core/gantt_svg.cpp says how it stays legible).
std::string gantt_svg(const Plan& plan, const SimResult& result, int32_t max_ctas = INT32_MAX,
                      const std::string& title = "");

} // namespace dash
