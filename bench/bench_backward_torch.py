# SPDX-License-Identifier: Apache-2.0
"""bench_backward_torch.py — external references for the backward benchmark: PyTorch SDPA (flash backend,
deterministic algorithms off and on) and FlexAttention, timed like dash-bench-bwd (CUDA events, warm-ups,
median of >= 10) on a subset of the protocol's grid. Run in the same device call as dash-bench-bwd.

    python3 bench/bench_backward_torch.py --out torch_backward.jsonl [--flex]
"""
import argparse
import json
import statistics

import torch
import torch._dynamo  # here, not in main(): an import inside main() would make `torch` a local name there
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from dash_attn import _abi  # the protocol's FLOP count (PYTHONPATH=python, built library)


def time_backward(fn_forward, inputs, dout, warmup=3, iters=10):
    """Times the backward only: a fresh forward before each call (untimed), since a compiled backward
    (FlexAttention) may donate its buffers and cannot be replayed with retain_graph."""
    times = []
    for i in range(warmup + iters):
        for t in inputs:
            t.grad = None
        out = fn_forward(*inputs)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out.backward(dout)
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="torch_backward.jsonl")
    ap.add_argument("--flex", action="store_true")
    args = ap.parse_args()
    configs = []
    for hd, heads in ((128, 16), (64, 32)):
        for causal in (False, True):
            for b, s in ((4, 4096), (2, 8192), (1, 16384)):
                configs.append((b, s, heads, heads, hd, causal))
    configs += [(4, 4096, 32, 8, 128, True), (2, 8192, 32, 8, 128, True)]
    gpu = torch.cuda.get_device_name()
    rows = []
    flex = None
    if args.flex:
        from torch.nn.attention.flex_attention import flex_attention, create_block_mask
        torch._dynamo.config.recompile_limit = 64  # one compilation per shape of the grid
        flex = torch.compile(flex_attention, dynamic=False)
    with open(args.out, "w") as f:
        for (b, s, hq, hkv, d, causal) in configs:
            torch.manual_seed(0)
            q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            dout = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
            flops = _abi.attention_flops(_abi.make_problem(b, hq, hkv, s, s, d, causal), backward=True)
            name = f"b{b}_s{s}_hq{hq}_hkv{hkv}_d{d}_{'causal' if causal else 'full'}"
            variants = []
            for det in (False, True):
                def fwd(q, k, v):
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
                variants.append((f"sdpa_flash_{'det' if det else 'nondet'}", fwd, det))
            if flex is not None:
                mask = None
                if causal:
                    mask = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s)
                def fwd_flex(q, k, v, mask=mask):
                    return flex(q, k, v, block_mask=mask, enable_gqa=hq != hkv)
                variants.append(("flex_attention", fwd_flex, False))
            for label, fn, det in variants:
                try:
                    torch.use_deterministic_algorithms(det, warn_only=False)
                    med, mn, mx = time_backward(fn, (q, k, v), dout)
                    row = dict(gpu=gpu, torch=torch.__version__, op="backward", config=name, impl=label,
                               median_ms=med, min_ms=mn, max_ms=mx, tflops=flops / (med * 1e-3) / 1e12)
                except Exception as e:  # an unsupported combination is reported, not fatal
                    row = dict(gpu=gpu, torch=torch.__version__, op="backward", config=name, impl=label,
                               error=str(e).splitlines()[0][:200])
                finally:
                    torch.use_deterministic_algorithms(False)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{name:34s} {label:18s} " +
                      (f"{row['median_ms']:9.3f} ms {row['tflops']:7.1f} TFLOP/s" if "median_ms" in row
                       else f"ERROR {row['error']}"), flush=True)
            del q, k, v, dout
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
