# SPDX-License-Identifier: Apache-2.0
"""Backward (and forward) of dash_attn next to PyTorch's own attention on the same GPU, in one process,
following shared/docs/benchmark-protocol.md (outside the repo): bf16, hidden 2048, 16384 tokens per batch, full and causal, plus the
Llama-3-8B GQA rows. Writes JSON lines (one per config x implementation) and prints a table.

    python3 bench/compare_torch.py --out results.jsonl [--quick] [--commit SHA]
"""
import argparse
import json
import math
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from dash_attn import _abi  # the protocol's FLOP count (PYTHONPATH=python, built library)

import dash_attn

GRID = [(hd, s, causal) for hd in (64, 128) for causal in (False, True) for s in (512, 1024, 2048, 4096, 8192, 16384)]
GQA_ROWS = [(128, 4096, True, 32, 8), (128, 8192, True, 32, 8)]


def flops(b, h, sq, sk, d, causal):
    """Forward FLOPs, the protocol's one definition (dash_attention_flops)."""
    return _abi.attention_flops(_abi.make_problem(b, h, h, sq, sk, d, causal), backward=False)


def time_ms(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def implementations(causal, hq, hk, with_flex=True):
    """name -> (forward(q, k, v) in (b, s, h, d), deterministic flag to set while it runs)."""
    gqa = hq != hk

    def sdpa(backend):
        def fwd(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=causal, enable_gqa=gqa).transpose(1, 2)
        return fwd

    impls = {
        "dash-nondet": (lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, deterministic=False), False),
        "dash-auto": (lambda q, k, v: dash_attn.attention(q, k, v, causal=causal), False),
    }
    for sched in ("ascending", "descending", "shift", "symmetric-shift"):
        impls["dash-" + sched] = (lambda q, k, v, s=sched: dash_attn.attention(q, k, v, causal=causal, schedule=s), False)
    impls["sdpa-flash"] = (sdpa(SDPBackend.FLASH_ATTENTION), False)
    impls["sdpa-flash-det"] = (sdpa(SDPBackend.FLASH_ATTENTION), True)
    impls["sdpa-cudnn"] = (sdpa(SDPBackend.CUDNN_ATTENTION), False)
    if not with_flex:
        return impls
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
        masks = {}

        def flex_fwd(q, k, v):
            sq, sk = q.shape[1], k.shape[1]
            if (sq, sk) not in masks:
                masks[(sq, sk)] = create_block_mask(lambda b, h, i, j: j <= i, None, None, sq, sk) if causal else None
            return flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=masks[(sq, sk)],
                        enable_gqa=gqa).transpose(1, 2)
        impls["flex"] = (flex_fwd, False)
    except Exception as e:  # noqa: BLE001 - report and go on without it
        print(f"FlexAttention unavailable: {e}", file=sys.stderr)
    return impls


def bench_config(hd, seqlen, causal, hq, hk, meta, out, quick):
    batch = 16384 // seqlen
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, seqlen, hq, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(batch, seqlen, hk, hd, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn_like(k)
    dout = torch.randn_like(q)
    f = flops(batch, hq, seqlen, seqlen, hd, causal)
    rows = []
    for name, (fwd, det) in implementations(causal, hq, hk, with_flex=not quick).items():
        if quick and name.startswith("dash-") and name not in ("dash-nondet", "dash-auto", "dash-descending"):
            continue
        torch.use_deterministic_algorithms(det)
        try:
            qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            fwd_ms = time_ms(lambda: fwd(qq, kk, vv))
            o = fwd(qq, kk, vv)
            bwd = lambda: torch.autograd.grad(o, (qq, kk, vv), dout, retain_graph=True)
            bwd_ms = time_ms(bwd)
            grads = [bwd() for _ in range(3)]
            identical = all(torch.equal(a, b) for run in grads[1:] for a, b in zip(grads[0], run))
            row = dict(meta, impl=name, hdim=hd, seqlen=seqlen, batch=batch, heads_q=hq, heads_kv=hk,
                       causal=causal, fwd_ms=fwd_ms[0], bwd_ms=bwd_ms[0], bwd_min_ms=bwd_ms[1], bwd_max_ms=bwd_ms[2],
                       fwd_tflops=f / fwd_ms[0] / 1e9, bwd_tflops=2.5 * f / bwd_ms[0] / 1e9,
                       bitwise_identical_3_runs=identical)
        except Exception as e:  # noqa: BLE001 - an implementation that refuses a shape is a result too
            row = dict(meta, impl=name, hdim=hd, seqlen=seqlen, causal=causal, heads_q=hq, heads_kv=hk,
                       error=str(e).splitlines()[0][:200])
        finally:
            torch.use_deterministic_algorithms(False)
        out.write(json.dumps(row) + "\n")
        out.flush()
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--quick", action="store_true", help="fewer dash schedules and no FlexAttention (compiles per shape), for a short device call")
    ap.add_argument("--seqlens", default="", help="comma list to restrict the grid")
    ap.add_argument("--hdims", default="", help="comma list to restrict the grid")
    args = ap.parse_args()
    prop = torch.cuda.get_device_properties(0)
    meta = dict(commit=args.commit, gpu=prop.name, sms=prop.multi_processor_count, cuda=torch.version.cuda,
                torch=torch.__version__, dtype="bf16", protocol="median of 10 after 3 warm-ups, CUDA events")
    seqlens = {int(s) for s in args.seqlens.split(",") if s}
    hdims = {int(h) for h in args.hdims.split(",") if h}
    keep = lambda hd, s: (not seqlens or s in seqlens) and (not hdims or hd in hdims)
    configs = [(hd, s, c, 2048 // hd, 2048 // hd) for hd, s, c in GRID if keep(hd, s)]
    configs += [(hd, s, c, hq, hk) for hd, s, c, hq, hk in GQA_ROWS if keep(hd, s)]
    with open(args.out, "w") as out:
        print(f"{'hd':>3} {'seq':>6} {'mask':>6} {'heads':>6} | impl: bwd TFLOP/s (bitwise over 3 runs)")
        for hd, s, c, hq, hk in configs:
            rows = bench_config(hd, s, c, hq, hk, meta, out, args.quick)
            cells = [f"{r['impl']}={r['bwd_tflops']:.0f}{'' if r['bitwise_identical_3_runs'] else '~'}"
                     if "bwd_tflops" in r else f"{r['impl']}=err" for r in rows]
            print(f"{hd:>3} {s:>6} {'causal' if c else 'full':>6} {hq:>3}/{hk:<2} | " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
