# SPDX-License-Identifier: Apache-2.0
"""Whether a forward's figure in the back-to-back timer is the GPU's or the host's: per-call times of dash-attn's
forward op (and FA3's, if given) timed three ways, as percentiles p0 p10 p25 p50 p75 p90 p100 (µs):
  back-to-back  record.py's timer (0.2 s of the same call, then 40 calls queued back to back);
  isolated      synchronised before each call: the host's enqueue time plus the GPU's;
  queued-ahead  12 calls queued behind a sleep kernel of ~2 ms, so that the host is never the limit: the GPU alone.
Where back-to-back reads above queued-ahead, the GPU waited for the host. Also the host time per call (µs).

    python3 bench/queue_jitter.py [--fa3 /path/_C.so] [--configs b32_s512_hq16_hkv16_d128_causal,...]
"""
import argparse

import torch

import record as R  # bench/record.py, beside this file


def percentiles(times_ms):
    xs = sorted(times_ms)
    return " ".join(f"{xs[int(p * (len(xs) - 1))] * 1000:6.1f}" for p in (0, .1, .25, .5, .75, .9, 1.0))


def queued_ahead(fn, rounds=3, calls=12):
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(3_000_000)  # cycles: ~2 ms, time enough to enqueue the calls behind it
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times += [start.elapsed_time(end) for start, end in events]
    return times


def isolated(fn, calls=20):
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fa3")
    ap.add_argument("--configs", default="b32_s512_hq16_hkv16_d128_causal,b32_s512_hq32_hkv32_d64_causal")
    args = ap.parse_args()
    fa3 = R.load_fa3(args.fa3) if args.fa3 else None
    ops = torch.ops.dash_attn
    for name in args.configs.split(","):
        case = R.Case(*R.parse_config(name))
        impls = {"dash-attn": lambda: ops.fwd(case.q, case.k, case.v, case.causal, case.scale, True, "auto")}
        if fa3 is not None:
            impls["fa3"] = lambda: fa3.fwd(case.q, case.k, case.v, softmax_scale=case.scale, is_causal=case.causal,
                                           num_splits=1)
        for impl, fn in impls.items():
            host = R.host_us(fn, calls=40)
            back_to_back = R.time_cuda(fn, warmup=3, reps=40, warmup_seconds=0.2)
            print(f"{name:36s} {impl:9s} host_us {host:6.1f} | back-to-back {percentiles(back_to_back)} | "
                  f"isolated {percentiles(isolated(fn))} | queued-ahead {percentiles(queued_ahead(fn))}", flush=True)


if __name__ == "__main__":
    main()
