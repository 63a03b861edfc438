# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): a per-segment timeline of the backward kernel, from a study library built with
0001-study-trace.patch (the producer writes one record per segment when the MMA warps have finished the previous
one, and one when its CTA runs out of tickets; see the patch). For each run it prints the kernel's span, the SMs'
speeds (visits per microsecond of each SM's busy time: equal items on SMs of equal speed give equal rates), the idle
share at the end (the ragged last round), and a fit of segment duration against its visits (the fixed cost of a
segment: K / V load, first visit, dK / dV epilogue).

  DASH_ATTN_LIBRARY=STUDY/libdash_attn.so PYTHONPATH=python python3 trace_segments.py [--out DIR]
      [--runs CONFIG:MODE:SCHEDULE ...]       (MODE det or nondet; default: the rows of the README)
  python3 trace_segments.py --analyze DIR/trace-*.npz   (again, from saved traces, on any machine)
"""
import argparse
import ctypes
import os
import re
import sys

import numpy as np

DEFAULT_RUNS = [
    "b1_s16384_hq32_hkv32_d64_causal:det:auto",
    "b1_s16384_hq32_hkv32_d64_causal:nondet:auto",
    "b1_s16384_hq32_hkv32_d64_causal:nondet:symmetric-shift",
    "b1_s16384_hq32_hkv32_d64_full:det:auto",
    "b1_s16384_hq32_hkv32_d64_full:nondet:auto",
    "b2_s8192_hq32_hkv32_d64_causal:det:auto",
    "b2_s8192_hq32_hkv32_d64_causal:nondet:auto",
]
CAPACITY = 1 << 17


def decode(words):
    w0, w1 = words[0::2], words[1::2]
    segment = ((w0 >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int64)
    sm = (w0 & np.uint64(0xFFFF)).astype(np.int64)
    visits = (w1 >> np.uint64(48)).astype(np.int64)
    t = (w1 & np.uint64((1 << 48) - 1)).astype(np.int64)
    return segment, sm, visits, t  # (the ticket, w0 >> 32, is kept in the saved records)


def analyze(name, words):
    segment, sm, visits, t = decode(words)
    t = (t - t.min()) / 1000.0  # microseconds from the first record
    exit_ = segment == 0xFFFF
    span = t.max()
    sms = np.unique(sm)
    ends, rates = [], []
    durations, seg_visits = [], []
    for s in sms:
        m = sm == s
        order = np.argsort(t[m], kind="stable")
        ts, vs, ex = t[m][order], visits[m][order], exit_[m][order]
        end = ts[ex].max() if ex.any() else ts.max()
        work = vs[~ex].sum()
        ends.append(end)
        if end > ts[0]:
            rates.append(work / (end - ts[0]))
        # a segment's duration: from its record to the next record of this SM (its successor or the exit)
        seg_t = ts[~ex]
        nxt = np.append(seg_t[1:], end)
        durations += list(nxt - seg_t)
        seg_visits += list(vs[~ex])
    rates, ends = np.array(rates), np.array(ends)
    total = visits[~exit_].sum()
    ideal = total / rates.sum() if rates.sum() > 0 else float("nan")  # every SM busy to the end at its own rate
    idle_end = np.mean(span - ends) / span
    d, v = np.array(durations), np.array(seg_visits)
    slope, intercept = np.polyfit(v, d, 1) if len(v) > 2 and v.std() > 0 else (float("nan"), float("nan"))
    q = np.percentile(rates, [0, 10, 50, 90, 100])
    print(f"{name}: span {span:.0f} us, {len(sms)} SMs, {int(total)} visits, {int((~exit_).sum())} segments; "
          f"SM rate (visits/us) min {q[0]:.3f} p10 {q[1]:.3f} median {q[2]:.3f} p90 {q[3]:.3f} max {q[4]:.3f} "
          f"(cv {rates.std() / rates.mean():.3f}); idle at the end {100 * idle_end:.1f}% of the span; span / "
          f"(visits at the SMs' own rates) {span / ideal:.3f}; segment fit {slope:.3f} us/visit + {intercept:.2f} us")
    # the short segments' cost against the long ones' per visit
    for lo, hi in ((1, 4), (5, 16), (17, 64), (65, 1 << 30)):
        m = (v >= lo) & (v <= hi)
        if m.any():
            print(f"    segments of {lo}-{hi if hi < 1 << 30 else 'more'} visits: {m.sum()}, mean {d[m].mean():.1f} us, "
                  f"{d[m].sum() / max(v[m].sum(), 1):.3f} us per visit")
    sys.stdout.flush()


def run(runs, out):
    import torch
    import dash_attn  # noqa: F401  registers torch.ops.dash_attn
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "bench"))
    from record import Case, parse_config, time_cuda, forward_flops
    lib = ctypes.CDLL(os.environ["DASH_ATTN_LIBRARY"])
    lib.dash_study_trace_arm.argtypes = [ctypes.c_void_p, ctypes.c_uint]
    lib.dash_study_trace_used.restype = ctypes.c_uint
    ops = torch.ops.dash_attn
    buf = torch.zeros(2 * CAPACITY, dtype=torch.int64, device="cuda")
    cases = {}
    for spec in runs:
        config, mode, schedule = spec.split(":")
        if config not in cases:
            cases[config] = Case(*parse_config(config))
        case = cases[config]
        o, lse = ops.fwd(case.q, case.k, case.v, case.causal, case.scale, True, "auto")
        call = lambda: ops.bwd(case.do, case.q, case.k, case.v, o, lse, case.causal, case.scale, mode == "det",
                               schedule)
        lib.dash_study_trace_arm(None, 0)
        times = time_cuda(call, warmup=3, reps=10, warmup_seconds=0.2)
        ms = float(np.median(times))
        tflops = 2.5 * forward_flops(case.b, case.s, case.hq, case.d, case.causal) / ms / 1e9
        print(f"== {spec}: {ms:.3f} ms, {tflops:.1f} TFLOP/s untraced (median of 10, sustained)")
        for rep in range(2):
            for _ in range(4):  # back to back before the traced call: the sustained state
                call()
            torch.cuda.synchronize()
            assert lib.dash_study_trace_arm(ctypes.c_void_p(buf.data_ptr()), CAPACITY) == 0
            call()
            used = lib.dash_study_trace_used()
            lib.dash_study_trace_arm(None, 0)
            assert used <= CAPACITY, f"{used} records, capacity {CAPACITY}"
            words = buf[: 2 * used].cpu().numpy().view(np.uint64).copy()
            name = f"{spec} #{rep}"
            np.savez_compressed(os.path.join(out, f"trace-{re.sub('[^A-Za-z0-9_.-]', '_', spec)}-{rep}.npz"),
                                words=words, name=name, ms=ms)
            analyze(name, words)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--runs", nargs="*", default=DEFAULT_RUNS)
    ap.add_argument("--analyze", nargs="*")
    args = ap.parse_args()
    if args.analyze:
        for path in args.analyze:
            z = np.load(path)
            analyze(str(z["name"]), z["words"])
        return
    os.makedirs(args.out, exist_ok=True)
    run(args.runs, args.out)


if __name__ == "__main__":
    main()
