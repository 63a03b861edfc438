# SPDX-License-Identifier: Apache-2.0
"""sanitize_cases.py — small head-dim-128 backward cases for compute-sanitizer (memcheck, racecheck) that run the
staggered warpgroups: non-deterministic full and causal with several visits per segment, and a deterministic spaced
shift plan (17 KV tiles, 34 Q tiles: the smallest full-mask shape the planner spaces). Exits 1 on a non-finite
gradient; the sanitizer's own summary says the rest.

    compute-sanitizer --tool racecheck python3 sanitize_cases.py
"""
import sys

import torch

import dash_attn

CASES = [(1, 1100, 2, False, False, "auto"), (1, 1100, 2, True, False, "auto"), (1, 2176, 1, False, True, "shift")]


def main():
    bad = 0
    for (batch, seqlen, heads, causal, det, schedule) in CASES:
        g = torch.Generator(device="cuda").manual_seed(seqlen)
        q, k, v, do = (torch.randn(batch, seqlen, heads, 128, device="cuda", dtype=torch.bfloat16, generator=g)
                       for _ in range(4))
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        dash_attn.attention(q, k, v, causal=causal, deterministic=det, schedule=schedule).backward(do)
        torch.cuda.synchronize()
        finite = all(bool(torch.isfinite(x.grad).all()) for x in (q, k, v))
        bad += not finite
        print(f"b{batch}_s{seqlen}_h{heads}_{'causal' if causal else 'full'}_{'det' if det else 'nondet'}_{schedule}:",
              "finite" if finite else "NON-FINITE", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
