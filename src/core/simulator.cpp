// SPDX-License-Identifier: Apache-2.0
// simulator.cpp — exact, deterministic discrete-event simulation of a backward plan on P CTAs under a cost
// model (dash/simulator.hpp), and the cost models it runs under. The execution model is docs/DEADLOCK.md's:
// CTAs claim tickets from a global counter; a visit computes, waits for its dQ accumulator's turn,
// reduce-adds and releases; in SPLIT_HEADS GQA the query heads of a group add dK/dV in group-rank order. A
// non-deterministic run (SimOptions::nondeterministic) keeps the streams and costs but adds in any order.
//
// How the model maps onto the code. Each CTA has two streams:
//   - the compute stream (MMA warps): claims, segment overheads, computes, ordered dK/dV adds;
//   - the store stream (one staging buffer): holds at most one handed-off partial, waits for its turn,
//     reduces it into the dQ accumulator and releases the accumulator's counter.
// A computed partial is handed off when the buffer is empty. In blocking mode (the paper's model) the
// compute stream then waits for that reduce to finish; in overlap mode (FA3's store warp) it goes on with the
// next visit, so a reduce overlaps the next compute unless the buffer is still occupied.
//
// Every time the simulation computes is an Instant: the time plus the span whose end determined it (and
// whether a signal latency lies in between). That is all the critical path needs: backtrack from the span
// that ends last through the spans that fixed each start.
#include "dash/simulator.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

namespace dash {
namespace {

constexpr int64_t kNoSpan = -1;

// A point in simulated time and the span whose end fixed it.
struct Instant {
  double time = 0;
  int64_t cause = kNoSpan;   // kNoSpan: time 0, nothing before it
  bool after_signal = false; // time = cause's end + signal latency (a release seen by the next waiter)
};

// The later of two instants. On a tie the first wins: callers pass the stream's own predecessor first, so
// the critical path prefers "the CTA was busy" over "the CTA was waiting" when both explain a start.
Instant later(const Instant& own, const Instant& other) { return other.time > own.time ? other : own; }

// One ordered accumulation (a dQ tile, or a KV tile's dK/dV across a GQA group): contributions of rank
// 0, 1, 2, ... add one after another.
struct OrderedCounter {
  uint32_t next_rank = 0;
  Instant released; // end of the last add
};

struct Turn {
  enum Kind { Ready, Later, Blocked } kind = Blocked;
  Instant ready; // Ready: when the turn came; Later: when it will come
};

Turn check_turn(const OrderedCounter& counter, uint32_t rank, double now, double latency) {
  if (counter.next_rank != rank) return {Turn::Blocked, {}};
  if (rank == 0) return {Turn::Ready, Instant{}}; // the first contribution waits for nobody
  const Instant seen{counter.released.time + latency, counter.released.cause, true};
  return {seen.time > now ? Turn::Later : Turn::Ready, seen};
}

enum class ComputeState : uint8_t {
  NeedTicket, // between items: claim the next ticket (possibly gated by the claim rule)
  Busy,       // running an overhead, a compute or an ordered dK/dV add until busy_end
  Holding,    // holds a computed partial until the staging buffer is free
  Draining,   // blocking mode: waits until its handed-off partial has been reduced
  DkvWaiting, // end of segment: waits for the previous group rank's dK/dV add
  Finished    // no tickets left
};

enum class BufferState : uint8_t { Empty, WaitingTurn, Reducing };

struct InternalSpan {
  double start, end;
  int64_t ticket;
  int64_t cause;
  int32_t visit;
  int32_t cta;
  SpanKind kind;
  bool after_signal;
};

struct CtaState {
  // Compute stream.
  ComputeState state = ComputeState::NeedTicket;
  Instant ready; // when the compute stream finished its last step
  SpanKind busy_kind = SpanKind::Compute;
  double busy_end = 0;
  int64_t busy_span = kNoSpan;
  int32_t busy_visit = -1;
  int64_t ticket = -1;
  int32_t unit = 0, item = 0;
  int32_t segment_pos = 0; // within the item
  int32_t segment = 0;     // index into the template's segment table
  int32_t visit_pos = 0;   // within the segment
  Instant last_wait_satisfied; // claim rule: when the latest wait of this CTA was satisfied

  // Store stream: the single staging buffer.
  BufferState buffer = BufferState::Empty;
  Instant buffer_free; // end of the last reduce
  int64_t pending_ticket = -1;
  int32_t pending_visit = -1;
  size_t pending_accumulator = 0;
  uint32_t pending_rank = 0;
  Instant handoff;
  double reduce_end = 0;
  int64_t reduce_span = kNoSpan;

  // Accounting.
  double busy = 0, wait = 0, reduce = 0;
};

class Simulation {
 public:
  Simulation(const Plan& plan, int32_t num_ctas, const CostModel& cost, const SimOptions& options)
      : plan_(plan), h_(plan.header), cost_(cost), options_(options), ctas_(size_t(num_ctas)) {
    check_tables();
    total_tickets_ = int64_t(h_.num_units) * h_.items_per_unit;
    overlap_ = cost.overlap_reduce;
    claim_ahead_ = cost.claim_ahead && (h_.flags & DASH_PLAN_WAITS_ONLY_BACKWARD) != 0;
    ordered_dkv_ = dash_plan_splits_dkv(&h_) && cost.dkv_reduce > 0;
    // A non-deterministic run takes the ordered adds where the plan says so (as dash_bwd does).
    unordered_ = (options.nondeterministic && !(h_.flags & DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED)) ||
                 (h_.flags & DASH_PLAN_NONDETERMINISTIC_ONLY) != 0;
    keep_spans_ = options.record_spans || options.critical_path;
    dq_.resize(size_t(h_.num_units) * h_.heads_per_unit * h_.num_q_tiles);
    if (ordered_dkv_) dkv_.resize(size_t(h_.num_units / h_.group_size) * h_.num_kv_tiles);
  }

  SimResult run() {
    for (int32_t c = 0; c < int32_t(ctas_.size()); ++c) events_.insert({0.0, c});
    while (!events_.empty()) {
      const auto [now, cta] = *events_.begin();
      events_.erase(events_.begin());
      advance(cta, now);
    }
    return result();
  }

 private:
  // ---- table checks: the simulator must never read out of bounds, whatever plan it is given ----
  void check_tables() const {
    auto fail = [](const std::string& what) { throw Error("plan", what); };
    if (h_.num_units < 0 || h_.items_per_unit < 0) fail("negative unit or item count");
    if (size_t(h_.items_per_unit) != plan_.items.size()) fail("items_per_unit does not match the item table");
    if (h_.heads_per_unit < 1 || h_.num_q_tiles < 0 || h_.num_kv_tiles < 0) fail("bad tile or head counts");
    if (dash_plan_splits_dkv(&h_) &&
        (h_.problem.heads_q % h_.group_size != 0 || h_.num_units % h_.group_size != 0))
      fail("units do not split into GQA groups");
    for (const dash_item& item : plan_.items)
      if (item.first_segment < 0 || item.num_segments < 0 ||
          int64_t(item.first_segment) + item.num_segments > int64_t(plan_.segments.size()))
        fail("an item's segments lie outside the segment table");
    for (const dash_segment& seg : plan_.segments) {
      if (seg.first_visit < 0 || seg.num_visits < 0 ||
          int64_t(seg.first_visit) + seg.num_visits > int64_t(plan_.visits.size()))
        fail("a segment's visits lie outside the visit table");
      if (seg.kv_tile < 0 || seg.kv_tile >= h_.num_kv_tiles) fail("a segment's kv_tile is out of range");
    }
    for (const dash_visit& v : plan_.visits)
      if (v.q_tile >= h_.num_q_tiles || v.head_in_unit >= h_.heads_per_unit)
        fail("a visit's q_tile or head_in_unit is out of range");
  }

  // ---- index helpers ----
  size_t dq_index(int32_t unit, const dash_visit& v) const {
    return (size_t(unit) * h_.heads_per_unit + v.head_in_unit) * h_.num_q_tiles + v.q_tile;
  }
  // Units of one KV-head group are consecutive, in dK/dV rank order (dash/plan_format.h).
  int32_t group_rank(int32_t unit) const {
    return dash_unit_coords_of(&h_, plan_.group_head_by_rank.data(), unit).group_rank;
  }
  size_t dkv_index(int32_t unit, int32_t kv_tile) const {
    return size_t(unit / h_.group_size) * h_.num_kv_tiles + kv_tile;
  }
  static uint64_t waiter_key(size_t counter, uint32_t rank) { return (uint64_t(counter) << 16) | rank; }

  // Whether the contribution of `rank` to `counter` may be added at `now`. Unordered (non-deterministic) adds
  // are atomics: ready at once, whatever the rank (time 0, so that `later` keeps the caller's own instant).
  Turn turn_of(const OrderedCounter& counter, uint32_t rank, double now) const {
    if (unordered_) return {Turn::Ready, Instant{}};
    return check_turn(counter, rank, now, cost_.signal_latency);
  }

  // ---- spans and events ----
  int64_t record(int32_t cta, SpanKind kind, const Instant& start, double end, int64_t ticket, int32_t visit) {
    if (kind != SpanKind::Wait) makespan_ = std::max(makespan_, end);
    if (!keep_spans_) return kNoSpan;
    spans_.push_back({start.time, end, ticket, start.cause, visit, cta, kind, start.after_signal});
    return int64_t(spans_.size()) - 1;
  }

  void add_wait(int32_t c, double from, double to, int64_t ticket, int32_t visit) {
    if (to <= from) return;
    ctas_[c].wait += to - from;
    if (options_.record_spans) record(c, SpanKind::Wait, Instant{from}, to, ticket, visit);
  }

  void wake(int32_t cta, double time) { events_.insert({time, cta}); }

  // A release of `rank` lets the waiter of rank + 1 (if one has registered) go on after the signal latency.
  void notify(std::unordered_map<uint64_t, int32_t>& waiters, size_t counter, uint32_t rank, double end) {
    const auto it = waiters.find(waiter_key(counter, rank + 1));
    if (it == waiters.end()) return;
    wake(it->second, end + cost_.signal_latency);
    waiters.erase(it);
  }

  // ---- one CTA at one instant: progress both streams as far as they can go, then arrange a wake-up ----
  void advance(int32_t c, double now) {
    for (bool progressed = true; progressed;) {
      progressed = step_store(c, now);
      progressed = step_compute(c, now) || progressed;
    }
    schedule_wakeups(c, now);
  }

  bool step_store(int32_t c, double now) {
    CtaState& cta = ctas_[c];
    switch (cta.buffer) {
      case BufferState::Empty: return false;
      case BufferState::WaitingTurn: {
        const Turn turn = turn_of(dq_[cta.pending_accumulator], cta.pending_rank, now);
        if (turn.kind != Turn::Ready) return false;
        const Instant start = later(cta.handoff, turn.ready);
        // Blocking mode: the CTA sits idle from its compute's end until its turn. In overlap mode the
        // store warp's wait costs nothing by itself; it shows up as a compute stall when the buffer is needed.
        if (!overlap_) add_wait(c, cta.handoff.time, start.time, cta.pending_ticket, cta.pending_visit);
        cta.last_wait_satisfied = start;
        cta.reduce_end = start.time + cost_.reduce;
        cta.reduce_span =
            record(c, SpanKind::Reduce, start, cta.reduce_end, cta.pending_ticket, cta.pending_visit);
        cta.reduce += cost_.reduce;
        total_reduce_ += cost_.reduce;
        if (!overlap_) cta.busy += cost_.reduce;
        cta.buffer = BufferState::Reducing;
        return true;
      }
      case BufferState::Reducing: {
        if (cta.reduce_end > now) return false;
        OrderedCounter& counter = dq_[cta.pending_accumulator];
        counter.next_rank = cta.pending_rank + 1;
        counter.released = Instant{cta.reduce_end, cta.reduce_span};
        notify(dq_waiters_, cta.pending_accumulator, cta.pending_rank, cta.reduce_end);
        cta.buffer_free = Instant{cta.reduce_end, cta.reduce_span};
        cta.buffer = BufferState::Empty;
        return true;
      }
    }
    return false;
  }

  bool step_compute(int32_t c, double now) {
    CtaState& cta = ctas_[c];
    switch (cta.state) {
      case ComputeState::NeedTicket: return try_claim(c);
      case ComputeState::Busy:
        if (cta.busy_end > now) return false;
        finish_busy(c);
        return true;
      case ComputeState::Holding:
        if (cta.buffer != BufferState::Empty) return false;
        hand_off(c);
        return true;
      case ComputeState::Draining:
        if (cta.buffer != BufferState::Empty) return false;
        cta.ready = cta.buffer_free;
        ++cta.visit_pos;
        start_visit(c);
        return true;
      case ComputeState::DkvWaiting: return try_start_dkv(c, now);
      case ComputeState::Finished: return false;
    }
    return false;
  }

  // Claim rule (docs/DEADLOCK.md): without WAITS_ONLY_BACKWARD a CTA claims only once every wait of its
  // current item has been satisfied. In blocking mode that is automatic (the item is done); in overlap
  // mode the last reduce may still be waiting for its turn on the store stream.
  bool try_claim(int32_t c) {
    CtaState& cta = ctas_[c];
    if (next_ticket_ >= total_tickets_) {
      cta.state = ComputeState::Finished;
      return true;
    }
    const bool gated = overlap_ && !claim_ahead_;
    if (gated && cta.buffer == BufferState::WaitingTurn) return false;
    const Instant claim = gated ? later(cta.ready, cta.last_wait_satisfied) : cta.ready;
    add_wait(c, cta.ready.time, claim.time, cta.ticket, -1);
    cta.ticket = next_ticket_++;
    const dash_ticket_place place = place_of(cta.ticket);
    cta.unit = place.unit;
    cta.item = place.item;
    cta.segment_pos = 0;
    cta.ready = claim;
    enter_segment(c);
    return true;
  }

  void enter_segment(int32_t c) {
    CtaState& cta = ctas_[c];
    const dash_item& item = plan_.items[cta.item];
    if (cta.segment_pos >= item.num_segments) {
      cta.state = ComputeState::NeedTicket;
      return;
    }
    cta.segment = item.first_segment + cta.segment_pos;
    cta.visit_pos = 0;
    if (cost_.segment_overhead > 0)
      start_busy(c, SpanKind::Overhead, cost_.segment_overhead, -1);
    else
      start_visit(c);
  }

  void start_visit(int32_t c) {
    CtaState& cta = ctas_[c];
    const dash_segment& seg = plan_.segments[cta.segment];
    if (cta.visit_pos >= seg.num_visits) {
      end_segment(c);
      return;
    }
    const int32_t visit = seg.first_visit + cta.visit_pos;
    const bool partial = (plan_.visits[visit].flags & DASH_VISIT_PARTIAL_MASK) != 0;
    start_busy(c, SpanKind::Compute, partial ? cost_.compute_partial : cost_.compute_full, visit);
  }

  void end_segment(int32_t c) {
    CtaState& cta = ctas_[c];
    if (ordered_dkv_) {
      cta.state = ComputeState::DkvWaiting;
      return;
    }
    ++cta.segment_pos;
    enter_segment(c);
  }

  // Compute-stream work: an overhead, a compute, or (kind Reduce, visit -1) the ordered dK/dV add.
  void start_busy(int32_t c, SpanKind kind, double duration, int32_t visit) {
    CtaState& cta = ctas_[c];
    cta.state = ComputeState::Busy;
    cta.busy_kind = kind;
    cta.busy_visit = visit;
    cta.busy_end = cta.ready.time + duration;
    cta.busy_span = record(c, kind, cta.ready, cta.busy_end, cta.ticket, visit);
    cta.busy += duration;
    if (kind == SpanKind::Compute) total_compute_ += duration;
    if (kind == SpanKind::Overhead) total_overhead_ += duration;
    if (kind == SpanKind::Reduce) {
      total_reduce_ += duration;
      cta.reduce += duration;
    }
  }

  void finish_busy(int32_t c) {
    CtaState& cta = ctas_[c];
    cta.ready = Instant{cta.busy_end, cta.busy_span};
    switch (cta.busy_kind) {
      case SpanKind::Overhead: start_visit(c); break;
      case SpanKind::Compute: cta.state = ComputeState::Holding; break;
      case SpanKind::Reduce: { // the ordered dK/dV add: release the group's counter for this KV tile
        const int32_t kv_tile = plan_.segments[cta.segment].kv_tile;
        const size_t index = dkv_index(cta.unit, kv_tile);
        const uint32_t rank = uint32_t(group_rank(cta.unit));
        dkv_[index].next_rank = rank + 1;
        dkv_[index].released = Instant{cta.busy_end, cta.busy_span};
        notify(dkv_waiters_, index, rank, cta.busy_end);
        ++cta.segment_pos;
        enter_segment(c);
        break;
      }
      case SpanKind::Wait: break; // never a compute-stream busy kind
    }
  }

  // The buffer is empty: the partial moves to the store stream.
  void hand_off(int32_t c) {
    CtaState& cta = ctas_[c];
    const int32_t visit = plan_.segments[cta.segment].first_visit + cta.visit_pos;
    const dash_visit& v = plan_.visits[visit];
    const Instant handoff = later(cta.ready, cta.buffer_free);
    add_wait(c, cta.ready.time, handoff.time, cta.ticket, visit); // overlap mode: stalled by the buffer
    cta.pending_ticket = cta.ticket;
    cta.pending_visit = visit;
    cta.pending_accumulator = dq_index(cta.unit, v);
    cta.pending_rank = v.dq_rank;
    cta.handoff = handoff;
    cta.buffer = BufferState::WaitingTurn;
    if (overlap_) {
      cta.ready = handoff;
      ++cta.visit_pos;
      start_visit(c);
    } else {
      cta.state = ComputeState::Draining;
    }
  }

  bool try_start_dkv(int32_t c, double now) {
    CtaState& cta = ctas_[c];
    const int32_t kv_tile = plan_.segments[cta.segment].kv_tile;
    const Turn turn = turn_of(dkv_[dkv_index(cta.unit, kv_tile)], uint32_t(group_rank(cta.unit)), now);
    if (turn.kind != Turn::Ready) return false;
    const Instant start = later(cta.ready, turn.ready);
    add_wait(c, cta.ready.time, start.time, cta.ticket, -1);
    cta.last_wait_satisfied = later(cta.last_wait_satisfied, start);
    cta.ready = start;
    start_busy(c, SpanKind::Reduce, cost_.dkv_reduce, -1);
    return true;
  }

  // Nothing more can happen at `now`: wake the CTA when a running span ends or a seen release matures;
  // register it as the waiter of a release that has not happened yet.
  void schedule_wakeups(int32_t c, double now) {
    const CtaState& cta = ctas_[c];
    if (cta.state == ComputeState::Busy) wake(c, cta.busy_end);
    if (cta.buffer == BufferState::Reducing) wake(c, cta.reduce_end);
    if (cta.buffer == BufferState::WaitingTurn) {
      const Turn turn = turn_of(dq_[cta.pending_accumulator], cta.pending_rank, now);
      if (turn.kind == Turn::Later) wake(c, turn.ready.time);
      if (turn.kind == Turn::Blocked) dq_waiters_[waiter_key(cta.pending_accumulator, cta.pending_rank)] = c;
    }
    if (cta.state == ComputeState::DkvWaiting) {
      const size_t index = dkv_index(cta.unit, plan_.segments[cta.segment].kv_tile);
      const uint32_t rank = uint32_t(group_rank(cta.unit));
      const Turn turn = turn_of(dkv_[index], rank, now);
      if (turn.kind == Turn::Later) wake(c, turn.ready.time);
      if (turn.kind == Turn::Blocked) dkv_waiters_[waiter_key(index, rank)] = c;
    }
  }

  // ---- results ----
  // The ticket whose item holds the visit of `rank` into the dQ accumulator (unit, head, q_tile), or -1.
  int64_t ticket_holding_rank(int32_t unit, const dash_visit& like, uint32_t rank) const {
    for (int32_t i = 0; i < int32_t(plan_.items.size()); ++i) {
      const dash_item& item = plan_.items[i];
      for (int32_t s = item.first_segment; s < item.first_segment + item.num_segments; ++s) {
        const dash_segment& seg = plan_.segments[s];
        for (int32_t v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v) {
          const dash_visit& other = plan_.visits[v];
          if (other.q_tile == like.q_tile && other.head_in_unit == like.head_in_unit && other.dq_rank == rank)
            return dash_ticket_of(h_.flags, h_.ticket_group_units, h_.items_per_slot, h_.num_units, h_.items_per_unit,
                                  unit, i);
        }
      }
    }
    return -1;
  }

  std::string who_holds(int64_t ticket) const {
    if (ticket < 0) return "no visit of the plan has that rank";
    for (int32_t c = 0; c < int32_t(ctas_.size()); ++c)
      if (ctas_[c].ticket == ticket || ctas_[c].pending_ticket == ticket)
        return "ticket " + std::to_string(ticket) + ", held by CTA " + std::to_string(c);
    if (ticket >= next_ticket_) return "ticket " + std::to_string(ticket) + ", never claimed (no CTA free)";
    return "ticket " + std::to_string(ticket);
  }

  std::string describe_stuck(int32_t c) const {
    const CtaState& cta = ctas_[c];
    std::ostringstream out;
    out << "CTA " << c << ": ";
    if (cta.buffer == BufferState::WaitingTurn) {
      const dash_visit& v = plan_.visits[cta.pending_visit];
      const auto [unit, item] = place_of(cta.pending_ticket);
      const uint32_t at = dq_[cta.pending_accumulator].next_rank;
      out << "ticket " << cta.pending_ticket << " (unit " << unit << ", item " << item
          << ") visit " << cta.pending_visit << " waits for dQ accumulator (unit " << unit << ", head " << int(v.head_in_unit) << ", q_tile "
          << v.q_tile << ") to reach rank " << cta.pending_rank << "; it is at rank " << at
          << ", whose visit is in " << who_holds(ticket_holding_rank(unit, v, at));
      if (cta.state == ComputeState::Holding) out << "; its compute stream holds the next partial";
    } else if (cta.state == ComputeState::DkvWaiting) {
      const int32_t kv_tile = plan_.segments[cta.segment].kv_tile;
      out << "ticket " << cta.ticket << " (unit " << cta.unit << ") waits at the end of KV tile " << kv_tile
          << " for the dK/dV add of group rank " << group_rank(cta.unit) - 1 << "; the counter is at "
          << dkv_[dkv_index(cta.unit, kv_tile)].next_rank;
    } else {
      out << "stopped in an unexpected state";
    }
    return out.str();
  }

  std::vector<CriticalStep> critical_path() const {
    std::vector<CriticalStep> path;
    int64_t last = kNoSpan;
    for (int64_t i = 0; i < int64_t(spans_.size()); ++i)
      if (spans_[i].kind != SpanKind::Wait && (last == kNoSpan || spans_[i].end > spans_[last].end)) last = i;
    for (int64_t i = last; i != kNoSpan; i = spans_[i].cause) {
      const InternalSpan& s = spans_[i];
      path.push_back({s.ticket, s.visit, s.kind, s.start, s.end, s.cta, s.after_signal});
    }
    std::reverse(path.begin(), path.end());
    return path;
  }

  SimResult result() const {
    SimResult r;
    const int32_t p = int32_t(ctas_.size());
    r.makespan = makespan_;
    r.total_compute = total_compute_;
    r.total_reduce = total_reduce_;
    r.total_overhead = total_overhead_;
    double busy = 0;
    for (const CtaState& cta : ctas_) {
      r.cta_busy.push_back(cta.busy);
      r.cta_wait.push_back(cta.wait);
      r.cta_reduce.push_back(cta.reduce);
      r.total_wait += cta.wait;
      busy += cta.busy;
    }
    if (makespan_ > 0) {
      r.idle_fraction = 1.0 - busy / (p * makespan_);
      r.wait_fraction = r.total_wait / (p * makespan_);
    }
    std::ostringstream detail;
    int stuck = 0;
    for (int32_t c = 0; c < p; ++c) {
      const CtaState& cta = ctas_[c];
      if (cta.state == ComputeState::Finished && cta.buffer == BufferState::Empty) continue;
      if (stuck < 8) detail << (stuck ? "\n" : "") << describe_stuck(c);
      ++stuck;
    }
    if (stuck > 0) {
      r.deadlocked = true;
      if (stuck > 8) detail << "\n(" << stuck - 8 << " more CTAs stuck)";
      r.deadlock_detail = "deadlock: " + std::to_string(stuck) + " of " + std::to_string(p) +
                          " CTAs wait forever, " + std::to_string(next_ticket_) + " of " +
                          std::to_string(total_tickets_) + " tickets claimed\n" + detail.str();
    }
    if (options_.critical_path) r.critical_path = critical_path();
    if (options_.record_spans) {
      r.spans.reserve(spans_.size());
      for (const InternalSpan& s : spans_)
        r.spans.push_back({s.cta, s.kind, s.start, s.end, s.ticket, s.visit});
    }
    return r;
  }

  // A ticket's unit and item in the plan's claim order (plan_format.h's one definition).
  dash_ticket_place place_of(int64_t ticket) const {
    return dash_ticket_locate(h_.flags, h_.ticket_group_units, h_.items_per_slot, h_.num_units, h_.items_per_unit,
                              int32_t(ticket));
  }

  const Plan& plan_;
  const dash_plan_header& h_;
  const CostModel cost_;
  const SimOptions options_;
  std::vector<CtaState> ctas_;
  bool overlap_ = false, claim_ahead_ = false, ordered_dkv_ = false, keep_spans_ = true;
  bool unordered_ = false;  // SimOptions::nondeterministic, or a plan that runs only so: no add waits for a turn
  int64_t total_tickets_ = 0, next_ticket_ = 0;
  std::vector<OrderedCounter> dq_, dkv_;
  std::unordered_map<uint64_t, int32_t> dq_waiters_, dkv_waiters_; // (counter, rank) -> waiting CTA
  std::set<std::pair<double, int32_t>> events_; // (time, CTA): ties go to the lower CTA; duplicates merge
  std::vector<InternalSpan> spans_;
  double makespan_ = 0, total_compute_ = 0, total_reduce_ = 0, total_overhead_ = 0;
};

} // namespace

SimResult simulate(const Plan& plan, int32_t num_ctas, const CostModel& cost, const SimOptions& options) {
  if (num_ctas < 1) throw Error("num_ctas", "must be at least 1, got " + std::to_string(num_ctas));
  return Simulation(plan, num_ctas, cost, options).run();
}

} // namespace dash
