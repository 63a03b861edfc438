# SPDX-License-Identifier: Apache-2.0
"""Our forward and cuDNN's (torch SDPA, cuDNN backend) on one causal shape, bf16, for Nsight Compute side by side:
5 iterations of both, of which the last 2 run between cudaProfilerStart / Stop. On the GPU machine:

    DASH_ATTN_LIBRARY=build/libdash_attn.so PYTHONPATH=python ncu --profile-from-start off --set full \
        --clock-control none -o prof python3 bench/ncu_forward_beside_cudnn.py B S H D

(`bench/results/ncu-fwd-h100-2026-12-06-91b7547-d64-cudnn-summary.txt` came from B S H D = 32 512 32 64 and
16 1024 32 64.) cuDNN is third-party: measured, never shipped.
"""
import sys
import torch
import dash_attn
from torch.nn.attention import sdpa_kernel, SDPBackend

b, s, h, d = (int(x) for x in sys.argv[1:5])
torch.manual_seed(0)
q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
with torch.no_grad():
    for i in range(5):
        if i == 3:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
        dash_attn.attention(q, k, v, causal=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
