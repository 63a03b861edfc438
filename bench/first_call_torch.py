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
import ctypes
import json
import statistics
import time

import torch

import dash_attn
from dash_attn import _abi, _torch_ops


class FirstCallSplit:
    """Times the package's internals while installed: dash_plan_create_async (on the planning thread), the backward's
    wait for it, the backward's launch (workspace and dash_bwd) and, of that, dash_bwd itself. Diagnostics only: wraps,
    never changes, what runs."""

    def __init__(self):
        self.plan_build = self.plan_wait = self.launch = self.dash_bwd = 0.0
        self.tables = ""  # dash_plan_tables before -> after each dash_bwd (r ready, b being written, w written, q queued)

    def __enter__(self):
        split = self
        device_plan, plan_property, launch = self._saved = (_abi.DevicePlan, _torch_ops._BwdShape.plan,
                                                             _torch_ops._launch_bwd)
        self._dash_bwd = dash_bwd = _abi.LIB.dash_bwd

        def tables(plan):
            state = ctypes.c_int32(-1)
            _abi.LIB.dash_plan_tables(plan, ctypes.byref(state))
            return "rbqw"[state.value] if 0 <= state.value < 4 else "?"

        def timed_dash_bwd(*args):
            before = tables(args[1])
            t0 = time.perf_counter()
            status = dash_bwd(*args)
            split.dash_bwd += (time.perf_counter() - t0) * 1e3
            split.tables += before + ">" + tables(args[1]) + " "
            return status

        class TimedDevicePlan(device_plan):
            def __init__(self, *args, **kwargs):
                t0 = time.perf_counter()
                super().__init__(*args, **kwargs)
                split.plan_build += (time.perf_counter() - t0) * 1e3

        def timed_plan(shape):
            t0 = time.perf_counter()
            plan = plan_property.fget(shape)
            split.plan_wait += (time.perf_counter() - t0) * 1e3
            return plan

        def timed_launch(*args):
            t0 = time.perf_counter()
            launch(*args)
            split.launch += (time.perf_counter() - t0) * 1e3

        _abi.DevicePlan, _torch_ops._BwdShape.plan, _torch_ops._launch_bwd = (TimedDevicePlan, property(timed_plan),
                                                                              timed_launch)
        _abi.LIB.dash_bwd = timed_dash_bwd
        return self

    def __exit__(self, *exc):
        _abi.DevicePlan, _torch_ops._BwdShape.plan, _torch_ops._launch_bwd = self._saved
        _abi.LIB.dash_bwd = self._dash_bwd

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


def inputs(batch, seqlen, heads_q, heads_kv, head_dim, gen, heads_first=False):
    """q, k, v (requiring gradients) and dout, bf16 on the GPU: (batch, seqlen, heads, head_dim), or with heads_first
    (batch, heads, seqlen, head_dim) as SDPA takes them."""
    def shape(heads):
        return (batch, heads, seqlen, head_dim) if heads_first else (batch, seqlen, heads, head_dim)
    q = torch.randn(shape(heads_q), device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(shape(heads_kv), device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn_like(k)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    dout = torch.randn_like(q)
    torch.cuda.synchronize()
    return q, k, v, dout


def step(batch, seqlen, heads_q, heads_kv, head_dim, causal, gen):
    q, k, v, dout = inputs(batch, seqlen, heads_q, heads_kv, head_dim, gen)

    def run():
        t0 = time.perf_counter()
        out = dash_attn.attention(q, k, v, causal=causal)
        forward_returned = time.perf_counter()
        out.backward(dout)
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3, (enqueued - t0) * 1e3, (forward_returned - t0) * 1e3

    with FirstCallSplit() as split:
        first, host_first, host_fwd_first = run()
    later = [run() for _ in range(5)]
    return (first, statistics.median(r[0] for r in later), host_first, statistics.median(r[1] for r in later),
            host_fwd_first, statistics.median(r[2] for r in later), split)


def sdpa_host_ms(batch, seqlen, heads_q, heads_kv, head_dim, causal, gen):
    """Host ms of the first and (median of 5) later forward + backward enqueues of PyTorch's flash SDPA on a shape."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v, dout = inputs(batch, seqlen, heads_q, heads_kv, head_dim, gen, heads_first=True)
    torch.cuda.empty_cache()  # its first call allocates its outputs afresh, as in a fresh process's first step

    def run():
        t0 = time.perf_counter()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                   enable_gqa=heads_q != heads_kv)
        out.backward(dout)
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        return (enqueued - t0) * 1e3

    try:
        first = run()
    except RuntimeError as error:  # e.g. a PyTorch whose flash backend refuses GQA
        print(f"sdpa: {error}".splitlines()[0][:160], flush=True)
        return float("nan"), float("nan")
    return first, statistics.median(run() for _ in range(5))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="first_call.jsonl")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--sdpa", action="store_true",
                        help="also time PyTorch's flash SDPA on each new shape (first and later host times)")
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
                first, steady, host_first, host_steady, host_fwd_first, host_fwd_steady, split = step(
                    b, s, hq, hkv, head_dim, causal, gen)
                config = f"b{b}_s{s}_hq{hq}_hkv{hkv}_d{head_dim}_{'causal' if causal else 'full'}"
                row = {"commit": args.commit, "gpu": torch.cuda.get_device_name(), "op": "first_call_fwd_bwd",
                       "config": config, "kind": kind, "first_ms": round(first, 3), "steady_ms": round(steady, 3),
                       "overhead_ms": round(first - steady, 3), "host_first_ms": round(host_first, 3),
                       "host_steady_ms": round(host_steady, 3), "host_fwd_first_ms": round(host_fwd_first, 3),
                       "host_fwd_steady_ms": round(host_fwd_steady, 3),
                       "split_plan_build_ms": round(split.plan_build, 3),
                       "split_plan_wait_ms": round(split.plan_wait, 3), "split_launch_ms": round(split.launch, 3),
                       "split_dash_bwd_ms": round(split.dash_bwd, 3), "split_tables": split.tables.strip()}
                sdpa = ""
                if args.sdpa and kind == "new shape":
                    sdpa_first, sdpa_steady = sdpa_host_ms(b, s, hq, hkv, head_dim, causal, gen)
                    row.update(sdpa_host_first_ms=round(sdpa_first, 3), sdpa_host_steady_ms=round(sdpa_steady, 3))
                    sdpa = f"  sdpa host {sdpa_first:6.2f} / {sdpa_steady:5.2f}"
                print(f"{config:40s} {kind:20s} first {first:9.2f} ms  steady {steady:9.2f} ms  "
                      f"overhead {first - steady:8.2f} ms  host first {host_first:8.2f} ms  steady {host_steady:6.2f} ms  "
                      f"(forward {host_fwd_first:6.2f} / {host_fwd_steady:6.2f})  first call's plan built "
                      f"{split.plan_build:6.2f}, waited {split.plan_wait:6.2f}, launch {split.launch:5.2f} "
                      f"(dash_bwd {split.dash_bwd:5.2f}, tables {split.tables.strip()}) ms{sdpa}",
                      flush=True)
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
