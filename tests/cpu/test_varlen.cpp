// SPDX-License-Identifier: Apache-2.0
// Packs of variable-length sequences (dash/varlen.hpp and the varlen C ABI): argument errors, the processing order,
// the work-index look-up the kernels use, the varlen plan's tables, and the CPU backend's pack invariance (each
// sequence of a pack gets the bits of its own batch-1 call, wherever it sits and whatever else is packed with it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dash/attention_mask.hpp"
#include "dash/dash_attn.h"
#include "dash/kernel_table.hpp"
#include "dash/plan.hpp"
#include "dash/varlen.hpp"
#include "test_problems.hpp"

namespace {

using dash::Mask;

// A pack's lengths, one entry per sequence.
struct Lengths {
  std::vector<int32_t> q, k;
};

std::vector<int32_t> cu_of(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  return cu;
}

dash::Problem pack_shape(Mask mask, int heads_q = 1, int heads_kv = 1, int head_dim = 128, int batch = 1) {
  dash::Problem p = dash::test::make_problem(0, 0, mask, heads_q, heads_kv, batch, head_dim);
  return p;
}

dash::Pack make_pack(dash::Problem problem, const Lengths& lengths) {
  problem.batch = int32_t(lengths.q.size());
  const std::vector<int32_t> cu_q = cu_of(lengths.q), cu_k = cu_of(lengths.k);
  return dash::build_pack(problem, cu_q.data(), cu_k.data());
}

// The argument a call's dash::Error names, or "<no error>".
std::string error_argument(const std::function<void()>& call, std::string* message = nullptr) {
  try {
    call();
  } catch (const dash::Error& e) {
    if (message) *message = e.what();
    return e.argument();
  }
  return "<no error>";
}

// ---- build_pack: arguments ----

TEST(VarlenPack, ErrorsNameTheArgument) {
  const dash::Problem p = pack_shape(Mask::Causal, 4, 2, 128, 3);
  const std::vector<int32_t> good = {0, 10, 20, 30};
  auto build = [&](dash::Problem problem, const int32_t* q, const int32_t* k) {
    return [=] { dash::build_pack(problem, q, k); };
  };
  EXPECT_EQ(error_argument(build(p, nullptr, good.data())), "cu_seqlens_q");
  EXPECT_EQ(error_argument(build(p, good.data(), nullptr)), "cu_seqlens_k");

  const std::vector<int32_t> not_from_zero = {1, 10, 20, 30};
  EXPECT_EQ(error_argument(build(p, not_from_zero.data(), good.data())), "cu_seqlens_q[0]");
  EXPECT_EQ(error_argument(build(p, good.data(), not_from_zero.data())), "cu_seqlens_k[0]");

  std::string message;
  const std::vector<int32_t> decreasing = {0, 50, 120, 100};
  EXPECT_EQ(error_argument(build(p, decreasing.data(), good.data()), &message), "cu_seqlens_q[3]");
  EXPECT_EQ(message, "cu_seqlens_q[3]: 100 is less than cu_seqlens_q[2] = 120");
  EXPECT_EQ(error_argument(build(p, good.data(), decreasing.data())), "cu_seqlens_k[3]");

  dash::Problem bad = p;
  bad.batch = 0;
  EXPECT_EQ(error_argument(build(bad, good.data(), good.data())), "problem.batch");
  bad = p;
  bad.heads_kv = 3;
  EXPECT_EQ(error_argument(build(bad, good.data(), good.data())), "problem.heads_kv");
  bad = p;
  bad.head_dim = 80;  // not a kernel head dim
  EXPECT_EQ(error_argument(build(bad, good.data(), good.data())), "problem.head_dim");
  bad = p;
  bad.window_left = 4;  // window sizes without the window mask
  EXPECT_EQ(error_argument(build(bad, good.data(), good.data())), "problem.window");
  bad = dash::test::windowed(p, -2, 0);
  EXPECT_EQ(error_argument(build(bad, good.data(), good.data())), "problem.window_left");

  // The pack-wide forward limit (2^30 work tiles) names the batch: 8 sequences of 2^31/8 rows on 255 heads.
  dash::Problem many_heads = pack_shape(Mask::Full, 255, 1, 128, 8);
  std::vector<int32_t> long_cu(9);
  for (int s = 0; s <= 8; ++s) long_cu[s] = int32_t(int64_t(s) * (int64_t(1) << 28) - (s == 8));
  EXPECT_EQ(error_argument(build(many_heads, long_cu.data(), long_cu.data())), "problem.batch");

  // The seqlen fields of the problem are ignored (the lengths come from cu_seqlens).
  dash::Problem with_lengths = p;
  with_lengths.seqlen_q = -5;
  with_lengths.seqlen_k = 99999;
  EXPECT_EQ(error_argument(build(with_lengths, good.data(), good.data())), "<no error>");
}

// ---- build_pack: order and records ----

// Unmasked pairs of one sequence, counted independently of build_pack: row by row, from the mask's definition.
int64_t pairs_of(const dash::Problem& shape, int32_t sq, int32_t sk) {
  if (sq == 0 || sk == 0) return 0;
  dash::Problem p = shape;
  p.batch = 1;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  const dash::AttentionMask mask = dash::AttentionMask::of(p.to_c());
  int64_t pairs = 0;
  for (int32_t row = 0; row < sq; ++row) pairs += std::max(0, mask.key_end(row) - mask.key_begin(row));
  return pairs;
}

std::vector<int32_t> expected_order(const dash::Problem& shape, const Lengths& l) {
  std::vector<int32_t> order(l.q.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pairs_of(shape, l.q[a], l.k[a]) > pairs_of(shape, l.q[b], l.k[b]);
  });
  return order;
}

TEST(VarlenPack, ProcessesTheLongestFirstTiesByIndex) {
  // Causal with seqlen_q != seqlen_k: (70, 30) has fewer pairs than (30, 70); equal pair counts tie by index.
  const Lengths l{{5, 300, 0, 300, 17, 1, 129, 70, 30, 0, 64}, {5, 300, 7, 300, 200, 0, 1, 30, 70, 0, 64}};
  for (Mask mask : {Mask::Causal, Mask::Full}) {
    for (int head_dim : {64, 128}) {
      SCOPED_TRACE(std::string(dash::mask_name(mask)) + " hdim " + std::to_string(head_dim));
      const dash::Problem shape = pack_shape(mask, 3, 1, head_dim);
      const dash::Pack pack = make_pack(shape, l);
      const std::vector<int32_t> order = expected_order(shape, l);
      const std::vector<int32_t> cu_q = cu_of(l.q), cu_k = cu_of(l.k);
      EXPECT_EQ(pack.fwd_block_m, dash::kernel_table_row(head_dim).fwd_warpgroups * 64);
      EXPECT_EQ(pack.problem.seqlen_q, 300);
      EXPECT_EQ(pack.problem.seqlen_k, 300);
      EXPECT_EQ(pack.problem.batch, int32_t(l.q.size()));
      EXPECT_EQ(pack.total_q(), cu_q.back());
      EXPECT_EQ(pack.total_k(), cu_k.back());
      ASSERT_EQ(pack.sequences.size(), order.size());
      int64_t tiles = 0;
      for (size_t pos = 0; pos < order.size(); ++pos) {
        const dash_pack_sequence& s = pack.sequences[pos];
        const int32_t i = order[pos];
        EXPECT_EQ(s.sequence, i) << "position " << pos;
        EXPECT_EQ(s.seqlen_q, l.q[i]);
        EXPECT_EQ(s.seqlen_k, l.k[i]);
        EXPECT_EQ(s.q_row, cu_q[i]);
        EXPECT_EQ(s.k_row, cu_k[i]);
        EXPECT_EQ(s.fwd_tile_begin, tiles);
        tiles += 3 * ((s.seqlen_q + pack.fwd_block_m - 1) / pack.fwd_block_m);
        EXPECT_EQ(s.template_index, 0);  // backward fields are the plan's
        EXPECT_EQ(s.ticket_begin, 0);
        EXPECT_EQ(s.q_tile_begin, 0);
        EXPECT_EQ(s.kv_tile_begin, 0);
      }
      EXPECT_EQ(pack.fwd_tiles, tiles);
    }
  }
  // Every sequence empty: longest lengths 0, no forward work.
  const dash::Pack empty = make_pack(pack_shape(Mask::Causal), {{0, 0}, {0, 3}});
  EXPECT_EQ(empty.problem.seqlen_q, 0);
  EXPECT_EQ(empty.problem.seqlen_k, 3);
  EXPECT_EQ(empty.fwd_tiles, 0);
  EXPECT_TRUE(empty.fwd_chunks.empty());
}

TEST(VarlenPack, SequenceProblemIsTheBatchOneProblemOfItsLengths) {
  const dash::Problem shape = dash::test::windowed(pack_shape(Mask::Window, 4, 2, 64), 16, 0);
  const dash::Pack pack = make_pack(shape, {{10, 40}, {20, 50}});
  const dash::Problem p = dash::sequence_problem(pack, pack.sequences[0]);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.seqlen_q, 40);
  EXPECT_EQ(p.seqlen_k, 50);
  EXPECT_EQ(p.heads_q, 4);
  EXPECT_EQ(p.heads_kv, 2);
  EXPECT_EQ(p.head_dim, 64);
  EXPECT_EQ(p.mask, Mask::Window);
  EXPECT_EQ(p.window_left, 16);
  EXPECT_EQ(p.window_right, 0);
}

// ---- the work-index look-up ----

// The position owning `index` by definition: begin <= index < begin + count (exactly one such position).
int32_t owner_by_search(const std::vector<int32_t>& begins, const std::vector<int64_t>& counts, int64_t index) {
  int32_t owner = -1;
  for (size_t p = 0; p < begins.size(); ++p) {
    if (begins[p] <= index && index < begins[p] + counts[p]) {
      EXPECT_EQ(owner, -1) << "index " << index << " has two owners";
      owner = int32_t(p);
    }
  }
  return owner;
}

// Checks pack_sequence_at against the linear search for every index in [0, total), and that the chunk table only
// ever asks the look-up to step forward.
void check_lookup(const std::vector<int32_t>& begins, const std::vector<int64_t>& counts,
                  const std::vector<int32_t>& chunks, int64_t total, const char* what) {
  SCOPED_TRACE(what);
  int64_t sum = 0;
  for (size_t p = 0; p < begins.size(); ++p) {
    ASSERT_EQ(begins[p], sum) << "begins are not the running total at position " << p;
    sum += counts[p];
  }
  ASSERT_EQ(sum, total);
  ASSERT_EQ(int64_t(chunks.size()), (total + DASH_PACK_CHUNK - 1) / DASH_PACK_CHUNK);
  for (size_t c = 0; c < chunks.size(); ++c) {
    ASSERT_GE(chunks[c], 0);
    ASSERT_LT(size_t(chunks[c]), begins.size());
    ASSERT_LE(begins[size_t(chunks[c])], int64_t(c) * DASH_PACK_CHUNK) << "chunk " << c;
  }
  for (int64_t index = 0; index < total; ++index) {
    const int32_t expected = owner_by_search(begins, counts, index);
    ASSERT_EQ(dash::pack_sequence_at(begins, chunks, index), expected) << "index " << index;
  }
}

std::map<std::string, Lengths> awkward_mixes() {
  std::map<std::string, Lengths> mixes;
  mixes["edges"] = {{0, 1, 127, 129, 0, 128, 0, 255, 257, 64}, {3, 1, 129, 127, 0, 128, 5, 1, 300, 0}};
  mixes["single"] = {{1000}, {700}};
  mixes["single one row"] = {{1}, {1}};
  std::mt19937 rng(7);
  const std::vector<int32_t> short_lengths = {0, 1, 2, 3, 17, 33, 64, 65};
  Lengths many;
  for (int s = 0; s < 1000; ++s) {
    many.q.push_back(short_lengths[rng() % short_lengths.size()]);
    many.k.push_back(short_lengths[rng() % short_lengths.size()]);
  }
  mixes["1000 short"] = many;
  Lengths long_plus_short{{3000}, {2500}};
  for (int s = 0; s < 200; ++s) {
    long_plus_short.q.push_back(1 + s % 7);
    long_plus_short.k.push_back(1 + s % 5);
  }
  std::swap(long_plus_short.q[0], long_plus_short.q[100]);  // the long one in the middle of the pack
  std::swap(long_plus_short.k[0], long_plus_short.k[100]);
  mixes["long plus short"] = long_plus_short;
  mixes["q differs from k"] = {{10, 200, 64, 0, 129}, {300, 20, 0, 64, 129}};
  return mixes;
}

TEST(VarlenPack, LookupEqualsLinearSearchForEveryForwardTile) {
  for (const auto& [name, lengths] : awkward_mixes()) {
    for (int head_dim : {64, 128}) {
      const dash::Pack pack = make_pack(pack_shape(Mask::Causal, 3, 1, head_dim), lengths);
      std::vector<int32_t> begins;
      std::vector<int64_t> counts;
      for (const dash_pack_sequence& s : pack.sequences) {
        begins.push_back(s.fwd_tile_begin);
        counts.push_back(3 * ((s.seqlen_q + pack.fwd_block_m - 1) / pack.fwd_block_m));
      }
      const std::string what = name + " hdim " + std::to_string(head_dim);
      check_lookup(begins, counts, pack.fwd_chunks, pack.fwd_tiles, what.c_str());
    }
  }
}

TEST(VarlenPack, LookupEqualsLinearSearchForEveryTicket) {
  for (const auto& [name, lengths] : awkward_mixes()) {
    for (dash::GqaMode mode : {dash::GqaMode::SplitHeads, dash::GqaMode::PackGroup}) {
      const dash::Pack pack = make_pack(pack_shape(Mask::Causal, 4, 2, 128), lengths);
      const dash::VarlenPlan plan = dash::plan_for_pack(pack, dash::Schedule::parse("auto"), 132, mode);
      std::vector<int32_t> begins;
      std::vector<int64_t> counts;
      for (const dash_pack_sequence& s : plan.sequences) {
        begins.push_back(s.ticket_begin);
        const dash_plan_header* h = s.template_index >= 0 ? &plan.templates[size_t(s.template_index)].header : nullptr;
        counts.push_back(h ? int64_t(h->num_units) * h->items_per_unit : 0);
      }
      check_lookup(begins, counts, plan.ticket_chunks, plan.num_tickets,
                   (name + " " + dash::gqa_mode_name(mode)).c_str());
    }
  }
}

TEST(VarlenPack, LookupRefusesIndicesOutsideTheTable) {
  const dash::Pack pack = make_pack(pack_shape(Mask::Full), {{10}, {10}});
  const std::vector<int32_t> begins = {0};
  EXPECT_EQ(error_argument([&] { dash::pack_sequence_at(begins, pack.fwd_chunks, -1); }), "index");
  EXPECT_EQ(error_argument([&] { dash::pack_sequence_at(begins, pack.fwd_chunks, DASH_PACK_CHUNK); }), "index");
}

// ---- plan_for_pack ----

dash::BoundPlan single_plan(const dash::Pack& pack, const dash_pack_sequence& s, const char* schedule,
                            dash::GqaMode mode) {
  return dash::plan_for({dash::sequence_problem(pack, s), dash::Schedule::parse(schedule), 132, {}, mode, nullptr});
}

TEST(VarlenPlan, FieldsFollowTheSequences) {
  const Lengths l{{37, 0, 130, 1, 65, 70, 37, 200, 0, 65}, {50, 20, 0, 1, 65, 30, 50, 200, 0, 65}};
  for (dash::GqaMode mode : {dash::GqaMode::SplitHeads, dash::GqaMode::PackGroup, dash::GqaMode::Auto}) {
    SCOPED_TRACE(dash::gqa_mode_name(mode));
    const dash::Pack pack = make_pack(pack_shape(Mask::Causal, 4, 2, 128), l);
    const dash::VarlenPlan plan = dash::plan_for_pack(pack, dash::Schedule::parse("auto"), 132, mode);
    const dash::TileShape tiles = dash::default_backward_tiles(128);
    EXPECT_EQ(plan.tiles.block_m, tiles.block_m);
    EXPECT_EQ(plan.tiles.block_n, tiles.block_n);
    ASSERT_EQ(plan.sequences.size(), pack.sequences.size());

    // Templates: one per distinct unit template of the non-empty shapes, each sequence's the one plan_for gives its
    // batch-1 problem, with the header plan_for gives it (sequence_header).
    std::set<const dash::UnitTemplate*> units, sequence_units;
    for (const dash::BoundPlan& t : plan.templates) units.insert(t.unit.get());
    EXPECT_EQ(units.size(), plan.templates.size()) << "a template is listed twice";

    int64_t tickets = 0, q_tiles = 0, kv_tiles = 0;
    int32_t wave = 1;
    bool split_dkv = false;
    for (size_t pos = 0; pos < plan.sequences.size(); ++pos) {
      const dash_pack_sequence& s = plan.sequences[pos];
      const dash_pack_sequence& r = pack.sequences[pos];
      EXPECT_EQ(std::tie(s.sequence, s.seqlen_q, s.seqlen_k, s.q_row, s.k_row, s.fwd_tile_begin),
                std::tie(r.sequence, r.seqlen_q, r.seqlen_k, r.q_row, r.k_row, r.fwd_tile_begin));
      EXPECT_EQ(s.ticket_begin, tickets) << "position " << pos;
      EXPECT_EQ(s.q_tile_begin, q_tiles);
      EXPECT_EQ(s.kv_tile_begin, kv_tiles);
      const int32_t nq = (s.seqlen_q + tiles.block_m - 1) / tiles.block_m;
      const int32_t nk = (s.seqlen_k + tiles.block_n - 1) / tiles.block_n;
      for (int32_t g = 0; g < nq; ++g) EXPECT_EQ(plan.q_tile_sequence[size_t(q_tiles + g)], int32_t(pos));
      for (int32_t g = 0; g < nk; ++g) EXPECT_EQ(plan.kv_tile_sequence[size_t(kv_tiles + g)], int32_t(pos));
      q_tiles += nq;
      kv_tiles += nk;
      if (s.seqlen_q == 0 || s.seqlen_k == 0) {
        EXPECT_EQ(s.template_index, -1) << "position " << pos;
        continue;
      }
      ASSERT_GE(s.template_index, 0);
      ASSERT_LT(size_t(s.template_index), plan.templates.size());
      const dash::BoundPlan& t = plan.templates[size_t(s.template_index)];
      const dash::BoundPlan alone = single_plan(pack, s, "auto", mode);
      sequence_units.insert(alone.unit.get());
      EXPECT_EQ(t.unit.get(), alone.unit.get()) << "position " << pos;
      const dash_plan_header own = dash::sequence_header(plan, pack, s);
      EXPECT_EQ(std::memcmp(&own, &alone.header, sizeof(dash_plan_header)), 0) << "position " << pos;
      EXPECT_NE(plan.note.find(alone.note), std::string::npos) << alone.note;
      // The listed header: the same but for the lengths, which are the template's own.
      dash_plan_header listed = t.header;
      EXPECT_EQ(listed.problem.seqlen_q, t.unit->plan.header.problem.seqlen_q);
      EXPECT_EQ(listed.problem.seqlen_k, t.unit->plan.header.problem.seqlen_k);
      listed.problem = own.problem;
      EXPECT_EQ(std::memcmp(&listed, &own, sizeof(dash_plan_header)), 0) << "position " << pos;
      tickets += int64_t(t.header.num_units) * t.header.items_per_unit;
      wave = std::max(wave, t.header.min_coresident_ctas);
      split_dkv |= t.header.gqa_mode == DASH_GQA_SPLIT_HEADS && t.header.group_size > 1;
    }
    EXPECT_EQ(units, sequence_units);
    EXPECT_EQ(plan.num_tickets, tickets);
    EXPECT_EQ(plan.total_q_tiles, q_tiles);
    EXPECT_EQ(plan.total_kv_tiles, kv_tiles);
    EXPECT_EQ(int64_t(plan.q_tile_sequence.size()), q_tiles);
    EXPECT_EQ(int64_t(plan.kv_tile_sequence.size()), kv_tiles);
    EXPECT_EQ(plan.wave, wave);
    EXPECT_EQ(plan.any_split_dkv, split_dkv);
    if (mode == dash::GqaMode::SplitHeads) {
      EXPECT_TRUE(plan.any_split_dkv);
    } else if (mode == dash::GqaMode::PackGroup) {
      EXPECT_FALSE(plan.any_split_dkv);
    }
  }
}

TEST(VarlenPlan, EmptyPackHasNoTickets) {
  const dash::Pack pack = make_pack(pack_shape(Mask::Causal), {{0, 5, 0}, {4, 0, 0}});
  const dash::VarlenPlan plan = dash::plan_for_pack(pack, dash::Schedule::parse("auto"), 132, dash::GqaMode::Auto);
  EXPECT_TRUE(plan.templates.empty());
  EXPECT_EQ(plan.num_tickets, 0);
  EXPECT_TRUE(plan.ticket_chunks.empty());
  EXPECT_EQ(plan.wave, 1);
  EXPECT_EQ(plan.total_q_tiles, 1);
  EXPECT_EQ(plan.total_kv_tiles, 1);
  for (const dash_pack_sequence& s : plan.sequences) EXPECT_EQ(s.template_index, -1);
}

TEST(VarlenPlan, ErrorsNameTheArgument) {
  const dash::Pack pack = make_pack(pack_shape(Mask::Causal, 2, 2), {{100, 0}, {100, 0}});
  const dash::Schedule auto_schedule = dash::Schedule::parse("auto");
  EXPECT_EQ(error_argument([&] { dash::plan_for_pack(pack, auto_schedule, 0, dash::GqaMode::Auto); }), "num_ctas");
  EXPECT_EQ(error_argument([&] { dash::plan_for_pack(pack, auto_schedule, 132, static_cast<dash::GqaMode>(9)); }),
            "gqa_mode");
  // A pack's plan chooses per sequence (DASH_GQA_AUTO); the batch-dependent request is for fixed-length plans.
  EXPECT_EQ(error_argument([&] {
              dash::plan_for_pack(pack, auto_schedule, 132, dash::GqaMode::AutoNondeterministic);
            }),
            "gqa_mode");
  // A sequence past the plan format's 65535 Q tiles (64-row tiles at head dim 128) names its lengths' argument.
  const dash::Pack too_long = make_pack(pack_shape(Mask::Causal), {{4, 64 * 65536}, {4, 8}});
  std::string message;
  EXPECT_EQ(error_argument([&] { dash::plan_for_pack(too_long, auto_schedule, 132, dash::GqaMode::Auto); }, &message),
            "cu_seqlens_q");
  EXPECT_NE(message.find("sequence 1"), std::string::npos) << message;
}

TEST(VarlenPlan, PlansOncePerDistinctTemplate) {
  // 1000 sequences over 7 shapes and empty ones: the planner runs once per distinct unit template (57 x 90 and
  // 90 x 57 are both one partly masked tile: one template), and a repeat call asks the template cache once per shape
  // class (plan_internal.hpp's resolution_class; a named planner reads no table row), never per sequence.
  const std::vector<std::pair<int32_t, int32_t>> shapes = {{311, 311}, {57, 90}, {90, 57}, {1, 1},
                                                           {129, 128}, {0, 40}, {640, 200}, {33, 0}, {2, 700}};
  Lengths l;
  for (int s = 0; s < 1000; ++s) {
    l.q.push_back(shapes[size_t(s) % shapes.size()].first);
    l.k.push_back(shapes[size_t(s) % shapes.size()].second);
  }
  const dash::Pack pack = make_pack(pack_shape(Mask::Causal, 2, 1, 64), l);
  const dash::Schedule descending = dash::Schedule::parse("descending");
  dash::clear_template_cache();
  const int64_t runs = dash::planner_runs();
  const dash::VarlenPlan first = dash::plan_for_pack(pack, descending, 132, dash::GqaMode::SplitHeads);
  EXPECT_EQ(dash::planner_runs() - runs, 6);
  EXPECT_EQ(first.templates.size(), 6u);

  const dash::TemplateCacheStats before = dash::template_cache_stats();
  const dash::VarlenPlan again = dash::plan_for_pack(pack, descending, 132, dash::GqaMode::SplitHeads);
  const dash::TemplateCacheStats after = dash::template_cache_stats();
  EXPECT_EQ(dash::planner_runs() - runs, 6) << "a planner ran again for shapes seen before";
  EXPECT_EQ((after.hits + after.builds) - (before.hits + before.builds), 6);
  EXPECT_EQ(again.num_tickets, first.num_tickets);
}

// What the backward of sequence `s` of a plan runs: its unit template and the header plan_for gives it alone.
struct SequencePlan {
  const dash::UnitTemplate* unit;
  dash_plan_header header;
  bool operator==(const SequencePlan& o) const {
    return unit == o.unit && std::memcmp(&header, &o.header, sizeof header) == 0;
  }
};

// Sequence index -> its plan, for every sequence with queries and keys.
std::map<int32_t, SequencePlan> sequence_plans(const dash::Pack& pack, const dash::VarlenPlan& plan) {
  std::map<int32_t, SequencePlan> out;
  for (const dash_pack_sequence& s : plan.sequences)
    if (s.template_index >= 0)
      out[s.sequence] = {plan.templates[size_t(s.template_index)].unit.get(), dash::sequence_header(plan, pack, s)};
  return out;
}

// The plan's template table as a set: each unit with its listed header and note, whatever its index.
std::map<const dash::UnitTemplate*, std::pair<std::vector<uint8_t>, std::string>> template_entries(
    const dash::VarlenPlan& plan) {
  std::map<const dash::UnitTemplate*, std::pair<std::vector<uint8_t>, std::string>> out;
  for (const dash::BoundPlan& t : plan.templates) {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&t.header);
    out[t.unit.get()] = {std::vector<uint8_t>(bytes, bytes + sizeof t.header), t.note};
  }
  return out;
}

// The notes of a plan's shapes, whatever their order.
std::set<std::string> notes_of(const dash::VarlenPlan& plan) {
  std::set<std::string> notes;
  for (size_t at = 0; at < plan.note.size();) {
    const size_t end = std::min(plan.note.find(" | ", at), plan.note.size());
    notes.insert(plan.note.substr(at, end - at));
    at = end + 3;
  }
  return notes;
}

TEST(VarlenPlan, SequencePlansDoNotDependOnThePack) {
  // 400 sequences over a few hundred lengths, most of them sharing unit templates with other lengths (one tile
  // geometry): each sequence's template and header are plan_for's for its batch-1 problem, and the same in the pack
  // reversed and in halves of it; the template table holds the same entries (unit, header, note) in any order.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> length(1, 1500);
  Lengths l;
  for (int s = 0; s < 400; ++s) {
    l.q.push_back(length(rng));
    l.k.push_back(s % 4 == 0 ? length(rng) : l.q.back());  // self-attention, and a quarter of unequal lengths
  }
  for (int32_t mode : {DASH_GQA_AUTO, DASH_GQA_SPLIT_HEADS}) {
    for (const char* schedule : {"auto", "symmetric-shift"}) {
      SCOPED_TRACE(std::string(schedule) + " gqa_mode " + std::to_string(mode));
      const dash::Schedule sched = dash::Schedule::parse(schedule);
      const auto gqa = static_cast<dash::GqaMode>(mode);
      const dash::Pack pack = make_pack(pack_shape(Mask::Causal, 8, 2, 128), l);
      const dash::VarlenPlan plan = dash::plan_for_pack(pack, sched, 132, gqa);
      std::set<std::pair<int32_t, int32_t>> shapes;
      for (const dash_pack_sequence& s : pack.sequences) shapes.insert({s.seqlen_q, s.seqlen_k});
      EXPECT_LT(plan.templates.size() * 2, shapes.size()) << "most lengths should share a template";
      const std::map<int32_t, SequencePlan> plans = sequence_plans(pack, plan);
      ASSERT_EQ(plans.size(), l.q.size());
      for (const dash_pack_sequence& s : pack.sequences) {
        const dash::BoundPlan alone = single_plan(pack, s, schedule, gqa);
        EXPECT_TRUE(plans.at(s.sequence) == (SequencePlan{alone.unit.get(), alone.header}))
            << "sequence " << s.sequence << " (" << s.seqlen_q << " x " << s.seqlen_k << ")";
      }
      for (const dash::BoundPlan& t : plan.templates) {
        EXPECT_EQ(t.header.problem.seqlen_q, t.unit->plan.header.problem.seqlen_q) << "listed at its own lengths";
        EXPECT_EQ(t.header.problem.seqlen_k, t.unit->plan.header.problem.seqlen_k) << "listed at its own lengths";
      }

      // The pack reversed, and its halves: other neighbours, other positions, other first members of a template.
      Lengths reversed{{l.q.rbegin(), l.q.rend()}, {l.k.rbegin(), l.k.rend()}};
      const dash::Pack back = make_pack(pack_shape(Mask::Causal, 8, 2, 128), reversed);
      const dash::VarlenPlan back_plan = dash::plan_for_pack(back, sched, 132, gqa);
      EXPECT_EQ(template_entries(back_plan), template_entries(plan));
      EXPECT_EQ(notes_of(back_plan), notes_of(plan)) << "the shapes' notes, in another order";
      for (const auto& [index, p] : sequence_plans(back, back_plan))
        EXPECT_TRUE(p == plans.at(int32_t(l.q.size()) - 1 - index)) << "sequence " << index << " reversed";
      for (int half = 0; half < 2; ++half) {
        const size_t from = half * l.q.size() / 2, to = (half + 1) * l.q.size() / 2;
        Lengths part{{l.q.begin() + from, l.q.begin() + to}, {l.k.begin() + from, l.k.begin() + to}};
        const dash::Pack part_pack = make_pack(pack_shape(Mask::Causal, 8, 2, 128), part);
        const dash::VarlenPlan part_plan = dash::plan_for_pack(part_pack, sched, 132, gqa);
        for (const auto& [index, p] : sequence_plans(part_pack, part_plan))
          EXPECT_TRUE(p == plans.at(int32_t(from) + index)) << "sequence " << from + index << " in half " << half;
        for (const auto& [unit, entry] : template_entries(part_plan))
          EXPECT_EQ(entry, template_entries(plan).at(unit)) << "template entry in half " << half;
      }
    }
  }
}

// ---- the CPU backend over a pack, through the C ABI ----

// A packed host tensor [rows, heads, head_dim] with padded rows (so that the strides, not the sizes, address it).
struct Packed {
  std::vector<float> data;
  int64_t rows = 0;
  int32_t heads = 0, head_dim = 0;
  int64_t seq_stride = 0;

  Packed() = default;
  Packed(int64_t rows_, int32_t heads_, int32_t head_dim_, float fill)
      : rows(rows_), heads(heads_), head_dim(head_dim_), seq_stride(int64_t(heads_) * head_dim_ + 8) {
    data.assign(size_t(std::max<int64_t>(rows, 1) * seq_stride), fill);
  }
  float* row(int64_t r, int32_t h) { return data.data() + r * seq_stride + int64_t(h) * head_dim; }
  const float* row(int64_t r, int32_t h) const { return data.data() + r * seq_stride + int64_t(h) * head_dim; }
  dash_tensor tensor() { return {data.data(), 0, seq_stride, head_dim}; }
  // Rows [first, first + n) as a dense [n, heads, head_dim] array.
  std::vector<float> slice(int64_t first, int64_t n) const {
    std::vector<float> out;
    for (int64_t r = first; r < first + n; ++r)
      for (int32_t h = 0; h < heads; ++h) out.insert(out.end(), row(r, h), row(r, h) + head_dim);
    return out;
  }
  void fill_random(std::mt19937& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int64_t r = 0; r < rows; ++r)
      for (int32_t h = 0; h < heads; ++h) std::generate_n(row(r, h), head_dim, [&] { return normal(rng); });
  }
};

dash_tensor dense_tensor(std::vector<float>& x, int64_t seqlen, int32_t heads, int32_t head_dim) {
  return {x.data(), seqlen * heads * head_dim, int64_t(heads) * head_dim, head_dim};
}

// One pack's inputs and outputs in the layouts of the varlen C ABI.
struct VarlenRun {
  dash::Problem shape;
  Lengths lengths;
  std::vector<int32_t> cu_q, cu_k;
  dash_problem problem{};  // dash_pack_problem's
  Packed q, k, v, o, dout, dq, dk, dv;
  std::vector<float> lse;  // [heads_q, total_q]
};

dash_pack_t create_pack(VarlenRun& run) {
  dash_problem given = run.shape.to_c();
  given.batch = int32_t(run.lengths.q.size());
  run.cu_q = cu_of(run.lengths.q);
  run.cu_k = cu_of(run.lengths.k);
  dash_pack_t pack = nullptr;
  EXPECT_EQ(dash_pack_create(&given, run.cu_q.data(), run.cu_k.data(), &pack), DASH_OK) << dash_last_error();
  return pack;
}

// The varlen forward and backward of a pack whose q, k, v, dout are set.
void run_varlen(VarlenRun& run, const char* schedule, int32_t gqa_mode) {
  dash_pack_t pack = create_pack(run);
  ASSERT_NE(pack, nullptr);
  ASSERT_EQ(dash_pack_problem(pack, &run.problem), DASH_OK);
  int64_t total_q = 0, total_k = 0;
  ASSERT_EQ(dash_pack_rows(pack, &total_q, &total_k), DASH_OK);
  EXPECT_EQ(total_q, run.cu_q.back());
  EXPECT_EQ(total_k, run.cu_k.back());
  const dash::Problem& p = run.shape;
  // Outputs start as NaN: every row the calls should write must be written.
  run.o = Packed(total_q, p.heads_q, p.head_dim, NAN);
  run.dq = Packed(total_q, p.heads_q, p.head_dim, NAN);
  run.dk = Packed(total_k, p.heads_kv, p.head_dim, NAN);
  run.dv = Packed(total_k, p.heads_kv, p.head_dim, NAN);
  run.lse.assign(size_t(std::max<int64_t>(total_q, 1) * p.heads_q), NAN);

  dash_fwd_args fwd{};
  fwd.problem = run.problem;
  fwd.dtype = DASH_DTYPE_FP32;
  fwd.q = run.q.tensor();
  fwd.k = run.k.tensor();
  fwd.v = run.v.tensor();
  fwd.o = run.o.tensor();
  fwd.lse = run.lse.data();
  ASSERT_EQ(dash_cpu_fwd_varlen(&fwd, pack), DASH_OK) << dash_last_error();

  dash_bwd_args bwd{};
  bwd.problem = run.problem;
  bwd.dtype = DASH_DTYPE_FP32;
  bwd.q = run.q.tensor();
  bwd.k = run.k.tensor();
  bwd.v = run.v.tensor();
  bwd.o = run.o.tensor();
  bwd.dout = run.dout.tensor();
  bwd.lse = run.lse.data();
  bwd.dq = run.dq.tensor();
  bwd.dk = run.dk.tensor();
  bwd.dv = run.dv.tensor();
  ASSERT_EQ(dash_cpu_bwd_varlen(&bwd, pack, schedule, 132, gqa_mode), DASH_OK) << dash_last_error();
  dash_pack_destroy(pack);
}

VarlenRun random_run(const dash::Problem& shape, const Lengths& lengths, uint32_t seed) {
  VarlenRun run;
  run.shape = shape;
  run.lengths = lengths;
  const int64_t total_q = std::accumulate(lengths.q.begin(), lengths.q.end(), int64_t(0));
  const int64_t total_k = std::accumulate(lengths.k.begin(), lengths.k.end(), int64_t(0));
  std::mt19937 rng(seed);
  run.q = Packed(total_q, shape.heads_q, shape.head_dim, 0.f);
  run.k = Packed(total_k, shape.heads_kv, shape.head_dim, 0.f);
  run.v = Packed(total_k, shape.heads_kv, shape.head_dim, 0.f);
  run.dout = Packed(total_q, shape.heads_q, shape.head_dim, 0.f);
  for (Packed* t : {&run.q, &run.k, &run.v, &run.dout}) t->fill_random(rng);
  return run;
}

// The same sequences in another order: sequence i of the result is sequence perm[i] of `run`.
VarlenRun permuted(const VarlenRun& run, const std::vector<int32_t>& perm) {
  VarlenRun out;
  out.shape = run.shape;
  for (int32_t i : perm) {
    out.lengths.q.push_back(run.lengths.q[size_t(i)]);
    out.lengths.k.push_back(run.lengths.k[size_t(i)]);
  }
  const std::vector<int32_t> cu_q = cu_of(run.lengths.q), cu_k = cu_of(run.lengths.k);
  auto gather = [&](const Packed& from, const std::vector<int32_t>& cu, bool query) {
    Packed to(query ? cu_q.back() : cu_k.back(), from.heads, from.head_dim, 0.f);
    int64_t at = 0;
    for (int32_t i : perm) {
      for (int32_t r = cu[size_t(i)]; r < cu[size_t(i) + 1]; ++r, ++at)
        for (int32_t h = 0; h < from.heads; ++h) std::copy_n(from.row(r, h), from.head_dim, to.row(at, h));
    }
    return to;
  };
  out.q = gather(run.q, cu_q, true);
  out.dout = gather(run.dout, cu_q, true);
  out.k = gather(run.k, cu_k, false);
  out.v = gather(run.v, cu_k, false);
  return out;
}

// One sequence's outputs, taken out of a pack's.
struct SequenceOutputs {
  std::vector<float> o, lse, dq, dk, dv;
};

SequenceOutputs outputs_of(const VarlenRun& run, int32_t s) {
  const int32_t sq = run.lengths.q[size_t(s)], sk = run.lengths.k[size_t(s)];
  const int64_t q_row = run.cu_q[size_t(s)], k_row = run.cu_k[size_t(s)], total_q = run.cu_q.back();
  SequenceOutputs out{run.o.slice(q_row, sq), {}, run.dq.slice(q_row, sq), run.dk.slice(k_row, sk),
                      run.dv.slice(k_row, sk)};
  for (int32_t h = 0; h < run.shape.heads_q; ++h)
    out.lse.insert(out.lse.end(), run.lse.begin() + h * total_q + q_row, run.lse.begin() + h * total_q + q_row + sq);
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool all_equal(const std::vector<float>& a, float value) {
  return std::all_of(a.begin(), a.end(), [&](float x) { return x == value; });
}

// Sequence s of the pack alone: dash_cpu_fwd and dash_cpu_bwd on its batch-1 problem with the same schedule.
SequenceOutputs alone(const VarlenRun& run, int32_t s, const char* schedule, int32_t gqa_mode) {
  const dash::Problem& shape = run.shape;
  const int32_t sq = run.lengths.q[size_t(s)], sk = run.lengths.k[size_t(s)];
  const int64_t q_row = run.cu_q[size_t(s)], k_row = run.cu_k[size_t(s)];
  dash::Problem p = shape;
  p.batch = 1;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  const int32_t hq = p.heads_q, hk = p.heads_kv, d = p.head_dim;
  std::vector<float> q = run.q.slice(q_row, sq), k = run.k.slice(k_row, sk), v = run.v.slice(k_row, sk),
                     dout = run.dout.slice(q_row, sq);
  SequenceOutputs out{std::vector<float>(q.size(), NAN), std::vector<float>(size_t(hq) * sq, NAN),
                      std::vector<float>(q.size(), NAN), std::vector<float>(k.size(), NAN),
                      std::vector<float>(k.size(), NAN)};
  dash_fwd_args fwd{};
  fwd.problem = p.to_c();
  fwd.dtype = DASH_DTYPE_FP32;
  fwd.q = dense_tensor(q, sq, hq, d);
  fwd.k = dense_tensor(k, sk, hk, d);
  fwd.v = dense_tensor(v, sk, hk, d);
  fwd.o = dense_tensor(out.o, sq, hq, d);
  fwd.lse = out.lse.data();
  EXPECT_EQ(dash_cpu_fwd(&fwd), DASH_OK) << dash_last_error();

  void* blob = nullptr;
  size_t bytes = 0;
  EXPECT_EQ(dash_plan_build_host(&fwd.problem, schedule, 132, gqa_mode, &blob, &bytes), DASH_OK) << dash_last_error();
  dash_bwd_args bwd{};
  bwd.problem = fwd.problem;
  bwd.dtype = DASH_DTYPE_FP32;
  bwd.q = fwd.q;
  bwd.k = fwd.k;
  bwd.v = fwd.v;
  bwd.o = fwd.o;
  bwd.dout = dense_tensor(dout, sq, hq, d);
  bwd.lse = out.lse.data();
  bwd.dq = dense_tensor(out.dq, sq, hq, d);
  bwd.dk = dense_tensor(out.dk, sk, hk, d);
  bwd.dv = dense_tensor(out.dv, sk, hk, d);
  EXPECT_EQ(dash_cpu_bwd(&bwd, blob, bytes), DASH_OK) << dash_last_error();
  dash_plan_free_host(blob);
  return out;
}

// Lengths with every edge the CPU path has: empty q (dK/dV rows zero), empty k (O = 0, LSE = -inf, dQ zero), one
// row, more queries than keys under causal (rows that see no key), a repeated shape (one template).
const Lengths kMixedLengths{{37, 0, 130, 1, 65, 70, 37}, {50, 20, 0, 1, 65, 30, 50}};

void check_pack_invariance(const dash::Problem& shape, const char* schedule, int32_t gqa_mode,
                           const Lengths& lengths = kMixedLengths) {
  VarlenRun run = random_run(shape, lengths, 1234);
  run_varlen(run, schedule, gqa_mode);
  // The reversed pack puts every sequence elsewhere, with other neighbours.
  std::vector<int32_t> perm(lengths.q.size());
  std::iota(perm.rbegin(), perm.rend(), 0);
  VarlenRun reversed = permuted(run, perm);
  run_varlen(reversed, schedule, gqa_mode);

  const float inf = std::numeric_limits<float>::infinity();
  for (int32_t s = 0; s < int32_t(lengths.q.size()); ++s) {
    SCOPED_TRACE("sequence " + std::to_string(s));
    const SequenceOutputs packed = outputs_of(run, s);
    const SequenceOutputs moved = outputs_of(reversed, int32_t(perm.size()) - 1 - s);
    using Pair = std::pair<const std::vector<float>*, const std::vector<float>*>;
    for (const Pair& ab : std::initializer_list<Pair>{{&packed.o, &moved.o}, {&packed.lse, &moved.lse},
                                                       {&packed.dq, &moved.dq}, {&packed.dk, &moved.dk},
                                                       {&packed.dv, &moved.dv}})
      EXPECT_TRUE(bitwise_equal(*ab.first, *ab.second)) << "bits changed when the sequence moved in the pack";
    const int32_t sq = lengths.q[size_t(s)], sk = lengths.k[size_t(s)];
    if (sq == 0 || sk == 0) {  // no batch-1 call exists: the defined values
      EXPECT_TRUE(all_equal(packed.o, 0.f));
      EXPECT_TRUE(all_equal(packed.lse, -inf));
      EXPECT_TRUE(all_equal(packed.dq, 0.f));
      EXPECT_TRUE(all_equal(packed.dk, 0.f));
      EXPECT_TRUE(all_equal(packed.dv, 0.f));
      continue;
    }
    const SequenceOutputs single = alone(run, s, schedule, gqa_mode);
    EXPECT_TRUE(bitwise_equal(packed.o, single.o)) << "O";
    EXPECT_TRUE(bitwise_equal(packed.lse, single.lse)) << "LSE";
    EXPECT_TRUE(bitwise_equal(packed.dq, single.dq)) << "dQ";
    EXPECT_TRUE(bitwise_equal(packed.dk, single.dk)) << "dK";
    EXPECT_TRUE(bitwise_equal(packed.dv, single.dv)) << "dV";
  }
}

struct InvarianceCase {
  int heads_q, heads_kv;
  int32_t gqa_mode;
  const char* schedule;
};
const InvarianceCase kInvarianceCases[] = {
    {2, 2, DASH_GQA_SPLIT_HEADS, "symmetric-shift"},
    {4, 2, DASH_GQA_SPLIT_HEADS, "shift"},
    {4, 2, DASH_GQA_PACK_GROUP, "descending"},
    {4, 2, DASH_GQA_AUTO, "auto"},
};

void check_mask(dash::Problem shape) {
  for (int head_dim : {64, 128}) {
    for (const InvarianceCase& c : kInvarianceCases) {
      shape.heads_q = c.heads_q;
      shape.heads_kv = c.heads_kv;
      shape.head_dim = head_dim;
      SCOPED_TRACE(std::string(c.schedule) + " gqa_mode " + std::to_string(c.gqa_mode) + " heads " +
                   std::to_string(c.heads_q) + "/" + std::to_string(c.heads_kv) + " hdim " + std::to_string(head_dim));
      check_pack_invariance(shape, c.schedule, c.gqa_mode);
    }
  }
}

TEST(VarlenCpu, CausalSequencesHaveTheirBatchOneBitsAnywhereInThePack) { check_mask(pack_shape(Mask::Causal)); }
TEST(VarlenCpu, FullSequencesHaveTheirBatchOneBitsAnywhereInThePack) { check_mask(pack_shape(Mask::Full)); }
TEST(VarlenCpu, WindowSequencesHaveTheirBatchOneBitsAnywhereInThePack) {
  // One case: the window applies per sequence, clipped to each sequence's lengths.
  dash::Problem shape = dash::test::windowed(pack_shape(Mask::Window, 4, 2, 64), 20, 3);
  check_pack_invariance(shape, "auto", DASH_GQA_AUTO);
}

TEST(VarlenCpu, SequencesSharingATemplateHaveTheirOwnBatchOneBits) {
  // Lengths of one tile geometry share a unit template (TemplateKey): 40, 50, 70, 100 and 128 are one causal tile at
  // head dim 64 (two or one of 64 rows at head dim 128), 90 x 120 is one at both. Each sequence must still run at
  // its own lengths: its bits are those of its batch-1 call, wherever it sits.
  const Lengths lengths{{40, 50, 70, 100, 128, 90, 70}, {40, 50, 70, 100, 128, 120, 70}};
  for (int head_dim : {64, 128}) {
    for (const InvarianceCase& c : {kInvarianceCases[0], kInvarianceCases[3]}) {
      dash::Problem shape = pack_shape(Mask::Causal, c.heads_q, c.heads_kv, head_dim);
      SCOPED_TRACE(std::string(c.schedule) + " hdim " + std::to_string(head_dim));
      const dash::VarlenPlan plan = dash::plan_for_pack(make_pack(shape, lengths), dash::Schedule::parse(c.schedule),
                                                        132, static_cast<dash::GqaMode>(c.gqa_mode));
      ASSERT_LE(plan.templates.size(), 3u) << "the lengths should share templates";
      check_pack_invariance(shape, c.schedule, c.gqa_mode, lengths);
    }
  }
}

// The forward against attention evaluated per sequence in float64 from the mask's definition. The CPU backend
// carries each row in double and rounds once, so O (a convex combination of standard-normal V rows, |O| < 5) and
// LSE (|LSE| < 20 here) should be within a few float ulps: 1e-5 absolute leaves an order of magnitude of room.
TEST(VarlenCpu, ForwardMatchesFloat64PerSequence) {
  constexpr double kTolerance = 1e-5;
  for (Mask mask : {Mask::Causal, Mask::Full}) {
    SCOPED_TRACE(dash::mask_name(mask));
    const dash::Problem shape = pack_shape(mask, 4, 2, 64);
    VarlenRun run = random_run(shape, kMixedLengths, 99);
    run_varlen(run, "descending", DASH_GQA_SPLIT_HEADS);
    const double scale = 1.0 / std::sqrt(double(shape.head_dim));
    double worst_o = 0, worst_lse = 0;
    for (int32_t s = 0; s < int32_t(kMixedLengths.q.size()); ++s) {
      const int32_t sq = kMixedLengths.q[size_t(s)], sk = kMixedLengths.k[size_t(s)];
      dash::Problem p = shape;
      p.seqlen_q = sq;
      p.seqlen_k = sk;
      const dash::AttentionMask m = dash::AttentionMask::of(p.to_c());
      const int64_t q_row = run.cu_q[size_t(s)], k_row = run.cu_k[size_t(s)], total_q = run.cu_q.back();
      for (int32_t h = 0; h < shape.heads_q; ++h) {
        const int32_t hk = h / shape.group_size();
        for (int32_t i = 0; i < sq; ++i) {
          const float lse = run.lse[size_t(h * total_q + q_row + i)];
          const float* o = run.o.row(q_row + i, h);
          const int32_t begin = sk == 0 ? 0 : m.key_begin(i), end = sk == 0 ? 0 : m.key_end(i);
          if (begin >= end) {  // sees no key
            EXPECT_EQ(lse, -std::numeric_limits<float>::infinity());
            for (int32_t e = 0; e < shape.head_dim; ++e) EXPECT_EQ(o[e], 0.f);
            continue;
          }
          std::vector<double> logits;
          for (int32_t j = begin; j < end; ++j) {
            double dot = 0;
            for (int32_t e = 0; e < shape.head_dim; ++e)
              dot += double(run.q.row(q_row + i, h)[e]) * run.k.row(k_row + j, hk)[e];
            logits.push_back(dot * scale);
          }
          const double max = *std::max_element(logits.begin(), logits.end());
          double sum = 0;
          for (double x : logits) sum += std::exp(x - max);
          worst_lse = std::max(worst_lse, std::abs(double(lse) - (max + std::log(sum))));
          for (int32_t e = 0; e < shape.head_dim; ++e) {
            double out = 0;
            for (int32_t j = begin; j < end; ++j)
              out += std::exp(logits[size_t(j - begin)] - max) * run.v.row(k_row + j, hk)[e];
            worst_o = std::max(worst_o, std::abs(double(o[e]) - out / sum));
          }
        }
      }
    }
    EXPECT_LE(worst_o, kTolerance);
    EXPECT_LE(worst_lse, kTolerance);
  }
}

// ---- the C ABI's varlen handles ----

TEST(VarlenCapi, PackHandleReportsItsProblemAndRows) {
  EXPECT_EQ(dash_abi_struct_size("dash_pack_sequence"), sizeof(dash_pack_sequence));
  EXPECT_EQ(sizeof(dash_pack_sequence), 48u);
  dash_problem given = pack_shape(Mask::Causal, 4, 2, 64).to_c();
  given.batch = 3;
  given.seqlen_q = 7;  // ignored
  const std::vector<int32_t> cu_q = {0, 10, 10, 40}, cu_k = {0, 5, 25, 25};
  dash_pack_t pack = nullptr;
  ASSERT_EQ(dash_pack_create(&given, cu_q.data(), cu_k.data(), &pack), DASH_OK) << dash_last_error();
  dash_problem problem{};
  ASSERT_EQ(dash_pack_problem(pack, &problem), DASH_OK);
  EXPECT_EQ(problem.batch, 3);
  EXPECT_EQ(problem.seqlen_q, 30);
  EXPECT_EQ(problem.seqlen_k, 20);
  EXPECT_EQ(problem.heads_q, 4);
  EXPECT_EQ(problem.head_dim, 64);
  int64_t total_q = 0, total_k = 0;
  ASSERT_EQ(dash_pack_rows(pack, &total_q, &total_k), DASH_OK);
  EXPECT_EQ(total_q, 40);
  EXPECT_EQ(total_k, 25);
  EXPECT_EQ(dash_pack_rows(pack, nullptr, &total_k), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(dash_last_error()).rfind("total_q", 0), 0u) << dash_last_error();
  dash_pack_destroy(pack);
  dash_pack_destroy(nullptr);  // a no-op
}

TEST(VarlenCapi, ErrorsNameTheArgument) {
  auto starts_with = [](const std::string& prefix) {
    const std::string error = dash_last_error();
    return error.rfind(prefix, 0) == 0 ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << error;
  };
  dash_problem given = pack_shape(Mask::Causal, 2, 2, 128).to_c();
  given.batch = 2;
  const std::vector<int32_t> cu = {0, 8, 16}, decreasing = {0, 8, 4};
  dash_pack_t pack = nullptr;
  EXPECT_EQ(dash_pack_create(&given, cu.data(), cu.data(), nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("out: null pointer"));
  EXPECT_EQ(dash_pack_create(nullptr, cu.data(), cu.data(), &pack), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("problem"));
  EXPECT_EQ(dash_pack_create(&given, nullptr, cu.data(), &pack), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("cu_seqlens_q: is NULL"));
  EXPECT_EQ(pack, nullptr);
  EXPECT_EQ(dash_pack_create(&given, cu.data(), decreasing.data(), &pack), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("cu_seqlens_k[2]: 4 is less than cu_seqlens_k[1] = 8"));
  dash_problem odd_dim = given;
  odd_dim.head_dim = 80;
  EXPECT_EQ(dash_pack_create(&odd_dim, cu.data(), cu.data(), &pack), DASH_ERROR_UNSUPPORTED);
  EXPECT_TRUE(starts_with("problem.head_dim"));
  dash_problem no_sequences = given;
  no_sequences.batch = 0;
  EXPECT_EQ(dash_pack_create(&no_sequences, cu.data(), cu.data(), &pack), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("problem.batch"));

  ASSERT_EQ(dash_pack_create(&given, cu.data(), cu.data(), &pack), DASH_OK) << dash_last_error();
  std::vector<float> x(16 * 2 * 128, 1.f), lse(2 * 16);
  const dash_tensor t{x.data(), 0, 2 * 128, 128};
  dash_fwd_args fwd{};
  fwd.dtype = DASH_DTYPE_FP32;
  fwd.q = fwd.k = fwd.v = fwd.o = t;
  fwd.lse = lse.data();
  fwd.problem = given;  // not the pack's (its seqlens are not the longest sequence's)
  EXPECT_EQ(dash_cpu_fwd_varlen(&fwd, pack), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("problem: differs from the pack's problem"));
  ASSERT_EQ(dash_pack_problem(pack, &fwd.problem), DASH_OK);
  EXPECT_EQ(dash_cpu_fwd_varlen(&fwd, nullptr), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("pack"));
  EXPECT_EQ(dash_cpu_fwd_varlen(nullptr, pack), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("args"));
  fwd.dtype = DASH_DTYPE_BF16;
  EXPECT_EQ(dash_cpu_fwd_varlen(&fwd, pack), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("dtype"));
  fwd.dtype = DASH_DTYPE_FP32;
  EXPECT_EQ(dash_cpu_fwd_varlen(&fwd, pack), DASH_OK) << dash_last_error();

  dash_bwd_args bwd{};
  bwd.problem = fwd.problem;
  bwd.dtype = DASH_DTYPE_FP32;
  bwd.q = bwd.k = bwd.v = bwd.o = bwd.dout = t;
  std::vector<float> grads(x.size());
  bwd.dq = bwd.dk = bwd.dv = {grads.data(), 0, 2 * 128, 128};
  bwd.lse = lse.data();
  EXPECT_EQ(dash_cpu_bwd_varlen(&bwd, pack, nullptr, 132, DASH_GQA_AUTO), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("schedule"));
  EXPECT_EQ(dash_cpu_bwd_varlen(&bwd, pack, "sideways", 132, DASH_GQA_AUTO), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("schedule"));
  EXPECT_EQ(dash_cpu_bwd_varlen(&bwd, pack, "auto", 0, DASH_GQA_AUTO), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("num_ctas"));
  EXPECT_EQ(dash_cpu_bwd_varlen(&bwd, pack, "auto", 132, 7), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("gqa_mode"));
  int64_t log = 0;
  bwd.debug_order_log = &log;
  EXPECT_EQ(dash_cpu_bwd_varlen(&bwd, pack, "auto", 132, DASH_GQA_AUTO), DASH_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with("debug_order_log"));
  bwd.debug_order_log = nullptr;
  EXPECT_EQ(dash_cpu_bwd_varlen(&bwd, pack, "auto", 132, DASH_GQA_AUTO), DASH_OK) << dash_last_error();
  dash_pack_destroy(pack);
}

}  // namespace
