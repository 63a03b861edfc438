// SPDX-License-Identifier: Apache-2.0
// The plan validator. docs/DEADLOCK.md states the execution model and proves that the properties checked
// here make a deadlock impossible; the checks below follow its numbering.
#include <algorithm>
#include <queue>
#include <sstream>

#include "dash/plan.hpp"

namespace dash {
namespace {

struct Failure {
  std::string reason;
};

template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
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
  for (int32_t v = 0; v < h.visits_per_unit; ++v) {
    const dash_visit& vis = plan.visits[v];
    if (vis.q_tile >= h.num_q_tiles) fail("visit ", v, " has Q tile ", vis.q_tile);
    if (vis.head_in_unit >= h.heads_per_unit) fail("visit ", v, " has head ", int(vis.head_in_unit));
  }
}

// (2) Coverage and (3) total orders.
void check_coverage_and_orders(const Plan& plan) {
  const dash_plan_header& h = plan.header;
  const TileGrid grid(Problem::from_c(h.problem), {h.block_m, h.block_n});
  const int64_t nq = h.num_q_tiles, nk = h.num_kv_tiles;

  std::vector<int32_t> segments_of_kv(nk, 0);
  for (const dash_segment& seg : plan.segments) ++segments_of_kv[seg.kv_tile];
  for (int64_t kv = 0; kv < nk; ++kv)
    if (segments_of_kv[kv] != 1) fail("KV tile ", kv, " appears in ", segments_of_kv[kv], " segments, expected 1");

  std::vector<uint8_t> seen(size_t(h.heads_per_unit) * nq * nk, 0);
  std::vector<std::vector<int32_t>> ranks(size_t(h.heads_per_unit) * nq);
  for (const dash_segment& seg : plan.segments) {
    for (int32_t v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v) {
      const dash_visit& vis = plan.visits[v];
      const BlockKind kind = grid.kind(vis.q_tile, seg.kv_tile);
      if (kind == BlockKind::Empty)
        fail("block (q ", vis.q_tile, ", kv ", seg.kv_tile, ") is fully masked but visited");
      const bool partial = (vis.flags & DASH_VISIT_PARTIAL_MASK) != 0;
      if (partial != (kind == BlockKind::Partial))
        fail("block (q ", vis.q_tile, ", kv ", seg.kv_tile, ") has a wrong partial-mask flag");
      uint8_t& mark = seen[(size_t(vis.head_in_unit) * nq + vis.q_tile) * nk + seg.kv_tile];
      if (mark) fail("block (head ", int(vis.head_in_unit), ", q ", vis.q_tile, ", kv ", seg.kv_tile, ") visited twice");
      mark = 1;
      ranks[size_t(vis.head_in_unit) * nq + vis.q_tile].push_back(vis.dq_rank);
    }
  }
  for (int64_t head = 0; head < h.heads_per_unit; ++head)
    for (int64_t q = 0; q < nq; ++q)
      for (int64_t kv = 0; kv < nk; ++kv)
        if (!seen[(head * nq + q) * nk + kv] && grid.kind(int32_t(q), int32_t(kv)) != BlockKind::Empty)
          fail("block (head ", head, ", q ", q, ", kv ", kv, ") has unmasked pairs but is never visited");

  for (size_t a = 0; a < ranks.size(); ++a) {
    std::vector<int32_t>& r = ranks[a];
    if (int64_t(r.size()) != plan.dq_count[a])
      fail("dQ accumulator ", a, " has ", r.size(), " contributions but dq_count says ", plan.dq_count[a]);
    std::sort(r.begin(), r.end());
    for (int32_t k = 0; k < int32_t(r.size()); ++k)
      if (r[k] != k) fail("dQ accumulator (head ", a / nq, ", q ", a % nq, ") ranks are not 0..", r.size() - 1);
  }
  for (const dash_visit& vis : plan.visits) {
    const int32_t count = plan.dq_count[size_t(vis.head_in_unit) * nq + vis.q_tile];
    if (bool(vis.flags & DASH_VISIT_FIRST) != (vis.dq_rank == 0)) fail("FIRST flag disagrees with rank");
    if (bool(vis.flags & DASH_VISIT_LAST) != (vis.dq_rank == count - 1)) fail("LAST flag disagrees with rank");
  }
  std::vector<uint8_t> group_seen(h.group_size, 0);
  for (uint8_t g : plan.group_head_by_rank) {
    if (g >= h.group_size || group_seen[g]) fail("group_head_by_rank is not a permutation of the group");
    group_seen[g] = 1;
  }
}

// (4) acyclic wait graph and (5) waves. Returns the size of the largest wave (1 if none).
int32_t check_waits(const Plan& plan, bool& waits_only_backward) {
  const dash_plan_header& h = plan.header;
  const int32_t nv = h.visits_per_unit;
  std::vector<int32_t> item_of(nv);
  for (int32_t i = 0; i < h.items_per_unit; ++i) {
    const dash_item& item = plan.items[i];
    const dash_segment& first = plan.segments[item.first_segment];
    const dash_segment& last = plan.segments[item.first_segment + item.num_segments - 1];
    for (int32_t v = first.first_visit; v < last.first_visit + last.num_visits; ++v) item_of[v] = i;
  }
  // awaited[v] = the visit of rank dq_rank - 1 on v's accumulator (or -1 for rank 0).
  std::vector<int32_t> by_rank_offset(plan.dq_count.size() + 1, 0);
  for (size_t a = 0; a < plan.dq_count.size(); ++a) by_rank_offset[a + 1] = by_rank_offset[a] + plan.dq_count[a];
  std::vector<int32_t> visit_of_rank(nv);
  for (int32_t v = 0; v < nv; ++v) {
    const dash_visit& vis = plan.visits[v];
    visit_of_rank[by_rank_offset[size_t(vis.head_in_unit) * h.num_q_tiles + vis.q_tile] + vis.dq_rank] = v;
  }
  std::vector<int32_t> awaited(nv, -1);
  for (int32_t v = 0; v < nv; ++v) {
    const dash_visit& vis = plan.visits[v];
    if (vis.dq_rank > 0)
      awaited[v] = visit_of_rank[by_rank_offset[size_t(vis.head_in_unit) * h.num_q_tiles + vis.q_tile] + vis.dq_rank - 1];
  }

  // Kahn's algorithm. Edges: v-1 -> v inside an item (chain), awaited[v] -> v (wait).
  std::vector<int32_t> indegree(nv, 0), next_waiter(nv, -1);
  for (int32_t v = 0; v < nv; ++v) {
    if (v > 0 && item_of[v - 1] == item_of[v]) ++indegree[v];
    if (awaited[v] >= 0) {
      ++indegree[v];
      next_waiter[awaited[v]] = v; // each visit is awaited by at most one (the next rank)
    }
  }
  std::vector<int32_t> ready;
  for (int32_t v = 0; v < nv; ++v)
    if (indegree[v] == 0) ready.push_back(v);
  int32_t done = 0;
  while (!ready.empty()) {
    const int32_t v = ready.back();
    ready.pop_back();
    ++done;
    if (v + 1 < nv && item_of[v + 1] == item_of[v] && --indegree[v + 1] == 0) ready.push_back(v + 1);
    if (next_waiter[v] >= 0 && --indegree[next_waiter[v]] == 0) ready.push_back(next_waiter[v]);
  }
  if (done != nv) {
    for (int32_t v = 0; v < nv; ++v)
      if (indegree[v] > 0)
        fail("wait cycle: visit ", v, " (item ", item_of[v], ", q ", plan.visits[v].q_tile, ", rank ",
             plan.visits[v].dq_rank, ") can never start");
  }

  // Forward waits give ticket intervals; merged, they are the waves that must be co-resident.
  std::vector<std::pair<int32_t, int32_t>> intervals;
  for (int32_t v = 0; v < nv; ++v)
    if (awaited[v] >= 0 && item_of[awaited[v]] > item_of[v]) intervals.push_back({item_of[v], item_of[awaited[v]]});
  waits_only_backward = intervals.empty();
  std::sort(intervals.begin(), intervals.end());
  int32_t largest = 1, start = -1, end = -1;
  for (auto [lo, hi] : intervals) {
    if (lo > end) {
      start = lo;
      end = hi;
    } else {
      end = std::max(end, hi);
    }
    largest = std::max(largest, end - start + 1);
  }
  return largest;
}

} // namespace

ValidationReport validate_plan(const Plan& plan, int32_t num_ctas) {
  ValidationReport report;
  try {
    if (num_ctas < 1) fail("num_ctas must be >= 1");
    check_structure(plan);
    check_coverage_and_orders(plan);
    report.min_coresident_ctas = check_waits(plan, report.waits_only_backward);
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
