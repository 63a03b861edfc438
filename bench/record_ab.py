# SPDX-License-Identifier: Apache-2.0
"""Compares builds of dash-attn timed by bench/record.py in one device call (rows tagged with --tag, runs
interleaved): per (config, impl, mode, schedule), the median TFLOP/s of each tag over its runs, and each tag's ratio
to the first tag. FA3 rows (timed in every run) show how much the machine drifted between runs. Where the rows carry
host time (record.py's host_us_per_call: the backward rows of auto and FA3), a second table gives each tag's median
µs per call.

    python3 bench/record_ab.py out/ab-*.jsonl [--base TAG]
"""
import argparse
import collections
import json
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--base", help="the tag the others are compared with (default: the first seen)")
    args = ap.parse_args()
    runs = collections.defaultdict(list)  # (key, tag) -> [tflops per run]
    host = collections.defaultdict(list)  # (key, tag) -> [host µs per call, per run]
    tags = []
    for f in args.files:
        for line in open(f):
            r = json.loads(line)
            if "tflops" not in r:
                continue
            tag = r.get("tag", "?")
            if tag not in tags:
                tags.append(tag)
            impl_tag = tag if r["impl"] == "dash-attn" else "-"
            key = (r["config"], r["impl"], r["mode"], r.get("schedule") or "")
            runs[(key, impl_tag)].append(r["tflops"])
            if "host_us_per_call" in r:
                host[(key, impl_tag)].append(r["host_us_per_call"])
    base = args.base or tags[0]
    table(runs, tags, base, "TFLOP/s, ratios to " + base, lambda ours, b: ours / b)
    if host:
        print()
        table(host, tags, base, "host µs per call, differences to " + base, lambda ours, b: ours - b)


def table(values, tags, base, title, compare):
    """Per (config, impl, mode, schedule): each tag's median over its runs for our rows, the pooled runs of the
    others (timed in every run); `compare(ours, base)` for each tag but the base."""
    keys = sorted({k for k, _ in values})
    print(f"{'config':34s} {'impl':9s} {'mode':9s} {'sched':8s} " + " ".join(f"{t[:14]:>14s}" for t in tags) +
          "   " + title)
    for key in keys:
        if key[1] != "dash-attn":
            vals = values.get((key, "-"), [])
            print(f"{key[0]:34s} {key[1]:9s} {key[2][:9]:9s} {key[3][:8]:8s} {statistics.median(vals):14.1f}"
                  f"   (runs: {', '.join(f'{v:.0f}' for v in vals)})")
            continue
        meds = {t: statistics.median(values[(key, t)]) for t in tags if values.get((key, t))}
        cells = " ".join(f"{meds[t]:14.1f}" if t in meds else f"{'-':>14s}" for t in tags)
        compared = " ".join(f"{compare(meds[t], meds[base]):.3f}" for t in tags
                            if t in meds and t != base and base in meds)
        print(f"{key[0]:34s} {key[1]:9s} {key[2][:9]:9s} {key[3][:8]:8s} {cells}   {compared}")


if __name__ == "__main__":
    main()
