// SPDX-License-Identifier: Apache-2.0
// hopper/bwd/bwd_launch.cuh — host side of the Hopper backward for one (head dims, dtype): TMA descriptors over the
// caller's strided Q / dO / K / V and dK / dV, then preprocess, the plan-executing main kernel and convert, on the
// caller's stream. Included only by the generated instantiation files (src/cuda/CMakeLists.txt). Validation and
// the zeroing of the workspace live in src/cuda/bwd/.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "hopper/bwd/bwd_kernel.cuh"
#include "hopper/bwd/bwd_preprocess_convert.cuh"
#include "hopper/entry_points.h"
#include "hopper/launch_host.cuh"
#include "hopper/tma_host.cuh"

namespace dash::hopper::bwd {

template <class Config>
dash_status run_with(kernels::bwd::BwdParams const& params, int32_t num_ctas, int device, cudaStream_t stream,
                     std::string& error) {
  using namespace cute;
  constexpr int kHeadDim = Config::kHeadDim, kHeadDimV = Config::kHeadDimV;
  using StdElement = typename Config::StdElement;
  constexpr int kBlockM = Config::kBlockM;

  // TMA descriptors over the caller's strided Q / dO / K / V (loads) and dK / dV (stores).
  // Varlen: ragged views of the packed tensors (hopper/varlen.cuh).
  const bool varlen = params.sequences != nullptr;
  auto rows_of = [&](dash_tensor const& t, int seqlen, int heads, auto cols) {
    constexpr int kCols = decltype(cols)::value;
    return varlen ? tma::make_ragged_gmem_tensor<typename Config::Element, kCols>(t, heads)
                  : tma::make_gmem_tensor<typename Config::Element, kCols>(t, seqlen, heads, params.batch);
  };
  auto gQ = rows_of(params.q, params.mask.seqlen_q, params.heads_q, Int<kHeadDim>{});
  auto gdO = rows_of(params.dout, params.mask.seqlen_q, params.heads_q, Int<kHeadDimV>{});
  auto gK = rows_of(params.k, params.mask.seqlen_k, params.heads_kv, Int<kHeadDim>{});
  auto gV = rows_of(params.v, params.mask.seqlen_k, params.heads_kv, Int<kHeadDimV>{});
  auto gdK = rows_of(params.dk, params.mask.seqlen_k, params.heads_kv, Int<kHeadDim>{});
  auto gdV = rows_of(params.dv, params.mask.seqlen_k, params.heads_kv, Int<kHeadDimV>{});
  BwdKernelParams<Config> kernel_params{
      params,
      make_tma_copy(SM90_TMA_LOAD{}, gQ, typename Config::SmemLayoutQStage{}),
      make_tma_copy(SM90_TMA_LOAD{}, gdO, typename Config::SmemLayoutdOStage{}),
      make_tma_copy(SM90_TMA_LOAD{}, gK, typename Config::SmemLayoutK{}),
      make_tma_copy(SM90_TMA_LOAD{}, gV, typename Config::SmemLayoutV{}),
      make_tma_copy(SM90_TMA_STORE{}, gdK, typename Config::SmemLayoutK{}),
      make_tma_copy(SM90_TMA_STORE{}, gdV, typename Config::SmemLayoutV{}),
      gQ.shape(),
      gdO.shape(),
      gK.shape(),
      gV.shape(),
  };
  if (dash_status s = tma::check_descriptors({{"q", kernel_params.tma_q.get_tma_descriptor()},
                                              {"dout", kernel_params.tma_do.get_tma_descriptor()},
                                              {"k", kernel_params.tma_k.get_tma_descriptor()},
                                              {"v", kernel_params.tma_v.get_tma_descriptor()},
                                              {"dk", kernel_params.tma_dk.get_tma_descriptor()},
                                              {"dv", kernel_params.tma_dv.get_tma_descriptor()}},
                                             error);
      s != DASH_OK) {
    return s;
  }

  // 1. delta and LSE2 per padded query row, the zeroed counters (and split-GQA dK / dV accumulators; the dQ
  // accumulators where adds are unordered). Without query rows (a varlen pack of key-only sequences) it does not
  // run, and the launcher zeroes what it would have.
  constexpr int kRowsPerBlock = RowSlices<kHeadDim>::kRowsPerBlock;
  {
    const dim3 grid(unsigned((params.num_q_tiles * kBlockM + kRowsPerBlock - 1) / kRowsPerBlock),
                    unsigned(params.batch * params.heads_q));
    if (grid.x > 0) {
      bwd_preprocess<kBlockM, kHeadDim, kHeadDimV, StdElement><<<grid, 256, 0, stream>>>(params);
    } else {
      for (auto [begin, words] : {std::pair{params.zero_counters, params.zero_counters_words},
                                  std::pair{params.zero_dkv, params.zero_dkv_words}}) {
        if (words == 0) continue;
        if (cudaError_t status = cudaMemsetAsync(begin, 0, size_t(words) * sizeof(uint4), stream);
            status != cudaSuccess) {
          return cuda_fail(error, "cudaMemsetAsync(workspace)", status);
        }
      }
    }
    if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) {
      return cuda_fail(error, "launch of bwd_preprocess", status);
    }
  }
  // 2. The plan-executing main kernel, persistent over the plan's tickets. Not cooperative: a deterministic plan
  // needs only its wave of CTAs running at once (docs/DEADLOCK.md; the host checked the device holds it), so CTAs
  // that wait for SMs other kernels hold delay the work without stalling it.
  {
    constexpr auto kernel = backward_kernel<Config>;
    constexpr int kSmemBytes = smem_bytes_of<Config>();
    if (dash_status s = opt_in_dynamic_smem<kernel>(device, kSmemBytes, "backward kernel", error); s != DASH_OK) {
      return s;
    }
    // Launched as the preprocess grid's programmatic dependent: its CTAs take the SMs that preprocess blocks leave
    // and set up (shared memory, barriers) while the last ones run, then wait for the grid (griddepcontrol_wait).
    // After a memset (no preprocess grid) the attribute does nothing.
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(unsigned(num_ctas));
    config.blockDim = dim3(unsigned(Config::kThreads));
    config.dynamicSmemBytes = size_t(kSmemBytes);
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (cudaError_t status = cudaLaunchKernelEx(&config, kernel, kernel_params); status != cudaSuccess) {
      return cuda_fail(error, "launch of backward kernel", status);
    }
  }
  // 3. fp32 accumulators -> outputs: dQ, and dK / dV in a second z-slice for split-head GQA (batch * heads_q <=
  // 65535, checked by dash_check_problem, bounds both).
  {
    // Varlen: padded rows of the global tiles, and the dK / dV slice always (it writes the zero dK / dV of
    // sequences without queries).
    const int rows_q = varlen ? params.num_q_tiles * kBlockM : params.mask.seqlen_q;
    const int rows_k = varlen ? params.num_kv_tiles * Config::kBlockN : params.mask.seqlen_k;
    const int rows = rows_q > rows_k ? rows_q : rows_k;
    const dim3 grid(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(params.batch * params.heads_q),
                    (params.split_dkv || varlen) ? 2u : 1u);
    if (grid.x > 0) {
      bwd_convert<kBlockM, Config::kBlockN, kHeadDim, kHeadDimV, StdElement><<<grid, 256, 0, stream>>>(params);
    }
    if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) {
      return cuda_fail(error, "launch of bwd_convert", status);
    }
  }
  return DASH_OK;
}

// The backward of one (head dims, dtype). Where the tiles allow staggered warpgroups (BwdConfig::kStaggered), the
// unordered adds (the non-deterministic mode) run that instantiation of the kernel. Its leader's dQ rows are handed
// off a visit late, so ordered adds (runs_ordered) run it only where the plan spaces every dQ chain's consecutive
// adds two visits apart or more (dash_plan_header::rank_spacing); elsewhere the warpgroups stay in lock step, whose
// hand-offs are on time (an ordered dQ chain waits for each of them). Both give the same bits: the same GEMMs and
// adds in the same order.
template <int kHeadDim, int kHeadDimV, dash_dtype kDtype>
dash_status run(kernels::bwd::BwdParams const& params, int32_t num_ctas, int device, cudaStream_t stream,
                std::string& error) {
  using LockStep = BwdConfig<kHeadDim, kHeadDimV, kDtype>;
  if constexpr (LockStep::kCanStagger) {
    if (!params.ordered || params.rank_spacing >= 2) {
      return run_with<BwdConfig<kHeadDim, kHeadDimV, kDtype, true>>(params, num_ctas, device, stream, error);
    }
  }
  return run_with<LockStep>(params, num_ctas, device, stream, error);
}

}  // namespace dash::hopper::bwd

// One (head dims, dtype) of the backward: what each generated instantiation file expands.
#define DASH_INSTANTIATE_HOPPER_BWD(HDIM, HDIM_V, DTYPE)                                                         \
  template dash_status dash::hopper::bwd::run<HDIM, HDIM_V, DTYPE>(dash::kernels::bwd::BwdParams const&, int32_t, \
                                                                   int, cudaStream_t, std::string&);
