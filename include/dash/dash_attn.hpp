// SPDX-License-Identifier: Apache-2.0
// dash/dash_attn.hpp — a thin C++ face of the C ABI in dash/dash_attn.h: the same calls, with the status
// and its message returned together. The C ABI stays the single boundary; this header only wraps it.
//
//   dash_fwd_args args = ...;
//   if (dash::Status s = dash::attention_forward(args, workspace, workspace_bytes, stream); !s.ok())
//     throw std::runtime_error(s.message);
#pragma once

#include <string>

#include "dash/dash_attn.h"

namespace dash {

struct Status {
  dash_status code = DASH_OK;
  std::string message;  // dash_last_error() of the failed call; empty on success

  bool ok() const { return code == DASH_OK; }
};

// Forward with a caller-owned workspace of dash_fwd_workspace_size(&args) bytes.
inline Status attention_forward(const dash_fwd_args& args, void* workspace, size_t workspace_bytes,
                                void* cuda_stream) {
  dash_status const code = dash_fwd(&args, workspace, workspace_bytes, cuda_stream);
  return code == DASH_OK ? Status{} : Status{code, dash_last_error()};
}

}  // namespace dash
