// SPDX-License-Identifier: Apache-2.0
// bwd_layout_check.cu — host-only check of the Hopper backward kernel's shared-memory layout algebra
// (src/cuda/hopper/bwd/bwd_kernel.cuh). Runs without a GPU. Checks, for every row of dash/kernel_table.hpp (64:
// tiles 128 x 128; 96 and 128: tiles 64 x 128; 192 / 128 and 256: 64 x 64, the column split) and both dtypes:
//   - the dQ staging layout (a CuTe Swizzle over column blocks of fp32) equals the store warp's and the convert
//     kernel's DqStaging::offset at every position (the store warp reads what the MMA warpgroups write), and is
//     the row-major layout with 4-float chunks XOR (row & 3) << 1 where the head dim is a power of two up to 128;
//   - the MMA threads' 8-byte stores into the staging tile take the minimum of two shared-memory wavefronts per
//     warp instruction (no bank conflicts), by a model of the banks: 16 lanes per wavefront, 32 banks of 4 bytes;
//   - the transposed operand views (Q^T, dO^T per stage, K^T, dS = view of dS^T per stage) address the same elements
//     as the tiles they view;
//   - the accumulator coordinate facts the MMA code relies on (additive thread offsets, warpgroup split by keys or
//     by queries, exact coverage, adjacent column pairs, the dQ / dK / dV splits between the warpgroups);
//   - the shared-memory struct fits the 227 KB an sm_90 block may use.
// And for the forward kernel of every row (src/cuda/hopper/fwd/fwd_kernel.cuh): the epilogue's column blocks of O
// (whole rows, or 64-column blocks at head dims 256 and 192 / 128) are contiguous slices of the accumulator, laid out
// as the block's own 64 x kOBlockCols accumulator; the score tile's coordinates are additive (the mask's constants).
#include <cstdio>
#include <string>

#include "hopper/bwd/bwd_kernel.cuh"
#include "hopper/element_types.cuh"
#include "hopper/fwd/fwd_config.cuh"

namespace {
template <int kHeadDim, int kHeadDimV, dash_dtype kDtype, int kWarpgroups = 0>
int check_forward(const char* name) {
  using namespace cute;
  using C = dash::hopper::fwd::FwdConfig<kHeadDim, kHeadDimV, typename dash::hopper::CuteElement<kDtype>::type,
                                         kWarpgroups>;
  int bad = 0;
  typename C::MmaPV mma_pv;
  typename C::MmaPVOBlock mma_block;
  const auto whole_ids = make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kHeadDimV>>{});
  const auto block_ids = make_identity_tensor(Shape<Int<C::kRowsPerWarpgroup>, Int<C::kOBlockCols>>{});
  // The registers: the accumulator fragments are compact (value i at register i), so "value i" below is register i.
  const auto whole_fragment = partition_fragment_C(mma_pv, Shape<Int<C::kBlockM>, Int<C::kHeadDimV>>{}).layout();
  const auto block_fragment =
      partition_fragment_C(mma_block, Shape<Int<C::kRowsPerWarpgroup>, Int<C::kOBlockCols>>{}).layout();
  for (int i = 0; i < int(size(whole_fragment)); ++i) bad += int(whole_fragment(i)) != i;
  for (int i = 0; i < int(size(block_fragment)); ++i) bad += int(block_fragment(i)) != i;
  constexpr int kPerBlock = C::kOBlockCols / 2;
  if (int(size(block_fragment)) != kPerBlock || int(size(whole_fragment)) != C::kOBlocks * kPerBlock) ++bad;
  for (int t = 0; t < 128; ++t) {  // warpgroup 0's threads; the others' rows differ by 64 per warpgroup
    const auto whole = mma_pv.get_thread_slice(t).partition_C(whole_ids);
    const auto block = mma_block.get_thread_slice(t).partition_C(block_ids);
    for (int b = 0; b < C::kOBlocks; ++b)
      for (int i = 0; i < kPerBlock; ++i) {
        const auto w = whole(b * kPerBlock + i);
        const auto k = block(i);
        if (get<0>(w) != get<0>(k) || get<1>(w) != get<1>(k) + b * C::kOBlockCols) ++bad;
      }
  }
  // The mask (apply_mask) takes each score's (row, column) as this thread's first register's plus thread 0's of that
  // register, and the consumer threads cover the (kBlockM x kBlockN) score tile exactly once.
  {
    typename C::MmaQK mma_qk;
    const auto score_ids = make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kBlockN>>{});
    const auto c0 = mma_qk.get_thread_slice(0).partition_C(score_ids);
    static int hits[C::kBlockM][C::kBlockN];
    for (auto& row : hits)
      for (int& h : row) h = 0;
    for (int t = 0; t < 128 * C::kConsumerWarpgroups; ++t) {
      const auto ct = mma_qk.get_thread_slice(t).partition_C(score_ids);
      const int r0 = get<0>(ct(0)) - get<0>(c0(0)), q0 = get<1>(ct(0)) - get<1>(c0(0));
      for (int i = 0; i < int(size(ct)); ++i) {
        const int r = get<0>(ct(i)), c = get<1>(ct(i));
        if (r != r0 + get<0>(c0(i)) || c != q0 + get<1>(c0(i))) ++bad;
        if (r < 0 || r >= C::kBlockM || c < 0 || c >= C::kBlockN) { ++bad; continue; }
        ++hits[r][c];
      }
    }
    for (auto& row : hits)
      for (int h : row) bad += h != 1;
  }
  const int smem = dash::hopper::fwd::fwd_smem_bytes<C>();
  std::printf("%s forward: smem %d bytes, O in %d block(s) of %d columns, %d layout mismatches\n", name, smem,
              C::kOBlocks, C::kOBlockCols, bad);
  return bad;
}

// Every (row, column) of a kRows x kCols accumulator is held by exactly one of the 256 MMA threads, registers 2j and
// 2j + 1 are adjacent columns of one row, warpgroup 1 holds exactly the coordinates `second(row, col)` names, and
// register i of thread t sits at thread t's register 0 plus thread 0's register i (the idiom of the S^T mask's
// constant coordinates, checked for every accumulator).
template <int kRows, int kCols, class Mma, class Second>
int check_accumulator(Mma const& mma, Second second) {
  using namespace cute;
  int bad = 0;
  static int hits[kRows][kCols];
  for (auto& row : hits)
    for (int& h : row) h = 0;
  auto id = make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{});
  auto c0 = mma.get_thread_slice(0).partition_C(id);
  for (int t = 0; t < 256; ++t) {
    auto ct = mma.get_thread_slice(t).partition_C(id);
    for (int i = 0; i < size(ct); ++i) {
      const int r = get<0>(ct(i)), c = get<1>(ct(i));
      if (r != get<0>(ct(0)) + get<0>(c0(i)) || c != get<1>(ct(0)) + get<1>(c0(i))) ++bad;
      if (r < 0 || r >= kRows || c < 0 || c >= kCols) { ++bad; continue; }
      if ((t >= 128) != second(r, c)) ++bad;
      if (i % 2 == 1 && (get<0>(ct(i - 1)) != r || get<1>(ct(i - 1)) + 1 != c)) ++bad;
      ++hits[r][c];
    }
  }
  for (auto& row : hits)
    for (int h : row) bad += h != 1;
  return bad;
}

// The dQ hand-off's staging stores (mma_warpgroups: one 64-bit store of registers 2j, 2j + 1 per lane): for every
// warp and register pair, the shared-memory wavefronts the 32 lanes' stores take, by the bank model of an 8-byte
// access (two wavefronts of 16 lanes; within one, the distinct 4-byte words that fall on one of the 32 banks are
// serialised). Returns the number of stores that take more than the minimum of two.
template <class Mma, class Staging, class Ids>
int staging_store_conflicts(Mma const& mma, Staging const& staging, Ids const& ids) {
  using namespace cute;
  int conflicted = 0;
  const int pairs = int(size(mma.get_thread_slice(0).partition_C(ids))) / 2;
  for (int warp = 0; warp < 8; ++warp)
    for (int pair = 0; pair < pairs; ++pair) {
      int wavefronts = 0;
      for (int half = 0; half < 2; ++half) {
        int words_on_bank[32][32];  // the distinct words each bank holds in this wavefront (at most 32)
        int count[32] = {};
        for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
          const auto coord = mma.get_thread_slice(32 * warp + lane).partition_C(ids)(2 * pair);
          const int first = int(staging(get<0>(coord), get<1>(coord)));
          for (int word = first; word < first + 2; ++word) {
            int* seen = words_on_bank[word % 32];
            int& n = count[word % 32];
            bool known = false;
            for (int k = 0; k < n; ++k) known |= seen[k] == word;
            if (!known) seen[n++] = word;
          }
        }
        int worst = 0;
        for (int n : count) worst = n > worst ? n : worst;
        wavefronts += worst;
      }
      conflicted += wavefronts != 2;
    }
  return conflicted;
}

template <int kHeadDim, int kHeadDimV, dash_dtype kDtype, bool kStaggerRequested = false>
int check(const char* name) {
  using namespace dash::hopper::bwd;
  using C = BwdConfig<kHeadDim, kHeadDimV, kDtype, kStaggerRequested>;
  int bad = 0;
  const auto staging = typename C::SmemLayoutdQStaging{};
  constexpr bool kPowerOfTwo = (C::kHeadDim & (C::kHeadDim - 1)) == 0 && C::kHeadDim <= 128;
  for (int r = 0; r < C::kBlockM; ++r)
    for (int c = 0; c < C::kHeadDim; ++c) {
      if (int(staging(r, c)) != C::Staging::offset(r, c)) ++bad;
      if (kPowerOfTwo && int(staging(r, c)) != r * C::kHeadDim + ((((c >> 2) ^ ((r & 3) << 1))) << 2) + (c & 3)) ++bad;
    }
  // A (rows, cols, stages) layout and its transposed view address the same elements.
  auto transposed_mismatches = [](auto const& layout, auto const& transposed, int rows, int cols, int stages) {
    int n = 0;
    for (int st = 0; st < stages; ++st)
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) n += layout(r, c, st) != transposed(c, r, st);
    return n;
  };
  bad += transposed_mismatches(typename C::SmemLayoutdS{}, typename C::SmemLayoutdSt{}, C::kBlockM, C::kBlockN,
                               C::kDsStages);
  bad += transposed_mismatches(typename C::SmemLayoutQ{}, typename C::SmemLayoutQt{}, C::kBlockM, C::kHeadDim,
                               C::kQStages);
  bad += transposed_mismatches(typename C::SmemLayoutdO{}, typename C::SmemLayoutdOt{}, C::kBlockM, C::kHeadDimV,
                               C::kQStages);
  const auto kv = typename C::SmemLayoutK{};
  const auto kt = typename C::SmemLayoutKt{};
  for (int k = 0; k < C::kBlockN; ++k)
    for (int d = 0; d < C::kHeadDim; ++d)
      if (kv(k, d) != kt(d, k)) ++bad;
  // The MMA warpgroups' mask / LSE indexing assumes: register i of thread t sits at thread t's register-0
  // coordinate plus thread 0's register-i coordinate (tScS0 in mma_warpgroups), warpgroup 1 owns keys 64..127 (key
  // split) or queries kBlockM / 2.. (column split), and the 256 threads cover the (kBlockN keys x kBlockM queries)
  // S^T tile exactly once. Same coverage for dQ (kBlockM x kHeadDim), dK and dV.
  {
    using namespace cute;
    typename C::MmaSdP mma;
    auto id = make_identity_tensor(Shape<Int<C::kBlockN>, Int<C::kBlockM>>{});
    auto c0 = mma.get_thread_slice(0).partition_C(id);
    static int hits[C::kBlockN][C::kBlockM];
    for (auto& row : hits)
      for (int& h : row) h = 0;
    for (int t = 0; t < C::kMmaThreads; ++t) {
      auto ct = mma.get_thread_slice(t).partition_C(id);
      const int k0 = get<0>(ct(0)), q0 = get<1>(ct(0));
      if ((t >= 128) != (C::kColumnSplit ? q0 >= C::kBlockM / 2 : k0 >= 64)) ++bad;
      if (q0 % 2 != 0) ++bad;  // the LSE2 / delta pairs are 8-byte loads at col_base + 8j
      for (int i = 0; i < size(ct); ++i) {
        const int k = get<0>(ct(i)), q = get<1>(ct(i));
        if (k != k0 + get<0>(c0(i)) || q != q0 + get<1>(c0(i))) ++bad;
        // Thread 0's columns are 8j + {0, 1} with j < kStatCols / 2: the LSE2 / delta registers' loads (pairs at
        // col_base + 8j) cover them, and BwdConfig::stat_slot gives distinct columns distinct slots (below).
        const int qc0 = get<1>(c0(i));
        if (qc0 % 8 >= 2 || qc0 / 8 >= C::kStatCols / 2) ++bad;
        if (k < 0 || k >= C::kBlockN || q < 0 || q >= C::kBlockM) { ++bad; continue; }
        ++hits[k][q];
      }
    }
    for (auto& row : hits)
      for (int h : row) bad += h != 1;
    // stat_slot: one slot per distinct column of thread 0, every slot of the kStatCols used.
    {
      int column_of_slot[C::kStatCols];
      for (int& c : column_of_slot) c = -1;
      for (int i = 0; i < size(c0); ++i) {
        const int qc0 = get<1>(c0(i)), slot = C::stat_slot(qc0);
        if (slot < 0 || slot >= C::kStatCols) { ++bad; continue; }
        if (column_of_slot[slot] >= 0 && column_of_slot[slot] != qc0) ++bad;
        column_of_slot[slot] = qc0;
      }
      for (int c : column_of_slot) bad += c < 0;
    }
    typename C::MmadQ mma_dq;
    auto idq = make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kHeadDim>>{});
    static int hq[C::kBlockM][C::kHeadDim];
    for (auto& row : hq)
      for (int& h : row) h = 0;
    for (int t = 0; t < C::kMmaThreads; ++t) {
      auto ct = mma_dq.get_thread_slice(t).partition_C(idq);
      for (int i = 0; i < size(ct); ++i) {
        const int r = get<0>(ct(i)), d = get<1>(ct(i));
        // warpgroup w computes head-dim columns [kDqCols w, kDqCols (w + 1)) at kBlockM = 64, query rows
        // [64w, 64w + 64) at 128
        if ((t >= 128) != (C::kDqWarpgroupsN == 2 ? d >= C::kDqCols : r >= 64)) ++bad;
        // registers 2j, 2j+1 are adjacent columns of one row (the epilogue's pair stores rely on it) ...
        if (i % 2 == 1 && (get<0>(ct(i - 1)) != r || get<1>(ct(i - 1)) + 1 != d)) ++bad;
        // ... and land on 8 aligned, contiguous bytes of the staging buffer (its 64-bit stores rely on it)
        if (i % 2 == 1 && (staging(r, d) != staging(r, d - 1) + 1 || staging(r, d - 1) % 2 != 0)) ++bad;
        ++hq[r][d];
      }
    }
    for (auto& row : hq)
      for (int h : row) bad += h != 1;
    bad += staging_store_conflicts(mma_dq, staging, idq);
    bad += check_accumulator<C::kBlockN, C::kHeadDim>(typename C::MmadK{}, [](int key, int col) {
      return C::kColumnSplit ? col >= C::kDkCols : key >= 64;
    });
    bad += check_accumulator<C::kBlockN, C::kHeadDimV>(typename C::MmadV{}, [](int key, int col) {
      return C::kColumnSplit ? col >= C::kDvCols : key >= 64;
    });
  }
  const int smem = smem_bytes_of<C>();
  if (smem > 227 * 1024) ++bad;
  std::printf("%s: smem %d bytes, %d layout mismatches\n", name, smem, bad);
  return bad;
}

template <int kHeadDim, int kHeadDimV, int kBwdBlockM, dash_dtype kDtype>
int check_row(const char* name) {
  int bad = check_forward<kHeadDim, kHeadDimV, kDtype>(name);
  // The two-warpgroup forward that short banded calls run at a row of three (dash::fwd_warpgroups_for).
  if constexpr (dash::kernel_table_row(kHeadDim, kHeadDimV).fwd_warpgroups == 3) {
    bad += check_forward<kHeadDim, kHeadDimV, kDtype, 2>((std::string(name) + " two warpgroups").c_str());
  }
  if constexpr (kBwdBlockM != 0) {  // rows with a backward kernel; the staggered instantiation where there is one
    bad += check<kHeadDim, kHeadDimV, kDtype>(name);
    using namespace dash::hopper::bwd;
    if constexpr (BwdConfig<kHeadDim, kHeadDimV, kDtype>::kCanStagger) {
      bad += check<kHeadDim, kHeadDimV, kDtype, true>((std::string(name) + " staggered").c_str());
    }
  }
  return bad;
}
}  // namespace

int main() {
  int bad = 0;
#define DASH_CHECK_ROW(hd, hdv, bm, ...)                                              \
  bad += check_row<hd, hdv, bm, DASH_DTYPE_BF16>("hdim " #hd " / " #hdv " bf16"); \
  bad += check_row<hd, hdv, bm, DASH_DTYPE_FP16>("hdim " #hd " / " #hdv " fp16");
  DASH_KERNEL_TABLE(DASH_CHECK_ROW)
#undef DASH_CHECK_ROW
  std::printf(bad == 0 ? "OK\n" : "FAILED\n");
  return bad == 0 ? 0 : 1;
}
