// SPDX-License-Identifier: Apache-2.0
// The plan validator. docs/DEADLOCK.md states the execution model and proves that the properties checked
// here make a deadlock impossible; the checks below follow its numbering.
#include <algorithm>
#include <functional>
#include <memory_resource>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <utility>

#include "dash/plan.hpp"
#include "planner_internal.hpp"

namespace dash {

// Threads for large plans (defined in planners.cpp, which says how many and why): the per-visit checks run over
// disjoint parts of the table in parallel. Every part stops at its own first failure, and run_parallel rethrows
// that of the lowest part, so with parts in table order the reason is the one-thread reason.


namespace {

struct Failure {
  std::string reason;
};

// The checks keep their lists in validate_plan's arena (planner_internal.hpp: Memory, List, part_memory).
using detail::List;
using detail::Memory;
using detail::part_memory;

// The parts are taken by value: a loop variable passed by reference would be kept in memory all loop long.
template <typename... Parts>
[[noreturn]] void fail(Parts... parts) {
  std::ostringstream s;
  (s << ... << parts);
  throw Failure{s.str()};
}

// (1) Structure: header fields, table sizes, and items/segments tiling their tables in order, so that an
// item's visits are one contiguous range (the kernel walks them with a single index).
void check_structure(const Plan& plan) {
  const dash_plan_header& h = plan.header;
  if (h.magic != DASH_PLAN_MAGIC) fail("bad magic");
  if (h.version != DASH_PLAN_FORMAT_VERSION) fail("format version ", h.version);
  if (h.block_m < 1 || h.block_n < 1) fail("tile sizes must be positive");
  try {
    Problem::from_c(h.problem).validate();
  } catch (const Error& e) {
    fail("problem: ", e.what());
  }
  const TileGrid grid(Problem::from_c(h.problem), {h.block_m, h.block_n});
  if (h.num_q_tiles != grid.num_q_tiles() || h.num_kv_tiles != grid.num_kv_tiles())
    fail("tile counts do not match the problem and tile sizes");
  if (h.num_q_tiles > DASH_PLAN_MAX_TILES || h.num_kv_tiles > DASH_PLAN_MAX_TILES) fail("more than 65535 tiles");
  const int32_t group = h.problem.heads_q / h.problem.heads_kv;
  if (h.group_size != group) fail("group_size ", h.group_size, " != heads_q / heads_kv = ", group);
  const bool pack = h.gqa_mode == DASH_GQA_PACK_GROUP;
  if (h.gqa_mode != DASH_GQA_PACK_GROUP && h.gqa_mode != DASH_GQA_SPLIT_HEADS) fail("unknown gqa_mode");
  if (h.heads_per_unit != (pack ? group : 1)) fail("heads_per_unit does not match gqa_mode");
  if (h.num_units != h.problem.batch * (pack ? h.problem.heads_kv : h.problem.heads_q))
    fail("num_units does not match batch and heads");
  if (int64_t(plan.items.size()) != h.items_per_unit || int64_t(plan.segments.size()) != h.segments_per_unit ||
      int64_t(plan.visits.size()) != h.visits_per_unit)
    fail("table sizes do not match the header");
  if (int64_t(plan.dq_count.size()) != int64_t(h.heads_per_unit) * h.num_q_tiles) fail("dq_count size");
  if (int64_t(plan.group_head_by_rank.size()) != group) fail("group_head_by_rank size");

  int32_t next_segment = 0, next_visit = 0, max_visits = 0;
  for (int32_t i = 0; i < h.items_per_unit; ++i) {
    const dash_item& item = plan.items[i];
    if (item.first_segment != next_segment || item.num_segments < 1)
      fail("item ", i, " does not continue the segment table (first ", item.first_segment, ", count ",
           item.num_segments, ")");
    next_segment += item.num_segments;
    if (next_segment > h.segments_per_unit) fail("item ", i, " runs past the segment table");
    int32_t visits_in_item = 0;
    for (int32_t s = item.first_segment; s < next_segment; ++s) {
      const dash_segment& seg = plan.segments[s];
      if (seg.first_visit != next_visit || seg.num_visits < 0)
        fail("segment ", s, " does not continue the visit table");
      if (seg.kv_tile < 0 || seg.kv_tile >= h.num_kv_tiles) fail("segment ", s, " has KV tile ", seg.kv_tile);
      next_visit += seg.num_visits;
      visits_in_item += seg.num_visits;
      if (next_visit > h.visits_per_unit) fail("segment ", s, " runs past the visit table");
    }
    max_visits = std::max(max_visits, visits_in_item);
  }
  if (next_segment != h.segments_per_unit) fail("segments not covered by items");
  if (next_visit != h.visits_per_unit) fail("visits not covered by segments");
  if (h.max_visits_per_item != max_visits) fail("max_visits_per_item is ", h.max_visits_per_item, ", not ", max_visits);
  if (h.items_per_slot < 0 || h.items_per_slot == 1 || (h.items_per_slot > 1 && h.items_per_unit % h.items_per_slot))
    fail("items_per_slot ", h.items_per_slot, " is neither 0 nor a divisor > 1 of items_per_unit ", h.items_per_unit);
}

// (1), per visit: Q tile and head in range. Coverage (2) rejects every visit this rejects, so that this runs only when
// coverage has failed, to report a structure failure first as the checks' order says (one pass less over the table).
void check_visit_fields(const Plan& plan) {
  const dash_plan_header& h = plan.header;
  for (int32_t v = 0; v < h.visits_per_unit; ++v) {
    const dash_visit& vis = plan.visits[v];
    if (vis.q_tile >= h.num_q_tiles) fail("visit ", v, " has Q tile ", vis.q_tile);
    if (vis.head_in_unit >= h.heads_per_unit) fail("visit ", v, " has head ", int(vis.head_in_unit));
  }
}

// The Q tiles a KV tile meets, [q_begin, q_end), and those it meets without a masked pair, [full_begin,
// full_end): both intervals (the band's edges are non-decreasing in the row), so each visit's block is checked
// against the geometry in O(1); the few partial tiles at the ends come from the mask's block kinds
// (detail::KvTileGeometry, TileGrid::kind's).
using KvGeometry = detail::KvTileRows;

// (2) Coverage: each segment's visits lie on unmasked blocks of its KV tile (heads in range) with the right
// partial-mask flag, none twice, and as many as the KV tile has blocks; as every KV tile is one segment, that is exact
// coverage, and each accumulator's contributions follow from the geometry. On the way it checks what the FIRST / LAST
// flags need once each accumulator's ranks are 0 .. dq_count - 1 (which (3) proves, whatever the order): every FIRST
// visit has rank 0, every LAST visit rank dq_count - 1, and there are as many of each as accumulators with
// contributions; then exactly the visits of those ranks carry them. And it notes whether every visit carries the rank
// it would have if accumulators took their contributions in claim order: the number of earlier visits on its
// accumulator in the table.
struct Coverage {
  List<int32_t> contributions;        // per accumulator
  bool flags_agree = true;            // given ranks 0 .. dq_count - 1
  bool ranked_in_claim_order = true;  // and flags_agree
};

// What one part of the table says of an accumulator: its visits there, and the rank of the first of them.
// Visits in claim order within the part have ranks first_rank, first_rank + 1, ...; the part's first_rank is the
// claim rank iff it equals the visits of the parts before, which the merge checks.
struct PartTally {
  int32_t last_segment = -1; // the last segment visiting it
  int32_t visits = 0, first_rank = 0; // counted while the part's visits are in claim order
};

// What one part of the table says: its tallies per accumulator, its FIRST and LAST flags, and its visits' order.
struct PartCoverage {
  List<PartTally> tally;
  int64_t firsts = 0, lasts = 0;
  bool flags_agree = true, in_claim_order = true;
};

// Coverage of one segment. While kClaimOrder, it also counts each accumulator's visits and returns whether their
// ranks are still in claim order; a part stops counting at its first visit out of claim order (at once in lock-step
// plans), so that the loop is left with what coverage itself needs. A plain function of plain locals, not a lambda of
// captured references: the compiler then keeps the bounds in registers across the tally's stores.
template <bool kClaimOrder>
bool cover_segment(const Plan& plan, int32_t s, const KvGeometry& g, PartCoverage& out) {
  const int64_t nq = plan.header.num_q_tiles;
  const int32_t heads = plan.header.heads_per_unit;
  const dash_segment seg = plan.segments[s];
  const int32_t kv = seg.kv_tile;
  PartTally* const tally = out.tally.data();
  const dash_visit* const visits = plan.visits.data();
  const uint16_t* const dq_count = plan.dq_count.data();
  bool in_claim_order = true;
  for (int32_t v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v) {
    const dash_visit vis = visits[v];
    const int32_t q = vis.q_tile, rank = vis.dq_rank;
    if (q < g.q_begin || q >= g.q_end) fail("block (q ", q, ", kv ", kv, ") is fully masked but visited");
    if (vis.head_in_unit >= heads) fail("visit ", v, " has head ", int(vis.head_in_unit));
    if (bool(vis.flags & DASH_VISIT_PARTIAL_MASK) != (q < g.full_begin || q >= g.full_end))
      fail("block (q ", q, ", kv ", kv, ") has a wrong partial-mask flag");
    const size_t a = size_t(vis.head_in_unit) * nq + q;
    PartTally& t = tally[a];
    if (t.last_segment == s) fail("block (head ", int(vis.head_in_unit), ", q ", q, ", kv ", kv, ") visited twice");
    t.last_segment = s;
    if (const int ends = vis.flags & (DASH_VISIT_FIRST | DASH_VISIT_LAST)) {  // about two visits per accumulator
      const bool first = ends & DASH_VISIT_FIRST, last = ends & DASH_VISIT_LAST;
      out.firsts += first;
      out.lasts += last;
      out.flags_agree &= (!first || rank == 0) & (!last || rank + 1 == dq_count[a]);
    }
    if constexpr (kClaimOrder) {
      const int32_t seen = t.visits++;
      if (seen == 0) t.first_rank = rank;
      in_claim_order &= rank == t.first_rank + seen;
    }
  }
  // In range and none twice: the segment covers its KV tile iff it has as many visits as the tile has blocks.
  if (int64_t(seg.num_visits) != int64_t(heads) * (g.q_end - g.q_begin))
    for (int64_t head = 0; head < heads; ++head)
      for (int32_t q = g.q_begin; q < g.q_end; ++q)
        if (tally[head * nq + q].last_segment != s)
          fail("block (head ", head, ", q ", q, ", kv ", kv, ") has unmasked pairs but is never visited");
  return kClaimOrder && in_claim_order;
}

Coverage check_coverage(const Plan& plan, const Problem& problem, const TileGrid& grid, Memory memory) {
  const dash_plan_header& h = plan.header;
  const int64_t nq = h.num_q_tiles, nk = h.num_kv_tiles;
  List<int32_t> segments_of_kv(size_t(nk), 0, memory);
  for (const dash_segment& seg : plan.segments) ++segments_of_kv[seg.kv_tile];
  for (int64_t kv = 0; kv < nk; ++kv)
    if (segments_of_kv[kv] != 1) fail("KV tile ", kv, " appears in ", segments_of_kv[kv], " segments, expected 1");

  const size_t accumulators = size_t(h.heads_per_unit) * nq;
  const int parts = detail::planner_threads(h.visits_per_unit);
  List<PartCoverage> part_of(memory);
  part_of.reserve(size_t(parts));
  for (int part = 0; part < parts; ++part) part_of.push_back(PartCoverage{List<PartTally>(part_memory(memory, parts))});
  const List<KvGeometry> kv_rows = detail::KvTileGeometry(problem, grid).all_rows(memory);  // per KV tile
  // Each part checks whole segments, so every check but the claim-order one sees only its own part's tallies.
  detail::run_parallel(parts, [&](int part) {
    PartCoverage& p = part_of[part];
    p.tally.assign(accumulators, PartTally{});
    const int32_t end = detail::first_segment_of_part(plan.segments, h.visits_per_unit, part + 1, parts);
    for (int32_t s = detail::first_segment_of_part(plan.segments, h.visits_per_unit, part, parts); s < end; ++s) {
      const KvGeometry& g = kv_rows[size_t(plan.segments[s].kv_tile)];
      p.in_claim_order = p.in_claim_order ? cover_segment<true>(plan, s, g, p) : cover_segment<false>(plan, s, g, p);
    }
  });

  // Covered exactly, accumulator (head, q) has one contribution per KV tile that meets Q tile q: counted as the
  // differences at the ends of each KV tile's interval.
  Coverage c{List<int32_t>(accumulators, 0, memory)};
  List<int32_t> added(size_t(nq) + 1, 0, memory);
  for (int32_t kv = 0; kv < nk; ++kv) {
    ++added[kv_rows[size_t(kv)].q_begin];
    --added[kv_rows[size_t(kv)].q_end];
  }
  int64_t with_contributions = 0;
  for (int32_t q = 0, running = 0; q < nq; ++q) {
    running += added[q];
    for (int64_t head = 0; head < h.heads_per_unit; ++head) c.contributions[head * nq + q] = running;
    with_contributions += running > 0 ? h.heads_per_unit : 0;
  }

  // Visits in the parts before, in claim order: none before the first part (the only one of a small template,
  // which then needs no list).
  List<int32_t> claimed(memory);
  if (parts > 1) claimed.assign(accumulators, 0);
  int64_t firsts = 0, lasts = 0;
  for (const PartCoverage& p : part_of) {
    firsts += p.firsts;
    lasts += p.lasts;
    c.flags_agree &= p.flags_agree;
    c.ranked_in_claim_order &= p.in_claim_order;
    if (!c.ranked_in_claim_order) continue;
    for (size_t a = 0; a < accumulators; ++a) {
      const PartTally& t = p.tally[a];
      if (t.visits == 0) continue;
      c.ranked_in_claim_order &= t.first_rank == (claimed.empty() ? 0 : claimed[a]);
      if (!claimed.empty()) claimed[a] += t.visits;
    }
  }
  c.flags_agree &= firsts == with_contributions && lasts == with_contributions;
  c.ranked_in_claim_order &= c.flags_agree;
  return c;
}

// (3), first part: the contribution counts and the dK/dV group order.
void check_counts_and_group(const Plan& plan, const Coverage& coverage, Memory memory) {
  for (size_t a = 0; a < coverage.contributions.size(); ++a)
    if (coverage.contributions[a] != plan.dq_count[a])
      fail("dQ accumulator ", a, " has ", coverage.contributions[a], " contributions but dq_count says ",
           plan.dq_count[a]);
  List<uint8_t> group_seen(size_t(plan.header.group_size), 0, memory);
  for (uint8_t g : plan.group_head_by_rank) {
    if (g >= plan.header.group_size || group_seen[g]) fail("group_head_by_rank is not a permutation of the group");
    group_seen[g] = 1;
  }
}

// The first visit of every item, and the table's end.
List<int32_t> item_begins(const Plan& plan, Memory memory) {
  List<int32_t> begin(memory);
  begin.reserve(plan.items.size() + 1);
  for (const dash_item& item : plan.items) begin.push_back(plan.segments[item.first_segment].first_visit);
  begin.push_back(plan.header.visits_per_unit);
  return begin;
}

// The item whose visit range holds visit v (items tile the visit table in order, check (1)).
int32_t item_of(std::span<const int32_t> item_begin, int32_t v) {
  return int32_t(std::upper_bound(item_begin.begin(), item_begin.end(), v) - item_begin.begin()) - 1;
}

// (5) Forward waits give ticket intervals [i, reach[i]] (reach[i]: the last item that item i waits for, i when
// none is later); merged, they are the waves that must be co-resident. Items come in ticket order, so one sweep
// merges them.
struct Waits {
  int32_t largest_wave = 1;
  bool only_backward = true;
};

Waits waves(std::span<const int32_t> reach) {
  Waits w;
  int32_t start = -1, end = -1;
  for (int32_t i = 0; i < int32_t(reach.size()); ++i) {
    if (reach[i] == i) continue;
    w.only_backward = false;
    if (i > end) {
      start = i;
      end = reach[i];
    } else {
      end = std::max(end, reach[i]);
    }
    w.largest_wave = std::max(w.largest_wave, end - start + 1);
  }
  return w;
}

// (5) for a template cut into slots: claimed slot by slot across a group of units (DASH_PLAN_ITEM_MAJOR), only a
// slot's items have consecutive tickets, so no wait may reach past the waiter's slot (plan_format.h, "Slots").
Waits slot_waves(const Plan& plan, std::span<const int32_t> reach) {
  const int32_t per_slot = plan.header.items_per_slot;
  if (per_slot > 1)
    for (int32_t i = 0; i < int32_t(reach.size()); ++i)
      if (reach[i] / per_slot != i / per_slot)
        fail("item ", i, " (slot ", i / per_slot, ") waits on item ", reach[i], " of a later slot");
  return waves(reach);
}

// (3)-(5) at once for ranks in lock-step arrival order (docs/DEADLOCK.md): walking the visits by (position in
// item, item), each must carry the next rank of its accumulator (coverage has checked that the FIRST / LAST flags
// agree with the ranks). Then the ranks are total orders, that walk is a topological order of the wait graph, and
// each wait targets the item of the accumulator's previous visit in the walk. Returns each item's reach for (5), or
// nothing if a visit breaks the order.
// Consecutive visits of the walk lie an item apart in the table (equal items a power of two bytes apart, so that
// they share a few cache sets): it reads the next visits (at most kChunk) of every item still running into one buffer.
// With several threads, each walks a range of positions; the merge then checks that each part's ranks continue
// the parts before it and finds the previous item of each accumulator's first visit in a part.
namespace arrival {

// Per accumulator, what the walk of one part needs at every visit (8 bytes: at 128k tokens a part's tallies of split
// heads fit in L1), and what the merge needs of its first visit.
struct Tally {
  int32_t next_rank = -1; // the rank its next visit must carry; -1 before its first visit in the part
  int32_t last_item = -1;
};
struct First {
  int32_t rank, item;
};
struct Part {
  explicit Part(Memory memory) : tally(memory), first(memory), reach(memory) {}
  List<Tally> tally;   // per accumulator
  List<First> first;   // per accumulator, where tally.next_rank >= 0
  List<int32_t> reach; // per item
  bool in_order = true;
};

// Walks positions [from, to) of items [first_item, end_item) (begin: each item's first visit, and the table's end). A
// plain function of plain locals, as cover_segment.
void walk(const Plan& plan, std::span<const int32_t> begin, int32_t first_item, int32_t end_item, int32_t from,
          int32_t to, Part& p) {
  constexpr int32_t kChunk = 32;
  const int64_t nq = plan.header.num_q_tiles;
  const int32_t num_items = int32_t(plan.items.size());
  const dash_visit* const visits = plan.visits.data();
  p.tally.assign(plan.dq_count.size(), Tally{});
  p.first.resize(plan.dq_count.size());
  p.reach.resize(num_items);
  Tally* const tally = p.tally.data();
  First* const first = p.first.data();
  int32_t* const reach = p.reach.data();
  struct Running {
    int32_t item, length; // length cut at `to`
  };
  const Memory memory = p.tally.get_allocator().resource();  // the part's
  List<Running> running(memory);
  running.reserve(size_t(num_items));
  std::iota(reach, reach + num_items, 0);
  for (int32_t i = first_item; i < end_item; ++i) {
    const int32_t length = begin[i + 1] - begin[i];
    if (from < to && length > from) running.push_back({i, std::min(length, to)});
  }
  // Chunks no longer than the longest item: a pack's short items would leave most of a full chunk unused.
  int32_t longest = 0;
  for (const Running& r : running) longest = std::max(longest, r.length);
  const int32_t chunk = std::min(kChunk, longest - from);
  List<dash_visit> buffer(running.size() * size_t(std::max(chunk, 0)), memory);
  for (int32_t base = from; !running.empty(); base += chunk) {
    const size_t count = running.size();
    for (size_t k = 0; k < count; ++k)
      std::copy_n(visits + begin[running[k].item] + base, std::min(chunk, running[k].length - base),
                  &buffer[k * chunk]);
    bool in_order = true;
    const auto visit = [&](size_t k, int32_t step) {
      const dash_visit vis = buffer[k * chunk + step];
      const int32_t item = running[k].item, rank = vis.dq_rank;
      const size_t a = size_t(vis.head_in_unit) * nq + vis.q_tile;
      Tally& t = tally[a];
      if (t.next_rank < 0) first[a] = {rank, item};
      else in_order &= rank == t.next_rank;
      t.next_rank = rank + 1;
      // A wait on a later item extends this one's reach (an earlier one never exceeds reach[item] >= item).
      reach[item] = std::max(reach[item], t.last_item);
      t.last_item = item;
    };
    // Steps every item still running reaches need no test of its length (all of them but in an item's last chunk),
    // and none is taken past the longest item's end (a pack's short items end well within a chunk).
    int32_t common = chunk, steps = 0;
    for (const Running& r : running) {
      common = std::min(common, r.length - base);
      steps = std::max(steps, std::min(chunk, r.length - base));
    }
    for (int32_t step = 0; step < common; ++step)
      for (size_t k = 0; k < count; ++k) visit(k, step);
    for (int32_t step = common; step < steps; ++step)
      for (size_t k = 0; k < count; ++k)
        if (base + step < running[k].length) visit(k, step);
    if (!in_order) {
      p.in_order = false;
      return;
    }
    size_t kept = 0;
    for (const Running& r : running)
      if (base + chunk < r.length) running[kept++] = r;
    running.resize(kept);
  }
}

}  // namespace arrival

// The merge below for one part (a small template's only one), without its lists: no visits come before it, so its
// accumulators' ranks must start at 0, and its reach is the whole one.
std::optional<List<int32_t>> merged_arrival(arrival::Part& p, size_t accumulators) {
  if (!p.in_order) return std::nullopt;
  for (size_t a = 0; a < accumulators; ++a)
    if (p.tally[a].next_rank >= 0 && p.first[a].rank != 0) return std::nullopt;
  return std::move(p.reach);
}

// A template cut into slots lists them one after another (plan_format.h, "Slots"): the walk goes slot by slot, each
// slot's ranks continuing the slots' before it, so an accumulator's earlier slots are waited for, never later ones.
// An uncut template is one slot.
std::optional<List<int32_t>> ranked_by_arrival(const Plan& plan, Memory memory) {
  const int32_t num_items = int32_t(plan.items.size());
  const int32_t per_slot = slot_items(plan.header);
  const int32_t slots = per_slot > 0 ? num_items / per_slot : 1;
  const size_t accumulators = plan.dq_count.size();
  const List<int32_t> begin = item_begins(plan, memory);
  List<int32_t> lengths(size_t(num_items), memory);
  for (int32_t i = 0; i < num_items; ++i) lengths[i] = begin[i + 1] - begin[i];
  // The threads take whole slots where there are enough of them, else each slot's positions in parts: one dispatch
  // per batch of slots, its walks merged in (slot, part) order.
  const int threads = detail::planner_threads(plan.header.visits_per_unit);
  const int parts_per_slot = slots >= threads ? 1 : threads / slots;
  const int slots_per_batch = slots >= threads ? threads : slots;
  const int tasks = slots_per_batch * parts_per_slot;
  List<arrival::Part> part_of(memory);
  part_of.reserve(size_t(tasks));
  for (int task = 0; task < tasks; ++task) part_of.emplace_back(part_memory(memory, tasks));
  const auto walk_batch = [&](int32_t first_slot, int batch_tasks) {
    detail::run_parallel(batch_tasks, [&](int task) {
      const int32_t first = (first_slot + task / parts_per_slot) * per_slot;
      const int part = task % parts_per_slot;
      const std::span<const int32_t> slot_lengths(lengths.data() + first, size_t(per_slot));
      arrival::walk(plan, begin, first, first + per_slot,
                    detail::first_position_of_part(slot_lengths, part, parts_per_slot),
                    detail::first_position_of_part(slot_lengths, part + 1, parts_per_slot), part_of[task]);
    });
  };

  if (tasks == 1 && slots <= 1) {
    walk_batch(0, 1);
    return merged_arrival(part_of[0], accumulators);
  }
  List<int32_t> reach(size_t(num_items), memory), next_rank(accumulators, 0, memory),
      last_item(accumulators, -1, memory);
  std::iota(reach.begin(), reach.end(), 0);
  for (int32_t first_slot = 0; first_slot < slots; first_slot += slots_per_batch) {
    const int batch_slots = std::min<int32_t>(slots_per_batch, slots - first_slot);
    walk_batch(first_slot, batch_slots * parts_per_slot);
    for (int task = 0; task < batch_slots * parts_per_slot; ++task) {
      const arrival::Part& p = part_of[task];
      if (!p.in_order) return std::nullopt;
      const int32_t first = (first_slot + task / parts_per_slot) * per_slot;
      for (int32_t i = first; i < first + per_slot; ++i) reach[i] = std::max(reach[i], p.reach[i]);
      for (size_t a = 0; a < accumulators; ++a) {
        const arrival::Tally& t = p.tally[a];
        if (t.next_rank < 0) continue;
        const arrival::First& first_visit = p.first[a];
        if (first_visit.rank != next_rank[a]) return std::nullopt;
        if (last_item[a] > first_visit.item) reach[first_visit.item] = std::max(reach[first_visit.item], last_item[a]);
        next_rank[a] = t.next_rank;
        last_item[a] = t.last_item;
      }
    }
  }
  return reach;
}

// Where each accumulator's ranks live in one flat table: slots offset[a] .. offset[a + 1] - 1 hold the visits of
// ranks 0 .. dq_count[a] - 1 of accumulator a.
struct RankIndex {
  std::vector<int32_t> offset;
  std::vector<int32_t> visit_of_slot;
  int32_t slot(const dash_visit& vis, int32_t num_q) const {
    return offset[size_t(vis.head_in_unit) * num_q + vis.q_tile] + vis.dq_rank;
  }
};

// (3), in general: each accumulator's ranks are exactly 0 .. dq_count - 1 (given the counts, no rank is out of
// range or taken twice), and the FIRST and LAST flags mark the ends. Returns the visits by (accumulator, rank).
RankIndex check_ranks(const Plan& plan) {
  const int32_t nq = plan.header.num_q_tiles;
  RankIndex index{std::vector<int32_t>(plan.dq_count.size() + 1, 0), std::vector<int32_t>(plan.visits.size(), -1)};
  for (size_t a = 0; a < plan.dq_count.size(); ++a) index.offset[a + 1] = index.offset[a] + plan.dq_count[a];
  for (int32_t v = 0; v < int32_t(plan.visits.size()); ++v) {
    const dash_visit& vis = plan.visits[v];
    const size_t a = size_t(vis.head_in_unit) * nq + vis.q_tile;
    if (vis.dq_rank >= plan.dq_count[a] || index.visit_of_slot[index.slot(vis, nq)] >= 0)
      fail("dQ accumulator (head ", a / nq, ", q ", a % nq, ") ranks are not 0..", plan.dq_count[a] - 1);
    index.visit_of_slot[index.slot(vis, nq)] = v;
  }
  for (const dash_visit& vis : plan.visits) {
    const int32_t count = plan.dq_count[size_t(vis.head_in_unit) * nq + vis.q_tile];
    if (bool(vis.flags & DASH_VISIT_FIRST) != (vis.dq_rank == 0)) fail("FIRST flag disagrees with rank");
    if (bool(vis.flags & DASH_VISIT_LAST) != (vis.dq_rank == count - 1)) fail("LAST flag disagrees with rank");
  }
  return index;
}

// (4), in general: the graph whose edges are v - 1 -> v inside an item (chain) and the previous rank's visit ->
// v (wait) is acyclic, by Kahn's algorithm. Returns each item's reach for (5).
std::vector<int32_t> check_acyclic(const Plan& plan, const RankIndex& index) {
  const int32_t nv = plan.header.visits_per_unit, num_items = plan.header.items_per_unit;
  const int32_t nq = plan.header.num_q_tiles;
  const List<int32_t> item_begin = item_begins(plan, std::pmr::get_default_resource());
  // Per visit: its predecessors not yet done (low bits), and whether its item goes on after it.
  constexpr uint8_t kPending = 3, kChainNext = 4;
  std::vector<uint8_t> state(nv);
  std::vector<int32_t> ready, reach(num_items);
  for (int32_t i = 0; i < num_items; ++i) {
    int32_t last_awaited = -1;
    for (int32_t v = item_begin[i]; v < item_begin[i + 1]; ++v) {
      const dash_visit& vis = plan.visits[v];
      if (vis.dq_rank > 0) last_awaited = std::max(last_awaited, index.visit_of_slot[index.slot(vis, nq) - 1]);
      const uint8_t pending = uint8_t((v > item_begin[i]) + (vis.dq_rank > 0));
      state[v] = pending | (v + 1 < item_begin[i + 1] ? kChainNext : 0);
      if (pending == 0) ready.push_back(v);
    }
    reach[i] = last_awaited >= item_begin[i + 1] ? item_of(item_begin, last_awaited) : i;
  }
  // The chain successor is taken first, so the walk runs along items as the kernel would.
  int32_t done = 0;
  while (!ready.empty()) {
    const int32_t v = ready.back();
    ready.pop_back();
    ++done;
    const dash_visit& vis = plan.visits[v];
    if (vis.dq_rank + 1 < plan.dq_count[size_t(vis.head_in_unit) * nq + vis.q_tile]) {
      const int32_t waiter = index.visit_of_slot[index.slot(vis, nq) + 1];
      if ((--state[waiter] & kPending) == 0) ready.push_back(waiter);
    }
    if ((state[v] & kChainNext) && (--state[v + 1] & kPending) == 0) ready.push_back(v + 1);
  }
  if (done != nv) {
    for (int32_t v = 0; v < nv; ++v)
      if (state[v] & kPending)
        fail("wait cycle: visit ", v, " (item ", item_of(item_begin, v), ", q ", plan.visits[v].q_tile, ", rank ",
             plan.visits[v].dq_rank, ") can never start");
  }
  return reach;
}

// (3) total orders, (4) no cycle, (5) waves. Ranks in claim order or in lock-step arrival order (what the
// planners make) are proved in one pass; any other order goes through the general checks.
Waits check_orders_and_waits(const Plan& plan, const Coverage& coverage, Memory memory) {
  check_counts_and_group(plan, coverage, memory);
  // Claim order is a topological order in which every wait targets an earlier visit, so an earlier ticket.
  if (coverage.ranked_in_claim_order) return {};
  if (coverage.flags_agree)
    if (const auto reach = ranked_by_arrival(plan, memory)) return slot_waves(plan, *reach);
  return slot_waves(plan, check_acyclic(plan, check_ranks(plan)));
}

} // namespace

ValidationReport validate_plan(const Plan& plan, int32_t num_ctas) {
  ValidationReport report;
  detail::ListArena arena;  // the checks' lists
  try {
    if (num_ctas < 1) fail("num_ctas must be >= 1");
    check_structure(plan);
    const Problem problem = Problem::from_c(plan.header.problem);
    const TileGrid grid(problem, {plan.header.block_m, plan.header.block_n});
    Coverage coverage{List<int32_t>(arena.get())};  // assigned from one of the same arena: moved, not copied
    try {
      coverage = check_coverage(plan, problem, grid, arena.get());
    } catch (const Failure&) {
      check_visit_fields(plan);  // a structure failure comes first
      throw;
    }
    const Waits waits = check_orders_and_waits(plan, coverage, arena.get());
    report.min_coresident_ctas = waits.largest_wave;
    report.waits_only_backward = waits.only_backward;
    if (num_ctas < report.min_coresident_ctas)
      fail("the plan's waits need ", report.min_coresident_ctas, " co-resident CTAs (its largest wave) but only ",
           num_ctas, " are available");
    report.ok = true;
  } catch (const Failure& f) {
    report.ok = false;
    report.reason = f.reason;
  }
  return report;
}

} // namespace dash
