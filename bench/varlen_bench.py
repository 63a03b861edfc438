# SPDX-License-Identifier: Apache-2.0
"""Packed variable-length sequences on the H200 (issue 15's table), one process, the protocol's timer (bench/record.py's
time_cuda: 10 calls queued back to back, CUDA events, median, 3 warm-ups): dash-attn's varlen backward (deterministic
auto, non-deterministic) and forward, beside FlexAttention with a document block mask (torch.compile'd, as its
documentation runs it) and dash-attn's padded dense call (every sequence padded to the longest: what a trainer without
varlen runs). bf16, head dim 128, 32 query / 8 KV heads, causal per document.

Packs (seeded; the lengths go into every JSON row):
  docs16k / docs64k: documents with lognormal lengths (mean about 1k, capped at 8k) until the pack holds 16k / 64k tokens
      (the last document cut to fit);
  windows64k: a stream of such documents cut into 8k-token windows (Llama-3-style pretraining): each window's pieces are
      its sequences;
  short16k (only with --packs): documents of 64-512 tokens (uniform) until the pack holds 16k tokens, as in
      fine-tuning on short samples; at most 4 KV tiles each, so its non-deterministic backward runs the ordered adds.
FLOPs count the unmasked (query, key) pairs exactly: forward 4 * head_dim * heads_q * sum over sequences of L (L + 1) / 2,
backward 2.5 times that. cuDNN SDPA takes no varlen input; FA3's kit is built without varlen. --fa4 adds FA4's
flash_attn_varlen_func (flash_attn.cute, deterministic and not), which must be importable: scripts/fa4_carry.sh and
the three device calls of scripts/gpu_fa4_site.sh install it.

    python3 bench/varlen_bench.py --out varlen.jsonl [--no-flex] [--no-padded] [--fa4] [--schedules LIST] [--commit SHA]
        [--packs docs16k,docs64k,windows64k,short16k]

--schedules adds deterministic rows of named planners beside auto's (to see whether auto's per-sequence choice or the
planners themselves set the deterministic speed of a pack).
"""
import argparse
import json
import math
import statistics
import uuid

import numpy as np
import torch

import dash_attn  # noqa: F401  (registers torch.ops.dash_attn)
from record import git_commit, time_cuda  # bench/record.py, beside this file

HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
MEAN, CAP, WINDOW = 1024, 8192, 8192


def document_lengths(rng, total):
    """Lognormal lengths with mean MEAN (sigma 1), capped at CAP, until `total` tokens (the last one cut)."""
    sigma = 1.0
    mu = math.log(MEAN) - sigma * sigma / 2
    lengths = []
    while sum(lengths) < total:
        n = int(min(CAP, max(1, round(rng.lognormal(mu, sigma)))))
        lengths.append(min(n, total - sum(lengths)))
    return lengths


def window_lengths(rng, total):
    """Documents concatenated into one stream, cut into WINDOW-token windows: each window's pieces."""
    lengths = []
    for _ in range(total // WINDOW):
        left = WINDOW
        while left > 0:
            n = min(left, int(min(CAP, max(1, round(rng.lognormal(math.log(MEAN) - 0.5, 1.0))))))
            lengths.append(n)
            left -= n
    return lengths


def short_lengths(rng, total, low=64, high=512):
    """Lengths uniform in [low, high] until `total` tokens (the last one cut)."""
    lengths = []
    while sum(lengths) < total:
        lengths.append(min(int(rng.integers(low, high + 1)), total - sum(lengths)))
    return lengths


def packs(seed, names):
    rng = np.random.default_rng(seed)
    made = {"docs16k": lambda: document_lengths(rng, 16384), "docs64k": lambda: document_lengths(rng, 65536),
            "windows64k": lambda: window_lengths(rng, 65536), "short16k": lambda: short_lengths(rng, 16384)}
    unknown = [n for n in names if n not in made]
    if unknown:
        raise SystemExit(f"varlen_bench.py: unknown pack(s) {unknown}; have {list(made)}")
    # Drawn in this order whatever is asked (short16k last, when asked), so that a pack's lengths never depend on
    # which others a run names.
    out = {n: made[n]() for n in made if n != "short16k" or "short16k" in names}
    return [(n, out[n]) for n in names]


def pack_inputs(lengths):
    """A pack's inputs: q, k, v, do (bf16 on the GPU, (tokens, heads, HEAD_DIM), drawn in that order from a generator
    seeded with the pack's token count) and its cu_seqlens (int32, on the host)."""
    total = sum(lengths)
    g = torch.Generator(device="cuda").manual_seed(total)
    mk = lambda h: torch.randn(total, h, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    q, k, v, do = mk(HEADS_Q), mk(HEADS_KV), mk(HEADS_KV), mk(HEADS_Q)
    cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int32)
    return q, k, v, do, cu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--no-padded", action="store_true")
    ap.add_argument("--fa4", action="store_true", help="time FA4's flash_attn_varlen_func too (must be importable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--schedules", default="", help="comma-separated named planners timed deterministic beside auto")
    ap.add_argument("--commit")
    ap.add_argument("--packs", default="docs16k,docs64k,windows64k", help="comma-separated packs (docstring)")
    args = ap.parse_args()
    env = dict(commit=args.commit or git_commit(), call_id=uuid.uuid4().hex[:12], gpu=torch.cuda.get_device_name(0),
               torch=torch.__version__, dtype="bfloat16", seed=args.seed,
               timer="cuda-events back to back, median of 10 after 3 warm-ups")
    flex = create_block_mask = None
    if not args.no_flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    fa4 = None
    if args.fa4:
        from flash_attn.cute import flash_attn_varlen_func as fa4  # noqa: N813 (third-party, measured)
    schedules = [s for s in args.schedules.split(",") if s]
    with open(args.out, "a") as out:
        for name, lengths in packs(args.seed, args.packs.split(",")):
            for result in run_pack(name, lengths, env, flex, create_block_mask, not args.no_padded, fa4, schedules):
                out.write(json.dumps(result) + "\n")
                out.flush()
            torch.cuda.empty_cache()


def fa4_varlen(fa4, cu, longest, scale):
    """FA4's varlen forward as a function of (q, k, v, deterministic), keyword arguments filtered by its signature."""
    import inspect

    accepted = set(inspect.signature(fa4).parameters)
    kwargs = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest, softmax_scale=scale,
                  causal=True)

    def forward(q, k, v, det):
        o = fa4(q, k, v, **{key: val for key, val in dict(kwargs, deterministic=det).items() if key in accepted})
        return o[0] if isinstance(o, tuple) else o

    return forward


def run_pack(name, lengths, env, flex, create_block_mask, padded, fa4=None, schedules=()):
    total = sum(lengths)
    pairs = sum(n * (n + 1) // 2 for n in lengths)
    fwd_flops = 4.0 * HEAD_DIM * HEADS_Q * pairs
    bwd_flops = 2.5 * fwd_flops
    q, k, v, do, cu_host = pack_inputs(lengths)
    cu = cu_host.cuda()
    longest = max(lengths)
    scale = HEAD_DIM ** -0.5
    ops = torch.ops.dash_attn
    impls = []  # (impl, mode, fn, flops, schedule)
    o, lse = ops.varlen_fwd(q, k, v, cu_host, cu_host, longest, longest, True, scale, True, "auto")
    impls.append(("dash-attn", "forward",
                  lambda: ops.varlen_fwd(q, k, v, cu_host, cu_host, longest, longest, True, scale, True, "auto"),
                  fwd_flops, None))
    for det, schedule in [(True, "auto"), (False, "auto")] + [(True, s) for s in schedules]:
        impls.append(("dash-attn", "deterministic" if det else "nondeterministic",
                      lambda det=det, schedule=schedule: ops.varlen_bwd(do, q, k, v, o, lse, cu_host, cu_host, longest,
                                                                        longest, True, scale, det, schedule),
                      bwd_flops, schedule))
    if padded:
        # Every sequence padded to the longest, as a dense batch: the same useful FLOPs, the padding's work wasted.
        b = len(lengths)
        dense = lambda t: torch.zeros(b, longest, t.shape[1], HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        pq, pk, pv, pdo = dense(q), dense(k), dense(v), dense(do)
        for i, n in enumerate(lengths):
            s = int(cu_host[i])
            pq[i, :n], pk[i, :n], pv[i, :n], pdo[i, :n] = q[s:s + n], k[s:s + n], v[s:s + n], do[s:s + n]
        po, plse = ops.fwd(pq, pk, pv, True, scale, True, "auto", True)
        impls.append(("dash-attn-padded", "forward", lambda: ops.fwd(pq, pk, pv, True, scale, True, "auto", True),
                      fwd_flops, None))
        impls.append(("dash-attn-padded", "deterministic",
                      lambda: ops.bwd(pdo, pq, pk, pv, po, plse, True, scale, True, "auto"), bwd_flops, "auto"))
    if fa4 is not None:
        forward = fa4_varlen(fa4, cu, longest, scale)
        leaves4 = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        impls.append(("fa4", "forward", lambda: forward(*leaves4, False), fwd_flops, None))
        for det in (True, False):
            out4 = forward(*leaves4, det)
            impls.append(("fa4", "deterministic" if det else "nondeterministic",
                          lambda out4=out4: torch.autograd.grad(out4, leaves4, do, retain_graph=True), bwd_flops, None))
    if flex is not None:
        doc = torch.repeat_interleave(torch.arange(len(lengths), device="cuda"),
                                      torch.tensor(lengths, device="cuda"))

        def document_causal(b_, h_, qi, ki):
            return (doc[qi] == doc[ki]) & (ki <= qi)

        block_mask = create_block_mask(document_causal, None, None, total, total)
        leaves = [t.transpose(0, 1).unsqueeze(0).contiguous().requires_grad_(True) for t in (q, k, v)]
        dot = do.transpose(0, 1).unsqueeze(0).contiguous()
        run = lambda: flex(*leaves, block_mask=block_mask, scale=scale, enable_gqa=True)
        impls.append(("flex-attention", "forward", run, fwd_flops, None))
        flex_out = run()
        impls.append(("flex-attention", "nondeterministic",
                      lambda: torch.autograd.grad(flex_out, leaves, dot, retain_graph=True), bwd_flops, None))
    rows = []
    for impl, mode, fn, flops, schedule in impls:
        times = [statistics.median(time_cuda(fn)) for _ in range(3)]  # 3 repeats, each a median of 10
        ms = statistics.median(times)
        row = dict(env, config=f"{name}_t{total}_hq{HEADS_Q}_hkv{HEADS_KV}_d{HEAD_DIM}_causal", impl=impl, mode=mode,
                   schedule=schedule,
                   tflops=flops / ms / 1e9, ms=ms, times_ms=times, sequences=len(lengths), tokens=total,
                   longest=longest, lengths=lengths)
        print(f"{row['config']:40s} {impl:18s} {mode:17s} {schedule or '':16s} {row['tflops']:7.1f} TFLOP/s"
              f"  {ms:8.3f} ms", flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
