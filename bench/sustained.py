# SPDX-License-Identifier: Apache-2.0
"""Sustained back-to-back calls with the GPU's clock and power beside them: how an implementation's speed depends
on how warm the GPU is. Each (impl, mode) runs for --seconds of calls queued back to back (CUDA events per call,
as bench/record.py times them), the phases interleaved over --rounds, with a pause of --pause seconds before each
phase; nvidia-smi samples the SM clock, power draw, temperature and the active clock-event reasons every 50 ms.
Per phase it prints the median TFLOP/s of the first and the last 10 calls and the median clock and power over the
phase.

    python3 bench/sustained.py [--fa3 /path/_C.so] [--configs b4_s4096_hq16_hkv16_d128_full] [--seconds 2]
                                [--schedules auto] [--nondet-schedules auto,ascending]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile
import time

import torch

# bench/record.py, beside this file
from record import Case, config_name, dash_impls, fa3_impls, grid, load_fa3, time_cuda

FIELDS = ["timestamp", "clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active"]


def start_smi(path):
    """nvidia-smi sampling every 50 ms into `path` (None if nvidia-smi is missing)."""
    for fields in (FIELDS, FIELDS[:-1] + ["clocks_throttle_reasons.active"]):
        cmd = ["nvidia-smi", "-i", str(torch.cuda.current_device()), f"--query-gpu={','.join(fields)}",
               "--format=csv,noheader,nounits", "-lms", "50"]
        try:
            probe = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if probe.returncode == 0:
            return subprocess.Popen(cmd, stdout=open(path, "w"), stderr=subprocess.DEVNULL)
    return None


def read_smi(path):
    """[(time.time()-style seconds, sm MHz, watts, celsius, reasons)] from the log."""
    samples = []
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, float(parts[1]), float(parts[2]), float(parts[3]), parts[4]))
        except ValueError:
            continue
    return samples


def run_phase(fn, seconds):
    """Per-call ms of back-to-back calls for about `seconds`: record.py's timer in batches of 10 (one synchronise per
    batch, no warm-up between batches)."""
    times = []
    t_end = time.time() + seconds
    while time.time() < t_end:
        times += time_cuda(fn, warmup=0, reps=10)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fa3")
    ap.add_argument("--configs", default="b4_s4096_hq16_hkv16_d128_full")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pause", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--schedules", default="auto", help="deterministic schedules of ours (comma-separated)")
    ap.add_argument("--nondet-schedules", default="auto", help="non-deterministic schedules of ours (comma-separated)")
    ap.add_argument("--out", help="JSON lines, one per phase")
    args = ap.parse_args()
    rows = {config_name(*r): r for r in grid()}
    fa3 = load_fa3(args.fa3) if args.fa3 else None
    log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    smi = start_smi(log)
    if smi is None:
        print("sustained.py: nvidia-smi is not available: no clock or power figures")
    results = []
    try:
        for name in args.configs.split(","):
            if name not in rows:
                raise SystemExit(f"sustained.py: unknown config {name}")
            case = Case(*rows[name])
            impls = [i for i in dash_impls(case, args.schedules.split(","), args.nondet_schedules.split(","))
                     if i.mode != "forward"]
            if fa3 is not None:
                impls += [i for i in fa3_impls(case, fa3) if i.mode != "forward"]
            flops = case.fwd_flops * 2.5
            for rnd in range(args.rounds):
                order = impls if rnd % 2 == 0 else impls[::-1]
                for impl in order:
                    for _ in range(3):
                        impl.run()
                    torch.cuda.synchronize()
                    time.sleep(args.pause)
                    t0 = time.time()
                    times = run_phase(impl.run, args.seconds)
                    t1 = time.time()
                    results.append(dict(config=name, impl=impl.impl, mode=impl.mode, schedule=impl.schedule,
                                        round=rnd, t0=t0, t1=t1,
                                        first=statistics.median(times[:10]), last=statistics.median(times[-10:]),
                                        median=statistics.median(times), calls=len(times), flops=flops))
    finally:
        if smi is not None:
            time.sleep(0.2)
            smi.terminate()
    samples = read_smi(log) if smi is not None else []
    os.unlink(log)
    print(f"{'config':34s} {'impl':9s} {'mode':16s} {'schedule':16s} rnd  calls  TF/s first  last  median"
          "   SM MHz  watts  degC  reasons")
    out = open(args.out, "w") if args.out else None
    for r in results:
        inside = [s for s in samples if r["t0"] <= s[0] <= r["t1"]]
        r["sm_mhz"] = statistics.median(s[1] for s in inside) if inside else None
        r["watts"] = statistics.median(s[2] for s in inside) if inside else None
        r["celsius"] = statistics.median(s[3] for s in inside) if inside else None
        r["reasons"] = sorted({s[4] for s in inside})
        tf = lambda ms: r["flops"] / (ms * 1e-3) / 1e12
        print(f"{r['config']:34s} {r['impl']:9s} {r['mode']:16s} {r['schedule'] or '':16s} {r['round']:3d}"
              f" {r['calls']:6d} {tf(r['first']):10.0f} {tf(r['last']):5.0f} {tf(r['median']):7.0f}"
              f"   {r['sm_mhz'] or 0:6.0f} {r['watts'] or 0:6.0f}"
              f" {r['celsius'] or 0:5.0f}  {','.join(r['reasons'])}")
        if out:
            out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
