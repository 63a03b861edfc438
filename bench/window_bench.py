# SPDX-License-Identifier: Apache-2.0
"""Sliding-window attention on the H200, one process, the protocol's timer (bench/record.py's time_cuda: 10 calls
queued back to back, CUDA events, median, 3 warm-ups): dash-attn's backward (deterministic auto, non-deterministic)
and forward beside FlexAttention's with a sliding-window block mask (torch.compile'd, as its documentation runs it).
PyTorch's cuDNN / flash SDPA take no window. FLOPs count the unmasked (query, key) pairs exactly
(dash_attention_flops): forward 4 * pairs * head_dim, backward 2.5 times that. One JSON line per (config, impl, mode).

    python3 bench/window_bench.py --out window.jsonl [--no-flex] [--commit SHA]
"""
import argparse
import json
import statistics
import uuid

import torch

import dash_attn  # noqa: F401  (registers torch.ops.dash_attn)
from dash_attn import _abi
from record import git_commit, time_cuda  # bench/record.py, beside this file

# (batch, seqlen, heads_q, heads_kv, head_dim, window_left, window_right): the rows of issue 16, causal windows.
ROWS = [(1, 16384, 32, 8, 128, 4096, 0), (1, 32768, 32, 8, 128, 4096, 0), (2, 8192, 64, 8, 64, 128, 0)]


def config_name(b, s, hq, hkv, d, left, right):
    return f"b{b}_s{s}_hq{hq}_hkv{hkv}_d{d}_window{left}_{right}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--commit")
    args = ap.parse_args()
    env = dict(commit=args.commit or git_commit(), call_id=uuid.uuid4().hex[:12], gpu=torch.cuda.get_device_name(0),
               torch=torch.__version__, dtype="bfloat16", timer="cuda-events back to back, median of 10 after 3 warm-ups")
    flex = create_block_mask = None
    if not args.no_flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    with open(args.out, "a") as out:
        for row in ROWS:
            for result in run_row(row, env, flex, create_block_mask):
                out.write(json.dumps(result) + "\n")
                out.flush()
            torch.cuda.empty_cache()


def run_row(row, env, flex, create_block_mask):
    """The JSON rows of one config, printed as they are timed."""
    b, s, hq, hkv, d, left, right = row
    name = config_name(*row)
    problem = _abi.make_problem(b, hq, hkv, s, s, d, False, left, right)
    fwd_flops = _abi.attention_flops(problem, backward=False)
    bwd_flops = _abi.attention_flops(problem, backward=True)
    g = torch.Generator(device="cuda").manual_seed(s + d)
    mk = lambda h: torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(hq), mk(hkv), mk(hkv), mk(hq)
    scale = d ** -0.5
    ops = torch.ops.dash_attn
    impls = []  # (impl, mode, fn, flops)
    o, lse = ops.fwd(q, k, v, False, scale, True, "auto", False, 0, left, right)
    impls.append(("dash-attn", "forward", lambda: ops.fwd(q, k, v, False, scale, True, "auto", False, 0, left, right),
                  fwd_flops))
    for det in (True, False):
        impls.append(("dash-attn", "deterministic" if det else "nondeterministic",
                      lambda det=det: ops.bwd(do, q, k, v, o, lse, False, scale, det, "auto", 0, left, right),
                      bwd_flops))
    if flex is not None:
        # The same band: key j visible to query i iff i - left <= j <= i + right (equal lengths).
        def band(b_, h_, qi, ki):
            return (ki >= qi - left) & (ki <= qi + right)
        block_mask = create_block_mask(band, None, None, s, s)
        leaves = [t.transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v)]
        dot = do.transpose(1, 2).contiguous()
        run = lambda: flex(*leaves, block_mask=block_mask, scale=scale, enable_gqa=hq != hkv)
        impls.append(("flex-attention", "forward", run, fwd_flops))
        flex_out = run()
        impls.append(("flex-attention", "nondeterministic",
                      lambda: torch.autograd.grad(flex_out, leaves, dot, retain_graph=True), bwd_flops))
    return time_impls(env, name, impls)


def time_impls(env, name, impls, warmup_seconds=0.0):
    """Times each (impl, mode, fn, flops) with the protocol's timer (warmup_seconds: record.py's sustained power state);
    one result dict per entry, printed as timed. An implementation that cannot run the case is reported with its
    error, not fatal."""
    results = []
    for impl, mode, fn, flops in impls:
        try:
            ms = statistics.median(time_cuda(fn, warmup_seconds=warmup_seconds))
            result = dict(env, config=name, impl=impl, mode=mode, ms=round(ms, 4),
                          tflops=round(flops / (ms * 1e-3) / 1e12, 1))
            if impl == "dash-attn" and mode != "forward":
                result["schedule"] = "auto"
        except Exception as e:
            result = dict(env, config=name, impl=impl, mode=mode, error=str(e).splitlines()[0][:200])
        print(f"{name:36s} {impl:15s} {mode:17s} " +
              (f"{result['ms']:8.3f} ms {result['tflops']:7.1f} TFLOP/s" if "ms" in result
               else f"ERROR {result['error']}"), flush=True)
        results.append(result)
    return results


if __name__ == "__main__":
    main()
