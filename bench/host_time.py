# SPDX-License-Identifier: Apache-2.0
"""Where the host time of one dash-attn backward call goes (µs of CPU time to enqueue it, warm caches, median of 200):
the op as users call it (torch.ops.dash_attn.bwd), the Python function behind it without the dispatcher, and the C ABI
call alone with its arguments built once; and the forward op. FA3's ops, if given, for scale.

    python3 bench/host_time.py [--fa3 /path/_C.so] [--config b2_s8192_hq16_hkv16_d128_causal]
"""
import argparse
import ctypes
import re

import torch

from dash_attn import _abi, _torch_ops
from record import host_us as record_host_us  # bench/record.py, beside this file


def host_us(fn):
    return record_host_us(fn, calls=200)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fa3")
    ap.add_argument("--config", default="b2_s8192_hq16_hkv16_d128_causal")
    args = ap.parse_args()
    m = re.fullmatch(r"b(\d+)_s(\d+)_hq(\d+)_hkv(\d+)_d(\d+)_(full|causal)", args.config)
    if m is None:
        raise SystemExit(f"host_time.py: --config {args.config!r} is not of the form b2_s8192_hq16_hkv16_d128_causal")
    b, s, hq, hkv, d = (int(x) for x in m.groups()[:5])
    causal = m.group(6) == "causal"
    q, do = (torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    scale = d ** -0.5
    o, lse = torch.ops.dash_attn.fwd(q, k, v, causal, scale, True, "auto")
    rows = {"torch.ops.dash_attn.fwd": host_us(lambda: torch.ops.dash_attn.fwd(q, k, v, causal, scale, True, "auto"))}
    for det in (False, True):
        tag = "det" if det else "nondet"
        rows[f"torch.ops.dash_attn.bwd {tag}"] = host_us(
            lambda: torch.ops.dash_attn.bwd(do, q, k, v, o, lse, causal, scale, det, "auto"))
        rows[f"the Python function {tag}"] = host_us(
            lambda: _torch_ops._bwd_cuda(do, q, k, v, o, lse, causal, scale, det, "auto"))
        # The C ABI alone: arguments built once, the outputs and workspace reused (not a valid training step, only
        # the enqueue cost of dash_bwd).
        shape = _torch_ops._bwd_shapes[_torch_ops._bwd_key(q, k, v, causal, det, "auto", 0, -1, -1)]
        plan = shape.plan
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        bargs = _abi.pack_bwd_args(shape.problem, shape.dtype, q, k, v, o, do, lse.data_ptr(), dq, dk, dv, scale)
        nbytes = _abi.LIB.dash_bwd_workspace_size(ctypes.byref(bargs), plan.handle, int(det))
        ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        rows[f"dash_bwd (C ABI) alone {tag}"] = host_us(
            lambda: _abi.LIB.dash_bwd(ctypes.byref(bargs), plan.handle, int(det), ws.data_ptr(), nbytes, stream))
        rows[f"dash_bwd_workspace_size (validation) {tag}"] = host_us(
            lambda: _abi.LIB.dash_bwd_workspace_size(ctypes.byref(bargs), plan.handle, int(det)))
    if args.fa3:
        torch.ops.load_library(args.fa3)
        fa3 = torch.ops.flash_attn_3
        out, flse = fa3.fwd(q, k, v, softmax_scale=scale, is_causal=causal, num_splits=1)[:2]
        rows["FA3 op fwd"] = host_us(lambda: fa3.fwd(q, k, v, softmax_scale=scale, is_causal=causal, num_splits=1))
        for det in (False, True):
            def call(det=det):
                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                fa3.bwd(do, q, k, v, out, flse, dq, dk, dv, None, None, None, None, None, None, scale, causal, -1, -1,
                        0.0, det, 0)
            rows[f"FA3 op {'det' if det else 'nondet'}"] = host_us(call)
    for name, us in rows.items():
        print(f"{args.config} {name:48s} {us:8.1f} us")


if __name__ == "__main__":
    main()
