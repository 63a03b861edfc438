# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): from saved segment traces (trace_segments.py) of a plan cut into slots, how far
apart the items of one slot start, and the CTA time the early ones spend before their slot's last item starts.

A slot's items wait on each other (docs/DEADLOCK.md, "Slots"), so an item claimed before the rest of its slot can do
little until the last one starts. With slots 16 items wide on 132 CTAs (8 x 16 + 4), four CTAs per round claim the
first items of the next slot and wait about one slot's time.

    python3 slot_starts.py TRACE.npz UNITS GROUP [ITEMS_PER_SLOT SLOTS]   (the plan's units, ticket_group_units, ...)
"""
import sys

import numpy as np


def ticket_unit_item(t, units, items_per_unit, width, group):
    # dash_ticket_unit / dash_ticket_item of include/dash/plan_format.h (item-major claims, blocks of `width` items)
    first = t // (group * items_per_unit) * group
    size = np.minimum(group, units - first)
    in_group = t - first * items_per_unit
    return first + (in_group // width) % size, in_group // width // size * width + in_group % width


def main(path, units, group, width=16, slots=4):
    d = np.load(path)
    words = d["words"]
    w0, w1 = words[0::2], words[1::2]
    ticket = (w0 >> np.uint64(32)).astype(np.int64)
    segment = ((w0 >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int64)
    t = (w1 & np.uint64((1 << 48) - 1)).astype(np.int64)
    t = (t - t.min()) / 1000.0
    first_segment = segment == 0  # an item's first record: when its CTA starts it
    unit, item = ticket_unit_item(ticket[first_segment], units, width * slots, width, group)
    starts = {}
    for u, i, s in zip(unit, item, t[first_segment]):
        starts.setdefault((int(u), int(i) // width), []).append(s)
    spread = np.array([max(v) - min(v) for v in starts.values()])
    early = sum((max(v) - np.array(v)).sum() for v in starts.values())
    span = t.max()
    ctas = 132
    print(f"{path.split('/')[-1]}: span {span:.0f} us; {len(starts)} slots; start spread median {np.median(spread):.1f}, "
          f"p90 {np.percentile(spread, 90):.1f}, max {spread.max():.1f} us; early items' wait for their slot's last "
          f"start {early:.0f} CTA-us = {100 * early / (ctas * span):.2f}% of the CTAs' time")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], *[int(x) for x in sys.argv[2:]])
