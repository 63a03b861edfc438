// SPDX-License-Identifier: Apache-2.0
// auto's candidate lists: a table generated offline (tools/make_auto_table.cpp, scripts/make_auto_table.sh) from
// the simulator and its calibrated cost model, so that choosing costs a look-up at call time. The table's rows
// sample the mask, head dim, GQA group and sequence lengths; a problem takes the row nearest to it on a log scale.
//
// The nearest row is found once per (mask, head dim, group, seqlen_q, seqlen_k) and memoised (plan_internal.hpp);
// the scan itself takes the log2 distances once per distinct column value of the table (a few dozen), not four per
// row, and adds the same doubles in the same order as the reference scan, so it picks the same row bit for bit.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dash/plan.hpp"
#include "plan_internal.hpp"

namespace dash {
namespace {

struct AutoTableRow {
  int32_t mask;  // dash_mask_kind (full or causal)
  int32_t head_dim;
  int32_t group_size;
  int32_t seqlen_q;
  int32_t seqlen_k;
  const char* ranking;  // "mode/planner ..." best first, e.g. "split/symmetric-shift pack/shift ..."
};

#include "auto_table.inc"  // kAutoTable[], generated

double log2_distance(double a, double b) { return std::log2(std::max(a, 1.0) / std::max(b, 1.0)); }

// A row's distance from the problem, from its four log2 distances. Head dim and group first (they change the cost
// model and the GQA trade-off), then the lengths. Both scans call it, so they round alike.
inline double row_distance(double d_head, double d_group, double d_q, double d_k) {
  return 1e6 * d_head + 1e3 * d_group + d_q * d_q + d_k * d_k;
}

// The sliding window is a band like causal: its rows are the nearest the table has (until it has its own).
int32_t table_mask(const Problem& problem) {
  return problem.mask == Mask::Window ? DASH_MASK_CAUSAL : int32_t(problem.mask);
}

// One word of a ranking, "mode/planner".
Candidate parse_candidate(std::string_view word) {
  const size_t slash = word.find('/');
  Candidate c;
  c.mode = word.substr(0, slash) == "pack" ? GqaMode::PackGroup : GqaMode::SplitHeads;
  const std::string_view name = word.substr(slash == std::string_view::npos ? word.size() : slash + 1);
  if (const std::optional<Planner> p = planner_named(name)) {
    c.planner = *p;
    return c;
  }
  throw std::logic_error("auto_table.inc: unknown planner '" + std::string(name) + "'");
}

// A row's ranking (none: an empty one), then the two plans whose waits all target earlier tickets (wave 1), one of
// which runs on any P.
std::vector<Candidate> candidates_of(const AutoTableRow* row) {
  std::vector<Candidate> out;
  if (row != nullptr) {
    const std::string_view ranking = row->ranking;
    for (size_t at = ranking.find_first_not_of(' '); at != std::string_view::npos;) {
      const size_t end = std::min(ranking.find(' ', at), ranking.size());
      out.push_back(parse_candidate(ranking.substr(at, end - at)));
      at = ranking.find_first_not_of(' ', end);
    }
  }
  for (Planner p : {Planner::Descending, Planner::Ascending}) {
    const Candidate c{GqaMode::SplitHeads, p};
    bool listed = false;
    for (const Candidate& o : out) listed = listed || o == c;
    if (!listed) out.push_back(c);
  }
  return out;
}

constexpr size_t kRows = sizeof(kAutoTable) / sizeof(kAutoTable[0]);

// Quarter-octaves lo / 4 <= log2(max(n, 1)) <= hi / 4, in integer arithmetic: the binary exponent e, then the k of
// 1, 2, 3 with n >= 2^(e + k/4), i.e. n^4 >= 2^(4e + k) (never equal). Equal for a power of two, else hi = lo + 1.
struct Log2Bracket {
  int32_t lo, hi;
};
Log2Bracket log2_bracket(int32_t n) {
  const uint64_t v = uint64_t(std::max(n, 1));
  const int32_t exponent = int32_t(std::bit_width(v)) - 1;
  if ((v & (v - 1)) == 0) return {4 * exponent, 4 * exponent};  // a power of two (has_single_bit: a libgcc call)
  const unsigned __int128 square = (unsigned __int128)(v * v), fourth = square * square;  // v < 2^31: v^4 < 2^124
  int32_t lo = 4 * exponent;
  for (int32_t k = 1; k <= 3; ++k) lo += fourth >= (unsigned __int128)1 << (4 * exponent + k) ? 1 : 0;
  return {lo, lo + 1};
}

// TableIndex::candidates' lists, parsed when first asked for and kept for the process. Static storage, zero until
// then: only the pages of the rows a process takes are ever touched (an array of lists in the index cost 22 kB of
// fresh memory written on its first plan).
std::atomic<const std::vector<Candidate>*> parsed_lists[kRows + 1];

// The table's columns as positions into their distinct values and its rows in blocks of one (mask, head dim, group).
// A row's candidate list is parsed once, when a problem first takes the row (parsed_lists): a process takes a handful
// of the rows, and parsing all of them (thousands of words) was most of a process's first plan_for.
struct TableIndex {
  static constexpr size_t kMaxDistinct = 64;       // per column, and blocks per mask: the table has 2, 4, 12 and 8
  std::vector<int32_t> head_dims, groups, lengths;  // distinct values; lengths serve seqlen_q and seqlen_k
  std::vector<Log2Bracket> length_log2;             // per length
  struct Row {
    uint32_t index;          // in kAutoTable
    uint16_t q, k;           // positions in lengths
  };
  struct Block {
    int32_t mask;
    uint16_t head, group;    // positions in head_dims, groups
    std::vector<Row> rows;   // table order
  };
  std::vector<Block> blocks;  // in order of their first row

  // Row `row`'s list (kRows: the list of no row). Thread-safe: threads that parse a row at once keep the first list.
  const std::vector<Candidate>& candidates(size_t row) const {
    std::atomic<const std::vector<Candidate>*>& slot = parsed_lists[row];
    if (const std::vector<Candidate>* list = slot.load(std::memory_order_acquire)) return *list;
    auto parsed =
        std::make_unique<const std::vector<Candidate>>(candidates_of(row < kRows ? &kAutoTable[row] : nullptr));
    const std::vector<Candidate>* expected = nullptr;
    if (slot.compare_exchange_strong(expected, parsed.get(), std::memory_order_acq_rel)) return *parsed.release();
    return *expected;  // another thread's, parsed at the same time
  }

  // The position of `v` among a column's values, added if new. `hint` (updated): the last position this column gave;
  // it and the next are tried first, since consecutive rows repeat a column's value or step to the next.
  static uint16_t position(std::vector<int32_t>& values, int32_t v, uint16_t& hint) {
    if (hint < values.size() && values[hint] == v) return hint;
    if (size_t(hint) + 1 < values.size() && values[size_t(hint) + 1] == v) return ++hint;
    return hint = position(values, v);
  }
  static uint16_t position(std::vector<int32_t>& values, int32_t v) {
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] == v) return uint16_t(i);
    values.push_back(v);
    if (values.size() > kMaxDistinct) throw std::logic_error("auto_table.inc: more distinct values than kMaxDistinct");
    return uint16_t(values.size() - 1);
  }

  // The rows from `first` on of the same (mask, head dim, group): a block's size if its rows come together.
  static size_t rows_alike(size_t first) {
    const AutoTableRow& r = kAutoTable[first];
    size_t end = first;
    while (end < kRows && kAutoTable[end].mask == r.mask && kAutoTable[end].head_dim == r.head_dim &&
           kAutoTable[end].group_size == r.group_size)
      ++end;
    return end - first;
  }

  // Built on a process's first auto plan: rows of one block come together in the table, so the last block is tried
  // first.
  TableIndex() {
    blocks.reserve(kMaxDistinct);
    uint16_t head_hint = 0, group_hint = 0, q_hint = 0, k_hint = 0;
    for (size_t i = 0; i < kRows; ++i) {
      const AutoTableRow& r = kAutoTable[i];
      const uint16_t head = position(head_dims, r.head_dim, head_hint);
      const uint16_t group = position(groups, r.group_size, group_hint);
      const auto of_row = [&](const Block& b) { return b.mask == r.mask && b.head == head && b.group == group; };
      auto block = !blocks.empty() && of_row(blocks.back()) ? blocks.end() - 1
                                                             : std::find_if(blocks.begin(), blocks.end(), of_row);
      if (block == blocks.end()) {
        block = blocks.insert(blocks.end(), Block{r.mask, head, group, {}});
        block->rows.reserve(rows_alike(i));
      }
      const uint16_t q = position(lengths, r.seqlen_q, q_hint);
      block->rows.push_back({uint32_t(i), q, position(lengths, r.seqlen_k, k_hint)});
    }
    if (blocks.size() > kMaxDistinct) throw std::logic_error("auto_table.inc: more blocks than kMaxDistinct");
    for (int32_t length : lengths) length_log2.push_back(log2_bracket(length));
  }
};

const TableIndex& table_index() {
  static const TableIndex* index = new TableIndex;  // never destroyed: usable from other static destructors
  return *index;
}

std::atomic<int64_t> g_table_scans{0};
std::atomic<int64_t> g_candidate_hits{0};
std::atomic<bool> g_memo_enabled{true};

// The mask's blocks by increasing lower bound (insertion sort: a handful), with their head and group distances. The
// same for every length: each thread keeps the last it took (a pack asks for one, once per distinct length).
struct BlockOrder {
  struct Entry {
    double bound, d_head, d_group;
    const TableIndex::Block* block;
  };
  int32_t mask = -1, head_dim = 0, group = 0;
  size_t count = 0;
  Entry entries[TableIndex::kMaxDistinct];
};

const BlockOrder& block_order(const TableIndex& t, int32_t mask, int32_t head_dim, int32_t group) {
  thread_local BlockOrder last;
  if (last.mask == mask && last.head_dim == head_dim && last.group == group) return last;
  double d_head[TableIndex::kMaxDistinct], d_group[TableIndex::kMaxDistinct];
  for (size_t i = 0; i < t.head_dims.size(); ++i) d_head[i] = std::fabs(log2_distance(head_dim, t.head_dims[i]));
  for (size_t i = 0; i < t.groups.size(); ++i) d_group[i] = std::fabs(log2_distance(group, t.groups[i]));
  last.count = 0;
  for (const TableIndex::Block& b : t.blocks) {
    if (b.mask != mask) continue;
    const BlockOrder::Entry entry{row_distance(d_head[b.head], d_group[b.group], 0.0, 0.0), d_head[b.head],
                                  d_group[b.group], &b};
    size_t at = last.count++;
    for (; at > 0 && last.entries[at - 1].bound > entry.bound; --at) last.entries[at] = last.entries[at - 1];
    last.entries[at] = entry;
  }
  last.mask = mask;
  last.head_dim = head_dim;
  last.group = group;
  return last;
}

// Bounds on |log2_distance(x, v)|, in quarter-octaves, from the brackets of log2 x and log2 v.
struct DistanceBounds {
  int64_t floor, ceil;
};
DistanceBounds distance_bounds(Log2Bracket x, Log2Bracket v) {
  const int64_t lo = x.lo - v.hi, hi = x.hi - v.lo;  // log2 x - log2 v lies in [lo, hi]
  return {lo > 0 ? lo : hi < 0 ? -hi : 0, std::max(std::abs(lo), std::abs(hi))};
}

// The rows of a block that may be the nearest to some problem whose lengths have these log2 brackets (a quarter of
// an octave each, from integer arithmetic). Row r's distance (its block's 1e6 d_head + 1e3 d_group, plus d_q^2 +
// d_k^2) lies within [C + F_r / 16, C + G_r / 16] for the whole numbers F_r and G_r from its length distances'
// bounds; a row with F_r > min G_r is at least 1/16 farther than the row of that minimum for every such problem, far
// beyond any rounding, so it is never the nearest, nor tied with it. Such a list depends on the brackets alone, and a
// pack's shapes come in runs of one bracket: each thread keeps the lists it made last.
class CandidateRows {
 public:
  struct Entry {
    const TableIndex::Block* block = nullptr;
    Log2Bracket q{}, k{};
    std::vector<uint32_t> rows;        // positions in block->rows
    uint64_t q_lengths = 0, k_lengths = 0;  // the lengths (bits: positions in TableIndex::lengths) they read
    int64_t least_ceil = 0;                 // min G_r: the nearest row's length terms are at most least_ceil / 16
  };

  const Entry& of(const TableIndex& t, const TableIndex::Block& block, Log2Bracket q, Log2Bracket k) {
    for (Entry& e : entries_)
      if (e.block == &block && e.q.lo == q.lo && e.q.hi == q.hi && e.k.lo == k.lo && e.k.hi == k.hi) return e;
    Entry& e = entries_[next_++ % kEntries];
    e.block = &block;
    e.q = q;
    e.k = k;
    fill(t, e);
    return e;
  }

 private:
  static constexpr size_t kEntries = 4;

  static void fill(const TableIndex& t, Entry& e) {
    DistanceBounds by_q[TableIndex::kMaxDistinct], by_k[TableIndex::kMaxDistinct];
    for (size_t i = 0; i < t.lengths.size(); ++i) {
      by_q[i] = distance_bounds(e.q, t.length_log2[i]);
      by_k[i] = distance_bounds(e.k, t.length_log2[i]);
    }
    const auto floor_of = [&](const TableIndex::Row& r) {
      return by_q[r.q].floor * by_q[r.q].floor + by_k[r.k].floor * by_k[r.k].floor;
    };
    int64_t least_ceil = std::numeric_limits<int64_t>::max();
    for (const TableIndex::Row& r : e.block->rows)
      least_ceil = std::min(least_ceil, by_q[r.q].ceil * by_q[r.q].ceil + by_k[r.k].ceil * by_k[r.k].ceil);
    e.least_ceil = least_ceil;
    e.rows.clear();
    e.q_lengths = e.k_lengths = 0;
    for (size_t i = 0; i < e.block->rows.size(); ++i) {
      const TableIndex::Row& r = e.block->rows[i];
      if (floor_of(r) > least_ceil) continue;
      e.rows.push_back(uint32_t(i));
      e.q_lengths |= uint64_t(1) << r.q;
      e.k_lengths |= uint64_t(1) << r.k;
    }
  }

  Entry entries_[kEntries];
  size_t next_ = 0;
};

// Whether the scan stops after the first block whatever its nearest row's distance, given that it is at most the
// block's bound plus least_ceil / 16 (CandidateRows; the margins far beyond any rounding): then a first block of one
// candidate row needs no logarithm, that row being the nearest of all.
bool farther_blocks_skipped(const BlockOrder& order, int64_t least_ceil) {
  if (order.count < 2) return true;
  const double upper = (order.entries[0].bound + double(least_ceil) / 16.0) * (1.0 + 1e-12) + 1e-12;
  const double next = order.entries[1].bound;
  return next - 1e-9 * (1.0 + next) > upper;  // nearest_row's test, against a distance it cannot exceed
}

// The row auto_candidates_reference takes (the nearest; the first of equally near ones), as a position in kAutoTable;
// kRows if the mask has none.
//
// Same doubles: every row distance is row_distance of the same four log2_distance values the reference computes for
// that row (taken here once per distinct column value), so each row's distance is bit for bit the reference's.
// Same row: the reference keeps the first row of least distance, i.e. the least (distance, index); this takes the
// least (distance, index) too, visiting the blocks in order of their lower bound 1e6 d_head + 1e3 d_group (adding
// the length terms, which are >= 0, never lowers a rounded sum) and stopping at a block whose bound exceeds the
// best distance found (less a relative margin of 1e-9, far beyond any difference in rounding). In a block it visits
// only the rows that may be the nearest (CandidateRows), and takes a length's logarithm when a row needs it: a few
// of the dozen, which were most of the cost (none when the first block has one such row and the next is farther
// whatever its distance).
size_t nearest_row(const Problem& problem) {
  g_table_scans.fetch_add(1, std::memory_order_relaxed);
  const TableIndex& t = table_index();
  constexpr size_t kMax = TableIndex::kMaxDistinct;
  static_assert(kMax <= 64, "one bit per distinct length");
  double d_q[kMax], d_k[kMax];
  uint64_t have_q = 0, have_k = 0;  // d_q[i], d_k[i] taken
  // Self-attention (most packs) needs one column of logarithms: the same inputs give the same doubles.
  const bool same_lengths = problem.seqlen_q == problem.seqlen_k;
  // The logarithms of the lengths in `wanted` not taken yet, in one loop (independent calls, which overlap).
  const auto take = [&](uint64_t wanted, int32_t length, double* d, uint64_t& have) {
    for (uint64_t left = wanted & ~have; left != 0; left &= left - 1) {
      const int i = std::countr_zero(left);
      d[i] = log2_distance(length, t.lengths[size_t(i)]);
    }
    have |= wanted;
  };
  const Log2Bracket q = log2_bracket(problem.seqlen_q), k = log2_bracket(problem.seqlen_k);
  thread_local CandidateRows candidates;
  const BlockOrder& order = block_order(t, table_mask(problem), problem.head_dim, problem.group_size());
  size_t best = kRows;
  double best_distance = std::numeric_limits<double>::infinity();
  for (size_t o = 0; o < order.count; ++o) {
    const BlockOrder::Entry& e = order.entries[o];
    if (e.bound - 1e-9 * (1.0 + e.bound) > best_distance) break;  // every row here and in later blocks is farther
    const CandidateRows::Entry& rows = candidates.of(t, *e.block, q, k);
    if (o == 0 && rows.rows.size() == 1 && farther_blocks_skipped(order, rows.least_ceil))
      return e.block->rows[rows.rows[0]].index;
    take(same_lengths ? rows.q_lengths | rows.k_lengths : rows.q_lengths, problem.seqlen_q, d_q, have_q);
    if (!same_lengths) take(rows.k_lengths, problem.seqlen_k, d_k, have_k);
    const double* const dk = same_lengths ? d_q : d_k;
    for (const uint32_t position : rows.rows) {
      const TableIndex::Row& row = e.block->rows[position];
      const double distance = row_distance(e.d_head, e.d_group, d_q[row.q], dk[row.k]);
      if (distance < best_distance || (distance == best_distance && row.index < best)) {
        best_distance = distance;
        best = row.index;
      }
    }
  }
  return best;
}

// What auto_candidates reads of a problem.
struct CandidateKey {
  int32_t mask, head_dim, group_size, seqlen_q, seqlen_k;
  bool operator==(const CandidateKey& o) const {
    return mask == o.mask && head_dim == o.head_dim && group_size == o.group_size && seqlen_q == o.seqlen_q &&
           seqlen_k == o.seqlen_k;
  }
};

struct CandidateKeyHash {
  size_t operator()(const CandidateKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int32_t f : {k.mask, k.head_dim, k.group_size, k.seqlen_q, k.seqlen_k})
      h = (h ^ uint32_t(f)) * 1099511628211ull;
    return size_t(h);
  }
};

// Key -> nearest row. Entries are a few dozen bytes; 16384 of them cover every shape of many packs.
using CandidateMemo = detail::LruMemo<CandidateKey, uint32_t, CandidateKeyHash>;
CandidateMemo& candidate_memo() {
  static CandidateMemo* memo = new CandidateMemo(16384);  // never destroyed
  return *memo;
}

}  // namespace

std::vector<Candidate> auto_candidates(const Problem& problem, TileShape tiles) {
  (void)tiles;  // rows are sampled at the kernels' tiles for each head dim; lengths are in tokens
  if (!g_memo_enabled.load(std::memory_order_relaxed)) return detail::auto_candidates_reference(problem, tiles);
  return table_index().candidates(detail::auto_table_row(problem));
}

namespace detail {

std::vector<Candidate> auto_candidates_reference(const Problem& problem, TileShape tiles) {
  (void)tiles;
  g_table_scans.fetch_add(1, std::memory_order_relaxed);
  const int32_t mask = problem.mask == Mask::Window ? DASH_MASK_CAUSAL : int32_t(problem.mask);
  const AutoTableRow* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const AutoTableRow& row : kAutoTable) {
    if (row.mask != mask) continue;
    const double d_head = std::fabs(log2_distance(problem.head_dim, row.head_dim));
    const double d_group = std::fabs(log2_distance(problem.group_size(), row.group_size));
    const double d_q = log2_distance(problem.seqlen_q, row.seqlen_q);
    const double d_k = log2_distance(problem.seqlen_k, row.seqlen_k);
    const double distance = row_distance(d_head, d_group, d_q, d_k);
    if (distance < best_distance) {
      best_distance = distance;
      best = &row;
    }
  }
  return candidates_of(best);
}

uint32_t auto_table_row(const Problem& problem) {
  const CandidateKey key{table_mask(problem), problem.head_dim, problem.group_size(), problem.seqlen_q,
                         problem.seqlen_k};
  bool found = false;
  const uint32_t row = candidate_memo().find_or_insert(key, [&] { return uint32_t(nearest_row(problem)); }, &found);
  if (found) g_candidate_hits.fetch_add(1, std::memory_order_relaxed);
  return row;
}

void set_plan_memo_enabled(bool enabled) { g_memo_enabled.store(enabled, std::memory_order_relaxed); }
bool plan_memo_enabled() { return g_memo_enabled.load(std::memory_order_relaxed); }

void clear_auto_candidates_memo() { candidate_memo().clear(); }

// The auto_candidates half of the statistics; plan.cpp adds its own.
void auto_candidates_memo_stats(PlanMemoStats& stats) {
  stats.table_scans = g_table_scans.load(std::memory_order_relaxed);
  stats.candidate_hits = g_candidate_hits.load(std::memory_order_relaxed);
  stats.candidate_entries = int64_t(candidate_memo().size());
}

}  // namespace detail
}  // namespace dash
