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

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dash/plan.hpp"

namespace dash::detail {

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

struct PlanMemoStats {
  int64_t table_scans = 0;        // auto-table scans (fast or reference): one per auto_candidates memo miss
  int64_t candidate_hits = 0;     // auto_candidates answered from its memo
  int64_t candidate_entries = 0;
  int64_t resolution_hits = 0;    // plan_for requests answered from the resolution memo
  int64_t resolution_misses = 0;  // plan_for requests resolved in full (and then memoised)
  int64_t resolution_entries = 0;
};
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
template <class Key, class Value, class Hash>
class LruMemo {
 public:
  explicit LruMemo(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value for `key` into *out (and `key` becomes the most recently used); false if absent.
  bool find(const Key& key, Value* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = index_.find(key);
    if (it == index_.end()) return false;
    order_.splice(order_.begin(), order_, it->second);
    *out = it->second->second;
    return true;
  }

  // Adds or replaces the value for `key`, then drops the least recently used entries beyond the capacity.
  void insert(const Key& key, Value value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = index_.find(key); it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    index_.clear();
    order_.clear();
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.size();
  }

 private:
  using Entry = std::pair<Key, Value>;
  const size_t capacity_;
  std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> index_;
};

}  // namespace dash::detail
