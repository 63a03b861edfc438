#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""When every query sees exactly one key (seqlen_k = 1), softmax has a zero Jacobian: the exact dQ and dK are 0.
This prints, for dash_attn and for PyTorch's SDPA backends on the same bf16 inputs, the largest |dQ| and |dK|
they return there, next to their dV error (dV = the upstream gradient summed over queries, not zero), so that
the "relative error 1e25" of a dQ whose exact value is 0 can be read as what it is: the fp32 rounding of
dP - delta in the flash backward equations, at some 1e-7 of the gradients' scale, or a wrong result.

    PYTHONPATH=python python3 scripts/single_key_gradients.py [--out results.jsonl]
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import dash_attn


def grads(fn, q, k, v, dout):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    fn(q, k, v).backward(dout)
    return q.grad, k.grad, v.grad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="JSON lines file to append to")
    args = parser.parse_args()
    rows = []
    for d in (64, 128):
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(d)
            # MHA (6 heads) so that every backend runs the same problem; 239 queries, one key.
            q = torch.randn(4, 239, 6, d, device="cuda", dtype=torch.bfloat16, generator=g)
            k, v = (torch.randn(4, 1, 6, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
            dout = torch.randn(4, 239, 6, d, device="cuda", dtype=torch.bfloat16, generator=g)
            # Exact: dQ = dK = 0 for every query that sees the key; dV = the sum of dO over those queries.
            seen = torch.ones(239, dtype=torch.bool, device="cuda")
            if causal:  # bottom-right: only the last query sees the key
                seen[:-1] = False
            dv_exact = (dout.double() * seen[None, :, None, None]).sum(1, keepdim=True)
            impls = {
                "dash_attn det": lambda q, k, v: dash_attn.attention(q, k, v, causal=causal),
                "dash_attn non-det": lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, deterministic=False),
            }
            for name, backend in (("torch flash", SDPBackend.FLASH_ATTENTION), ("torch cudnn", SDPBackend.CUDNN_ATTENTION),
                                  ("torch efficient", SDPBackend.EFFICIENT_ATTENTION), ("torch math bf16", SDPBackend.MATH)):
                if causal:
                    continue  # PyTorch's is_causal aligns top-left; with one key that is another problem
                def sdpa(q, k, v, backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                              v.transpose(1, 2)).transpose(1, 2)
                impls[name] = sdpa
            for name, fn in impls.items():
                try:
                    dq, dk, dv = grads(fn, q, k, v, dout)
                except RuntimeError as e:
                    print(f"{name}: not run ({str(e).splitlines()[0][:80]})", file=sys.stderr)
                    continue
                row = {"impl": name, "head_dim": d, "mask": "causal" if causal else "full",
                       "max_abs_dq": dq.abs().max().item(), "max_abs_dk": dk.abs().max().item(),
                       "dv_max_error": (dv.double() - dv_exact).abs().max().item(),
                       "dv_scale": dv_exact.abs().max().item(), "dq_exact": 0.0, "dk_exact": 0.0}
                rows.append(row)
    print(f"{'impl':<18} {'hdim':>4} {'mask':<6} {'max|dQ|':>10} {'max|dK|':>10} {'dV error':>10} {'max|dV|':>8}")
    for r in rows:
        print(f"{r['impl']:<18} {r['head_dim']:>4} {r['mask']:<6} {r['max_abs_dq']:>10.3e} {r['max_abs_dk']:>10.3e} "
              f"{r['dv_max_error']:>10.3e} {r['dv_scale']:>8.2f}")
    if args.out:
        with open(args.out, "a") as f:
            for r in rows:
                f.write(json.dumps({**r, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}) + "\n")


if __name__ == "__main__":
    main()
