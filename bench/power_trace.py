# SPDX-License-Identifier: Apache-2.0
"""Sustained throughput against the GPU's clock, power and temperature: each phase runs one implementation back to
back for some seconds, timed in batches of 10 calls with the protocol's timer (bench/record.py's time_cuda), while
nvidia-smi samples the SM clock, power draw, temperature and throttle reasons every 100 ms. It shows whether a
figure taken after heavy work measures the kernel or the GPU's power state.

    [FA3_SO=_C.so] python3 bench/power_trace.py OUT_PREFIX [CONFIG]

writes OUT_PREFIX.jsonl (one row per batch: phase, seconds since start, TFLOP/s) and OUT_PREFIX-smi.csv, and prints
each phase's median TFLOP/s with the median clock and power over its batches.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from record import Case, dash_impls, fa3_impls, load_fa3, parse_config, time_cuda


def main():
    prefix = sys.argv[1]
    config = sys.argv[2] if len(sys.argv) > 2 else "b2_s8192_hq16_hkv16_d128_full"
    case = Case(*parse_config(config))
    impls = {i.key: i for i in dash_impls(case, ["auto"])}
    fa3 = load_fa3(os.environ["FA3_SO"]) if os.environ.get("FA3_SO") else None
    if fa3 is not None:
        impls.update({i.key: i for i in fa3_impls(case, fa3)})
    ours_fwd, ours_bwd = ("dash-attn", "forward", None), ("dash-attn", "nondeterministic", "auto")
    fa3_fwd = ("fa3", "forward", None)
    phases = [("idle", None, 3), ("dash fwd", ours_fwd, 8), ("fa3 fwd", fa3_fwd, 8), ("dash bwd", ours_bwd, 10),
              ("dash fwd after bwd", ours_fwd, 4), ("fa3 fwd after dash fwd", fa3_fwd, 4), ("dash bwd 2", ours_bwd, 10),
              ("fa3 fwd after bwd", fa3_fwd, 4), ("dash fwd after fa3 fwd", ours_fwd, 4)]
    fields = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
    if subprocess.run(["nvidia-smi", "--query-gpu=" + fields, "--format=csv"], capture_output=True).returncode != 0:
        fields = fields.replace("clocks_event_reasons", "clocks_throttle_reasons")  # older drivers' name
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=open(prefix + "-smi.csv", "w"), stderr=subprocess.STDOUT)
    t_start = time.time()
    rows = []
    with open(prefix + ".jsonl", "w") as out:
        for name, key, seconds in phases:
            if key is None:
                time.sleep(seconds)
                continue
            if key not in impls:
                print(f"{name}: not available")
                continue
            flops = case.fwd_flops * (1.0 if key[1] == "forward" else 2.5)
            t_phase = time.time()
            while time.time() - t_phase < seconds:
                ms = statistics.median(time_cuda(impls[key].run, warmup=1, reps=10))
                row = dict(config=config, phase=name, t=round(time.time() - t_start, 2),
                           tflops=round(flops / (ms * 1e-3) / 1e12, 1))
                rows.append(row)
                out.write(json.dumps(row) + "\n")
    time.sleep(0.3)
    smi.terminate()
    smi.wait()
    samples = []
    for line in open(prefix + "-smi.csv"):
        parts = [p.strip() for p in line.split(",")]
        try:
            stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + parts[0].split(".")[1])
            samples.append((stamp - t_start, float(parts[1]), float(parts[2]), float(parts[3]), parts[4]))
        except (ValueError, IndexError):
            continue
    print(f"{'phase':26s} {'batches':>7s} {'TFLOP/s':>8s} {'first':>6s} {'last':>6s} {'MHz':>6s} {'W':>6s} {'C':>4s}")
    for name in dict.fromkeys(r["phase"] for r in rows):
        mine = [r for r in rows if r["phase"] == name]
        t0, t1 = mine[0]["t"], mine[-1]["t"]
        during = [s for s in samples if t0 - 1 <= s[0] <= t1] or [(0, 0, 0, 0, "")]
        print(f"{name:26s} {len(mine):7d} {statistics.median(r['tflops'] for r in mine):8.1f} {mine[0]['tflops']:6.0f} "
              f"{mine[-1]['tflops']:6.0f} {statistics.median(s[1] for s in during):6.0f} "
              f"{statistics.median(s[2] for s in during):6.0f} {statistics.median(s[3] for s in during):4.0f} "
              f"{sorted(set(s[4] for s in during))}")


if __name__ == "__main__":
    main()
