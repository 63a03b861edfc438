// SPDX-License-Identifier: Apache-2.0
// hopper/tma_host.cuh — host-side TMA helpers shared by the forward and backward launchers: the caller's strided
// (batch, seqlen, heads, head_dim) tensor as the CuTe global tensor the TMA descriptors are built from, and the
// check that every descriptor was actually encoded.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include <cute/tensor.hpp>

#include "dash/dash_attn.h"
#include "hopper/varlen.cuh"  // kRaggedRows

namespace dash::hopper::tma {

// Every descriptor has five modes, so that fixed-length and varlen launches share one TMA type (hopper/varlen.cuh).
// Fixed length: (seqlen, head dim, heads, batch, 1) with element strides; the head dim is contiguous (validated by
// the APIs); the last mode is never indexed (its stride, the batch stride, is one TMA accepts).
template <class Element, int kHeadDim>
auto make_gmem_tensor(dash_tensor const& t, int seqlen, int heads, int batch) {
  using namespace cute;
  return make_tensor(make_gmem_ptr(static_cast<Element*>(t.data)),
                     make_layout(make_shape(int32_t(seqlen), Int<kHeadDim>{}, int32_t(heads), int32_t(batch),
                                            int32_t(1)),
                                 make_stride(int64_t(t.seq_stride), _1{}, int64_t(t.head_stride),
                                             int64_t(t.batch_stride), int64_t(t.batch_stride))));
}

// A packed varlen tensor (total rows, heads, head_dim) as the ragged view of hopper/varlen.cuh: (x, head dim, heads,
// y, z) with strides (s, 1, head stride, s, 2^34 - s) over the tensor's own base, s the row stride in elements.
template <class Element, int kHeadDim>
auto make_ragged_gmem_tensor(dash_tensor const& t, int heads) {
  using namespace cute;
  constexpr int32_t kLargeExtent = 0x7fff0000;  // y and z: any coordinate the kernels form fits below it
  return make_tensor(make_gmem_ptr(static_cast<Element*>(t.data)),
                     make_layout(make_shape(kRaggedRows, Int<kHeadDim>{}, int32_t(heads), kLargeExtent,
                                            kLargeExtent),
                                 make_stride(int64_t(t.seq_stride), _1{}, int64_t(t.head_stride), int64_t(t.seq_stride),
                                             (int64_t(1) << 34) - int64_t(t.seq_stride))));
}

struct NamedDescriptor {
  char const* name;  // the tensor argument it describes, for the error
  void const* descriptor;
};

// CuTe encodes a descriptor with cuTensorMapEncodeTiled and, on failure, only asserts (compiled out in release
// builds), leaving it zeroed. A zeroed descriptor therefore means the encoding failed (e.g. a stride that is not
// a multiple of 16 bytes): report it naming the tensor instead of launching with it.
inline dash_status check_descriptors(std::initializer_list<NamedDescriptor> descriptors, std::string& error) {
  for (NamedDescriptor const& d : descriptors) {
    unsigned char const* bytes = static_cast<unsigned char const*>(d.descriptor);
    bool zero = true;
    for (size_t i = 0; i < sizeof(cute::TmaDescriptor) && zero; ++i) zero = bytes[i] == 0;
    if (zero) {
      error = std::string(d.name) + ": cuTensorMapEncodeTiled rejected the tensor (TMA descriptor not encoded)";
      return DASH_ERROR_CUDA;
    }
  }
  return DASH_OK;
}

}  // namespace dash::hopper::tma
