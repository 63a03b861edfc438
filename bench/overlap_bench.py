# SPDX-License-Identifier: Apache-2.0
"""Does attention's backward overlap communication kernels on another stream, or wait for them? One GPU (issue 17).

The backward of causal attention (bf16, batch 2, 8192 tokens, 16 heads of 128; autograd.grad on a retained graph,
so only the backward's kernels run) runs on the main stream while a communication stand-in runs on a second stream,
both launched at the same moment. Stand-ins, each sized to take about as long as that backward alone:
- copy: dst.copy_(src) of a large bf16 buffer, the data movement of an all-gather (same dtype and contiguous, so
  PyTorch issues a device-to-device cudaMemcpyAsync);
- elementwise: torch.add(src, 1, out=dst), the same traffic as an ordinary kernel of many small CTAs on every SM;
- nccl-allreduce-1rank: dist.all_reduce(op=AVG) of an fp32 buffer in a one-rank nccl process group (FileStore).
  On one rank NCCL runs AVG as its own kernel (oneRankReduce, up to 32 CTAs of 512 threads); a SUM in place would
  launch nothing. Skipped, with the reason in the row, when the group cannot be set up.
Implementations: dash-attn (deterministic, schedule auto; deterministic=False) and PyTorch SDPA's flash backend
(deterministic through torch.use_deterministic_algorithms(True) around the backward; its default).

Timer: CUDA events. A round queues the backward alone, the stand-in alone and both, each between its own pair of
events; a sleep kernel first keeps the GPU ahead of the host. Median over --reps rounds after 3 warm-up rounds. In
"both", the side stream waits on the start event, the stand-in is launched, then the backward, and the main stream
waits on the stand-in's end before recording the end event; "stand-in alone" takes the same path without the backward.

Reading a row: overlap = (t_attn + t_comm - t_both) / min(t_attn, t_comm), 1 = the shorter one hid entirely under
the longer, 0 = one after the other. slowdown = t_both / max(t_attn, t_comm), 1 = the pair costs no more than the
longer one, about 2 = serialised (the two are sized equal). bitwise_same_under_overlap (deterministic modes): the
dQ, dK and dV of --checks backwards run beside the stand-in equal (torch.equal) those of one run alone.

    PYTHONPATH=python python3 bench/overlap_bench.py --out bench/results/overlap.jsonl [--commit SHA] [--quick]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import uuid

import torch
import torch.nn.functional as F

B, S, H, D = 2, 8192, 16, 128  # causal, bf16: record.Case(B, S, H, H, D, True)
STANDINS = ("copy", "elementwise", "nccl-allreduce-1rank")
SLEEP_CYCLES = 50_000_000  # ~25 ms at the H200's clocks, longer than the host takes to queue a round
PROBE_BYTES, MAX_BYTES = 1 << 30, 16 << 30  # calibration probe; cap on one stand-in buffer


def backward(impl, det, sm_margin):
    """The timed call: one backward on a retained graph, returning (dq, dk, dv)."""
    from record import Case  # bench/record.py, beside this file: the benchmark of record's inputs of this config
    case = Case(B, S, H, H, D, True)
    q, k, v, do = case.q, case.k, case.v, case.do
    del case  # the closures below keep only the tensors they use
    if impl == "dash-attn":
        import dash_attn
        leaves = [t.requires_grad_(True) for t in (q, k, v)]
        out = dash_attn.attention(*leaves, causal=True, deterministic=det, schedule="auto", sm_margin=sm_margin)
        return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    leaves = [t.transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v)]  # (b, h, s, d)
    do = do.transpose(1, 2).contiguous()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=True)

    def run():
        torch.use_deterministic_algorithms(det)  # read by PyTorch's flash backward at the call
        try:
            return torch.autograd.grad(out, leaves, do, retain_graph=True)
        finally:
            torch.use_deterministic_algorithms(False)
    return run


def standin(kind, nbytes):
    if kind == "nccl-allreduce-1rank":
        import torch.distributed as dist
        buf = torch.ones(nbytes // 4, device="cuda")
        return lambda: dist.all_reduce(buf, op=dist.ReduceOp.AVG)  # x * 1/1 in place: the buffer stays 1
    src = torch.ones(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)) if kind == "copy" else (lambda: torch.add(src, 1, out=dst))


def init_nccl():
    """A one-rank nccl process group in this process; returns None, or why it could not be set up."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return "torch.distributed with nccl is not available in this build of PyTorch"
    fd, path = tempfile.mkstemp(prefix="overlap_bench_store_")
    os.close(fd)
    try:
        dist.init_process_group("nccl", store=dist.FileStore(path, 1), rank=0, world_size=1,
                                device_id=torch.device("cuda", torch.cuda.current_device()))
        dist.all_reduce(torch.ones(1 << 20, device="cuda"), op=dist.ReduceOp.AVG)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001 - the rows say why the stand-in was skipped
        return f"{type(e).__name__}: {e}"[:300]


SIDE = None  # the second stream, made once the GPU is known to exist


def launch(attn, comm):
    """Queues start event, [side stream: comm], [main: attn], main waits side, end event; returns (attn's result,
    (start, end))."""
    main = torch.cuda.current_stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(main)
    if comm is not None:
        SIDE.wait_event(start)
        with torch.cuda.stream(SIDE):
            comm()
    result = attn() if attn is not None else None
    if comm is not None:
        main.wait_stream(SIDE)
    end.record(main)
    return result, (start, end)


def measure(cases, reps, warmup=3):
    """Median ms of each case {name: (attn, comm)}, the cases interleaved round by round."""
    for _ in range(warmup):
        for attn, comm in cases.values():
            launch(attn, comm)
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    events = {name: [] for name in cases}
    for _ in range(reps):
        for name, (attn, comm) in cases.items():
            events[name].append(launch(attn, comm)[1])
    torch.cuda.synchronize()
    return {name: statistics.median(s.elapsed_time(e) for s, e in evs) for name, evs in events.items()}


def calibrate(kind, t_target, reps):
    """A stand-in of `kind` sized to take about t_target ms alone (linear in the bytes from a 1 GiB probe)."""
    t_probe = measure({"comm": (None, standin(kind, PROBE_BYTES))}, reps)["comm"]
    torch.cuda.empty_cache()
    nbytes = min(MAX_BYTES, max(1 << 20, int(PROBE_BYTES * t_target / t_probe) >> 20 << 20))
    return nbytes, standin(kind, nbytes)


def same_under_overlap(attn, comm, checks):
    """dQ/dK/dV of `checks` backwards launched beside the stand-in, bitwise against one run alone."""
    reference = [t.clone() for t in attn()]
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    runs = [launch(attn, comm)[0] for _ in range(checks)]
    torch.cuda.synchronize()
    return all(torch.equal(a, b) for run in runs for a, b in zip(reference, run))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON lines file (appended)")
    ap.add_argument("--commit")
    ap.add_argument("--quick", action="store_true", help="dash-attn only, 5 rounds, 2 bitwise checks")
    ap.add_argument("--reps", type=int, default=20, help="timed rounds (default 20)")
    ap.add_argument("--checks", type=int, default=5, help="backwards beside the stand-in checked bitwise")
    ap.add_argument("--standins", default=",".join(STANDINS), help=f"comma-separated, of {', '.join(STANDINS)}")
    ap.add_argument("--sm-margin", type=int, default=0, help="dash-attn's sm_margin (SMs left to other kernels)")
    args = ap.parse_args()
    standins = args.standins.split(",")
    if set(standins) - set(STANDINS):
        sys.exit(f"overlap_bench.py: unknown stand-in(s) {sorted(set(standins) - set(STANDINS))}; have {STANDINS}")
    if not torch.cuda.is_available():
        sys.exit("overlap_bench.py: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured")
    reps, checks = (5, 2) if args.quick else (args.reps, args.checks)
    from record import config_name, git_commit  # bench/record.py, beside this file
    config = config_name(B, S, H, H, D, True)
    torch.utils.deterministic.fill_uninitialized_memory = False  # no NaN fills in SDPA's deterministic backward
    global SIDE
    SIDE = torch.cuda.Stream()
    env = dict(commit=args.commit or git_commit(), call_id=uuid.uuid4().hex[:12], gpu=torch.cuda.get_device_name(0),
               sm_count=torch.cuda.get_device_properties(0).multi_processor_count, torch=torch.__version__,
               cuda=torch.version.cuda, dtype="bfloat16", config=config,
               timer=f"cuda-events, rounds of alone/alone/both interleaved, median of {reps} after 3 warm-ups")
    nccl_error = init_nccl() if "nccl-allreduce-1rank" in standins else None
    if nccl_error:
        print(f"nccl-allreduce-1rank skipped: {nccl_error}", flush=True)
    impls = [("dash-attn", True), ("dash-attn", False)]
    impls += [] if args.quick else [("sdpa-flash", True), ("sdpa-flash", False)]
    print(f"{config}  (times in ms; overlap 1 = hidden, 0 = serialised; slowdown = both / max)")
    print(f"{'impl':10s} {'mode':16s} {'stand-in':21s} {'attn':>7s} {'comm':>7s} {'both':>7s} {'overlap':>8s} "
          f"{'slowdown':>8s}  bitwise")
    with open(args.out, "a") as out:
        for impl, det in impls:
            mode = "deterministic" if det else "nondeterministic"
            head = dict(env, impl=impl, mode=mode, sm_margin=args.sm_margin if impl == "dash-attn" else None)
            for kind in standins:
                row = dict(head, standin=kind)
                try:
                    if kind == "nccl-allreduce-1rank" and nccl_error:
                        raise RuntimeError(f"one-rank nccl group not set up: {nccl_error}")
                    attn = backward(impl, det, args.sm_margin)
                    t_alone = measure({"attn": (attn, None)}, reps)["attn"]
                    nbytes, comm = calibrate(kind, t_alone, reps)
                    t = measure({"attn": (attn, None), "comm": (None, comm), "both": (attn, comm)}, reps)
                    row.update(standin_bytes=nbytes, t_attn_ms=round(t["attn"], 4), t_comm_ms=round(t["comm"], 4),
                               t_both_ms=round(t["both"], 4),
                               overlap=round((t["attn"] + t["comm"] - t["both"]) / min(t["attn"], t["comm"]), 3),
                               slowdown=round(t["both"] / max(t["attn"], t["comm"]), 3),
                               bitwise_same_under_overlap=same_under_overlap(attn, comm, checks) if det else None)
                    print(f"{impl:10s} {mode:16s} {kind:21s} {row['t_attn_ms']:7.3f} {row['t_comm_ms']:7.3f} "
                          f"{row['t_both_ms']:7.3f} {row['overlap']:8.3f} {row['slowdown']:8.3f}  "
                          f"{row['bitwise_same_under_overlap']}", flush=True)
                except Exception as e:  # noqa: BLE001 - a row says it could not run; the others go on
                    row["error"] = f"{type(e).__name__}: {e}"[:300]
                    print(f"{impl:10s} {mode:16s} {kind:21s} did not run: {row['error']}", flush=True)
                out.write(json.dumps(row) + "\n")
                out.flush()
                attn = comm = None
                torch.cuda.empty_cache()
    if "nccl-allreduce-1rank" in standins and not nccl_error:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
