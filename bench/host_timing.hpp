// SPDX-License-Identifier: Apache-2.0
// host_timing.hpp — the host-time helpers of the planning benchmarks (bench_plan.cpp, bench_plan_upload.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace dash::bench {

// Milliseconds since t0 on the steady clock.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The median (the mean of the middle two for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace dash::bench
