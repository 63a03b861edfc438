#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The headline metrics of an Nsight Compute details page (`ncu -i REP --page details --csv`), one line per profiled
launch and metric: duration, elapsed and SM-active cycles (the mean, and the least and most busy SM where asked for),
IPC, L2 hit rate and DRAM throughput. scripts/gpu_record.sh prints it beside scripts/ncu_stalls.py's stall samples.

  scripts/ncu_headline.py details.csv
"""
import csv
import sys

HEADLINE = ("Duration", "Elapsed Cycles", "SM Active Cycles", "Executed Ipc Active", "L2 Hit Rate",
            "DRAM Throughput",
            # the least and most busy SM (gpu_record.sh asks for them beside --set full): a spread between them is
            # load imbalance (items of unequal length, or SMs of unequal speed), where "SM Active Cycles" < elapsed
            # alone cannot tell it from SMs without work
            "sm__cycles_active.min", "sm__cycles_active.max")


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    start = next((i for i, r in enumerate(rows) if "Metric Name" in r), None)
    if start is None:
        sys.exit(f"{sys.argv[1]}: no details page (no 'Metric Name' column)")
    col = {h: i for i, h in enumerate(rows[start])}
    seen = set()
    for r in rows[start + 1:]:
        if len(r) <= col["Metric Value"] or r[col["Metric Name"]] not in HEADLINE:
            continue
        key = (r[col["ID"]], r[col["Metric Name"]])
        if key in seen:  # a metric shown in two sections
            continue
        seen.add(key)
        kernel = r[col["Kernel Name"]][:60]
        print(f"  [{r[col['ID']]}] {kernel} | {r[col['Metric Name']]} = {r[col['Metric Value']]} {r[col['Metric Unit']]}")


if __name__ == "__main__":
    main()
