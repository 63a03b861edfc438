# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): a list-scheduling model of the deterministic plan at head dim 64 16k causal
(units of 16 lock-step items on 132 CTAs), with and without a tail of single-KV-tile items claimed after every
unit's body, item-major across units, longest first. A body item waits until its unit's last item starts (the
straddle the segment trace showed); a tail item waits for its unit's body (or not: a separate accumulator). The
tail's own dQ chains are not modelled, so its figures are an upper bound.

    python3 tail_model.py
"""
import heapq


def run(P, U, Lb, tail, tail_waits_body=True, body_items=16):
    """(makespan, total work / P, the CTAs' waiting share) of U units on P CTAs."""
    # tickets: body unit-major, then tail item-major (tail sorted longest first)
    tickets = [('b', u, i) for u in range(U) for i in range(body_items)]
    tail_sorted = sorted(tail, reverse=True)
    tickets += [('t', u, L) for L in tail_sorted for u in range(U)]
    free = [(0.0, c) for c in range(P)]; heapq.heapify(free)
    claimed = {}; body_end = {}; blocked = {}
    stall = 0.0; k = 0; end = 0.0
    while k < len(tickets):
        if not free:
            raise RuntimeError("deadlock")
        t, c = heapq.heappop(free)
        kind, u, x = tickets[k]; k += 1
        if kind == 'b':
            claimed[u] = claimed.get(u, 0) + 1
            blocked.setdefault(u, []).append((t, c))
            if claimed[u] == body_items:
                start = t; body_end[u] = start + Lb
                for (t0, c0) in blocked[u]:
                    stall += start - t0
                    heapq.heappush(free, (start + Lb, c0))
                end = max(end, start + Lb)
        else:
            s = max(t, body_end.get(u, 1e18)) if tail_waits_body else t
            stall += s - t
            heapq.heappush(free, (s + x, c)); end = max(end, s + x)
    end = max(end, max(f for f, _ in free))
    total = U * (body_items * Lb + sum(tail))
    return end, total / P, stall / (P * end)
N = 128  # KV tiles of the causal unit; tile n has N - n rows
for P in (132, 128):
  for U in (32, 16, 64):
    base = run(P, U, 4 * 129, [])
    print(f"P {P} U {U}: body 4 pairs/item, no tail: makespan {base[0]:.0f} ideal {base[1]:.0f} -> {base[0]/base[1]:.3f} stall {base[2]:.3f}")
    for tail_pairs in (16, 8, 32):
        # tail = pairs 0..tail_pairs-1 split into single tiles (long 128..., short 1...)
        tail = [N - i for i in range(tail_pairs)] + [i + 1 for i in range(tail_pairs)]
        body_pairs = N // 2 - tail_pairs
        Lb = body_pairs // 16 * 129
        if body_pairs % 16: continue
        for w in (True, False):
            r = run(P, U, Lb, tail, w)
            print(f"   tail {tail_pairs} pairs as {2*tail_pairs} tiles, waits body {w}: makespan {r[0]:.0f} -> {r[0]/r[1]:.3f} stall {r[2]:.3f}")
