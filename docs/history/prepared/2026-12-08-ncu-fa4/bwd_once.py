# SPDX-License-Identifier: Apache-2.0
"""bwd_once.py — one backward of FA4 (flash_attn.cute, third-party, measured only) or of dash-attn inside an NVTX range
"bwd", after warm-up calls, for Nsight Compute (`ncu --nvtx --nvtx-include bwd/`): the range holds the backward's
kernels only (the forward runs before it).

    python3 bwd_once.py fa4|dash BATCH SEQLEN HEADS HEAD_DIM full|causal det|nondet
"""
import sys

import torch

impl, batch, seqlen, heads, hdim, mask, mode = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6], sys.argv[7]
causal, det = mask == "causal", mode == "det"
if impl == "fa4":
    from flash_attn.cute import flash_attn_func

    def fn(q, k, v):
        o = flash_attn_func(q, k, v, causal=causal, deterministic=det)
        return o[0] if isinstance(o, tuple) else o
else:
    import dash_attn

    def fn(q, k, v):
        return dash_attn.attention(q, k, v, causal=causal, deterministic=det)

g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(batch, seqlen, heads, hdim, device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(4))
q, k, v = (x.requires_grad_() for x in (q, k, v))
for _ in range(3):
    fn(q, k, v).backward(do)
out = fn(q, k, v)
torch.cuda.synchronize()
with torch.cuda.nvtx.range("bwd"):
    out.backward(do)
    torch.cuda.synchronize()
print(impl, "ok", flush=True)
