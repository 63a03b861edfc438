# SPDX-License-Identifier: Apache-2.0
"""auto_check.py — a device check of auto's plans on the shapes whose table row changed in 769835d (ties to
descending; GQA rows re-ranked for the slot-claim planners): through dash_attn.attention with schedule auto, the
backward's gradients against fp32 math, bitwise over 3 deterministic runs, and a sequence alone against the same
sequence as entry 1 of a batch of 2. Prints one JSON line per shape and a last line "auto_check: all ok" or "FAIL".

    DASH_ATTN_LIBRARY=... python3 auto_check.py
"""
import json
import os
import sys

import torch

import dash_attn

# The tests' reference attention (python/tests/attention_reference.py): fp32 math here, GQA and the causal mask as
# dash_attn.attention takes them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "python", "tests"))
import attention_reference  # noqa: E402

# (batch, seqlen, heads_q, heads_kv, head_dim, causal, the table's first candidate at 769835d)
SHAPES = [(1, 16384, 2, 2, 128, False, "split/descending"), (1, 8192, 4, 1, 128, True, "pack/symmetric-shift"),
          (1, 16384, 2, 1, 128, True, "pack/symmetric-shift"), (1, 8192, 4, 1, 128, False, "split/shift"),
          (1, 16384, 2, 1, 64, False, "pack/descending")]


def inputs(batch, seqlen, heads_q, heads_kv, hdim, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def r(h):
        return torch.randn(batch, seqlen, h, hdim, device="cuda", dtype=torch.bfloat16, generator=g)
    return r(heads_q), r(heads_kv), r(heads_kv), r(heads_q)


def grads(q, k, v, do, causal, deterministic):
    fn = lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, deterministic=deterministic, schedule="auto")
    return attention_reference.forward_backward(fn, q, k, v, do)[1:]


def reference(q, k, v, do, causal):
    """fp32 math through autograd (the tests' reference in fp32)."""
    fn = lambda q, k, v: attention_reference.attention(q, k, v, causal, q.shape[-1] ** -0.5, dtype=torch.float32)
    return attention_reference.forward_backward(fn, q, k, v, do.float())[1:]


def rel(a, b):
    return float((a.float() - b).abs().max() / b.abs().max())


def main():
    failures = 0
    for (batch, seqlen, hq, hkv, hdim, causal, choice) in SHAPES:
        q, k, v, do = inputs(batch, seqlen, hq, hkv, hdim, seed=seqlen + hq + hdim + causal)
        det = [grads(q, k, v, do, causal, True) for _ in range(3)]
        bitwise = all(torch.equal(a, b) for run in det[1:] for a, b in zip(run, det[0]))
        nondet = grads(q, k, v, do, causal, False)
        q2, k2, v2, do2 = (torch.cat([torch.randn_like(x), x]) for x in (q, k, v, do))
        in_batch = grads(q2, k2, v2, do2, causal, True)
        batch_invariant = all(torch.equal(a[1:], b) for a, b in zip(in_batch, det[0]))
        ref = reference(q, k, v, do, causal)
        errors = {name: [rel(det[0][i], ref[i]), rel(nondet[i], ref[i])] for i, name in enumerate(("dq", "dk", "dv"))}
        # bf16 gradients against fp32 math, max error over max magnitude: 3-4e-3 measured on these lengths.
        ok = bitwise and batch_invariant and max(max(e) for e in errors.values()) < 2e-2
        failures += not ok
        print(json.dumps({"shape": f"b{batch}_s{seqlen}_hq{hq}_hkv{hkv}_d{hdim}_{'causal' if causal else 'full'}",
                          "table_choice": choice, "bitwise_3_runs": bitwise, "batch_invariant": batch_invariant,
                          "rel_err_det_nondet": errors, "ok": ok}), flush=True)
        del det, nondet, in_batch, ref
        torch.cuda.empty_cache()
    print("auto_check:", "FAIL" if failures else "all ok", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
