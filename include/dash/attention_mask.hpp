// SPDX-License-Identifier: Apache-2.0
// dash/attention_mask.hpp — which keys a query row sees: the one definition of the mask that the forward and
// backward kernels, the planner's tile geometry (dash/geometry.hpp) and the CPU backend read.
//
// Query row i sees key j iff key_begin(i) <= j < key_end(i), with the band aligned bottom-right as
// FlashAttention aligns it (offset = seqlen_k - seqlen_q):
//   full:   every key;
//   causal: j <= i + offset;
//   window: i + offset - left <= j <= i + offset + right, an unbounded side (-1) dropped.
// A row whose range is empty sees no key (O = 0, LSE = -inf, no gradient). In a varlen pack each sequence has its
// own lengths (for_lengths), and rows and keys count from the sequence's first row.
#pragma once

#include <cstdint>

#include "dash/plan_format.h"  // dash_mask_kind, DASH_HOST_DEVICE

namespace dash {

struct AttentionMask {
  int32_t kind;          // dash_mask_kind
  int32_t seqlen_q, seqlen_k;
  int32_t window_left;   // DASH_MASK_WINDOW only; -1 = unbounded
  int32_t window_right;  // DASH_MASK_WINDOW only; -1 = unbounded

  // A window side at least as wide as the sequences bounds nothing (left >= seqlen_k: key_begin is 0 for every
  // row; right >= seqlen_q: key_end is seqlen_k): it is made unbounded, which sees the same keys and keeps the
  // kernels' band arithmetic (row + offset -/+ side) within int32.
  DASH_HOST_DEVICE static AttentionMask of(const dash_problem& p) {
    return AttentionMask{p.mask_kind, p.seqlen_q, p.seqlen_k, p.window_left, p.window_right}.for_lengths(p.seqlen_q,
                                                                                                        p.seqlen_k);
  }
  // The same mask over sequences of other lengths (one sequence of a varlen pack), clipped as `of` clips: a side
  // made unbounded stays so (it was at least as wide as longer sequences).
  DASH_HOST_DEVICE AttentionMask for_lengths(int32_t sq, int32_t sk) const {
    AttentionMask m{kind, sq, sk, window_left, window_right};
    if (m.kind == DASH_MASK_WINDOW) {
      if (m.window_left >= m.seqlen_k) m.window_left = -1;
      if (m.window_right >= m.seqlen_q) m.window_right = -1;
    }
    return m;
  }

  DASH_HOST_DEVICE bool causal() const { return kind == DASH_MASK_CAUSAL; }
  // Bottom-right alignment: the diagonal of row i is key i + diagonal_offset().
  DASH_HOST_DEVICE int32_t diagonal_offset() const { return seqlen_k - seqlen_q; }
  // The band's sides: a bounded side limits the keys to within left / right of the diagonal.
  DASH_HOST_DEVICE bool left_bounded() const { return kind == DASH_MASK_WINDOW && window_left >= 0; }
  DASH_HOST_DEVICE bool right_bounded() const {
    return kind == DASH_MASK_CAUSAL || (kind == DASH_MASK_WINDOW && window_right >= 0);
  }
  DASH_HOST_DEVICE int32_t left() const { return window_left; }
  DASH_HOST_DEVICE int32_t right() const { return kind == DASH_MASK_CAUSAL ? 0 : window_right; }

  // First key row `row` sees, clipped to 0.
  DASH_HOST_DEVICE int32_t key_begin(int32_t row) const {
    const int32_t first = row + diagonal_offset() - left();
    return left_bounded() && first > 0 ? first : 0;
  }
  // One past the last key row `row` sees, clipped to seqlen_k (<= key_begin(row) when it sees none).
  DASH_HOST_DEVICE int32_t key_end(int32_t row) const {
    int32_t end = seqlen_k;
    if (right_bounded()) {
      const int32_t band_end = row + 1 + diagonal_offset() + right();
      end = band_end < end ? band_end : end;
    }
    return end;
  }
};

}  // namespace dash
