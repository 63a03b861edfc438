#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Predicted vs measured planner ranking: for every configuration of a backward benchmark JSONL
(dash-bench-bwd --out), simulate the same shape with `dash-attn simulate` (the cost model as built, plus an
optional --latency override) and report, per configuration, the simulator's first choice, auto's choice, and
how far each is from the measured fastest deterministic planner. docs/calibration.md uses its output.

  scripts/calibration_ranking.py RESULTS.jsonl [--cli build/dash-attn] [--latency US] [--tolerance 0.01]
"""
import argparse
import json
import re
import subprocess
from collections import OrderedDict

PLANNERS = ["ascending", "descending", "shift", "symmetric-shift"]


def simulate(cli, row, latency):
    cmd = [cli, "simulate", "--batch", str(row["batch"]), "--heads", str(row["heads_q"]), "--heads-kv",
           str(row["heads_kv"]), "--seqlen", str(row["seqlen"]), "--hdim", str(row["head_dim"]), "--mask",
           row["mask"]]
    if latency is not None:
        cmd += ["--latency", str(latency)]
    text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    makespans = {}
    for planner in PLANNERS:
        m = re.search(r"^%s\s+([0-9.]+)" % re.escape(planner), text, re.M)
        makespans[planner] = float(m.group(1))
    auto = re.search(r"auto picks ([a-z-]+)", text).group(1)
    return makespans, auto


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--cli", default="build/dash-attn")
    ap.add_argument("--latency", type=float, default=None, help="hand-off latency override (us)")
    ap.add_argument("--tolerance", type=float, default=0.01, help="'within' threshold (default 1%%)")
    args = ap.parse_args()

    configs = OrderedDict()
    for line in open(args.results):
        r = json.loads(line)
        if r.get("op") != "backward" or r.get("mode") != "deterministic" or r["schedule"] not in PLANNERS:
            continue
        configs.setdefault(r["config"], {})[r["schedule"]] = r

    sim_ok = auto_ok = 0
    worst_sim = worst_auto = 1.0
    print("| config | measured fastest (TFLOP/s) | simulator first / fastest | auto / fastest | simulated / measured time of the fastest |")
    print("|---|---|---|---|---|")
    for config, rows in configs.items():
        any_row = next(iter(rows.values()))
        makespans, auto = simulate(args.cli, any_row, args.latency)
        fastest = max(rows.values(), key=lambda r: r["tflops"])
        sim_first = min(makespans, key=makespans.get)
        sim_ratio = rows[sim_first]["tflops"] / fastest["tflops"]
        auto_ratio = rows[auto]["tflops"] / fastest["tflops"]
        sim_ok += sim_ratio >= 1 - args.tolerance
        auto_ok += auto_ratio >= 1 - args.tolerance
        worst_sim, worst_auto = min(worst_sim, sim_ratio), min(worst_auto, auto_ratio)
        time_ratio = makespans[fastest["schedule"]] / (fastest["median_ms"] * 1000)
        print(f"| {config} | {fastest['schedule']} ({fastest['tflops']:.1f}) | {sim_first} {sim_ratio:.3f} | "
              f"{auto} {auto_ratio:.3f} | {time_ratio:.2f} |")
    n = len(configs)
    print(f"\nsimulator first within {args.tolerance:.0%} of the measured fastest: {sim_ok}/{n} (worst {worst_sim:.3f}); "
          f"auto: {auto_ok}/{n} (worst {worst_auto:.3f})")


if __name__ == "__main__":
    main()
