// SPDX-License-Identifier: Apache-2.0
// The planners: each turns one unit's shape into a template of items, segments and visits with dQ ranks.
//
// Every planner works on the same raw material: for each KV tile, the list of accumulator rows it touches,
// (head_in_unit, Q tile) in ascending order. A planner decides (1) how KV tiles are grouped into items and
// in which order items are claimed, (2) the order in which each segment visits its rows, and (3) the rank
// rule: either "claim order" (with one KV tile per item, ascending: FA3's ascending-KV order) or "lock-step
// arrival" (the order contributions would arrive if all items of the unit ran side by side, one visit per
// step; see docs/DEADLOCK.md).
// Nothing here depends on batch size, head count or P: a template is a function of the unit's shape.
#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <memory_resource>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "dash/plan.hpp"
#include "plan_internal.hpp"
#include "planner_internal.hpp"

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

std::optional<Planner> planner_named(std::string_view name) {
  for (Planner p : all_planners())
    if (name == planner_name(p)) return p;
  return std::nullopt;
}

const std::vector<Planner>& all_planners() {
  static const std::vector<Planner> planners = {Planner::Ascending, Planner::Descending, Planner::Shift,
                                                Planner::SymmetricShift};
  return planners;
}

const char* gqa_mode_name(GqaMode mode) {
  return mode == GqaMode::PackGroup              ? "pack"
         : mode == GqaMode::Auto                 ? "auto"
         : mode == GqaMode::AutoNondeterministic ? "auto-nondeterministic"
                                                 : "split";
}

std::optional<GqaMode> gqa_mode_named(std::string_view name) {
  for (GqaMode mode : {GqaMode::SplitHeads, GqaMode::PackGroup, GqaMode::Auto, GqaMode::AutoNondeterministic})
    if (name == gqa_mode_name(mode)) return mode;
  return std::nullopt;
}

// ---- Threads for large templates (also used by validate.cpp, which declares these) ----
// A 128k-token unit holds 1-8M visits: 10-40 ms of building and validating on one core, where a new shape's first
// call should take a few. The visits split into independent parts (by segment, or by lock-step position), so
// both build and validation spread over up to kMaxThreads threads. Small templates stay on the caller's thread,
// and each part gets at least kVisitsPerThread visits (about 0.15 ms of work). On the H200 machine's 16-core host, up
// to 16 threads with 2^16 visits each planned a 128k-token template 1.1-1.3 ms faster than up to 8 with 2^17 (2.1-2.7
// ms against 3.3-4.2, interleaved: bench/results/plan-build-h200host-2026-12-03-threads-8-vs-16.txt); another host
// of the same kind took 3.3-3.9 ms with 16 (plan-build-h200host-2026-12-03-f821e87.jsonl): hosts differ by more.
// The output never depends on the thread count: every part computes exactly what the one-thread walk computes for
// its range, starting from counts derived from everything before it.
namespace detail {
namespace {
constexpr int kMaxThreads = 16;
constexpr int64_t kVisitsPerThread = int64_t(1) << 16; // so threads start at 2^17 visits
std::atomic<int> g_forced_threads{0};

int hardware_threads() {
  static const int hardware = std::clamp(int(std::thread::hardware_concurrency()), 1, kMaxThreads);
  return hardware;
}

// The parts of one run_parallel call. Parts are claimed one at a time by the caller and the workers.
struct Job {
  Job(const std::function<void(int)>& part, int parts) : part(&part), parts(parts), error(std::max(parts, 0)) {}
  const std::function<void(int)>* part;
  int parts;
  std::atomic<int> next{0};
  std::vector<std::exception_ptr> error;  // per part
  int holders = 0;                        // workers that took the job and may still claim (under the pool's mutex)

  void claim_and_run() {
    for (int k; (k = next.fetch_add(1, std::memory_order_relaxed)) < parts;) {
      try {
        (*part)(k);
      } catch (...) {
        error[k] = std::current_exception();
      }
    }
  }
};

// Workers for run_parallel, started on first use and kept, so that a template's four parallel passes wake threads
// instead of starting them (20-50 us each, 100-200 us on a virtual machine). A worker the scheduler starts late (its
// core busy) costs nothing: the caller runs the parts nobody has claimed, and waits only for workers that have taken
// the job, each finishing the part it claimed. Forked children run every part themselves (they have no workers).
class WorkerPool {
 public:
  // false if another caller's job is running: the caller then runs its parts itself.
  bool run(Job& job) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (job_ != nullptr) return false;
    start_workers(std::min(job.parts, hardware_threads()) - 1);
    job_ = &job;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    job.claim_and_run();
    lock.lock();
    job_ = nullptr;  // workers that wake from now on find nothing to take
    released_.wait(lock, [&] { return job.holders == 0; });
    return true;
  }

 private:
  // Called before the job is published: the new workers take it.
  void start_workers(int wanted) {
    for (; workers_ < wanted; ++workers_) {
      try {
        std::thread([this, seen = generation_] { work(seen); }).detach();
      } catch (const std::system_error&) {
        return;  // no more threads to be had: the parts are claimed by those there are
      }
    }
  }

  // `seen`: the last job this worker need not take.
  void work(uint64_t seen) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return job_ != nullptr && generation_ != seen; });
      seen = generation_;
      Job& job = *job_;
      ++job.holders;
      lock.unlock();
      job.claim_and_run();
      lock.lock();
      if (--job.holders == 0) released_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, released_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int workers_ = 0;
};

WorkerPool& pool() {
  static WorkerPool* instance = new WorkerPool;  // never destroyed: its workers wait on it until the process exits
  return *instance;
}
} // namespace

void set_planner_threads(int n) { g_forced_threads.store(std::max(n, 0), std::memory_order_relaxed); }

int planner_threads(int64_t visits) {
  if (const int forced = g_forced_threads.load(std::memory_order_relaxed)) return forced;
  // One thread whatever the hardware below 2 parts' worth: asking the hardware first reads a file (about 20 us of a
  // process's first plan, which a small template does not need).
  const int64_t parts = visits / kVisitsPerThread;
  return parts <= 1 ? 1 : int(std::clamp<int64_t>(parts, 1, hardware_threads()));
}

void run_parallel_on_pool(int parts, const std::function<void(int)>& part) {
  Job job(part, parts);
  if (parts <= 1 || !pool().run(job)) job.claim_and_run();
  for (const std::exception_ptr& e : job.error)
    if (e) std::rethrow_exception(e);
}

void parallel_copy(void* destination, const void* source, size_t bytes) {
  constexpr size_t kMinPartBytes = size_t(256) << 10;  // below this, waking a worker costs more than it copies
  const int parts = int(std::clamp<size_t>(bytes / kMinPartBytes, 1, size_t(hardware_threads())));
  run_parallel(parts, [&](int part) {
    const size_t begin = bytes * size_t(part) / size_t(parts), end = bytes * size_t(part + 1) / size_t(parts);
    std::memcpy(static_cast<char*>(destination) + begin, static_cast<const char*>(source) + begin, end - begin);
  });
}

int32_t first_segment_of_part(const std::vector<dash_segment>& segments, int64_t visits, int part, int parts) {
  if (part >= parts) return int32_t(segments.size());
  const int64_t target = visits * part / parts;
  return int32_t(std::lower_bound(segments.begin(), segments.end(), target,
                                  [](const dash_segment& s, int64_t v) { return s.first_visit < v; }) -
                 segments.begin());
}

int32_t first_position_of_part(std::span<const int32_t> lengths, int part, int parts) {
  int64_t total = 0;
  int32_t longest = 0;
  for (int32_t len : lengths) {
    total += len;
    longest = std::max(longest, len);
  }
  if (part >= parts) return longest;
  // The visits at positions below p number sum(min(length, p)), non-decreasing in p: bisect for the part's share.
  const int64_t target = total * part / parts;
  int32_t lo = 0, hi = longest;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    int64_t below = 0;
    for (int32_t len : lengths) below += std::min(len, mid);
    if (below >= target) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

} // namespace detail

namespace {

// The drafts (a few runs per segment, a few segments per item) and the flattening's counters are Lists in the
// build's arena (planner_internal.hpp).
using detail::List;
using detail::ListArena;
using detail::Memory;
using detail::part_memory;

// One KV tile's accumulator rows: every head of the unit against the Q tiles [q_begin, q_end) the tile sees
// (contiguous for these masks, dash/geometry.hpp), in (head, Q tile) order. The Q tiles [full_begin, full_end)
// see it without a masked pair; the others are partial.
struct KvRows {
  int32_t kv_tile = 0;
  int32_t q_begin = 0, q_end = 0;
  int32_t full_begin = 0, full_end = 0;
  int32_t num_q() const { return q_end - q_begin; }
};

// The raw material of every planner, described rather than listed, so that a planner's cost is its output's; and
// where the planner's drafts live.
struct UnitRows {
  int32_t heads = 1; // heads_per_unit
  List<KvRows> kv; // [KV tile]
  Memory arena = nullptr;
  int64_t count(int32_t kv_tile) const { return int64_t(heads) * kv[kv_tile].num_q(); }
};

// A stretch of a segment's visit order: `count` Q tiles of one head, from q_first up or down.
struct Run {
  int32_t head, q_first, count;
  bool descending;
};
using Runs = List<Run>;

struct SegmentDraft {
  KvRows rows;
  Runs order; // visit order
};

struct ItemDraft {
  List<SegmentDraft> segments;
};

// ClaimOrder: an accumulator's contributions in the order of the visit table (items in claim order). Its waits
// all target earlier tickets. ascending and descending take the KV tiles in ascending order, so theirs is FA3's
// ascending-KV order.
enum class RankRule { ClaimOrder, LockstepArrival };

struct TemplateDraft {
  explicit TemplateDraft(Memory arena) : items(arena) {}
  List<ItemDraft> items; // claim order
  RankRule rank_rule = RankRule::ClaimOrder;
  int32_t rank_spacing = 0;  // dash_plan_header::rank_spacing
  bool chunked = false;      // chunk_lockstep_items dealt the construction's items to fewer (place_lockstep_visits)
  bool generalised = false;
  std::string note;
};

// The rows each KV tile touches. The band's edges are non-decreasing in the row, so the Q tiles that see a KV
// tile unmasked form an interval inside those that see it at all: the partial ones sit at its two ends, and a
// few kind() calls per KV tile find them.
UnitRows rows_by_kv_tile(const Problem& problem, const TileGrid& grid, int32_t heads_per_unit, Memory arena) {
  UnitRows rows{heads_per_unit, List<KvRows>(arena), arena};
  rows.kv.reserve(grid.num_kv_tiles());
  int32_t kv = 0;
  for (const detail::KvTileRows& g : detail::KvTileGeometry(problem, grid).all_rows(arena)) {
    rows.kv.push_back(KvRows{kv, g.q_begin, g.q_end, g.full_begin, g.full_end});
    ++kv;
  }
  return rows;
}

// The rows heads x [q_begin, q_end) in (head, Q tile) order.
Runs ascending(int32_t heads, int32_t q_begin, int32_t q_end, Memory arena) {
  Runs runs(arena);
  if (q_end <= q_begin) return runs;
  runs.reserve(size_t(heads));
  for (int32_t h = 0; h < heads; ++h) runs.push_back({h, q_begin, q_end - q_begin, false});
  return runs;
}

// The same rows, last first.
Runs reversed(Runs runs) {
  std::reverse(runs.begin(), runs.end());
  for (Run& r : runs) {
    r.q_first += r.descending ? 1 - r.count : r.count - 1;
    r.descending = !r.descending;
  }
  return runs;
}

// The rows heads x [q_begin, q_end) in (head, Q tile) order, rotated left by `offset` (mod their number): the
// order starts at the offset-th row and wraps around.
Runs rotated(int32_t heads, int32_t q_begin, int32_t q_end, int64_t offset, Memory arena) {
  const int32_t len = q_end - q_begin;
  if (len <= 0) return Runs(arena);
  const int64_t start = offset % (int64_t(heads) * len);
  const int32_t h0 = int32_t(start / len), q0 = q_begin + int32_t(start % len);
  Runs runs(arena);
  runs.reserve(size_t(heads) + 1);
  runs.push_back({h0, q0, q_end - q0, false});
  for (int32_t k = 1; k < heads; ++k) runs.push_back({(h0 + k) % heads, q_begin, len, false});
  if (q0 > q_begin) runs.push_back({h0, q_begin, q0 - q_begin, false});
  return runs;
}

// The rows of `rows` outside heads x [r_begin, r_end), an interval inside its own (or empty), in (head, Q tile) order.
Runs outside(int32_t heads, const KvRows& rows, int32_t r_begin, int32_t r_end, Memory arena) {
  if (r_end <= r_begin) return ascending(heads, rows.q_begin, rows.q_end, arena);
  Runs runs(arena);
  runs.reserve(2 * size_t(heads));
  for (int32_t h = 0; h < heads; ++h) {
    if (r_begin > rows.q_begin) runs.push_back({h, rows.q_begin, r_begin - rows.q_begin, false});
    if (rows.q_end > r_end) runs.push_back({h, r_end, rows.q_end - r_end, false});
  }
  return runs;
}

// An item of one segment. Its runs are moved in: an initializer list would copy them.
ItemDraft one_segment_item(const KvRows& rows, Runs order) {
  ItemDraft item{List<SegmentDraft>(order.get_allocator())};
  item.segments.reserve(1);
  item.segments.push_back(SegmentDraft{rows, std::move(order)});
  return item;
}

TemplateDraft plan_ascending(const UnitRows& rows) {
  TemplateDraft t(rows.arena);
  t.items.reserve(rows.kv.size());
  for (const KvRows& kv : rows.kv)
    t.items.push_back(one_segment_item(kv, ascending(rows.heads, kv.q_begin, kv.q_end, rows.arena)));
  t.rank_rule = RankRule::ClaimOrder;
  return t;
}

TemplateDraft plan_descending(const UnitRows& rows) {
  TemplateDraft t = plan_ascending(rows);
  for (auto& item : t.items) item.segments[0].order = reversed(std::move(item.segments[0].order));
  return t;
}

// The items of a lock-step plan need all of their unit's items running at once (the unit is its wave,
// docs/DEADLOCK.md). When other kernels hold some SMs and R of the P CTAs run, about floor(R / W) units of W items
// advance together and the CTAs left over hold items that wait for the rest of their unit: with one item per KV
// tile (W = 64 at 8k tokens) the simulator and the H200 both showed a 1.8x slowdown with 8 of 132 SMs held. So a
// unit has at most kMaxLockstepItems items: item j takes the KV tiles (shift) or pairs (symmetric shift) j, j + I,
// j + 2I, ... of the unit's I items, one segment after another. Every item is then in its k-th segment at the same
// steps, with rotation offsets again pairwise distinct, so each segment keeps the lock-step properties of the
// published construction (symmetric shift deals consecutive pairs out where that spaces its dQ chains; see
// plan_symmetric_shift). 16 gave the lowest simulated undisturbed makespan of 8-32 on the protocol's 8k shapes
// (3-8% below unchunked) and 1.25x instead of 1.3-1.8x with 8 of 132 SMs held (docs/benchmarks.md).
constexpr size_t kMaxLockstepItems = 16;

// How chunk_lockstep_items deals the template's items out: item j takes items j, j + I, ... (interleaved), or the S
// consecutive items j S, ..., j S + S - 1 (blocked; S items per chunked item, so at most I of them).
enum class Chunking { Interleaved, Blocked };

// The template items each chunked item takes (at most): `items` dealt to kMaxLockstepItems.
size_t chunked_per_item(size_t items) { return (items + kMaxLockstepItems - 1) / kMaxLockstepItems; }

void chunk_lockstep_items(TemplateDraft& t, const char* unit_of_item, Chunking chunking = Chunking::Interleaved) {
  if (t.items.size() <= kMaxLockstepItems) return;
  const size_t per_item = chunked_per_item(t.items.size());
  const size_t count = chunking == Chunking::Blocked ? (t.items.size() + per_item - 1) / per_item : kMaxLockstepItems;
  List<ItemDraft> chunked(t.items.get_allocator());
  chunked.reserve(count);
  for (size_t i = 0; i < count; ++i)
    chunked.push_back(ItemDraft{List<SegmentDraft>(t.items.get_allocator())});
  for (size_t i = 0; i < t.items.size(); ++i) {
    auto& segments = chunked[chunking == Chunking::Blocked ? i / per_item : i % kMaxLockstepItems].segments;
    segments.insert(segments.end(), std::make_move_iterator(t.items[i].segments.begin()),
                    std::make_move_iterator(t.items[i].segments.end()));
  }
  t.items = std::move(chunked);
  t.chunked = true;
  t.generalised = true;
  t.note += std::string(t.note.empty() ? "" : "; ") + "up to " + std::to_string(per_item) + " " + unit_of_item +
            " per item, so that a unit has at most " + std::to_string(kMaxLockstepItems) +
            " items in lock-step (its wave)";
}

// Where chunk_lockstep_items splits a full-mask shift template, its lock-step items start kRankSpacing rows apart.
// With the published offsets (KV tile n starts at its n-th row) the 16 items of a segment visit 16 consecutive rows
// at each step, so a dQ tile's consecutive ranks come one visit apart and each hand-off (staged partial, turn, bulk
// add to completion, release) has one visit to finish in; a kernel whose hand-off leaves a visit late then makes
// every chain wait. Under the full mask every KV tile has the same R rows, and item j of every segment may start at
// row kRankSpacing * j: the 16 offsets stay pairwise distinct while 16 * kRankSpacing <= R (no two items visit one
// dQ tile at a step), and all visits of a row fall on steps of one residue mod kRankSpacing, which divides R (a
// segment's length), so consecutive visits of a row lie kRankSpacing steps apart or more, across segments too.
constexpr int32_t kRankSpacing = 2;

// A chunked template whose construction spaces its dQ chains (`how`) promises kRankSpacing and says so in its note.
void mark_spaced(TemplateDraft& t, const std::string& how) {
  t.rank_spacing = kRankSpacing;
  t.note += "; " + how + ", so that a dQ tile's consecutive adds come " + std::to_string(kRankSpacing) +
            " visits apart";
}

TemplateDraft plan_shift(const UnitRows& rows, Mask mask) {
  // KV tile n starts at its n-th row and wraps. With the full mask and at least as many Q tiles as KV
  // tiles, the items touch pairwise distinct dQ tiles at every lock-step, so no contribution ever waits.
  TemplateDraft t(rows.arena);
  const int64_t row_count = rows.kv.empty() ? 0 : rows.count(0);  // every KV tile's, under the full mask
  const bool spaced = mask == Mask::Full && rows.kv.size() > kMaxLockstepItems &&
                      row_count % kRankSpacing == 0 && int64_t(kMaxLockstepItems) * kRankSpacing <= row_count;
  int64_t max_rows = 0;
  t.items.reserve(rows.kv.size());
  for (const KvRows& kv : rows.kv) {
    // kv_tile is the item's index here, so kv_tile % kMaxLockstepItems is its lock-step item once chunked.
    const int64_t offset = spaced ? int64_t(kRankSpacing) * (kv.kv_tile % int64_t(kMaxLockstepItems)) : kv.kv_tile;
    t.items.push_back(one_segment_item(kv, rotated(rows.heads, kv.q_begin, kv.q_end, offset, rows.arena)));
    max_rows = std::max(max_rows, rows.count(kv.kv_tile));
  }
  t.rank_rule = RankRule::LockstepArrival;
  if (mask != Mask::Full) {
    t.generalised = true;
    t.note = "shift is built for the full mask; with this mask each KV tile rotates within its own Q range, "
             "so lock-step collisions (and waits) are possible";
  } else if (max_rows < int64_t(rows.kv.size())) {
    t.generalised = true;
    t.note = "fewer Q tiles than KV tiles: KV tiles n and n + #Q collide at every lock-step";
  }
  chunk_lockstep_items(t, "KV tiles");
  if (spaced) mark_spaced(t, "the items of a segment start " + std::to_string(kRankSpacing) + " Q tiles apart");
  return t;
}

TemplateDraft plan_symmetric_shift(const UnitRows& rows, Mask mask) {
  // Pair the i-th longest KV tile with the i-th shortest so every item carries about the same work
  // (causal: K_i with K_{N-1-i}, N+1 Q tiles each). The long ("big") side first visits the rows all big
  // sides share (the dense rectangle), rotated by its pair index as in shift scheduling, then its own
  // remaining rows ascending; the short side visits its rows descending. Ranks follow lock-step arrival,
  // which for the paper's shapes reproduces its orders: big sides in shift order, then small sides.
  const int32_t n = int32_t(rows.kv.size());
  List<int32_t> by_length(size_t(n), rows.arena);
  std::iota(by_length.begin(), by_length.end(), 0);
  const auto longer = [&](int32_t a, int32_t b) { return rows.kv[a].num_q() > rows.kv[b].num_q(); };
  // Stable, so the order is one: a few dozen tiles are sorted in place (std::stable_sort allocates a buffer).
  if (n <= 64) {
    for (int32_t i = 1; i < n; ++i)
      for (int32_t j = i; j > 0 && longer(by_length[j], by_length[j - 1]); --j)
        std::swap(by_length[j], by_length[j - 1]);
  } else {
    std::stable_sort(by_length.begin(), by_length.end(), longer);
  }
  const int32_t pairs = n / 2;

  // Every KV tile's rows are all heads against an interval of Q tiles, so the rows all big sides share are all
  // heads against the intersection of their intervals.
  int32_t rect_begin = 0, rect_end = 0;
  for (int32_t k = 0; k < pairs; ++k) {
    const KvRows& big = rows.kv[by_length[k]];
    rect_begin = k == 0 ? big.q_begin : std::max(rect_begin, big.q_begin);
    rect_end = k == 0 ? big.q_end : std::min(rect_end, big.q_end);
  }

  TemplateDraft t(rows.arena);
  t.rank_rule = RankRule::LockstepArrival;
  t.items.reserve(size_t(pairs) + 1);
  for (int32_t k = 0; k < pairs; ++k) {
    const KvRows& big_rows = rows.kv[by_length[k]];
    const KvRows& small_rows = rows.kv[by_length[n - 1 - k]];
    SegmentDraft big{big_rows, rotated(rows.heads, rect_begin, rect_end, k, rows.arena)};
    const Runs rest = outside(rows.heads, big_rows, rect_begin, rect_end, rows.arena);
    big.order.reserve(big.order.size() + rest.size());
    big.order.insert(big.order.end(), rest.begin(), rest.end());
    SegmentDraft small{small_rows,
                       reversed(ascending(rows.heads, small_rows.q_begin, small_rows.q_end, rows.arena))};
    // Moved in (an initializer list copies), into lists of the arena.
    List<SegmentDraft>& segments = t.items.emplace_back(ItemDraft{List<SegmentDraft>(rows.arena)}).segments;
    segments.reserve(2);
    segments.push_back(std::move(big));
    segments.push_back(std::move(small));
  }
  if (n % 2 == 1) {
    const KvRows& middle = rows.kv[by_length[pairs]];
    t.items.push_back(
        one_segment_item(middle, reversed(ascending(rows.heads, middle.q_begin, middle.q_end, rows.arena))));
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
  // Chunked causal templates of a square tile grid whose pairs (P) and pairs per item (S) are even deal the pairs out
  // in blocks, so that a dQ tile's consecutive adds come 2 visits apart (the staggered kernel's late hand-off then
  // finds its chain's next add a visit away; see kRankSpacing). The argument, with N = 2P KV tiles, KV tile n's rows
  // all heads x [n, N), H heads per unit, and pair k (KV tiles k and N - 1 - k) in segment k % S of item k / S:
  // - every item spends H (N + 1) steps per segment, so all items are in segment s at the same steps;
  // - in a segment, item k visits the rectangle (H x [P - 1, N)) rotated by k in its first H (P + 1) steps, its other
  //   rows below P - 1 in the next ones, and its short side (rows from N - 1 - k >= P) from step H (2P - k) >=
  //   H (P + 1) on: so two items meet on a dQ tile only in the same phase; there the pairs of a segment differ by a
  //   multiple of S in k, and their visits of a tile by (h + 1) times that (rotation: |k - k'| < H (P + 1) - 1), >= 2;
  // - across segments only the last step of segment s (item k at row N - 1 - k, head 0) and the first of s + 1 (item
  //   k' at row P - 1 + k', head 0) are 1 apart; they meet iff k + k' = P, with k = j S + s and k' = j' S + s + 1,
  //   i.e. (j + j') S + 2s + 1 = P: odd against even.
  // tests/cpu/test_planners.cpp checks it on the tables; elsewhere (S odd, P odd, other masks) the interleaved deal.
  const auto rows_from_own_tile = [&](const KvRows& kv) { return kv.q_begin == kv.kv_tile && kv.q_end == n; };
  const bool spaced = mask == Mask::Causal && n % 2 == 0 && size_t(pairs) > kMaxLockstepItems && pairs % 2 == 0 &&
                      chunked_per_item(size_t(pairs)) % 2 == 0 &&
                      std::all_of(rows.kv.begin(), rows.kv.end(), rows_from_own_tile);  // KV tile n's rows: [n, N)
  chunk_lockstep_items(t, "pairs", spaced ? Chunking::Blocked : Chunking::Interleaved);
  if (spaced) mark_spaced(t, "each item takes consecutive pairs");
  return t;
}

// Counts contributions per accumulator from runs: each adds one to a range of accumulators, counted as
// differences and summed at the end. add_run(r, k) counts the first k visits of r.
class ContributionCounter {
 public:
  ContributionCounter(size_t accumulators, int32_t num_q, Memory memory)
      : added_(accumulators + 1, 0, memory), num_q_(num_q) {}
  void add_run(const Run& r, int32_t k) {
    const size_t lowest = size_t(r.head) * num_q_ + (r.descending ? r.q_first - k + 1 : r.q_first);
    ++added_[lowest];
    --added_[lowest + k];
  }
  template <class Counts>
  Counts counts(Counts c) const {
    c.resize(added_.size() - 1);
    int32_t running = 0;
    for (size_t a = 0; a < c.size(); ++a) c[a] = uint16_t(running += added_[a]);
    return c;
  }

 private:
  List<int32_t> added_;
  int32_t num_q_;
};

// Lays out the tables: items and segments in claim order with their visit ranges, each accumulator's number
// of contributions, and the longest item. Returns the number of visits.
int32_t lay_out(const TemplateDraft& draft, int32_t num_q, int32_t heads_per_unit, Plan& plan, Memory arena) {
  plan.items.clear();
  plan.segments.clear();
  size_t segments = 0;
  for (const ItemDraft& item : draft.items) segments += item.segments.size();
  plan.items.reserve(draft.items.size());
  plan.segments.reserve(segments);
  ContributionCounter contributions(size_t(heads_per_unit) * num_q, num_q, arena);
  int32_t next_visit = 0, max_visits = 0;
  for (const ItemDraft& item : draft.items) {
    plan.items.push_back({int32_t(plan.segments.size()), int32_t(item.segments.size())});
    const int32_t item_begin = next_visit;
    for (const SegmentDraft& seg : item.segments) {
      int32_t count = 0;
      for (const Run& r : seg.order) {
        contributions.add_run(r, r.count);
        count += r.count;
      }
      plan.segments.push_back({seg.rows.kv_tile, next_visit, count, 0});
      next_visit += count;
    }
    max_visits = std::max(max_visits, next_visit - item_begin);
  }
  plan.dq_count = contributions.counts(std::vector<uint16_t>());
  plan.header.max_visits_per_item = max_visits;
  return next_visit;
}

// Hands out each accumulator's ranks in the order its visits are passed, with the FIRST / LAST flags, counting
// from `start` (the contributions that come earlier in the order, handed out by other threads).
class RankCounter {
 public:
  RankCounter(const Plan& plan, int32_t num_q, List<uint16_t> start)
      : count_(plan.dq_count.data()), next_(std::move(start)), num_q_(num_q) {}
  dash_visit ranked(dash_visit vis) {
    const size_t a = size_t(vis.head_in_unit) * num_q_ + vis.q_tile;
    const int32_t r = next_[a]++;
    vis.dq_rank = uint16_t(r);
    vis.flags |= (r == 0 ? DASH_VISIT_FIRST : 0) | (r + 1 == count_[a] ? DASH_VISIT_LAST : 0);
    return vis;
  }

 private:
  const uint16_t* count_;
  List<uint16_t> next_;
  int32_t num_q_;
};

// Writes visits from..from + count - 1 of run `r` of the segment from `out` on, each passed through `rank` (which may
// leave it unranked), and returns the end.
template <typename Rank>
dash_visit* write_run(const SegmentDraft& seg, const Run& r, int32_t from, int32_t count, dash_visit* out, Rank&& rank) {
  // Q tiles outside [full_begin, full_end) are partial: one unsigned comparison.
  const int32_t full_begin = seg.rows.full_begin;
  const uint32_t full_count = uint32_t(seg.rows.full_end - full_begin);
  const int32_t step = r.descending ? -1 : 1;
  const uint8_t head = uint8_t(r.head);
  int32_t q = r.q_first + step * from;
  for (dash_visit* const end = out + count; out < end; ++out, q += step) {
    const uint8_t flags = uint32_t(q - full_begin) >= full_count ? DASH_VISIT_PARTIAL_MASK : 0;
    *out = rank(dash_visit{uint16_t(q), 0, head, flags, 0});
  }
  return out;
}

// One item's visits in its order, read from its drafts' runs rather than from a table.
class ItemWalk {
 public:
  // Positioned at the item's visit `skip`.
  ItemWalk(const ItemDraft& item, int32_t skip) : item_(&item) {
    for (; segment_ < item.segments.size(); ++segment_, run_ = 0)
      for (; run_ < item.segments[segment_].order.size(); ++run_) {
        const int32_t count = item.segments[segment_].order[run_].count;
        if (skip < count) {
          taken_ = skip;
          return;
        }
        skip -= count;
      }
  }
  // Writes the next n visits (unranked; the item has them) from `out` on.
  void take(int32_t n, dash_visit* out) {
    while (n > 0) {
      const SegmentDraft& seg = item_->segments[segment_];
      const Run& r = seg.order[run_];
      const int32_t k = std::min(n, r.count - taken_);
      out = write_run(seg, r, taken_, k, out, [](dash_visit v) { return v; });
      n -= k;
      taken_ += k;
      if (taken_ == r.count) {  // next run, of this segment or the next with any
        taken_ = 0;
        if (++run_ == seg.order.size()) {
          run_ = 0;
          do ++segment_;
          while (segment_ < item_->segments.size() && item_->segments[segment_].order.empty());
        }
      }
    }
  }

 private:
  const ItemDraft* item_;
  size_t segment_ = 0, run_ = 0;
  int32_t taken_ = 0;  // visits of the current run written
};

// Where the visits of a lock-step template go in the table: those of item i at positions [cuts[k], cuts[k + 1]) from
// begin[k * W + i] on (W items). A template cut into slots (place_lockstep_visits) has a cut at each slot's first
// position; an uncut one has the one piece [0, INT32_MAX) per item. `lengths`: each item's visits.
struct LockstepPlacement {
  std::vector<int32_t> cuts;
  std::vector<int32_t> begin;
  std::vector<int32_t> lengths;
};

// Lock-step arrival: the visit at position p of item i arrives at time (p, i), and ranks are handed out in that
// order; this writes positions [from, to) of every item, ranked. Consecutive arrivals lie an item apart in the visit
// table (items of equal length a power of two bytes apart, so that a direct walk thrashes a few cache sets): the walk
// writes the next (up to) kChunk visits of every item still running into one buffer, ranks them there step by step, and
// copies them out to their places. Each visit is written once, where writing the table and ranking it in place read it
// back.
void write_by_arrival(const TemplateDraft& draft, const LockstepPlacement& place, Plan& plan, RankCounter& ranks,
                      int32_t from, int32_t to, Memory memory) {
  constexpr int32_t kChunk = 32;
  struct Running {
    ItemWalk walk;
    int32_t item, length;  // the item's index, and its length cut at `to`
    size_t piece;          // the piece (place.cuts) its next copy starts in
  };
  const std::vector<int32_t>& lengths = place.lengths;
  const size_t width = lengths.size();
  List<Running> running(memory);  // the items still running, in claim order
  running.reserve(width);
  size_t first_piece = 0;
  while (place.cuts[first_piece + 1] <= from) ++first_piece;
  for (size_t i = 0; i < width; ++i)
    if (lengths[i] > from)
      running.push_back({ItemWalk(draft.items[i], from), int32_t(i), std::min(lengths[i], to), first_piece});
  // Chunks no longer than the longest item: a pack's short items would leave most of a full chunk unused.
  int32_t longest = 0;
  for (const Running& r : running) longest = std::max(longest, r.length);
  const int32_t chunk = std::min(kChunk, longest - from);
  List<dash_visit> buffer(running.size() * size_t(std::max(chunk, 0)), memory);
  for (int32_t base = from; !running.empty(); base += chunk) {
    int32_t steps = 0;  // up to the longest item's end: short items (a pack's) end well within a chunk
    for (size_t k = 0; k < running.size(); ++k) {
      running[k].walk.take(std::min(chunk, running[k].length - base), &buffer[k * chunk]);
      steps = std::max(steps, std::min(chunk, running[k].length - base));
    }
    for (int32_t step = 0; step < steps; ++step)
      for (size_t k = 0; k < running.size(); ++k)
        if (base + step < running[k].length) buffer[k * chunk + step] = ranks.ranked(buffer[k * chunk + step]);
    size_t kept = 0;
    for (size_t k = 0; k < running.size(); ++k) {
      Running& r = running[k];
      for (int32_t at = base, end = std::min(base + chunk, r.length); at < end;) {  // piece by piece
        while (place.cuts[r.piece + 1] <= at) ++r.piece;
        const int32_t n = std::min(end, place.cuts[r.piece + 1]) - at;
        std::copy_n(&buffer[k * chunk + (at - base)], n,
                    &plan.visits[place.begin[r.piece * width + r.item] + (at - place.cuts[r.piece])]);
        at += n;
      }
      if (base + chunk < r.length) running[kept++] = r;
    }
    running.erase(running.begin() + kept, running.end());
  }
}

// Tables of 2 MB and more are often fresh pages from the kernel (the allocator maps large allocations afresh), which
// prefault() faults in.
constexpr int32_t kPrefaultVisits = int32_t(1) << 18;

// Faults in the pages of [begin, end), storage about to be written. Linux (5.14 on) does it in one call, about
// twice as fast as a fault per page, and quickly for pages already there; elsewhere, if `touch`, a byte is
// written to every page (threads then share the faults), else the first writes fault them in as usual.
void prefault(char* begin, char* end, bool touch) {
  constexpr uintptr_t kPage = 4096;
#ifdef __linux__
  constexpr int kPopulateWrite = 23; // MADV_POPULATE_WRITE, which older headers lack
  const uintptr_t first = (uintptr_t(begin) + kPage - 1) & ~(kPage - 1), last = uintptr_t(end) & ~(kPage - 1);
  if (first < last && madvise(reinterpret_cast<void*>(first), last - first, kPopulateWrite) == 0) return;
#endif
  // The storage holds no visits yet (TableAllocator leaves them uninitialised): any byte will do.
  if (touch)
    for (char* p = begin; p < end; p += kPage) *p = 0;
}

// Each accumulator's contributions in the segments before `first` (table order). The first part has none to count.
List<uint16_t> claims_before(const List<const SegmentDraft*>& drafts, int32_t first, size_t accumulators, int32_t num_q,
                             Memory memory) {
  if (first == 0) return List<uint16_t>(accumulators, 0, memory);
  ContributionCounter before(accumulators, num_q, memory);
  for (int32_t s = 0; s < first; ++s)
    for (const Run& r : drafts[s]->order) before.add_run(r, r.count);
  return before.counts(List<uint16_t>(memory));
}

// Each accumulator's arrivals before lock-step position `from`: the first `from` visits of every item. The first
// part has none to count.
List<uint16_t> arrivals_before(const TemplateDraft& draft, int32_t from, size_t accumulators, int32_t num_q,
                               Memory memory) {
  if (from == 0) return List<uint16_t>(accumulators, 0, memory);
  ContributionCounter before(accumulators, num_q, memory);
  for (const ItemDraft& item : draft.items) {
    int32_t left = from;
    for (const SegmentDraft& seg : item.segments)
      for (const Run& r : seg.order) {
        const int32_t k = std::min(left, r.count);
        if (k > 0) before.add_run(r, k);
        left -= k;
      }
  }
  return before.counts(List<uint16_t>(memory));
}

// Fills the visit table laid out by lay_out (`total` visits) and assigns every visit its rank in its accumulator's
// order. With several threads, each writes a run of whole segments (claim order) or a range of lock-step positions of
// every item (lock-step arrival); a part's counters start at what the parts before it contribute, so every rank is the
// one-thread one.
void fill_visits(const TemplateDraft& draft, const LockstepPlacement& place, const TileGrid& grid, int32_t total,
                 Plan& plan, Memory arena) {
  const int32_t num_q = grid.num_q_tiles();
  const size_t accumulators = plan.dq_count.size();
  List<const SegmentDraft*> drafts(arena); // table order
  drafts.reserve(plan.segments.size());
  for (const ItemDraft& item : draft.items)
    for (const SegmentDraft& seg : item.segments) drafts.push_back(&seg);
  const int threads = detail::planner_threads(total);
  const Memory memory = part_memory(arena, threads);

  // Every visit is written below, so the table is not zero-filled first (TableAllocator). A large table is fresh
  // memory from the kernel, and faulting its pages in one by one as they are first written costs as much as writing
  // them: fault them in first, in one call per part where the kernel can.
  plan.visits.resize(size_t(total));
  if (total >= kPrefaultVisits) {
    char* bytes = reinterpret_cast<char*>(plan.visits.data());
    const size_t size = size_t(total) * sizeof(dash_visit);
    detail::run_parallel(threads, [&](int part) {
      prefault(bytes + size * part / threads, bytes + size * (part + 1) / threads, threads > 1);
    });
  }

  if (draft.rank_rule == RankRule::ClaimOrder) {
    detail::run_parallel(threads, [&](int part) {
      const int32_t first = detail::first_segment_of_part(plan.segments, total, part, threads);
      const int32_t end = detail::first_segment_of_part(plan.segments, total, part + 1, threads);
      RankCounter ranks(plan, num_q, claims_before(drafts, first, accumulators, num_q, memory));
      for (int32_t s = first; s < end; ++s) {
        dash_visit* out = plan.visits.data() + plan.segments[s].first_visit;
        for (const Run& r : drafts[s]->order)
          out = write_run(*drafts[s], r, 0, r.count, out, [&](dash_visit v) { return ranks.ranked(v); });
      }
    });
    return;
  }

  // Ranks follow arrival along the draft's lock-step items, uncut; `place` says where their visits go (plan.items
  // may hold them cut into slots).
  detail::run_parallel(threads, [&](int part) {
    const int32_t from = detail::first_position_of_part(place.lengths, part, threads);
    const int32_t to = detail::first_position_of_part(place.lengths, part + 1, threads);
    if (from >= to) return;
    RankCounter ranks(plan, num_q, arrivals_before(draft, from, accumulators, num_q, memory));
    write_by_arrival(draft, place, plan, ranks, from, to, memory);
  });
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

bool auto_may_pack(const Problem& problem, TileShape tiles) {
  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(problem.head_dim);
  const TileGrid grid(problem, tiles);
  return int64_t(problem.group_size()) * grid.num_q_tiles() * grid.num_kv_tiles() <= kAutoPackMaxBlocks;
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
  const GqaMode required = is_auto(mode) ? GqaMode::SplitHeads : mode;
  if (const auto violation = plan_limit_violation(problem, tiles, required, num_ctas))
    throw Error(violation->field, violation->message);
}

int64_t planner_runs() { return g_planner_runs.load(std::memory_order_relaxed); }

namespace detail {

// A unit template between its two phases: the planner's draft (its lists in `arena`), the tile grid, and the plan with
// everything but the visit table.
struct UnitDraft {
  explicit UnitDraft(const Problem& problem, TileShape tiles) : grid(problem, tiles), draft(arena.get()) {}
  ListArena arena;  // first: the draft's lists live in it
  TileGrid grid;
  TemplateDraft draft;
  Plan plan;        // visits empty; header.visits_per_unit is the table's length
  LockstepPlacement place;  // a lock-step template's: where fill_visits writes its visits
};

void UnitDraftDeleter::operator()(UnitDraft* draft) const noexcept { delete draft; }

// Where a lock-step template's visits go (fill_visits): in a chunked template whose items all start a segment at the
// same lock-step positions, the items are cut there (plan_format.h, "Slots") and listed slot by slot: slot k of
// items 0 .. W-1, then slot k + 1, with the segment table in that order (the visit table is written in it). The
// visits and their ranks are the uncut template's, so are the bits. Cut, the CTAs that a last round of whole units
// would leave idle take other units' slots (bind_header's group). Other templates keep their items, one piece each.
LockstepPlacement place_lockstep_visits(Plan& plan, bool chunked) {
  const size_t w = plan.items.size();
  LockstepPlacement uncut{{0, INT32_MAX}, {}, {}};
  std::vector<std::vector<int32_t>> cuts(w);  // per item: visits before each of its segments, then its length
  for (size_t i = 0; i < w; ++i) {
    const dash_item& item = plan.items[i];
    const int32_t begin = plan.segments[item.first_segment].first_visit;
    uncut.begin.push_back(begin);
    for (int32_t s = 0; s < item.num_segments; ++s)
      cuts[i].push_back(plan.segments[item.first_segment + s].first_visit - begin);
    const dash_segment& last = plan.segments[item.first_segment + item.num_segments - 1];
    cuts[i].push_back(last.first_visit + last.num_visits - begin);
    uncut.lengths.push_back(cuts[i].back());
  }
  if (!chunked || w < 2) return uncut;
  std::vector<int32_t> common = cuts[0];  // positions every item has a cut at (the last: every item's length)
  for (size_t i = 1; i < w; ++i) {
    std::vector<int32_t> both;
    std::set_intersection(common.begin(), common.end(), cuts[i].begin(), cuts[i].end(), std::back_inserter(both));
    common = std::move(both);
  }
  if (common.size() < 3 || common.back() != cuts[0].back()) return uncut;  // one slot, or unequal lengths
  for (size_t i = 1; i < w; ++i)
    if (cuts[i].back() != common.back()) return uncut;
  LockstepPlacement place{common, {}, std::move(uncut.lengths)};
  std::vector<dash_item> items;
  std::vector<dash_segment> segments;
  segments.reserve(plan.segments.size());
  int32_t next_visit = 0, max_visits = 0;
  for (size_t k = 0; k + 1 < common.size(); ++k) {
    max_visits = std::max(max_visits, common[k + 1] - common[k]);
    for (size_t i = 0; i < w; ++i) {
      const auto a = std::lower_bound(cuts[i].begin(), cuts[i].end(), common[k]) - cuts[i].begin();
      const auto b = std::lower_bound(cuts[i].begin(), cuts[i].end(), common[k + 1]) - cuts[i].begin();
      items.push_back({int32_t(segments.size()), int32_t(b - a)});
      place.begin.push_back(next_visit);
      for (auto s = a; s < b; ++s) {
        dash_segment seg = plan.segments[size_t(plan.items[i].first_segment + s)];
        seg.first_visit = next_visit;
        next_visit += seg.num_visits;
        segments.push_back(seg);
      }
    }
  }
  plan.items = std::move(items);
  plan.segments = std::move(segments);
  plan.header.items_per_unit = int32_t(plan.items.size());
  plan.header.items_per_slot = int32_t(w);
  plan.header.max_visits_per_item = max_visits;
  return place;
}

UnitDraftPtr draft_unit(const Problem& problem, Planner planner, TileShape tiles, GqaMode gqa_mode, int32_t num_ctas) {
  if (is_auto(gqa_mode)) throw Error("gqa_mode", "auto is a request for build_plan, which resolves it");
  problem.validate();
  if (tiles.block_m == 0 && tiles.block_n == 0) tiles = default_backward_tiles(problem.head_dim);
  check_plan_limits(problem, tiles, gqa_mode, num_ctas);
  g_planner_runs.fetch_add(1, std::memory_order_relaxed);
  UnitDraftPtr out(new UnitDraft(problem, tiles));
  const TileGrid& grid = out->grid;
  const int32_t group = problem.group_size();
  const int32_t heads_per_unit = gqa_mode == GqaMode::PackGroup ? group : 1;
  const Memory arena = out->arena.get();

  const auto rows = rows_by_kv_tile(problem, grid, heads_per_unit, arena);
  TemplateDraft& draft = out->draft;
  switch (planner) {
    case Planner::Ascending: draft = plan_ascending(rows); break;
    case Planner::Descending: draft = plan_descending(rows); break;
    case Planner::Shift: draft = plan_shift(rows, problem.mask); break;
    case Planner::SymmetricShift: draft = plan_symmetric_shift(rows, problem.mask); break;
    default: throw Error("planner", "unknown planner " + std::to_string(int(planner)));
  }

  Plan& plan = out->plan;
  dash_plan_header& h = plan.header;
  h.magic = DASH_PLAN_MAGIC;
  h.version = DASH_PLAN_FORMAT_VERSION;
  h.flags = draft.generalised ? DASH_PLAN_GENERALISED : 0;
  h.rank_spacing = draft.rank_spacing;
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
  h.visits_per_unit = lay_out(draft, grid.num_q_tiles(), heads_per_unit, plan, arena);
  h.items_per_unit = int32_t(plan.items.size());
  h.segments_per_unit = int32_t(plan.segments.size());
  if (draft.rank_rule == RankRule::LockstepArrival) out->place = place_lockstep_visits(plan, draft.chunked);
  plan.group_head_by_rank.resize(group);
  std::iota(plan.group_head_by_rank.begin(), plan.group_head_by_rank.end(), uint8_t(0));
  plan.note = draft.note;
  return out;
}

const Plan& drafted_layout(const UnitDraft& draft) { return draft.plan; }

// Claim-order ranks make every wait target the same or an earlier item (an accumulator's previous visit comes earlier
// in the table), so no co-residency is needed; lock-step ranks make items wait on items of their own unit only (the
// accumulators are a unit's), whose tickets are consecutive: at most a unit's items need to run at once; in a
// template cut into slots, a slot's (a visit waits on the same or an earlier lock-step position, so on its own slot's
// items or an earlier slot's).
int32_t drafted_wave_bound(const UnitDraft& draft) {
  return draft.draft.rank_rule == RankRule::ClaimOrder ? 1 : std::max(slot_items(draft.plan.header), 1);
}

Plan fill_unit(UnitDraftPtr draft) {
  fill_visits(draft->draft, draft->place, draft->grid, draft->plan.header.visits_per_unit, draft->plan,
              draft->arena.get());
  return std::move(draft->plan);
}

}  // namespace detail

Plan build_unvalidated(const Problem& problem, Planner planner, TileShape tiles, GqaMode gqa_mode,
                       int32_t num_ctas) {
  using namespace detail;
  return fill_unit(draft_unit(problem, planner, tiles, gqa_mode, num_ctas));
}

} // namespace dash
