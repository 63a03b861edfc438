// SPDX-License-Identifier: Apache-2.0
// plan_internal.hpp — what plan.cpp, auto_table.cpp and varlen.cpp share privately (not installed), and the hooks the
// tests use to compare the memoised schedule resolution with the computation it replaces.
//
// Two memos make a repeat request cost a hash look-up (plan_for_pack asks auto's row of every distinct sequence shape,
// ~800 in a pack of ~800 distinct lengths, and plan_for once per resolution class, a few dozen there):
//   - auto_candidates: the table row nearest to (mask, head dim, group, seqlen_q, seqlen_k), per such tuple;
//   - plan_for: which candidates a request tried and the one it chose (template keys and the note), per request
//     (every field of the problem, tiles, P, GQA mode and schedule; not auto-fastest, which simulates).
// Both hold small values only (no templates: the template cache alone decides which tables stay), are bounded
// (least recently used first out), are guarded by a mutex, and are cleared by clear_template_cache().
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "dash/plan.hpp"
#include "planner_internal.hpp"  // GeometryClass

namespace dash::detail {

// A unit template in two phases (the template cache's asynchronous builds, plan_for_async): draft_unit runs the planner
// and lays the tables out (items, segments, contribution counts and every header count: work in the segments and
// runs, microseconds to a fraction of a millisecond); fill_unit writes and ranks the visit table (a large template's
// milliseconds). build_unvalidated is the two in a row.
struct UnitDraft;
struct UnitDraftDeleter {
  void operator()(UnitDraft* draft) const noexcept;
};
using UnitDraftPtr = std::unique_ptr<UnitDraft, UnitDraftDeleter>;
// build_unvalidated's arguments and checks.
UnitDraftPtr draft_unit(const Problem& problem, Planner planner, TileShape tiles, GqaMode gqa_mode, int32_t num_ctas);
// The drafted plan: every table but the visits (empty), header.visits_per_unit their number.
const Plan& drafted_layout(const UnitDraft& draft);
// A wave that the validated template cannot exceed (planners.cpp says why): 1 for claim-order ranks, else the items
// of a unit. build_template checks it against the validator's.
int32_t drafted_wave_bound(const UnitDraft& draft);
// The finished, unvalidated plan.
Plan fill_unit(UnitDraftPtr draft);

// auto_candidates as first written: a scan of every table row, four log2 per row, and the ranking parsed from its
// text. The reference the fast path must match bit for bit; counts a table scan.
std::vector<Candidate> auto_candidates_reference(const Problem& problem, TileShape tiles);

// The row of auto's table that auto_candidates takes for `problem` (memoised as it is): all that its candidates
// read of the problem's lengths.
uint32_t auto_table_row(const Problem& problem);

// What plan_for's outcome reads of a request's lengths: auto's table row (the candidates), the representative
// lengths (template_key: every template tried, so every wave and skip) and the tile counts (the size limits, which
// the representative lengths share). Requests that differ in their lengths alone and have equal classes get the same
// template and note, their headers differing in the lengths alone, so one plan_for serves them all (plan_for_pack).
struct ResolutionClass {
  static constexpr uint32_t kUnread = UINT32_MAX;
  uint32_t row = kUnread;  // auto's table row; kUnread where the outcome does not read it (a named planner in a
                           // fixed GQA mode: its one candidate whatever the row)
  int32_t seqlen_q = 0, seqlen_k = 0;  // geometry_representative's
  bool operator==(const ResolutionClass& o) const {
    return row == o.row && seqlen_q == o.seqlen_q && seqlen_k == o.seqlen_k;
  }
};
struct ResolutionClassHash {
  size_t operator()(const ResolutionClass& c) const {
    const uint64_t lengths = uint64_t(uint32_t(c.seqlen_q)) << 32 | uint32_t(c.seqlen_k);
    return size_t(uint64_t(c.row) * 0x9E3779B97F4A7C15ull ^ lengths);
  }
};
// nullopt where the outcome reads more of the lengths (auto-fastest simulates the problem itself; a size limit's
// message quotes them) or the memos are off (plan_memo_enabled: everything is then resolved afresh). Throws
// dash::Error for an invalid request, as plan_for does.
std::optional<ResolutionClass> resolution_class(const PlanRequest& request);

// resolution_class of many requests that differ in their lengths alone (a pack's sequence shapes), with the same
// values and errors, cheaper per request:
//   - the checks (plan_for's, and the pack mode's limits) run once, on the longest lengths, where they pass: every
//     size limit grows with the lengths, and no other check reads them, so they then pass for every request;
//     otherwise every request is checked as resolution_class checks it;
//   - the representative lengths come from the class of lengths (GeometryClass) of an earlier request where it
//     holds the new one (requests in a pack's order are mostly of the last one's).
class ResolutionClassifier {
 public:
  // `base`: the requests' common fields (its lengths ignored); `longest_q`, `longest_k`: at least every request's.
  ResolutionClassifier(const PlanRequest& base, int32_t longest_q, int32_t longest_k);
  // resolution_class(request): `request` is `base` with other lengths (>= 1).
  std::optional<ResolutionClass> classify(const PlanRequest& request);

 private:
  enum class Mode { PerRequest, NoClass, Classes };
  Mode mode_ = Mode::PerRequest;
  TileShape tiles_{};
  bool reads_row_ = false;
  std::optional<GeometryClass> last_;  // the class of lengths of the last request classified
};

struct PlanMemoStats {
  int64_t table_scans = 0;        // auto-table scans (fast or reference): one per auto_candidates memo miss
  int64_t candidate_hits = 0;     // auto_candidates answered from its memo
  int64_t candidate_entries = 0;
  int64_t resolution_hits = 0;    // plan_for requests answered from the resolution memo
  int64_t resolution_misses = 0;  // plan_for requests resolved in full (and then memoised)
  int64_t resolution_entries = 0;
};
// bind_header's group of a template cut into slots: how many units claim their slots together (plan.cpp says how).
int32_t slot_claim_group(int32_t units, int32_t slots, int32_t width, int32_t ctas);

PlanMemoStats plan_memo_stats();

// false: auto_candidates and plan_for compute everything afresh (the memos are neither read nor written), as before
// they existed. For tests; process-wide.
void set_plan_memo_enabled(bool enabled);
bool plan_memo_enabled();

// Empties the auto_candidates memo (clear_template_cache empties both memos).
void clear_auto_candidates_memo();
// Fills the auto_candidates fields of `stats` (auto_table.cpp).
void auto_candidates_memo_stats(PlanMemoStats& stats);

// A thread-safe map of at most `capacity` entries, least recently used first out. Values are copied out under the
// lock, so keep them small (or a shared_ptr).
//
// Flat: the entries live in one array (linked by index into the recency list) and are found through an
// open-addressing table of their indices. A pack of 800 distinct shapes inserts 800 entries in its first planning,
// and a node per entry in a list and a hash map (two allocations each, freed again by clear) cost a good part of
// it, in time and in fresh pages.
template <class Key, class Value, class Hash>
class LruMemo {
 public:
  explicit LruMemo(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value for `key` into *out (and `key` becomes the most recently used); false if absent.
  bool find(const Key& key, Value* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t hash = hash_of(key);
    const size_t at = position_of(key, hash);
    if (at == kNoPosition) return false;
    const uint32_t slot = table_[at];
    make_newest(slot);
    *out = slots_[slot].value;
    return true;
  }

  // Adds or replaces the value for `key`, then drops the least recently used entry beyond the capacity.
  void insert(const Key& key, Value value) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t hash = hash_of(key);
    if (const size_t at = position_of(key, hash); at != kNoPosition) {
      const uint32_t slot = table_[at];
      slots_[slot].value = std::move(value);
      make_newest(slot);
      return;
    }
    add(key, std::move(value), hash);
  }

  // find, else insert(key, compute()), under one lock and one probe (compute runs under the lock: keep it short,
  // and away from this memo). *found says which.
  template <class Compute>
  Value find_or_insert(const Key& key, Compute&& compute, bool* found) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t hash = hash_of(key);
    if (const size_t at = position_of(key, hash); at != kNoPosition) {
      *found = true;
      make_newest(table_[at]);
      return slots_[table_[at]].value;
    }
    *found = false;
    Value value = compute();
    add(key, value, hash);
    return value;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_.clear();  // keeps its storage for the next entries
    std::fill(table_.begin(), table_.end(), kNone);
    newest_ = oldest_ = kNone;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return slots_.size();
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kNoPosition = SIZE_MAX;
  static constexpr size_t kFirstSlots = 1024;  // a pack's shapes at once; more as they come
  static constexpr size_t kFirstTable = 256;

  struct Slot {
    Key key;
    Value value;
    uint64_t hash;
    uint32_t newer, older;  // the list from the most recently used (newest_) to the least (oldest_)
  };

  // A key not held, as the most recently used (the least recently used entry out if full). Under the lock.
  void add(const Key& key, Value value, uint64_t hash) {
    uint32_t slot;
    if (slots_.size() < capacity_) {
      if (slots_.capacity() == 0) slots_.reserve(std::min(capacity_, kFirstSlots));
      slot = uint32_t(slots_.size());
      slots_.push_back(Slot{key, std::move(value), hash, kNone, kNone});
      if (2 * slots_.size() > table_.size()) grow_table();  // at most half full
    } else {  // full: the least recently used entry's slot takes the new one
      slot = oldest_;
      erase_position(position_of(slots_[slot].key, slots_[slot].hash));
      unlink(slot);
      slots_[slot] = Slot{key, std::move(value), hash, kNone, kNone};
    }
    table_[free_position(hash)] = slot;
    link_newest(slot);
  }

  // Hash's bits mixed into the high ones, which place an entry: FNV-style hashes vary little in their low bits.
  static uint64_t hash_of(const Key& key) { return uint64_t(Hash()(key)) * 0x9E3779B97F4A7C15ull; }
  size_t home(uint64_t hash) const { return size_t(hash >> shift_); }
  size_t next(size_t at) const { return (at + 1) & (table_.size() - 1); }

  size_t position_of(const Key& key, uint64_t hash) const {
    if (table_.empty()) return kNoPosition;
    for (size_t at = home(hash);; at = next(at)) {
      const uint32_t slot = table_[at];
      if (slot == kNone) return kNoPosition;
      if (slots_[slot].hash == hash && slots_[slot].key == key) return at;
    }
  }
  size_t free_position(uint64_t hash) const {
    size_t at = home(hash);
    while (table_[at] != kNone) at = next(at);
    return at;
  }
  void grow_table() {
    const size_t size = table_.empty() ? kFirstTable : 2 * table_.size();
    table_.assign(size, kNone);
    shift_ = 64 - std::countr_zero(size);
    for (uint32_t slot = 0; slot < slots_.size(); ++slot) table_[free_position(slots_[slot].hash)] = slot;
  }
  // Linear probing's deletion: later entries of the probe run move back into the hole where their home allows.
  void erase_position(size_t hole) {
    for (size_t at = next(hole); table_[at] != kNone; at = next(at)) {
      const size_t h = home(slots_[table_[at]].hash);
      const bool home_in_run = hole < at ? (hole < h && h <= at) : (hole < h || h <= at);  // cyclically (hole, at]
      if (!home_in_run) {
        table_[hole] = table_[at];
        hole = at;
      }
    }
    table_[hole] = kNone;
  }

  void unlink(uint32_t slot) {
    Slot& s = slots_[slot];
    (s.newer == kNone ? newest_ : slots_[s.newer].older) = s.older;
    (s.older == kNone ? oldest_ : slots_[s.older].newer) = s.newer;
  }
  void link_newest(uint32_t slot) {
    slots_[slot].newer = kNone;
    slots_[slot].older = newest_;
    (newest_ == kNone ? oldest_ : slots_[newest_].newer) = slot;
    newest_ = slot;
  }
  void make_newest(uint32_t slot) {
    if (slot == newest_) return;
    unlink(slot);
    link_newest(slot);
  }

  const size_t capacity_;
  std::mutex mutex_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> table_;  // slot indices (kNone: free), a power of two in size
  int shift_ = 64;
  uint32_t newest_ = kNone, oldest_ = kNone;
};

}  // namespace dash::detail
