# SPDX-License-Identifier: Apache-2.0
"""Trains a small GPT twice per attention implementation and compares the two runs bit for bit.

Every op except attention is deterministic by construction (one-hot embedding matmuls, LayerNorm, GEMMs with
a fixed cuBLAS workspace, no dropout), so any difference between two runs comes from attention:
  - dash_attn (deterministic)         : identical losses and parameters, expected
  - SDPA, default backends            : the two runs drift apart
  - SDPA under deterministic algorithms : identical, but slower

    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 examples/gpt_determinism_demo.py --steps 300
"""
import argparse
import hashlib
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dash_attn  # noqa: E402


class Block(nn.Module):
    def __init__(self, dim, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        x = x + self.proj(self.attention(q, k, v).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, layers, attention):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Parameter(torch.randn(vocab, dim) * 0.02)  # used through a one-hot matmul: deterministic
        self.blocks = nn.ModuleList(Block(dim, heads, attention) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)

    def forward(self, tokens):
        x = F.one_hot(tokens, self.vocab).to(self.embed.dtype) @ self.embed
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.embed.t()


def attention_impl(name):
    if name == "dash_attn":
        return lambda q, k, v: dash_attn.attention(q, k, v, causal=True)
    return lambda q, k, v: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          is_causal=True).transpose(1, 2)


def train(name, steps, seed, args):
    torch.use_deterministic_algorithms(name == "sdpa-deterministic")
    torch.manual_seed(seed)
    model = GPT(args.vocab, args.dim, args.heads, args.layers, attention_impl(name)).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
    data = torch.Generator(device="cuda").manual_seed(1234)
    losses, times = [], []
    for step in range(steps):
        tokens = torch.randint(0, args.vocab, (args.batch, args.seqlen + 1), device="cuda", generator=data)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        losses.append(loss.item())
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().float().cpu().numpy().tobytes())
    torch.use_deterministic_algorithms(False)
    times = sorted(times[5:])
    return losses, digest.hexdigest(), times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--heads", type=int, default=4)  # head dim 128
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    args = ap.parse_args()
    print(f"GPT: {args.layers} layers, dim {args.dim}, {args.heads} heads, seqlen {args.seqlen}, batch {args.batch}, "
          f"{args.steps} steps, bf16, on {torch.cuda.get_device_name()}")
    print(f"{'attention':<22} {'run 1 final loss':>17} {'run 2 final loss':>17} {'losses equal':>13} "
          f"{'params equal':>13} {'step ms':>8}")
    for name in ("dash_attn", "sdpa-default", "sdpa-deterministic"):
        l1, h1, t1 = train(name, args.steps, 0, args)
        l2, h2, t2 = train(name, args.steps, 0, args)
        first_diff = next((i for i, (a, b) in enumerate(zip(l1, l2)) if a != b), None)
        print(f"{name:<22} {l1[-1]:>17.6f} {l2[-1]:>17.6f} {str(l1 == l2):>13} {str(h1 == h2):>13} "
              f"{(t1 + t2) / 2:>8.2f}" + ("" if first_diff is None else f"   (first differing step: {first_diff})"),
              flush=True)


if __name__ == "__main__":
    main()
