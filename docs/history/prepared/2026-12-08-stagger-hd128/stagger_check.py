# SPDX-License-Identifier: Apache-2.0
"""stagger_check.py — a device check of a library whose head-dim-128 backward may run the staggered warpgroups
(README.md): on shapes where it runs them (non-deterministic mode; deterministic plans whose dQ chains are spaced,
i.e. full-mask shift from 17 KV tiles) and on controls, the backward's gradients against fp32 math, bitwise over 2
deterministic runs, and the SHA-256 of the deterministic dQ / dK / dV per shape, written as JSON so that two
libraries' runs can be compared (the staggered kernel runs the lock-step kernel's GEMMs and adds in the same order,
so its bits must equal main's). Prints one JSON line per shape and "stagger_check: all ok" or "FAIL".

    DASH_ATTN_LIBRARY=... python3 stagger_check.py OUT.json
"""
import hashlib
import json
import os
import sys

import torch

import dash_attn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "python", "tests"))
import attention_reference  # noqa: E402

# (batch, seqlen, heads_q, heads_kv, causal, schedule): head dim 128, bf16.
SHAPES = [
    (1, 4096, 2, 2, False, "shift"),    # 32 KV tiles, 64 Q tiles: spaced shift, the staggered kernel in both modes
    (1, 16384, 1, 1, False, "shift"),   # 128 KV tiles: spaced
    (2, 3000, 2, 2, False, "shift"),    # 47 Q tiles (odd): not spaced, lock-step when deterministic
    (1, 16384, 1, 1, False, "auto"),    # ascending: lock-step when deterministic
    (1, 8192, 4, 1, False, "auto"),     # GQA
    (1, 8192, 2, 2, True, "auto"),
    (2, 777, 3, 3, True, "auto"),       # a partial last tile on both sides
    (3, 130, 2, 1, False, "auto"),      # two KV tiles, the second nearly empty
]


def sha(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def inputs(batch, seqlen, heads_q, heads_kv, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def r(h):
        return torch.randn(batch, seqlen, h, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    return r(heads_q), r(heads_kv), r(heads_kv), r(heads_q)


def grads(q, k, v, do, causal, deterministic, schedule):
    fn = lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, deterministic=deterministic, schedule=schedule)
    return attention_reference.forward_backward(fn, q, k, v, do)[1:]


def reference(q, k, v, do, causal):
    fn = lambda q, k, v: attention_reference.attention(q, k, v, causal, q.shape[-1] ** -0.5, dtype=torch.float32)
    return attention_reference.forward_backward(fn, q, k, v, do.float())[1:]


def rel(a, b):
    return float((a.float() - b).abs().max() / b.abs().max())


def main():
    results, failures = [], 0
    for (batch, seqlen, hq, hkv, causal, schedule) in SHAPES:
        q, k, v, do = inputs(batch, seqlen, hq, hkv, seed=seqlen + hq + causal)
        det = [grads(q, k, v, do, causal, True, schedule) for _ in range(2)]
        bitwise = all(torch.equal(a, b) for a, b in zip(det[1], det[0]))
        nondet = grads(q, k, v, do, causal, False, schedule)
        ref = reference(q, k, v, do, causal)
        errors = {name: [rel(det[0][i], ref[i]), rel(nondet[i], ref[i])] for i, name in enumerate(("dq", "dk", "dv"))}
        # bf16 gradients against fp32 math, max error over max magnitude: 2-4e-3 measured at these lengths.
        ok = bitwise and max(max(e) for e in errors.values()) < 2e-2
        failures += not ok
        row = {"shape": f"b{batch}_s{seqlen}_hq{hq}_hkv{hkv}_d128_{'causal' if causal else 'full'}", "schedule": schedule,
               "bitwise_2_runs": bitwise, "rel_err_det_nondet": errors, "ok": ok,
               "sha_det": {name: sha(t) for name, t in zip(("dq", "dk", "dv"), det[0])}}
        results.append(row)
        print(json.dumps(row), flush=True)
        del det, nondet, ref
        torch.cuda.empty_cache()
    json.dump({"shapes": results}, open(sys.argv[1], "w"))
    print("stagger_check:", "FAIL" if failures else "all ok", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
