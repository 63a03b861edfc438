# SPDX-License-Identifier: Apache-2.0
"""first_call_torch.py — what a new shape costs a training step: wall time of the first forward + backward of
dash_attn.attention on a shape this process has not seen, against the steady state (median of later calls) of the
same shape, then the same for a new batch size and head count of that sequence shape (its plan tables are
cached per sequence template, so that should cost nothing). Run on the GPU machine:

    PYTHONPATH=python DASH_ATTN_LIBRARY=build/libdash_attn.so python3 bench/first_call_torch.py --out first_call.jsonl

Each call is synchronised (torch.cuda.synchronize) so the wall time includes the GPU work; overhead = first - steady.
host_*: the time until forward and backward have been enqueued (before the synchronisation), i.e. the host time
the calls take, which is where planning a new template shows (the GPU runs the forward meanwhile); host_fwd_*: the
time until the forward returned (a differentiated forward starts the backward's plan on the planning thread, so a
new shape's planning shows in the backward's part, less what the forward and the backward's allocations overlap).
"""
import argparse
import json
import statistics
import time

import torch

import dash_attn

SHAPES = [  # (batch, seqlen, heads_q, heads_kv, head_dim, causal)
    (2, 8000, 16, 16, 128, False),
    (2, 8000, 32, 8, 128, False),
    (64, 512, 16, 16, 128, True),
    (64, 4096, 28, 4, 128, True),
    (2, 8192, 16, 16, 64, True),
    (1, 32768, 32, 8, 128, True),
    (1, 131072, 16, 16, 128, True),
    (1, 131072, 32, 8, 128, True),
    (1, 131072, 2, 2, 128, False),  # the full mask: twice the causal tables (16 MB), few heads to keep it short
]


def step(batch, seqlen, heads_q, heads_kv, head_dim, causal, gen):
    q = torch.randn(batch, seqlen, heads_q, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(batch, seqlen, heads_kv, head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn_like(k)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    dout = torch.randn_like(q)
    torch.cuda.synchronize()

    def run():
        t0 = time.perf_counter()
        out = dash_attn.attention(q, k, v, causal=causal)
        forward_returned = time.perf_counter()
        out.backward(dout)
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3, (enqueued - t0) * 1e3, (forward_returned - t0) * 1e3

    first, host_first, host_fwd_first = run()
    later = [run() for _ in range(5)]
    return (first, statistics.median(r[0] for r in later), host_first, statistics.median(r[1] for r in later),
            host_fwd_first, statistics.median(r[2] for r in later))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="first_call.jsonl")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--samples", type=int, default=1,
                        help="new shapes per config: sequence lengths s, s - 128, s - 256, ... (each its own template)")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    step(1, 256, 2, 2, 64, True, gen)  # loads the kernels' modules and PyTorch's allocator pools once
    step(1, 256, 2, 2, 128, False, gen)
    with open(args.out, "w") as out:
        for (batch, base_seqlen, heads_q, heads_kv, head_dim, causal), sample in (
                (shape, sample) for shape in SHAPES for sample in range(args.samples)):
            seqlen = base_seqlen - 128 * sample
            shape_rows = [("new shape", (batch, seqlen, heads_q, heads_kv)),
                          ("new batch and heads", (batch + 1, seqlen, heads_q * 2 if seqlen < 100000 else heads_q,
                                                   heads_kv * 2 if seqlen < 100000 else heads_kv))]
            for kind, (b, s, hq, hkv) in shape_rows:
                first, steady, host_first, host_steady, host_fwd_first, host_fwd_steady = step(
                    b, s, hq, hkv, head_dim, causal, gen)
                config = f"b{b}_s{s}_hq{hq}_hkv{hkv}_d{head_dim}_{'causal' if causal else 'full'}"
                row = {"commit": args.commit, "gpu": torch.cuda.get_device_name(), "op": "first_call_fwd_bwd",
                       "config": config, "kind": kind, "first_ms": round(first, 3), "steady_ms": round(steady, 3),
                       "overhead_ms": round(first - steady, 3), "host_first_ms": round(host_first, 3),
                       "host_steady_ms": round(host_steady, 3), "host_fwd_first_ms": round(host_fwd_first, 3),
                       "host_fwd_steady_ms": round(host_fwd_steady, 3)}
                print(f"{config:40s} {kind:20s} first {first:9.2f} ms  steady {steady:9.2f} ms  "
                      f"overhead {first - steady:8.2f} ms  host first {host_first:8.2f} ms  steady {host_steady:6.2f} ms  "
                      f"(forward {host_fwd_first:6.2f} / {host_fwd_steady:6.2f})", flush=True)
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
