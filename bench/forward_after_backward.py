# SPDX-License-Identifier: Apache-2.0
"""Does a forward run slower right after another implementation's backward? (the record's 2nd / 3rd repeats of our
forward follow cuDNN's backward and read ~7% lower than the 1st). Times dash-attn's and FA3's forwards (the protocol's
timer) after: a 0.5 s pause, 13 calls of cuDNN's backward, of dash-attn's deterministic backward (auto) and of FA3's
non-deterministic backward; 3 rounds; one JSON line per (preceding workload, forward). The implementations and inputs
are bench/record.py's (Case, dash_impls, fa3_impls, autograd_impls).

    python3 bench/forward_after_backward.py FA3_C.so OUT.jsonl [CONFIG]     # FA3 upstream's _C.so (shared/fa3kit)
"""
import json
import statistics
import sys
import time

import torch

from record import (Case, autograd_impls, cudnn_forward, dash_impls, fa3_impls, forward_flops, load_fa3,
                    parse_config, time_cuda)


def main():
    fa3 = load_fa3(sys.argv[1])
    out_path = sys.argv[2]
    row = parse_config(sys.argv[3] if len(sys.argv) > 3 else "b2_s8192_hq16_hkv16_d128_causal")
    case = Case(*row)
    impls = {i.key: i for i in dash_impls(case, ["auto"]) + fa3_impls(case, fa3) +
             autograd_impls("cudnn", case, cudnn_forward(case), ["nondeterministic"])}

    def repeat(key):
        return lambda: [impls[key].run() for _ in range(13)]

    before = {
        "pause": lambda: (torch.cuda.synchronize(), time.sleep(0.5)),
        "cudnn_bwd": repeat(("cudnn", "nondeterministic", None)),
        "dash_det_bwd": repeat(("dash-attn", "deterministic", "auto")),
        "fa3_bwd": repeat(("fa3", "nondeterministic", None)),
    }
    forwards = {"dash-attn": impls[("dash-attn", "forward", None)], "fa3": impls[("fa3", "forward", None)]}
    flops = forward_flops(case.b, case.s, case.hq, case.d, case.causal)
    tflops = {}
    for _round in range(3):
        for pre, pre_fn in before.items():
            for name, impl in forwards.items():
                pre_fn()
                ms = statistics.median(time_cuda(impl.run, 3, 10))
                tflops.setdefault((pre, name), []).append(round(flops / ms / 1e9, 1))
    with open(out_path, "w") as f:
        for (pre, name), t in tflops.items():
            line = json.dumps(dict(config=case.name, preceded_by=pre, impl=name, mode="forward", tflops_per_round=t,
                                   tflops=statistics.median(t), gpu=torch.cuda.get_device_name(0)))
            print(line)
            f.write(line + "\n")


if __name__ == "__main__":
    main()
