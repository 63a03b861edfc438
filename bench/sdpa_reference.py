# SPDX-License-Identifier: Apache-2.0
"""sdpa_reference.py — PyTorch SDPA forward timings on the grid of shared/docs/benchmark-protocol.md, as external
references printed next to dash-bench-fwd (a comparison is valid only within one device call).

    python3 bench/sdpa_reference.py --out sdpa.jsonl --commit abc1234

Backends: FLASH_ATTENTION (FA2 inside PyTorch) and CUDNN_ATTENTION. Inputs (batch, heads, seqlen, head_dim)
bf16, random normal; a pause before each configuration; CUDA events, 3 warm-ups, median / min / max of --iters timed calls, each call timed alone.
FLOPs: dash_attention_flops (the protocol's one definition, as in bench_forward.cu).
"""
import argparse
import json
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

from dash_attn import _abi  # the protocol's FLOP count (PYTHONPATH=python, built library)


def grid():
    for head_dim in (128, 64):
        heads = 2048 // head_dim
        for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (False, True):
                yield 16384 // seqlen, heads, seqlen, head_dim, causal


def time_one(fn, warmup, iters):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(warmup + iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(stop))
    return statistics.median(times), min(times), max(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--cooldown-ms", type=int, default=500, help="pause before each timed configuration")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    backends = {"torch-sdpa-flash": SDPBackend.FLASH_ATTENTION, "torch-sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}
    print(f"{'impl':18s} {'hdim':>4s} {'mask':6s} {'batch':>5s} {'seqlen':>6s} | {'median_ms':>9s} | TFLOP/s")
    with open(args.out, "a") as out:
        for batch, heads, seqlen, head_dim, causal in grid():
            q, k, v = (torch.randn(batch, heads, seqlen, head_dim, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            flops = _abi.attention_flops(_abi.make_problem(batch, heads, heads, seqlen, seqlen, head_dim, causal),
                                         backward=False)
            for name, backend in backends.items():
                torch.cuda.synchronize()
                time.sleep(args.cooldown_ms / 1000)
                try:
                    with sdpa_kernel([backend]):
                        median, lo, hi = time_one(
                            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.warmup, args.iters)
                except RuntimeError as error:  # a backend may refuse a shape
                    print(f"{name}: hdim {head_dim} seqlen {seqlen}: {str(error).splitlines()[0]}")
                    continue
                tflops = flops / (median * 1e-3) / 1e12
                mask = "causal" if causal else "full"
                print(f"{name:18s} {head_dim:4d} {mask:6s} {batch:5d} {seqlen:6d} | {median:9.4f} | {tflops:7.1f}")
                out.write(json.dumps({
                    "op": "forward", "impl": name, "commit": args.commit, "gpu": props.name,
                    "sm_count": props.multi_processor_count, "torch": torch.__version__,
                    "cuda_runtime": torch.version.cuda, "dtype": "bf16", "batch": batch, "seqlen_q": seqlen,
                    "seqlen_k": seqlen, "heads_q": heads, "heads_kv": heads, "head_dim": head_dim, "mask": mask,
                    "warmup": args.warmup, "iters": args.iters, "median_ms": round(median, 5),
                    "min_ms": round(lo, 5), "max_ms": round(hi, 5), "flops": flops, "tflops": round(tflops, 2),
                }) + "\n")
            del q, k, v


if __name__ == "__main__":
    main()
