// SPDX-License-Identifier: Apache-2.0
// `dash-attn check`: runs the backward N times on the same random inputs and prints a SHA-256 of dQ, dK and
// dV per run, so that anyone can see (and compare across machines) that the gradients are bitwise
// reproducible. On the GPU it calls the C ABI's kernels; with --device cpu, the CPU backend.
#ifdef DASH_HAVE_OPENSSL
#include <openssl/evp.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#ifdef DASH_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cli_args.hpp"
#include "dash/dash_attn.h"

namespace dash::cli {
namespace {

std::string sha256_hex(const void* data, size_t bytes) {
#ifndef DASH_HAVE_OPENSSL
  (void)data;
  (void)bytes;
  throw Error("check", "this dash-attn was built without OpenSSL's libcrypto (libssl-dev), which check uses for "
                       "SHA-256; install it and rebuild");
#else
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data, bytes, digest, &length, EVP_sha256(), nullptr) != 1) throw Error("check", "SHA-256 failed");
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
#endif
}

void require(dash_status status, const char* call) {
  if (status != DASH_OK) throw Error(call, dash_last_error());
}

// Dense (batch, seqlen, heads, head_dim) strides in elements: query or key rows, of q and k's head dim or (value)
// of v, o, dO and dV's.
dash_tensor dense(void* data, const Problem& p, bool keys, bool value = false) {
  const int64_t heads = keys ? p.heads_kv : p.heads_q, seqlen = keys ? p.seqlen_k : p.seqlen_q;
  const int64_t d = value ? p.value_head_dim() : p.head_dim;
  return {data, seqlen * heads * d, heads * d, d};
}

// Elements of a dense tensor of query or key rows with head dim `d`.
size_t elements(const Problem& p, bool keys, int64_t d) {
  const int64_t rows = keys ? p.seqlen_k * int64_t(p.heads_kv) : p.seqlen_q * int64_t(p.heads_q);
  return size_t(p.batch) * size_t(rows) * size_t(d);
}

struct RandomInputs {
  std::vector<float> q, k, v, d_o;
};

RandomInputs random_inputs(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  auto fill = [&](bool keys, int64_t d) {
    std::vector<float> x(elements(p, keys, d));
    for (float& e : x) e = normal(rng);
    return x;
  };
  RandomInputs in;
  in.q = fill(false, p.head_dim);
  in.k = fill(true, p.head_dim);
  in.v = fill(true, p.value_head_dim());
  in.d_o = fill(false, p.value_head_dim());
  return in;
}

struct RunHashes {
  std::string dq, dk, dv;
};

std::vector<RunHashes> check_on_cpu(const Problem& p, const std::string& schedule, int32_t gqa_mode, int runs,
                                    uint32_t seed, std::string& planner) {
  RandomInputs in = random_inputs(p, seed);
  std::vector<float> o(in.d_o.size()), lse(size_t(p.batch) * p.heads_q * p.seqlen_q);
  std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  const dash_problem cp = p.to_c();
  dash_fwd_args fwd{cp, DASH_DTYPE_FP32, dense(in.q.data(), p, false), dense(in.k.data(), p, true),
                    dense(in.v.data(), p, true, true), dense(o.data(), p, false, true), lse.data(), 0.f};
  require(dash_cpu_fwd(&fwd), "dash_cpu_fwd");
  void* blob = nullptr;
  size_t blob_bytes = 0;
  require(dash_plan_build_host(&cp, schedule.c_str(), 132, gqa_mode, &blob, &blob_bytes),
          "dash_plan_build_host");
  planner = planner_name(static_cast<Planner>(static_cast<const dash_plan_header*>(blob)->planner));
  dash_bwd_args bwd{cp,         DASH_DTYPE_FP32, fwd.q, fwd.k, fwd.v, fwd.o, dense(in.d_o.data(), p, false, true),
                    lse.data(),  dense(dq.data(), p, false), dense(dk.data(), p, true),
                    dense(dv.data(), p, true, true), 0.f, nullptr};
  std::vector<RunHashes> hashes;
  for (int run = 0; run < runs; ++run) {
    const dash_status status = dash_cpu_bwd(&bwd, blob, blob_bytes);
    if (status != DASH_OK) {
      dash_plan_free_host(blob);
      require(status, "dash_cpu_bwd");
    }
    hashes.push_back({sha256_hex(dq.data(), dq.size() * 4), sha256_hex(dk.data(), dk.size() * 4),
                      sha256_hex(dv.data(), dv.size() * 4)});
  }
  dash_plan_free_host(blob);
  return hashes;
}

#ifdef DASH_HAVE_CUDA
void cuda_require(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw Error(call, cudaGetErrorString(status));
}

// bf16 bits of x, rounded to nearest even (inputs are finite normals).
uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

uint16_t to_fp16(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { cuda_require(cudaMalloc(&ptr_, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

std::vector<RunHashes> check_on_gpu(const Problem& p, const std::string& schedule, int32_t gqa_mode, int runs,
                                    uint32_t seed, dash_dtype dtype, bool deterministic, std::string& planner,
                                    std::string& gpu) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    throw Error("--device", "no CUDA device here; use --device cpu for the CPU backend");
  cudaDeviceProp prop{};
  cuda_require(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  gpu = prop.name;

  const RandomInputs in = random_inputs(p, seed);
  auto upload = [&](const std::vector<float>& host) {
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) bits[i] = dtype == DASH_DTYPE_BF16 ? to_bf16(host[i]) : to_fp16(host[i]);
    auto buffer = std::make_unique<DeviceBuffer>(bits.size() * 2);
    cuda_require(cudaMemcpy(buffer->get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    return buffer;
  };
  const auto q = upload(in.q), k = upload(in.k), v = upload(in.v), d_o = upload(in.d_o);
  DeviceBuffer o(in.d_o.size() * 2), dq(in.q.size() * 2), dk(in.k.size() * 2), dv(in.v.size() * 2);
  DeviceBuffer lse(size_t(p.batch) * p.heads_q * p.seqlen_q * 4);

  const dash_problem cp = p.to_c();
  dash_fwd_args fwd{cp, dtype, dense(q->get(), p, false), dense(k->get(), p, true), dense(v->get(), p, true, true),
                    dense(o.get(), p, false, true), static_cast<float*>(lse.get()), 0.f};
  DeviceBuffer fwd_workspace(dash_fwd_workspace_size(&fwd));
  require(dash_fwd(&fwd, fwd_workspace.get(), fwd_workspace.bytes(), nullptr), "dash_fwd");
  dash_plan_t plan = nullptr;
  require(dash_plan_create(&cp, schedule.c_str(), 0, gqa_mode, &plan), "dash_plan_create");
  const void* blob = nullptr;
  size_t blob_bytes = 0;
  require(dash_plan_blob(plan, &blob, &blob_bytes), "dash_plan_blob");
  planner = planner_name(static_cast<Planner>(static_cast<const dash_plan_header*>(blob)->planner));
  dash_bwd_args bwd{cp, dtype, fwd.q, fwd.k, fwd.v, fwd.o, dense(d_o->get(), p, false, true),
                    static_cast<const float*>(lse.get()), dense(dq.get(), p, false), dense(dk.get(), p, true),
                    dense(dv.get(), p, true, true), 0.f, nullptr};
  const size_t workspace_bytes = dash_bwd_workspace_size(&bwd, plan, deterministic ? 1 : 0);
  if (workspace_bytes == 0) require(DASH_ERROR_INVALID_ARGUMENT, "dash_bwd_workspace_size");
  DeviceBuffer workspace(workspace_bytes);

  std::vector<RunHashes> hashes;
  std::vector<uint8_t> host(std::max({dq.bytes(), dk.bytes(), dv.bytes()}));
  auto hash_of = [&](const DeviceBuffer& b) {
    cuda_require(cudaMemcpy(host.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return sha256_hex(host.data(), b.bytes());
  };
  for (int run = 0; run < runs; ++run) {
    // Poison the outputs so that a run which left something unwritten cannot inherit the last run's bits.
    for (const DeviceBuffer* b : {&dq, &dk, &dv}) cuda_require(cudaMemset(b->get(), 0xff, b->bytes()), "cudaMemset");
    const dash_status status = dash_bwd(&bwd, plan, deterministic ? 1 : 0, workspace.get(), workspace_bytes, nullptr);
    if (status != DASH_OK) {
      dash_plan_destroy(plan);
      require(status, "dash_bwd");
    }
    cuda_require(cudaDeviceSynchronize(), "dash_bwd (kernel)");
    hashes.push_back({hash_of(dq), hash_of(dk), hash_of(dv)});
  }
  dash_plan_destroy(plan);
  return hashes;
}
#endif

// Bytes of host memory this process may use: the machine's physical memory, or less where a cgroup (v2 or v1)
// limits it. 0 when neither can be read.
uint64_t host_memory_limit() {
  uint64_t limit = 0;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = uint64_t(pages) * uint64_t(page);
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (FILE* f = std::fopen(path, "r")) {
      unsigned long long value = 0;
      if (std::fscanf(f, "%llu", &value) == 1 && value > 0 && (limit == 0 || value < limit)) limit = value;
      std::fclose(f);
    }
  }
  return limit;
}

// Host bytes `check` allocates before running: fp32 q, k, v, dO and (CPU backend) o, dq, dk, dv plus the CPU
// backend's fp32 dK/dV accumulators; on the GPU path the 16-bit staging copies instead. The plan blob is
// bounded by the plan limits already checked.
uint64_t check_host_bytes(const Problem& p, bool on_cpu) {
  // Query rows and key rows, of the q / k head dim and of the value head dim (v, o, dO, dV).
  const uint64_t q = uint64_t(p.batch) * p.seqlen_q * p.heads_q * p.head_dim;
  const uint64_t k = uint64_t(p.batch) * p.seqlen_k * p.heads_kv * p.head_dim;
  const uint64_t qv = uint64_t(p.batch) * p.seqlen_q * p.heads_q * p.value_head_dim();
  const uint64_t kv = uint64_t(p.batch) * p.seqlen_k * p.heads_kv * p.value_head_dim();
  // CPU: q, dq, o, dO; k, v, dk, dv and the dK / dV accumulators. GPU: fp32 q, k, v, dO, and the 16-bit staging.
  return on_cpu ? 4 * (2 * q + 2 * qv + 3 * k + 3 * kv) : 4 * (q + qv + k + kv) + 2 * (q + k);
}

} // namespace

int cmd_check(Args& args) {
  const Shape s = parse_shape(args, false);
  const int runs = args.integer("--runs", 5);
  const std::string schedule = args.value("--schedule").value_or("auto");
  Schedule::parse(schedule); // names the argument if unknown
  const std::string device = args.value("--device").value_or("cuda");
  const std::string dtype_name = args.value("--dtype").value_or("bf16");
  const bool deterministic = !args.has("--nondeterministic");
  const uint32_t seed = uint32_t(args.integer("--seed", 0, 0));
  args.expect_all_used();
  if (dtype_name != "bf16" && dtype_name != "fp16") throw Error("--dtype", "expected bf16 or fp16");
  // The kernels' tile shape: check does not take --block-m or --block-n.
  // Limits before work: the kernels' and the plan format's limits, then host memory, before any planning or
  // allocation.
  // The GPU needs the pair's backward kernel; the CPU backend runs the backward at every row of the table.
  const dash_problem limits_problem = s.problem.to_c();
  if (dash_check_problem(&limits_problem, device == "cpu" ? DASH_CHECK_CPU_BACKWARD : DASH_CHECK_BACKWARD) != DASH_OK) {
    // "problem.<field>: ...": main reports the field as the flag that sets it.
    const std::string message = dash_last_error();
    const size_t colon = message.find(": ");
    throw Error(message.substr(0, colon), message.substr(colon + 2));
  }
  const uint64_t needed = check_host_bytes(s.problem, device == "cpu"), available = host_memory_limit();
  if (available != 0 && needed > available / 2) {
    char text[160];
    std::snprintf(text, sizeof text, "these tensors need %.1f GiB of host memory; this machine allows %.1f GiB "
                  "(check refuses above half of it)", double(needed) / (1 << 30), double(available) / (1 << 30));
    throw Error("--seqlen", text);
  }

  std::string planner, where;
  std::vector<RunHashes> hashes;
  if (device == "cpu") {
    if (!deterministic) throw Error("--nondeterministic", "the CPU backend has no non-deterministic mode");
    where = "the CPU backend (fp32)";
    hashes = check_on_cpu(s.problem, schedule, int32_t(s.gqa), runs, seed, planner);
  } else if (device == "cuda") {
#ifdef DASH_HAVE_CUDA
    std::string gpu;
    hashes = check_on_gpu(s.problem, schedule, int32_t(s.gqa), runs, seed, dtype_name == "bf16" ? DASH_DTYPE_BF16 : DASH_DTYPE_FP16,
                          deterministic, planner, gpu);
    where = gpu + " (" + dtype_name + ")";
#else
    throw Error("--device", "this dash-attn was built without CUDA; use --device cpu");
#endif
  } else {
    throw Error("--device", "expected cuda or cpu, got '" + device + "'");
  }

  std::printf("check: %s; schedule %s (plan: %s); %s; %d runs on %s\n", s.problem.describe().c_str(),
              schedule.c_str(), planner.c_str(), deterministic ? "deterministic" : "NON-deterministic", runs,
              where.c_str());
  std::printf("%-4s %-64s %-64s %-64s\n", "run", "dQ sha256", "dK sha256", "dV sha256");
  bool identical = true;
  for (size_t r = 0; r < hashes.size(); ++r) {
    std::printf("%-4zu %s %s %s\n", r + 1, hashes[r].dq.c_str(), hashes[r].dk.c_str(), hashes[r].dv.c_str());
    identical = identical && hashes[r].dq == hashes[0].dq && hashes[r].dk == hashes[0].dk && hashes[r].dv == hashes[0].dv;
  }
  std::printf("%s\n", identical ? "all runs bitwise identical" : "runs DIFFER");
  // A deterministic run that differs is a bug: fail loudly. Non-deterministic differences are expected.
  return (identical || !deterministic) ? 0 : 1;
}

} // namespace dash::cli
