// SPDX-License-Identifier: Apache-2.0
// hopper/fwd/fwd_launch.cuh — host side of the Hopper forward kernel: turns a validated FwdLaunch into kernel
// parameters (TMA descriptors over the caller's strided tensors), picks the grid and launches on the caller's
// stream. Included only by the generated instantiation files (src/cuda/CMakeLists.txt). Policy (validation,
// defaults) lives in fwd_api.cpp; this file only translates.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>

#include <cuda_runtime_api.h>

#include "hopper/element_types.cuh"
#include "hopper/entry_points.h"
#include "hopper/fwd/fwd_config.cuh"
#include "hopper/fwd/fwd_kernel.cuh"
#include "hopper/launch_host.cuh"
#include "hopper/tma_host.cuh"

namespace dash::hopper::fwd {

template <int kHeadDim, int kHeadDimV, dash_dtype kDtype>
int smem_bytes() {
  return fwd_smem_bytes<FwdConfig<kHeadDim, kHeadDimV, typename CuteElement<kDtype>::type>>();
}

// kVarlen: launch.varlen describes a pack (its sequences set).
template <class Config, bool kVarlen>
dash_status run_with(kernels::FwdLaunch const& launch, std::string& error) {
  using namespace cute;
  using Element = typename Config::Element;
  constexpr int kHeadDim = Config::kHeadDim, kHeadDimV = Config::kHeadDimV;
  dash_fwd_args const& a = launch.args;
  dash_problem const& pr = a.problem;

  kernels::VarlenLaunch const& pack = launch.varlen;
  constexpr bool varlen = kVarlen;
  // Fixed length: (seqlen, head dim, heads, batch, 1). Varlen: ragged views (hopper/varlen.cuh).
  auto gQ = varlen ? tma::make_ragged_gmem_tensor<Element, kHeadDim>(a.q, pr.heads_q)
                   : tma::make_gmem_tensor<Element, kHeadDim>(a.q, pr.seqlen_q, pr.heads_q, pr.batch);
  auto gK = varlen ? tma::make_ragged_gmem_tensor<Element, kHeadDim>(a.k, pr.heads_kv)
                   : tma::make_gmem_tensor<Element, kHeadDim>(a.k, pr.seqlen_k, pr.heads_kv, pr.batch);
  auto gV = varlen ? tma::make_ragged_gmem_tensor<Element, kHeadDimV>(a.v, pr.heads_kv)
                   : tma::make_gmem_tensor<Element, kHeadDimV>(a.v, pr.seqlen_k, pr.heads_kv, pr.batch);
  auto gO = varlen ? tma::make_ragged_gmem_tensor<Element, kHeadDimV>(a.o, pr.heads_q)
                   : tma::make_gmem_tensor<Element, kHeadDimV>(a.o, pr.seqlen_q, pr.heads_q, pr.batch);

  int const num_m_blocks = (pr.seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
  int64_t const num_tiles = varlen ? int64_t(pack.num_tiles) : int64_t(num_m_blocks) * pr.heads_q * pr.batch;
  if (num_tiles == 0) return DASH_OK;  // a pack of empty query sequences: nothing to compute
  // Half the int32 range: fwd_next_tile's indices run past the last tile by up to the grid size (the limit
  // dash_check_problem states, checked here again because this file is what depends on it).
  if (num_tiles > int64_t(INT32_MAX / 2)) {
    error = "problem: " + std::to_string(num_tiles) + " work tiles (" + std::to_string(Config::kBlockM) +
            " query rows x heads x batch) exceed 2^30";
    return DASH_ERROR_UNSUPPORTED;
  }
  // Persistent: one CTA per SM (one fits per SM), each taking work tiles until none is left (fwd_next_tile).
  int device = 0, num_sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return cuda_fail(error, "cudaDeviceGetAttribute(MultiProcessorCount)", status);
  // Fixed length: the work tiles' order, with the causal tail interleaved over the grid's CTAs.
  AttentionMask const mask = AttentionMask::of(pr);
  int32_t const pairs = pr.heads_q * pr.batch;
  int32_t const ctas = int32_t(std::min<int64_t>(num_tiles, num_sms));
  FwdTileOrder const order{num_m_blocks, pairs, varlen ? 0 : fwd_tail_pairs(mask.causal(), num_m_blocks, pairs, ctas),
                           mask.causal()};
  FwdParams<Config> params{
      make_tma_copy(SM90_TMA_LOAD{}, gQ, typename Config::SmemLayoutQ{}),
      make_tma_copy(SM90_TMA_LOAD{}, gK, typename Config::SmemLayoutKStage{}),
      make_tma_copy(SM90_TMA_LOAD{}, gV, typename Config::SmemLayoutVStage{}),
      make_tma_copy(SM90_TMA_STORE{}, gO, typename Config::SmemLayoutOBlock{}),
      gQ.shape(),
      gK.shape(),
      gV.shape(),
      gO.shape(),
      a.lse,
      mask,
      pr.heads_q,
      pr.heads_q / pr.heads_kv,
      order,
      int32_t(num_tiles),
      static_cast<int32_t*>(launch.workspace),
      a.softmax_scale,
      float(double(a.softmax_scale) * 1.4426950408889634),  // log2(e)
      pack.sequences,
      pack.tile_chunks,
      pack.num_sequences,
      pack.total_q,
  };

  if (dash_status s = tma::check_descriptors({{"q", params.tma_q.get_tma_descriptor()},
                                              {"k", params.tma_k.get_tma_descriptor()},
                                              {"v", params.tma_v.get_tma_descriptor()},
                                              {"o", params.tma_o.get_tma_descriptor()}},
                                             error);
      s != DASH_OK) {
    return s;
  }

  constexpr int kSmemBytes = fwd_smem_bytes<Config>();
  auto const kernel = forward_kernel<Config, kVarlen>;
  if (dash_status s = opt_in_dynamic_smem<forward_kernel<Config, kVarlen>>(device, kSmemBytes, "forward kernel", error);
      s != DASH_OK) {
    return s;
  }
  // The tile counter starts at 0 on the stream, so every launch (and every replay of a captured graph) hands out
  // its own tiles.
  status = cudaMemsetAsync(launch.workspace, 0, sizeof(int32_t), launch.stream);
  if (status != cudaSuccess) return cuda_fail(error, "cudaMemsetAsync(forward tile counter)", status);
  dim3 const grid{unsigned(ctas)};
  kernel<<<grid, Config::kThreads, kSmemBytes, launch.stream>>>(params);
  if ((status = cudaGetLastError()) != cudaSuccess) {
    return cuda_fail(error,
                     "launch of the Hopper forward kernel <head dims " + std::to_string(kHeadDim) + " / " +
                         std::to_string(kHeadDimV) + ">",
                     status);
  }
  return DASH_OK;
}

// The row's kernel, or (fixed length, at a row of three consumer warpgroups) the two-warpgroup one that
// dash::fwd_warpgroups_for picks for short queries where the tile height cannot change a bit. A varlen pack runs
// the row's: its tiles were cut at the row's height (dash_pack_layout's fwd_block_m).
template <int kHeadDim, int kHeadDimV, dash_dtype kDtype>
dash_status run(kernels::FwdLaunch const& launch, std::string& error) {
  using Element = typename CuteElement<kDtype>::type;
  using RowConfig = FwdConfig<kHeadDim, kHeadDimV, Element>;
  if (launch.varlen.sequences != nullptr) return run_with<RowConfig, true>(launch, error);
  constexpr KernelTableRow kRow = kernel_table_row(kHeadDim, kHeadDimV);
  if constexpr (kRow.fwd_warpgroups == 3) {
    AttentionMask const mask = AttentionMask::of(launch.args.problem);
    // Keys hidden only right of each row's visible ones, and row 0 (which sees the fewest) sees key 0.
    bool const height_invariant = mask.right_bounded() && !mask.left_bounded() && mask.key_end(0) > 0;
    if (fwd_warpgroups_for(kRow, height_invariant, launch.args.problem.seqlen_q) == 2) {
      return run_with<FwdConfig<kHeadDim, kHeadDimV, Element, 2>, false>(launch, error);
    }
  }
  return run_with<RowConfig, false>(launch, error);
}

}  // namespace dash::hopper::fwd

// One (head dims, dtype) of the forward: what each generated instantiation file expands.
#define DASH_INSTANTIATE_HOPPER_FWD(HDIM, HDIM_V, DTYPE)                                                             \
  template dash_status dash::hopper::fwd::run<HDIM, HDIM_V, DTYPE>(dash::kernels::FwdLaunch const&, std::string&); \
  template int dash::hopper::fwd::smem_bytes<HDIM, HDIM_V, DTYPE>();
