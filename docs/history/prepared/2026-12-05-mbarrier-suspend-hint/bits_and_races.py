# SPDX-License-Identifier: Apache-2.0
"""For the prepared mbarrier suspend-hint change: SHA-256 of the forward's O and the deterministic backward's dQ, dK, dV
on a few shapes (run once per library; the two builds must print the same lines), small enough to run under
compute-sanitizer racecheck / memcheck as well.

    DASH_ATTN_LIBRARY=LIB python3 bits_and_races.py [--small]
"""
import hashlib
import sys

import torch

import dash_attn

SHAPES = [  # (batch, seqlen, heads, head_dim, causal)
    (2, 1000, 4, 64, True), (1, 777, 4, 128, False), (1, 1500, 2, 128, True), (1, 600, 2, 256, True),
]
SMALL = [(1, 300, 2, 64, True), (1, 257, 2, 128, False)]


def digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


for b, s, h, d, causal in (SMALL if "--small" in sys.argv else SHAPES):
    g = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    for det in (True, False):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = dash_attn.attention(*leaves, causal=causal, deterministic=det)
        out.backward(dout)
        grads = [t.grad for t in leaves]
        finite = all(torch.isfinite(t).all().item() for t in [out] + grads)
        line = f"b{b} s{s} h{h} d{d} {'causal' if causal else 'full'} det={det} finite={finite}"
        # Non-deterministic gradients may differ run to run; only the deterministic ones are compared across builds.
        print(line, "O", digest(out), "dQdKdV", digest(*grads) if det else "-", flush=True)
