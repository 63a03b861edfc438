import heapq
def run(P, U, S, Ls, G, W=16):
    # tickets: groups of G units; within a group, slot-major; each slot = W items of length Ls, lock-step
    # (start together when the slot's last item is claimed, and not before the unit's previous slot has ended)
    tickets = []
    for g0 in range(0, U, G):
        units = range(g0, min(U, g0 + G))
        for s in range(S):
            for u in units:
                tickets += [(u, s)] * W
    free = [(0.0, c) for c in range(P)]; heapq.heapify(free)
    claimed = {}; slot_end = {}; blocked = {}; end = 0.0; idle = 0.0
    for (u, s) in tickets:
        t, c = heapq.heappop(free)
        blocked.setdefault((u, s), []).append((t, c))
        if len(blocked[(u, s)]) == W:
            start = max(t, slot_end.get((u, s - 1), 0.0))
            slot_end[(u, s)] = start + Ls
            for t0, c0 in blocked[(u, s)]:
                idle += start - t0
                heapq.heappush(free, (start + Ls, c0))
            end = max(end, start + Ls)
    return end / (U * S * W * Ls / P), idle / (P * end)
for U in (32, 28, 20, 24, 64, 16, 12, 36, 40, 256):
    base, _ = run(132, U, 1, 4 * 129, 1)
    row = [f"U {U:3d}: unit-major 4-pair items {base:.3f}"]
    for G in (4, 8, 9, 12, 16):
        r, idle = run(132, U, 4, 129, G)
        row.append(f"G{G} {r:.3f}")
    print(", ".join(row))
print("best G per U (S = 4, then S = 2):")
for U in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 36, 40, 48, 56, 64, 96, 100, 128):
    out = []
    for S in (4, 2):
        best = min((run(132, U, S, 4 * 129 / S, G)[0], G) for G in range(1, U + 1))
        base = run(132, U, 1, 4 * 129, 1)[0]
        out.append(f"S{S}: {base:.3f} -> {best[0]:.3f} (G {best[1]})")
    print(f"U {U:3d}: " + "; ".join(out))
