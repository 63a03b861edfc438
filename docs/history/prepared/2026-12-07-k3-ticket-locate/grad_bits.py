# SPDX-License-Identifier: Apache-2.0
"""SHA-256 of dQ / dK / dV (deterministic, every named schedule and auto) on shapes whose plans claim tickets in each
order (unit by unit; item-major slots; a varlen-free GQA split), through the library DASH_ATTN_LIBRARY names. Two
libraries whose kernels must agree bitwise print the same lines.

    DASH_ATTN_LIBRARY=.../libdash_attn.so python3 grad_bits.py
"""
import torch

import dash_attn

SHAPES = [  # (batch, seqlen, query heads, KV heads, head dim, causal)
    (1, 16384, 20, 20, 64, True),   # the slot plan at 20 heads (item-major slot claims)
    (2, 8192, 32, 32, 64, True),
    (2, 8192, 16, 16, 128, False),
    (2, 8192, 32, 8, 128, True),    # GQA split heads
    (2, 1000, 8, 2, 128, True),     # partial tiles
]
for b, s, hq, hkv, d, causal in SHAPES:
    gen = torch.Generator(device="cuda").manual_seed(1234)
    q = torch.randn(b, s, hq, d, generator=gen, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hkv, d, generator=gen, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hkv, d, generator=gen, device="cuda", dtype=torch.bfloat16)
    for schedule in ("auto", "descending", "shift", "symmetric-shift"):
        try:
            r = dash_attn.check_determinism(q, k, v, runs=2, causal=causal, schedule=schedule)
        except Exception as e:  # a schedule that refuses the shape says so
            print(f"b{b}_s{s}_hq{hq}_hkv{hkv}_d{d}_{'causal' if causal else 'full'} {schedule}: refused ({e})")
            continue
        run = r["runs"][0]
        print(f"b{b}_s{s}_hq{hq}_hkv{hkv}_d{d}_{'causal' if causal else 'full'} {schedule}: "
              f"{run['dq_sha256'][:16]} {run['dk_sha256'][:16]} {run['dv_sha256'][:16]} identical={r['identical']}")
