# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): lock-step templates split into slots and claimed slot by slot across groups of
units (DASH_STUDY_SLOTS=1 with the study library) must give main's bits: the visits and ranks are the template's.
`save OUT.pt` (main's library) writes the deterministic gradients of each shape; `compare OUT.pt` (the study library)
checks them bitwise, and each shape's three runs against each other. Head dim 64 only (the study built that kernel).

    DASH_ATTN_LIBRARY=MAIN/libdash_attn.so python3 slot_check.py save /tmp/main.pt
    DASH_STUDY_SLOTS=1 DASH_ATTN_LIBRARY=STUDY/libdash_attn.so python3 slot_check.py compare /tmp/main.pt
"""
import os
import sys

import torch

import dash_attn

# (batch, seqlen, heads, causal, schedule[, head dim]): chunked lock-step templates (more KV tiles than 16 items) and
# odd unit counts
SHAPES = [(1, 16384, 28, True, "symmetric-shift"), (1, 16384, 20, True, "symmetric-shift"),
          (2, 8192, 32, True, "symmetric-shift"), (1, 8192, 12, False, "shift"), (3, 4608, 5, True, "symmetric-shift"),
          (1, 6000, 7, False, "shift"), (1, 16384, 28, True, "auto")]
if os.environ.get("SLOT_CHECK_SHAPES"):  # the first N (a short call)
    SHAPES = SHAPES[:int(os.environ["SLOT_CHECK_SHAPES"])]
if os.environ.get("SLOT_CHECK_D128"):  # the landed library has every head dim's kernels
    SHAPES += [(2, 8192, 16, True, "auto", 128), (4, 4096, 16, False, "auto", 128), (1, 8192, 20, True, "auto", 128)]


def grads(b, s, h, causal, schedule, d=64):
    g = torch.Generator(device="cpu").manual_seed(s * 31 + h)
    q, k, v, do = (torch.randn(b, s, h, d, generator=g).to("cuda", torch.bfloat16) for _ in range(4))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    out = dash_attn.attention(q, k, v, causal=causal, schedule=schedule, deterministic=True)
    out.backward(do)
    return [t.grad.detach().cpu() for t in (q, k, v)]


def main():
    mode, path = sys.argv[1], sys.argv[2]
    results = {}
    failures = 0
    reference = torch.load(path) if mode == "compare" else None
    for shape in SHAPES:
        runs = [grads(*shape) for _ in range(3)]
        same_runs = all(torch.equal(a, r) for other in runs[1:] for a, r in zip(runs[0], other))
        results[str(shape)] = runs[0]
        line = f"{shape}: 3 runs bitwise {same_runs}"
        ok = same_runs
        if reference is not None:
            same_main = all(torch.equal(a, r) for a, r in zip(runs[0], reference[str(shape)]))
            line += f", bitwise equal to main's {same_main}"
            ok &= same_main
        failures += not ok
        print(line + (" -> ok" if ok else " -> FAIL"), flush=True)
    if mode == "save":
        torch.save(results, path)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
