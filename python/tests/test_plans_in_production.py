# SPDX-License-Identifier: Apache-2.0
"""Plans in a training job: the SM budget (sm_margin) and the bits. For every schedule including auto, every CTA count
from the SM count down to the plan's wave gives bitwise the same gradients; below the wave a named schedule is
refused and auto runs another plan. Also the plan's header and note through the C ABI, and sm_margin's checks."""
import ctypes

import pytest

torch = pytest.importorskip("torch")

import dash_attn  # noqa: E402
from dash_attn import _abi, _torch_ops  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and bool(_abi.LIB.dash_cuda_available())
SCHEDULES = ["ascending", "descending", "shift", "symmetric-shift", "auto"]


def gradients(q, k, v, dout, causal, schedule, sm_margin):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    dash_attn.attention(*leaves, causal=causal, schedule=schedule, sm_margin=sm_margin).backward(dout)
    return [t.grad for t in leaves]


def wave(q, k, v, causal, schedule, num_ctas):
    """The wave (min_coresident_ctas) of the plan the backward would use on num_ctas CTAs."""
    problem = _torch_ops._problem(q, k, v, causal)
    if q.is_cuda:
        plan = _abi.DevicePlan(problem, schedule, num_ctas, _abi.DASH_GQA_AUTO)
        return plan.header_field("min_coresident_ctas")
    header = _abi.PlanHeader.from_buffer_copy(_abi.HostPlan(problem, schedule, num_ctas, _abi.DASH_GQA_AUTO).blob)
    return header.min_coresident_ctas


def inputs(device, batch, seqlen, heads_q, heads_kv, hdim, dtype):
    g = torch.Generator(device=device).manual_seed(0)
    make = lambda h: torch.randn(batch, seqlen, h, hdim, device=device, generator=g).to(dtype)
    return make(heads_q), make(heads_kv), make(heads_kv), make(heads_q)


def check_cta_count_invariance(device, sms, margins, shape, dtype):
    batch, seqlen, heads_q, heads_kv, hdim = shape
    q, k, v, dout = inputs(device, batch, seqlen, heads_q, heads_kv, hdim, dtype)
    for causal in (False, True):
        for schedule in SCHEDULES:
            reference = gradients(q, k, v, dout, causal, schedule, 0)
            full_wave = wave(q, k, v, causal, schedule, sms)
            for margin in margins:
                where = f"{schedule} causal={causal} {heads_q}/{heads_kv} on {sms - margin} CTAs (wave {full_wave})"
                if sms - margin >= full_wave:
                    got = gradients(q, k, v, dout, causal, schedule, margin)
                    for name, a, b in zip(("dq", "dk", "dv"), got, reference):
                        assert torch.equal(a, b), f"{where}: {name} bits differ from {sms} CTAs"
                elif schedule == "auto":
                    got = gradients(q, k, v, dout, causal, schedule, margin)  # another plan: it must run
                    assert wave(q, k, v, causal, schedule, sms - margin) <= sms - margin, where
                    assert all(torch.isfinite(t).all() for t in got), where
                else:
                    with pytest.raises(dash_attn.DashError, match="schedule"):
                        gradients(q, k, v, dout, causal, schedule, margin)


@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and the sm_90a kernels")
@pytest.mark.parametrize("heads", [(16, 16), (32, 8)], ids=["mha16", "gqa32-8"])
def test_cuda_bits_are_the_same_for_every_cta_count_down_to_the_wave(heads):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # 132, 114, 100 and 66 CTAs on an H100 / H200; one CTA as the extreme below every wave but 1.
    margins = sorted({m for m in (0, sms - 114, sms - 100, sms - 66, sms - 1) if m >= 0})
    check_cta_count_invariance("cuda", sms, margins, (2, 4096, *heads, 128), torch.bfloat16)


@pytest.mark.parametrize("heads", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_cpu_bits_are_the_same_for_every_cta_count_down_to_the_wave(heads):
    # The CPU backend follows the plan the GPU would run on 132 - sm_margin CTAs.
    sms = _torch_ops.CPU_PLAN_CTAS
    check_cta_count_invariance("cpu", sms, [0, 66, 131], (1, 512, *heads, 64), torch.float32)


def test_sm_margin_is_checked_and_named():
    q = torch.randn(1, 64, 2, 64)
    for bad in (-1, _torch_ops.CPU_PLAN_CTAS, 10_000):
        with pytest.raises(ValueError, match="sm_margin"):
            dash_attn.attention(q, q, q, sm_margin=bad)
    for bad in (1.5, "8", True):
        with pytest.raises(TypeError, match="sm_margin"):
            dash_attn.attention(q, q, q, sm_margin=bad)


@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and the sm_90a kernels")
def test_plan_create_refuses_more_ctas_than_sms_and_reports_autos_choice():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    problem = _abi.Problem(batch=1, heads_q=8, heads_kv=2, seqlen_q=3000, seqlen_k=3000, head_dim=128, mask_kind=1,
                           window_left=-1, window_right=-1)
    with pytest.raises(dash_attn.DashError, match="num_ctas"):
        _abi.DevicePlan(problem, "auto", sms + 1, _abi.DASH_GQA_AUTO)
    plan = _abi.DevicePlan(problem, "auto", 0, _abi.DASH_GQA_AUTO)
    assert "chose" in plan.note
    assert plan.header_field("num_ctas") == sms


# Lock-step units of more than 16 items give an item several KV tiles (shift) or pairs (symmetric shift): long
# items with many segments. They must be as accurate as any plan (float64 reference, the sweep's rule) and
# deterministic. 4500 tokens: 36 KV tiles of 128 (shift: 3 per item; symmetric shift: 18 pairs, 2 per item, and the
# odd middle tile).
@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if HAVE_CUDA else []))
@pytest.mark.parametrize("schedule", ["shift", "symmetric-shift"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_chunked_lockstep_plans_match_float64(device, schedule, causal):
    import math
    from attention_reference import check_against_reference
    seqlen, hdim = (4500, 128) if device == "cuda" else (2300, 64)  # CPU: 18 KV tiles of 128 (2 per shift item)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v, dout = inputs(device, 1, seqlen, 4, 2, hdim, dtype)
    problem = _torch_ops._problem(q, k, v, causal)
    plan = (_abi.DevicePlan(problem, schedule, 0, _abi.DASH_GQA_SPLIT_HEADS) if device == "cuda" else None)
    if plan is not None:
        assert plan.header_field("items_per_unit") == 16 and "per item" in plan.note, plan.note
    results = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = dash_attn.attention(*leaves, causal=causal, schedule=schedule)
        out.backward(dout)
        results.append([out.detach()] + [t.grad for t in leaves])
    check_against_reference(results[0], q, k, v, dout, causal, 1 / math.sqrt(hdim), dtype,
                            label=f"{device} {schedule} causal={causal} {seqlen}")
    for name, a, b in zip(("out", "dq", "dk", "dv"), *results):
        assert torch.equal(a, b), f"{schedule}: {name} differs between two deterministic runs"


# A differentiated forward of a new shape starts the backward's plan on the planning thread (_torch_ops._BwdShape),
# so that planning overlaps the rest of the step. The backward waits for it; the bits are those of a plan built in the
# backward call itself.
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and the sm_90a kernels")
def test_the_forward_plans_the_backward_on_the_planning_thread():
    import concurrent.futures
    q, k, v, dout = inputs("cuda", 1, 1537, 4, 2, 128, torch.bfloat16)  # a length no other test plans
    key = _torch_ops._bwd_key(q, k, v, True, True, "auto", 0, -1, -1)
    assert key not in _torch_ops._bwd_shapes
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = dash_attn.attention(*leaves, causal=True)
    shape = _torch_ops._bwd_shapes[key]  # made by the forward
    assert isinstance(shape._pending, concurrent.futures.Future), "the forward did not start the plan"
    out.backward(dout)
    assert shape._pending is None and shape._plan is not None, "the backward did not take the plan"
    background = [t.grad for t in leaves]

    del _torch_ops._bwd_shapes[key]  # planned again, in the backward call (needs_backward=False: no planning thread)
    scale = 128 ** -0.5
    o, lse = torch.ops.dash_attn.fwd(q, k, v, True, scale, True, "auto")
    assert key not in _torch_ops._bwd_shapes
    in_call = torch.ops.dash_attn.bwd(dout, q, k, v, o, lse, True, scale, True, "auto")
    assert _torch_ops._bwd_shapes[key]._pending is None
    for name, a, b in zip(("dq", "dk", "dv"), background, in_call):
        assert torch.equal(a, b), f"{name}: the plan built on the planning thread gives other bits"


# A plan the planning thread cannot build: the forward runs, the backward raises the planner's error (naming the
# schedule), and the failure is not kept: the next backward plans again and raises again.
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and the sm_90a kernels")
def test_a_planning_thread_error_is_raised_by_the_backward_every_time():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    q, k, v, dout = inputs("cuda", 1, 1029, 2, 2, 128, torch.bfloat16)  # 9 KV tiles: shift's wave is 9 CTAs
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = dash_attn.attention(*leaves, schedule="shift", sm_margin=sms - 2)  # 2 CTAs
        with pytest.raises(dash_attn.DashError, match="schedule"):
            out.backward(dout)
        assert _torch_ops._bwd_key(q, k, v, False, True, "shift", sms - 2, -1, -1) not in _torch_ops._bwd_shapes


# The planning thread may build a plan while the step's thread captures a CUDA graph (a training loop captures after
# an eager warm-up whose backward plans may still be in flight). In the default (global) capture mode a cudaMalloc
# from any thread is refused and invalidates the capture; the library allocates and uploads in relaxed mode, on a
# stream the graph does not contain. 49,216 tokens, full mask: 2.4 MB of tables, uploaded through the pinned staging.
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and the sm_90a kernels")
def test_a_plan_is_built_beside_a_cuda_graph_capture():
    problem = _abi.make_problem(1, 1, 1, 49216, 49216, 128, False)

    def build():
        with torch.cuda.device(0):
            return _abi.DevicePlan(problem, "ascending", 0, _abi.DASH_GQA_SPLIT_HEADS)

    x = torch.zeros(4096, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x + 1
        plan = _torch_ops._planning_thread().submit(build).result()  # built while the capture is open
        z = y * 2
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, torch.full_like(z, 2.0))
    assert plan.header_field("num_q_tiles") == 769 and plan.header_field("num_kv_tiles") == 385


# deterministic=False on a GQA problem without a causal mask (which would take the balanced plan): the backward's plan
# is its own (DASH_GQA_AUTO_NONDETERMINISTIC), packed here, where 8 x 8 packed units fill the SMs (split heads under
# DASH_GQA_AUTO); the gradients match the float64 reference; the deterministic backward of the same shape keeps the
# table's plan; and dash_bwd refuses to run the non-deterministic plan deterministically.
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and the sm_90a kernels")
def test_a_nondeterministic_gqa_backward_packs_where_its_units_fill_the_sms():
    from attention_reference import check_against_reference
    q, k, v, dout = inputs("cuda", 8, 1024, 32, 8, 128, torch.bfloat16)
    scale = 128 ** -0.5
    keys = {det: _torch_ops._bwd_key(q, k, v, False, det, "auto", 0, -1, -1) for det in (True, False)}
    assert keys[True] != keys[False]
    results = {}
    for det in (False, True):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = dash_attn.attention(*leaves, causal=False, deterministic=det)
        out.backward(dout)
        results[det] = [out.detach()] + [t.grad for t in leaves]
    plans = {det: _torch_ops._bwd_shapes[keys[det]].plan for det in (True, False)}
    assert plans[False].header_field("gqa_mode") == _abi.DASH_GQA_PACK_GROUP, plans[False].note
    only_nondet = _abi.DASH_PLAN_NONDETERMINISTIC_ONLY
    assert plans[False].header_field("flags") & only_nondet, "no DASH_PLAN_NONDETERMINISTIC_ONLY on the non-det plan"
    assert not plans[False].header_field("flags") & _abi.DASH_PLAN_ITEM_MAJOR, plans[False].note
    assert not plans[True].header_field("flags") & (only_nondet | _abi.DASH_PLAN_ITEM_MAJOR)
    assert plans[True].header_field("gqa_mode") == _abi.DASH_GQA_SPLIT_HEADS, plans[True].note
    check_against_reference(results[False], q, k, v, dout, False, scale, torch.bfloat16, label="non-det packed")
    o, lse = torch.ops.dash_attn.fwd(q, k, v, False, scale, False, "auto")
    args = _abi.pack_bwd_args(_abi.problem_values(_torch_ops._problem(q, k, v, False)), _abi.DASH_DTYPE_BF16, q, k, v,
                              o, dout, lse.data_ptr(), *(torch.empty_like(t) for t in (q, k, v)), scale)
    workspace = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    status = _abi.LIB.dash_bwd(ctypes.byref(args), plans[False].handle, 1, workspace.data_ptr(), workspace.numel(),
                               torch.cuda.current_stream().cuda_stream)
    assert status != 0 and b"DASH_GQA_AUTO_NONDETERMINISTIC" in _abi.LIB.dash_last_error()


# deterministic=False, causal: the balanced plan (split heads, one KV tile per item, claimed item by item across
# groups of heads, DASH_PLAN_ITEM_MAJOR), against the float64 reference, where a group's KV tiles outnumber the SMs
# (3 x 12 heads x 8 or 16 KV tiles; GQA 12/4 too), with lengths that end inside a tile; the deterministic backward of
# the same shape keeps the offline table's plan.
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU and the sm_90a kernels")
@pytest.mark.parametrize("causal,seqlen,head_dim,heads_kv", [(True, 1000, 128, 12), (True, 2000, 64, 12),
                                                             (True, 2048, 64, 12), (True, 2048, 128, 4)])
def test_a_nondeterministic_backward_takes_the_balanced_plan(causal, seqlen, head_dim, heads_kv):
    from attention_reference import check_against_reference
    q, k, v, dout = inputs("cuda", 3, seqlen, 12, heads_kv, head_dim, torch.bfloat16)
    keys = {det: _torch_ops._bwd_key(q, k, v, causal, det, "auto", 0, -1, -1) for det in (True, False)}
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = dash_attn.attention(*leaves, causal=causal, deterministic=False)
    out.backward(dout)
    plan = _torch_ops._bwd_shapes[keys[False]].plan
    flags = plan.header_field("flags")
    assert flags & _abi.DASH_PLAN_ITEM_MAJOR and flags & _abi.DASH_PLAN_NONDETERMINISTIC_ONLY, plan.note
    assert plan.header_field("items_per_unit") == plan.header_field("num_kv_tiles"), plan.note
    assert plan.header_field("gqa_mode") == _abi.DASH_GQA_SPLIT_HEADS, plan.note
    assert 1 <= plan.header_field("ticket_group_units") <= 36, plan.note
    check_against_reference([out.detach()] + [t.grad for t in leaves], q, k, v, dout, causal, head_dim ** -0.5,
                            torch.bfloat16, label=f"balanced non-det {plan.note}")
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    dash_attn.attention(*leaves, causal=causal, deterministic=True).backward(dout)
    assert not _torch_ops._bwd_shapes[keys[True]].plan.header_field("flags") & _abi.DASH_PLAN_ITEM_MAJOR
