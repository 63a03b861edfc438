// SPDX-License-Identifier: Apache-2.0
// dash/geometry.hpp — the problem description and the mask's tile geometry: which (Q tile, KV tile) blocks
// have unmasked (query, key) pairs, which are only partly unmasked, and how many pairs each holds.
// Pure host code: the planner, the validator, the simulator and the FLOP count all use it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dash/plan_format.h"

namespace dash {

// Every user-facing error names the argument it is about.
class Error : public std::runtime_error {
 public:
  Error(const std::string& argument, const std::string& message)
      : std::runtime_error(argument + ": " + message), argument_(argument) {}
  const std::string& argument() const { return argument_; }

 private:
  std::string argument_;
};

enum class Mask : int32_t { Full = DASH_MASK_FULL, Causal = DASH_MASK_CAUSAL, Window = DASH_MASK_WINDOW };

struct Problem {
  int32_t batch = 1;
  int32_t heads_q = 1;
  int32_t heads_kv = 1;
  int32_t seqlen_q = 0;
  int32_t seqlen_k = 0;
  int32_t head_dim = 128;    // of q and k
  int32_t head_dim_v = 0;    // of v, o, dout, dv; 0 = head_dim
  Mask mask = Mask::Full;
  int32_t window_left = -1;  // Mask::Window only; -1 = unbounded
  int32_t window_right = -1; // Mask::Window only; -1 = unbounded

  int32_t group_size() const { return heads_q / heads_kv; }
  int32_t value_head_dim() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
  dash_problem to_c() const;
  static Problem from_c(const dash_problem& p);
  // Throws dash::Error naming the offending field.
  void validate() const;
  std::string describe() const;
};

// Mask parsing/printing for CLIs and bindings: "full", "causal", "window".
Mask parse_mask(const std::string& name);
const char* mask_name(Mask mask);

struct TileShape {
  int32_t block_m = 0; // query rows per Q tile
  int32_t block_n = 0; // key rows per KV tile
};

// The tile shape the dash-attn backward kernels use for a head dim; planners default to it so that plans
// match the kernels. (Kernels check the plan's tile shape against their own and refuse a mismatch.) The tiles are
// those of the row of the qk head dim, whatever its value head dim (64 x 64 at 192 / 128 and 256). A head dim without
// a backward kernel (any head dim of a study) gets the table's rule, 128 x 128 up to head dim 64 and 64 x 128 above,
// so that plans can still be built and simulated.
TileShape default_backward_tiles(int32_t head_dim);

// FLOPs of one attention pass over `p`, the one definition every benchmark uses (shared/docs/benchmark-protocol.md): the
// forward does 2 * (head_dim + head_dim_v) FLOPs (4 * head_dim when they are equal) per (query, key) pair per (batch,
// query head), as FlashAttention counts them, counting Nq * Nk pairs for the
// full mask, exactly half of that for causal with Nq = Nk (the convention of FA3, the DASH paper and the
// anchors, so figures compare), and the unmasked pairs exactly otherwise (causal with Nq != Nk, windows); the
// backward is 2.5 x the forward.
enum class Pass { Forward, Backward };
double attention_flops(const Problem& p, Pass pass);

// Head dims the dash-attn kernels are built for with head_dim_v == head_dim (the rows of dash/kernel_table.hpp whose
// two head dims are equal), ascending: 64, 96, 128, 256. A row of two head dims (192 / 128) is not among them:
// kernel_table_row(head_dim, head_dim_v) finds every row, and dash_check_problem accepts exactly the table's pairs
// (one contract for the GPU entry points and the CPU backend). The planner and simulator take any head dim.
const std::vector<int32_t>& kernel_head_dims();

// A (head_dim, head_dim_v) pair as messages name it: "128", or "192/128" when the two differ (head_dim_v 0 means
// head_dim).
std::string kernel_pair_name(int32_t head_dim, int32_t head_dim_v);
// The table's rows as messages list them, in table order: "64, 96, 128, 192/128 and 256" (All), the rows with a
// backward kernel (WithBackward) or those with a forward kernel only (ForwardOnly).
enum class KernelRows { All, WithBackward, ForwardOnly };
std::string kernel_pairs_text(KernelRows which = KernelRows::All);

enum class BlockKind : uint8_t { Empty, Partial, Full };

// The mask seen at tile granularity. Query row i sees key j iff
//   lo(i) <= j <= hi(i),  lo(i) = i + (sk - sq) - left,  hi(i) = i + (sk - sq) + right
// with an unbounded side dropped (full mask: both unbounded; causal: left unbounded, right = 0).
class TileGrid {
 public:
  TileGrid(const Problem& problem, TileShape tiles);

  int32_t num_q_tiles() const { return num_q_tiles_; }
  int32_t num_kv_tiles() const { return num_kv_tiles_; }
  TileShape tiles() const { return tiles_; }

  BlockKind kind(int32_t q_tile, int32_t kv_tile) const;
  // Exact number of unmasked (query, key) pairs in the block.
  int64_t unmasked_pairs(int32_t q_tile, int32_t kv_tile) const;
  // Q tiles with at least one unmasked pair against this KV tile, ascending (contiguous for these masks).
  std::vector<int32_t> q_tiles_seen_by(int32_t kv_tile) const;
  // Unmasked (query, key) pairs over the whole sequence pair (one head): the FLOP-count basis.
  int64_t total_unmasked_pairs() const;
  // Inclusive key range visible to query row `row`, clipped to [0, seqlen_k); empty when first > last.
  void visible_keys(int64_t row, int64_t& first, int64_t& last) const;

 private:
  Problem problem_;
  TileShape tiles_;
  int32_t num_q_tiles_ = 0;
  int32_t num_kv_tiles_ = 0;
};

// The same problem with the lengths that stand for its tile geometry: the longest seqlen_q, then the longest
// seqlen_k, whose grid has the same tile counts and every block of the same kind (TileGrid::kind) for the same
// reasons (seqlen_q, seqlen_k and their difference within the same thresholds, src/core/geometry.cpp). All the lengths
// of a full or causal geometry get one representative (a window's may get a few), and the mapping is idempotent. The
// planners and the validator read a problem's lengths only through that geometry, so both lengths give the same unit
// template: unit templates are keyed on it (template_key, dash/plan.hpp). O(KV tiles), nothing allocated.
Problem geometry_representative(const Problem& problem, TileShape tiles);

} // namespace dash
