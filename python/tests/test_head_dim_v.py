# SPDX-License-Identifier: Apache-2.0
"""The kernel table's new rows through the Python package: v (and the output) with a head dim other than q and k's
(MLA-style 192 / 128) and head dim 256. The CPU backend and CUDA run both passes at these rows, against the float64
reference (attention_reference.py's error budget), deterministic gradients bitwise repeatable. A row without a
backward kernel (none in this build's table) would have a differentiated CUDA call refused at the forward. The output
shapes of the ops' fake (meta) implementations follow v's head dim. (The shape sweep, test_shape_sweep.py, runs these
rows over awkward lengths on both devices.)"""
import math
import types

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import dash_attn  # noqa: E402
from dash_attn import _abi, _torch_ops  # noqa: E402

import attention_reference as ref  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and bool(_abi.LIB.dash_cuda_available())
# The rows this file is about: those with a value head dim of their own or past 128 (192 / 128, 256), whose backward
# splits the head-dim columns between the MMA warpgroups.
NEW_ROWS = [(r.head_dim, r.head_dim_v) for r in _abi.KERNEL_ROWS if r.head_dim_v != r.head_dim or r.head_dim > 128]


def row_id(pair):
    return f"d{pair[0]}" if pair[0] == pair[1] else f"d{pair[0]}-{pair[1]}"


def tensors(b, sq, sk, hq, hk, d, dv, device="cpu", dtype=torch.float32, seed=0):
    """q, k (head dim d), v and dout (dv)."""
    g = torch.Generator(device=device).manual_seed(seed)
    mk = lambda s, h, w: torch.randn(b, s, h, w, device=device, generator=g).to(dtype)
    return mk(sq, hq, d), mk(sk, hk, d), mk(sk, hk, dv), mk(sq, hq, dv)


def test_the_new_rows_are_in_the_table_with_a_backward():
    assert NEW_ROWS == [(192, 128), (256, 256)]
    assert all(r.backward for r in _abi.KERNEL_ROWS)


# ---- the CPU backend: both passes at every row --------------------------------------------------------------

@pytest.mark.parametrize("pair", NEW_ROWS, ids=row_id)
@pytest.mark.parametrize("mask", [False, True, (7, 3)], ids=["full", "causal", "window7_3"])
@pytest.mark.parametrize("lengths", [(1, 1), (1, 2), (2, 1), (2, 2), (67, 130), (130, 67)],
                         ids=lambda x: f"{x[0]}x{x[1]}")
def test_cpu_backend_runs_both_passes_against_float64(pair, mask, lengths):
    d, dv = pair
    sq, sk = lengths
    q, k, v, dout = tensors(1, sq, sk, 2, 2, d, dv, seed=sq * 31 + sk)
    masking = dict(window_size=mask) if isinstance(mask, tuple) else dict(causal=mask)
    ours = ref.forward_backward(lambda q, k, v: dash_attn.attention(q, k, v, **masking), q, k, v, dout)
    assert ours[0].shape == (1, sq, 2, dv) and ours[3].shape == v.shape
    ref.check_against_reference(ours, q, k, v, dout, mask, 1 / math.sqrt(d), torch.float32,
                                label=f"{row_id(pair)} {mask} {sq}x{sk}")


@pytest.mark.parametrize("schedule", ["auto", "ascending", "shift", "symmetric-shift"])
def test_cpu_backend_gqa_batches_and_schedules_against_float64(schedule):
    q, k, v, dout = tensors(2, 150, 190, 6, 2, 192, 128, seed=3)
    fn = lambda q, k, v: dash_attn.attention(q, k, v, causal=True, schedule=schedule)
    ours = ref.forward_backward(fn, q, k, v, dout)
    ref.check_against_reference(ours, q, k, v, dout, True, 1 / math.sqrt(192), torch.float32, label=schedule)
    again = ref.forward_backward(fn, q, k, v, dout)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, again):
        assert torch.equal(a, b), f"{schedule}: {name} differs between two runs"


def test_the_default_scale_is_that_of_q_and_ks_head_dim():
    q, k, v, _ = tensors(1, 20, 30, 2, 2, 192, 128)
    out, lse = dash_attn.attention(q, k, v, return_lse=True)
    assert lse.shape == (1, 2, 20)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / math.sqrt(192)
    torch.testing.assert_close(lse.double(), s.logsumexp(-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, dash_attn.attention(q, k, v, softmax_scale=192 ** -0.5), atol=0, rtol=0)


def test_varlen_and_padding_mask_take_the_value_head_dim():
    # Each sequence of a pack is the batch-1 problem of its own lengths: its bits equal attention() on it alone.
    lengths_q, lengths_k = [5, 1, 0, 40, 2], [7, 2, 3, 33, 1]
    cu_q = torch.tensor([0] + list(torch.tensor(lengths_q).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(lengths_k).cumsum(0)), dtype=torch.int32)
    g = torch.Generator().manual_seed(11)
    q = torch.randn(int(cu_q[-1]), 4, 192, generator=g)
    k = torch.randn(int(cu_k[-1]), 2, 192, generator=g)
    v = torch.randn(int(cu_k[-1]), 2, 128, generator=g)
    dout = torch.randn(int(cu_q[-1]), 4, 128, generator=g)
    packed = ref.forward_backward(lambda q, k, v: dash_attn.attention_varlen(q, k, v, cu_q, cu_k, causal=True),
                                  q, k, v, dout)
    assert packed[0].shape == (int(cu_q[-1]), 4, 128) and packed[3].shape == v.shape
    for s in range(len(lengths_q)):
        rq, rk = slice(int(cu_q[s]), int(cu_q[s + 1])), slice(int(cu_k[s]), int(cu_k[s + 1]))
        if lengths_q[s] == 0 or lengths_k[s] == 0:
            continue
        alone = ref.forward_backward(lambda q, k, v: dash_attn.attention(q, k, v, causal=True),
                                     q[None, rq], k[None, rk], v[None, rk], dout[None, rq])
        for name, a, b, rows in zip(("out", "dq", "dk", "dv"), packed, alone, (rq, rq, rk, rk)):
            assert torch.equal(a[rows], b[0]), f"sequence {s}: {name}"
    # Sequence 2 has no queries: its keys get zero gradients.
    assert torch.equal(packed[3][int(cu_k[2]):int(cu_k[3])], torch.zeros(3, 2, 128))

    # A padded batch: real tokens as the varlen path, padded output rows zero with v's head dim.
    mask = torch.tensor([[True] * 9 + [False] * 3, [False] * 2 + [True] * 10])
    qb, kb, vb, dob = tensors(2, 12, 12, 4, 2, 192, 128, seed=12)
    out = dash_attn.attention(qb, kb, vb, key_padding_mask=mask, causal=True)
    assert out.shape == (2, 12, 4, 128)
    assert torch.equal(out[0, 9:], torch.zeros(3, 4, 128)) and torch.equal(out[1, :2], torch.zeros(2, 4, 128))
    torch.testing.assert_close(out[0, :9], dash_attn.attention(qb[:1, :9], kb[:1, :9], vb[:1, :9], causal=True)[0],
                               atol=0, rtol=0)


def test_flash_attn_entry_points_take_the_value_head_dim():
    q, k, v, dout = tensors(2, 33, 47, 4, 2, 192, 128, seed=5)
    ours = ref.forward_backward(lambda q, k, v: dash_attn.flash_attn_func(q, k, v, causal=True, deterministic=True),
                                q, k, v, dout)
    ref.check_against_reference(ours, q, k, v, dout, True, 192 ** -0.5, torch.float32, label="flash_attn_func")
    cu_q = torch.tensor([0, 33, 66], dtype=torch.int32)
    cu_k = torch.tensor([0, 47, 94], dtype=torch.int32)
    out = dash_attn.flash_attn_varlen_func(q.reshape(66, 4, 192), k.reshape(94, 2, 192), v.reshape(94, 2, 128), cu_q,
                                           cu_k, 33, 47, causal=True, deterministic=True)
    assert out.shape == (66, 4, 128)
    assert torch.equal(out.view(2, 33, 4, 128), ours[0])


def test_sdpa_with_a_value_head_dim_matches_pytorch():
    g = torch.Generator().manual_seed(9)
    q, k = torch.randn(2, 4, 30, 192, generator=g), torch.randn(2, 2, 50, 192, generator=g)
    v, dout = torch.randn(2, 2, 50, 128, generator=g), torch.randn(2, 4, 30, 128, generator=g)
    kwargs = dict(enable_gqa=True)
    ours = ref.forward_backward(lambda q, k, v: dash_attn.scaled_dot_product_attention(q, k, v, **kwargs),
                                q, k, v, dout)
    theirs = ref.forward_backward(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
                                  q.double(), k.double(), v.double(), dout.double())
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, theirs):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a.double(), b, atol=2e-5, rtol=2e-5, msg=lambda m: f"{name}: {m}")


# ---- refusals ---------------------------------------------------------------------------------------------

def test_a_value_head_dim_without_a_row_is_refused_naming_v():
    for d, dv, message in ((128, 64, r"v head_dim 64 is not supported with q / k head_dim 128 \(supported "
                                     r"head_dim/head_dim_v pairs: 64, 96, 128, 192/128 and 256"),
                           (192, 192, "v head_dim 192 is not supported with q / k head_dim 192"),
                           (80, 80, "head_dim 80 is not supported")):
        q, k, v, _ = tensors(1, 8, 8, 2, 2, d, dv)
        with pytest.raises(ValueError, match=message):
            dash_attn.attention(q, k, v)
    q, k, v, _ = tensors(1, 8, 8, 2, 2, 192, 128)
    with pytest.raises(ValueError, match=r"k shape \(1, 8, 2, 192\) and v shape \(1, 7, 2, 128\) differ"):
        dash_attn.attention(q, k, v[:, :7])
    with pytest.raises(ValueError, match="v head_dim 64 is not supported with q / k head_dim 192"):
        dash_attn.attention_varlen(q[0], k[0], v[0, :, :, :64].contiguous(), torch.tensor([0, 8], dtype=torch.int32),
                                   torch.tensor([0, 8], dtype=torch.int32))


def test_the_forward_would_refuse_a_differentiated_gpu_call_of_a_row_without_a_backward(monkeypatch):
    """The rule without a GPU: refuse_backward_without_kernel, which attention() and attention_varlen() call before the
    op, refuses a CUDA call that needs a backward at a row without one (none in this build's table: the rule is shown
    on a row made to look like one), and nothing else."""
    def like(shape, cuda=True):
        return types.SimpleNamespace(shape=shape, is_cuda=cuda)  # what the rule reads of a tensor
    for r in _abi.KERNEL_ROWS:  # every row of this build has a backward: nothing is refused
        _torch_ops.refuse_backward_without_kernel(like((1, 8, 2, r.head_dim)), like((1, 8, 2, r.head_dim)),
                                                  like((1, 8, 2, r.head_dim_v)), True)
    monkeypatch.setattr(_abi, "kernel_row", lambda d, dv: types.SimpleNamespace(head_dim=d, head_dim_v=dv,
                                                                                backward=False))
    q, k, v = like((1, 8, 2, 192)), like((1, 8, 2, 192)), like((1, 8, 2, 128))
    with pytest.raises(ValueError, match=r"head_dim 192/128 has a forward kernel only in this build.*requires grad"):
        _torch_ops.refuse_backward_without_kernel(q, k, v, True)
    _torch_ops.refuse_backward_without_kernel(q, k, v, False)  # not differentiated: runs
    cpu = like((1, 8, 2, 192), cuda=False)
    _torch_ops.refuse_backward_without_kernel(cpu, cpu, like((1, 8, 2, 128), cuda=False), True)  # CPU backend


def test_a_differentiated_cpu_call_at_head_dim_256_runs_both_passes():
    q, k, v, dout = tensors(1, 10, 12, 2, 2, 256, 256)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    dash_attn.attention(*leaves, causal=True).backward(dout)
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in leaves)


# ---- fake (meta) implementations and torch.compile ---------------------------------------------------------

def test_fake_implementations_give_the_value_head_dim():
    q, k = torch.empty(2, 17, 4, 192, device="meta"), torch.empty(2, 23, 2, 192, device="meta")
    v = torch.empty(2, 23, 2, 128, device="meta")
    o, lse = torch.ops.dash_attn.fwd(q, k, v, True, 0.1, True, "auto")
    assert o.shape == (2, 17, 4, 128) and lse.shape == (2, 4, 17)
    dq, dk, dv = torch.ops.dash_attn.bwd(o, q, k, v, o, lse, True, 0.1, True, "auto")
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    cu = torch.empty(3, dtype=torch.int32, device="meta")
    o, lse = torch.ops.dash_attn.varlen_fwd(q[0], k[0], v[0], cu, cu, 17, 23, True, 0.1, True, "auto")
    assert o.shape == (17, 4, 128) and lse.shape == (4, 17)
    grads = torch.ops.dash_attn.varlen_bwd(o, q[0], k[0], v[0], o, lse, cu, cu, 17, 23, True, 0.1, True, "auto")
    assert [g.shape for g in grads] == [q[0].shape, k[0].shape, v[0].shape]


def test_opcheck_with_a_value_head_dim():
    q, k, v, _ = tensors(1, 24, 40, 2, 1, 192, 128)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    torch.library.opcheck(torch.ops.dash_attn.fwd.default, (q, k, v, True, 0.2, True, "auto"))


def test_torch_compile_with_a_value_head_dim_has_no_graph_breaks():
    q, k, v, _ = tensors(1, 40, 40, 2, 2, 192, 128)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))

    @torch.compile(backend="aot_eager", fullgraph=True)
    def step(q, k, v):
        return dash_attn.attention(q, k, v, causal=True).square().sum()

    step(q, k, v).backward()
    eager = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    dash_attn.attention(*eager, causal=True).square().sum().backward()
    for a, b in zip((q, k, v), eager):
        assert torch.equal(a.grad, b.grad)


# ---- CUDA: both passes of the new rows ---------------------------------------------------------------------------

def grads_of(fn, q, k, v, dout):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(dout)
    return [out.detach()] + [t.grad for t in leaves]


@pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device or no CUDA kernels: the CUDA head-dim tests are skipped")
@pytest.mark.parametrize("pair", NEW_ROWS, ids=row_id)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_cuda_rows_run_both_passes_against_float64(pair, causal, dtype):
    d, dv = pair
    q, k, v, dout = tensors(2, 300, 257, 4, 2, d, dv, device="cuda", dtype=dtype, seed=7)
    scale = d ** -0.5
    for deterministic in (True, False):
        fn = lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, deterministic=deterministic)
        ours = grads_of(fn, q, k, v, dout)
        assert ours[0].shape == (2, 300, 4, dv) and ours[3].shape == v.shape
        ref.check_against_reference(ours, q, k, v, dout, causal, scale, dtype,
                                    label=f"{row_id(pair)} {'det' if deterministic else 'nondet'}")
        if deterministic:
            again = grads_of(fn, q, k, v, dout)
            for name, a, b in zip(("out", "dq", "dk", "dv"), ours, again):
                assert torch.equal(a, b), f"{row_id(pair)}: {name} differs between two deterministic runs"

    # Varlen: both passes over a pack of the two batch entries, each sequence against the float64 reference.
    cu_q = torch.tensor([0, 300, 600], dtype=torch.int32)
    cu_k = torch.tensor([0, 257, 514], dtype=torch.int32)
    packed = grads_of(lambda q, k, v: dash_attn.attention_varlen(q, k, v, cu_q, cu_k, causal=causal),
                      q.reshape(600, 4, d), k.reshape(514, 2, d), v.reshape(514, 2, dv), dout.reshape(600, 4, dv))
    for i in range(2):
        rows_q, rows_k = slice(300 * i, 300 * (i + 1)), slice(257 * i, 257 * (i + 1))
        mine = [t[rows].unsqueeze(0) for t, rows in zip(packed, (rows_q, rows_q, rows_k, rows_k))]
        ref.check_against_reference(mine, q[i:i + 1], k[i:i + 1], v[i:i + 1], dout[i:i + 1], causal, scale,
                                    dtype, label=f"{row_id(pair)} varlen sequence {i}")
