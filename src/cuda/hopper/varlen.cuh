// SPDX-License-Identifier: Apache-2.0
// hopper/varlen.cuh — what the Hopper kernels need of a varlen pack (dash/plan_format.h, "varlen"): finding the
// sequence that owns a work index, and addressing a sequence's rows through a TMA descriptor so that the hardware
// bounds every box at the sequence's end.
//
// Ragged rows (the construction of Triton's ragged TMA descriptors). A packed tensor's descriptor has five modes
// (make_ragged_gmem_tensor in tma_host.cuh): rows x (extent 2^30, the row stride s), head dim, heads, y (the row
// stride) and z (stride 2^34 - s, elements). Element (x, y, z) lies at row x + y + z (2^34 - s) / s, and with
// z = 2^30 the last term is -2^30 rows modulo 2^64 (addresses wrap at 2^64: 2^30 x 2^34 elements x 2 bytes). Row
// `first` of a sequence of `length` rows starting at packed row row0 is x = 2^30 - length + first, y = row0 +
// length: the box's rows at and past the sequence's end have x >= 2^30, out of bounds, so TMA loads them as zeros
// and TMA stores drop them. Every coordinate is non-negative and the base is the tensor's own: a descriptor based
// before the tensor (tried first) made the TMA unit touch memory there, which faulted where it was unmapped.
// Neither a neighbouring sequence's values (a NaN there included) nor its rows in memory are ever touched, which
// makes a sequence's results independent of the pack. Fixed-length tensors use the same five modes as (seqlen,
// head dim, heads, batch, 1): there the coordinates are (first row, batch, 0).
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

// Extent of the ragged row mode x and the ragged z coordinate: 2^30.
constexpr int32_t kRaggedRows = int32_t(1) << 30;

// The tensor-map coordinates (x, y, z) of a box whose first row is row `first` of a sequence: of batch entry `batch`
// (fixed length), or (varlen) the sequence of `length` rows starting at packed row `row0`.
struct BoxRows {
  int32_t x, y, z;
};
__device__ __forceinline__ BoxRows box_rows(bool varlen, int batch, int row0, int first, int length) {
  if (!varlen) return {first, batch, 0};
  return {kRaggedRows - length + first, row0 + length, kRaggedRows};
}

}  // namespace dash::hopper
