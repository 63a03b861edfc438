# SPDX-License-Identifier: Apache-2.0
"""The benchmark of record: dash-attn beside FA3, FA4 and cuDNN in one process, with one timer.

Follows shared/docs/benchmark-protocol.md (outside the repo): bf16, 16,384 tokens per batch, hidden 2048 (16 heads
at head dim 128, 32 at 64), full and causal, plus the GQA rows (causal, head dim 128: 32/8 heads at 1k-8k tokens,
28/4 at 4k and 8k). Every figure is the median of 10 calls queued back to back, each between its own pair of CUDA
events (host overhead hidden, as in a training loop that runs ahead of the GPU), after 3 warm-ups and 0.2 s of the
same call (--warmup-seconds: the power-capped state a training step runs in). The implementations of one config are
interleaved, in an order drawn anew for each of the `--repeats` repeats (repeat_order); a row's TFLOP/s is the median
over the repeats, and each ratio is the median of the per-repeat ratios.

Each implementation is timed through the entry point its users call:
- dash-attn: torch.ops.dash_attn.fwd / bwd (every schedule, auto, and deterministic=False);
- FA3 upstream: torch.ops.flash_attn_3.fwd / bwd from a library built from shared/fa3kit (--fa3 PATH/_C.so), the
  backward allocating its own dq/dk/dv as flash_attn_interface's autograd does;
- FA4 (flash_attn.cute, if importable; shared/docs/fa4-on-h200.md) and cuDNN SDPA: the backward is autograd.grad on
  a retained graph, i.e. only the backward's kernels.

    python3 bench/record.py --out bench/results/record.jsonl [--quick] [--fa3 /tmp/fa3/_C.so] [--fa4]
                            [--long | --long-only]
    python3 bench/record.py --summarize bench/results/record-*.jsonl   (no GPU: the tables and milestone count again)

--quick: four configs, dash-attn (non-det, auto) and FA3 only, for iterating. --long: extra memory and time at
32k-128k tokens (causal, head dim 128, MHA and 32/8); --long-only: those rows alone. Writes one JSON line per
(config, impl, mode[, schedule]) and prints one table with the ratios the kernel-efficiency issue tracks. A row also
carries the SM clock and power draw read after each repeat's timed calls (`sm_clock_mhz_per_repeat`,
`power_w_per_repeat`; gpu_state), so that a ratio can be split into per-clock speed and the clock the power cap
allowed. torch reads them through pynvml (the nvidia-ml-py wheel; on a machine without an index, its wheel file
itself can go on PYTHONPATH); without it they are null.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
import types
import uuid

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import dash_attn  # registers torch.ops.dash_attn

GRID_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS = 16384
GQA_ROWS = [(32, 8, 1024), (32, 8, 2048), (32, 8, 4096), (32, 8, 8192), (28, 4, 4096), (28, 4, 8192)]
QUICK = ["b2_s8192_hq16_hkv16_d128_causal", "b4_s4096_hq16_hkv16_d128_full", "b2_s8192_hq32_hkv32_d64_causal",
         "b2_s8192_hq32_hkv8_d128_causal"]
LONG_ROWS = [(1, s, hq, hkv, 128, True) for s in (32768, 65536, 131072) for hq, hkv in ((16, 16), (32, 8))]


def config_name(b, s, hq, hkv, d, causal):
    return f"b{b}_s{s}_hq{hq}_hkv{hkv}_d{d}_{'causal' if causal else 'full'}"


def parse_config(name):
    """The row of a config name (config_name's inverse), so that --configs may name shapes off the grid."""
    m = re.fullmatch(r"b(\d+)_s(\d+)_hq(\d+)_hkv(\d+)_d(\d+)_(causal|full)", name)
    if m is None:
        return None
    return (*(int(x) for x in m.groups()[:5]), m.group(6) == "causal")


def grid():
    rows = []
    for d, h in ((128, 16), (64, 32)):
        for s in GRID_SEQLENS:
            for causal in (False, True):
                rows.append((TOKENS // s, s, h, h, d, causal))
    rows += [(TOKENS // s, s, hq, hkv, 128, True) for hq, hkv, s in GQA_ROWS]
    return rows


def forward_flops(b, s, hq, d, causal):
    """The protocol's count for equal query and key lengths (as dash_attention_flops): 4 B H S^2 D, causal half.
    Written out, not asked of the library, so that older builds (A/B against a baseline) are timed the same way."""
    f = 4.0 * b * hq * s * s * d
    return f / 2 if causal else f


def time_cuda(fn, warmup=3, reps=10, warmup_seconds=0.0):
    """Per-call GPU times (ms) of `reps` calls queued back to back after `warmup` calls, synchronised once.

    warmup_seconds > 0: the warm-up also runs `fn` back to back for that long, so that the timed calls find the GPU
    in the power state this kernel sustains. Under load the H200 holds its power cap (about 690 W) and lowers its
    clock within about 60 ms; 13 calls of a forward at 8k tokens take about 25 ms, so without it a figure depends on
    what ran before (bench/sustained.py; docs/benchmarks.md, "Power state")."""
    for _ in range(warmup):
        fn()
    if warmup_seconds > 0:
        torch.cuda.synchronize()
        start = time.perf_counter()
        while time.perf_counter() - start < warmup_seconds:
            for _ in range(4):
                fn()
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def host_us(fn, calls=20, drain_every=20):
    """CPU time to enqueue one call (µs, median of `calls`), separate from the throughput. The queue is drained every
    `drain_every` calls, so that what is timed is the enqueue cost and not back-pressure from a full queue."""
    fn()
    torch.cuda.synchronize()
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
        if i % drain_every == drain_every - 1:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(times)


class Case:
    """Inputs of one config in the (batch, seqlen, heads, head_dim) layout, seeded per config."""

    def __init__(self, b, s, hq, hkv, d, causal):
        self.b, self.s, self.hq, self.hkv, self.d, self.causal = b, s, hq, hkv, d, causal
        self.name = config_name(b, s, hq, hkv, d, causal)
        g = torch.Generator(device="cuda")
        g.manual_seed(1234 + s + 7 * d + hq + hkv + int(causal))
        kw = dict(device="cuda", dtype=torch.bfloat16, generator=g)
        self.q = torch.randn(b, s, hq, d, **kw)
        self.k = torch.randn(b, s, hkv, d, **kw)
        self.v = torch.randn(b, s, hkv, d, **kw)
        self.do = torch.randn(b, s, hq, d, **kw)
        self.scale = d ** -0.5
        self.fwd_flops = forward_flops(b, s, hq, d, causal)


class Impl:
    """One (impl, mode, schedule) of one config: `run()` is the timed call; `result()` returns (dq, dk, dv) or the
    output, fresh tensors, for the bitwise and sanity checks."""

    def __init__(self, impl, mode, run, result, schedule=None):
        self.impl, self.mode, self.schedule, self.run, self.result = impl, mode, schedule, run, result

    @property
    def key(self):
        return (self.impl, self.mode, self.schedule)


def dash_impls(case, schedules, nondet_schedules=("auto",)):
    ops = torch.ops.dash_attn
    o, lse = ops.fwd(case.q, case.k, case.v, case.causal, case.scale, True, "auto")

    def fwd():
        return ops.fwd(case.q, case.k, case.v, case.causal, case.scale, True, "auto")

    def bwd(det, schedule):
        return lambda: ops.bwd(case.do, case.q, case.k, case.v, o, lse, case.causal, case.scale, det, schedule)

    out = [Impl("dash-attn", "forward", fwd, lambda: fwd()[0])]
    out += [Impl("dash-attn", "nondeterministic", bwd(False, s), bwd(False, s), s) for s in nondet_schedules]
    return out + [Impl("dash-attn", "deterministic", bwd(True, s), bwd(True, s), s) for s in schedules]


def fa3_impls(case, fa3):
    out, lse = fa3.fwd(case.q, case.k, case.v, softmax_scale=case.scale, is_causal=case.causal, num_splits=1)[:2]

    def fwd():
        return fa3.fwd(case.q, case.k, case.v, softmax_scale=case.scale, is_causal=case.causal, num_splits=1)

    def bwd(det):
        # Positional, as flash_attn_interface's backward calls it. The op writes the gradients into dq/dk/dv and
        # returns its workspace; the outputs are allocated per call, as its autograd function (and our op) does.
        # The trailing 0 is FA3's sm_margin.
        def call():
            dq, dk, dv = torch.empty_like(case.q), torch.empty_like(case.k), torch.empty_like(case.v)
            fa3.bwd(case.do, case.q, case.k, case.v, out, lse, dq, dk, dv,
                    None, None, None, None, None, None, case.scale, case.causal, -1, -1, 0.0, det, 0)
            return dq, dk, dv
        return call

    return [Impl("fa3", "forward", fwd, lambda: fwd()[0]),
            Impl("fa3", "nondeterministic", bwd(False), bwd(False)),
            Impl("fa3", "deterministic", bwd(True), bwd(True))]


def autograd_impls(name, case, forward, modes):
    """Backward as autograd.grad on a retained graph (only the backward's kernels run), forward under no_grad."""
    q, k, v = (t.detach().requires_grad_(True) for t in (case.q, case.k, case.v))

    def fwd():
        with torch.no_grad():
            return forward(q, k, v, False)

    out = [Impl(name, "forward", fwd, fwd)]
    for mode in modes:
        o = forward(q, k, v, mode == "deterministic")

        def bwd(o=o):
            return torch.autograd.grad(o, (q, k, v), case.do, retain_graph=True)

        out.append(Impl(name, mode, bwd, bwd))
    return out


def cudnn_forward(case):
    group = case.hq // case.hkv

    def forward(q, k, v, _det):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=case.causal, scale=case.scale, enable_gqa=group > 1)
        return o.transpose(1, 2)

    return forward


def fa4_forward(case, fa4_func):
    def forward(q, k, v, det):
        o = fa4_func(q, k, v, softmax_scale=case.scale, causal=case.causal, deterministic=det)
        return o[0] if isinstance(o, tuple) else o

    return forward


def rel_err(x, ref):
    x, ref = x.float(), ref.float()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-30))


def check(impl, reference):
    """Bitwise equality over 3 fresh runs (recorded for every mode) and the relative error to `reference`."""
    runs = []
    for _ in range(3):
        r = impl.result()
        runs.append(tuple(t.clone() for t in (r if isinstance(r, (tuple, list)) else (r,))))
    torch.cuda.synchronize()
    same = all(torch.equal(a, b) for other in runs[1:] for a, b in zip(runs[0], other))
    errs = None
    if reference is not None:
        errs = [round(rel_err(a, b), 5) for a, b in zip(runs[0], reference)]
    return same, errs, runs[0]


def extra_memory_bytes(fn):
    """Peak device memory one call allocates beyond what was allocated before it (outputs included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    r = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del r
    return peak


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def load_fa3(path):
    torch.ops.load_library(path)  # registers torch.ops.flash_attn_3 (third-party, measured, never shipped)
    return torch.ops.flash_attn_3


def timing_row(env, case, impl, tflops, times, bitwise, rel_err, **extra):
    """One JSON row: the call's environment, the config and implementation, the TFLOP/s and the per-call times (ms),
    the checks (bitwise identity over 3 runs, relative error to the reference), and `extra` fields."""
    return dict(env, config=case.name, impl=impl.impl, mode=impl.mode, schedule=impl.schedule, tflops=tflops,
                median_ms=round(statistics.median(times), 5), min_ms=round(min(times), 5),
                max_ms=round(max(times), 5), bitwise_identical_3_runs=bitwise, rel_err_vs_reference=rel_err,
                B=case.b, S=case.s, Hq=case.hq, Hkv=case.hkv, D=case.d, causal=case.causal, **extra)


def repeat_order(impls, case, r, order, call=""):
    """The order of the impls in repeat r. A timing depends on what ran just before it: the H200 reaches its power
    cap within about 60 ms, so the clock an impl's 13 calls run at follows the previous impl's draw. "rotate" (repeat
    r starts at impl r) moves the first impl's handicap round, but every impl keeps its predecessor: at 2027dce the
    deterministic auto rows, always timed right after the non-deterministic one, read 2-9% below the named schedule
    with the same plan and kernel at head dim 64 (`record-2026-12-04-2027dce-fa4.jsonl`: 4k full 480 against shift's
    524). "shuffle" (the default) draws each repeat's order at random, seeded by the device call (`call`, its call_id),
    the config and the repeat, so that a predecessor's effect is noise that the median over repeats and the calls damp,
    not a bias of one row. (Seeded by the config and the repeat alone, every call drew the same orders and a row kept
    its predecessors from call to call, so their effect repeated instead of averaging out; one difference that
    repeated so: at head dim 128 2k full the det auto row read 1.3% and 3.9% below the named shift schedule, the same
    plan, in the H200 records of b7a9991 and eedb7e3.)"""
    if order == "rotate":
        shift = r % max(len(impls), 1)
        return impls[shift:] + impls[:shift]
    return random.Random(f"{call}/{case.name}/{r}").sample(impls, len(impls))


def gpu_state():
    """(SM clock in MHz, power draw in W) read from NVML through torch right now; (None, None) where they cannot be
    read (no pynvml). Read right after an impl's timed calls, they tell a kernel that is slower per clock from one that
    runs at a lower clock under the power cap (NVML's power reading averages over the last second or so)."""
    try:
        return torch.cuda.clock_rate(), round(torch.cuda.power_draw() / 1000.0, 1)
    except Exception:  # noqa: BLE001 - pynvml missing, or no NVML here
        return None, None


def run_config(case, impls, repeats, reference_key, warmup=3, reps=10, warmup_seconds=0.0, order="shuffle",
               call=""):
    """Times every impl `repeats` times, interleaved (repeat_order); returns {key: [median ms per repeat]}, all the
    times, the check results and {key: [gpu_state() after each repeat]}."""
    per_repeat = {i.key: [] for i in impls}
    all_times = {i.key: [] for i in impls}
    states = {i.key: [] for i in impls}
    for r in range(repeats):
        for impl in repeat_order(impls, case, r, order, call):
            times = time_cuda(impl.run, warmup, reps, warmup_seconds)
            states[impl.key].append(gpu_state())
            per_repeat[impl.key].append(statistics.median(times))
            all_times[impl.key] += times
    # The reference impl is checked first (its own error is 0); the others compare with its gradients.
    checks = {}
    ref_impl = next((i for i in impls if i.key == reference_key), None)
    reference = None
    if ref_impl is not None:
        same, errs, reference = check(ref_impl, None)
        checks[ref_impl.key] = (same, errs)
    for impl in impls:
        if impl.key not in checks:
            checks[impl.key] = check(impl, reference if impl.mode != "forward" else None)[:2]
    return per_repeat, all_times, checks, states


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="JSON lines file (appended); required unless --summarize")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL",
                    help="no GPU: print the summary tables and the milestone count of recorded rows, one call "
                         "(call_id) at a time, and exit")
    ap.add_argument("--fa3", help="FA3 upstream _C.so built from shared/fa3kit")
    ap.add_argument("--fa4", action="store_true", help="time FA4 (flash_attn.cute) too; it must be importable")
    ap.add_argument("--quick", action="store_true", help="four configs, dash-attn non-det / auto and FA3 only")
    ap.add_argument("--long", action="store_true", help="also 32k-128k tokens: time and extra memory")
    ap.add_argument("--long-only", action="store_true", help="the 32k-128k rows of --long alone, without the grid")
    ap.add_argument("--configs", help="comma-separated config names (default: the grid)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--order", choices=("shuffle", "rotate"), default="shuffle",
                    help="the impls' order in each repeat (repeat_order): a seeded shuffle per repeat (default), or "
                         "the same order started one impl later per repeat")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--no-cudnn", action="store_true")
    ap.add_argument("--schedules", help="comma-separated dash-attn schedules for the deterministic rows (default: all "
                    "but auto-fastest; --quick: auto)")
    ap.add_argument("--nondet-schedules", default="auto",
                    help="comma-separated dash-attn schedules for the non-deterministic rows (default: auto; the "
                         "plan orders the work there too, though no addition waits)")
    ap.add_argument("--warmup-seconds", type=float, default=0.2,
                    help="before each timed batch, run the same call back to back for this long (the sustained power "
                         "state a training step runs in; default 0.2 s, where two rows that run one plan agree to "
                         "2%%; 0: 3 warm-up calls only, and each figure then depends on what ran before it)")
    ap.add_argument("--tag", help="a name for this build of dash-attn, written into every row (A/B runs)")
    ap.add_argument("--only", help="IMPL/MODE[/SCHEDULE]: run that one 5 times on the first config and exit (for ncu; "
                    "a non-deterministic schedule other than auto needs --nondet-schedules)")
    args = ap.parse_args()
    if args.summarize:
        for call_id, table in tables_from_jsonl(args.summarize):
            print(f"call {call_id}: {len(table)} configs")
            print_summary(table)
        return
    if not args.out:
        ap.error("--out is required (unless --summarize)")

    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    env = dict(commit=args.commit or git_commit(), call_id=uuid.uuid4().hex[:12], gpu=torch.cuda.get_device_name(0),
               sm_count=props.multi_processor_count, torch=torch.__version__, cuda=torch.version.cuda,
               dtype="bfloat16", timer="cuda-events back to back, median of 10 after 3 warm-ups" +
               (f" and {args.warmup_seconds:g} s of the same call (sustained power state)" if args.warmup_seconds else ""),
               warmup_seconds=args.warmup_seconds, repeats=args.repeats, order=args.order)
    fa3 = load_fa3(args.fa3) if args.fa3 else None
    fa4_func = None
    if args.fa4:
        from flash_attn.cute import flash_attn_func as fa4_func  # noqa: N813 (third-party, measured)
    schedules = [s for s in dash_attn.SCHEDULES if s != "auto-fastest"]
    if args.quick:
        schedules = ["auto"]
    if args.schedules:
        schedules = args.schedules.split(",")
    if args.tag:
        env["tag"] = args.tag
    rows = grid()
    if args.long_only:
        if args.configs or args.quick:
            ap.error("--long-only takes the long rows only: drop --configs / --quick")
        args.long, rows = True, []
    if args.configs or args.quick:
        wanted = args.configs.split(",") if args.configs else QUICK
        rows = [parse_config(name) for name in wanted]
        missing = [name for name, row in zip(wanted, rows) if row is None]
        if missing:
            sys.exit(f"record.py: config(s) not of the form b2_s8192_hq16_hkv16_d128_causal: {', '.join(missing)}")
    if args.only:
        case = Case(*rows[0])
        impls = dash_impls(case, schedules if not args.quick else dash_attn.SCHEDULES,
                           args.nondet_schedules.split(","))
        impls += fa3_impls(case, fa3) if fa3 is not None else []
        want = tuple(args.only.split("/")) + (None,) * (3 - len(args.only.split("/")))
        chosen = [i for i in impls if i.key == want]
        if not chosen:
            sys.exit(f"record.py: --only {args.only}: no such implementation (have {[i.key for i in impls]})")
        for _ in range(5):
            chosen[0].run()
        torch.cuda.synchronize()
        return
    out = open(args.out, "a")
    table = []
    for r in rows:
        case = Case(*r)
        impls = dash_impls(case, schedules, args.nondet_schedules.split(","))
        if fa3 is not None:
            impls += fa3_impls(case, fa3)
        others = []
        if not args.quick and not args.no_cudnn:
            others.append(("cudnn", cudnn_forward(case), ["nondeterministic"]))
        if fa4_func is not None:
            others.append(("fa4", fa4_forward(case, fa4_func), ["nondeterministic", "deterministic"]))
        for name, forward, modes in others:
            try:
                impls += autograd_impls(name, case, forward, modes)
            except Exception as e:  # noqa: BLE001 - a row says it could not run; the record goes on
                error = f"{type(e).__name__}: {e}"[:300]
                print(f"{case.name}: {name} did not run: {error}", flush=True)
                out.write(json.dumps(dict(env, config=case.name, impl=name, mode="all", error=error)) + "\n")
        reference_key = (("cudnn", "nondeterministic", None) if not args.quick and not args.no_cudnn
                         else ("fa3", "nondeterministic", None))
        per_repeat, all_times, checks, states = run_config(case, impls, args.repeats, reference_key,
                                                           warmup_seconds=args.warmup_seconds, order=args.order,
                                                           call=env["call_id"])
        results = {}
        for impl in impls:
            flops = case.fwd_flops * (1.0 if impl.mode == "forward" else 2.5)
            tf = [flops / (ms * 1e-3) / 1e12 for ms in per_repeat[impl.key]]
            same, errs = checks[impl.key]
            row = timing_row(env, case, impl, round(statistics.median(tf), 1), all_times[impl.key], same, errs,
                             tflops_per_repeat=[round(t, 1) for t in tf], flops=flops,
                             sm_clock_mhz_per_repeat=[c for c, _ in states[impl.key]],
                             power_w_per_repeat=[w for _, w in states[impl.key]])
            # The host's time per call, forward too: where it nears the GPU's (a forward at 512 tokens takes ~100 us),
            # the back-to-back timer reads the host's (bench/queue_jitter.py tells which).
            if impl.impl in ("dash-attn", "fa3") and impl.schedule in (None, "auto"):
                row["host_us_per_call"] = round(host_us(impl.run), 1)
            if args.long and case.s >= 32768 and impl.mode != "forward":
                row["extra_memory_bytes"] = extra_memory_bytes(impl.run)
            results[impl.key] = (row, per_repeat[impl.key])
            out.write(json.dumps(row) + "\n")
            out.flush()
        table.append((case, results))
        print_config(case, results, flush=True)
        del case, impls
        torch.cuda.empty_cache()
    if args.long and not (args.configs or args.quick):
        for r in LONG_ROWS:
            case = Case(*r)
            impls = [i for i in dash_impls(case, ["auto"]) if i.mode != "forward"]
            if fa3 is not None:
                impls += [i for i in fa3_impls(case, fa3) if i.mode != "forward"]
            # Seconds per call at 128k tokens: 1 warm-up, 5 timed calls.
            per_repeat, all_times, checks, _ = run_config(case, impls, 1, ("fa3", "nondeterministic", None), 1, 5)
            for impl in impls:
                flops = case.fwd_flops * 2.5
                ms = statistics.median(all_times[impl.key])
                row = timing_row(env, case, impl, round(flops / (ms * 1e-3) / 1e12, 1), all_times[impl.key],
                                 *checks[impl.key], extra_memory_bytes=extra_memory_bytes(impl.run))
                out.write(json.dumps(row) + "\n")
                print(f"{case.name:34s} {impl.impl:9s} {impl.mode:16s} {row['tflops']:6.1f} TFLOP/s  extra memory "
                      f"{row['extra_memory_bytes'] / 1e9:.2f} GB  bitwise {row['bitwise_identical_3_runs']}", flush=True)
            del case, impls
            torch.cuda.empty_cache()
    out.close()
    print_summary(table)


def _ratio(results, num, den, per_mhz=False):
    """Median over repeats of num/den time ratios, inverted to a speed ratio (num faster -> > 1). per_mhz: each
    repeat's ratio divided by its SM clocks' ratio (num's clock / den's), i.e. which kernel does more per cycle,
    whatever clock the power cap gave each; None where a clock was not read."""
    if num not in results or den not in results:
        return None
    pairs = list(zip(results[num][1], results[den][1]))
    if not per_mhz:
        return statistics.median(d / n for n, d in pairs)
    clocks = list(zip(results[num][0].get("sm_clock_mhz_per_repeat") or [],
                      results[den][0].get("sm_clock_mhz_per_repeat") or []))
    if len(clocks) != len(pairs) or not all(cn and cd for cn, cd in clocks):
        return None
    return statistics.median((d / n) * (cd / cn) for (n, d), (cn, cd) in zip(pairs, clocks))


def _best(results, mode, exclude=()):
    cands = [k for k in results if k[1] == mode and k[0] not in exclude]
    return max(cands, key=lambda k: results[k][0]["tflops"]) if cands else None


def print_config(case, results, flush=False):
    cells = [f"{k[0]}/{k[1][:3]}{'/' + k[2] if k[2] else ''}={results[k][0]['tflops']:.0f}" for k in results]
    print(f"{case.name:34s} " + " ".join(cells), flush=flush)


def _print_table(title, head, rows):
    print(title)
    print(" ".join(f"{h:>11s}" if i else f"{h:34s}" for i, h in enumerate(head)))
    for name, cells in rows:
        print(f"{name:34s} " + " ".join(f"{c:>11s}" for c in cells))


def tables_from_jsonl(paths):
    """The recorded rows of `paths` as print_summary's tables, one per device call (call_id), in file order. A row's
    per-repeat entries are 1 / TFLOP/s, which stand for its times: the ratios compare rows of equal FLOPs (a forward
    with a forward, a backward with a backward)."""
    calls = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if "tflops_per_repeat" not in row or row.get("error"):
                    continue  # a row that did not run, or one of --long's (one timed batch, no repeats)
                key = (row["impl"], row["mode"], row.get("schedule"))
                configs = calls.setdefault(row.get("call_id"), {})
                configs.setdefault(row["config"], {})[key] = (row, [1.0 / t for t in row["tflops_per_repeat"]])
    return [(call_id, [(types.SimpleNamespace(name=name), results) for name, results in configs.items()])
            for call_id, configs in calls.items()]


# Milestone 1 of the kernel-efficiency issue: the least det / FA4 det, non-det / FA3 non-det and forward / best.
MILESTONE_DET, MILESTONE_ND, MILESTONE_FWD = 0.97, 0.95, 0.93
# The targets beyond milestone 1: det / the best non-det of the call and forward / FA3's and FA4's best (det
# >= FA4's det and non-det >= FA3's and FA4's take 1.0).
TARGET_DET_BEST_ND, TARGET_FWD = 0.95, 0.97


def print_summary(table):
    det = ("dash-attn", "deterministic", "auto")
    nd = ("dash-attn", "nondeterministic", "auto")
    fwd = ("dash-attn", "forward", None)
    fa3_nd, fa3_det = ("fa3", "nondeterministic", None), ("fa3", "deterministic", None)
    fa4_nd, fa4_det = ("fa4", "nondeterministic", None), ("fa4", "deterministic", None)

    def rt(res, a, b, per_mhz=False):
        r = _ratio(res, a, b, per_mhz) if b else None
        return f"{r:.3f}" if r is not None else "-"

    def tf(res, k):
        return f"{res[k][0]['tflops']:.0f}" if k in res else "-"

    # The tables' columns: TFLOP/s of these implementations, then ratios (keys of `pairs` below), all and per MHz.
    tflops_columns = (("det", det), ("nd", nd), ("fa3 nd", fa3_nd), ("fa3 det", fa3_det), ("fa4 det", fa4_det))
    ratio_columns = ("det/best-nd", "det/fa4det", "nd/fa3nd", "nd/fa4nd", "fwd/best", "fwd/fa")
    per_mhz_columns = ("det/fa4det", "nd/fa3nd", "fwd/best", "fwd/fa")
    rows, rows_per_mhz = [], []
    # Each check: [label, threshold, which ratios of a row (keys of `pairs` below), rows checked, misses as (ratio,
    # config)]. A row is checked where a ratio's both implementations ran; its ratio is the least of those (the
    # non-det target asks for FA3's and FA4's both).
    milestone = [[f"det >= {MILESTONE_DET} x FA4's det", MILESTONE_DET, ("det/fa4det",), 0, []],
                 [f"non-det >= {MILESTONE_ND} x FA3's non-det", MILESTONE_ND, ("nd/fa3nd",), 0, []],
                 [f"forward >= {MILESTONE_FWD} x the best other (FA3, FA4, cuDNN)", MILESTONE_FWD, ("fwd/best",),
                  0, []],
                 [f"forward >= {MILESTONE_FWD} x FA3's and FA4's best (the issue's targets)", MILESTONE_FWD,
                  ("fwd/fa",), 0, []]]
    targets = [[f"det >= {TARGET_DET_BEST_ND} x the best non-det of the call", TARGET_DET_BEST_ND, ("det/best-nd",), 0,
                []],
               ["det >= FA4's det", 1.0, ("det/fa4det",), 0, []],
               ["non-det >= FA3's and FA4's non-det", 1.0, ("nd/fa3nd", "nd/fa4nd"), 0, []],
               [f"forward >= {TARGET_FWD} x FA3's and FA4's best", TARGET_FWD, ("fwd/fa",), 0, []]]
    for case, res in table:
        best_nd = _best(res, "nondeterministic")
        best_other_fwd = _best(res, "forward", exclude=("dash-attn",))
        best_fa_fwd = _best(res, "forward", exclude=("dash-attn", "cudnn"))
        pairs = {"det/best-nd": (det, best_nd), "det/fa4det": (det, fa4_det), "nd/fa3nd": (nd, fa3_nd),
                 "nd/fa4nd": (nd, fa4_nd), "fwd/best": (fwd, best_other_fwd), "fwd/fa": (fwd, best_fa_fwd)}
        rows.append((case.name, [tf(res, k) for _, k in tflops_columns] + [rt(res, *pairs[k]) for k in ratio_columns]))
        rows_per_mhz.append((case.name, [rt(res, *pairs[k], True) for k in per_mhz_columns]))
        for check in milestone + targets:
            ratios = [r for r in (_ratio(res, *pairs[k]) if pairs[k][1] else None for k in check[2]) if r is not None]
            if ratios:
                check[3] += 1
                if min(ratios) < check[1]:
                    check[4].append((min(ratios), case.name))
    _print_table("\nratios (median of per-repeat ratios); det = dash-attn deterministic, schedule auto; fwd/best: "
                 "against the best other forward (cuDNN's too), fwd/fa: FA3's and FA4's only",
                 ("config",) + tuple(name for name, _ in tflops_columns) + ratio_columns, rows)
    # Under the power cap a call's clock varies between calls by several percent; per MHz, a ratio says which kernel
    # does more per cycle (a miss at an equal per-MHz ratio is the clock's).
    _print_table("\nthe milestone ratios per MHz (each repeat's ratio over its SM clocks' ratio; - where a clock was "
                 "not read)", ("config",) + per_mhz_columns, rows_per_mhz)
    for title, checks, farthest_first in (("milestone 1 (median ratios)", milestone, False),
                                          ("the issue's targets (median ratios; misses from the farthest)", targets,
                                           True)):
        print(f"\n{title}:")
        for label, _, _, checked, misses in checks:
            listed = sorted(misses) if farthest_first else misses
            print(f"  {label}: {checked - len(misses)} of {checked} rows" +
                  (f"; misses: {', '.join(f'{name} {r:.3f}' for r, name in listed)}" if misses else ""))


if __name__ == "__main__":
    main()
