# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): the descending planner's claim-order template claimed item by item across all
units (DASH_STUDY_DESC_IM=1 in the study library) must give the bits of the same template claimed unit by unit, for
it changes only which CTA takes which ticket. Checks, per shape: (1) bitwise equal gradients over 3 runs;
(2) each head's dQ / dK / dV in a run of H heads bitwise equal to that head's gradients run alone (H = 1, where
item-major and unit-major claims are one order); (3) the error against float64 math.

    DASH_STUDY_DESC_IM=1 DASH_ATTN_LIBRARY=STUDY/libdash_attn.so PYTHONPATH=python python3 im_check.py [--device cuda]
"""
import argparse
import pathlib
import sys

import torch

import dash_attn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[4] / "python" / "tests"))
import attention_reference  # noqa: E402


def grads(q, k, v, dout, causal, schedule):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = dash_attn.attention(q, k, v, causal=causal, schedule=schedule, deterministic=True)
    out.backward(dout)
    return [t.grad.detach().clone() for t in (q, k, v)]


def reference(q, k, v, dout, causal):
    # python/tests/attention_reference.py: float64 softmax attention and its gradients.
    exact = lambda q, k, v: attention_reference.attention(q, k, v, causal, q.shape[-1] ** -0.5)
    return attention_reference.forward_backward(exact, *(t.double() for t in (q, k, v)), dout.double())[1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--schedule", default="descending")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    shapes = [(1, 1024, 6, 64, True), (2, 777, 5, 128, True), (1, 2048, 8, 64, False), (1, 2, 3, 64, True)]
    if args.device == "cuda":
        shapes += [(1, 16384, 32, 64, True), (2, 8192, 16, 128, True)]
    failures = 0
    for b, s, h, d, causal in shapes:
        g = torch.Generator(device="cpu").manual_seed(s + h)
        q, k, v, dout = (torch.randn(b, s, h, d, generator=g).to(args.device, dtype) for _ in range(4))
        runs = [grads(q, k, v, dout, causal, args.schedule) for _ in range(3)]
        same_runs = all(torch.equal(a, r) for other in runs[1:] for a, r in zip(runs[0], other))
        same_heads = True
        for head in sorted({0, h // 2, h - 1}):
            alone = grads(*(t[:, :, head:head + 1].contiguous() for t in (q, k, v, dout)), causal, args.schedule)
            same_heads &= all(torch.equal(a[:, :, head:head + 1], r) for a, r in zip(runs[0], alone))
        ref = reference(q, k, v, dout, causal) if s <= 2048 else None
        err = max(((a.double() - r).abs().max() / r.abs().max()).item() for a, r in zip(runs[0], ref)) if ref else None
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        ok = same_runs and same_heads and (err is None or err < tol)
        failures += not ok
        print(f"b{b} s{s} h{h} d{d} {'causal' if causal else 'full'}: runs bitwise {same_runs}, heads alone bitwise "
              f"{same_heads}, max rel err {err if err is None else f'{err:.2e}'} (tol {tol}) -> {'ok' if ok else 'FAIL'}",
              flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
