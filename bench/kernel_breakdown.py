# SPDX-License-Identifier: Apache-2.0
"""Where one call's GPU time goes, kernel by kernel (torch.profiler, CUDA activity only): dash-attn's backward
(non-deterministic and deterministic auto) and forward, beside FA3's when its _C.so is given. The kernels of 10
back-to-back calls are summed and divided by 10; "gaps" is the call's wall time on the GPU (first kernel start to last
kernel end, per call) less the sum of its kernels, i.e. the idle time between them.

    python3 bench/kernel_breakdown.py [--fa3 /path/_C.so] [--configs b32_s512_hq16_hkv16_d128_full,...]
"""
import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

from record import QUICK, Case, config_name, dash_impls, fa3_impls, grid, load_fa3  # bench/record.py, beside this file

CALLS = 10


def breakdown(fn):
    """{kernel name: µs per call} and the per-call GPU span (µs) of `fn`, warm."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    per_kernel = collections.defaultdict(float)
    for e in events:
        per_kernel[e.name] += (e.time_range.end - e.time_range.start) / CALLS
    span = (events[-1].time_range.end - events[0].time_range.start) / CALLS if events else 0.0
    return per_kernel, span


def short(name, width=60):
    name = name.replace("void ", "")
    return name if len(name) <= width else name[:width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fa3")
    ap.add_argument("--configs", help="comma-separated config names (default: the quick set)")
    args = ap.parse_args()
    wanted = args.configs.split(",") if args.configs else QUICK
    rows = {config_name(*r): r for r in grid()}
    fa3 = load_fa3(args.fa3) if args.fa3 else None
    for name in wanted:
        if name not in rows:
            raise SystemExit(f"kernel_breakdown.py: unknown config {name}")
        case = Case(*rows[name])
        impls = dash_impls(case, ["auto"]) + (fa3_impls(case, fa3) if fa3 is not None else [])
        print(f"== {name}")
        for impl in impls:
            per_kernel, span = breakdown(impl.run)
            total = sum(per_kernel.values())
            label = "/".join(x for x in impl.key if x)
            print(f"  {label:32s} span {span:9.1f} us  kernels {total:9.1f} us  gaps {span - total:7.1f} us")
            for kernel, us in sorted(per_kernel.items(), key=lambda kv: -kv[1]):
                print(f"      {us:9.1f} us  {short(kernel)}")


if __name__ == "__main__":
    main()
