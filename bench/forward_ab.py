# SPDX-License-Identifier: Apache-2.0
"""Forward A/B of builds of dash-attn: the forward alone on the protocol's causal rows (head dim 64 from 512 tokens),
its head-dim-128 full-mask rows and head dim 64's at 2k and 8k, one library per process (DASH_ATTN_LIBRARY), the
protocol's timer (window_bench.time_impls); one JSON line per row with the SHA-256 of O and LSE, so that builds which
should agree bitwise can be checked. Run it once per build and round, interleaved, then summarise: the median TFLOP/s
per (config, variant), its ratio to the variant named "base", the per-run figures, and whether O and LSE were bitwise
equal across variants.

    DASH_ATTN_LIBRARY=DIR/libdash_attn.so [FA3_SO=_C.so] [FORWARD_AB_MASK=causal|full] \
        [FORWARD_AB_HEAD_DIMS=64,128] [FORWARD_AB_WARMUP_SECONDS=0.2] python3 bench/forward_ab.py run VARIANT OUT.jsonl
    python3 bench/forward_ab.py summary OUT.jsonl [...]

FORWARD_AB_MASK keeps the rows of one mask, FORWARD_AB_HEAD_DIMS (e.g. "64,128") the rows of those head dims. With
FA3_SO (FA3 upstream built from shared/fa3kit) every run also times FA3's forward right after ours on each row of head
dim <= 128, as the variant "fa3"; the summary then gives each variant's median ratio to FA3's within the same runs.

Each call is timed after FORWARD_AB_WARMUP_SECONDS (default 0.2) of itself back to back, in the sustained power state
the benchmark of record times (record.py's --warmup-seconds; 0: after 3 warm-up calls only, a state in which the long
rows' ratios to FA3 read 4-7% higher on an H100). Each row also carries the SM clock and the board's power draw read
from NVML right after its timed calls (None where torch cannot read them), to tell a kernel that is slower per clock
from one that runs at a lower clock under the power cap.
"""
import collections
import hashlib
import json
import os
import statistics
import sys

# (batch, seqlen, query heads, KV heads, head dim, value head dim, causal)
ROWS = [(16, 1024, 16, 16, 128, 128, True), (8, 2048, 16, 16, 128, 128, True), (4, 4096, 16, 16, 128, 128, True),
        (2, 8192, 16, 16, 128, 128, True), (1, 16384, 16, 16, 128, 128, True), (2, 8192, 32, 8, 128, 128, True),
        (32, 512, 32, 32, 64, 64, True), (16, 1024, 32, 32, 64, 64, True), (8, 2048, 32, 32, 64, 64, True),
        (4, 4096, 32, 32, 64, 64, True), (2, 8192, 32, 32, 64, 64, True), (1, 16384, 32, 32, 64, 64, True),
        (8, 2048, 32, 32, 64, 64, False), (2, 8192, 32, 32, 64, 64, False),
        (2, 8192, 16, 16, 96, 96, True), (2, 8192, 8, 8, 256, 256, True), (2, 8192, 16, 16, 192, 128, True),
        (16, 1024, 16, 16, 128, 128, False), (8, 2048, 16, 16, 128, 128, False), (4, 4096, 16, 16, 128, 128, False),
        (2, 8192, 16, 16, 128, 128, False), (1, 16384, 16, 16, 128, 128, False)]


def run(variant, out_path):
    import torch
    from dash_attn import _abi  # loads DASH_ATTN_LIBRARY and registers torch.ops.dash_attn
    from record import gpu_state, load_fa3
    from window_bench import time_impls

    warmup_seconds = float(os.environ.get("FORWARD_AB_WARMUP_SECONDS", "0.2"))
    env = dict(variant=variant, commit=os.environ.get("DASH_COMMIT", "?"), call_id=os.environ.get("CALL_ID", "?"),
               gpu=torch.cuda.get_device_name(0), dtype="bfloat16", warmup_seconds=warmup_seconds)
    ops = torch.ops.dash_attn
    fa3 = load_fa3(os.environ["FA3_SO"]) if os.environ.get("FA3_SO") else None
    with open(out_path, "a") as out:
        for b, s, hq, hkv, d, dv, causal in ROWS:
            mask = "causal" if causal else "full"
            if os.environ.get("FORWARD_AB_MASK", mask) != mask:
                continue
            if d not in [int(x) for x in os.environ.get("FORWARD_AB_HEAD_DIMS", str(d)).split(",")]:
                continue
            dims = f"d{d}" + (f"_dv{dv}" if dv != d else "")
            name = f"b{b}_s{s}_hq{hq}_hkv{hkv}_{dims}_{mask}"
            problem = _abi.make_problem(b, hq, hkv, s, s, d, causal, -1, -1, head_dim_v=0 if dv == d else dv)
            flops = _abi.attention_flops(problem, backward=False)
            g = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (torch.randn(b, s, h, cols, device="cuda", dtype=torch.bfloat16, generator=g)
                       for h, cols in ((hq, d), (hkv, d), (hkv, dv)))
            scale = d ** -0.5

            def forward(q=q, k=k, v=v, causal=causal, scale=scale):
                return ops.fwd(q, k, v, causal, scale, False, "auto", False, 0, -1, -1)

            o, lse = forward()
            sha = hashlib.sha256(o.contiguous().view(torch.uint8).cpu().numpy().tobytes() +
                                 lse.contiguous().cpu().numpy().tobytes()).hexdigest()[:16]
            for r in time_impls(env, name, [("dash-attn", "forward", forward, flops)], warmup_seconds):
                r["out_sha"] = sha
                r["sm_clock_mhz"], r["power_w"] = gpu_state()
                out.write(json.dumps(r) + "\n")
            # fa3kit's build holds FA3's head-dim-64 and 128 kernels (96 runs on 128's); 256 and 192 / 128 crash there.
            if fa3 is not None and d <= 128 and dv == d:
                def fa3_forward(q=q, k=k, v=v, causal=causal, scale=scale):
                    return fa3.fwd(q, k, v, softmax_scale=scale, is_causal=causal, num_splits=1)

                for r in time_impls(dict(env, variant="fa3", run_variant=variant), name,
                                    [("fa3", "forward", fa3_forward, flops)], warmup_seconds):
                    r["sm_clock_mhz"], r["power_w"] = gpu_state()
                    out.write(json.dumps(r) + "\n")
            torch.cuda.empty_cache()


def summary(paths):
    rows = [json.loads(line) for path in paths for line in open(path)]
    runs, shas = collections.defaultdict(list), collections.defaultdict(set)
    for r in rows:
        if "tflops" in r:
            runs[(r["config"], r["variant"])].append(r["tflops"])
        if r["variant"] != "fa3":
            shas[r["config"]].add(r.get("out_sha"))
    variants = sorted({r["variant"] for r in rows}, key=lambda v: (v != "base", v == "fa3", v))
    print(f"{'config':36s}" + "".join(f"{v:>22s}" for v in variants))
    for config in dict.fromkeys(r["config"] for r in rows):
        base = statistics.median(runs[(config, "base")]) if runs.get((config, "base")) else None
        cells = []
        for v in variants:
            if not runs[(config, v)]:  # e.g. FA3 refuses the head dim
                cells.append(f"{'-':>22s}")
                continue
            med = statistics.median(runs[(config, v)])
            ratio = f"{med / base:5.3f}" if base else "    -"
            fa3 = runs.get((config, "fa3"))
            vs_fa3 = f" /fa3 {med / statistics.median(fa3):5.3f}" if fa3 and v != "fa3" else ""
            cells.append(f"  {med:7.1f} {ratio}{vs_fa3} ({','.join('%.0f' % x for x in runs[(config, v)])})")
        print(f"{config:36s}" + "".join(cells) + ("  bits equal" if len(shas[config]) == 1 else "  BITS DIFFER"))
    states = collections.defaultdict(list)  # (config, variant) -> (clock, power) after each run's timed calls
    for r in rows:
        if r.get("sm_clock_mhz") is not None:
            states[(r["config"], r["variant"])].append((r["sm_clock_mhz"], r["power_w"]))
    if states:
        print(f"\n{'median SM clock MHz / power W':36s}" + "".join(f"{v:>22s}" for v in variants))
        for config in dict.fromkeys(r["config"] for r in rows):
            cells = [f"{statistics.median(c for c, _ in states[(config, v)]):16.0f} / "
                     f"{statistics.median(p for _, p in states[(config, v)]):3.0f}" if states[(config, v)]
                     else f"{'-':>22s}" for v in variants]
            print(f"{config:36s}" + "".join(cells))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2:])
    else:
        sys.exit(__doc__)
