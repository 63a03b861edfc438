#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares benchmark rows of two builds run interleaved in one device call (scripts/gpu_ab.sh): for every
(op, configuration, mode, schedule) the median over repeats of each build's median time, and new / base. A row is
"slower" when new / base > 1 + threshold.

    scripts/ab_compare.py --base base-*.jsonl --new new-*.jsonl [--threshold 0.03] [--out summary.json]
"""
import argparse
import collections
import json
import statistics
import sys


def key_of(row):
    if row.get("op") == "forward":
        shape = f"b{row['batch']}_s{row['seqlen_q']}_hq{row['heads_q']}_hkv{row['heads_kv']}_d{row['head_dim']}_{row['mask']}"
        return ("forward", shape, row.get("dtype", "bf16"), "-")
    return ("backward", row["config"], row["mode"], row["schedule"])


def medians(paths):
    times = collections.defaultdict(list)
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    times[key_of(row)].append(row["median_ms"])
    return {k: statistics.median(v) for k, v in times.items()}, {k: len(v) for k, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", nargs="+", required=True)
    parser.add_argument("--new", nargs="+", required=True)
    parser.add_argument("--threshold", type=float, default=0.03)
    parser.add_argument("--out")
    args = parser.parse_args()
    base, base_n = medians(args.base)
    new, new_n = medians(args.new)
    rows, slower = [], []
    print(f"{'op':8} {'configuration':34} {'mode / dtype':17} {'schedule':16} {'base ms':>9} {'new ms':>9} {'new/base':>8}")
    for key in sorted(set(base) & set(new)):
        ratio = new[key] / base[key]
        rows.append({"op": key[0], "config": key[1], "mode": key[2], "schedule": key[3], "base_ms": base[key],
                     "new_ms": new[key], "ratio": ratio, "repeats": min(base_n[key], new_n[key])})
        flag = "  SLOWER" if ratio > 1 + args.threshold else ""
        if flag:
            slower.append(rows[-1])
        print(f"{key[0]:8} {key[1]:34} {key[2]:17} {key[3]:16} {base[key]:9.4f} {new[key]:9.4f} {ratio:8.3f}{flag}")
    ratios = [r["ratio"] for r in rows]
    missing = sorted(set(base) ^ set(new))
    print(f"\n{len(rows)} rows; new/base median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
          f"max {max(ratios):.3f}; {len(slower)} slower than {1 + args.threshold:.2f}x; {len(missing)} in one build only")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "slower": slower, "missing": [list(m) for m in missing],
                       "threshold": args.threshold}, f, indent=1)
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
