// SPDX-License-Identifier: Apache-2.0
// varlen_device.h — a pack's tables on a device (dash_pack_create builds them on the host, src/core/varlen.cpp): copied
// to a device on the pack's first use there, kept until dash_pack_destroy.
#pragma once

#include "dash/dash_attn.h"
#include "fwd_launch_args.h"

namespace dash::kernels {

// The forward's view of `pack` on `device` (uploading its tables on first use, waiting for that copy only).
dash_status pack_on_device(dash_pack_t pack, int device, VarlenLaunch& out);

}  // namespace dash::kernels
