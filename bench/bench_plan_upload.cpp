// SPDX-License-Identifier: Apache-2.0
// bench_plan_upload.cpp — dash-bench-plan-upload: where the host time of a new 128k-token shape's plan goes on the
// machine it runs on (the GPU machine: the upload needs a device). Prints, as text:
//   * dash::plan_for of a 128k-token unit (causal and full, head dim 128) on 1, 2, 4, 8, 12 and 16 planner threads,
//     the template cache cleared before each call (median and min of 9);
//   * the pieces of an upload of 8 and 16 MB (the visit tables of those units): cudaMalloc, a pageable
//     cudaMemcpyAsync + synchronisation, cudaHostAlloc, a host copy into pinned memory on 1 and 8 threads, the
//     pinned copy + synchronisation (median of 7);
//   * dash_plan_create of 7 new 128k-token shapes each, causal and full (lengths 131072 - 128 j: a template each),
//     i.e. the build, validation and upload as the torch binding pays them.
//
//   dash-bench-plan-upload
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "dash/dash_attn.h"
#include "dash/plan.hpp"
#include "host_timing.hpp"

namespace dash::detail {
void set_planner_threads(int n);  // src/core/planner_internal.hpp (tests and measurements)
}

namespace {

using Clock = std::chrono::steady_clock;
using dash::bench::median;
using dash::bench::ms_since;

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

dash::PlanRequest unit_128k(bool full) {
  dash::PlanRequest r;
  r.problem.batch = r.problem.heads_q = r.problem.heads_kv = 1;
  r.problem.seqlen_q = r.problem.seqlen_k = 131072;
  r.problem.head_dim = 128;
  r.problem.mask = full ? dash::Mask::Full : dash::Mask::Causal;
  r.schedule = dash::Schedule::parse("auto");
  r.num_ctas = 132;
  r.gqa_mode = dash::GqaMode::Auto;
  return r;
}

void plan_for_by_threads() {
  for (bool full : {false, true}) {
    for (int threads : {1, 2, 4, 8, 12, 16}) {
      dash::detail::set_planner_threads(threads);
      std::vector<double> ms;
      for (int i = 0; i < 9; ++i) {
        dash::clear_template_cache();
        const auto t0 = Clock::now();
        dash::plan_for(unit_128k(full));
        ms.push_back(ms_since(t0));
      }
      std::printf("plan_for 128k %-6s threads %2d: median %.3f min %.3f ms\n", full ? "full" : "causal", threads,
                  median(ms), minimum(ms));
    }
  }
  dash::detail::set_planner_threads(0);
}

void upload_pieces() {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  for (size_t mb : {8, 16}) {
    const size_t bytes = mb << 20;
    std::vector<double> malloc_ms, pageable_ms, host_alloc_ms, copy1_ms, copy8_ms, pinned_ms;
    for (int i = 0; i < 7; ++i) {
      void* device = nullptr;
      auto t0 = Clock::now();
      cudaMalloc(&device, bytes);
      malloc_ms.push_back(ms_since(t0));
      // Fresh pageable memory, faulted in, as a new template's tables are.
      char* tables = static_cast<char*>(std::malloc(bytes));
      std::memset(tables, i, bytes);
      t0 = Clock::now();
      cudaMemcpyAsync(device, tables, bytes, cudaMemcpyHostToDevice, stream);
      cudaStreamSynchronize(stream);
      pageable_ms.push_back(ms_since(t0));
      void* pinned = nullptr;
      t0 = Clock::now();
      if (cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault) != cudaSuccess) {
        std::printf("cudaHostAlloc(%zu MB) failed\n", mb);
        return;
      }
      host_alloc_ms.push_back(ms_since(t0));
      t0 = Clock::now();
      std::memcpy(pinned, tables, bytes);
      copy1_ms.push_back(ms_since(t0));
      t0 = Clock::now();
      dash::detail::parallel_copy(pinned, tables, bytes);  // the planner's threads, as the staged upload uses them
      copy8_ms.push_back(ms_since(t0));
      t0 = Clock::now();
      cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, stream);
      cudaStreamSynchronize(stream);
      pinned_ms.push_back(ms_since(t0));
      cudaFreeHost(pinned);
      cudaFree(device);
      std::free(tables);
    }
    std::printf("%2zu MB: cudaMalloc %.3f | pageable copy + sync %.3f | cudaHostAlloc %.3f | host copy into pinned: 1 "
                "thread %.3f, planner threads %.3f | pinned copy + sync %.3f ms\n",
                mb, median(malloc_ms), median(pageable_ms), median(host_alloc_ms), median(copy1_ms), median(copy8_ms),
                median(pinned_ms));
  }
  cudaStreamDestroy(stream);
}

void plan_create_new_shapes() {
  for (bool full : {false, true}) {
    std::vector<double> ms;
    for (int j = 1; j <= 7; ++j) {
      dash_problem p{};
      p.batch = 1;
      p.heads_q = p.heads_kv = 16;
      p.seqlen_q = p.seqlen_k = 131072 - 128 * j - (full ? 64 : 0);
      p.head_dim = 128;
      p.mask_kind = full ? DASH_MASK_FULL : DASH_MASK_CAUSAL;
      p.window_left = p.window_right = -1;
      dash_plan_t plan = nullptr;
      const auto t0 = Clock::now();
      const dash_status status = dash_plan_create(&p, "auto", 0, DASH_GQA_AUTO, &plan);
      ms.push_back(ms_since(t0));
      if (status != DASH_OK) std::printf("dash_plan_create: %s\n", dash_last_error());
      dash_plan_destroy(plan);
    }
    std::printf("dash_plan_create, new 128k %-6s shapes: median %.3f min %.3f max %.3f ms\n", full ? "full" : "causal",
                median(ms), minimum(ms), *std::max_element(ms.begin(), ms.end()));
  }
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (cudaFree(nullptr) != cudaSuccess) {
    std::printf("dash-bench-plan-upload: no CUDA device (it times uploads)\n");
    return 1;
  }
  std::printf("hardware threads %u\n", std::thread::hardware_concurrency());
  plan_for_by_threads();
  upload_pieces();
  plan_create_new_shapes();
  return 0;
}
