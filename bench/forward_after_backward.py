# SPDX-License-Identifier: Apache-2.0
"""Does a forward run slower right after another implementation's backward? (the record's 2nd / 3rd repeats of our
forward follow cuDNN's backward and read ~7% lower than the 1st). Times dash-attn's and FA3's forwards (protocol
timer) after: a 0.5 s pause, cuDNN's backward (13 calls), dash-attn's deterministic backward (13 calls), FA3's
backward; 3 rounds; prints one line per (preceding, forward).

    python3 bench/forward_after_backward.py FA3_C.so OUT.jsonl     # FA3 upstream's _C.so, built from shared/fa3kit
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import dash_attn  # noqa: F401  (registers torch.ops.dash_attn)
from record import time_cuda, load_fa3


def main():
    fa3 = load_fa3(sys.argv[1])
    out_path = sys.argv[2]
    b, s, h, d = 2, 8192, 16, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    scale = d ** -0.5
    ops = torch.ops.dash_attn
    flops = 4 * b * h * s * s * d / 2
    o, lse = ops.fwd(q, k, v, True, scale, True, "auto")
    qc, kc, vc = (t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        oc = F.scaled_dot_product_attention(qc, kc, vc, is_causal=True, scale=scale)
    doc = do.transpose(1, 2)
    fo, flse = fa3.fwd(q, k, v, softmax_scale=scale, is_causal=True, num_splits=1)[:2]

    def fa3_bwd():
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        fa3.bwd(do, q, k, v, fo, flse, dq, dk, dv, None, None, None, None, None, None, scale, True, -1, -1, 0.0, False,
                0)

    before = {
        "pause": lambda: (torch.cuda.synchronize(), time.sleep(0.5)),
        "cudnn_bwd": lambda: [torch.autograd.grad(oc, (qc, kc, vc), doc, retain_graph=True) for _ in range(13)],
        "dash_det_bwd": lambda: [ops.bwd(do, q, k, v, o, lse, True, scale, True, "auto") for _ in range(13)],
        "fa3_bwd": lambda: [fa3_bwd() for _ in range(13)],
    }
    fwds = {"dash-attn": lambda: ops.fwd(q, k, v, True, scale, True, "auto"),
            "fa3": lambda: fa3.fwd(q, k, v, softmax_scale=scale, is_causal=True, num_splits=1)}
    res = {}
    for _round in range(3):
        for pre, pre_fn in before.items():
            for name, fn in fwds.items():
                pre_fn()
                ms = statistics.median(time_cuda(fn, 3, 10))
                res.setdefault((pre, name), []).append(round(flops / ms / 1e9, 1))
    with open(out_path, "w") as f:
        for (pre, name), t in res.items():
            line = dict(config="b2_s8192_hq16_hkv16_d128_causal", preceded_by=pre, impl=name, mode="forward",
                        tflops_per_round=t, tflops=statistics.median(t), gpu=torch.cuda.get_device_name(0))
            print(json.dumps(line))
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
