# SPDX-License-Identifier: Apache-2.0
"""torch.library custom ops `dash_attn::fwd` / `dash_attn::bwd` and, for packed variable-length sequences,
`dash_attn::varlen_fwd` / `dash_attn::varlen_bwd`, their fake (meta) implementations and autograd. CUDA tensors
run the sm_90a kernels; CPU tensors run the library's CPU backend (fp32, slow, and following the same plan orders
as the GPU)."""
from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import inspect
import math

import torch

from . import _abi
from ._abi import LIB, check

SCHEDULES = _abi.SCHEDULES  # from the library (dash_schedule_names)
# Plans for CPU tensors are built for an H200's 132 SMs, so a CPU run follows the orders the GPU would use.
CPU_PLAN_CTAS = 132

_GPU_DTYPES = {torch.bfloat16: _abi.DASH_DTYPE_BF16, torch.float16: _abi.DASH_DTYPE_FP16}
_CPU_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def validate(q, k, v, causal, softmax_scale, schedule, deterministic, names=("q", "k", "v"),
             layout="(batch, seqlen, heads, head_dim)", shown=None, sm_margin=0, window_size=(-1, -1),
             allow_empty=False):
    """Raises TypeError / ValueError naming the offending argument, the same for CPU and CUDA tensors.

    `names` and `layout` are how the caller calls its tensors, and `shown(t)` the shape the caller passed
    (wrappers such as scaled_dot_product_attention reorder dimensions before calling attention). allow_empty: tensors
    with no rows are accepted (a varlen pack whose sequences have no queries or no keys)."""
    shape = shown or (lambda t: tuple(t.shape))
    nq, nk, nv = names
    for name, t in ((nq, q), (nk, k), (nv, v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"dash_attn: {name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in ((nq, q), (nk, k), (nv, v)):
        if t.dim() != 4:
            raise ValueError(f"dash_attn: {name} must be 4-D {layout}, got shape {shape(t)}")
        if t.numel() == 0 and not (allow_empty and t.shape[1] == 0 and 0 not in t.shape[2:]):
            raise ValueError(f"dash_attn: {name} is empty (shape {shape(t)})")
        if t.stride(-1) != 1:
            raise ValueError(f"dash_attn: {name} must have a contiguous last dimension (stride 1), got stride {t.stride(-1)}")
        if t.device != q.device:
            raise ValueError(f"dash_attn: {name} is on {t.device} but {nq} is on {q.device}")
        if t.dtype != q.dtype:
            raise ValueError(f"dash_attn: {name} has dtype {t.dtype} but {nq} has {q.dtype}")
    if q.is_cuda:
        if q.dtype not in _GPU_DTYPES:
            raise ValueError(f"dash_attn: {nq} dtype {q.dtype} is not supported on CUDA (use bfloat16 or float16)")
    elif q.device.type == "cpu":
        if q.dtype not in _CPU_DTYPES:
            raise ValueError(f"dash_attn: {nq} dtype {q.dtype} is not supported on CPU (float32, bfloat16, float16)")
        if not deterministic:
            raise ValueError("dash_attn: deterministic=False is not available on CPU: the CPU backend always adds "
                             "in the plan's order (pass deterministic=True, or use CUDA tensors)")
    else:
        raise ValueError(f"dash_attn: device {q.device} is not supported (cuda or cpu)")
    b, sq, hq, d = q.shape
    dv = v.shape[3]  # the value head dim: of v and the output (MLA-style 192 / 128); q and k share d
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"dash_attn: {nk} shape {shape(k)} and {nv} shape {shape(v)} differ (they may differ in "
                         "the last dimension only, the value head dim)")
    if k.shape[0] != b:
        raise ValueError(f"dash_attn: {nk} shape {shape(k)} and {nq} shape {shape(q)} differ in batch")
    if k.shape[3] != d:
        raise ValueError(f"dash_attn: {nk} shape {shape(k)} and {nq} shape {shape(q)} differ in head_dim")
    if hq % k.shape[2] != 0:
        raise ValueError(f"dash_attn: {nq} heads ({hq}) must be a multiple of {nk} heads ({k.shape[2]}); shapes "
                         f"{shape(q)} and {shape(k)}")
    if _abi.kernel_row(d, dv) is None:
        supported = f"supported head_dim/head_dim_v pairs: {_abi.PAIRS_TEXT}, one number meaning equal head dims"
        if all(r.head_dim != d for r in KERNEL_ROWS):
            raise ValueError(f"dash_attn: head_dim {d} is not supported ({supported}); {nq} shape {shape(q)}")
        raise ValueError(f"dash_attn: {nv} head_dim {dv} is not supported with {nq} / {nk} head_dim {d} ({supported}); "
                         f"{nq} shape {shape(q)}, {nv} shape {shape(v)}")
    if schedule not in SCHEDULES:
        raise ValueError(f"dash_attn: schedule {schedule!r} is unknown (expected one of {', '.join(SCHEDULES)})")
    if isinstance(sm_margin, bool) or not isinstance(sm_margin, int):
        raise TypeError(f"dash_attn: sm_margin must be an int, got {type(sm_margin).__name__}")
    _check_sm_margin(q.device, sm_margin)
    if softmax_scale is not None and not (math.isfinite(softmax_scale) and softmax_scale > 0):
        raise ValueError(f"dash_attn: softmax_scale must be finite and > 0, got {softmax_scale}")
    if not isinstance(causal, bool):
        raise TypeError(f"dash_attn: causal must be a bool, got {type(causal).__name__}")
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or any(isinstance(w, bool) or not isinstance(w, int) for w in window_size)):
        raise TypeError(f"dash_attn: window_size must be a pair of ints (left, right), got {window_size!r}")
    left, right = window_size
    if left < -1 or right < -1:
        raise ValueError(f"dash_attn: window_size entries must be >= 0, or -1 for an unbounded side; got "
                         f"{tuple(window_size)}")
    if causal and right not in (-1, 0):
        raise ValueError(f"dash_attn: causal=True with window_size[1] = {right}: a causal window ends at the diagonal "
                         f"(pass -1 or 0 there, or causal=False for a window reaching {right} keys past it)")


# The kernels' head dims with head_dim_v = head_dim, and every (head_dim, head_dim_v) row of the kernel table, which
# the CPU backend accepts too (read once at import: validate() runs inside torch.compile'd code, where a ctypes call
# would break the graph).
SUPPORTED_HEAD_DIMS = _abi.SUPPORTED_HEAD_DIMS
KERNEL_ROWS = _abi.KERNEL_ROWS


def supported_head_dims():
    return SUPPORTED_HEAD_DIMS


def refuse_backward_without_kernel(q, k, v, needs_backward):
    """A differentiated call on CUDA of a pair whose row has a forward kernel only (a row with bwd_block_m 0 in
    dash/kernel_table.hpp; none in this build) is refused here, at the forward, before anything is allocated or launched
    (not in the backward, after the step's forward work). The CPU backend runs the backward at every row."""
    if not needs_backward or not q.is_cuda:
        return
    d, dv = q.shape[-1], v.shape[-1]
    row = _abi.kernel_row(d, dv)
    if row is not None and not row.backward:
        raise ValueError(f"dash_attn: head_dim {_abi.pair_name(d, dv)} has a forward kernel only in this build (the "
                         f"backward at head dims {_abi.FORWARD_ONLY_PAIRS_TEXT} is not built yet; it runs at "
                         f"{_abi.BACKWARD_PAIRS_TEXT}), and q, k or v requires grad: call it under torch.no_grad() or "
                         "with detached tensors, or on CPU tensors (the CPU backend runs both passes)")


def _problem(q, k, v, causal, window_left=-1, window_right=-1) -> _abi.Problem:
    b, sq, hq, d = q.shape
    return _abi.make_problem(b, hq, k.shape[2], sq, k.shape[1], d, causal, window_left, window_right,
                             head_dim_v=v.shape[-1])


_sm_counts: dict = {}


def _num_ctas(device: torch.device, sm_margin: int) -> int:
    """CTAs the backward launches: the device's SMs less the SMs the caller leaves to other kernels."""
    if device.type != "cuda":
        sms = CPU_PLAN_CTAS
    else:
        sms = _sm_counts.get(device.index)
        if sms is None:  # the SMs this context can use (a green context or MPS limit may leave fewer)
            count = ctypes.c_int32()
            with torch.cuda.device(device):
                check(LIB.dash_usable_sms(ctypes.byref(count)))
            sms = _sm_counts[device.index] = count.value
    if not 0 <= sm_margin < sms:
        raise ValueError(f"dash_attn: sm_margin must be in [0, {sms}) for {device} ({sms} SMs"
                         f"{', as the GPU plans the CPU backend follows' if device.type != 'cuda' else ''}), "
                         f"got {sm_margin}")
    return sms - sm_margin


def _check_sm_margin(device: torch.device, sm_margin: int) -> None:
    """sm_margin in range for the device. validate() runs inside torch.compile'd code, where the first query of a CUDA
    device's SMs (a ctypes call) would break the graph (fullgraph=True: an error). So while tracing, before an eager
    call has asked, the check is left to the forward op, which makes it when it runs (_fwd_cuda, _varlen_fwd_cuda)."""
    if device.type == "cuda" and device.index not in _sm_counts and torch.compiler.is_compiling():
        return
    _num_ctas(device, sm_margin)


def _on_device(device: torch.device, launch):
    """launch(stream) with `device` current, on its current stream: the C ABI launches on the current device. The
    device is switched only when it is not current (a context switch per call was part of the host time)."""
    index = device.index
    stream = torch._C._cuda_getCurrentRawStream(index)
    if torch._C._cuda_getDevice() == index:
        return launch(stream)
    with torch.cuda.device(device):
        return launch(stream)


# ---- the ops ---------------------------------------------------------------------------------------------------
# Defined with the low-level torch.library API: the CUDA and CPU kernels are Python functions registered for their
# dispatch keys, and only the forward has an autograd kernel. (torch.library.custom_op adds a Python autograd
# layer and an aliasing check to every call, ~30 us of the backward's host time.)
_lib = torch.library.Library("dash_attn", "DEF")
# deterministic / schedule / sm_margin are carried for the backward (autograd saves them from the forward).
# needs_backward: the caller will differentiate, so the backward's limits are checked before anything is allocated.
# window_left / window_right: FlashAttention's window_size (-1, -1: none; with causal, the right side is 0).
_lib.define("fwd(Tensor q, Tensor k, Tensor v, bool causal, float softmax_scale, bool deterministic, str schedule, "
            "bool needs_backward=False, int sm_margin=0, int window_left=-1, int window_right=-1) -> (Tensor, Tensor)")
# sm_margin: SMs the backward leaves to other kernels (it launches SMs - sm_margin CTAs); the bits are the same for
# any margin whose CTAs hold the plan's wave (dash_plan_create).
_lib.define("bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal, float softmax_scale, "
            "bool deterministic, str schedule, int sm_margin=0, int window_left=-1, int window_right=-1) -> "
            "(Tensor, Tensor, Tensor)")


class _FwdShape:
    """What a CUDA forward call of one shape needs besides its tensors, worked out on its first call."""

    def __init__(self, q, k, v, causal, needs_backward, window):
        problem = _problem(q, k, v, causal, *window)
        # With needs_backward, a row without a backward kernel is refused here, before the planning thread is asked.
        _abi.check_problem(problem, needs_backward)
        self.problem = _abi.problem_values(problem)
        self.dtype = _GPU_DTYPES[q.dtype]
        self.workspace_bytes = LIB.dash_fwd_workspace_size(ctypes.byref(_abi.FwdArgs(problem=problem,
                                                                                      dtype=self.dtype)))


class _BwdShape:
    """What a CUDA backward call of one (shape, schedule, device, margin) needs besides its tensors: the plan (its
    unit template is cached in the library per sequence template) and the workspace size.

    in_background: the plan is resolved on the planning thread (a forward that will be differentiated asks for it, so
    that a new shape's planning overlaps the rest of the step instead of delaying the backward); `plan` waits for it.
    Either way the plan is made by dash_plan_create_async: a new template's tables are written on a library thread,
    and the first backward queues their copy on its stream rather than waiting for them on the host."""

    def __init__(self, q, k, v, causal, schedule, sm_margin, window, nondeterministic, in_background=False):
        problem = _problem(q, k, v, causal, *window)
        # A non-deterministic backward promises no batch invariance, so its plan follows the whole problem
        # (DASH_GQA_AUTO_NONDETERMINISTIC): a GQA group's heads packed into one unit wherever the packed units fill
        # the CTAs; else, with schedule "auto" and a causal or window mask, the balanced plan where it fits (one KV
        # tile per item, claimed item by item across groups of heads, the longest first). A deterministic one keeps
        # the offline table's choice per sequence template.
        gqa_mode = _abi.DASH_GQA_AUTO_NONDETERMINISTIC if nondeterministic else _abi.DASH_GQA_AUTO
        self.problem = _abi.problem_values(problem)
        self.dtype = _GPU_DTYPES[q.dtype]
        num_ctas = _num_ctas(q.device, sm_margin)
        device = q.device

        def build():
            with torch.cuda.device(device):
                # GQA: auto's offline table picks split or pack heads.
                return _abi.DevicePlan(problem, schedule, num_ctas, gqa_mode, asynchronous=True)

        if in_background:
            self._plan, self._pending = None, _planning_thread().submit(build)
        else:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError("dash_attn: no plan for this shape yet, and plans cannot be built during CUDA-graph "
                                   "capture (they copy to the device); run the step once eagerly before capturing")
            self._plan, self._pending = build(), None
        self.workspace_bytes = [None, None]  # per mode (deterministic 0 / 1): asked with the first call's arguments

    @property
    def plan(self):
        """The DevicePlan; waits for the planning thread if it is still building it (and raises what it raised)."""
        if self._plan is None:
            self._plan = self._pending.result()
            self._pending = None
        return self._plan


# One thread builds plans ahead of the backward (_BwdShape(in_background=True)): the library releases the GIL while it
# plans, and spreads a large template over its own worker threads. Started on first use.
_planner = None


def _planning_thread():
    global _planner
    if _planner is None:
        _planner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="dash_attn_plan")
    return _planner


def _bwd_key(q, k, v, causal, deterministic, schedule, sm_margin, window_left, window_right):
    # The last field: a non-deterministic backward has a plan of its own (_BwdShape).
    return (q.shape, k.shape, v.shape[-1], q.dtype, causal, schedule, q.device.index, sm_margin, window_left,
            window_right, not deterministic)


_fwd_shapes: dict = {}
_bwd_shapes: dict = {}


def _fwd_cuda(q, k, v, causal, softmax_scale, deterministic, schedule, needs_backward=False, sm_margin=0,
              window_left=-1, window_right=-1):
    if sm_margin != 0:  # in range: validate() leaves it here while tracing (_check_sm_margin); 0 always is
        _num_ctas(q.device, sm_margin)
    key = (q.shape, k.shape, v.shape[-1], q.dtype, causal, needs_backward, window_left, window_right)
    shape = _fwd_shapes.get(key)
    if shape is None:
        shape = _fwd_shapes[key] = _FwdShape(q, k, v, causal, needs_backward, (window_left, window_right))
    if needs_backward:
        # A new shape's backward plan is started first (the forward's checks passed above: the pair has a backward
        # kernel), on the planning thread, so that it is built while the forward and the rest of the step run (not
        # during CUDA-graph capture: the backward then says that a plan is missing).
        bwd_key = _bwd_key(q, k, v, causal, deterministic, schedule, sm_margin, window_left, window_right)
        if bwd_key not in _bwd_shapes and not torch.cuda.is_current_stream_capturing():
            _bwd_shapes[bwd_key] = _BwdShape(q, k, v, causal, schedule, sm_margin, (window_left, window_right),
                                             bwd_key[-1], in_background=True)
    b, sq, hq, _ = q.shape
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    o = torch.empty((b, sq, hq, v.shape[-1]), dtype=q.dtype, device=q.device)  # the value head dim
    workspace = torch.empty(shape.workspace_bytes, dtype=torch.uint8, device=q.device)
    args = _abi.pack_fwd_args(shape.problem, shape.dtype, q, k, v, o, lse.data_ptr(), softmax_scale)
    check(_on_device(q.device, lambda stream: LIB.dash_fwd(ctypes.byref(args), workspace.data_ptr(),
                                                           shape.workspace_bytes, stream)))
    return o, lse


def _fwd_cpu(q, k, v, causal, softmax_scale, deterministic, schedule, needs_backward=False, sm_margin=0,
             window_left=-1, window_right=-1):
    problem = _problem(q, k, v, causal, window_left, window_right)
    _abi.check_problem(problem, needs_backward, cpu=True)  # the CPU backend runs the backward at every row
    b, sq, hq, _ = q.shape
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    q32, k32, v32 = (t.float().contiguous() for t in (q, k, v))
    o32 = torch.empty((b, sq, hq, v.shape[-1]), dtype=torch.float32)
    args = _abi.pack_fwd_args(_abi.problem_values(problem), _abi.DASH_DTYPE_FP32, q32, k32, v32, o32,
                              lse.data_ptr(), softmax_scale)
    check(LIB.dash_cpu_fwd(ctypes.byref(args)))
    return o32.to(q.dtype), lse


def _bwd_cuda(dout, q, k, v, o, lse, causal, softmax_scale, deterministic, schedule, sm_margin=0, window_left=-1,
              window_right=-1):
    key = _bwd_key(q, k, v, causal, deterministic, schedule, sm_margin, window_left, window_right)
    shape = _bwd_shapes.get(key)
    if shape is None:
        shape = _bwd_shapes[key] = _BwdShape(q, k, v, causal, schedule, sm_margin, (window_left, window_right),
                                             key[-1])
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    args = _abi.pack_bwd_args(shape.problem, shape.dtype, q, k, v, o, dout, lse.data_ptr(), dq, dk, dv,
                              softmax_scale)
    try:
        plan = shape.plan  # after the allocations above, which a plan still being built then overlaps
    except BaseException:
        del _bwd_shapes[key]  # not cached: the next call plans again (and raises again, naming the argument)
        raise
    _launch_bwd(args, plan.handle, shape, deterministic, q.device)
    return dq, dk, dv


def _launch_bwd(args, plan, cache, deterministic, device):
    """dash_bwd on the current stream with a workspace from PyTorch's allocator. The workspace size depends on the
    problem, the plan and the mode only (a deterministic backward adds the turn counters): asked once per cached plan
    and mode (`cache.workspace_bytes[deterministic]`; the query validates every tensor, as dash_bwd does again)."""
    mode = int(deterministic)
    nbytes = cache.workspace_bytes[mode]
    if nbytes is None:
        nbytes = LIB.dash_bwd_workspace_size(ctypes.byref(args), plan, mode)
        if nbytes == 0:
            check(1)
        cache.workspace_bytes[mode] = nbytes
    # The kernels want a 256-byte aligned workspace; PyTorch's CUDA allocator returns 512-byte aligned blocks, so
    # the slack is only asked for when that does not hold.
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if workspace.data_ptr() % 256 != 0:
        workspace = torch.empty(nbytes + 256, dtype=torch.uint8, device=device)
    aligned = (workspace.data_ptr() + 255) // 256 * 256
    check(_on_device(device, lambda stream: LIB.dash_bwd(ctypes.byref(args), plan, mode, aligned,
                                                         nbytes, stream)))


def _bwd_cpu(dout, q, k, v, o, lse, causal, softmax_scale, deterministic, schedule, sm_margin=0, window_left=-1,
             window_right=-1):
    problem = _problem(q, k, v, causal, window_left, window_right)
    plan = _abi.HostPlan(problem, schedule, _num_ctas(q.device, sm_margin), _abi.DASH_GQA_AUTO)

    def run(*tensors):
        args = _abi.pack_bwd_args(_abi.problem_values(problem), _abi.DASH_DTYPE_FP32, *tensors, softmax_scale)
        check(LIB.dash_cpu_bwd(ctypes.byref(args), plan.blob, len(plan.blob)))

    return _cpu_backward(dout, q, k, v, o, lse, run)


def _cpu_backward(dout, q, k, v, o, lse, run):
    """The CPU backend's backward in fp32, for the fixed-length and the varlen op: `run(q, k, v, o, dout, lse_ptr,
    dq, dk, dv)` packs the arguments and calls the C ABI on fp32 copies; the gradients come back in the inputs'
    dtypes."""
    q32, k32, v32, o32, do32 = (t.float().contiguous() for t in (q, k, v, o, dout))
    dq, dk, dv = (torch.empty_like(t) for t in (q32, k32, v32))
    lse = lse.contiguous()
    run(q32, k32, v32, o32, do32, lse.data_ptr(), dq, dk, dv)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


_lib.impl("fwd", _fwd_cuda, "CUDA")
_lib.impl("fwd", _fwd_cpu, "CPU")
_lib.impl("bwd", _bwd_cuda, "CUDA")
_lib.impl("bwd", _bwd_cpu, "CPU")
fwd = torch.ops.dash_attn.fwd.default
bwd = torch.ops.dash_attn.bwd.default


@torch.library.register_fake("dash_attn::fwd", lib=_lib)
def _(q, k, v, causal, softmax_scale, deterministic, schedule, needs_backward=False, sm_margin=0, window_left=-1,
      window_right=-1):
    b, sq, hq, _ = q.shape
    # o has v's last dim (the value head dim), as the kernels write it.
    return q.new_empty((b, sq, hq, v.shape[-1])), q.new_empty((b, hq, sq), dtype=torch.float32)


@torch.library.register_fake("dash_attn::bwd", lib=_lib)
def _(dout, q, k, v, o, lse, causal, softmax_scale, deterministic, schedule, sm_margin=0, window_left=-1,
      window_right=-1):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _setup_context(ctx, inputs, output):
    q, k, v, causal, softmax_scale, deterministic, schedule, _needs_backward, sm_margin, *window = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.softmax_scale, ctx.deterministic, ctx.schedule = causal, softmax_scale, deterministic, schedule
    ctx.sm_margin, ctx.window = sm_margin, (tuple(window) + (-1, -1))[:2]
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = bwd(dout, q, k, v, o, lse, ctx.causal, ctx.softmax_scale, ctx.deterministic, ctx.schedule,
                     ctx.sm_margin, *ctx.window)
    return dq, dk, dv, None, None, None, None, None, None, None, None


# ---- autograd of the forward ops -----------------------------------------------------------------------------------
# What torch.library.register_autograd registers, with a shortcut. Its generic kernel builds a dataclass, enters a
# context manager and redispatches on every call, with or without gradients. This one runs an autograd.Function where
# an input requires grad, and otherwise goes below autograd at once. Either way, where the keys left below autograd
# lead straight to the CUDA or CPU kernel (plain tensors: no fake or functional tensor, no dispatch mode;
# torch.compile's tracing has Python keys and redispatches), it calls that kernel itself, as the redispatch would.
# Host time per forward op call on an H100 host (2026-12-05): 37.1 us with the generic kernel, 32.6 with this one,
# 23.4 for _fwd_cuda called directly (FA3's op: 25.9). At 512 causal tokens the GPU takes ~100 us per call, and a
# slower host (65 us per call there) left it waiting between calls queued back to back
# (bench/results/host-time-h100-2026-12-05-fwd-autograd.txt).
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset


def _register_autograd(name, cuda_kernel, cpu_kernel, setup_context, backward):
    op = getattr(torch.ops.dash_attn, name).default
    backends = {torch._C.DispatchKey.CUDA: cuda_kernel, torch._C.DispatchKey.CPU: cpu_kernel}
    # The dispatcher drops trailing arguments equal to their defaults; setup_context and backward see all of them.
    defaults = tuple(p.default for p in inspect.signature(cuda_kernel).parameters.values())

    def below_autograd(keyset, inputs):
        below = keyset & _AFTER_AUTOGRAD
        kernel = backends.get(below.highestPriorityTypeId())
        if kernel is not None:
            return kernel(*inputs)
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(below, *inputs)

    class WithGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, keyset, *inputs):
            output = below_autograd(keyset, inputs)
            setup_context(ctx, inputs, output)
            return output

        @staticmethod
        def backward(ctx, *grads):
            return (None,) + backward(ctx, *grads)

    def autograd_kernel(keyset, *inputs):
        q, k, v = inputs[:3]
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return WithGrad.apply(keyset, *inputs, *defaults[len(inputs):])
        return below_autograd(keyset, inputs)

    WithGrad.__name__ = WithGrad.__qualname__ = f"DashAttn_{name}"
    _lib.impl(name, autograd_kernel, "Autograd", with_keyset=True)


_register_autograd("fwd", _fwd_cuda, _fwd_cpu, _setup_context, _backward)


# ---- packed variable-length sequences (varlen) ---------------------------------------------------------------
# q, dout, o, dq: [total_q, heads_q, head_dim]; k, v, dk, dv: [total_k, heads_kv, head_dim]; sequence s holds query
# rows [cu_seqlens_q[s], cu_seqlens_q[s + 1]) and key rows [cu_seqlens_k[s], cu_seqlens_k[s + 1]); LSE is
# [heads_q, total_q] fp32. The library reads the lengths from the HOST: CPU cu_seqlens are read directly, CUDA ones
# are copied to the host (which waits for the device). max_seqlen_q / max_seqlen_k are upper bounds, checked
# against the longest sequences (-1: not given).
_lib.define("varlen_fwd(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
            "int max_seqlen_k, bool causal, float softmax_scale, bool deterministic, str schedule, int sm_margin=0, "
            "int window_left=-1, int window_right=-1) -> (Tensor, Tensor)")
_lib.define("varlen_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor cu_seqlens_q, "
            "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, bool causal, float softmax_scale, "
            "bool deterministic, str schedule, int sm_margin=0, int window_left=-1, int window_right=-1) -> "
            "(Tensor, Tensor, Tensor)")

_INT = (int, torch.SymInt)


def validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, schedule,
                    deterministic, sm_margin=0, window_size=(-1, -1)):
    """validate() for packed tensors, plus the checks of cu_seqlens and max_seqlen that need no values (those that do
    run in the ops, on the host lengths). Raises TypeError / ValueError naming the argument."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"dash_attn: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            rows = "total_q" if name == "q" else "total_k"
            raise ValueError(f"dash_attn: {name} must be 3-D ({rows}, heads, head_dim) for packed sequences, got "
                             f"shape {tuple(t.shape)}")
    # As batch-1 tensors for validate(), which names them with the caller's shapes (theirs less the batch).
    validate(q[None], k[None], v[None], causal, softmax_scale, schedule, deterministic,
             layout="(total, heads, head_dim)", shown=lambda t: tuple(t.shape[1:]), sm_margin=sm_margin,
             window_size=window_size, allow_empty=True)
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"dash_attn: {name} must be a torch.Tensor (int32), got {type(t).__name__}")
        if t.dtype != torch.int32:
            raise ValueError(f"dash_attn: {name} must have dtype torch.int32, got {t.dtype}")
        if t.dim() != 1 or t.shape[0] < 2:
            raise ValueError(f"dash_attn: {name} must be 1-D of length batch + 1 >= 2, got shape {tuple(t.shape)}")
        if t.device.type != "cpu" and t.device != q.device:
            raise ValueError(f"dash_attn: {name} is on {t.device} but q is on {q.device} (pass it on q's device, or "
                             "on the CPU, which saves a device-to-host copy)")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(f"dash_attn: cu_seqlens_q (length {cu_seqlens_q.shape[0]}) and cu_seqlens_k (length "
                         f"{cu_seqlens_k.shape[0]}) must both have length batch + 1")
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if m is None:
            continue
        if isinstance(m, bool) or not isinstance(m, _INT):
            raise TypeError(f"dash_attn: {name} must be an int, got {type(m).__name__}")
        if m < 0:
            raise ValueError(f"dash_attn: {name} must be >= 0, got {m}")


# Packs (and the backward plans made for them), by (heads_q, heads_kv, head_dim, mask, host cu_seqlens bytes): a
# repeated call with the same lengths costs a dict look-up. A small LRU; an entry used during CUDA-graph capture is
# also kept for the life of the process (the graph reads its device tables).
PACK_CACHE_SIZE = 64
_packs: "collections.OrderedDict" = collections.OrderedDict()
_captured_packs: set = set()


class _PackEntry:
    """A pack (dash_pack_t) with its problem, rows and longest sequences, and the plans made for it."""

    def __init__(self, q, k, v, causal, window_left, window_right, cu_q: bytes, cu_k: bytes):
        batch = len(cu_q) // 4 - 1
        problem = _abi.make_problem(batch, q.shape[1], k.shape[1], 0, 0, q.shape[2], causal, window_left,
                                    window_right, head_dim_v=v.shape[2])
        self.pack = _abi.Pack(problem, cu_q, cu_k)
        full = self.pack.problem()
        self.problem = _abi.problem_values(full)
        self.longest_q, self.longest_k = full.seqlen_q, full.seqlen_k
        self.total_q, self.total_k = self.pack.rows()
        self.cu = (cu_q, cu_k)
        self.empty = self.total_q == 0 or self.total_k == 0  # nothing to compute: zeros (the tensors have no rows)
        self.fwd_workspace = {}  # dtype -> dash_fwd_workspace_size
        self.plans = {}  # (schedule, num_ctas, device index) -> DevicePlan
        self.devices = set()  # CUDA devices it has been used on outside capture (its tables are there)

    def longest(self, side: str) -> tuple:
        """(length, sequence) of the longest sequence on side "q" or "k" (error messages only)."""
        cu = torch.frombuffer(bytearray(self.cu[0 if side == "q" else 1]), dtype=torch.int32)
        lengths = cu[1:] - cu[:-1]
        s = int(lengths.argmax())
        return int(lengths[s]), s


def _host_cu(name: str, t) -> bytes:
    """The host bytes of a cu_seqlens tensor; a CUDA tensor is copied to the host (waiting for the device)."""
    if t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] < 2:
        raise ValueError(f"dash_attn: {name} must be a 1-D torch.int32 tensor of length batch + 1 >= 2, got "
                         f"{t.dtype} of shape {tuple(t.shape)}")
    if t.device.type != "cpu":
        t = t.cpu()
    return t.numpy().tobytes()


def _pack_entry(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window_left,
                window_right) -> _PackEntry:
    cu_q, cu_k = _host_cu("cu_seqlens_q", cu_seqlens_q), _host_cu("cu_seqlens_k", cu_seqlens_k)
    if len(cu_q) != len(cu_k):
        raise ValueError(f"dash_attn: cu_seqlens_q (length {len(cu_q) // 4}) and cu_seqlens_k (length "
                         f"{len(cu_k) // 4}) must both have length batch + 1")
    key = (q.shape[1], k.shape[1], q.shape[2], v.shape[2], causal, window_left, window_right, cu_q, cu_k)
    entry = _packs.get(key)
    if entry is None:
        if q.is_cuda and torch.cuda.is_current_stream_capturing():
            # (nor may an eviction free a pack's device tables during capture)
            raise RuntimeError(_CAPTURE_NEW_PACK)
        entry = _PackEntry(q, k, v, causal, window_left, window_right, cu_q, cu_k)
        _packs[key] = entry
        if len(_packs) > PACK_CACHE_SIZE:
            _packs.popitem(last=False)
    else:
        _packs.move_to_end(key)
    if entry.total_q != q.shape[0]:
        raise ValueError(f"dash_attn: cu_seqlens_q[-1] = {entry.total_q} must equal the rows of q, q.shape[0] = "
                         f"{q.shape[0]}")
    if entry.total_k != k.shape[0] or entry.total_k != v.shape[0]:
        raise ValueError(f"dash_attn: cu_seqlens_k[-1] = {entry.total_k} must equal the rows of k and v, "
                         f"k.shape[0] = {k.shape[0]}, v.shape[0] = {v.shape[0]}")
    for name, given, longest, side in (("max_seqlen_q", max_seqlen_q, entry.longest_q, "q"),
                                       ("max_seqlen_k", max_seqlen_k, entry.longest_k, "k")):
        if 0 <= given < longest:
            length, s = entry.longest(side)
            raise ValueError(f"dash_attn: {name} = {given} is less than the longest sequence, {length} rows "
                             f"(sequence {s}: cu_seqlens_{side}[{s + 1}] - cu_seqlens_{side}[{s}]); it must be an "
                             "upper bound")
    return entry


_CAPTURE_NEW_PACK = ("dash_attn: these cu_seqlens have not been run on this device yet, and a pack's tables cannot "
                     "be copied to the device during CUDA-graph capture; run the step once eagerly (with the same "
                     "cu_seqlens) before capturing")


def _use_on_device(entry: _PackEntry, device: torch.device) -> None:
    """The pack's tables are copied to a device on its first use there, which cannot happen during CUDA-graph
    capture; a pack captured in a graph is kept alive for the process."""
    if torch.cuda.is_current_stream_capturing():
        if device.index not in entry.devices:
            raise RuntimeError(_CAPTURE_NEW_PACK)
        _captured_packs.add(entry)
    else:
        entry.devices.add(device.index)


def _varlen_empty(q, k, v):
    total_q, hq, _ = q.shape
    return (torch.empty((total_q, hq, v.shape[-1]), dtype=q.dtype, device=q.device),  # the value head dim
            torch.empty((hq, total_q), dtype=torch.float32, device=q.device))


def _varlen_fwd_cuda(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
                     deterministic, schedule, sm_margin=0, window_left=-1, window_right=-1):
    _num_ctas(q.device, sm_margin)  # sm_margin in range: validate() leaves it here while tracing (_check_sm_margin)
    entry = _pack_entry(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window_left,
                        window_right)
    o, lse = _varlen_empty(q, k, v)
    if entry.empty:  # no query rows, or no keys at all: O = 0 and LSE = -inf
        return o.zero_(), lse.fill_(float("-inf"))
    _use_on_device(entry, q.device)
    dtype = _GPU_DTYPES[q.dtype]
    args = _abi.pack_varlen_fwd_args(entry.problem, dtype, q, k, v, o, lse.data_ptr(), softmax_scale)
    nbytes = entry.fwd_workspace.get(dtype)
    if nbytes is None:
        nbytes = entry.fwd_workspace[dtype] = LIB.dash_fwd_workspace_size(ctypes.byref(args))
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=q.device)
    pack = entry.pack.handle
    check(_on_device(q.device, lambda stream: LIB.dash_fwd_varlen(ctypes.byref(args), pack, workspace.data_ptr(),
                                                                  nbytes, stream)))
    return o, lse


def _varlen_fwd_cpu(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
                    deterministic, schedule, sm_margin=0, window_left=-1, window_right=-1):
    entry = _pack_entry(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window_left,
                        window_right)
    o, lse = _varlen_empty(q, k, v)
    if entry.empty:
        return o.zero_(), lse.fill_(float("-inf"))
    q32, k32, v32 = (t.float().contiguous() for t in (q, k, v))
    o32 = torch.empty((q.shape[0], q.shape[1], v.shape[-1]), dtype=torch.float32)
    args = _abi.pack_varlen_fwd_args(entry.problem, _abi.DASH_DTYPE_FP32, q32, k32, v32, o32, lse.data_ptr(),
                                     softmax_scale)
    check(LIB.dash_cpu_fwd_varlen(ctypes.byref(args), entry.pack.handle))
    return o32.to(q.dtype), lse


def _varlen_grads(q, k, v):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _varlen_bwd_cuda(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                     softmax_scale, deterministic, schedule, sm_margin=0, window_left=-1, window_right=-1):
    entry = _pack_entry(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window_left,
                        window_right)
    dq, dk, dv = _varlen_grads(q, k, v)
    if entry.empty:
        return dq.zero_(), dk.zero_(), dv.zero_()
    _use_on_device(entry, q.device)
    num_ctas = _num_ctas(q.device, sm_margin)
    plan_key = (schedule, num_ctas, q.device.index)
    plan = entry.plans.get(plan_key)
    if plan is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("dash_attn: no plan for these cu_seqlens yet, and plans cannot be built during "
                               "CUDA-graph capture (they copy to the device); run the step once eagerly before "
                               "capturing")
        with torch.cuda.device(q.device):
            plan = entry.plans[plan_key] = _abi.varlen_device_plan(entry.pack, schedule, num_ctas,
                                                                    _abi.DASH_GQA_AUTO)
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    lse = lse.contiguous()
    args = _abi.pack_varlen_bwd_args(entry.problem, _GPU_DTYPES[q.dtype], q, k, v, o, dout, lse.data_ptr(), dq, dk,
                                     dv, softmax_scale)
    _launch_bwd(args, plan.handle, plan, deterministic, q.device)
    return dq, dk, dv


def _varlen_bwd_cpu(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                    softmax_scale, deterministic, schedule, sm_margin=0, window_left=-1, window_right=-1):
    entry = _pack_entry(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window_left,
                        window_right)
    if entry.empty:
        return tuple(g.zero_() for g in _varlen_grads(q, k, v))

    def run(*tensors):
        args = _abi.pack_varlen_bwd_args(entry.problem, _abi.DASH_DTYPE_FP32, *tensors, softmax_scale)
        check(LIB.dash_cpu_bwd_varlen(ctypes.byref(args), entry.pack.handle, schedule.encode(),
                                      _num_ctas(q.device, sm_margin), _abi.DASH_GQA_AUTO))

    return _cpu_backward(dout, q, k, v, o, lse, run)


_lib.impl("varlen_fwd", _varlen_fwd_cuda, "CUDA")
_lib.impl("varlen_fwd", _varlen_fwd_cpu, "CPU")
_lib.impl("varlen_bwd", _varlen_bwd_cuda, "CUDA")
_lib.impl("varlen_bwd", _varlen_bwd_cpu, "CPU")
varlen_fwd = torch.ops.dash_attn.varlen_fwd.default
varlen_bwd = torch.ops.dash_attn.varlen_bwd.default


@torch.library.register_fake("dash_attn::varlen_fwd", lib=_lib)
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, deterministic,
      schedule, sm_margin=0, window_left=-1, window_right=-1):
    total_q, hq, _ = q.shape
    return q.new_empty((total_q, hq, v.shape[-1])), q.new_empty((hq, total_q), dtype=torch.float32)


@torch.library.register_fake("dash_attn::varlen_bwd", lib=_lib)
def _(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
      deterministic, schedule, sm_margin=0, window_left=-1, window_right=-1):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _varlen_setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, deterministic, schedule,
     sm_margin, *window) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.max_seqlen = (max_seqlen_q, max_seqlen_k)
    ctx.causal, ctx.softmax_scale, ctx.deterministic, ctx.schedule = causal, softmax_scale, deterministic, schedule
    ctx.sm_margin, ctx.window = sm_margin, (tuple(window) + (-1, -1))[:2]
    ctx.mark_non_differentiable(lse)


def _varlen_backward(ctx, dout, _dlse):
    q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = varlen_bwd(dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, *ctx.max_seqlen, ctx.causal,
                            ctx.softmax_scale, ctx.deterministic, ctx.schedule, ctx.sm_margin, *ctx.window)
    return (dq, dk, dv) + (None,) * 11


_register_autograd("varlen_fwd", _varlen_fwd_cuda, _varlen_fwd_cpu, _varlen_setup_context, _varlen_backward)
