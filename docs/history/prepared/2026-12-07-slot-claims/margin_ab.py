# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): det `auto` with SMs left to other kernels (sm_margin 0 and 8, as issue 13's busy
case), record.py's timer (0.2 s sustained, median of 10), 3 rounds; run once per library and compare the lines.

    [DASH_STUDY_SLOTS=1] DASH_ATTN_LIBRARY=... PYTHONPATH=python:bench python3 margin_ab.py TAG
"""
import statistics
import sys

import torch

import dash_attn  # noqa: F401  (registers torch.ops.dash_attn)
from record import time_cuda

ROWS = [(1, 16384, 32), (1, 16384, 28), (2, 8192, 32)]  # batch, seqlen, heads; head dim 64, causal


def main():
    tag = sys.argv[1] if len(sys.argv) > 1 else ""
    ops = torch.ops.dash_attn
    for b, s, h in ROWS:
        g = torch.Generator(device="cpu").manual_seed(s + h)
        q, k, v, do = (torch.randn(b, s, h, 64, generator=g).to("cuda", torch.bfloat16) for _ in range(4))
        scale = 64 ** -0.5
        o, lse = ops.fwd(q, k, v, True, scale, True, "auto", True)
        flops = 2.5 * 4 * b * h * 64 * s * (s + 1) / 2
        figures = []
        for margin in (0, 8):
            run = lambda margin=margin: ops.bwd(do, q, k, v, o, lse, True, scale, True, "auto", margin)
            ms = statistics.median(statistics.median(time_cuda(run, warmup_seconds=0.2)) for _ in range(3))
            figures.append(f"sm_margin {margin}: {flops / ms / 1e9:.0f} TFLOP/s")
        print(f"{tag} b{b} s{s} h{h} d64 causal det auto: " + ", ".join(figures), flush=True)


if __name__ == "__main__":
    main()
