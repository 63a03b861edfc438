# SPDX-License-Identifier: Apache-2.0
"""Packed variable-length sequences (dash_attn.attention_varlen, dash_attn.flash_attn_varlen_func) on the CPU
backend and, where present, CUDA: forward and gradients against a float64 reference per sequence, bitwise
repeatability, pack invariance (a sequence's bits do not depend on its neighbours, their order or a NaN in them),
sequences without queries or keys, the pack cache, and errors that name the argument.

CPU cases are kept tiny (the CPU backend is slow); the CUDA cases are larger (1000 short sequences, one long plus
many short) and run bf16 and fp16."""
import collections
import math
import random

import pytest

torch = pytest.importorskip("torch")
import dash_attn  # noqa: E402
from dash_attn import _abi, _torch_ops  # noqa: E402

import attention_reference  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and bool(_abi.LIB.dash_cuda_available())
CUDA_SKIP = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device, or libdash_attn built without CUDA kernels: "
                                                     "GPU varlen tests skipped")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA_SKIP)]
# (device, dtype) pairs: the CPU backend runs fp32, the kernels bf16 and fp16.
DEVICE_DTYPES = [("cpu", torch.float32), pytest.param("cuda", torch.bfloat16, marks=CUDA_SKIP),
                 pytest.param("cuda", torch.float16, marks=CUDA_SKIP)]
HEADS = [(4, 2, 64), (8, 2, 128)]  # (heads_q, heads_kv, head_dim)


# ---- helpers -----------------------------------------------------------------------------------------------

def sequence(sq, sk, hq, hk, d, seed):
    """One sequence's (q, k, v, dout), fp32 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, h, d, generator=g) for n, h in ((sq, hq), (sk, hk), (sk, hk), (sq, hq))]


def assemble(seqs, device, dtype):
    """Packs [(q, k, v, dout), ...] back to back: (q, k, v, dout, cu_seqlens_q, cu_seqlens_k), cu_seqlens int32 on
    the CPU."""
    q, k, v, dout = (torch.cat([s[i] for s in seqs]).to(device, dtype) for i in range(4))
    cu = lambda i: torch.tensor([0] + list(torch.tensor([s[i].shape[0] for s in seqs]).cumsum(0)), dtype=torch.int32)
    return q, k, v, dout, cu(0), cu(1)


def make_pack(lens_q, lens_k, hq, hk, d, device="cpu", dtype=torch.float32, seed=0):
    return assemble([sequence(sq, sk, hq, hk, d, seed * 100003 + i) for i, (sq, sk) in enumerate(zip(lens_q, lens_k))],
                    device, dtype)


def run(q, k, v, dout, cu_q, cu_k, fn=None, **kwargs):
    """([out, dq, dk, dv], lse) of attention_varlen (or fn) with upstream gradient dout, on fresh leaves."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    if fn is None:
        out, lse = dash_attn.attention_varlen(*leaves, cu_q, cu_k, return_lse=True, **kwargs)
    else:
        out, lse = fn(*leaves, cu_q, cu_k, **kwargs), None
    out.backward(dout)
    return [out.detach(), leaves[0].grad, leaves[1].grad, leaves[2].grad], lse


def slices(cu_q, cu_k):
    """Per sequence: (query rows, key rows) as slices."""
    cq, ck = cu_q.tolist(), cu_k.tolist()
    return [(slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])) for s in range(len(cq) - 1)]


def check_pack(ours, q, k, v, dout, cu_q, cu_k, mask, scale, low_dtype, label=""):
    """attention_reference.check_against_reference on every sequence of the pack separately (sequences of the same
    lengths are stacked into one batch of that problem, which is the same check). A sequence without queries or
    without keys must have zero output and gradients."""
    out, dq, dk, dv = ours
    groups = collections.defaultdict(list)
    for rows_q, rows_k in slices(cu_q, cu_k):
        groups[(rows_q.stop - rows_q.start, rows_k.stop - rows_k.start)].append((rows_q, rows_k))
    for (sq, sk), members in sorted(groups.items()):
        if sq == 0 or sk == 0:
            for rows_q, rows_k in members:
                for name, t in (("out", out[rows_q]), ("dq", dq[rows_q]), ("dk", dk[rows_k]), ("dv", dv[rows_k])):
                    assert torch.equal(t, torch.zeros_like(t)), f"{label} ({sq}, {sk}): {name} is not 0"
            continue
        stack_q = lambda t: torch.stack([t[rows_q] for rows_q, _ in members])
        stack_k = lambda t: torch.stack([t[rows_k] for _, rows_k in members])
        attention_reference.check_against_reference(
            [stack_q(out), stack_q(dq), stack_k(dk), stack_k(dv)], stack_q(q), stack_k(k), stack_k(v), stack_q(dout),
            mask, scale, low_dtype, label=f"{label} lengths ({sq}, {sk}) x{len(members)}")


def mixes(device):
    """Length mixes (lens_q, lens_k). The many-short ones draw from a few lengths, so that the reference runs once
    per distinct (seqlen_q, seqlen_k)."""
    big = device == "cuda"
    rng = random.Random(7)
    short_q, short_k = (1, 7, 16, 33, 64), (1, 5, 16, 40, 64)
    n = 1000 if big else 40
    many = ([rng.choice(short_q) for _ in range(n)], [rng.choice(short_k) for _ in range(n)])
    long = 3000 if big else 150
    n_short = 300 if big else 15
    long_short = ([long] + [rng.choice(short_q) for _ in range(n_short)],
                  [long] + [rng.choice(short_k) for _ in range(n_short)])
    long_short[0].insert(n_short // 2, long // 3)  # a mid-length one between the short ones
    long_short[1].insert(n_short // 2, long // 2)
    single = [1000 if big else 77]
    return {
        "0-1-127-129": ([0, 1, 127, 129], [0, 1, 127, 129]),
        "single": (single, single),
        "ones-and-twos": ([1, 2, 1, 2], [1, 1, 2, 2]),
        "q-ne-k": ([5, 70, 33, 17, 40], [40, 9, 33, 0, 1]),  # seqlen_k = 0 with 17 queries; seqlen_q > seqlen_k
        "no-queries": ([0, 20, 0], [15, 20, 3]),
        "many-short": many,
        "long-and-short": long_short,
    }


MIX_NAMES = list(mixes("cpu"))


# ---- accuracy ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"hq{h[0]}-hk{h[1]}-d{h[2]}")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mix", MIX_NAMES)
def test_matches_per_sequence_float64_reference(device, dtype, heads, causal, mix):
    hq, hk, d = heads
    lens_q, lens_k = mixes(device)[mix]
    q, k, v, dout, cu_q, cu_k = make_pack(lens_q, lens_k, hq, hk, d, device, dtype)
    ours, lse = run(q, k, v, dout, cu_q, cu_k, causal=causal, max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))
    assert ours[0].shape == q.shape and ours[0].dtype == dtype
    assert lse.shape == (hq, q.shape[0]) and lse.dtype == torch.float32
    low = torch.float32 if device == "cpu" else dtype
    check_pack(ours, q, k, v, dout, cu_q, cu_k, causal, d ** -0.5, low, label=f"{mix} causal={causal}")


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_lse_is_heads_by_total_q(device, dtype, causal):
    # LSE [heads_q, total_q]: column cu_seqlens_q[s] + i is query i of sequence s; -inf where a row sees no key.
    lens_q, lens_k = [30, 0, 9, 12], [20, 7, 0, 12]
    q, k, v, dout, cu_q, cu_k = make_pack(lens_q, lens_k, 4, 2, 64, device, dtype, seed=1)
    _, lse = dash_attn.attention_varlen(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
    for rows_q, rows_k in slices(cu_q, cu_k):
        ref = attention_reference.log_sum_exp(q[rows_q][None], k[rows_k][None], causal, 64 ** -0.5)[0]
        got = lse[:, rows_q].double()
        if rows_k.stop == rows_k.start:
            assert torch.all(got == float("-inf"))
            continue
        assert torch.equal(torch.isinf(got), torch.isinf(ref))
        finite = torch.isfinite(ref)
        tol = 1e-5 if device == "cpu" else 1e-3
        torch.testing.assert_close(got[finite], ref[finite], atol=tol, rtol=tol)


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
def test_sequences_without_keys_or_queries_give_zeros(device, dtype):
    # Per sequence: seqlen_k = 0 with queries (O = 0, LSE = -inf, dQ = 0), seqlen_q = 0 with keys (dK = dV = 0).
    q, k, v, dout, cu_q, cu_k = make_pack([8, 3, 0, 5], [0, 6, 4, 0], 2, 1, 64, device, dtype, seed=2)
    (out, dq, dk, dv), lse = run(q, k, v, dout, cu_q, cu_k, causal=True)
    zero = lambda t: torch.equal(t, torch.zeros_like(t))
    assert zero(out[:8]) and zero(dq[:8]) and torch.all(lse[:, :8] == float("-inf"))
    assert zero(out[11:]) and zero(dq[11:]) and torch.all(lse[:, 11:] == float("-inf"))
    assert zero(dk[6:]) and zero(dv[6:])
    assert not zero(out[8:11]) and not zero(dk[:6])
    for t in (out, dq, dk, dv):
        assert torch.isfinite(t).all()


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("lens_q, lens_k", [([4, 6], [0, 0]), ([0, 0], [5, 3])])
def test_a_pack_without_keys_or_queries_at_all(device, dtype, lens_q, lens_k):
    q, k, v, dout, cu_q, cu_k = make_pack(lens_q, lens_k, 2, 2, 64, device, dtype, seed=3)
    (out, dq, dk, dv), lse = run(q, k, v, dout, cu_q, cu_k, causal=False)
    assert out.shape == q.shape and lse.shape == (2, q.shape[0]) and dk.shape == k.shape
    for t in (out, dq, dk, dv):
        assert torch.equal(t, torch.zeros_like(t))
    assert torch.all(lse == float("-inf"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal, window_size", [(False, (7, 3)), (True, (10, -1)), (False, (5, 500)),
                                                 (True, (500, -1))])
def test_flash_attn_varlen_func_matches_flash_attn_semantics(device, causal, window_size):
    # flash-attn's band: a window side >= max_seqlen_k is unbounded, causal makes the right side 0; applied per
    # sequence, bottom-right aligned. The same bits as attention_varlen on that band.
    lens_q, lens_k = [30, 50, 12], [45, 20, 12]
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v, dout, cu_q, cu_k = make_pack(lens_q, lens_k, 4, 2, 64, device, dtype, seed=4)
    max_k = max(lens_k)
    left, right = (-1 if w >= max_k else w for w in window_size)
    band = (left, 0 if causal else right)
    ours, _ = run(q, k, v, dout, cu_q, cu_k, fn=dash_attn.flash_attn_varlen_func, max_seqlen_q=max(lens_q),
                  max_seqlen_k=max_k, causal=causal, window_size=window_size, deterministic=True)
    same, _ = run(q, k, v, dout, cu_q, cu_k, window_size=band)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, same):
        assert torch.equal(a, b), f"{name}: flash_attn_varlen_func and attention_varlen differ on the same band"
    low = torch.float32 if device == "cpu" else dtype
    check_pack(ours, q, k, v, dout, cu_q, cu_k, band, 64 ** -0.5, low, label=f"window {causal} {window_size}")


@CUDA_SKIP
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mix", ["many-short", "long-and-short", "0-1-127-129"])
def test_non_deterministic_mode_matches_the_reference(dtype, mix):
    lens_q, lens_k = mixes("cuda")[mix]
    q, k, v, dout, cu_q, cu_k = make_pack(lens_q, lens_k, 8, 2, 128, "cuda", dtype, seed=5)
    ours, _ = run(q, k, v, dout, cu_q, cu_k, fn=dash_attn.flash_attn_varlen_func, max_seqlen_q=max(lens_q),
                  max_seqlen_k=max(lens_k), causal=True)  # flash-attn's default: deterministic=False
    check_pack(ours, q, k, v, dout, cu_q, cu_k, True, 128 ** -0.5, dtype, label=f"non-deterministic {mix}")


# ---- determinism and pack invariance -----------------------------------------------------------------------

def _invariance_lengths(device):
    big = device == "cuda"
    return dict(target=(1100, 1100) if big else (90, 90), skewed=(700, 1300) if big else (50, 80),
                neighbours=[(2000, 2000), (1, 1), (130, 64), (0, 9), (64, 130), (17, 0)] if big else
                [(120, 120), (1, 1), (33, 16), (0, 9), (16, 33), (17, 0)])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_gradients_repeat_bitwise(device, causal):
    lengths = _invariance_lengths(device)
    pairs = [lengths["target"], lengths["skewed"]] + lengths["neighbours"]
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v, dout, cu_q, cu_k = make_pack(*zip(*pairs), 8, 2, 128, device, dtype, seed=6)
    first, lse = run(q, k, v, dout, cu_q, cu_k, causal=causal)
    for _ in range(2):
        again, lse2 = run(q, k, v, dout, cu_q, cu_k, causal=causal)
        for name, a, b in zip(("out", "dq", "dk", "dv"), first, again):
            assert torch.equal(a, b), f"{name} differs between runs"
        assert torch.equal(lse, lse2)


def _rows(cu, position):
    return slice(int(cu[position]), int(cu[position + 1]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(4, 2, 64), (8, 2, 128)], ids=lambda h: f"hq{h[0]}-hk{h[1]}-d{h[2]}")
def test_pack_invariance(device, causal, heads):
    # A sequence's output, LSE and gradients are bitwise the same alone and in packs with other sequences before
    # and after it, in any order.
    hq, hk, d = heads
    lengths = _invariance_lengths(device)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    targets = [sequence(*lengths["target"], hq, hk, d, seed=10), sequence(*lengths["skewed"], hq, hk, d, seed=11)]
    others = [sequence(sq, sk, hq, hk, d, seed=20 + i) for i, (sq, sk) in enumerate(lengths["neighbours"])]
    arrangements = [
        [targets[0]], [targets[1]],
        [targets[0], targets[1]] + others,
        others[:3] + [targets[1]] + others[3:] + [targets[0]],
        list(reversed(others)) + [targets[0], targets[1]],
        [others[2], targets[1], others[0], targets[0], others[5]],
    ]
    seen = [None, None]
    for arrangement in arrangements:
        q, k, v, dout, cu_q, cu_k = assemble(arrangement, device, dtype)
        (out, dq, dk, dv), lse = run(q, k, v, dout, cu_q, cu_k, causal=causal)
        for t, target in enumerate(targets):
            where = [i for i, s in enumerate(arrangement) if s is target]
            if not where:
                continue
            rq, rk = _rows(cu_q, where[0]), _rows(cu_k, where[0])
            bits = [out[rq], lse[:, rq], dq[rq], dk[rk], dv[rk]]
            if seen[t] is None:
                seen[t] = bits
                continue
            for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), bits, seen[t]):
                assert torch.equal(a, b), f"target {t} at position {where[0]} of {len(arrangement)}: {name} differs"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_a_sequence_in_a_pack_has_the_bits_of_the_fixed_length_call(device, causal):
    # Each sequence is computed as the batch-1 problem of its lengths (its own unit template): the same bits as
    # dash_attn.attention on that sequence alone.
    big = device == "cuda"
    pairs = [(700, 700), (300, 900), (900, 300), (1, 64)] if big else [(70, 70), (30, 90), (90, 30), (1, 16)]
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v, dout, cu_q, cu_k = make_pack(*zip(*pairs), 8, 2, 64, device, dtype, seed=7)
    packed, lse = run(q, k, v, dout, cu_q, cu_k, causal=causal)
    for s, (rq, rk) in enumerate(slices(cu_q, cu_k)):
        leaves = [t.detach().clone()[None].requires_grad_(True) for t in (q[rq], k[rk], v[rk])]
        out, lse1 = dash_attn.attention(*leaves, causal=causal, return_lse=True)
        out.backward(dout[rq][None])
        fixed = [out.detach()[0]] + [t.grad[0] for t in leaves]
        for name, a, b, rows in zip(("out", "dq", "dk", "dv"), packed, fixed, (rq, rq, rk, rk)):
            assert torch.equal(a[rows], b), f"sequence {s} {pairs[s]}: {name} differs from the fixed-length call"
        assert torch.equal(lse[:, rq], lse1[0]), f"sequence {s}: lse differs from the fixed-length call"


@CUDA_SKIP
@pytest.mark.parametrize("mask", ["causal", "right-window", "window", "left-window"])
def test_forward_bits_do_not_depend_on_the_query_tile_height(mask):
    # At head dim 64 a fixed-length forward with at most 1024 queries under a mask that hides keys only right of each
    # row's visible ones (causal, a window without a left side), every row seeing a key, runs 128-row Q tiles (two
    # consumer warpgroups), a varlen pack always 192-row tiles (dash::fwd_warpgroups_for): a row visits the same KV
    # tiles in the same order either way, and the tiles only the taller tile visits, entirely masked for the row,
    # must leave its O and LSE bit for bit as they were. Windows with a left side, and rows without keys (more
    # queries than keys), run 192-row tiles in both (with two warpgroups windows' bits differed). Lengths around the
    # tile heights and the 1024 switch, both sides 1 and 2 included; bits compared as integers (the sign of a zero
    # counts).
    causal = mask == "causal"
    window = {"causal": (-1, -1), "right-window": (-1, 30), "window": (100, 30), "left-window": (257, -1)}[mask]
    pairs = [(1, 1), (2, 2), (1, 300), (2, 129), (127, 127), (129, 300), (191, 191), (193, 193), (300, 129),
             (700, 700), (1024, 1024), (1023, 1100), (1025, 1025)]
    for i, (sq, sk) in enumerate(pairs):
        q, k, v, _, cu_q, cu_k = make_pack([sq], [sk], 8, 2, 64, "cuda", torch.bfloat16, seed=50 + i)
        with torch.no_grad():
            packed, lse_packed = dash_attn.attention_varlen(q, k, v, cu_q, cu_k, causal=causal, window_size=window,
                                                            return_lse=True)
            fixed, lse_fixed = dash_attn.attention(q[None], k[None], v[None], causal=causal, window_size=window,
                                                   return_lse=True)
        assert torch.equal(packed.view(torch.int16), fixed[0].view(torch.int16)), \
            f"{mask} {sq} x {sk}: O differs between the tile heights"
        assert torch.equal(lse_packed.view(torch.int32), lse_fixed[0].view(torch.int32)), \
            f"{mask} {sq} x {sk}: LSE differs between the tile heights"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("where", ["q", "k", "v", "dout"])
def test_nan_in_a_neighbour_does_not_reach_a_sequence(device, causal, where):
    big = device == "cuda"
    lengths = [(300, 300), (100, 250), (250, 100), (300, 300)] if big else [(40, 40), (13, 30), (30, 13), (40, 40)]
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    seqs = [sequence(sq, sk, 4, 2, 64, seed=30 + i) for i, (sq, sk) in enumerate(lengths)]
    clean = run(*assemble(seqs, device, dtype), causal=causal)
    index = ("q", "k", "v", "dout").index(where)
    poisoned = [list(s) for s in seqs]
    for s in (0, 2):  # the neighbours of sequence 1 and 3: every row of theirs
        poisoned[s][index] = torch.full_like(poisoned[s][index], float("nan"))
    q, k, v, dout, cu_q, cu_k = assemble(poisoned, device, dtype)
    dirty = run(q, k, v, dout, cu_q, cu_k, causal=causal)
    for s in (1, 3):
        rq, rk = _rows(cu_q, s), _rows(cu_k, s)
        for name, a, b, rows in zip(("out", "dq", "dk", "dv"), clean[0], dirty[0], (rq, rq, rk, rk)):
            assert torch.equal(a[rows], b[rows]), f"NaN in {where} of a neighbour reached sequence {s}'s {name}"
        assert torch.equal(clean[1][:, rq], dirty[1][:, rq]), f"NaN in {where} reached sequence {s}'s lse"


# ---- the pack cache, CUDA lengths, graphs and compile ------------------------------------------------------

def test_packs_are_cached_and_bounded():
    q, k, v, dout, cu_q, cu_k = make_pack([5, 9], [7, 3], 2, 1, 64, seed=8)
    dash_attn.attention_varlen(q, k, v, cu_q, cu_k)
    entries = dict(_torch_ops._packs)
    dash_attn.attention_varlen(q, k, v, cu_q.clone(), cu_k.clone())  # equal lengths, another tensor: same pack
    assert dict(_torch_ops._packs) == entries
    for i in range(_torch_ops.PACK_CACHE_SIZE + 6):
        cq = torch.tensor([0, 1 + i % 13, 14], dtype=torch.int32)
        ck = torch.tensor([0, i % 10, 10], dtype=torch.int32)
        dash_attn.attention_varlen(q[:14], k[:10], v[:10], cq, ck, causal=bool(i % 2))
    assert len(_torch_ops._packs) == _torch_ops.PACK_CACHE_SIZE


def test_the_pack_handle():
    problem = _abi.make_problem(3, 4, 2, 0, 0, 64, True)
    pack = _abi.Pack(problem, [0, 5, 5, 12], [0, 2, 9, 9])
    full = pack.problem()
    assert (full.batch, full.seqlen_q, full.seqlen_k, full.heads_q, full.mask_kind) == (3, 7, 7, 4, _abi.DASH_MASK_CAUSAL)
    assert pack.rows() == (12, 9)
    pack.close()
    pack.close()  # idempotent
    with pytest.raises(ValueError, match="cu_seqlens_k must hold batch \\+ 1 = 4 int32 values, got 3"):
        _abi.Pack(problem, [0, 5, 5, 12], [0, 2, 9])
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\]"):
        _abi.Pack(problem, [0, 5, 4, 12], [0, 2, 9, 9])


@CUDA_SKIP
def test_cuda_cu_seqlens_give_the_bits_of_cpu_ones():
    lens_q, lens_k = mixes("cuda")["long-and-short"]
    q, k, v, dout, cu_q, cu_k = make_pack(lens_q, lens_k, 4, 2, 128, "cuda", torch.bfloat16, seed=9)
    host, _ = run(q, k, v, dout, cu_q, cu_k, causal=True)
    device, _ = run(q, k, v, dout, cu_q.cuda(), cu_k.cuda(), causal=True)
    for a, b in zip(host, device):
        assert torch.equal(a, b)


@CUDA_SKIP
def test_cuda_graph_capture_replays_the_same_bits():
    lens_q, lens_k = mixes("cuda")["long-and-short"]
    q, k, v, dout, cu_q, cu_k = make_pack(lens_q, lens_k, 8, 2, 128, "cuda", torch.bfloat16, seed=10)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))

    def step():
        for t in (q, k, v):
            t.grad = None
        dash_attn.attention_varlen(q, k, v, cu_q, cu_k, causal=True).backward(dout)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # makes the pack and the plan outside capture
    torch.cuda.current_stream().wait_stream(s)
    eager = [t.grad.clone() for t in (q, k, v)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(eager, (q.grad, k.grad, v.grad)):
        assert torch.equal(a, b)


@CUDA_SKIP
def test_capturing_a_new_pack_is_refused_with_a_reason():
    q, k, v, _, cu_q, cu_k = make_pack([13, 29], [31, 7], 4, 2, 64, "cuda", torch.bfloat16, seed=11)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="run the step once eagerly"):
        with torch.cuda.graph(graph):
            dash_attn.attention_varlen(q, k, v, cu_q, cu_k)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_has_no_graph_breaks(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v, _, cu_q, cu_k = make_pack([20, 3, 41], [17, 30, 41], 4, 2, 64, device, dtype, seed=12)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))

    @torch.compile(backend="aot_eager", fullgraph=True)
    def step(q, k, v):
        return dash_attn.attention_varlen(q, k, v, cu_q, cu_k, 41, 41, causal=True).float().square().sum()

    step(q, k, v).backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


def test_opcheck():
    q, k, v, _, cu_q, cu_k = make_pack([7, 0, 12], [9, 4, 12], 2, 1, 64, seed=13)
    torch.library.opcheck(torch.ops.dash_attn.varlen_fwd.default,
                          (q, k, v, cu_q, cu_k, 12, 12, True, 0.2, True, "auto"))


# ---- errors ------------------------------------------------------------------------------------------------

def _args():
    q, k, v, _, cu_q, cu_k = make_pack([4, 6], [5, 5], 2, 2, 64, seed=14)
    return dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=6, max_seqlen_k=5)


I32 = dict(dtype=torch.int32)


@pytest.mark.parametrize("change, error, message", [
    (dict(q=torch.randn(10, 128)), ValueError, r"q must be 3-D \(total_q, heads, head_dim\)"),
    (dict(k=torch.randn(1, 10, 2, 64)), ValueError, r"k must be 3-D \(total_k, heads, head_dim\)"),
    (dict(v=torch.randn(10, 2, 64, dtype=torch.float64)), ValueError, "v has dtype"),
    (dict(v=torch.randn(9, 2, 64)), ValueError, "k shape \\(10, 2, 64\\) and v shape \\(9, 2, 64\\) differ"),
    (dict(q=torch.randn(10, 3, 64)), ValueError, "multiple of k heads"),
    (dict(q=torch.randn(10, 2, 80), k=torch.randn(10, 2, 80), v=torch.randn(10, 2, 80)), ValueError,
     "head_dim 80 is not supported"),
    (dict(q=torch.randn(10, 2, 128)), ValueError, "differ in head_dim"),
    (dict(cu_seqlens_q=[0, 4, 10]), TypeError, "cu_seqlens_q must be a torch.Tensor"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 10])), ValueError, "cu_seqlens_q must have dtype torch.int32"),
    (dict(cu_seqlens_k=torch.tensor([[0, 5, 10]], **I32)), ValueError, "cu_seqlens_k must be 1-D of length batch"),
    (dict(cu_seqlens_q=torch.tensor([10], **I32)), ValueError, "cu_seqlens_q must be 1-D of length batch"),
    (dict(cu_seqlens_k=torch.tensor([0, 5, 5, 10], **I32)), ValueError,
     r"cu_seqlens_q \(length 3\) and cu_seqlens_k \(length 4\)"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 9], **I32)), ValueError,
     r"cu_seqlens_q\[-1\] = 9 must equal the rows of q, q.shape\[0\] = 10"),
    (dict(cu_seqlens_k=torch.tensor([0, 5, 11], **I32)), ValueError, r"cu_seqlens_k\[-1\] = 11 must equal"),
    (dict(cu_seqlens_q=torch.tensor([0, 11, 10], **I32)), ValueError, r"cu_seqlens_q\[2\]"),
    (dict(cu_seqlens_k=torch.tensor([2, 5, 10], **I32)), ValueError, r"cu_seqlens_k\[0\]"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 10], dtype=torch.int32, device="meta")), ValueError,
     "cu_seqlens_q is on meta but q is on cpu"),
    (dict(max_seqlen_q=5), ValueError, r"max_seqlen_q = 5 is less than the longest sequence, 6 rows \(sequence 1"),
    (dict(max_seqlen_k=4), ValueError, r"max_seqlen_k = 4 is less than the longest sequence, 5 rows \(sequence 0"),
    (dict(max_seqlen_q=-1), ValueError, "max_seqlen_q must be >= 0"),
    (dict(max_seqlen_k=5.0), TypeError, "max_seqlen_k must be an int"),
    (dict(schedule="fastest"), ValueError, "schedule 'fastest'"),
    (dict(softmax_scale=0.0), ValueError, "softmax_scale"),
    (dict(window_size=(-2, 0)), ValueError, "window_size entries must be >= 0"),
    (dict(causal=True, window_size=(3, 2)), ValueError, r"causal=True with window_size\[1\] = 2"),
    (dict(sm_margin=200), ValueError, "sm_margin must be in"),
    (dict(deterministic=False), ValueError, "deterministic=False is not available on CPU"),
])
def test_bad_arguments_are_named(change, error, message):
    args = _args()
    args.update(change)
    with pytest.raises(error, match=message):
        dash_attn.attention_varlen(**args)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(dropout_p=0.1), ValueError, "dropout_p must be 0.0"),
    (dict(softcap=30.0), ValueError, "softcap must be 0.0"),
    (dict(alibi_slopes=torch.ones(2)), ValueError, "alibi_slopes must be None"),
    (dict(return_attn_probs=True), ValueError, "return_attn_probs=True is not supported"),
    (dict(block_table=torch.zeros(2, 1, **I32)), ValueError, "block_table must be None"),
    (dict(max_seqlen_q=None), TypeError, "max_seqlen_q must be an int"),
    (dict(deterministic=False), ValueError, "deterministic=False is not available on CPU"),
    (dict(window_size=(3, -2), deterministic=True), ValueError, "window_size entries must be >= 0"),
])
def test_flash_attn_varlen_func_refuses_what_it_cannot_match(kwargs, error, message):
    args = dict(_args(), deterministic=True)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        dash_attn.flash_attn_varlen_func(**args)


def test_flash_attn_varlen_func_is_flash_attns_signature():
    import inspect
    params = list(inspect.signature(dash_attn.flash_attn_varlen_func).parameters.values())
    assert [p.name for p in params] == [
        "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "dropout_p", "softmax_scale",
        "causal", "window_size", "softcap", "alibi_slopes", "deterministic", "return_attn_probs", "block_table",
        "schedule", "sm_margin"]
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    assert defaults == dict(dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                            schedule="auto", sm_margin=0)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[-2:])
