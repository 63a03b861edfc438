# SPDX-License-Identifier: Apache-2.0
"""What planning a pack costs beside the attention it plans (issue 15: plan cost at most 1% of a step's attention
time at 16k tokens), on a CUDA machine.

For each pack of bench/varlen_bench.py (the same lengths, seed 0) and for `--steps` further packs of fresh lengths
(seeds 1, 2, ...: what the next training steps hand over), the host time of dash_pack_create +
dash_plan_create_varlen (the upload included: it is enqueued on a private stream) in this process, in order, once the
CUDA context exists: the first pack of the process also pays the library's first device allocations and the template
builds of its shapes, later packs mostly find their templates cached.
Beside it, the GPU time of one layer's attention on that pack (varlen forward + deterministic backward, the
protocol's timer): a step runs that once per layer, and plans once.

    python3 bench/varlen_plan_cost.py --out plan-cost.jsonl [--steps 5] [--commit SHA]
"""
import argparse
import json
import statistics
import time
import uuid

import numpy as np
import torch

from dash_attn import _abi
from dash_attn._torch_ops import _num_ctas
from record import git_commit, time_cuda  # bench/record.py, beside this file
from varlen_bench import HEAD_DIM, HEADS_KV, HEADS_Q, pack_inputs, packs


def plan_ms(lengths):
    """Host ms of one pack and its deterministic auto plan, as the torch op builds them for a new pack."""
    cu = [0] + list(np.cumsum(lengths))
    problem = _abi.make_problem(len(lengths), HEADS_Q, HEADS_KV, max(lengths), max(lengths), HEAD_DIM, True)
    num_ctas = _num_ctas(torch.device("cuda", torch.cuda.current_device()), 0)  # the torch op's CTA count
    start = time.perf_counter()
    pack = _abi.Pack(problem, cu, cu)
    _abi.varlen_device_plan(pack, "auto", num_ctas, _abi.DASH_GQA_AUTO)
    return (time.perf_counter() - start) * 1e3


def layer_ms(lengths):
    """GPU ms of one layer's attention on the pack: varlen forward + deterministic backward, median of 10."""
    q, k, v, do, cu = pack_inputs(lengths)  # as bench/varlen_bench.py times the pack
    longest = max(lengths)
    scale, ops = HEAD_DIM ** -0.5, torch.ops.dash_attn

    def layer():
        o, lse = ops.varlen_fwd(q, k, v, cu, cu, longest, longest, True, scale, True, "auto")
        ops.varlen_bwd(do, q, k, v, o, lse, cu, cu, longest, longest, True, scale, True, "auto")

    return statistics.median(time_cuda(layer))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5, help="further packs of fresh lengths after the seed-0 ones")
    ap.add_argument("--commit", help="the library's commit (default: git's HEAD here)")
    args = ap.parse_args()
    env = dict(commit=args.commit or git_commit(), call_id=uuid.uuid4().hex[:12], gpu=torch.cuda.get_device_name(0),
               torch=torch.__version__, dtype="bfloat16", timer="host perf_counter (plan); cuda events (layer)")
    torch.zeros(1, device="cuda")  # the CUDA context exists before the first timing, as in a training process
    order = [(name, 0, lengths) for name, lengths in packs(0)]
    order += [(name, seed, lengths) for seed in range(1, args.steps + 1) for name, lengths in packs(seed)]
    rows = []
    for position, (name, seed, lengths) in enumerate(order):
        rows.append(dict(env, pack=name, seed=seed, position_in_process=position, sequences=len(lengths),
                         distinct_lengths=len(set(lengths)), tokens=sum(lengths), plan_ms=round(plan_ms(lengths), 4)))
    for row, (_, _, lengths) in zip(rows, order):
        row["layer_ms"] = round(layer_ms(lengths), 4)
        row["plan_over_layer"] = round(row["plan_ms"] / row["layer_ms"], 5)
    with open(args.out, "a") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
            print(f"{row['pack']:11s} seed {row['seed']}  #{row['position_in_process']:<2d} {row['sequences']:4d} seqs "
                  f"({row['distinct_lengths']:4d} lengths)  plan {row['plan_ms']:7.3f} ms  layer "
                  f"{row['layer_ms']:7.3f} ms  plan / layer {row['plan_over_layer']:.4f}", flush=True)


if __name__ == "__main__":
    main()
