# SPDX-License-Identifier: Apache-2.0
"""dash_attn: attention whose gradients are bitwise reproducible, at the speed of non-deterministic kernels.

    import dash_attn
    out = dash_attn.attention(q, k, v, causal=True)            # (batch, seqlen, heads, head_dim)
    out = dash_attn.scaled_dot_product_attention(q, k, v, is_causal=True)   # (batch, heads, seqlen, head_dim)

CUDA tensors (bf16/fp16, Hopper) run the sm_90a kernels; CPU tensors run the library's CPU backend, which is
slow but follows the same plan orders. GQA/MQA follow from the head counts of q and k/v.

Batch invariance: with deterministic=True and the default schedule="auto", a sequence's gradients do not
depend on the batch it is in, the number of heads in the call or its position in the batch.
schedule="auto-fastest" may choose differently when those change.
"""
from __future__ import annotations

import hashlib
import math

from ._abi import LIBRARY_PATH, DashError  # noqa: F401  (re-exported)

__all__ = ["attention", "scaled_dot_product_attention", "check_determinism", "DashError", "SCHEDULES"]

try:
    import torch
except ImportError:  # the C ABI (dash_attn._abi) stays usable without torch
    torch = None

if torch is not None:
    from ._torch_ops import SCHEDULES, validate
    from . import _torch_ops

    def attention(q, k, v, causal=False, softmax_scale=None, deterministic=True, schedule="auto",
                  return_lse=False):
        """softmax(q k^T * scale) v for (batch, seqlen, heads, head_dim) tensors.

        causal: bottom-right aligned when seqlen_q != seqlen_k (as FlashAttention).
        deterministic: bitwise reproducible gradients (ordered dQ accumulation); False is the faster
            non-deterministic mode. schedule: the backward plan ("auto", "ascending", "descending",
            "shift", "symmetric-shift", "auto-fastest"). return_lse: also return the log-sum-exp
            (batch, heads, seqlen_q), fp32, not differentiable.
        """
        validate(q, k, v, causal, softmax_scale, schedule)
        scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
        out, lse = _torch_ops.fwd(q, k, v, causal, scale, bool(deterministic), schedule)
        return (out, lse) if return_lse else out

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=True, deterministic=True, schedule="auto"):
        """Drop-in for torch.nn.functional.scaled_dot_product_attention: (batch, heads, seqlen, head_dim)."""
        if attn_mask is not None:
            raise ValueError("dash_attn: attn_mask is not supported (use is_causal)")
        if dropout_p != 0.0:
            raise ValueError("dash_attn: dropout_p must be 0.0")
        if not enable_gqa and query.shape[1] != key.shape[1]:
            raise ValueError("dash_attn: query and key head counts differ but enable_gqa=False")
        out = attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal=is_causal,
                        softmax_scale=scale, deterministic=deterministic, schedule=schedule)
        return out.transpose(1, 2)

    def check_determinism(q, k, v, runs=5, causal=False, deterministic=True, schedule="auto", seed=0):
        """Runs forward + backward `runs` times on the same inputs and a fixed upstream gradient; returns one
        dict per run with the SHA-256 of dq, dk and dv, and whether every run matched the first."""
        gen = torch.Generator(device=q.device).manual_seed(seed)
        dout = torch.randn(q.shape, generator=gen, device=q.device, dtype=q.dtype)
        results = []
        for run in range(runs):
            qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            out = attention(qs, ks, vs, causal=causal, deterministic=deterministic, schedule=schedule)
            out.backward(dout)
            row = {"run": run}
            for name, t in (("dq", qs.grad), ("dk", ks.grad), ("dv", vs.grad)):
                row[name + "_sha256"] = hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8)
                                                       .numpy().tobytes()).hexdigest()
            results.append(row)
        first = results[0]
        identical = all(r[k] == first[k] for r in results for k in first if k != "run")
        return {"runs": results, "identical": identical}
else:
    SCHEDULES = ("auto", "auto-fastest", "ascending", "descending", "shift", "symmetric-shift")

    def _needs_torch(*_args, **_kwargs):
        raise ImportError("dash_attn: this function needs PyTorch; only the C ABI (dash_attn._abi) works without it")

    attention = scaled_dot_product_attention = check_determinism = _needs_torch
