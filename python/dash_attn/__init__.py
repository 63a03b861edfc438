# SPDX-License-Identifier: Apache-2.0
"""dash_attn: attention whose gradients are bitwise reproducible, at the speed of non-deterministic kernels.

    import dash_attn
    out = dash_attn.attention(q, k, v, causal=True)            # (batch, seqlen, heads, head_dim)
    out = dash_attn.scaled_dot_product_attention(q, k, v, is_causal=True)   # (batch, heads, seqlen, head_dim)
    out = dash_attn.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=True)  # packed (total, heads, dim)

CUDA tensors (bf16/fp16, Hopper) run the sm_90a kernels; CPU tensors run the library's CPU backend, which is
slow but follows the same plan orders. GQA/MQA follow from the head counts of q and k/v.

Head dims: q and k share one, v (and the output) may have another where the kernel table has the pair (MLA-style
192 / 128). Both passes run at head dims 64, 96, 128, 256 and 192 / 128, on CUDA and on the CPU backend.
dash_attn._abi.KERNEL_ROWS lists the pairs.

Batch invariance: with deterministic=True and the default schedule="auto", a sequence's gradients do not
depend on the batch it is in, the number of heads in the call or its position in the batch.
schedule="auto-fastest" may choose differently when those change.

Packed variable-length sequences (attention_varlen, flash_attn_varlen_func: flash-attn's varlen layout, int32
cu_seqlens): each sequence is computed as the batch-1 problem of its own lengths, so with deterministic=True its
gradients do not depend on the other sequences of the pack or its position there ("pack invariance"). The library
reads the lengths on the host: pass cu_seqlens as CPU tensors (CUDA ones are copied to the host, which waits for
the device). flash_attn_func and flash_attn_varlen_func are flash-attn 2.x's entry points with its semantics.

Padded batches: attention(q, k, v, key_padding_mask=mask) with a (batch, seqlen) bool mask, True = a real token (the
convention of flash-attn's bert_padding and of HF's 2-D attention_mask), runs the real tokens through the varlen
path and pads the output back with zeros. HuggingFace transformers: `import dash_attn.integrations.transformers`
registers attn_implementation="dash".
"""
from __future__ import annotations

import collections
import hashlib
import math
import weakref

from ._abi import LIBRARY_PATH, DashError  # noqa: F401  (re-exported)


def _version():
    # The version is written once, in pyproject.toml. A source checkout (PYTHONPATH=python) reads that file, so
    # it never reports an older installed copy's version; an installed package reads its metadata, which the
    # build wrote from the same file.
    import pathlib
    import re

    try:
        text = (pathlib.Path(__file__).resolve().parent.parent.parent / "pyproject.toml").read_text("utf-8")
    except OSError:
        text = ""
    found = re.search(r'^version = "([^"]+)"', text, re.M)
    if found and re.search(r'^name = "dash-attn"', text, re.M):
        return found.group(1)
    from importlib import metadata

    try:
        return metadata.version("dash-attn")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _version()
del _version

__all__ = ["attention", "attention_varlen", "scaled_dot_product_attention", "flash_attn_func",
           "flash_attn_varlen_func", "check_determinism", "DashError", "SCHEDULES"]

try:
    import torch
except ImportError:  # the C ABI (dash_attn._abi) stays usable without torch
    torch = None

if torch is not None:
    from ._torch_ops import SCHEDULES, validate, validate_varlen
    from . import _torch_ops

    def attention(q, k, v, causal=False, softmax_scale=None, deterministic=True, schedule="auto",
                  return_lse=False, sm_margin=0, window_size=(-1, -1), key_padding_mask=None):
        """softmax(q k^T * scale) v for (batch, seqlen, heads, head_dim) tensors.

        q (batch, seqlen_q, heads, head_dim), k (batch, seqlen_k, heads_kv, head_dim), v (batch, seqlen_k, heads_kv,
            head_dim_v); returns (batch, seqlen_q, heads, head_dim_v). head_dim_v may differ from head_dim where the
            kernel table has the pair (dash_attn._abi.KERNEL_ROWS: 192 / 128); the default scale is
            1 / sqrt(head_dim). On CUDA, a pair without a backward kernel (256, 192 / 128) runs only undifferentiated:
            with an input that requires grad it is refused here, before anything is allocated.

        causal: bottom-right aligned when seqlen_q != seqlen_k, as FlashAttention does (query i sees key j iff
            j <= i + seqlen_k - seqlen_q); a query row that sees no key gets zero output, LSE -inf and zero
            gradients. deterministic: bitwise reproducible gradients (ordered dQ accumulation); False is the faster
            non-deterministic mode (CUDA only: the CPU backend always adds in plan order and refuses False; with
            schedule="auto" and at most 4 key tiles, i.e. up to 512 keys at head dims 64-128 and 256 at 192 and 256,
            it runs the ordered adds too, which are faster there). schedule: the backward plan ("auto", "ascending",
            "descending", "shift", "symmetric-shift", "auto-fastest"). return_lse: also return the log-sum-exp (batch,
            heads, seqlen_q), fp32, not differentiable. sm_margin: SMs the backward leaves free for other kernels
            (communication, as FA3's sm_margin): it launches SMs - sm_margin CTAs. Any margin gives the same bits as
            long as the plan's wave of CTAs fits; below it a named schedule is refused and auto takes another plan
            (docs/DEADLOCK.md). window_size: FlashAttention's sliding window (left, right): query i sees key j iff
            i + offset - left <= j <= i + offset + right (offset = seqlen_k - seqlen_q), -1 leaving a side unbounded;
            (-1, -1), the default, is no window. With causal=True the right side is 0 (pass -1 or 0).
        key_padding_mask: None, or a (batch, seqlen) tensor marking the real tokens of a padded batch: True (or 1)
            keeps a token, False (or 0) is padding, as flash-attn's bert_padding.unpad_input and HF's 2-D
            attention_mask take it (bool, or an integer dtype holding 0 and 1; a float mask, which PyTorch and HF
            read as additive with 0 = keep, is refused). One mask for queries and keys, so seqlen_q must equal
            seqlen_k (self-attention; for anything else pack the sequences for attention_varlen). Each row's real
            tokens run as one sequence of the varlen path (attention_varlen) and the output is padded back: padded
            query rows get O = 0 (and LSE -inf), and q, k, v get zero gradients at padded positions. Any pattern
            is accepted per row (right padding, left padding, holes); causal and window_size then count positions
            among the row's real tokens, as flash-attn's varlen path does (the same as counting padded positions
            when a row's real tokens are contiguous). A row's bits are those of the packed call, and therefore the
            same whatever the other rows hold and however much padding there is (they equal attention() on that
            row's real tokens alone). The mask is read on the host: a CUDA mask is copied once, which waits for the
            device (a CPU mask avoids that), and the result is reused while the same, unmodified mask tensor is
            passed again (a model's layers share one mask).
        Size limits (plan format, index types) are checked before anything is planned or allocated.
        """
        validate(q, k, v, causal, softmax_scale, schedule, deterministic, sm_margin=sm_margin,
                 window_size=window_size)
        if key_padding_mask is not None:
            _check_key_padding_mask(key_padding_mask, q, k)
            return _attention_padded(q, k, v, key_padding_mask, causal, softmax_scale, deterministic, schedule,
                                     return_lse, sm_margin, tuple(window_size))
        return _attention(q, k, v, causal, softmax_scale, deterministic, schedule, return_lse, sm_margin,
                          tuple(window_size))

    def _check_key_padding_mask(mask, q, k):
        where = "dash_attn.attention"
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"{where}: key_padding_mask must be a torch.Tensor (batch, seqlen) of bool, True = a "
                            f"real token, got {type(mask).__name__}")
        if mask.dtype.is_floating_point or mask.dtype.is_complex:
            raise ValueError(f"{where}: key_padding_mask must be bool (True = a real token, False = padding) or an "
                             f"integer 0/1 tensor, got {mask.dtype}: a float mask is additive in PyTorch and HF (0 = "
                             "keep, -inf = drop), the opposite reading; pass mask.bool() of a 0/1 mask, or (mask == 0) "
                             "of an additive one")
        b, sq = q.shape[0], q.shape[1]
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"{where}: key_padding_mask needs seqlen_q == seqlen_k (one mask for the queries and the "
                             f"keys, as in self-attention), got q shape {tuple(q.shape)} and k shape "
                             f"{tuple(k.shape)}; pack the sequences for dash_attn.attention_varlen instead")
        if tuple(mask.shape) != (b, sq):
            raise ValueError(f"{where}: key_padding_mask must have shape (batch, seqlen) = {(b, sq)} for q shape "
                             f"{tuple(q.shape)}, got {tuple(mask.shape)}")
        if mask.device.type != "cpu" and mask.device != q.device:
            raise ValueError(f"{where}: key_padding_mask is on {mask.device} but q is on {q.device} (pass it on q's "
                             "device, or on the CPU, which saves a device-to-host copy)")

    class _ByTensor:
        """A small LRU of values worked out on the host from a tensor (a padding mask, cu_seqlens, position ids),
        keyed by the tensor itself: a model's layers pass the same tensor, so a CUDA one is read from the device once
        per forward rather than once per layer. An entry serves only while its tensor is alive (a weak reference)
        and unmodified (its version counter); an inference-mode tensor, which has no version counter, is never
        cached."""

        def __init__(self, size):
            self.size, self.entries = size, collections.OrderedDict()

        @staticmethod
        def _version(t):
            try:
                return t._version
            except RuntimeError:  # inference tensors do not track in-place changes
                return None

        def get(self, t, extra, compute):
            key = (id(t), extra)
            version = self._version(t)
            hit = self.entries.get(key)
            if hit is not None and version is not None and hit[0]() is t and hit[1] == version:
                self.entries.move_to_end(key)
                return hit[2]
            value = compute()
            if version is not None:
                self.entries[key] = (weakref.ref(t), version, value)
                while len(self.entries) > self.size:
                    self.entries.popitem(last=False)
            return value

    _unpad_cache = _ByTensor(16)

    @torch.compiler.disable
    def _unpad_info(mask, device, last=None):
        """(indices, cu_seqlens, longest) of the True entries of a (batch, seqlen) padding mask, or of its last
        `last` columns: the indices of the real tokens in the flattened (batch * seqlen) rows, int64 on `device`;
        cu_seqlens int32 on the CPU (the library plans from host lengths); the longest row. Integer masks must hold
        0 and 1 only. Host work on the mask's values: torch.compile runs it eagerly (one graph break)."""
        return _unpad_cache.get(mask, (device, last), lambda: _compute_unpad_info(mask, device, last))

    def _compute_unpad_info(mask, device, last):
        host = mask.detach()
        host = host if host.device.type == "cpu" else host.cpu()
        if host.dtype != torch.bool:
            bad = (host != 0) & (host != 1)
            if bool(bad.any()):
                raise ValueError(f"dash_attn: key_padding_mask of dtype {host.dtype} must hold 0 (padding) and 1 (a "
                                 f"real token) only, got {host[bad][0].item()}")
            host = host != 0
        if last is not None:
            host = host[:, host.shape[1] - last:]
        lengths = host.sum(1, dtype=torch.int32)
        cu = torch.zeros(host.shape[0] + 1, dtype=torch.int32)
        cu[1:] = lengths.cumsum(0)
        indices = host.reshape(-1).nonzero().reshape(-1)
        if indices.device != device:
            indices = indices.to(device)
        return indices, cu, int(lengths.max()) if lengths.numel() else 0

    def _attention_padded(q, k, v, mask, causal, softmax_scale, deterministic, schedule, return_lse, sm_margin,
                          window_size, queries_last=False):
        """attention over the True entries of a (batch, seqlen_k) padding mask, padded back to q's shape.
        queries_last: seqlen_q may be shorter than seqlen_k, and the queries are the last seqlen_q positions of the
        mask (a decoding step after left padding, as HF's flash-attention path reads it); by default one mask
        covers both. Differentiable: index_select gathers the real rows and index_put scatters the output back."""
        b, sq, hq, d = q.shape
        sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
        idx_k, cu_k, max_k = _unpad_info(mask, q.device)
        idx_q, cu_q, max_q = _unpad_info(mask, q.device, sq) if queries_last and sq != sk else (idx_k, cu_k, max_k)
        qu = q.reshape(b * sq, hq, d).index_select(0, idx_q)
        ku = k.reshape(b * sk, hk, d).index_select(0, idx_k)
        vu = v.reshape(b * sk, hk, dv).index_select(0, idx_k)
        out, lse = _attention_varlen(qu, ku, vu, cu_q, cu_k, max_q, max_k, causal, softmax_scale, deterministic,
                                     schedule, True, sm_margin, window_size)
        out = out.new_zeros((b * sq, hq, dv)).index_put((idx_q,), out).view(b, sq, hq, dv)
        if not return_lse:
            return out
        padded = lse.new_full((hq, b * sq), float("-inf"))
        padded[:, idx_q] = lse
        return out, padded.view(hq, b, sq).transpose(0, 1).contiguous()

    def _attention(q, k, v, causal, softmax_scale, deterministic, schedule, return_lse, sm_margin=0,
                   window_size=(-1, -1)):
        scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
        needs_backward = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        _torch_ops.refuse_backward_without_kernel(q, k, v, needs_backward)
        out, lse = _torch_ops.fwd(q, k, v, causal, scale, bool(deterministic), schedule, needs_backward,
                                  int(sm_margin), int(window_size[0]), int(window_size[1]))
        return (out, lse) if return_lse else out

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False, *, deterministic=True, schedule="auto",
                                     sm_margin=0):
        """torch.nn.functional.scaled_dot_product_attention with PyTorch's semantics, or a refusal.

        query (N, ..., Hq, L, E), key (N, ..., H, S, E), value (N, ..., H, S, Ev); 3-D inputs (N, L, E) have one
        head; returns (N, ..., Hq, L, Ev). Matches PyTorch: is_causal aligns the mask top-left, scale defaults to
        1/sqrt(E), heads must match unless enable_gqa=True (default False), Ev may differ from E where dash_attn's
        kernel table has the pair (192 / 128). Refused with an error naming the argument, because dash_attn cannot
        match PyTorch there: attn_mask, dropout_p > 0, is_causal=True with L != S (PyTorch's top-left mask;
        dash_attn.attention(causal=True) gives FlashAttention's bottom-right one), a pair (E, Ev) the kernel table
        does not have, scale <= 0. deterministic / schedule / sm_margin are dash_attn's (keyword only).
        """
        if attn_mask is not None:
            raise ValueError("dash_attn.scaled_dot_product_attention: attn_mask is not supported (use is_causal)")
        if dropout_p != 0.0:
            raise ValueError(f"dash_attn.scaled_dot_product_attention: dropout_p must be 0.0, got {dropout_p}")
        names = ("query", "key", "value")
        for name, t in zip(names, (query, key, value)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"dash_attn.scaled_dot_product_attention: {name} must be a torch.Tensor, got "
                                f"{type(t).__name__}")
            if t.dim() < 3:
                raise ValueError(f"dash_attn.scaled_dot_product_attention: {name} must have at least 3 dimensions "
                                 f"(N, ..., L, E), got shape {tuple(t.shape)}")
        qs, ks, vs = (tuple(t.shape) for t in (query, key, value))
        if not (query.dim() == key.dim() == value.dim()):
            raise ValueError(f"dash_attn.scaled_dot_product_attention: query, key and value must have the same "
                             f"number of dimensions, got shapes {qs}, {ks}, {vs}")
        lead = 1 if query.dim() == 3 else query.dim() - 3  # batch dims: N, or N, ... before the heads
        if not (qs[:lead] == ks[:lead] == vs[:lead]):
            raise ValueError(f"dash_attn.scaled_dot_product_attention: query, key and value must have the same "
                             f"batch dimensions, got shapes {qs}, {ks}, {vs}")
        if ks[:-1] != vs[:-1]:
            raise ValueError(f"dash_attn.scaled_dot_product_attention: key shape {ks} and value shape {vs} must "
                             "match in all but the last dimension (the value head dim Ev)")
        heads = lambda shape: shape[-3] if len(shape) > 3 else 1
        if heads(qs) != heads(ks) and not enable_gqa:
            raise ValueError(f"dash_attn.scaled_dot_product_attention: query and key head counts differ (shapes "
                             f"{qs} and {ks}); pass enable_gqa=True for grouped-query attention, as with PyTorch")
        # PyTorch aligns is_causal top-left (query i sees keys j <= i). With L >= S that is the window
        # (-1, L - S) about dash_attn's bottom-right diagonal; with L < S it would need a negative right side.
        window = (-1, -1)
        if is_causal and qs[-2] > ks[-2]:
            window = (-1, qs[-2] - ks[-2])
        elif is_causal and qs[-2] < ks[-2]:
            raise ValueError(f"dash_attn.scaled_dot_product_attention: is_causal=True with L < S (query {qs}, "
                             f"key {ks}): PyTorch aligns this mask top-left (query i sees keys j <= i), which "
                             "would need a window ending before dash_attn's diagonal; "
                             "dash_attn.attention(q, k, v, causal=True) aligns it bottom-right, as FlashAttention "
                             "does")
        if scale is not None and not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"dash_attn.scaled_dot_product_attention: scale must be finite and > 0, got {scale}")

        # (N, ..., H, L, E) -> (batch, L, H, E): leading dims fold into the batch; 3-D inputs have one head.
        def to_bshd(t):
            t = t.unsqueeze(-3) if t.dim() == 3 else t.reshape(-1, *t.shape[-3:])
            return t.transpose(1, 2)

        q, k, v = (to_bshd(t) for t in (query, key, value))
        caller_shape = {id(q): qs, id(k): ks, id(v): vs}
        causal = bool(is_causal) and window == (-1, -1)
        validate(q, k, v, causal, scale, schedule, deterministic, names=("query", "key", "value"),
                 layout="(N, ..., heads, L, E)", shown=lambda t: caller_shape[id(t)], sm_margin=sm_margin,
                 window_size=window)
        out = _attention(q, k, v, causal, scale, deterministic, schedule, False, sm_margin, window)
        return out.transpose(1, 2).reshape(qs[:-1] + vs[-1:])

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
        """flash-attn 2.x's `flash_attn_func` with its semantics, for the arguments dash_attn supports.

        q (batch, seqlen_q, heads, head_dim), k / v (batch, seqlen_k, heads_kv, head_dim / head_dim_v); returns out
        (batch, seqlen_q, heads, head_dim_v) (v's head dim may differ where the kernel table has the pair: 192 /
        128). As flash-attn's entry point does: a window side >= seqlen_k becomes -1 (unbounded), and with
        causal=True the right side is 0 (a causal mask is aligned bottom-right). `deterministic` selects
        dash_attn's deterministic backward (flash-attn's default False runs the faster non-deterministic one;
        on CPU tensors, which flash-attn does not take, dash_attn's CPU backend needs deterministic=True).
        Refused with an error naming the argument: dropout_p > 0, softcap != 0, alibi_slopes, and
        return_attn_probs=True (dash_attn never forms the attention matrix flash-attn returns there)."""
        where = "dash_attn.flash_attn_func"
        _refuse_flash_attn_extras(where, dropout_p, softcap, alibi_slopes, return_attn_probs, "attention")
        if isinstance(k, torch.Tensor) and k.dim() == 4:
            window_size = _flash_attn_window(window_size, causal, k.shape[1])
        return attention(q, k, v, causal=causal, softmax_scale=softmax_scale, deterministic=deterministic,
                         window_size=window_size)

    def _refuse_flash_attn_extras(where, dropout_p, softcap, alibi_slopes, return_attn_probs, native):
        """flash-attn's arguments dash_attn cannot match, refused with their names."""
        if dropout_p != 0.0:
            raise ValueError(f"{where}: dropout_p must be 0.0 (dropout is not supported), got {dropout_p}")
        if softcap != 0.0:
            raise ValueError(f"{where}: softcap must be 0.0 (soft-capping is not supported), got {softcap}")
        if alibi_slopes is not None:
            raise ValueError(f"{where}: alibi_slopes must be None (ALiBi is not supported)")
        if return_attn_probs:
            raise ValueError(f"{where}: return_attn_probs=True is not supported: dash_attn never forms the "
                             f"attention matrix (dash_attn.{native}(..., return_lse=True) returns the LSE)")

    def _flash_attn_window(window_size, causal, seqlen_k):
        """The band flash-attn's entry points run: a side >= seqlen_k (max_seqlen_k for varlen) is unbounded (-1),
        and causal=True makes the right side 0. A malformed window_size is passed on for validate() to name."""
        if isinstance(window_size, (tuple, list)) and len(window_size) == 2 \
                and isinstance(seqlen_k, (int, torch.SymInt)) \
                and all(isinstance(w, int) and not isinstance(w, bool) for w in window_size):
            window_size = tuple(-1 if w >= seqlen_k else w for w in window_size)
            if causal:
                window_size = (window_size[0], 0)
        return window_size

    def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=False,
                         softmax_scale=None, deterministic=True, schedule="auto", return_lse=False, sm_margin=0,
                         window_size=(-1, -1)):
        """attention() over packed variable-length sequences, flash-attn's varlen layout.

        q (total_q, heads_q, head_dim), k (total_k, heads_kv, head_dim), v (total_k, heads_kv, head_dim_v, which may
        differ from head_dim as in attention()); sequence s holds query rows
        [cu_seqlens_q[s], cu_seqlens_q[s + 1]) and key rows [cu_seqlens_k[s], cu_seqlens_k[s + 1]) (int32, 1-D,
        length batch + 1, from 0, non-decreasing, ending at q.shape[0] / k.shape[0]); lengths may differ between q
        and k and may be 0. The mask applies per sequence (causal and window_size aligned bottom-right per
        sequence, as attention() does for one sequence); a query row that sees no key (e.g. its sequence has no
        keys) gets zero output, LSE -inf and zero gradients. Returns out (total_q, heads_q, head_dim_v), and with
        return_lse=True also the LSE (heads_q, total_q), fp32.

        cu_seqlens: the library plans from HOST lengths. CPU tensors are read directly; CUDA tensors are copied
        to the host once per call, which SYNCHRONISES with the device (pass CPU copies in a hot loop). A pack (and
        its backward plan) is cached by its lengths, so repeating the same cu_seqlens costs a dict look-up.
        max_seqlen_q / max_seqlen_k: optional upper bounds, checked against the longest sequences.
        deterministic, schedule, sm_margin: as attention(); with deterministic=True a sequence's gradients are
        bitwise the same whatever else is in the pack and wherever it sits.
        """
        validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
                        schedule, deterministic, sm_margin=sm_margin, window_size=window_size)
        return _attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                                 softmax_scale, deterministic, schedule, return_lse, sm_margin, tuple(window_size))

    def _attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
                          deterministic, schedule, return_lse, sm_margin, window_size):
        scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
        needs_backward = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        _torch_ops.refuse_backward_without_kernel(q, k, v, needs_backward)
        # One host copy of CUDA lengths for the forward and the backward (the ops read host lengths).
        cu_q = cu_seqlens_q if cu_seqlens_q.device.type == "cpu" else cu_seqlens_q.cpu()
        cu_k = cu_seqlens_k if cu_seqlens_k.device.type == "cpu" else cu_seqlens_k.cpu()
        out, lse = _torch_ops.varlen_fwd(q, k, v, cu_q, cu_k, -1 if max_seqlen_q is None else int(max_seqlen_q),
                                         -1 if max_seqlen_k is None else int(max_seqlen_k), causal, scale,
                                         bool(deterministic), schedule, int(sm_margin), int(window_size[0]),
                                         int(window_size[1]))
        return (out, lse) if return_lse else out

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                               alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None, *,
                               schedule="auto", sm_margin=0):
        """flash-attn 2.x's `flash_attn_varlen_func` with its semantics, for the arguments dash_attn supports.

        q (total_q, heads, head_dim), k / v (total_k, heads_kv, head_dim / head_dim_v), cu_seqlens_q / cu_seqlens_k
        int32 (batch + 1); returns out (total_q, heads, head_dim_v). max_seqlen_q / max_seqlen_k are upper bounds of
        the sequence lengths, as flash-attn takes them (checked here: a bound below a sequence's length is an error). As
        flash-attn's entry point does: a window side >= max_seqlen_k becomes -1 (unbounded), and with causal=True
        the right side is 0 (the causal mask is aligned bottom-right per sequence). `deterministic` selects
        dash_attn's deterministic backward (flash-attn's default False runs the faster non-deterministic one; on
        CPU tensors, which flash-attn does not take, dash_attn's CPU backend needs deterministic=True).
        cu_seqlens on CUDA are copied to the host once per call (a synchronisation; CPU tensors avoid it).
        Refused with an error naming the argument: dropout_p > 0, softcap != 0, alibi_slopes,
        return_attn_probs=True and block_table (paged KV). schedule / sm_margin are dash_attn's (keyword only)."""
        where = "dash_attn.flash_attn_varlen_func"
        _refuse_flash_attn_extras(where, dropout_p, softcap, alibi_slopes, return_attn_probs, "attention_varlen")
        if block_table is not None:
            raise ValueError(f"{where}: block_table must be None (a paged KV cache is not supported)")
        for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if m is None:  # attention_varlen takes None (no bound); flash-attn needs them
                raise TypeError(f"{where}: {name} must be an int (an upper bound of the sequence lengths), got None")
        window_size = _flash_attn_window(window_size, causal, max_seqlen_k)
        return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                                softmax_scale=softmax_scale, deterministic=deterministic, schedule=schedule,
                                sm_margin=sm_margin, window_size=window_size)

    def check_determinism(q, k, v, runs=5, causal=False, deterministic=True, schedule="auto", seed=0,
                          window_size=(-1, -1)):
        """Runs forward + backward `runs` times on the same inputs and a fixed upstream gradient; returns one
        dict per run with the SHA-256 of dq, dk and dv, and whether every run matched the first."""
        gen = torch.Generator(device=q.device).manual_seed(seed)
        dout = torch.randn(q.shape[:-1] + v.shape[-1:], generator=gen, device=q.device, dtype=q.dtype)  # out's shape
        results = []
        for run in range(runs):
            qs, ks, vs = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            out = attention(qs, ks, vs, causal=causal, deterministic=deterministic, schedule=schedule,
                            window_size=window_size)
            out.backward(dout)
            row = {"run": run}
            for name, t in (("dq", qs.grad), ("dk", ks.grad), ("dv", vs.grad)):
                row[name + "_sha256"] = hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8)
                                                       .numpy().tobytes()).hexdigest()
            results.append(row)
        first = results[0]
        identical = all(r[k] == first[k] for r in results for k in first if k != "run")
        return {"runs": results, "identical": identical}
else:
    from ._abi import SCHEDULES

    def _needs_torch(*_args, **_kwargs):
        raise ImportError("dash_attn: this function needs PyTorch; only the C ABI (dash_attn._abi) works without it")

    attention = scaled_dot_product_attention = check_determinism = _needs_torch
    attention_varlen = flash_attn_func = flash_attn_varlen_func = _needs_torch
