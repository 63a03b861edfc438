// SPDX-License-Identifier: Apache-2.0
// The planners: each turns one unit's shape into a template of items, segments and visits with dQ ranks.
//
// Every planner works on the same raw material: for each KV tile, the list of accumulator rows it touches,
// (head_in_unit, Q tile) in ascending order. A planner decides (1) how KV tiles are grouped into items and
// in which order items are claimed, (2) the order in which each segment visits its rows, and (3) the rank
// rule: either "ascending KV tile" (FA3's order) or "lock-step arrival" (the order contributions would
// arrive if all items of the unit ran side by side, one visit per step; see docs/DEADLOCK.md).
// Nothing here depends on batch size, head count or P: a template is a function of the unit's shape.
#include <algorithm>
#include <atomic>
#include <climits>
#include <numeric>
#include <set>
#include <string>
#include <tuple>

#include "dash/plan.hpp"

namespace dash {

const char* planner_name(Planner planner) {
  switch (planner) {
    case Planner::Ascending: return "ascending";
    case Planner::Descending: return "descending";
    case Planner::Shift: return "shift";
    case Planner::SymmetricShift: return "symmetric-shift";
  }
  return "?";
}

const std::vector<Planner>& all_planners() {
  static const std::vector<Planner> planners = {Planner::Ascending, Planner::Descending, Planner::Shift,
                                                Planner::SymmetricShift};
  return planners;
}

const char* gqa_mode_name(GqaMode mode) {
  return mode == GqaMode::PackGroup ? "pack" : mode == GqaMode::Auto ? "auto" : "split";
}

namespace {

struct Row {
  int32_t head; // head_in_unit
  int32_t q_tile;
  bool partial;
  bool operator<(const Row& o) const { return std::tie(head, q_tile) < std::tie(o.head, o.q_tile); }
  bool operator==(const Row& o) const { return head == o.head && q_tile == o.q_tile; }
};

struct SegmentDraft {
  int32_t kv_tile;
  std::vector<Row> rows; // in visit order
};

struct ItemDraft {
  std::vector<SegmentDraft> segments;
};

enum class RankRule { AscendingKv, LockstepArrival };

struct TemplateDraft {
  std::vector<ItemDraft> items; // claim order
  RankRule rank_rule = RankRule::AscendingKv;
  bool generalised = false;
  std::string note;
};

// The rows each KV tile touches, (head, Q tile) ascending.
std::vector<std::vector<Row>> rows_by_kv_tile(const TileGrid& grid, int32_t heads_per_unit) {
  std::vector<std::vector<Row>> rows(grid.num_kv_tiles());
  for (int32_t kv = 0; kv < grid.num_kv_tiles(); ++kv)
    for (int32_t h = 0; h < heads_per_unit; ++h)
      for (int32_t q : grid.q_tiles_seen_by(kv))
        rows[kv].push_back({h, q, grid.kind(q, kv) == BlockKind::Partial});
  return rows;
}

TemplateDraft plan_ascending(const std::vector<std::vector<Row>>& rows) {
  TemplateDraft t;
  for (int32_t kv = 0; kv < int32_t(rows.size()); ++kv) t.items.push_back({{{kv, rows[kv]}}});
  t.rank_rule = RankRule::AscendingKv;
  return t;
}

TemplateDraft plan_descending(const std::vector<std::vector<Row>>& rows) {
  TemplateDraft t = plan_ascending(rows);
  for (auto& item : t.items) std::reverse(item.segments[0].rows.begin(), item.segments[0].rows.end());
  return t;
}

// Rotates `rows` left by `offset` (mod size): the segment starts at rows[offset] and wraps around.
std::vector<Row> rotated(std::vector<Row> rows, size_t offset) {
  if (!rows.empty()) std::rotate(rows.begin(), rows.begin() + (offset % rows.size()), rows.end());
  return rows;
}

TemplateDraft plan_shift(const std::vector<std::vector<Row>>& rows, Mask mask) {
  // KV tile n starts at its n-th row and wraps. With the full mask and at least as many Q tiles as KV
  // tiles, the items touch pairwise distinct dQ tiles at every lock-step, so no contribution ever waits.
  TemplateDraft t;
  size_t max_rows = 0;
  for (int32_t kv = 0; kv < int32_t(rows.size()); ++kv) {
    t.items.push_back({{{kv, rotated(rows[kv], size_t(kv))}}});
    max_rows = std::max(max_rows, rows[kv].size());
  }
  t.rank_rule = RankRule::LockstepArrival;
  if (mask != Mask::Full) {
    t.generalised = true;
    t.note = "shift is built for the full mask; with this mask each KV tile rotates within its own Q range, "
             "so lock-step collisions (and waits) are possible";
  } else if (max_rows < rows.size()) {
    t.generalised = true;
    t.note = "fewer Q tiles than KV tiles: KV tiles n and n + #Q collide at every lock-step";
  }
  return t;
}

TemplateDraft plan_symmetric_shift(const std::vector<std::vector<Row>>& rows, Mask mask) {
  // Pair the i-th longest KV tile with the i-th shortest so every item carries about the same work
  // (causal: K_i with K_{N-1-i}, N+1 Q tiles each). The long ("big") side first visits the rows all big
  // sides share (the dense rectangle), rotated by its pair index as in shift scheduling, then its own
  // remaining rows ascending; the short side visits its rows descending. Ranks follow lock-step arrival,
  // which for the paper's shapes reproduces its orders: big sides in shift order, then small sides.
  const int32_t n = int32_t(rows.size());
  std::vector<int32_t> by_length(n);
  std::iota(by_length.begin(), by_length.end(), 0);
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](int32_t a, int32_t b) { return rows[a].size() > rows[b].size(); });
  const int32_t pairs = n / 2;

  std::set<Row> rectangle;
  for (int32_t k = 0; k < pairs; ++k) {
    const auto& big = rows[by_length[k]];
    if (k == 0) {
      rectangle.insert(big.begin(), big.end());
    } else {
      std::set<Row> kept;
      for (const Row& r : big)
        if (rectangle.count(r)) kept.insert(r);
      rectangle.swap(kept);
    }
  }
  const std::vector<Row> rect_rows(rectangle.begin(), rectangle.end());

  TemplateDraft t;
  t.rank_rule = RankRule::LockstepArrival;
  for (int32_t k = 0; k < pairs; ++k) {
    const int32_t big_kv = by_length[k], small_kv = by_length[n - 1 - k];
    SegmentDraft big{big_kv, rotated(rect_rows, size_t(k))};
    for (const Row& r : rows[big_kv])
      if (!rectangle.count(r)) big.rows.push_back(r);
    // rows[] keep each Row's partial flag; the rectangle copies carry the flags of the first big side,
    // so take them again from this KV tile's own list.
    for (Row& r : big.rows)
      r.partial = std::find(rows[big_kv].begin(), rows[big_kv].end(), r)->partial;
    SegmentDraft small{small_kv, rows[small_kv]};
    std::reverse(small.rows.begin(), small.rows.end());
    t.items.push_back({{big, small}});
  }
  if (n % 2 == 1) {
    const int32_t middle = by_length[pairs];
    SegmentDraft alone{middle, rows[middle]};
    std::reverse(alone.rows.begin(), alone.rows.end());
    t.items.push_back({{alone}});
  }
  // Claim order = pair index, longest pair first; the KV-tile order inside the template stays visible in
  // each segment's kv_tile.
  if (mask != Mask::Causal) {
    t.generalised = true;
    t.note = "symmetric shift is built for the causal mask; here it pairs KV tiles by work, which balances "
             "nothing when all KV tiles carry equal work";
  } else if (n % 2 == 1) {
    t.generalised = true;
    t.note = "odd number of KV tiles: the middle tile forms an item of its own";
  }
  return t;
}

// Assigns every visit its rank in its accumulator's order and fills the plan's tables.
void flatten(const TemplateDraft& draft, const TileGrid& grid, int32_t heads_per_unit, Plan& plan) {
  const int32_t num_q = grid.num_q_tiles();
  struct Contribution {
    int64_t key0, key1; // sort keys: (kv tile) or (lock-step time, item)
    int32_t visit;
  };
  std::vector<std::vector<Contribution>> per_accumulator(size_t(heads_per_unit) * num_q);

  plan.items.clear();
  plan.segments.clear();
  plan.visits.clear();
  int32_t max_visits = 0;
  for (int32_t item_index = 0; item_index < int32_t(draft.items.size()); ++item_index) {
    const ItemDraft& item = draft.items[item_index];
    dash_item out_item{int32_t(plan.segments.size()), int32_t(item.segments.size())};
    int32_t step = 0; // position of the visit inside its item = its lock-step time
    for (const SegmentDraft& seg : item.segments) {
      dash_segment out_seg{seg.kv_tile, int32_t(plan.visits.size()), int32_t(seg.rows.size()), 0};
      for (const Row& r : seg.rows) {
        dash_visit v{};
        v.q_tile = uint16_t(r.q_tile);
        v.head_in_unit = uint8_t(r.head);
        v.flags = r.partial ? DASH_VISIT_PARTIAL_MASK : 0;
        const int32_t index = int32_t(plan.visits.size());
        const Contribution c = draft.rank_rule == RankRule::AscendingKv
                                   ? Contribution{seg.kv_tile, 0, index}
                                   : Contribution{step, item_index, index};
        per_accumulator[size_t(r.head) * num_q + r.q_tile].push_back(c);
        plan.visits.push_back(v);
        ++step;
      }
      plan.segments.push_back(out_seg);
    }
    max_visits = std::max(max_visits, step);
    plan.items.push_back(out_item);
  }

  plan.dq_count.assign(per_accumulator.size(), 0);
  for (size_t a = 0; a < per_accumulator.size(); ++a) {
    auto& contributions = per_accumulator[a];
    std::sort(contributions.begin(), contributions.end(), [](const Contribution& x, const Contribution& y) {
      return std::tie(x.key0, x.key1) < std::tie(y.key0, y.key1);
    });
    const int32_t count = int32_t(contributions.size());
    plan.dq_count[a] = uint16_t(count);
    for (int32_t rank = 0; rank < count; ++rank) {
      dash_visit& v = plan.visits[contributions[rank].visit];
      v.dq_rank = uint16_t(rank);
      if (rank == 0) v.flags |= DASH_VISIT_FIRST;
      if (rank == count - 1) v.flags |= DASH_VISIT_LAST;
    }
  }
  plan.header.max_visits_per_item = max_visits;
}

std::atomic<int64_t> g_planner_runs{0};

} // namespace

int32_t longest_plannable_seqlen(int32_t head_dim, int32_t heads_per_unit) {
  const TileShape tiles = default_backward_tiles(head_dim);
  const auto fits = [&](int64_t s) {
    const int64_t q_tiles = (s + tiles.block_m - 1) / tiles.block_m, kv_tiles = (s + tiles.block_n - 1) / tiles.block_n;
    return q_tiles <= DASH_PLAN_MAX_TILES && kv_tiles <= DASH_PLAN_MAX_TILES &&
           int64_t(heads_per_unit) * q_tiles * kv_tiles <= kMaxBlocksPerUnit;
  };
  int64_t lo = 1, hi = INT32_MAX;  // fits(lo); the answer is the largest s that fits (monotone in s)
  if (fits(hi)) return INT32_MAX;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return int32_t(lo);
}

std::optional<LimitViolation> plan_limit_violation(const Problem& problem, TileShape tiles, GqaMode mode,
                                                   int32_t num_ctas) {
  problem.validate();
  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(problem.head_dim);
  const TileGrid grid(problem, tiles);
  const int64_t q_tiles = grid.num_q_tiles(), kv_tiles = grid.num_kv_tiles();
  const int64_t group = problem.group_size();
  const int64_t heads_per_unit = mode == GqaMode::PackGroup ? group : 1;
  const auto count = [](int64_t n) { return std::to_string(n); };
  // Only a refusal needs this (a binary search and a string): built when one is returned.
  const auto longest = [&] {
    return "; the longest self-attention sequence a plan holds at head_dim " + count(problem.head_dim) + " is " +
           count(longest_plannable_seqlen(problem.head_dim, int32_t(heads_per_unit))) + " tokens";
  };
  // visit.q_tile, visit.dq_rank and dq_count are 16-bit: at most 65535 tiles on either side.
  if (q_tiles > DASH_PLAN_MAX_TILES)
    return LimitViolation{"seqlen_q", count(problem.seqlen_q) + " needs " + count(q_tiles) + " Q tiles of " +
                                          count(tiles.block_m) + " rows; the plan format indexes at most " +
                                          count(DASH_PLAN_MAX_TILES) + " (seqlen_q <= " +
                                          count(int64_t(DASH_PLAN_MAX_TILES) * tiles.block_m) + ")" + longest()};
  if (kv_tiles > DASH_PLAN_MAX_TILES)
    return LimitViolation{"seqlen_k", count(problem.seqlen_k) + " needs " + count(kv_tiles) + " KV tiles of " +
                                          count(tiles.block_n) + " keys; the plan format indexes at most " +
                                          count(DASH_PLAN_MAX_TILES) + " (seqlen_k <= " +
                                          count(int64_t(DASH_PLAN_MAX_TILES) * tiles.block_n) + ")" + longest()};
  // visit.head_in_unit and group_head_by_rank are 8-bit.
  if (group > DASH_PLAN_MAX_HEADS_PER_UNIT)
    return LimitViolation{"heads_q", "a GQA group of " + count(group) + " query heads per KV head exceeds the "
                                         "plan format's " + count(DASH_PLAN_MAX_HEADS_PER_UNIT)};
  // One unit's visit table, bounded by its whole tile rectangle: 2^28 visits of 8 bytes keep the blob's
  // 32-bit offsets (and the 32-bit visit indices) far from overflowing.
  const int64_t blocks = heads_per_unit * q_tiles * kv_tiles;
  if (blocks > kMaxBlocksPerUnit)
    return LimitViolation{"seqlen_q", count(problem.seqlen_q) + " x seqlen_k " + count(problem.seqlen_k) +
                                          (heads_per_unit > 1 ? " x " + count(heads_per_unit) + " heads per unit" : "") +
                                          " gives " + count(blocks) + " tile pairs per unit; the plan format holds at "
                                          "most 2^28 (" + count(kMaxBlocksPerUnit) + ")" + longest()};
  // Tickets are claimed from a 32-bit counter that each of the num_ctas CTAs may push one past the end; every
  // planner makes at most one item per KV tile.
  const int64_t units = int64_t(problem.batch) * (mode == GqaMode::PackGroup ? problem.heads_kv : problem.heads_q);
  const int64_t max_tickets = (int64_t(1) << 31) - int64_t(std::max(num_ctas, 1)) - 1;
  if (units * kv_tiles >= max_tickets)
    return LimitViolation{"batch", count(problem.batch) + " x " + count(units / problem.batch) + " heads x " +
                                       count(kv_tiles) + " KV tiles gives " + count(units * kv_tiles) +
                                       " work items; the 32-bit ticket counter allows fewer than " + count(max_tickets)};
  return std::nullopt;
}

void check_plan_limits(const Problem& problem, TileShape tiles, GqaMode mode, int32_t num_ctas) {
  // auto may always fall back to split heads, so that plan must fit; pack is one more candidate.
  const GqaMode required = mode == GqaMode::Auto ? GqaMode::SplitHeads : mode;
  if (const auto violation = plan_limit_violation(problem, tiles, required, num_ctas))
    throw Error(violation->field, violation->message);
}

int64_t planner_runs() { return g_planner_runs.load(std::memory_order_relaxed); }

Plan build_unvalidated(const Problem& problem, Planner planner, TileShape tiles, GqaMode gqa_mode,
                       int32_t num_ctas) {
  if (gqa_mode == GqaMode::Auto) throw Error("gqa_mode", "auto is a request for build_plan, which resolves it");
  problem.validate();
  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(problem.head_dim);
  check_plan_limits(problem, tiles, gqa_mode, num_ctas);
  g_planner_runs.fetch_add(1, std::memory_order_relaxed);
  const TileGrid grid(problem, tiles);
  const int32_t group = problem.group_size();
  const int32_t heads_per_unit = gqa_mode == GqaMode::PackGroup ? group : 1;

  const auto rows = rows_by_kv_tile(grid, heads_per_unit);
  TemplateDraft draft;
  switch (planner) {
    case Planner::Ascending: draft = plan_ascending(rows); break;
    case Planner::Descending: draft = plan_descending(rows); break;
    case Planner::Shift: draft = plan_shift(rows, problem.mask); break;
    case Planner::SymmetricShift: draft = plan_symmetric_shift(rows, problem.mask); break;
    default: throw Error("planner", "unknown planner " + std::to_string(int(planner)));
  }

  Plan plan;
  dash_plan_header& h = plan.header;
  h.magic = DASH_PLAN_MAGIC;
  h.version = DASH_PLAN_FORMAT_VERSION;
  h.flags = draft.generalised ? DASH_PLAN_GENERALISED : 0;
  h.problem = problem.to_c();
  h.block_m = tiles.block_m;
  h.block_n = tiles.block_n;
  h.num_q_tiles = grid.num_q_tiles();
  h.num_kv_tiles = grid.num_kv_tiles();
  h.planner = static_cast<int32_t>(planner);
  h.gqa_mode = static_cast<int32_t>(gqa_mode);
  h.group_size = group;
  h.heads_per_unit = heads_per_unit;
  h.num_units = problem.batch * (gqa_mode == GqaMode::PackGroup ? problem.heads_kv : problem.heads_q);
  h.num_ctas = num_ctas;
  flatten(draft, grid, heads_per_unit, plan);
  h.items_per_unit = int32_t(plan.items.size());
  h.segments_per_unit = int32_t(plan.segments.size());
  h.visits_per_unit = int32_t(plan.visits.size());
  plan.group_head_by_rank.resize(group);
  std::iota(plan.group_head_by_rank.begin(), plan.group_head_by_rank.end(), uint8_t(0));
  plan.note = draft.note;
  return plan;
}

} // namespace dash
