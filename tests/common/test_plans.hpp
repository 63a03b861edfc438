// SPDX-License-Identifier: Apache-2.0
// Plan views for the CPU tests.
#pragma once

#include <cstdint>
#include <vector>

#include "dash/plan.hpp"

namespace dash::test {

// The visits (indices into plan.visits) of each lock-step item of a unit, in order. A template cut into slots
// (plan_format.h, "Slots") lists slot k of its items 0 .. W-1 at items k W .. k W + W - 1, so lock-step item i is
// items i, W + i, 2 W + i, ... one after another; an uncut template's items are its lock-step items.
inline std::vector<std::vector<int32_t>> lockstep_items(const Plan& plan) {
  const int32_t items = int32_t(plan.items.size());
  const int32_t width = slot_items(plan.header);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(width));
  for (int32_t i = 0; i < items; ++i) {
    const dash_item& item = plan.items[size_t(i)];
    for (int32_t s = item.first_segment; s < item.first_segment + item.num_segments; ++s) {
      const dash_segment& seg = plan.segments[size_t(s)];
      for (int32_t v = seg.first_visit; v < seg.first_visit + seg.num_visits; ++v) out[size_t(i % width)].push_back(v);
    }
  }
  return out;
}

}  // namespace dash::test
