#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summarise the warp-stall samples of one kernel profile from scripts/gpu_profile_bwd.sh (the source.csv
inside ncu-<tag>.tar.gz): stall reasons and opcodes of the MMA warps' code, and its hottest instructions.
The MMA warps' code is taken as the SASS range around the wgmma instructions (HGMMA), which excludes the
producer's and the store warps' loops. docs/history/kernel-notes-bwd-wgmma.md quotes its output.

With --visit, the MMA warps' code is instead the rows executed as often as a wgmma instruction (once per warp and
visit: the visit's code, without the segment epilogue, the masked branch or the other warps' loops), and the warp
instructions per CTA visit are printed (--mma-warps per CTA); this compares kernels whose loops differ in length.

  scripts/ncu_stalls.py source.csv [--top 12] [--visit [--mma-warps 8]]
"""
import argparse
import collections
import csv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source_csv")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--visit", action="store_true", help="the rows executed once per warp and visit (above)")
    ap.add_argument("--mma-warps", type=int, default=8, help="MMA warps per CTA (--visit)")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.source_csv)))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    header = rows[start]
    col = {h: i for i, h in enumerate(header)}
    data = [r for r in rows[start + 1:] if len(r) >= len(header)]
    samples = lambda r: int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    total = sum(samples(r) for r in data)
    wgmma = [i for i, r in enumerate(data) if "HGMMA" in r[1]]
    region = data[max(0, wgmma[0] - 60):wgmma[-1] + 120]  # the MMA warpgroups' visit loop and hand-off
    if args.visit:
        executed = lambda r: int(r[col["Instructions Executed"]] or 0)
        per_visit = {executed(data[i]) for i in wgmma} - {0}
        region = [r for r in data if executed(r) in per_visit]
        cta_visits = max(per_visit) / args.mma_warps
        print(f"warp instructions per CTA visit: {sum(executed(r) for r in region) / cta_visits:.0f} "
              f"({cta_visits:.0f} CTA visits)")
    in_region = sum(samples(r) for r in region)
    print(f"samples: {total} in all, {in_region} ({100 * in_region / total:.1f}%) in the MMA warps' code")

    by_reason = collections.Counter()
    by_opcode = collections.Counter()
    for r in region:
        for k in reasons:
            by_reason[k] += int(r[col[k]] or 0)
        words = [w for w in r[1].split() if not w.startswith("@")]
        by_opcode[words[0].split(".")[0] if words else "?"] += samples(r)
    print("stall reasons, % of the MMA warps' samples:")
    for k, v in by_reason.most_common(7):
        print(f"  {k:24s} {100 * v / in_region:5.1f}")
    print("opcodes, % of the MMA warps' samples: " +
          ", ".join(f"{k} {100 * v / in_region:.1f}" for k, v in by_opcode.most_common(12)))
    print("hottest instructions:")
    for r in sorted(region, key=lambda r: -samples(r))[:args.top]:
        reason = max(reasons, key=lambda k: int(r[col[k]] or 0))
        print(f"  {r[0][-5:]} {100 * samples(r) / in_region:5.1f}% {reason:20s} {r[1][:72]}")


if __name__ == "__main__":
    main()
