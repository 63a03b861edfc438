# SPDX-License-Identifier: Apache-2.0
"""tail_check.py — a device check of the tail-cut prototype (plan_format.h, "Tail"), run once per library
(DASH_ATTN_LIBRARY): on full-mask shapes whose templates the prototype cuts (>= 128 KV tiles), the backward's
gradients against an fp32 reference, bitwise run to run (deterministic), a sequence alone against the same sequence in
a batch of 2, and the SHA-256 of dQ / dK / dV per shape written as JSON, so that two libraries' runs can be compared
(dQ keeps its bits under the cut; dK / dV of the cut tiles may not).

    python3 scripts/tail_check.py OUT.json
"""
import hashlib
import json
import sys

import torch

import dash_attn


def sha(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def inputs(batch, seqlen, heads_q, heads_kv, hdim, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def r(h):
        return torch.randn(batch, seqlen, h, hdim, device="cuda", dtype=torch.bfloat16, generator=g)
    return r(heads_q), r(heads_kv), r(heads_kv), r(heads_q)


def grads(q, k, v, do, deterministic, schedule):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out = dash_attn.attention(q, k, v, causal=False, deterministic=deterministic, schedule=schedule)
    out.backward(do)
    return q.grad, k.grad, v.grad


def reference(q, k, v, do):
    """fp32 math, heads of q and k/v as given (GQA: k / v repeated)."""
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(rep, dim=2) for x in (k32, v32))
    s = torch.einsum("bqhd,bkhd->bhqk", q32, kk) / q.shape[-1] ** 0.5
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vv)
    out.backward(do.float())
    return q32.grad, k32.grad, v32.grad


def rel(a, b):
    return float((a.float() - b).abs().max() / b.abs().max())


def main():
    results = {"library": str(dash_attn._abi.LIBRARY_PATH), "shapes": []}
    failures = 0
    # Cut by the prototype: head dim 128 at 16k (auto: ascending), head dim 64 at 16k named ascending (auto: shift,
    # uncut), GQA 4 / 2 ascending (cut where packed). Not cut: 8k (64 KV tiles), head dim 64 auto.
    for (batch, seqlen, hq, hkv, hdim, schedule) in [(1, 16384, 2, 2, 128, "auto"), (1, 16384, 2, 2, 64, "ascending"),
                                                     (1, 16384, 4, 2, 128, "ascending"), (1, 16384, 2, 2, 64, "auto"),
                                                     (1, 8192, 2, 2, 128, "auto")]:
        q, k, v, do = inputs(batch, seqlen, hq, hkv, hdim, seed=seqlen + hq + hdim)
        det = [grads(q, k, v, do, True, schedule) for _ in range(3)]
        bitwise = all(torch.equal(a, b) for run in det[1:] for a, b in zip(run, det[0]))
        nondet = grads(q, k, v, do, False, schedule)
        ref = reference(q, k, v, do)
        # The same sequence as entry 1 of a batch of 2 (entry 0 other data): its gradients bit for bit.
        q2, k2, v2, do2 = (torch.cat([torch.randn_like(x), x]) for x in (q, k, v, do))
        in_batch = grads(q2, k2, v2, do2, True, schedule)
        batch_invariant = all(torch.equal(a[1:], b) for a, b in zip(in_batch, det[0]))
        errors = {name: [rel(det[0][i], ref[i]), rel(nondet[i], ref[i])] for i, name in enumerate(("dq", "dk", "dv"))}
        # The cut tiles are the last 5 KV tiles (640 keys); their dK / dV alone.
        cut_keys = slice(seqlen - 5 * 128, seqlen)
        errors["dk_cut"] = [rel(det[0][1][:, cut_keys], ref[1][:, cut_keys])]
        errors["dv_cut"] = [rel(det[0][2][:, cut_keys], ref[2][:, cut_keys])]
        ok = bitwise and batch_invariant and max(max(e) for e in errors.values()) < 2e-2
        failures += not ok
        row = {"shape": f"b{batch}_s{seqlen}_hq{hq}_hkv{hkv}_d{hdim}_full", "schedule": schedule, "bitwise_3_runs": bitwise,
               "batch_invariant": batch_invariant, "rel_err_det_nondet": errors, "ok": ok,
               "sha_det": {n: sha(t) for n, t in zip(("dq", "dk", "dv"), det[0])},
               "sha_det_uncut_rows": {n: sha(t[:, :seqlen - 5 * 128]) for n, t in zip(("dk", "dv"), det[0][1:])}}
        print(json.dumps(row), flush=True)
        results["shapes"].append(row)
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)
    print("tail_check:", "FAIL" if failures else "all ok", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
