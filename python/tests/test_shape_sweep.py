# SPDX-License-Identifier: Apache-2.0
"""Shape sweep: awkward lengths on both sides against the float64 reference, for every schedule, both masks,
every (head_dim, head_dim_v) row of the kernel table, MHA and GQA, deterministic (with a bitwise repeat) and not; on
CUDA (bf16) and on the CPU backend (fp32, smaller heads). A row without a backward kernel (none in this build's table)
would run the forward alone on CUDA and both passes on the CPU backend.

The default run is a sample of the full product that covers every length on each side several times
(`sample_cases`); `--sweep full` (or DASH_SWEEP=full) runs the whole product, and `--sweep memcheck` a sample
that has each length once on each side (18 cases), small enough for compute-sanitizer. Tolerances: the error
budget of attention_reference.py, the same rule for every shape.
"""
import itertools
import math
import os
import random

import pytest

torch = pytest.importorskip("torch")
import dash_attn  # noqa: E402
from dash_attn import _abi  # noqa: E402

from attention_reference import check_against_reference, check_forward_against_reference  # noqa: E402

SEQLENS = (1, 2, 3, 7, 8, 17, 63, 64, 65, 113, 127, 128, 129, 203, 239, 1023, 1024, 1025)
SCHEDULES = ("auto", "auto-fastest", "ascending", "descending", "shift", "symmetric-shift")
# Every row of the kernel table, as (head_dim, head_dim_v); BACKWARD says which have a backward kernel.
HEAD_DIMS = tuple((r.head_dim, r.head_dim_v) for r in _abi.KERNEL_ROWS)
BACKWARD = {(r.head_dim, r.head_dim_v): r.backward for r in _abi.KERNEL_ROWS}
MASKS = (False, True)  # causal
# (batch, query heads, KV heads): MHA and GQA. The CPU backend is slow, so its heads are fewer.
HEADS = {"cuda": ((2, 3, 3), (2, 6, 2)), "cpu": ((1, 2, 2), (1, 4, 2))}
# Offsets d of the sampled (seqlen_q, seqlen_k) = (SEQLENS[i], SEQLENS[(i + d) % 18]) pairs: each offset puts
# every length once on each side. 4 gives (239, 1) and 14 gives (1, 239). 18 pairs per offset, and as many offsets
# as it takes for every combination of the other dimensions to occur (252 pairs for 240 combinations on CUDA, 126
# for 120 on the CPU, with the 5 rows of the table).
SAMPLE_OFFSETS = {"cuda": (0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 12, 14, 15, 17), "cpu": (0, 2, 4, 7, 9, 12, 14)}


def sweep_mode(config):
    return config.getoption("--sweep", default=None) or os.environ.get("DASH_SWEEP", "sample")


def sample_cases(device, mode="sample"):
    """(seqlen_q, seqlen_k, causal, head_dim, heads, schedule, deterministic) cases. Full: the whole product.
    Sample: for each offset, the 18 length pairs, each with one combination of the other dimensions; the
    combinations are a fixed shuffle of their product, dealt in turn, so every one of them occurs."""
    dets = (True, False) if device == "cuda" else (True,)  # the CPU backend has only the ordered mode
    others = list(itertools.product(MASKS, HEAD_DIMS, HEADS[device], SCHEDULES, dets))
    if mode == "full":
        return [(sq, sk, *o) for sq, sk in itertools.product(SEQLENS, SEQLENS) for o in others]
    random.Random(20261201).shuffle(others)
    n = len(SEQLENS)
    offsets = (4,) if mode == "memcheck" else SAMPLE_OFFSETS[device]
    pairs = [(SEQLENS[i], SEQLENS[(i + d) % n]) for d in offsets for i in range(n)]
    return [(sq, sk, *others[c % len(others)]) for c, (sq, sk) in enumerate(pairs)]


def mask_name(mask):
    """A case's mask: causal (True / False) or a window (left, right)."""
    if isinstance(mask, tuple):
        return f"window{mask[0]}_{mask[1]}"
    return "causal" if mask else "full"


def case_id(case):
    sq, sk, mask, (d, dv), (b, hq, hk), schedule, det = case
    dims = f"d{d}" if dv == d else f"d{d}-{dv}"
    return f"sq{sq}_sk{sk}_{mask_name(mask)}_{dims}_b{b}h{hq}-{hk}_{schedule}_{'det' if det else 'nondet'}"


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        device = "cuda" if "cuda" in metafunc.function.__name__ else "cpu"
        cases = sample_cases(device, sweep_mode(metafunc.config))
        metafunc.parametrize("case", cases, ids=[case_id(c) for c in cases])


def inputs(case, device, dtype, seed):
    """q, k (head_dim), v, dout (head_dim_v)."""
    sq, sk, _mask, (d, dv), (b, hq, hk), schedule, det = case
    g = torch.Generator(device=device).manual_seed(seed)
    mk = lambda s, h, w: torch.randn(b, s, h, w, device=device, dtype=torch.float32, generator=g).to(dtype)
    return mk(sq, hq, d), mk(sk, hk, d), mk(sk, hk, dv), mk(sq, hq, dv)


def run_case(case, device, dtype):
    sq, sk, mask, (d, dv), heads, schedule, det = case
    q, k, v, dout = inputs(case, device, dtype, seed=sq * 7919 + sk)
    scale = 1 / math.sqrt(d)
    masking = dict(window_size=mask) if isinstance(mask, tuple) else dict(causal=mask)
    fn = lambda q, k, v: dash_attn.attention(q, k, v, deterministic=det, schedule=schedule, **masking)
    if device == "cuda" and not BACKWARD[(d, dv)]:
        # The forward alone (no input requires grad: a differentiated call is refused at the forward there).
        out = fn(q, k, v)
        check_forward_against_reference(out, q, k, v, mask, scale, dtype, label=case_id(case))
        assert torch.equal(out, fn(q, k, v)), f"{case_id(case)}: out differs between two runs"
        return
    ours = forward_backward(fn, q, k, v, dout)
    check_against_reference(ours, q, k, v, dout, mask, scale, dtype if device == "cuda" else torch.float32,
                            label=case_id(case))
    if det:  # the promise: the same bits on every run
        again = forward_backward(fn, q, k, v, dout)
        for name, a, b in zip(("out", "dq", "dk", "dv"), ours, again):
            assert torch.equal(a, b), f"{case_id(case)}: {name} differs between two deterministic runs"


def forward_backward(fn, q, k, v, dout):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout)
    return [out.detach(), q.grad, k.grad, v.grad]


# Sliding windows (left, right), FlashAttention's window_size with -1 an unbounded side: a window of 0 (the
# diagonal alone), left-only, right-only, asymmetric, causal-like (left, 0) and one wider than any sequence here.
WINDOWS = ((0, 0), (17, -1), (-1, 5), (100, 29), (64, 0), (5000, 5000))
# Length pairs for the window sweep: lengths 1 and 2 on each side, odd lengths, and pairs where many rows see
# no key (239 queries against 1 key with a window of 0: only the last row sees one).
WINDOW_LENGTHS = {"cuda": ((1, 1), (2, 2), (1, 239), (239, 1), (2, 129), (127, 1025), (1023, 65), (203, 203)),
                  "cpu": ((1, 1), (2, 2), (1, 239), (239, 1), (2, 129), (203, 203))}


def window_cases(device):
    """(seqlen_q, seqlen_k, window, head_dim, heads, schedule, deterministic): every window against every length
    pair, the other dimensions dealt in turn from a fixed shuffle of their product."""
    dets = (True, False) if device == "cuda" else (True,)
    others = list(itertools.product(HEAD_DIMS, HEADS[device], SCHEDULES, dets))
    random.Random(20261202).shuffle(others)
    pairs = [(sq, sk, w) for w in WINDOWS for sq, sk in WINDOW_LENGTHS[device]]
    return [(sq, sk, w, *others[c % len(others)]) for c, (sq, sk, w) in enumerate(pairs)]


@pytest.mark.parametrize("window_case", window_cases("cpu"), ids=case_id)
def test_window_sweep_cpu(window_case):
    run_case(window_case, "cpu", torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available() or not _abi.LIB.dash_cuda_available(),
                    reason="no CUDA device or no CUDA kernels: the CUDA sweep is skipped")
@pytest.mark.parametrize("window_case", window_cases("cuda"), ids=case_id)
def test_window_sweep_cuda(window_case):
    run_case(window_case, "cuda", torch.bfloat16)


def test_sweep_cpu(case):
    run_case(case, "cpu", torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available() or not _abi.LIB.dash_cuda_available(),
                    reason="no CUDA device or no CUDA kernels: the CUDA sweep is skipped")
def test_sweep_cuda(case):
    run_case(case, "cuda", torch.bfloat16)


def test_sample_covers_every_length_on_both_sides():
    for device in ("cpu", "cuda"):
        cases = sample_cases(device)
        for side in (0, 1):
            counts = {s: sum(1 for c in cases if c[side] == s) for s in SEQLENS}
            assert min(counts.values()) >= len(SAMPLE_OFFSETS[device]), (device, side, counts)
        assert (239, 1) in {(c[0], c[1]) for c in cases} and (1, 239) in {(c[0], c[1]) for c in cases}
        combos = {c[2:] for c in cases}
        dets = 2 if device == "cuda" else 1
        assert len(combos) == len(MASKS) * len(HEAD_DIMS) * len(HEADS[device]) * len(SCHEDULES) * dets
    # The rows issue 16 added are in the sweep, and so in every sample: MLA-style 192 / 128 and 256.
    assert (192, 128) in HEAD_DIMS and (256, 256) in HEAD_DIMS, HEAD_DIMS
