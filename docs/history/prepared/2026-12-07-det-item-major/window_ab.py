# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): sliding windows (MHA), det `auto` against det `descending` (item-major claims in
the study library, DASH_STUDY_DESC_IM=1) and the non-deterministic `auto`, record.py's timer (0.2 s sustained, median
of 10), 3 shuffled rounds; the descending gradients checked bitwise over 3 runs.

    DASH_STUDY_DESC_IM=1 DASH_ATTN_LIBRARY=... PYTHONPATH=python:bench python3 window_ab.py
"""
import random
import statistics

import torch

import dash_attn  # noqa: F401  (registers torch.ops.dash_attn)
from record import time_cuda

ROWS = [(2, 8192, 32, 64, 4096), (1, 16384, 16, 128, 4096), (4, 4096, 32, 128, 1024), (2, 8192, 32, 64, 1024)]


def main():
    ops = torch.ops.dash_attn
    for b, s, h, d, left in ROWS:
        g = torch.Generator(device="cpu").manual_seed(s + h + left)
        q, k, v, do = (torch.randn(b, s, h, d, generator=g).to("cuda", torch.bfloat16) for _ in range(4))
        scale = d ** -0.5
        o, lse = ops.fwd(q, k, v, True, scale, True, "auto", True, 0, left, 0)
        impls = {(det, sched): (lambda det=det, sched=sched: ops.bwd(do, q, k, v, o, lse, True, scale, det, sched, 0,
                                                                     left, 0))
                 for det, sched in ((True, "auto"), (True, "descending"), (False, "auto"))}
        runs = [impls[(True, "descending")]() for _ in range(3)]
        bitwise = all(torch.equal(a, r) for other in runs[1:] for a, r in zip(runs[0], other))
        ref = impls[(True, "auto")]()
        err = max(((a.float() - r.float()).abs().max() / r.float().abs().max()).item() for a, r in zip(runs[0], ref))
        times = {key: [] for key in impls}
        for r in range(3):
            for key in random.Random(f"{s}/{left}/{r}").sample(list(impls), len(impls)):
                times[key].append(statistics.median(time_cuda(impls[key], warmup_seconds=0.2)))
        med = {key: statistics.median(t) for key, t in times.items()}
        base = med[(True, "auto")]
        print(f"b{b} s{s} h{h} d{d} window {left},0: det auto {base:.3f} ms, det descending-IM {med[(True, 'descending')]:.3f}"
              f" ms ({base / med[(True, 'descending')]:.3f}x), non-det auto {med[(False, 'auto')]:.3f} ms "
              f"({base / med[(False, 'auto')]:.3f}x); descending bitwise over 3 runs {bitwise}, max rel diff to det auto "
              f"{err:.2e}", flush=True)


if __name__ == "__main__":
    main()
