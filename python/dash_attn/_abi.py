# SPDX-License-Identifier: Apache-2.0
"""ctypes face of the C ABI (include/dash/dash_attn.h).

The structs below mirror the C header; `_check_layout` compares every size with the library's own
`dash_abi_struct_size`, so a header change that is not mirrored here fails at import, not in a kernel.
"""
from __future__ import annotations

import collections
import ctypes
import os
import pathlib
import struct

DASH_OK = 0
DASH_DTYPE_BF16, DASH_DTYPE_FP16, DASH_DTYPE_FP32 = 0, 1, 2
DASH_MASK_FULL, DASH_MASK_CAUSAL, DASH_MASK_WINDOW = 0, 1, 2
DASH_GQA_SPLIT_HEADS, DASH_GQA_PACK_GROUP, DASH_GQA_AUTO, DASH_GQA_AUTO_NONDETERMINISTIC = 0, 1, 2, 3
DASH_PLAN_NONDETERMINISTIC_ONLY = 1 << 2  # dash_plan_flags
DASH_PLAN_ITEM_MAJOR = 1 << 3
DASH_PLAN_NONDETERMINISTIC_RUNS_ORDERED = 1 << 4
# dash_check_problem's needs_backward (dash_check_pass): the forward; the forward and the GPU backward (the pair's row
# must have a backward kernel); the forward and the CPU backend's backward (every row).
DASH_CHECK_FORWARD, DASH_CHECK_BACKWARD, DASH_CHECK_CPU_BACKWARD = 0, 1, 2


class DashError(RuntimeError):
    """A call into the dash-attn library failed; the message names the offending argument."""


class Problem(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32) for name in (
        "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "mask_kind", "window_left",
        "window_right", "head_dim_v")]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("batch_stride", ctypes.c_int64), ("seq_stride", ctypes.c_int64),
                ("head_stride", ctypes.c_int64)]


class FwdArgs(ctypes.Structure):
    _fields_ = [("problem", Problem), ("dtype", ctypes.c_int), ("q", Tensor), ("k", Tensor), ("v", Tensor),
                ("o", Tensor), ("lse", ctypes.c_void_p), ("softmax_scale", ctypes.c_float)]


class BwdArgs(ctypes.Structure):
    _fields_ = [("problem", Problem), ("dtype", ctypes.c_int), ("q", Tensor), ("k", Tensor), ("v", Tensor),
                ("o", Tensor), ("dout", Tensor), ("lse", ctypes.c_void_p), ("dq", Tensor), ("dk", Tensor),
                ("dv", Tensor), ("softmax_scale", ctypes.c_float), ("debug_order_log", ctypes.c_void_p)]


class KernelRow(ctypes.Structure):
    """dash_kernel_row: one (head_dim, head_dim_v) pair of the kernel table and the passes it has kernels for."""
    _fields_ = [(name, ctypes.c_int32) for name in ("head_dim", "head_dim_v", "forward", "backward")]


class PlanHeader(ctypes.Structure):
    """dash_plan_header (dash/plan_format.h)."""
    _fields_ = ([(name, ctypes.c_uint32) for name in ("magic", "version", "total_bytes", "flags")] +
                [("problem", Problem)] +
                [(name, ctypes.c_int32) for name in (
                    "block_m", "block_n", "num_q_tiles", "num_kv_tiles", "planner", "gqa_mode", "group_size",
                    "heads_per_unit", "num_units", "items_per_unit", "segments_per_unit", "visits_per_unit",
                    "num_ctas", "min_coresident_ctas", "max_visits_per_item", "ticket_group_units")] +
                [(name, ctypes.c_uint32) for name in (
                    "items_offset", "segments_offset", "visits_offset", "dq_count_offset",
                    "group_head_by_rank_offset")] +
                [("rank_spacing", ctypes.c_int32), ("items_per_slot", ctypes.c_int32), ("reserved1", ctypes.c_uint32),
                 ("reserved2", ctypes.c_uint32 * 2)])


# The same structs as flat struct formats ('@': the C compiler's sizes and alignment), so that a call's arguments are
# packed in one step: pack_fwd_args / pack_bwd_args (building the nested ctypes structs field by field cost ~7 us of
# the host time per call). A tensor is (data, batch_stride, seq_stride, head_stride); '0q' pads the end to 8 bytes.
_TENSOR_FORMAT = "P3q"
_FWD_ARGS_FORMAT = struct.Struct("@10ii" + _TENSOR_FORMAT * 4 + "Pf0q")
_BWD_ARGS_FORMAT = struct.Struct("@10ii" + _TENSOR_FORMAT * 5 + "P" + _TENSOR_FORMAT * 3 + "fP")


def problem_values(problem: Problem) -> tuple:
    return tuple(getattr(problem, field) for field, _ in Problem._fields_)


def _tensor_values(t) -> tuple:
    """A 4-D (batch, seqlen, heads, head_dim) torch tensor as dash_tensor's fields."""
    stride = t.stride()
    return (t.data_ptr(), stride[0], stride[1], stride[2])


def _rows_values(t) -> tuple:
    """A packed 3-D (total_rows, heads, head_dim) torch tensor of a varlen call as dash_tensor's fields (the
    batch_stride is unused there: 0)."""
    stride = t.stride()
    return (t.data_ptr(), 0, stride[0], stride[1])


def pack_fwd_args(problem: tuple, dtype: int, q, k, v, o, lse_ptr: int, softmax_scale: float,
                  values=_tensor_values) -> FwdArgs:
    """dash_fwd_args of 4-D tensors, or with values=_rows_values of a varlen call's packed 3-D tensors."""
    return FwdArgs.from_buffer_copy(_FWD_ARGS_FORMAT.pack(
        *problem, dtype, *values(q), *values(k), *values(v), *values(o), lse_ptr, softmax_scale))


def pack_bwd_args(problem: tuple, dtype: int, q, k, v, o, dout, lse_ptr: int, dq, dk, dv,
                  softmax_scale: float, values=_tensor_values) -> BwdArgs:
    """dash_bwd_args of 4-D tensors, or with values=_rows_values of a varlen call's packed 3-D tensors."""
    return BwdArgs.from_buffer_copy(_BWD_ARGS_FORMAT.pack(
        *problem, dtype, *values(q), *values(k), *values(v), *values(o), *values(dout), lse_ptr, *values(dq),
        *values(dk), *values(dv), softmax_scale, 0))


def pack_varlen_fwd_args(problem: tuple, dtype: int, q, k, v, o, lse_ptr: int, softmax_scale: float) -> FwdArgs:
    return pack_fwd_args(problem, dtype, q, k, v, o, lse_ptr, softmax_scale, _rows_values)


def pack_varlen_bwd_args(problem: tuple, dtype: int, q, k, v, o, dout, lse_ptr: int, dq, dk, dv,
                         softmax_scale: float) -> BwdArgs:
    return pack_bwd_args(problem, dtype, q, k, v, o, dout, lse_ptr, dq, dk, dv, softmax_scale, _rows_values)


def _candidates():
    env = os.environ.get("DASH_ATTN_LIBRARY")
    if env:
        yield pathlib.Path(env)
        return
    here = pathlib.Path(__file__).resolve().parent
    yield here / "libdash_attn.so"  # installed by `pip install .`
    for build in ("build", "build-host"):  # a source checkout built with scripts/build.sh
        yield here.parents[1] / build / "libdash_attn.so"


def _load():
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.exists():
            lib = ctypes.CDLL(str(path))
            _declare(lib)
            _check_layout(lib)
            return lib, path
    raise ImportError("dash_attn: libdash_attn.so not found (tried " + ", ".join(tried) +
                      "); build it with scripts/build.sh or install with `pip install .`, "
                      "or point DASH_ATTN_LIBRARY at it")


def _declare(lib):
    c_int, c_size, vp = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
    sigs = {
        "dash_last_error": (ctypes.c_char_p, []),
        "dash_abi_struct_size": (c_size, [ctypes.c_char_p]),
        "dash_plan_build_host": (c_int, [ctypes.POINTER(Problem), ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                                         ctypes.POINTER(vp), ctypes.POINTER(c_size)]),
        "dash_plan_free_host": (None, [vp]),
        "dash_cpu_fwd": (c_int, [ctypes.POINTER(FwdArgs)]),
        "dash_cpu_bwd": (c_int, [ctypes.POINTER(BwdArgs), vp, c_size]),
        "dash_cuda_available": (c_int, []),
        "dash_supported_head_dims": (ctypes.POINTER(ctypes.c_int32), []),
        "dash_kernel_rows": (ctypes.POINTER(KernelRow), []),
        "dash_check_problem": (c_int, [ctypes.POINTER(Problem), ctypes.c_int32]),
        "dash_planner_runs": (ctypes.c_int64, []),
        "dash_schedule_names": (ctypes.POINTER(ctypes.c_char_p), []),
        "dash_attention_flops": (ctypes.c_double, [ctypes.POINTER(Problem), ctypes.c_int32]),
        "dash_fwd": (c_int, [ctypes.POINTER(FwdArgs), vp, c_size, vp]),
        "dash_fwd_workspace_size": (c_size, [ctypes.POINTER(FwdArgs)]),
        "dash_plan_create": (c_int, [ctypes.POINTER(Problem), ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                                     ctypes.POINTER(vp)]),
        "dash_plan_create_async": (c_int, [ctypes.POINTER(Problem), ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                                           ctypes.POINTER(vp)]),
        "dash_plan_wait": (c_int, [vp]),
        "dash_plan_tables": (c_int, [vp, ctypes.POINTER(ctypes.c_int32)]),
        "dash_plan_destroy": (None, [vp]),
        "dash_plan_note": (ctypes.c_char_p, [vp]),
        "dash_usable_sms": (c_int, [ctypes.POINTER(ctypes.c_int32)]),
        "dash_plan_blob": (c_int, [vp, ctypes.POINTER(vp), ctypes.POINTER(c_size)]),
        "dash_bwd_workspace_size": (c_size, [ctypes.POINTER(BwdArgs), vp, ctypes.c_int32]),
        "dash_bwd": (c_int, [ctypes.POINTER(BwdArgs), vp, ctypes.c_int32, vp, c_size, vp]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    # Packed variable-length sequences. A library built before them lacks these: the rest of the binding still works
    # and the varlen calls say what is missing (require_varlen).
    i32p = ctypes.POINTER(ctypes.c_int32)
    varlen = {
        "dash_pack_create": (c_int, [ctypes.POINTER(Problem), i32p, i32p, ctypes.POINTER(vp)]),
        "dash_pack_destroy": (None, [vp]),
        "dash_pack_problem": (c_int, [vp, ctypes.POINTER(Problem)]),
        "dash_pack_rows": (c_int, [vp, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64)]),
        "dash_fwd_varlen": (c_int, [ctypes.POINTER(FwdArgs), vp, vp, c_size, vp]),
        "dash_plan_create_varlen": (c_int, [vp, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(vp)]),
        "dash_cpu_fwd_varlen": (c_int, [ctypes.POINTER(FwdArgs), vp]),
        "dash_cpu_bwd_varlen": (c_int, [ctypes.POINTER(BwdArgs), vp, ctypes.c_char_p, ctypes.c_int32,
                                        ctypes.c_int32]),
    }
    missing = []
    for name, (restype, argtypes) in varlen.items():
        fn = getattr(lib, name, None)
        if fn is None:
            missing.append(name)
        else:
            fn.restype, fn.argtypes = restype, argtypes
    global MISSING_VARLEN
    MISSING_VARLEN = tuple(missing)


def _check_layout(lib):
    for name, struct in (("dash_problem", Problem), ("dash_tensor", Tensor), ("dash_fwd_args", FwdArgs),
                         ("dash_bwd_args", BwdArgs), ("dash_plan_header", PlanHeader), ("dash_kernel_row", KernelRow)):
        theirs = lib.dash_abi_struct_size(name.encode())
        if theirs != ctypes.sizeof(struct):
            raise ImportError(f"dash_attn: {name} is {theirs} bytes in the library but {ctypes.sizeof(struct)} "
                              "in dash_attn/_abi.py: the binding and the library are out of step")
    for name, packed, struct_type in (("dash_fwd_args", _FWD_ARGS_FORMAT, FwdArgs),
                                      ("dash_bwd_args", _BWD_ARGS_FORMAT, BwdArgs)):
        if packed.size != ctypes.sizeof(struct_type):
            raise ImportError(f"dash_attn: the packed form of {name} is {packed.size} bytes, the struct "
                              f"{ctypes.sizeof(struct_type)}: dash_attn/_abi.py is out of step with itself")


MISSING_VARLEN: tuple = ()  # the varlen entry points the loaded library lacks (set by _declare)
LIB, LIBRARY_PATH = _load()


def require_varlen() -> None:
    """Raises DashError when the loaded library predates packed variable-length sequences."""
    if MISSING_VARLEN:
        raise DashError(f"dash_attn: {LIBRARY_PATH} lacks {', '.join(MISSING_VARLEN)}: it was built before varlen "
                        "support; rebuild it (scripts/build.sh) or point DASH_ATTN_LIBRARY at a current build")


def check(status: int) -> None:
    """Raises DashError with the library's message when `status` is not DASH_OK."""
    if status != DASH_OK:
        raise DashError(LIB.dash_last_error().decode())


def _read_supported_head_dims():
    dims, ptr = [], LIB.dash_supported_head_dims()
    while ptr[len(dims)] != 0:
        dims.append(int(ptr[len(dims)]))
    return tuple(dims)


# The head dims the kernels are built for with head_dim_v = head_dim (64, 96, 128, 256); the CPU backend accepts the
# same (one contract for both devices). KERNEL_ROWS lists every pair, 192 / 128 too.
SUPPORTED_HEAD_DIMS = _read_supported_head_dims()


# (head_dim, head_dim_v, forward, backward) of one row of the kernel table (dash_kernel_rows); the passes as bools.
KernelPair = collections.namedtuple("KernelPair", "head_dim head_dim_v forward backward")


def _read_kernel_rows():
    rows, ptr = [], LIB.dash_kernel_rows()
    while ptr[len(rows)].head_dim != 0:
        r = ptr[len(rows)]
        rows.append(KernelPair(int(r.head_dim), int(r.head_dim_v), bool(r.forward), bool(r.backward)))
    return tuple(rows)


# The kernel table's rows, in table order, as the library lists them (read once: the checks below run inside
# torch.compile'd code, where a ctypes call would break the graph).
KERNEL_ROWS = _read_kernel_rows()
_ROW_OF_PAIR = {(r.head_dim, r.head_dim_v): r for r in KERNEL_ROWS}


def kernel_row(head_dim: int, head_dim_v: int):
    """The KernelPair of (head_dim, head_dim_v) (head_dim_v 0 meaning head_dim), or None when the table has none."""
    return _ROW_OF_PAIR.get((head_dim, head_dim_v or head_dim))


def pair_name(head_dim: int, head_dim_v: int) -> str:
    """A pair as the library's messages name it: "128", or "192/128" when the head dims differ."""
    return str(head_dim) if head_dim_v in (0, head_dim) else f"{head_dim}/{head_dim_v}"


def _pairs_text(rows) -> str:
    names = [pair_name(r.head_dim, r.head_dim_v) for r in rows]
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1] if names else "none"


# "64, 96, 128, 192/128 and 256": every pair; the pairs with a backward kernel; those with a forward kernel only.
PAIRS_TEXT = _pairs_text(KERNEL_ROWS)
BACKWARD_PAIRS_TEXT = _pairs_text([r for r in KERNEL_ROWS if r.backward])
FORWARD_ONLY_PAIRS_TEXT = _pairs_text([r for r in KERNEL_ROWS if not r.backward])


def _read_schedule_names():
    names, ptr = [], LIB.dash_schedule_names()
    while ptr[len(names)] is not None:
        names.append(ptr[len(names)].decode())
    return tuple(names)


# The schedule names the library accepts ("auto", "auto-fastest", then every planner's), from the library.
SCHEDULES = _read_schedule_names()


def mask_of(causal: bool, window_left: int = -1, window_right: int = -1) -> tuple:
    """(mask_kind, window_left, window_right) of dash_problem for FlashAttention's (causal, window_size): no window
    is (-1, -1), and causal=True makes the right side 0 (the keys up to the diagonal). A band that is the full or
    the causal mask is given as that mask, so that it gets that mask's plans."""
    if causal:
        window_right = 0
    if window_left == -1 and window_right == -1:
        return DASH_MASK_FULL, -1, -1
    if window_left == -1 and window_right == 0:
        return DASH_MASK_CAUSAL, -1, -1
    return DASH_MASK_WINDOW, window_left, window_right


def make_problem(batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, window_left=-1,
                 window_right=-1, head_dim_v=0) -> Problem:
    """head_dim: of q and k; head_dim_v: of v and the output, 0 (or head_dim) when they are equal, which is stored as
    0 so that problems of equal head dims have one representation."""
    kind, left, right = mask_of(causal, window_left, window_right)
    return Problem(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                   head_dim=head_dim, mask_kind=kind, window_left=left, window_right=right,
                   head_dim_v=0 if head_dim_v == head_dim else head_dim_v)


def attention_flops(problem: Problem, backward: bool) -> float:
    """FLOPs of one pass as every dash-attn benchmark counts them (dash_attention_flops in dash/dash_attn.h)."""
    flops = LIB.dash_attention_flops(ctypes.byref(problem), int(bool(backward)))
    if flops == 0:
        raise ValueError("dash_attn: " + LIB.dash_last_error().decode())
    return flops


_checked_problems: set = set()


def check_problem(problem: Problem, needs_backward: bool, cpu: bool = False) -> None:
    """Raises ValueError naming the field and the limit when the library cannot run `problem` (head dims, mask,
    plan-format and kernel size limits). needs_backward: the backward's limits too, and on the GPU (cpu=False) the
    pair's backward kernel (the CPU backend runs the backward at every row of the table). Costs no planning and no
    allocation; a problem that passed is not asked about again (the answer depends on the problem only)."""
    needs = (DASH_CHECK_CPU_BACKWARD if cpu else DASH_CHECK_BACKWARD) if needs_backward else DASH_CHECK_FORWARD
    key = (bytes(problem), needs)
    if key in _checked_problems:
        return
    if LIB.dash_check_problem(ctypes.byref(problem), needs) != DASH_OK:
        raise ValueError("dash_attn: " + LIB.dash_last_error().decode())
    _checked_problems.add(key)


class HostPlan:
    """A validated plan as the bytes of include/dash/plan_format.h (host memory, no GPU needed)."""

    def __init__(self, problem: Problem, schedule: str, num_ctas: int, gqa_mode: int):
        blob, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(LIB.dash_plan_build_host(ctypes.byref(problem), schedule.encode(), num_ctas, gqa_mode,
                                       ctypes.byref(blob), ctypes.byref(size)))
        try:
            self.blob = ctypes.string_at(blob, size.value)
        finally:
            LIB.dash_plan_free_host(blob)


class DevicePlan:
    """A plan for the current CUDA device (dash_plan_create): its unit template is built once per process and copied
    to the device once, shared by every plan of the same sequence template.

    asynchronous: dash_plan_create_async, which returns before a new template's tables are written (the same plan);
    the first backward then queues their copy on its stream instead of waiting for them on the host. wait() waits for
    them and raises the error of their build, if any."""

    def __init__(self, problem: Problem, schedule: str, num_ctas: int, gqa_mode: int, asynchronous: bool = False):
        handle = ctypes.c_void_p()
        create = LIB.dash_plan_create_async if asynchronous else LIB.dash_plan_create
        check(create(ctypes.byref(problem), schedule.encode(), num_ctas, gqa_mode, ctypes.byref(handle)))
        self.handle = handle
        self.workspace_bytes = [None, None]  # dash_bwd_workspace_size per mode, filled in by the first backwards

    def wait(self):
        """Waits until the plan's tables are validated and on the device (dash_plan_wait)."""
        check(LIB.dash_plan_wait(self.handle))

    @property
    def note(self) -> str:
        """What auto chose and why (dash_plan_note)."""
        return (LIB.dash_plan_note(self.handle) or b"").decode()

    def header_field(self, name: str) -> int:
        """One field of the plan's header (dash_plan_blob), e.g. "planner", "gqa_mode", "min_coresident_ctas"."""
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(LIB.dash_plan_blob(self.handle, ctypes.byref(data), ctypes.byref(size)))
        return int(getattr(ctypes.cast(data, ctypes.POINTER(PlanHeader)).contents, name))

    def __del__(self):
        if getattr(self, "handle", None) and LIB is not None:
            LIB.dash_plan_destroy(self.handle)


def _host_int32(name: str, values, count: int):
    """`values` (bytes-like holding int32, or a sequence of ints) as a ctypes int32[count]; the count is checked here
    because the library reads exactly `count` of them."""
    if isinstance(values, (bytes, bytearray, memoryview)):
        data = bytes(values)
        if len(data) != 4 * count:
            raise ValueError(f"dash_attn: {name} must hold batch + 1 = {count} int32 values, got {len(data) // 4}")
        return (ctypes.c_int32 * count).from_buffer_copy(data)
    values = [int(x) for x in values]
    if len(values) != count:
        raise ValueError(f"dash_attn: {name} must hold batch + 1 = {count} int32 values, got {len(values)}")
    return (ctypes.c_int32 * count)(*values)


class Pack:
    """A pack of variable-length sequences (dash_pack_t): the problem (batch = number of sequences; its seqlen fields
    are ignored) and the HOST cumulative lengths cu_seqlens_q / cu_seqlens_k (int32[batch + 1] each, as bytes or a
    sequence of ints). The library checks them (errors name e.g. cu_seqlens_q[3]; raised as ValueError) and builds
    the tables its varlen calls read. Owns the handle: close() or garbage collection destroys it."""

    def __init__(self, problem: Problem, cu_seqlens_q, cu_seqlens_k):
        require_varlen()
        count = problem.batch + 1
        if problem.batch < 1:
            raise ValueError(f"dash_attn: a pack needs at least one sequence (problem.batch = {problem.batch})")
        cu_q = _host_int32("cu_seqlens_q", cu_seqlens_q, count)
        cu_k = _host_int32("cu_seqlens_k", cu_seqlens_k, count)
        handle = ctypes.c_void_p()
        if LIB.dash_pack_create(ctypes.byref(problem), cu_q, cu_k, ctypes.byref(handle)) != DASH_OK:
            raise ValueError("dash_attn: " + LIB.dash_last_error().decode())
        self.handle = handle

    def problem(self) -> Problem:
        """The pack's problem: the caller's, with seqlen_q / seqlen_k = its longest sequences (dash_pack_problem)."""
        out = Problem()
        check(LIB.dash_pack_problem(self.handle, ctypes.byref(out)))
        return out

    def rows(self) -> tuple:
        """(total_q, total_k): rows of the packed tensors, cu_seqlens_q[batch] and cu_seqlens_k[batch]."""
        total_q, total_k = ctypes.c_int64(), ctypes.c_int64()
        check(LIB.dash_pack_rows(self.handle, ctypes.byref(total_q), ctypes.byref(total_k)))
        return total_q.value, total_k.value

    def close(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle and LIB is not None:
            LIB.dash_pack_destroy(handle)

    def __del__(self):
        self.close()


def varlen_device_plan(pack: Pack, schedule: str, num_ctas: int, gqa_mode: int) -> DevicePlan:
    """A backward plan for `pack` on the current CUDA device (dash_plan_create_varlen), as a DevicePlan; it keeps the
    pack alive."""
    require_varlen()
    handle = ctypes.c_void_p()
    check(LIB.dash_plan_create_varlen(pack.handle, schedule.encode(), num_ctas, gqa_mode, ctypes.byref(handle)))
    plan = DevicePlan.__new__(DevicePlan)
    plan.handle, plan.workspace_bytes, plan.pack = handle, [None, None], pack
    return plan
