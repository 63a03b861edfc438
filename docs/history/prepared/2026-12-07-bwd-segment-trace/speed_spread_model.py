# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): list scheduling of the backward's tickets on 132 CTAs whose speeds differ (normal,
mean 1, spread sigma, 20 seeds), at head dim 64, 1 x 16384 causal, 32 heads (128 Q and KV tiles). A free CTA claims
the next ticket; a ticket of v visits takes v / speed. Waits are left out (the deterministic plan run
non-deterministically costs the same: 2026-12-06). Prints the lock-step plans' makespans over the balanced plan's.

  lock-step, I items per head: every item 64 / I pairs of 129 visits (symmetric shift: I = 16 on main, 32 = w32)
  balanced: one KV tile per ticket (128 - j visits), across groups of 2 heads, longest first

    python3 speed_spread_model.py
"""
import heapq
import random

N, HEADS, CTAS = 128, 32, 132


def makespan(tickets, speed):
    free = [(0.0, c) for c in range(CTAS)]
    heapq.heapify(free)
    end = 0.0
    for visits in tickets:
        t, c = heapq.heappop(free)
        t += visits / speed[c]
        end = max(end, t)
        heapq.heappush(free, (t, c))
    return end


def lockstep(items_per_head):
    return [(N // 2 // items_per_head) * (N + 1)] * (items_per_head * HEADS)


def main():
    balanced = [N - j for g in range(0, HEADS, 2) for j in range(N) for _ in range(2)]
    plans = {f"{i} items per head": lockstep(i) for i in (16, 32, 64)}
    for sigma in (0.0, 0.02, 0.03, 0.04, 0.05, 0.06):
        ratios = {name: [] for name in plans}
        for seed in range(20):
            rnd = random.Random(seed)
            speed = [max(0.5, rnd.gauss(1.0, sigma)) for _ in range(CTAS)]
            base = makespan(balanced, speed)
            for name, tickets in plans.items():
                ratios[name].append(makespan(tickets, speed) / base)
        print(f"sigma {sigma:.2f}: " + "; ".join(f"{name} {sum(r) / len(r):.3f}" for name, r in ratios.items()))


if __name__ == "__main__":
    main()
