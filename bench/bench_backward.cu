// SPDX-License-Identifier: Apache-2.0
// bench_backward.cu — dash-bench-bwd: times the plan-executing attention backward (through the C ABI) on the
// grid of the benchmark protocol, every schedule plus the non-deterministic mode in the same process, and
// writes one JSON line per (config, mode, schedule), plus a table on stdout.
//
//   dash-bench-bwd --out backward.jsonl --commit abc1234 [--warmup 3] [--iters 10] [--only-hdim 64|128]
//                  [--quick] [--busy-ms N [--busy-ctas K[,K...]] [--busy-repeats R]]
//                  [--config B,S,HQ,HKV,D,full|causal]
//                  [--schedules nondet,shift,...]
//                  [--gqa auto|split|pack|auto-nondeterministic]   (GQA configs: the planner picks (default, as
//                  dash_attn does), one unit per query head, one per KV head, or the problem's non-deterministic plan
//                  (the torch op's with deterministic=False; with schedule auto also MHA's balanced plan: nondet
//                  rows only); the JSON's gqa_plan is the mode the plan has)
//
// Per configuration: random normal inputs on the device (never zeros), O and LSE from dash_fwd (so P is the
// real softmax); `warmup` untimed calls, then `iters` calls each bracketed by its own CUDA events; median,
// min, max. FLOPs: dash_attention_flops (the protocol's one definition). Bitwise: the gradients of
// 3 further runs are hashed and compared (the JSON's gradient_hash is the first: the inputs come from fixed seeds,
// so two builds' deterministic rows of one plan can be compared bit for bit). Each row also carries the simulator's
// makespan for the same plan (dash::simulate with CostModel::for_problem) so the ranking can be calibrated.
// --config: one configuration instead of the grid (profiling, A/B runs). --schedules: which rows to run, from
// nondet (the non-deterministic mode with the auto plan) and the deterministic schedules; default all.
// --busy-ms N [--busy-ctas K[,K...]] [--busy-repeats R]: after each row, for each K, R more backwards (default 5),
// each while K CTAs of a spin kernel (200 KB of shared memory each, so none of ours fits beside one; default: every
// SM) hold K SMs for N ms on another stream, launched 1 ms before it; reports the median of the R times (and the
// slowest) against the undisturbed median, the bound 1.15 x SMs / (SMs - K) on the median ratio, and whether the
// dQ, dK and dV bits of every run equal the undisturbed run's (every mode: a non-deterministic run may differ). Use
// it with --config: it runs for every row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "dash/dash_attn.h"
#include "bench_common.cuh"
#include "dash/plan.hpp"
#include "dash/simulator.hpp"

namespace {

// Occupies one SM per block (large shared memory) and spins for `cycles` clock cycles.
__global__ void spin_kernel(long long cycles) {
  extern __shared__ unsigned char hog[];
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0) hog[0] = 1;
}

// Holds its stream for `cycles` clock cycles (one small CTA).
__global__ void delay_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Order-independent 64-bit fingerprint of a buffer (integer sums commute, so the atomics are deterministic):
// equal bits give equal fingerprints; a differing element changes it with overwhelming probability.
__global__ void fingerprint_kernel(const uint64_t* words, size_t n, unsigned long long* out) {
  unsigned long long acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = words[i] ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29;
    acc += x;
  }
  atomicAdd(out, acc);
}

uint64_t hash_device(const void* data, size_t bytes) {
  static unsigned long long* d_out = nullptr;
  if (!d_out) CUDA_CHECK(cudaMalloc(&d_out, sizeof(unsigned long long)));
  CUDA_CHECK(cudaMemset(d_out, 0, sizeof(unsigned long long)));
  fingerprint_kernel<<<1024, 256>>>(static_cast<const uint64_t*>(data), bytes / 8, d_out);
  unsigned long long h = 0;
  CUDA_CHECK(cudaMemcpy(&h, d_out, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

struct Config {
  int batch, heads_q, heads_kv, seqlen, head_dim;
  bool causal;
};

struct Buffers {
  uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float* lse;
  size_t nq, nk;
};

dash_tensor tensor(void* p, int seqlen, int heads, int dim) {
  return dash_tensor{p, int64_t(seqlen) * heads * dim, int64_t(heads) * dim, int64_t(dim)};
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "backward.jsonl", commit = "unknown";
  int warmup = 3, iters = 10, only_hdim = 0, busy_ms = 0, busy_repeats = 5;
  std::vector<int> busy_ctas;
  bool quick = false;
  std::string only_config, only_schedules, gqa = "auto";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--out") out_path = next();
    else if (a == "--commit") commit = next();
    else if (a == "--warmup") warmup = std::atoi(next().c_str());
    else if (a == "--iters") iters = std::atoi(next().c_str());
    else if (a == "--only-hdim") only_hdim = std::atoi(next().c_str());
    else if (a == "--busy-ms") busy_ms = std::atoi(next().c_str());
    else if (a == "--busy-ctas") {
      const std::string list = next();
      for (size_t at = 0; at < list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        busy_ctas.push_back(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    }
    else if (a == "--busy-repeats") busy_repeats = std::max(1, std::atoi(next().c_str()));
    else if (a == "--quick") quick = true;
    else if (a == "--config") only_config = next();
    else if (a == "--schedules") only_schedules = "," + next() + ",";
    else if (a == "--gqa") gqa = next();
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const std::optional<dash::GqaMode> gqa_named = dash::gqa_mode_named(gqa);
  if (!gqa_named) {
    std::fprintf(stderr, "--gqa: expected auto, split, pack or auto-nondeterministic, got '%s'\n", gqa.c_str());
    return 2;
  }
  const int32_t gqa_mode = static_cast<int32_t>(*gqa_named);
  FILE* out = std::fopen(out_path.c_str(), "w");
  if (!out) {
    std::perror(out_path.c_str());
    return 2;
  }
  int device = 0, sms = 0, runtime = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  sms = prop.multiProcessorCount;
  cudaRuntimeGetVersion(&runtime);

  std::vector<Config> configs;
  const std::vector<std::pair<int, int>> shapes =
      quick ? std::vector<std::pair<int, int>>{{4, 4096}, {1, 16384}}
            : std::vector<std::pair<int, int>>{{32, 512}, {16, 1024}, {8, 2048}, {4, 4096}, {2, 8192}, {1, 16384}};
  for (int hd : {64, 128}) {
    if (only_hdim && hd != only_hdim) continue;
    for (bool causal : {false, true})
      for (auto [b, s] : shapes) configs.push_back({b, hd == 128 ? 16 : 32, hd == 128 ? 16 : 32, s, hd, causal});
  }
  if (!only_hdim || only_hdim == 128) {
    configs.push_back({4, 32, 8, 4096, 128, true});  // GQA (Llama-3-8B attention)
    configs.push_back({2, 32, 8, 8192, 128, true});
  }
  if (!only_config.empty()) {
    Config c{};
    char mask[16] = {};
    if (std::sscanf(only_config.c_str(), "%d,%d,%d,%d,%d,%15s", &c.batch, &c.seqlen, &c.heads_q, &c.heads_kv,
                    &c.head_dim, mask) != 6 ||
        (std::strcmp(mask, "full") != 0 && std::strcmp(mask, "causal") != 0)) {
      std::fprintf(stderr, "--config: expected B,S,HQ,HKV,D,full|causal, got %s\n", only_config.c_str());
      return 2;
    }
    c.causal = std::strcmp(mask, "causal") == 0;
    configs = {c};
  }
  const std::vector<const char*> schedules = {"ascending", "descending", "shift", "symmetric-shift", "auto"};

  std::printf("%-34s %-8s %-16s %9s %9s %9s %8s %6s %10s\n", "config", "mode", "schedule", "median_ms", "min_ms",
              "max_ms", "TFLOP/s", "bitwise", "sim_us");
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));

  for (const Config& c : configs) {
    Buffers bf{};
    bf.nq = size_t(c.batch) * c.seqlen * c.heads_q * c.head_dim;
    bf.nk = size_t(c.batch) * c.seqlen * c.heads_kv * c.head_dim;
    for (auto [ptr, n] : {std::pair{&bf.q, bf.nq}, {&bf.k, bf.nk}, {&bf.v, bf.nk}, {&bf.o, bf.nq}, {&bf.dout, bf.nq},
                          {&bf.dq, bf.nq}, {&bf.dk, bf.nk}, {&bf.dv, bf.nk}})
      CUDA_CHECK(cudaMalloc(ptr, n * 2));
    CUDA_CHECK(cudaMalloc(&bf.lse, size_t(c.batch) * c.heads_q * c.seqlen * 4));
    fill_normal<<<1024, 256>>>(bf.q, bf.nq, 1, DASH_DTYPE_BF16);
    fill_normal<<<1024, 256>>>(bf.k, bf.nk, 2, DASH_DTYPE_BF16);
    fill_normal<<<1024, 256>>>(bf.v, bf.nk, 3, DASH_DTYPE_BF16);
    fill_normal<<<1024, 256>>>(bf.dout, bf.nq, 4, DASH_DTYPE_BF16);
    const dash_problem p = grid_problem(c.batch, c.heads_q, c.heads_kv, c.seqlen, c.head_dim, c.causal);

    dash_fwd_args fa{};
    fa.problem = p;
    fa.dtype = DASH_DTYPE_BF16;
    fa.q = tensor(bf.q, c.seqlen, c.heads_q, c.head_dim);
    fa.k = tensor(bf.k, c.seqlen, c.heads_kv, c.head_dim);
    fa.v = tensor(bf.v, c.seqlen, c.heads_kv, c.head_dim);
    fa.o = tensor(bf.o, c.seqlen, c.heads_q, c.head_dim);
    fa.lse = bf.lse;
    void* fwd_workspace = nullptr;
    CUDA_CHECK(cudaMalloc(&fwd_workspace, dash_fwd_workspace_size(&fa)));
    dash_status const forward = dash_fwd(&fa, fwd_workspace, dash_fwd_workspace_size(&fa), stream);
    CUDA_CHECK(cudaFree(fwd_workspace));  // cudaFree waits for the forward
    if (forward != DASH_OK) {
      std::fprintf(stderr, "dash_fwd failed (%s): skipping config\n", dash_last_error());
      continue;
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));

    dash_bwd_args a{};
    a.problem = p;
    a.dtype = DASH_DTYPE_BF16;
    a.q = fa.q;
    a.k = fa.k;
    a.v = fa.v;
    a.o = fa.o;
    a.dout = tensor(bf.dout, c.seqlen, c.heads_q, c.head_dim);
    a.lse = bf.lse;
    a.dq = tensor(bf.dq, c.seqlen, c.heads_q, c.head_dim);
    a.dk = tensor(bf.dk, c.seqlen, c.heads_kv, c.head_dim);
    a.dv = tensor(bf.dv, c.seqlen, c.heads_kv, c.head_dim);
    const double flops = dash_attention_flops(&p, 1);  // the protocol's count (dash/dash_attn.h)
    char config_name[128];
    std::snprintf(config_name, sizeof config_name, "b%d_s%d_hq%d_hkv%d_d%d_%s", c.batch, c.seqlen, c.heads_q,
                  c.heads_kv, c.head_dim, c.causal ? "causal" : "full");

    // Non-deterministic first (with the auto plan), then every schedule deterministic.
    std::vector<std::pair<const char*, int>> modes = {{"auto", 0}};
    for (const char* s : schedules) modes.push_back({s, 1});
    for (auto [schedule, det] : modes) {
      if (!only_schedules.empty() &&
          only_schedules.find("," + std::string(det ? schedule : "nondet") + ",") == std::string::npos) {
        continue;
      }
      dash_plan_t plan = nullptr;
      if (dash_plan_create(&p, schedule, 0, gqa_mode, &plan) != DASH_OK) {
        std::printf("%-34s %-8s %-16s plan refused: %s\n", config_name, det ? "det" : "nondet", schedule,
                    dash_last_error());
        continue;
      }
      const size_t ws_bytes = dash_bwd_workspace_size(&a, plan, det);
      void* ws = nullptr;
      CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
      bool ok = true;
      for (int i = 0; i < warmup && ok; ++i) ok = dash_bwd(&a, plan, det, ws, ws_bytes, stream) == DASH_OK;
      if (!ok) {
        std::printf("%-34s %-8s %-16s dash_bwd failed: %s\n", config_name, det ? "det" : "nondet", schedule,
                    dash_last_error());
        dash_plan_destroy(plan);
        cudaFree(ws);
        continue;
      }
      std::vector<float> times;
      for (int i = 0; i < iters; ++i) {
        CUDA_CHECK(cudaEventRecord(e0, stream));
        dash_bwd(&a, plan, det, ws, ws_bytes, stream);
        CUDA_CHECK(cudaEventRecord(e1, stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        times.push_back(ms);
      }
      CUDA_CHECK(cudaGetLastError());
      // One fingerprint of dQ, dK and dV together.
      const auto gradient_hash = [&] {
        return hash_device(bf.dq, bf.nq * 2) ^ (hash_device(bf.dk, bf.nk * 2) * 3) ^ (hash_device(bf.dv, bf.nk * 2) * 7);
      };
      // Bitwise across 3 more runs.
      uint64_t first = 0;
      bool bitwise = true;
      for (int r = 0; r < 3; ++r) {
        dash_bwd(&a, plan, det, ws, ws_bytes, stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const uint64_t h = gradient_hash();
        if (r == 0) first = h;
        else bitwise &= (h == first);
      }
      // Simulated makespan of the same plan, and the GQA mode it has.
      double sim_us = -1;
      const char* gqa_plan = "split";
      int plan_wave = 1;
      {
        const void* data = nullptr;
        size_t bytes = 0;
        dash_plan_blob(plan, &data, &bytes);
        const dash::Plan hp = dash::Plan::from_blob(static_cast<const uint8_t*>(data), bytes);
        dash::SimOptions so;
        so.critical_path = false;
        so.nondeterministic = !det;  // the non-deterministic row's adds wait for no turn
        const dash::CostModel cm = dash::CostModel::for_problem(hp.problem(), {hp.header.block_m, hp.header.block_n});
        sim_us = dash::simulate(hp, hp.header.num_ctas, cm, so).makespan;
        gqa_plan = dash::gqa_mode_name(hp.gqa_mode());
        plan_wave = hp.header.min_coresident_ctas;
      }
      const double med = median(times);
      const double mn = *std::min_element(times.begin(), times.end());
      const double mx = *std::max_element(times.begin(), times.end());
      const double tflops = flops / (med * 1e-3) / 1e12;
      std::printf("%-34s %-8s %-16s %9.3f %9.3f %9.3f %8.1f %6s %10.1f%s%s\n", config_name, det ? "det" : "nondet",
                  schedule, med, mn, mx, tflops, bitwise ? "yes" : "NO", sim_us, c.heads_q != c.heads_kv ? "  gqa " : "",
                  c.heads_q != c.heads_kv ? gqa_plan : "");
      std::fprintf(out,
                   "{\"commit\":\"%s\",\"gpu\":\"%s\",\"sms\":%d,\"cuda_runtime\":%d,\"op\":\"backward\",\"config\":\"%s\","
                   "\"batch\":%d,\"seqlen\":%d,\"heads_q\":%d,\"heads_kv\":%d,\"head_dim\":%d,\"mask\":\"%s\",\"dtype\":\"bf16\","
                   "\"mode\":\"%s\",\"schedule\":\"%s\",\"median_ms\":%.4f,\"min_ms\":%.4f,\"max_ms\":%.4f,\"tflops\":%.2f,"
                   "\"bitwise_identical_3_runs\":%s,\"gradient_hash\":\"%016llx\",\"simulated_makespan_us\":%.1f,"
                   "\"iters\":%d,\"warmup\":%d,\"gqa\":\"%s\",\"gqa_plan\":\"%s\"}\n",
                   commit.c_str(), prop.name, sms, runtime, config_name, c.batch, c.seqlen, c.heads_q, c.heads_kv,
                   c.head_dim, c.causal ? "causal" : "full", det ? "deterministic" : "nondeterministic", schedule, med,
                   mn, mx, tflops, bitwise ? "true" : "false", static_cast<unsigned long long>(first), sim_us, iters,
                   warmup, gqa.c_str(), gqa_plan);
      std::fflush(out);
      std::fflush(stdout);

      // Busy-SM experiment: the same call while other kernels hold K SMs.
      if (busy_ms > 0) {
        dash_bwd(&a, plan, det, ws, ws_bytes, stream);  // the undisturbed reference bits
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const uint64_t ref = gradient_hash();
        cudaStream_t other;
        CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
        const int hog_smem = 200 * 1024;
        CUDA_CHECK(cudaFuncSetAttribute(spin_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, hog_smem));
        int clock_khz = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
        const long long cycles = (long long)busy_ms * clock_khz;  // kHz = cycles per ms
        const long long lead_cycles = (long long)clock_khz;       // 1 ms
        for (int held : busy_ctas.empty() ? std::vector<int>{sms} : busy_ctas) {
          const int hogs = std::min(held, sms);
          std::vector<float> runs;
          bool same = true;
          for (int r = 0; r < busy_repeats; ++r) {
            spin_kernel<<<hogs, 32, hog_smem, other>>>(cycles);
            delay_kernel<<<1, 32, 0, stream>>>(lead_cycles);  // the hogs start first, as a communication kernel would
            CUDA_CHECK(cudaEventRecord(e0, stream));
            dash_bwd(&a, plan, det, ws, ws_bytes, stream);
            CUDA_CHECK(cudaEventRecord(e1, stream));
            CUDA_CHECK(cudaEventSynchronize(e1));
            CUDA_CHECK(cudaStreamSynchronize(other));  // each run starts with the hogs of its own spin kernel
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            runs.push_back(ms);
            same = same && gradient_hash() == ref;
          }
          const float slowest = *std::max_element(runs.begin(), runs.end());
          std::sort(runs.begin(), runs.end());
          const size_t mid = runs.size() / 2;
          const double ms = runs.size() % 2 ? runs[mid] : 0.5 * (runs[mid - 1] + runs[mid]);  // the median
          const double bound = hogs < sms ? 1.15 * sms / double(sms - hogs) : 0;
          const bool within = hogs < sms && ms / med <= bound;
          std::printf("BUSY %s %s %s: %d SMs held %d ms on another stream: backward %.3f ms, median of %d (slowest "
                      "%.3f; undisturbed median %.3f ms, x%.2f, bound x%.2f %s), dQ/dK/dV bits %s\n", config_name,
                      det ? "det" : "nondet", schedule, hogs, busy_ms, ms, busy_repeats, slowest, med, ms / med, bound,
                      within ? "met" : "MISSED", same ? "identical" : (det ? "DIFFERENT" : "differ (non-deterministic)"));
          std::fprintf(out,
                       "{\"commit\":\"%s\",\"gpu\":\"%s\",\"op\":\"backward_busy_sms\",\"config\":\"%s\",\"mode\":\"%s\","
                       "\"schedule\":\"%s\",\"busy_ctas\":%d,\"busy_ms\":%d,\"busy_repeats\":%d,\"elapsed_ms\":%.4f,"
                       "\"slowest_ms\":%.4f,\"undisturbed_median_ms\":%.4f,\"ratio\":%.3f,\"ratio_slowest\":%.3f,"
                       "\"bound\":%.3f,\"within_bound\":%s,\"bitwise_identical_to_unloaded\":%s,\"plan_wave\":%d}\n",
                       commit.c_str(), prop.name, config_name, det ? "deterministic" : "nondeterministic", schedule,
                       hogs, busy_ms, busy_repeats, ms, slowest, med, ms / med, slowest / med, bound,
                       within ? "true" : "false", same ? "true" : "false", plan_wave);
          std::fflush(out);
        }
        CUDA_CHECK(cudaStreamDestroy(other));
      }
      dash_plan_destroy(plan);
      CUDA_CHECK(cudaFree(ws));
    }
    for (void* ptr : {(void*)bf.q, (void*)bf.k, (void*)bf.v, (void*)bf.o, (void*)bf.dout, (void*)bf.dq, (void*)bf.dk,
                      (void*)bf.dv, (void*)bf.lse})
      cudaFree(ptr);
  }
  std::fclose(out);
  return 0;
}
