# SPDX-License-Identifier: Apache-2.0
"""Study (not part of the library): an untimed model of the forward's producer and consumer warpgroups
(hopper/fwd/fwd_kernel.cuh) that checks the K-ahead load order for deadlocks. Processes are generators that yield
a condition; a random scheduler runs any process whose condition holds, until all finish (pass) or none can run
(a deadlock: the model prints the state). Barriers as in the kernel: a stage's full barrier completes when the
producer's load of it lands, its empty barrier when every consumer warpgroup released it; K and V have kStages
stages, Q kQStages; the turn ring passes the GEMM issue round the warpgroups, warpgroup 0's first turn per tile
granted up front by the last one.

    python3 pipeline_model.py [--order pairwise|k-ahead|all-k-first] [--runs N]   (all-k-first: a control that
    must report a deadlock)
"""
import argparse
import random


class Ring:
    """Stages of one buffer: fills and releases counted per use."""

    def __init__(self, stages, consumers):
        self.stages, self.consumers = stages, consumers
        self.filled = {}     # load number -> landed
        self.released = {}   # load number -> consumer releases

    def free_for(self, j):  # may load number j be issued (its stage's previous use released)?
        prev = j - self.stages
        return prev < 0 or self.released.get(prev, 0) == self.consumers

    def landed(self, j):
        return self.filled.get(j, False)


def load(ring, j):
    """One load by the producer: wait until load number j may reuse its stage, then issue it (it lands at once)."""
    yield lambda: ring.free_for(j)
    ring.filled[j] = True


def producer(tiles, K, V, Q, order, log):
    k = v = 0
    for t, count in enumerate(tiles):
        yield from load(Q, t)  # the tile's announcement (and its Q when it has keys)
        if count == 0:
            continue
        if order == "pairwise":
            sequence = [K, V] * count
        elif order == "all-k-first":  # a control that must deadlock (K_{n+2}'s release needs a V not yet loaded)
            sequence = [K] * count + [V] * count
        else:  # k-ahead: K_last, then K_{n-1} before V_n
            sequence = [K] + [K, V] * (count - 1) + [V]
        for ring in sequence:
            if ring is K:
                yield from load(K, k)
                k += 1
            else:
                yield from load(V, v)
                v += 1
    log.append("producer done")


def consumer(wg, wgs, tiles, K, V, Q, turns):
    k = v = 0
    nxt = (wg + 1) % wgs

    def wait_turn():
        yield lambda: turns[wg] > 0
        turns[wg] -= 1

    def pass_turn():
        turns[nxt] += 1

    for t, count in enumerate(tiles):
        yield lambda t=t: Q.landed(t)
        if count == 0:
            Q.released[t] = Q.released.get(t, 0) + 1
            continue
        if wg == wgs - 1:
            pass_turn()  # warpgroup 0's first turn
        # first KV tile: S only
        yield from wait_turn()
        yield lambda k=k: K.landed(k)
        pass_turn()
        K.released[k] = K.released.get(k, 0) + 1
        k += 1
        if count == 1:
            Q.released[t] = Q.released.get(t, 0) + 1
        for i in range(1, count):
            yield from wait_turn()
            yield lambda k=k: K.landed(k)
            yield lambda v=v: V.landed(v)
            pass_turn()
            K.released[k] = K.released.get(k, 0) + 1  # after the softmax: the S GEMM is done
            k += 1
            if i == count - 1:
                Q.released[t] = Q.released.get(t, 0) + 1
            V.released[v] = V.released.get(v, 0) + 1  # after O += P V
            v += 1
        # last KV tile: O += P V only
        yield from wait_turn()
        yield lambda v=v: V.landed(v)
        if wg != wgs - 1:
            pass_turn()
        V.released[v] = V.released.get(v, 0) + 1
        v += 1


def run(tiles, wgs, stages, q_stages, order, rng):
    K, V, Q = Ring(stages, wgs), Ring(stages, wgs), Ring(q_stages, wgs)
    turns = [0] * wgs
    log = []
    procs = [producer(tiles, K, V, Q, order, log)] + [consumer(w, wgs, tiles, K, V, Q, turns) for w in range(wgs)]
    pending = {i: next(p) for i, p in enumerate(procs)}
    while pending:
        ready = [i for i, cond in pending.items() if cond()]
        if not ready:
            return False
        i = rng.choice(ready)
        try:
            pending[i] = procs[i].send(None)
        except StopIteration:
            del pending[i]
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--order", default="k-ahead", choices=("pairwise", "k-ahead", "all-k-first"))
    ap.add_argument("--runs", type=int, default=20000)
    args = ap.parse_args()
    rng = random.Random(1)
    for n in range(args.runs):
        tiles = [rng.choice((0, 1, 1, 2, 3, 4, 7)) for _ in range(rng.randint(1, 6))]
        wgs, stages, q_stages = rng.choice((2, 3)), rng.choice((2, 3)), rng.choice((1, 2))
        if not run(tiles, wgs, stages, q_stages, args.order, rng):
            print(f"deadlock: tiles {tiles}, warpgroups {wgs}, stages {stages}, Q stages {q_stages}")
            return 1
    print(f"{args.order}: {args.runs} random schedules (1-6 tiles of 0-7 KV tiles, 2-3 warpgroups, 2-3 K/V stages, "
          f"1-2 Q stages) all finished")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
