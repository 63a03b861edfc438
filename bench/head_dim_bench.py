# SPDX-License-Identifier: Apache-2.0
"""Issue 16's head-dim rows on the H200, one process, the protocol's timer (bench/record.py's time_cuda: 10 calls
queued back to back, CUDA events, median, 3 warm-ups): head dim 256 (Gemma) and q/k 192 with v 128 (MLA-style), with
dash-attn's forward and backward (deterministic auto, non-deterministic) beside PyTorch's SDPA backends that take
the case (cuDNN, flash), FlexAttention (torch.compile'd) and, with --fa4, FlashAttention-4 (flash_attn.cute, its
Hopper path; shared/docs/fa4-on-h200.md says how to install it on the H200) non-deterministic and deterministic. A
pass dash-attn cannot run yet is reported with its error, as is any other implementation's refusal. FLOPs: forward
2 * (unmasked pairs) * (d_qk + d_v) per head (dash_attention_flops), backward 2.5 times that. One JSON line per
(config, impl, mode).

    python3 bench/head_dim_bench.py --out head-dims.jsonl [--no-flex] [--fa4] [--commit SHA]
"""
import argparse
import json
import types
import uuid

import torch

import dash_attn  # noqa: F401  (registers torch.ops.dash_attn)
from dash_attn import _abi
from record import fa4_forward, git_commit  # bench/record.py, beside this file
from window_bench import time_impls

# (batch, seqlen, heads, head_dim, head_dim_v, causal): the rows of issue 16.
ROWS = ([(b, s, 8, 256, 256, causal) for b, s in ((4, 4096), (2, 8192), (1, 16384)) for causal in (False, True)] +
        [(b, s, 16, 192, 128, True) for b, s in ((4, 4096), (2, 8192), (1, 16384))])


def config_name(b, s, h, d, dv, causal):
    dims = f"d{d}" if d == dv else f"d{d}_dv{dv}"
    return f"b{b}_s{s}_hq{h}_hkv{h}_{dims}_{'causal' if causal else 'full'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--fa4", action="store_true", help="time FA4 (flash_attn.cute) too; it must be importable")
    ap.add_argument("--commit")
    args = ap.parse_args()
    env = dict(commit=args.commit or git_commit(), call_id=uuid.uuid4().hex[:12], gpu=torch.cuda.get_device_name(0),
               torch=torch.__version__, dtype="bfloat16",
               timer="cuda-events back to back, median of 10 after 3 warm-ups")
    flex = None
    if not args.no_flex:
        from torch.nn.attention.flex_attention import flex_attention
        # One compiled kernel per row (dynamic=False): past dynamo's default of 8 recompilations it silently falls
        # back to the unfused implementation (9.6 TFLOP/s on the ninth row of the first run).
        torch._dynamo.config.recompile_limit = 64
        flex = torch.compile(flex_attention, dynamic=False)
    fa4 = None
    if args.fa4:
        from flash_attn.cute import flash_attn_func as fa4  # noqa: N813 (third-party, measured)
    with open(args.out, "a") as out:
        for row in ROWS:
            for result in run_row(row, env, flex, fa4):
                out.write(json.dumps(result) + "\n")
                out.flush()
            torch.cuda.empty_cache()


def run_row(row, env, flex, fa4=None):
    """The JSON rows of one config."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, s, h, d, dv, causal = row
    name = config_name(*row)
    problem = _abi.make_problem(b, h, h, s, s, d, causal, -1, -1)
    problem.head_dim_v = dv
    fwd_flops = _abi.attention_flops(problem, backward=False)
    bwd_flops = _abi.attention_flops(problem, backward=True)
    g = torch.Generator(device="cuda").manual_seed(s + d)
    mk = lambda cols: torch.randn(b, s, h, cols, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(d), mk(d), mk(dv), mk(dv)
    scale = d ** -0.5
    ops = torch.ops.dash_attn
    impls = [("dash-attn", "forward", lambda: ops.fwd(q, k, v, causal, scale, True, "auto", False, 0, -1, -1),
              fwd_flops)]
    try:
        o, lse = ops.fwd(q, k, v, causal, scale, True, "auto", False, 0, -1, -1)
        for det in (True, False):
            impls.append(("dash-attn", "deterministic" if det else "nondeterministic",
                          lambda det=det: ops.bwd(do, q, k, v, o, lse, causal, scale, det, "auto", 0, -1, -1),
                          bwd_flops))
    except Exception:  # the forward's own row reports the error
        pass
    # PyTorch's layout is (batch, heads, seqlen, dim).
    leaves = [t.transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v)]
    dot = do.transpose(1, 2).contiguous()
    for backend, impl in ((SDPBackend.CUDNN_ATTENTION, "cudnn"), (SDPBackend.FLASH_ATTENTION, "sdpa-flash")):
        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
        impls.append((impl, "forward", sdpa, fwd_flops))
        try:
            out = sdpa()
            impls.append((impl, "nondeterministic",
                          lambda out=out: torch.autograd.grad(out, leaves, dot, retain_graph=True), bwd_flops))
        except Exception:
            pass
    if flex is not None:
        from torch.nn.attention.flex_attention import create_block_mask
        block_mask = create_block_mask(lambda b_, h_, qi, ki: ki <= qi, None, None, s, s) if causal else None
        run = lambda: flex(*leaves, block_mask=block_mask, scale=scale)
        impls.append(("flex-attention", "forward", run, fwd_flops))
        flex_out = run()
        impls.append(("flex-attention", "nondeterministic",
                      lambda: torch.autograd.grad(flex_out, leaves, dot, retain_graph=True), bwd_flops))
    if fa4 is not None:
        forward = fa4_forward(types.SimpleNamespace(scale=scale, causal=causal), fa4)
        fa4_leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        impls.append(("fa4", "forward", lambda: forward(q, k, v, False), fwd_flops))
        for det in (False, True):
            try:
                out = forward(*fa4_leaves, det)
                impls.append(("fa4", "deterministic" if det else "nondeterministic",
                              lambda out=out: torch.autograd.grad(out, fa4_leaves, do, retain_graph=True), bwd_flops))
            except Exception as e:  # a refusal is reported as the mode's row
                def refused(e=e):
                    raise e
                impls.append(("fa4", "deterministic" if det else "nondeterministic", refused, bwd_flops))
    return time_impls(env, name, impls)


if __name__ == "__main__":
    main()
