// SPDX-License-Identifier: Apache-2.0
// bench_forward.cu — dash-bench-fwd: times the attention forward (through the C ABI) on the grid of
// shared/docs/benchmark-protocol.md and writes one JSON line per configuration, plus a table on stdout.
//
//   dash-bench-fwd --out forward.jsonl --commit abc1234 [--warmup 3] [--iters 20] [--dtype bf16|fp16]
//                  [--variant NAME] [--only-hdim 64|128] [--cooldown-ms 500]
//
// Per configuration: random normal inputs (never zeros) generated on the device, every input set far larger
// than L2 at 16,384 tokens; `warmup` untimed calls, then `iters` calls each bracketed by its own pair of CUDA
// events; median, min and max of those. A pause between configurations (--cooldown-ms) keeps the power
// and thermal state of one configuration from leaking into the next (as FlashAttention's benchmark does). FLOPs: dash_attention_flops (the protocol's one definition)
// (the convention of FA3 and shared/docs/h200-anchors.md). After timing, O is scanned for non-finite values.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "dash/dash_attn.h"
#include "bench_common.cuh"

namespace {

__global__ void count_non_finite(const uint16_t* data, size_t n, int dtype, unsigned long long* count) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float const v = dtype == DASH_DTYPE_BF16 ? __bfloat162float(__ushort_as_bfloat16(data[i]))
                                             : __half2float(__ushort_as_half(data[i]));
    local += isfinite(v) ? 0 : 1;
  }
  if (local) atomicAdd(count, local);
}

struct Config {
  int batch, heads_q, heads_kv, seqlen, head_dim;
  dash_mask_kind mask;
};

struct Options {
  std::string out_path;
  std::string commit = "unknown";
  std::string variant = "default";
  int warmup = 3;
  int iters = 20;
  int only_hdim = 0;
  int cooldown_ms = 500;
  dash_dtype dtype = DASH_DTYPE_BF16;
};

void usage() {
  std::fprintf(stderr,
               "usage: dash-bench-fwd --out FILE.jsonl --commit ID [--warmup N>=3] [--iters N>=10] "
               "[--dtype bf16|fp16] [--variant NAME] [--only-hdim 64|128] [--cooldown-ms N]\n");
  std::exit(1);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (arg == "--out") o.out_path = value();
    else if (arg == "--commit") o.commit = value();
    else if (arg == "--variant") o.variant = value();
    else if (arg == "--warmup") o.warmup = std::atoi(value().c_str());
    else if (arg == "--iters") o.iters = std::atoi(value().c_str());
    else if (arg == "--only-hdim") o.only_hdim = std::atoi(value().c_str());
    else if (arg == "--cooldown-ms") o.cooldown_ms = std::atoi(value().c_str());
    else if (arg == "--dtype") {
      std::string const t = value();
      if (t == "bf16") o.dtype = DASH_DTYPE_BF16;
      else if (t == "fp16") o.dtype = DASH_DTYPE_FP16;
      else usage();
    } else usage();
  }
  if (o.out_path.empty() || o.warmup < 3 || o.iters < 10) usage();
  return o;
}

// The protocol's count (dash_attention_flops, dash/dash_attn.h).
double flops_of(const Config& c) {
  const dash_problem p =
      grid_problem(c.batch, c.heads_q, c.heads_kv, c.seqlen, c.head_dim, c.mask == DASH_MASK_CAUSAL);
  return dash_attention_flops(&p, 0);
}

}  // namespace

int main(int argc, char** argv) {
  Options const opt = parse(argc, argv);

  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int runtime_version = 0, driver_version = 0, clock_khz = 0, mem_clock_khz = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));
  CUDA_CHECK(cudaDriverGetVersion(&driver_version));
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device);

  // The protocol grid: hidden 2048 (16 heads at hdim 128, 32 at hdim 64), 16,384 tokens, full and causal;
  // plus the Llama-3-8B GQA rows (32 query / 8 KV heads, hdim 128, causal).
  std::vector<Config> configs;
  for (int head_dim : {128, 64}) {
    if (opt.only_hdim && opt.only_hdim != head_dim) continue;
    int const heads = 2048 / head_dim;
    for (int seqlen : {512, 1024, 2048, 4096, 8192, 16384})
      for (dash_mask_kind mask : {DASH_MASK_FULL, DASH_MASK_CAUSAL})
        configs.push_back({16384 / seqlen, heads, heads, seqlen, head_dim, mask});
  }
  if (!opt.only_hdim || opt.only_hdim == 128) {
    for (int seqlen : {4096, 8192}) configs.push_back({16384 / seqlen, 32, 8, seqlen, 128, DASH_MASK_CAUSAL});
  }

  FILE* out = std::fopen(opt.out_path.c_str(), "a");
  if (!out) {
    std::fprintf(stderr, "cannot open %s\n", opt.out_path.c_str());
    return 1;
  }
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  unsigned long long* d_bad = nullptr;
  CUDA_CHECK(cudaMalloc(&d_bad, sizeof(*d_bad)));

  std::printf("%-5s %-6s %6s %6s %5s %5s | %9s %9s %9s | %8s\n", "hdim", "mask", "batch", "seqlen", "hq", "hkv",
              "median_ms", "min_ms", "max_ms", "TFLOP/s");
  int failures = 0;
  for (const Config& c : configs) {
    size_t const q_elems = size_t(c.batch) * c.seqlen * c.heads_q * c.head_dim;
    size_t const kv_elems = size_t(c.batch) * c.seqlen * c.heads_kv * c.head_dim;
    uint16_t *q, *k, *v, *o;
    float* lse;
    CUDA_CHECK(cudaMalloc(&q, q_elems * 2));
    CUDA_CHECK(cudaMalloc(&k, kv_elems * 2));
    CUDA_CHECK(cudaMalloc(&v, kv_elems * 2));
    CUDA_CHECK(cudaMalloc(&o, q_elems * 2));
    CUDA_CHECK(cudaMalloc(&lse, size_t(c.batch) * c.heads_q * c.seqlen * sizeof(float)));
    fill_normal<<<1024, 256, 0, stream>>>(q, q_elems, 1, opt.dtype);
    fill_normal<<<1024, 256, 0, stream>>>(k, kv_elems, 2, opt.dtype);
    fill_normal<<<1024, 256, 0, stream>>>(v, kv_elems, 3, opt.dtype);
    CUDA_CHECK(cudaGetLastError());

    dash_fwd_args args{};
    args.problem = dash_problem{c.batch, c.heads_q, c.heads_kv, c.seqlen, c.seqlen, c.head_dim, c.mask, -1, -1, 0};
    args.dtype = opt.dtype;
    int64_t const q_seq = int64_t(c.heads_q) * c.head_dim, kv_seq = int64_t(c.heads_kv) * c.head_dim;
    args.q = {q, q_seq * c.seqlen, q_seq, c.head_dim};
    args.k = {k, kv_seq * c.seqlen, kv_seq, c.head_dim};
    args.v = {v, kv_seq * c.seqlen, kv_seq, c.head_dim};
    args.o = {o, q_seq * c.seqlen, q_seq, c.head_dim};
    args.lse = lse;
    args.softmax_scale = 0.f;
    size_t const workspace_bytes = dash_fwd_workspace_size(&args);
    void* workspace = nullptr;
    CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));

    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (opt.cooldown_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.cooldown_ms));
    std::vector<float> times;
    bool ok = true;
    for (int i = 0; i < opt.warmup + opt.iters && ok; ++i) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      if (dash_fwd(&args, workspace, workspace_bytes, stream) != DASH_OK) {
        std::fprintf(stderr, "dash_fwd failed: %s\n", dash_last_error());
        ok = false;
        break;
      }
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i >= opt.warmup) times.push_back(ms);
    }
    CUDA_CHECK(cudaMemsetAsync(d_bad, 0, sizeof(*d_bad), stream));
    count_non_finite<<<1024, 256, 0, stream>>>(o, q_elems, opt.dtype, d_bad);
    unsigned long long bad = 0;
    CUDA_CHECK(cudaMemcpyAsync(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!ok || bad) {
      std::fprintf(stderr, "config hdim %d seqlen %d %s: %s (%llu non-finite outputs)\n", c.head_dim, c.seqlen,
                   c.mask == DASH_MASK_CAUSAL ? "causal" : "full", ok ? "bad output" : "call failed", bad);
      ++failures;
    }
    if (ok) {
      std::vector<float> sorted = times;
      std::sort(sorted.begin(), sorted.end());
      size_t const n = sorted.size();
      double const median = n % 2 ? sorted[n / 2] : 0.5 * (double(sorted[n / 2 - 1]) + sorted[n / 2]);
      double const tflops = flops_of(c) / (median * 1e-3) / 1e12;
      char const* mask = c.mask == DASH_MASK_CAUSAL ? "causal" : "full";
      std::printf("%-5d %-6s %6d %6d %5d %5d | %9.4f %9.4f %9.4f | %8.1f\n", c.head_dim, mask, c.batch, c.seqlen,
                  c.heads_q, c.heads_kv, median, sorted.front(), sorted.back(), tflops);
      std::fprintf(out,
                   "{\"op\":\"forward\",\"commit\":\"%s\",\"variant\":\"%s\",\"gpu\":\"%s\",\"sm_count\":%d,"
                   "\"sm_clock_mhz_max\":%d,\"mem_clock_mhz_max\":%d,\"cuda_runtime\":%d,\"cuda_driver\":%d,"
                   "\"dtype\":\"%s\",\"batch\":%d,\"seqlen_q\":%d,\"seqlen_k\":%d,\"heads_q\":%d,\"heads_kv\":%d,"
                   "\"head_dim\":%d,\"mask\":\"%s\",\"warmup\":%d,\"iters\":%d,\"median_ms\":%.5f,\"min_ms\":%.5f,"
                   "\"max_ms\":%.5f,\"flops\":%.6e,\"tflops\":%.2f,\"outputs_finite\":%s}\n",
                   opt.commit.c_str(), opt.variant.c_str(), prop.name, prop.multiProcessorCount, clock_khz / 1000,
                   mem_clock_khz / 1000, runtime_version, driver_version,
                   opt.dtype == DASH_DTYPE_BF16 ? "bf16" : "fp16", c.batch, c.seqlen, c.seqlen, c.heads_q,
                   c.heads_kv, c.head_dim, mask, opt.warmup, opt.iters, median, double(sorted.front()),
                   double(sorted.back()), flops_of(c), tflops, bad ? "false" : "true");
      std::fflush(out);
    }
    CUDA_CHECK(cudaFree(workspace));
    CUDA_CHECK(cudaFree(q));
    CUDA_CHECK(cudaFree(k));
    CUDA_CHECK(cudaFree(v));
    CUDA_CHECK(cudaFree(o));
    CUDA_CHECK(cudaFree(lse));
  }
  std::fclose(out);
  std::printf("device: %s, %d SMs, CUDA runtime %d, driver %d; commit %s, variant %s\n", prop.name,
              prop.multiProcessorCount, runtime_version, driver_version, opt.commit.c_str(), opt.variant.c_str());
  return failures ? 3 : 0;
}
