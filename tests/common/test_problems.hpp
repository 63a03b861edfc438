// SPDX-License-Identifier: Apache-2.0
// Problem shapes for the CPU tests, built one way everywhere.
#pragma once

#include "dash/geometry.hpp"

namespace dash::test {

inline Problem make_problem(int seqlen_q, int seqlen_k, Mask mask, int heads_q = 1, int heads_kv = 1, int batch = 1,
                            int head_dim = 128) {
  Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim = head_dim;
  p.mask = mask;
  return p;
}

// The same shape under a sliding window (-1 = unbounded side).
inline Problem windowed(Problem p, int left, int right) {
  p.mask = Mask::Window;
  p.window_left = left;
  p.window_right = right;
  return p;
}

} // namespace dash::test
