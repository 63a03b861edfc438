# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): an LRU model of the Q / dO / dQ-accumulator tile accesses of two backward plans
at head dim 64, 1 x 16384 causal, 32 heads, 132 CTAs: the symmetric shift (16 lock-step items per head, tickets unit
by unit) and the balanced non-deterministic plan (one KV tile per item, visits from the diagonal up, tickets item by
item across groups of 2 heads, longest first). Every visit costs one step; a free CTA claims the next ticket; each
visit touches its Q tile's 64 KB (Q and dO in bf16, the dQ accumulator in fp32). K / V loads are left out (once per
segment). Prints each plan's makespan in steps and its LRU hit rate at several cache sizes.

    python3 l2_reuse_model.py build/dash-attn   (the CLI builds the symmetric-shift plan it reads)
"""
import heapq
import re
import subprocess
import sys
from collections import OrderedDict

N, HEADS, CTAS = 128, 32, 132
TILE_BYTES = 128 * 64 * 2 * 2 + 128 * 64 * 4


def symmetric_shift_items(cli):
    out = subprocess.run([cli, "plan", "--seqlen", "16384", "--heads", str(HEADS), "--hdim", "64", "--causal",
                          "--schedule", "symmetric-shift", "--items", "64"], capture_output=True, text=True,
                         check=True).stdout
    return [[int(q) for q in re.findall(r"q(\d+)#", line)] for line in out.splitlines()
            if re.match(r"^  item \d+:", line)]


def trace(tickets):
    """tickets: [(head, [Q tiles visited])] in claim order -> (accesses sorted by step, makespan)."""
    free = [(0, c) for c in range(CTAS)]
    heapq.heapify(free)
    accesses = []
    for head, visits in tickets:
        t, cta = heapq.heappop(free)
        accesses += [(t + i, cta, head, q) for i, q in enumerate(visits)]
        heapq.heappush(free, (t + len(visits), cta))
    accesses.sort()
    return accesses, max(t for t, _ in free)


def lru_hit_rate(accesses, cache_bytes):
    capacity, lru, hits = cache_bytes // TILE_BYTES, OrderedDict(), 0
    for _, _, head, q in accesses:
        if (head, q) in lru:
            hits += 1
            lru.move_to_end((head, q))
        else:
            lru[(head, q)] = True
            if len(lru) > capacity:
                lru.popitem(last=False)
    return hits / len(accesses)


def main():
    cli = sys.argv[1]
    items = symmetric_shift_items(cli)
    plans = {f"symmetric shift, {len(items)} items per head": [(h, it) for h in range(HEADS) for it in items],
             "balanced": [(g + hh, list(range(j, N))) for g in range(0, HEADS, 2) for j in range(N) for hh in range(2)]}
    for name, tickets in plans.items():
        accesses, makespan = trace(tickets)
        rates = ", ".join(f"{mb} MB {lru_hit_rate(accesses, mb << 20):.3f}" for mb in (16, 25, 32, 40, 50))
        print(f"{name}: makespan {makespan} steps (ideal {len(accesses) / CTAS:.0f}); LRU hit rate {rates}")


if __name__ == "__main__":
    main()
