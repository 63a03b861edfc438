// SPDX-License-Identifier: Apache-2.0
// hopper/varlen.cuh — what the Hopper kernels need of a varlen pack (dash/plan_format.h, "varlen"): finding the
// sequence that owns a work index, and addressing a sequence's rows through a TMA descriptor so that the hardware
// bounds every box at the sequence's end.
//
// Ragged rows. A packed tensor's descriptor for boxes of kRows rows has two row modes, both with the row stride: an
// inner one of extent kRows and an outer one of extent total_rows + kRows, over a base kRows rows BEFORE the
// tensor's first row (make_ragged_gmem_tensor in tma_host.cuh). Element (inner i, outer o) is packed row
// i + o - kRows. A box whose first `valid` rows belong to the sequence starts at inner = kRows - valid: its rows
// past `valid` have inner >= kRows, out of bounds, so TMA loads them as zeros and TMA stores drop them. Neither a
// neighbouring sequence's values (a NaN there included) nor its rows in memory are ever touched, which is what
// makes a sequence's results independent of the pack. Fixed-length tensors keep their (seqlen, batch) modes: there
// the coordinates are simply (first row, batch).
#pragma once

#include <cstdint>

#include "dash/plan_format.h"

namespace dash::hopper {

// The position (processing order) of the sequence owning work index `index`, where `begin` is the field holding
// each sequence's first index (fwd_tile_begin or ticket_begin). The chunk table names a sequence at or before the
// owner; sequences without work share their successor's begin, so the forward steps pass them.
template <int32_t dash_pack_sequence::*kBegin>
__device__ __forceinline__ int pack_position(const dash_pack_sequence* sequences, const int32_t* chunks,
                                             int num_sequences, int index) {
  int pos = chunks[index / DASH_PACK_CHUNK];
  while (pos + 1 < num_sequences && sequences[pos + 1].*kBegin <= index) ++pos;
  return pos;
}

// The tensor-map row coordinates (inner, outer) of a box of kRows rows whose first row is row `first` of a
// sequence: of batch entry `batch` (fixed length), or (varlen) starting at packed row `row0` with `length` rows.
struct BoxRows {
  int32_t inner, outer;
};
template <int kRows>
__device__ __forceinline__ BoxRows box_rows(bool varlen, int batch, int row0, int first, int length) {
  if (!varlen) return {first, batch};
  int valid = length - first;
  valid = valid < 0 ? 0 : (valid > kRows ? kRows : valid);
  int const inner = kRows - valid;
  return {inner, row0 + first - inner + kRows};
}

}  // namespace dash::hopper
