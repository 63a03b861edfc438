# SPDX-License-Identifier: Apache-2.0
"""dash_attn on CPU tensors: forward/backward against float64 PyTorch math, schedules, determinism, batch
invariance, torch.compile without graph breaks, and errors that name the argument. (Awkward shapes:
test_shape_sweep.py; edge semantics and the drop-in wrapper: test_semantics.py.)"""
import math

import pytest

torch = pytest.importorskip("torch")
import dash_attn  # noqa: E402

import attention_reference  # noqa: E402


def inputs(b, sq, sk, hq, hk, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda s, h: torch.randn(b, s, h, d, generator=g, dtype=torch.float32).to(dtype).requires_grad_(True)
    return mk(sq, hq), mk(sk, hk), mk(sk, hk)


def grads(fn, q, k, v, dout):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("shape", [(2, 113, 203, 4, 2, 64), (1, 203, 113, 2, 2, 128), (1, 97, 97, 3, 1, 64)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("schedule", ["auto", "ascending", "symmetric-shift", "shift"])
def test_matches_float64_reference(shape, causal, schedule):
    b, sq, sk, hq, hk, d = shape
    q, k, v = inputs(*shape)
    dout = torch.randn(b, sq, hq, d)
    scale = 1 / math.sqrt(d)
    ours = grads(lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, schedule=schedule), q, k, v, dout)
    attention_reference.check_against_reference(list(ours), q, k, v, dout, causal, scale, torch.float32)


def test_bf16_inputs_round_trip_through_fp32():
    q, k, v = inputs(1, 64, 64, 2, 2, 64, dtype=torch.bfloat16)
    out = dash_attn.attention(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16
    ref = attention_reference.attention(q, k, v, True, 1 / math.sqrt(64))
    assert (out.double() - ref).abs().max() < 2e-2


def test_sdpa_layout_and_lse():
    q, k, v = inputs(2, 50, 50, 4, 4, 64)
    a = dash_attn.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    b_out, lse = dash_attn.attention(q, k, v, causal=True, return_lse=True)
    torch.testing.assert_close(a.transpose(1, 2), b_out)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / math.sqrt(64)
    s = s.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)


def test_check_determinism_reports_identical_hashes():
    q, k, v = inputs(1, 80, 80, 2, 1, 64)
    report = dash_attn.check_determinism(q, k, v, runs=3, causal=True)
    assert report["identical"]
    assert len(report["runs"]) == 3 and len(report["runs"][0]["dq_sha256"]) == 64
    windowed = dash_attn.check_determinism(q, k, v, runs=2, causal=True, window_size=(16, 0))
    assert windowed["identical"]
    assert windowed["runs"][0]["dq_sha256"] != report["runs"][0]["dq_sha256"]  # the window changed the gradient


def test_a_sequence_has_the_same_gradient_bits_alone_and_in_a_batch():
    q, k, v = inputs(3, 120, 120, 4, 4, 64, seed=3)
    dout = torch.randn(3, 120, 4, 64)
    fn = lambda q, k, v: dash_attn.attention(q, k, v, causal=True)
    _, dq_b, dk_b, dv_b = grads(fn, q, k, v, dout)
    _, dq_1, dk_1, dv_1 = grads(fn, q[1:2, :, :2], k[1:2, :, :2], v[1:2, :, :2], dout[1:2, :, :2])
    assert torch.equal(dq_b[1:2, :, :2], dq_1) and torch.equal(dk_b[1:2, :, :2], dk_1) and torch.equal(dv_b[1:2, :, :2], dv_1)


def test_a_gqa_sequence_has_the_same_gradient_bits_alone_and_in_a_batch():
    # Also across KV heads: the GQA mode (split or packed) is chosen from batch-1 simulations.
    q, k, v = inputs(3, 120, 120, 8, 2, 64, seed=4)
    dout = torch.randn(3, 120, 8, 64)
    fn = lambda q, k, v: dash_attn.attention(q, k, v, causal=True)
    _, dq_b, dk_b, dv_b = grads(fn, q, k, v, dout)
    _, dq_1, dk_1, dv_1 = grads(fn, q[1:2, :, 4:], k[1:2, :, 1:], v[1:2, :, 1:], dout[1:2, :, 4:])
    assert torch.equal(dq_b[1:2, :, 4:], dq_1) and torch.equal(dk_b[1:2, :, 1:], dk_1)
    assert torch.equal(dv_b[1:2, :, 1:], dv_1)


def test_torch_compile_has_no_graph_breaks():
    q, k, v = inputs(1, 64, 64, 2, 2, 64)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def step(q, k, v):
        return dash_attn.attention(q, k, v, causal=True).square().sum()

    step(q, k, v).backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_opcheck():
    q, k, v = inputs(1, 40, 56, 2, 1, 64)
    torch.library.opcheck(torch.ops.dash_attn.fwd.default, (q, k, v, True, 0.2, True, "auto"))


def test_forward_op_paths_through_autograd_agree():
    # The op's autograd kernel calls the CPU / CUDA kernel itself when no input requires grad, redispatches under a
    # fake-tensor mode, and runs an autograd.Function otherwise (with the trailing defaults the dispatcher drops).
    q, k, v = inputs(1, 40, 56, 2, 1, 64)
    fwd = torch.ops.dash_attn.fwd.default
    with_grad = fwd(q, k, v, True, 0.2, True, "auto")
    assert with_grad[0].requires_grad and not with_grad[1].requires_grad
    with_grad[0].sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    plain = [t.detach() for t in (q, k, v)]
    without = fwd(*plain, True, 0.2, True, "auto")
    with torch.inference_mode():
        below_autograd = fwd(*plain, True, 0.2, True, "auto")
    for a, b, c in zip(with_grad, without, below_autograd):
        assert torch.equal(a.detach(), b) and torch.equal(b, c)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        o, lse = fwd(*(mode.from_tensor(t) for t in plain), True, 0.2, True, "auto")
    assert o.shape == (1, 40, 2, 64) and lse.shape == (1, 2, 40)


@pytest.mark.parametrize("mutate, message", [
    (lambda q, k, v: (q[..., ::2], k, v), "contiguous last dimension"),
    (lambda q, k, v: (q, k.double(), v), "k has dtype"),
    (lambda q, k, v: (q, k[:, :, :1].expand(-1, -1, 3, -1), v[:, :, :1].expand(-1, -1, 3, -1)), "multiple of k heads"),
    (lambda q, k, v: (q[:, :0], k, v), "q is empty"),
    (lambda q, k, v: (q[0], k, v), "4-D"),
    (lambda q, k, v: (q, k, v[:, :-1]), "k shape"),
    (lambda q, k, v: (q.int(), k.int(), v.int()), "not supported on CPU"),
])
def test_bad_input_names_the_argument(mutate, message):
    q, k, v = inputs(1, 16, 16, 4, 4, 64)
    q, k, v = mutate(q.detach(), k.detach(), v.detach())
    with pytest.raises((ValueError, TypeError), match=message):
        dash_attn.attention(q, k, v)


def test_device_mismatch_names_the_argument():
    q, k, v = inputs(1, 16, 16, 2, 2, 64)
    with pytest.raises(ValueError, match="k is on meta but q is on cpu"):
        dash_attn.attention(q.detach(), k.detach().to("meta"), v.detach())


def test_bad_schedule_and_scale():
    q, k, v = inputs(1, 16, 16, 1, 1, 64)
    with pytest.raises(ValueError, match="schedule 'fastest'"):
        dash_attn.attention(q, k, v, schedule="fastest")
    with pytest.raises(ValueError, match="softmax_scale"):
        dash_attn.attention(q, k, v, softmax_scale=-1.0)


def test_unknown_gqa_mode_is_named():
    # The C ABI takes split, pack, auto or auto-nondeterministic (0-3); anything else is refused with the argument's
    # name.
    from dash_attn import _abi
    problem = _abi.Problem(batch=1, heads_q=4, heads_kv=1, seqlen_q=64, seqlen_k=64, head_dim=64,
                           mask_kind=_abi.DASH_MASK_CAUSAL, window_left=-1, window_right=-1, head_dim_v=0)
    for unknown in (4, -1):
        with pytest.raises(_abi.DashError, match="gqa_mode"):
            _abi.HostPlan(problem, "auto", 8, unknown)
    for known in (_abi.DASH_GQA_AUTO, _abi.DASH_GQA_AUTO_NONDETERMINISTIC):
        assert _abi.HostPlan(problem, "auto", 8, known) is not None


@pytest.mark.parametrize("window_size, error, message", [
    ((3,), TypeError, "window_size must be a pair"),
    ((3, 1.5), TypeError, "window_size must be a pair"),
    ((True, 0), TypeError, "window_size must be a pair"),
    ((-2, 0), ValueError, "window_size entries must be >= 0"),
    ((4, -3), ValueError, "window_size entries must be >= 0"),
])
def test_bad_window_size_is_named(window_size, error, message):
    q, k, v = inputs(1, 16, 16, 2, 2, 64)
    with pytest.raises(error, match=message):
        dash_attn.attention(q, k, v, window_size=window_size)


def test_causal_window_ends_at_the_diagonal():
    # FlashAttention's causal window is (left, 0); a right side past the diagonal with causal=True is refused
    # rather than silently set to 0.
    q, k, v = inputs(1, 40, 56, 2, 2, 64)
    with pytest.raises(ValueError, match="causal=True with window_size\\[1\\] = 3"):
        dash_attn.attention(q, k, v, causal=True, window_size=(8, 3))
    a = dash_attn.attention(q, k, v, causal=True, window_size=(8, -1))
    b = dash_attn.attention(q, k, v, causal=False, window_size=(8, 0))
    c = dash_attn.attention(q, k, v, causal=True, window_size=(8, 0))
    assert torch.equal(a, b) and torch.equal(a, c)
    # No window: the plain masks.
    assert torch.equal(dash_attn.attention(q, k, v, causal=True, window_size=(-1, -1)),
                       dash_attn.attention(q, k, v, causal=True))


def flash_attn_reference_window(sq, sk, causal, window_size):
    """The band flash-attn 2.x's entry point runs for (causal, window_size): sides >= seqlen_k become -1, and
    causal sets the right side to 0."""
    left, right = (-1 if w >= sk else w for w in window_size)
    return (left, 0) if causal else (left, right)


@pytest.mark.parametrize("sq, sk, causal, window_size", [
    (40, 56, False, (-1, -1)),
    (40, 56, True, (-1, -1)),
    (56, 40, True, (-1, -1)),
    (40, 56, False, (7, 3)),
    (40, 56, True, (7, -1)),
    (90, 20, False, (5, 25)),    # right >= seqlen_k: flash-attn makes it unbounded, so rows 0-44 see keys
    (20, 90, True, (100, -1)),   # left >= seqlen_k: unbounded, i.e. plain causal
])
def test_flash_attn_func_matches_flash_attn_semantics(sq, sk, causal, window_size):
    q, k, v = inputs(2, sq, sk, 4, 2, 64)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(5))
    ours = grads(lambda q, k, v: dash_attn.flash_attn_func(q, k, v, causal=causal, window_size=window_size,
                                                            deterministic=True), q, k, v, dout)
    band = flash_attn_reference_window(sq, sk, causal, window_size)
    attention_reference.check_against_reference([t.detach() for t in ours], q.detach(), k.detach(), v.detach(), dout, band,
                                64 ** -0.5, torch.float32, label=f"flash_attn_func {sq}x{sk} {causal} {window_size}")


@pytest.mark.parametrize("kwargs, message", [
    (dict(dropout_p=0.1), "dropout_p must be 0.0"),
    (dict(softcap=30.0), "softcap must be 0.0"),
    (dict(alibi_slopes=torch.ones(2)), "alibi_slopes must be None"),
    (dict(return_attn_probs=True), "return_attn_probs=True is not supported"),
    (dict(deterministic=False), "deterministic=False is not available on CPU"),
    (dict(window_size=(3, -2), deterministic=True), "window_size entries must be >= 0"),
])
def test_flash_attn_func_refuses_what_it_cannot_match(kwargs, message):
    q, k, v = inputs(1, 16, 16, 2, 2, 64)
    with pytest.raises(ValueError, match=message):
        dash_attn.flash_attn_func(q, k, v, **kwargs)


def test_sm_margin_check_is_left_to_the_op_while_tracing_an_unknown_cuda_device(monkeypatch):
    # validate() runs in torch.compile'd code, where the first query of a CUDA device's SMs (ctypes) would break a full
    # graph: while tracing, with the device's count unknown, the check is left to the forward op (which makes it when
    # it runs); outside tracing, or with the count known, it is made at once. Checked here without a GPU by watching
    # whether _num_ctas is asked.
    from dash_attn import _torch_ops

    asked = []
    monkeypatch.setattr(_torch_ops, "_num_ctas", lambda device, sm_margin: asked.append((device, sm_margin)))
    monkeypatch.setattr(_torch_ops, "_sm_counts", {})
    cuda0 = torch.device("cuda", 0)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    _torch_ops._check_sm_margin(cuda0, 7)
    assert asked == []
    _torch_ops._check_sm_margin(torch.device("cpu"), 7)  # the CPU's count is a constant: checked while tracing too
    _torch_ops._sm_counts[0] = 132
    _torch_ops._check_sm_margin(cuda0, 8)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)
    _torch_ops._sm_counts.clear()
    _torch_ops._check_sm_margin(cuda0, 9)
    assert asked == [(torch.device("cpu"), 7), (cuda0, 8), (cuda0, 9)]
