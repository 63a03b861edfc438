# SPDX-License-Identifier: Apache-2.0
"""The contract, on CPU and (where present) CUDA: rows that see no key, NaN / Inf propagation, the
scaled_dot_product_attention drop-in against PyTorch's own function, one contract for both devices, size limits
checked before any work, and (with --long, CUDA) sequences of a million tokens."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import dash_attn  # noqa: E402
from dash_attn import _abi  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and bool(_abi.LIB.dash_cuda_available())
DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])
DTYPE = {"cpu": torch.float32, "cuda": torch.bfloat16}


def make(device, *shape, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, device=device, generator=g).to(DTYPE[device])


def grads(fn, tensors, dout):
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*leaves)
    out.backward(dout)
    return [out.detach()] + [t.grad for t in leaves]


# ---- rows that see no key ----------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("hdim", [64, 96, 128])
def test_rows_that_see_no_key_give_zero_output_minus_inf_lse_and_zero_gradients(device, hdim):
    # Causal, bottom-right aligned, seqlen_q > seqlen_k: query i sees key j iff j <= i - (200 - 70), so the first
    # 130 rows see nothing.
    q, k, v, dout = make(device, 2, 200, 4, hdim), make(device, 2, 70, 2, hdim), make(device, 2, 70, 2, hdim), \
        make(device, 2, 200, 4, hdim, seed=1)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = dash_attn.attention(*leaves, causal=True, return_lse=True)
    out.backward(dout)
    blind = slice(0, 130)
    assert torch.equal(out[:, blind], torch.zeros_like(out[:, blind]))
    assert torch.all(lse[:, :, blind] == float("-inf"))
    assert torch.equal(leaves[0].grad[:, blind], torch.zeros_like(leaves[0].grad[:, blind]))
    for t in (out, leaves[0].grad, leaves[1].grad, leaves[2].grad):
        assert torch.isfinite(t).all()
    assert torch.isfinite(lse[:, :, 130:]).all()


# ---- NaN and Inf -------------------------------------------------------------------------------------------

def math_sdpa(q, k, v, causal):
    """PyTorch's math backend on (batch, seqlen, heads, dim) tensors, in float64."""
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*(t.double().transpose(1, 2) for t in (q, k, v)), is_causal=causal)
    return out.transpose(1, 2)


def visible_only(q, k, v, causal):
    """float64 attention in which query i reads only the keys it sees (row by row): a NaN at a key or value
    reaches exactly the queries that see it."""
    sq, sk = q.shape[1], k.shape[1]
    rows = []
    for i in range(sq):
        last = i + sk - sq if causal else sk - 1
        s = torch.einsum("bhd,bkhd->bhk", q[:, i].double(), k[:, :last + 1].double()) / math.sqrt(q.shape[-1])
        rows.append(torch.einsum("bhk,bkhd->bhd", torch.softmax(s, -1), v[:, :last + 1].double()))
    return torch.stack(rows, 1)


def nonfinite_patterns(fn, q, k, v, dout):
    return [(torch.isnan(t), torch.isposinf(t), torch.isneginf(t)) for t in grads(fn, (q, k, v), dout)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("where", ["q", "k", "v", "dout"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_and_inf_propagate_as_in_pytorch_math_sdpa(device, causal, where, value):
    # One non-finite input element. Full mask: every output and gradient element is non-finite exactly where
    # PyTorch's math backend has a non-finite value, and for a NaN input it is NaN exactly where the math
    # backend's is. (From an Inf, an element may be Inf here and NaN there: the flash equations form
    # delta = rowsum(dO * O) where the math backend sums P * dP, and inf - inf falls differently.) Causal: a value reaches at least every query that sees it and never
    # more than the math backend, which also spreads it through the zero probabilities of masked keys (0 * NaN);
    # dash_attn never reads a KV tile a query tile cannot see, but may spread it inside a partly masked tile.
    q, k, v, dout = (make(device, 1, 150, 2, 64, seed=s) for s in range(4))
    inputs = {"q": q, "k": k, "v": v, "dout": dout}
    row = {"q": 77, "k": 40, "v": 40, "dout": 77}[where]
    inputs[where][0, row, 1, 5] = value
    q, k, v, dout = inputs["q"], inputs["k"], inputs["v"], inputs["dout"]
    ours = nonfinite_patterns(lambda q, k, v: dash_attn.attention(q, k, v, causal=causal), q, k, v, dout)
    math_ = nonfinite_patterns(lambda q, k, v: math_sdpa(q, k, v, causal), q, k, v, dout.double())
    if not causal:
        for name, a, m in zip(("out", "dq", "dk", "dv"), ours, math_):
            a_bad, m_bad = a[0] | a[1] | a[2], m[0] | m[1] | m[2]
            assert torch.equal(a_bad, m_bad), f"{name}: {int((a_bad != m_bad).sum())} elements differ in finiteness"
            if math.isnan(value):
                assert torch.equal(a[0], m[0]), f"{name}: {int((a[0] != m[0]).sum())} elements differ in NaN"
        return
    lower = nonfinite_patterns(lambda q, k, v: visible_only(q, k, v, True), q, k, v, dout.double())
    for name, a, m, lo in zip(("out", "dq", "dk", "dv"), ours, math_, lower):
        a_bad, m_bad, lo_bad = (x[0] | x[1] | x[2] for x in (a, m, lo))
        assert torch.all(a_bad >= lo_bad), f"{name}: a non-finite value missed a query that sees it"
        assert torch.all(a_bad <= m_bad), f"{name}: a non-finite value where PyTorch's math backend has none"


# ---- the scaled_dot_product_attention drop-in --------------------------------------------------------------

def sdpa_cases():
    # (query shape, key shape, is_causal, enable_gqa, scale)
    return [
        ((2, 4, 37, 64), (2, 4, 91, 64), False, False, None),    # L != S, full
        ((2, 4, 91, 64), (2, 4, 37, 64), False, False, None),
        ((2, 4, 65, 128), (2, 4, 65, 128), True, False, None),   # causal, L == S
        ((2, 4, 91, 64), (2, 4, 37, 64), True, False, None),     # causal, L > S: PyTorch's top-left alignment
        ((2, 6, 24, 128), (2, 2, 5, 128), True, True, None),     # ... with GQA, rows past S see every key
        ((2, 6, 50, 64), (2, 2, 70, 64), False, True, None),     # GQA
        ((2, 6, 70, 64), (2, 2, 70, 64), True, True, 0.3),       # GQA, causal, scale
        ((3, 33, 64), (3, 47, 64), False, False, None),          # 3-D: one head
        ((2, 3, 2, 20, 64), (2, 3, 2, 30, 64), False, False, None),  # extra batch dimension
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sdpa_cases(), ids=lambda c: f"{c[0]}x{c[1]}{'_causal' if c[2] else ''}")
def test_sdpa_matches_pytorch(device, case):
    qs, ks, causal, gqa, scale = case
    q, k, v, dout = make(device, *qs), make(device, *ks, seed=1), make(device, *ks, seed=2), make(device, *qs, seed=3)
    kwargs = dict(is_causal=causal, scale=scale, enable_gqa=gqa)
    ours = grads(lambda q, k, v: dash_attn.scaled_dot_product_attention(q, k, v, **kwargs), (q, k, v), dout)
    theirs = grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
                   (q.double(), k.double(), v.double()), dout.double())
    tol = dict(atol=2e-5, rtol=2e-5) if device == "cpu" else dict(atol=3e-2, rtol=3e-2)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, theirs):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a.double(), b, **tol, msg=lambda m: f"{name}: {m}")


def test_sdpa_refuses_what_it_cannot_match():
    q, k = torch.randn(2, 4, 30, 64), torch.randn(2, 4, 50, 64)
    sdpa = dash_attn.scaled_dot_product_attention
    # Top-left causal alignment with L < S: a window ending before dash_attn's diagonal, which it does not have.
    with pytest.raises(ValueError, match=r"is_causal=True with L < S \(query \(2, 4, 30, 64\)"):
        sdpa(q, k, k, is_causal=True)
    # Head counts differ: PyTorch refuses without enable_gqa=True, and so does the drop-in.
    kg = torch.randn(2, 2, 50, 64)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, kg, kg)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        sdpa(q, kg, kg)
    with pytest.raises(ValueError, match="attn_mask"):
        sdpa(q, k, k, attn_mask=torch.ones(30, 50, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout_p"):
        sdpa(q, k, k, dropout_p=0.1)
    # A value head dim Ev other than E runs where the kernel table has the pair (192 / 128; test_head_dim_v.py);
    # another is refused naming the value.
    with pytest.raises(ValueError, match=r"value head_dim 32 is not supported with query / key head_dim 64"):
        sdpa(q, k, torch.randn(2, 4, 50, 32))
    with pytest.raises(ValueError, match=r"key shape \(2, 4, 50, 64\) and value shape \(2, 4, 49, 64\) must match in all"):
        sdpa(q, k, torch.randn(2, 4, 49, 64))
    with pytest.raises(ValueError, match=r"at least 3 dimensions.*\(30, 64\)"):
        sdpa(q[0, 0], k[0, 0], k[0, 0])
    with pytest.raises(ValueError, match="scale"):
        sdpa(q, k, k, scale=-1.0)
    # Errors name the caller's shape as given, not the transposed one used inside.
    with pytest.raises(ValueError, match=r"head_dim 32 is not supported.*query shape \(2, 4, 30, 32\)"):
        sdpa(q[..., :32].contiguous(), k[..., :32].contiguous(), k[..., :32].contiguous())


# ---- one contract for CPU and CUDA -------------------------------------------------------------------------

def test_cpu_refuses_what_cuda_refuses():
    q = torch.randn(1, 16, 2, 32)
    with pytest.raises(ValueError, match="head_dim 32 is not supported"):
        dash_attn.attention(q, q, q)
    q = torch.randn(1, 16, 2, 64)
    with pytest.raises(ValueError, match="deterministic=False"):
        dash_attn.attention(q, q, q, deterministic=False)
    with pytest.raises(ValueError, match="deterministic=False"):
        dash_attn.check_determinism(q, q, q, runs=2, deterministic=False)
    # The C ABI's CPU backend applies the same contract.
    problem = _abi.Problem(batch=1, heads_q=1, heads_kv=1, seqlen_q=8, seqlen_k=8, head_dim=80,
                           mask_kind=_abi.DASH_MASK_FULL, window_left=-1, window_right=-1, head_dim_v=0)
    with pytest.raises(ValueError, match="head_dim: 80 is not supported"):
        _abi.check_problem(problem, True)
    assert _abi.SUPPORTED_HEAD_DIMS == (64, 96, 128, 256)  # the rows with head_dim_v = head_dim


# ---- limits before work ------------------------------------------------------------------------------------

def test_an_impossible_size_fails_before_any_planning_or_allocation():
    # 10M tokens: more Q tiles than the plan format indexes. The tensors are expanded views (no memory); the
    # refusal must come from the limit check, before a planner runs and before the output is allocated.
    base = torch.zeros(1, 1, 1, 64, requires_grad=True)
    huge = base.expand(1, 10_000_000, 1, 64)
    runs = _abi.LIB.dash_planner_runs()
    with pytest.raises(ValueError, match=r"seqlen_q: 10000000 needs 78125 Q tiles.*longest self-attention sequence"):
        dash_attn.attention(huge, huge, huge, causal=True)
    assert _abi.LIB.dash_planner_runs() == runs
    # The backward's kernel limit on (batch, query head) pairs, through the C ABI: refused for a backward,
    # accepted for a forward only.
    problem = _abi.Problem(batch=70000, heads_q=1, heads_kv=1, seqlen_q=64, seqlen_k=64, head_dim=64,
                           mask_kind=_abi.DASH_MASK_FULL, window_left=-1, window_right=-1, head_dim_v=0)
    with pytest.raises(ValueError, match="batch x heads_q = 70000"):
        _abi.check_problem(problem, True)
    _abi.check_problem(problem, False)
    assert _abi.LIB.dash_planner_runs() == runs


# ---- a million tokens (CUDA, --long) -----------------------------------------------------------------------

@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device: the long-sequence test is skipped")
def test_a_million_tokens_forward_and_backward(request):
    if not request.config.getoption("--long"):
        pytest.skip("the 1M-token test runs with --long (about a minute of device time)")
    # 2^20 + 17 tokens, 16 heads of 128: q, o, dq rows sit 2048 elements apart, so row offsets pass 2^31 elements
    # and any 32-bit index overflows; the length is not a multiple of any tile. Checked: sampled rows of O, LSE
    # and dQ, and the last keys' dK / dV, against float64 computed for those rows and keys only.
    torch.cuda.empty_cache()
    n, h, d = (1 << 20) + 17, 16, 128
    scale = 1 / math.sqrt(d)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(1, n, h, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.requires_grad_(True) for t in (q, k, v)]
    out, lse = dash_attn.attention(*leaves, causal=True, return_lse=True, schedule="ascending")
    out.backward(dout)
    dq, dk, dv = (t.grad for t in leaves)
    for name, t in (("out", out), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
        assert torch.isfinite(t).all(), f"{name} has non-finite values"

    # float64 copies as (heads, keys, dim), made once (34 GB): every reference row is a batched product with them.
    q, k, v = (t.detach() for t in (q, k, v))
    torch.cuda.empty_cache()
    k64, v64 = (t[0].double().transpose(0, 1).contiguous() for t in (k, v))

    def exact_row(i):
        """float64 P (heads, i + 1), LSE (heads) and O (heads, dim) of query row i (keys 0..i: causal, equal
        lengths)."""
        s = (q[0, i].double()[:, None, :] @ k64[:, :i + 1].transpose(1, 2))[:, 0] * scale
        lse_i = s.logsumexp(-1)
        p = torch.exp(s - lse_i[:, None])
        return p, lse_i, (p[:, None, :] @ v64[:, :i + 1])[:, 0]

    def close(a, b, what):
        err = ((a.double() - b).norm() / b.norm()).item()
        assert err < 2e-2, f"{what}: relative error {err:.3e}"

    sample = [0, 1, 63, 64, 65, 127, 128, 129, 65535, 65536, (1 << 20) - 1, 1 << 20, n - 2, n - 1]
    for i in sample:
        p, lse_i, o_i = exact_row(i)
        close(out[0, i], o_i, f"O row {i}")
        assert torch.allclose(lse[0, :, i].double(), lse_i, atol=2e-3, rtol=0), f"LSE row {i}"
        dp = (dout[0, i].double()[:, None, :] @ v64[:, :i + 1].transpose(1, 2))[:, 0]
        delta = (dout[0, i].double() * o_i).sum(-1)
        ds = p * (dp - delta[:, None])
        if i == 0:
            # Row 0 sees one key: its exact dQ is 0, and the flash equations leave the fp32 rounding of dP - delta
            # there (about 1e-6; scripts/single_key_gradients.py). A wrong index would give values of order 1.
            assert dq[0, 0].abs().max().item() < 1e-4, "dQ row 0"
            continue
        close(dq[0, i], (ds[:, None, :] @ k64[:, :i + 1])[:, 0] * scale, f"dQ row {i}")
    # dK / dV of the last keys: only the queries at or after them see them, so few rows are needed.
    keys = [n - 1, n - 2, n - 17, n - 129]
    dk_ref = {j: torch.zeros(h, d, dtype=torch.float64, device="cuda") for j in keys}
    dv_ref = {j: torch.zeros(h, d, dtype=torch.float64, device="cuda") for j in keys}
    for i in range(min(keys), n):
        p, _, o_i = exact_row(i)
        delta = (dout[0, i].double() * o_i).sum(-1)
        for j in keys:
            if j <= i:
                dp = (dout[0, i].double() * v64[:, j]).sum(-1)
                dk_ref[j] += (p[:, j] * (dp - delta))[:, None] * q[0, i].double() * scale
                dv_ref[j] += p[:, j, None] * dout[0, i].double()
    for j in keys:
        dk_j, dv_j = dk_ref[j], dv_ref[j]
        close(dk[0, j], dk_j, f"dK key {j}")
        close(dv[0, j], dv_j, f"dV key {j}")


# ---- head_dim_v: the kernel table's pairs (the torch-level behaviour: test_head_dim_v.py) -----------------------

def test_every_pair_of_the_kernel_table_is_accepted_and_others_are_refused_naming_the_field():
    """dash_problem.head_dim_v (C ABI, plan format version 2; 0 = head_dim): a (head_dim, head_dim_v) pair with a row
    of the kernel table runs; any other is refused before anything is planned, DASH_ERROR_UNSUPPORTED naming
    problem.head_dim when no row has the head dim and problem.head_dim_v when a row has it with another value head
    dim, listing the pairs."""
    pairs = {(r.head_dim, r.head_dim_v) for r in _abi.KERNEL_ROWS}
    assert {(64, 64), (96, 96), (128, 128), (192, 128), (256, 256)} <= pairs
    runs = _abi.LIB.dash_planner_runs()
    for d, dv in pairs:
        for head_dim_v in {dv, 0 if dv == d else dv}:
            problem = _abi.make_problem(1, 2, 2, 64, 64, d, True)
            problem.head_dim_v = head_dim_v
            _abi.check_problem(problem, False)
            _abi.check_problem(problem, True, cpu=True)  # the CPU backend's backward runs every row
    for d, dv, field in ((128, 64, "problem.head_dim_v: 64 is not supported with head_dim 128"),
                         (192, 0, r"problem.head_dim_v: 192 \(0: equal to head_dim\) is not supported"),
                         (192, 192, "problem.head_dim_v: 192 is not supported with head_dim 192"),
                         (80, 0, "problem.head_dim: 80 is not supported")):
        problem = _abi.make_problem(1, 2, 2, 64, 64, d, True)
        problem.head_dim_v = dv
        for needs_backward, cpu in ((False, False), (True, False), (True, True)):
            with pytest.raises(ValueError, match=field + r".*64, 96, 128, 192/128 and 256"):
                _abi.check_problem(problem, needs_backward, cpu)
    assert _abi.LIB.dash_planner_runs() == runs


def test_every_row_runs_both_passes_and_the_size_limits_apply_to_all():
    """Every row of the kernel table (256 and 192 / 128 included) is accepted for the forward, the CPU backend's
    backward and the GPU backward; the size limits apply to all."""
    for row in _abi.KERNEL_ROWS:
        problem = _abi.make_problem(1, 2, 2, 64, 64, row.head_dim, True, head_dim_v=row.head_dim_v)
        _abi.check_problem(problem, False)
        _abi.check_problem(problem, True, cpu=True)
        _abi.check_problem(problem, True)
    too_long = _abi.make_problem(1, 1, 1, 10_000_000, 10_000_000, 192, True, head_dim_v=128)
    _abi.check_problem(too_long, False)
    with pytest.raises(ValueError, match="seqlen_q: 10000000 needs 156250 Q tiles"):
        _abi.check_problem(too_long, True, cpu=True)
