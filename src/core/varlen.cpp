// SPDX-License-Identifier: Apache-2.0
// Packs of variable-length sequences (dash/varlen.hpp): validation of the host cu_seqlens, the processing order, the
// forward's work-tile tables and the backward's varlen plan. Everything here is O(n log n) in the number of
// sequences plus one plan_for per distinct sequence shape; the kernels only read the tables it builds.
#include "dash/varlen.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "dash/kernel_table.hpp"
#include "plan_internal.hpp"  // resolution_class

namespace dash {

namespace {

// The forward's work-tile index is 32-bit and its CTAs take indices up to the grid size past the last tile, so the
// pack keeps at most 2^30 tiles (as the fixed-length forward does).
constexpr int64_t kMaxForwardTiles = int64_t(1) << 30;
// CTAs a backward launch may use: the ticket counter runs past the last ticket by up to one per CTA.
constexpr int64_t kTicketHeadroom = 1024;
// Accumulator indices (head x global tile) are 32-bit in the kernels.
constexpr int64_t kMaxTileHeads = int64_t(1) << 31;

// The text of an Error without its "argument: " prefix, so it can be re-thrown under another argument name.
std::string message_of(const Error& e) {
  const std::string what = e.what();
  const size_t prefix = e.argument().size() + 2;
  return what.size() >= prefix ? what.substr(prefix) : what;
}

std::string indexed(const char* name, int64_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

// The caller's problem without its lengths (they come from cu_seqlens): every other field as a fixed-length call
// checks it, errors named "problem.<field>".
void validate_pack_problem(const Problem& problem) {
  if (problem.batch < 1)
    throw Error("problem.batch", "must be >= 1 (the number of sequences), got " + std::to_string(problem.batch));
  Problem shape = problem;
  shape.seqlen_q = shape.seqlen_k = 1;
  try {
    shape.validate();
  } catch (const Error& e) {
    throw Error("problem." + e.argument(), message_of(e));
  }
  // The pack's tables use the kernels' tile shapes, so only the kernel table's (head_dim, head_dim_v) pairs have
  // them (dash_check_problem names the field the same way).
  if (kernel_table_row(problem.head_dim, problem.head_dim_v).head_dim == 0) {
    bool head_dim_has_a_row = false;
    for (const KernelTableRow& row : kKernelTable) head_dim_has_a_row |= row.head_dim == problem.head_dim;
    if (!head_dim_has_a_row) {
      throw Error("problem.head_dim", std::to_string(problem.head_dim) + " is not supported (supported head_dim/" +
                                          "head_dim_v pairs: " + kernel_pairs_text() + ")");
    }
    throw Error("problem.head_dim_v", std::to_string(problem.value_head_dim()) + " is not supported with head_dim " +
                                          std::to_string(problem.head_dim) + " (supported head_dim/head_dim_v pairs: " +
                                          kernel_pairs_text() + ")");
  }
}

// cu[0] = 0 and non-decreasing. Both make every entry lie in [0, INT32_MAX], so the totals (and any row offset)
// fit int32 by construction.
void validate_cu_seqlens(const int32_t* cu, int32_t batch, const char* name) {
  if (cu == nullptr) throw Error(name, "is NULL");
  if (cu[0] != 0) throw Error(indexed(name, 0), "must be 0, got " + std::to_string(cu[0]));
  for (int64_t s = 1; s <= batch; ++s) {
    if (cu[s] < cu[s - 1]) {
      throw Error(indexed(name, s),
                  std::to_string(cu[s]) + " is less than " + indexed(name, s - 1) + " = " + std::to_string(cu[s - 1]));
    }
  }
}

Problem with_lengths(const Problem& problem, int32_t seqlen_q, int32_t seqlen_k) {
  Problem p = problem;
  p.batch = 1;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  return p;
}

// Exact unmasked (query, key) pairs of one sequence (the tile geometry's count, independent of the tiles).
int64_t unmasked_pairs(const Problem& problem, int32_t seqlen_q, int32_t seqlen_k) {
  return TileGrid(with_lengths(problem, seqlen_q, seqlen_k), {1, 1}).total_unmasked_pairs();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Entry c: the position of the sequence owning index c * DASH_PACK_CHUNK, i.e. the last position whose begin is
// <= that index. Sequences without work share their successor's begin, so they are never chosen for an index below
// `total`; and since the owner's begin is <= every index of its chunk, pack_sequence_at only ever steps forward.
std::vector<int32_t> chunk_table(const std::vector<int32_t>& begins, int64_t total) {
  std::vector<int32_t> chunks(size_t(ceil_div(total, DASH_PACK_CHUNK)));
  int32_t pos = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t index = int64_t(c) * DASH_PACK_CHUNK;
    while (size_t(pos) + 1 < begins.size() && begins[size_t(pos) + 1] <= index) ++pos;
    chunks[c] = pos;
  }
  return chunks;
}

// Processing order: decreasing unmasked pairs (the most work first, so that the long sequences do not finish
// last), ties by increasing index (a total order, so the order depends on the lengths only).
std::vector<int32_t> processing_order(const Problem& problem, const int32_t* cu_q, const int32_t* cu_k) {
  std::vector<int64_t> pairs(size_t(problem.batch));
  for (int32_t s = 0; s < problem.batch; ++s)
    pairs[size_t(s)] = unmasked_pairs(problem, cu_q[s + 1] - cu_q[s], cu_k[s + 1] - cu_k[s]);
  std::vector<int32_t> order(size_t(problem.batch));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pairs[size_t(a)] != pairs[size_t(b)] ? pairs[size_t(a)] > pairs[size_t(b)] : a < b;
  });
  return order;
}

std::vector<int32_t> begins_of(const std::vector<dash_pack_sequence>& sequences, int32_t dash_pack_sequence::*field) {
  std::vector<int32_t> begins;
  begins.reserve(sequences.size());
  for (const dash_pack_sequence& s : sequences) begins.push_back(s.*field);
  return begins;
}

}  // namespace

Pack build_pack(const Problem& problem, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k) {
  if (cu_seqlens_q == nullptr) throw Error("cu_seqlens_q", "is NULL");
  if (cu_seqlens_k == nullptr) throw Error("cu_seqlens_k", "is NULL");
  validate_pack_problem(problem);
  validate_cu_seqlens(cu_seqlens_q, problem.batch, "cu_seqlens_q");
  validate_cu_seqlens(cu_seqlens_k, problem.batch, "cu_seqlens_k");

  Pack pack;
  pack.problem = problem;
  pack.cu_seqlens_q.assign(cu_seqlens_q, cu_seqlens_q + size_t(problem.batch) + 1);
  pack.cu_seqlens_k.assign(cu_seqlens_k, cu_seqlens_k + size_t(problem.batch) + 1);
  pack.fwd_block_m = kernel_table_row(problem.head_dim, problem.head_dim_v).fwd_warpgroups * 64;

  int32_t longest_q = 0, longest_k = 0;
  int64_t fwd_tiles = 0;
  pack.sequences.reserve(size_t(problem.batch));
  for (int32_t s : processing_order(problem, cu_seqlens_q, cu_seqlens_k)) {
    dash_pack_sequence rec{};
    rec.sequence = s;
    rec.seqlen_q = cu_seqlens_q[s + 1] - cu_seqlens_q[s];
    rec.seqlen_k = cu_seqlens_k[s + 1] - cu_seqlens_k[s];
    rec.q_row = cu_seqlens_q[s];
    rec.k_row = cu_seqlens_k[s];
    rec.fwd_tile_begin = int32_t(fwd_tiles);  // <= 2^30: checked as it grows
    fwd_tiles += int64_t(problem.heads_q) * ceil_div(rec.seqlen_q, pack.fwd_block_m);
    if (fwd_tiles > kMaxForwardTiles) {
      throw Error("problem.batch", "the pack's forward work tiles (heads_q x " + std::to_string(pack.fwd_block_m) +
                                       "-row query tiles, summed over its sequences) reach " +
                                       std::to_string(fwd_tiles) + ", beyond the forward's limit of 2^30");
    }
    longest_q = std::max(longest_q, rec.seqlen_q);
    longest_k = std::max(longest_k, rec.seqlen_k);
    pack.sequences.push_back(rec);
  }
  pack.problem.seqlen_q = longest_q;
  pack.problem.seqlen_k = longest_k;
  pack.fwd_tiles = fwd_tiles;
  pack.fwd_chunks = chunk_table(begins_of(pack.sequences, &dash_pack_sequence::fwd_tile_begin), fwd_tiles);
  return pack;
}

Problem sequence_problem(const Pack& pack, const dash_pack_sequence& sequence) {
  return with_lengths(pack.problem, sequence.seqlen_q, sequence.seqlen_k);
}

int32_t pack_sequence_at(const std::vector<int32_t>& begins, const std::vector<int32_t>& chunks, int64_t index) {
  if (index < 0 || index / DASH_PACK_CHUNK >= int64_t(chunks.size()))
    throw Error("index", std::to_string(index) + " is outside the chunk table's " +
                             std::to_string(chunks.size() * DASH_PACK_CHUNK) + " indices");
  // As the kernels do it (hopper/varlen.cuh): start at the chunk's entry, step forward past every begin <= index.
  int32_t pos = chunks[size_t(index / DASH_PACK_CHUNK)];
  while (size_t(pos) + 1 < begins.size() && begins[size_t(pos) + 1] <= index) ++pos;
  return pos;
}

namespace {

// Re-throws a per-sequence planning error under the pack's argument names: the lengths come from cu_seqlens, the
// other problem fields from `problem`.
[[noreturn]] void rethrow_for_sequence(const Error& e, const dash_pack_sequence& s) {
  static const std::unordered_set<std::string> problem_fields = {"batch",       "heads_q", "heads_kv",
                                                                 "head_dim",    "head_dim_v", "mask",
                                                                 "window",      "window_left", "window_right"};
  std::string argument = e.argument();
  if (argument == "seqlen_q") argument = "cu_seqlens_q";
  else if (argument == "seqlen_k") argument = "cu_seqlens_k";
  else if (problem_fields.count(argument)) argument = "problem." + argument;
  throw Error(argument, "sequence " + std::to_string(s.sequence) + " (lengths " + std::to_string(s.seqlen_q) + " x " +
                            std::to_string(s.seqlen_k) + "): " + message_of(e));
}

// The distinct sequence shapes of a pack seen so far, each with its template index: open addressing over a list of
// the shapes, a few pages where a hash map's node per shape cost an allocation each (800 in a pack of 800 lengths).
class ShapeIndex {
 public:
  explicit ShapeIndex(size_t sequences)
      : table_(std::bit_ceil(std::max<size_t>(2 * sequences, 16)), kFree),
        shift_(64 - std::countr_zero(table_.size())) {
    shapes_.reserve(sequences);
  }

  // The template index of `shape`, or nullptr if it has none yet.
  const int32_t* find(uint64_t shape) const {
    for (size_t at = home(shape);; at = next(at)) {
      if (table_[at] == kFree) return nullptr;
      if (shapes_[size_t(table_[at])].shape == shape) return &shapes_[size_t(table_[at])].index;
    }
  }

  // Records a shape find() did not hold.
  void add(uint64_t shape, int32_t index) {
    size_t at = home(shape);
    while (table_[at] != kFree) at = next(at);
    table_[at] = int32_t(shapes_.size());
    shapes_.push_back({shape, index});
  }

  static uint64_t shape_of(const dash_pack_sequence& s) {
    return uint64_t(uint32_t(s.seqlen_q)) << 32 | uint32_t(s.seqlen_k);
  }

 private:
  static constexpr int32_t kFree = -1;
  struct Shape {
    uint64_t shape;
    int32_t index;
  };
  // The shape's bits mixed into the high ones, which place it (lengths differ in their low bits).
  size_t home(uint64_t shape) const { return size_t((shape * 0x9E3779B97F4A7C15ull) >> shift_); }
  size_t next(size_t at) const { return (at + 1) & (table_.size() - 1); }

  std::vector<int32_t> table_;  // positions in shapes_ (kFree: none); at most half full
  int shift_;
  std::vector<Shape> shapes_;
};

// The distinct templates of a pack. Each distinct (seqlen_q, seqlen_k) gets plan_for's outcome for its batch-1
// problem, and shapes whose plans share a unit template (the same tile geometry, TemplateKey) share its index. Shapes
// of one resolution class (plan_internal.hpp: auto's table row and the tile geometry) get the same outcome but for
// the lengths in the header, so plan_for runs once per class: the tables it gives do not depend on which shape of
// the class came first, and sequence_header puts each sequence's own lengths back. A template's entry is bound to its
// representative lengths, not to those of a sequence, so the table does not depend on the order either.
class TemplateTable {
 public:
  TemplateTable(const Pack& pack, const Schedule& schedule, int32_t num_ctas, GqaMode gqa_mode, TileShape tiles,
                std::vector<BoundPlan>& templates)
      : pack_(pack), schedule_(schedule), num_ctas_(num_ctas), gqa_mode_(gqa_mode), tiles_(tiles),
        templates_(templates), by_shape_(pack.sequences.size()),
        base_(request_for(with_lengths(pack.problem, pack.problem.seqlen_q, pack.problem.seqlen_k))),
        classifier_(base_, pack.problem.seqlen_q, pack.problem.seqlen_k) {}  // the longest lengths of the pack

  int32_t index_of(const dash_pack_sequence& s) {
    const uint64_t shape = ShapeIndex::shape_of(s);
    if (const int32_t* index = by_shape_.find(shape)) return *index;
    const int32_t index = new_shape_index(s);
    by_shape_.add(shape, index);
    return index;
  }

  // The notes of the distinct shapes' plans (auto's choices, generalisations), once each.
  const std::string& note() const { return note_; }

 private:
  PlanRequest request_for(const Problem& problem) const {
    return PlanRequest{problem, schedule_, num_ctas_, tiles_, gqa_mode_, nullptr};
  }

  // The index of a shape not seen before: its class's, else plan_for's.
  int32_t new_shape_index(const dash_pack_sequence& s) {
    PlanRequest request = base_;  // sequence_problem's request, with the lengths set in place (no Problem copies)
    request.problem.seqlen_q = s.seqlen_q;
    request.problem.seqlen_k = s.seqlen_k;
    try {
      const std::optional<detail::ResolutionClass> resolution = classifier_.classify(request);
      if (resolution) {
        // Shapes in processing order mostly share the last one's class: one comparison, no hash look-up.
        if (last_class_ && *last_class_ == *resolution) return last_index_;
        if (auto it = by_class_.find(*resolution); it != by_class_.end()) return remember(*resolution, it->second);
      }
      const int32_t index = add(plan_for(request));
      if (resolution) by_class_.emplace(*resolution, index);
      return resolution ? remember(*resolution, index) : index;
    } catch (const Error& e) {
      rethrow_for_sequence(e, s);
    }
  }

  int32_t remember(const detail::ResolutionClass& resolution, int32_t index) {
    last_class_ = resolution;
    last_index_ = index;
    return index;
  }

  // The index of `bound`'s unit template, listed if new; its note noted.
  int32_t add(BoundPlan bound) {
    if (!bound.note.empty() && seen_notes_.insert(bound.note).second)
      note_ += (note_.empty() ? "" : " | ") + bound.note;
    auto [it, added] = by_unit_.emplace(bound.unit.get(), int32_t(templates_.size()));
    if (added) templates_.push_back(representative_binding(std::move(bound)));
    return it->second;
  }

  // The header at the template's own lengths; the note its tables' (a shape's note went to note()).
  BoundPlan representative_binding(BoundPlan bound) const {
    const dash_problem& unit = bound.unit->plan.header.problem;
    bound.header.problem = with_lengths(pack_.problem, unit.seqlen_q, unit.seqlen_k).to_c();
    bound.note = bound.unit->plan.note;
    return bound;
  }

  const Pack& pack_;
  const Schedule& schedule_;
  int32_t num_ctas_;
  GqaMode gqa_mode_;
  TileShape tiles_;
  std::vector<BoundPlan>& templates_;
  ShapeIndex by_shape_;
  const PlanRequest base_;  // a sequence's request but for its lengths
  detail::ResolutionClassifier classifier_;
  std::unordered_map<detail::ResolutionClass, int32_t, detail::ResolutionClassHash> by_class_;
  std::optional<detail::ResolutionClass> last_class_;  // the class new_shape_index saw last, and its index
  int32_t last_index_ = -1;
  std::unordered_map<const UnitTemplate*, int32_t> by_unit_;
  std::unordered_set<std::string> seen_notes_;
  std::string note_;
};

void check_plan_request(int32_t num_ctas, GqaMode gqa_mode) {
  // Checked here as well as in plan_for: a pack whose sequences are all empty never calls it.
  if (num_ctas < 1) throw Error("num_ctas", "must be >= 1, got " + std::to_string(num_ctas));
  if (gqa_mode == GqaMode::AutoNondeterministic)
    throw Error("gqa_mode", "DASH_GQA_AUTO_NONDETERMINISTIC is for fixed-length plans; a pack's plan takes "
                            "DASH_GQA_AUTO (per sequence), split or pack");
  if (!is_gqa_request(int32_t(gqa_mode))) throw Error("gqa_mode", "unknown mode " + std::to_string(int32_t(gqa_mode)));
}

void check_tile_limit(int64_t tiles, int32_t heads, const char* argument, const char* what) {
  if (tiles * heads >= kMaxTileHeads) {
    throw Error(argument, std::string("the pack's ") + what + " tiles x heads = " + std::to_string(tiles * heads) +
                              " exceed the backward's limit of 2^31 accumulators");
  }
}

// Entry g: the position of the sequence owning global tile g (tile counts per sequence, in processing order).
std::vector<int32_t> tile_owners(const std::vector<dash_pack_sequence>& sequences, int64_t total, int32_t block,
                                 bool query) {
  std::vector<int32_t> owners;
  owners.reserve(size_t(total));
  for (size_t pos = 0; pos < sequences.size(); ++pos) {
    const int64_t tiles = ceil_div(query ? sequences[pos].seqlen_q : sequences[pos].seqlen_k, block);
    owners.insert(owners.end(), size_t(tiles), int32_t(pos));
  }
  return owners;
}

}  // namespace

VarlenPlan plan_for_pack(const Pack& pack, const Schedule& schedule, int32_t num_ctas, GqaMode gqa_mode) {
  check_plan_request(num_ctas, gqa_mode);
  VarlenPlan out;
  out.tiles = default_backward_tiles(pack.problem.head_dim);
  out.sequences = pack.sequences;
  TemplateTable table(pack, schedule, num_ctas, gqa_mode, out.tiles, out.templates);

  int64_t tickets = 0, q_tiles = 0, kv_tiles = 0;
  for (dash_pack_sequence& s : out.sequences) {
    s.template_index = s.seqlen_q > 0 && s.seqlen_k > 0 ? table.index_of(s) : -1;
    s.ticket_begin = int32_t(tickets);
    s.q_tile_begin = int32_t(q_tiles);
    s.kv_tile_begin = int32_t(kv_tiles);
    if (s.template_index >= 0) {
      const dash_plan_header& h = out.templates[size_t(s.template_index)].header;
      tickets += int64_t(h.num_units) * h.items_per_unit;
    }
    // Checked as it grows, so that every begin stored above is in range.
    if (tickets + kTicketHeadroom >= std::numeric_limits<int32_t>::max()) {
      throw Error("problem.batch", "the pack's backward tickets (units x items summed over its sequences) exceed "
                                   "the 32-bit ticket counter's limit of 2^31 - 1 - " +
                                       std::to_string(kTicketHeadroom));
    }
    q_tiles += ceil_div(s.seqlen_q, out.tiles.block_m);
    kv_tiles += ceil_div(s.seqlen_k, out.tiles.block_n);
    check_tile_limit(q_tiles, pack.problem.heads_q, "cu_seqlens_q", "query");
    check_tile_limit(kv_tiles, pack.problem.heads_kv, "cu_seqlens_k", "key");
  }
  out.num_tickets = tickets;
  out.total_q_tiles = int32_t(q_tiles);
  out.total_kv_tiles = int32_t(kv_tiles);
  out.q_tile_sequence = tile_owners(out.sequences, q_tiles, out.tiles.block_m, true);
  out.kv_tile_sequence = tile_owners(out.sequences, kv_tiles, out.tiles.block_n, false);
  out.ticket_chunks = chunk_table(begins_of(out.sequences, &dash_pack_sequence::ticket_begin), tickets);
  for (const BoundPlan& t : out.templates) {
    out.wave = std::max(out.wave, t.header.min_coresident_ctas);
    if (dash_plan_splits_dkv(&t.header)) out.any_split_dkv = true;
  }
  out.note = table.note();
  return out;
}

dash_plan_header sequence_header(const VarlenPlan& plan, const Pack& pack, const dash_pack_sequence& sequence) {
  if (sequence.template_index < 0 || size_t(sequence.template_index) >= plan.templates.size())
    throw Error("sequence", "sequence " + std::to_string(sequence.sequence) + " has no template");
  dash_plan_header h = plan.templates[size_t(sequence.template_index)].header;
  h.problem = sequence_problem(pack, sequence).to_c();
  return h;
}

}  // namespace dash
