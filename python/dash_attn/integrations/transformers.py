# SPDX-License-Identifier: Apache-2.0
"""HuggingFace transformers: dash_attn as attn_implementation="dash".

    import dash_attn.integrations.transformers             # registers "dash" (register() does it again, harmlessly)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="dash")
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="dash", dtype=torch.bfloat16)
    model.set_attn_implementation("dash")                   # on a model already built

Importing this module registers the attention function with transformers' AttentionInterface and, under the same
name, flash-attention's mask function with AttentionMaskInterface, so that the model hands the attention the 2-D
padding mask (None when nothing is padded) as it does for attn_implementation="flash_attention_2". Written against
transformers 5.17; models whose attention calls ALL_ATTENTION_FUNCTIONS (Llama, Qwen2, Mistral and most decoders).

What each call runs, as HF's flash-attention path does:
  * a padding mask (batch, seqlen_k): the real tokens of each row through the varlen path (dash_attn.attention with
    key_padding_mask; while decoding, seqlen_q < seqlen_k, the queries are the mask's last seqlen_q positions, HF's
    left-padding reading); padded query rows get zeros;
  * cu_seq_lens_q / cu_seq_lens_k / max_length_q / max_length_k (DataCollatorWithFlattening(return_flash_attn_kwargs=
    True)), or position_ids that restart within a batch of one row (packed sequences, DataCollatorWithFlattening's
    default): dash_attn.attention_varlen over the packed sequences;
  * otherwise dash_attn.attention on the dense batch (causal aligned bottom-right: a decoding step sees the whole
    cache).
is_causal comes from the call's kwargs, else the module (module.is_causal); a sliding_window (Mistral, Qwen2's
sliding layers) is window_size=(sliding_window - 1, 0) (causal) or (sliding_window - 1, sliding_window - 1), HF's
convention: a query sees itself and the sliding_window - 1 keys before it. It is passed whatever the length (a
window wider than a sequence bounds nothing), so a sequence's bits do not depend on how long the batch is.

Settings: deterministic (default True: bitwise reproducible gradients, the library's point), schedule (default
"auto") and sm_margin (default 0). configure(...) sets them for every call; a model call's own kwargs of the same
names (model(input_ids, schedule="ascending")) win for that call.

Refused with an error naming the argument: attention dropout > 0 (training configs of Llama, Qwen2 and Mistral have
attention_dropout 0.0; model.eval() passes 0), logit soft-capping (softcap), attention sinks (s_aux), a 4-D attention
mask (a custom or already prepared mask: pass the 2-D padding mask), a value head dim other than the query's, and what
dash_attn.attention refuses (head dims without a kernel, see dash_attn._abi.SUPPORTED_HEAD_DIMS and
dash_attn._abi.KERNEL_ROWS; fp32 on CUDA, unless
autocast or the module's Linear weights give bf16 / fp16, as HF's flash path casts). output_attentions=True returns
None weights, as with flash attention (dash_attn never forms the attention matrix).
"""
from __future__ import annotations

import torch

import dash_attn
from dash_attn import _ByTensor, _attention_padded, _check_key_padding_mask
from dash_attn._torch_ops import SCHEDULES, validate

try:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import flash_attention_mask
    from transformers.utils import logging as _hf_logging
except ImportError as error:  # pragma: no cover - exercised only without transformers
    raise ImportError("dash_attn.integrations.transformers needs HuggingFace transformers (pip install "
                      f"transformers): {error}") from error

__all__ = ["NAME", "register", "configure", "settings", "dash_attention_forward"]

NAME = "dash"
logger = _hf_logging.get_logger(__name__)

# The defaults of every call (configure() changes them; a call's kwargs of the same names win).
settings = {"deterministic": True, "schedule": "auto", "sm_margin": 0}


def configure(deterministic=None, schedule=None, sm_margin=None) -> dict:
    """Sets the defaults of every attn_implementation="dash" call: deterministic (bool), schedule (one of
    dash_attn.SCHEDULES), sm_margin (int >= 0). Arguments left None keep their value. Returns a copy of the settings
    now in force."""
    if deterministic is not None:
        if not isinstance(deterministic, bool):
            raise TypeError(f"dash_attn.integrations.transformers.configure: deterministic must be a bool, got "
                            f"{type(deterministic).__name__}")
        settings["deterministic"] = deterministic
    if schedule is not None:
        if schedule not in SCHEDULES:
            raise ValueError(f"dash_attn.integrations.transformers.configure: schedule {schedule!r} is unknown "
                             f"(expected one of {', '.join(SCHEDULES)})")
        settings["schedule"] = schedule
    if sm_margin is not None:
        if isinstance(sm_margin, bool) or not isinstance(sm_margin, int) or sm_margin < 0:
            raise ValueError(f"dash_attn.integrations.transformers.configure: sm_margin must be an int >= 0, got "
                             f"{sm_margin!r}")
        settings["sm_margin"] = sm_margin
    return dict(settings)


def register(name: str = NAME) -> str:
    """Registers the attention function and flash-attention's mask function under `name` (default "dash") with
    transformers' AttentionInterface and AttentionMaskInterface. Idempotent; importing this module calls it.
    Returns the name, for attn_implementation=."""
    AttentionInterface.register(name, dash_attention_forward)
    # The mask function decides what the attention receives: flash-attention's gives the 2-D padding mask, or None
    # where nothing is padded. Without a mask function registered under the name, transformers builds no mask at
    # all for it, and padding would be silently attended to.
    AttentionMaskInterface.register(name, flash_attention_mask)
    return name


_WHERE = 'attn_implementation="dash"'
_HALF = (torch.bfloat16, torch.float16)


def _target_dtype(query, module):
    """The dtype fp32 CUDA states are cast to, as HF's flash-attention path does (PEFT may upcast them): autocast's,
    else that of the module's Linear weights when half. None: leave them (validate() then names the dtype)."""
    if query.dtype != torch.float32 or query.device.type != "cuda":
        return None
    if torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear) and layer.weight.dtype in _HALF:
            return layer.weight.dtype
    return None


_host_cache = _ByTensor(16)


@torch.compiler.disable
def _host_cu_seqlens(t, name):
    """A cu_seqlens tensor as int32 on the CPU (the library plans from host lengths), read once per tensor."""
    if not isinstance(t, torch.Tensor):
        return torch.as_tensor(t, dtype=torch.int32)

    def compute():
        if t.dtype.is_floating_point or t.dim() != 1:
            raise ValueError(f"{_WHERE}: {name} must be a 1-D integer tensor (batch + 1 cumulative lengths), got "
                             f"{t.dtype} of shape {tuple(t.shape)}")
        return t.detach().to("cpu", torch.int32)

    return _host_cache.get(t, ("cu", name), compute)


@torch.compiler.disable
def _packed_from_position_ids(position_ids, batch, seqlen):
    """(cu_seqlens (CPU int32), longest) when position_ids describe several sequences packed into a batch of one
    row (they restart at their smallest value), as HF's flash-attention path reads them; None otherwise."""
    if position_ids is None or batch != 1 or position_ids.dim() != 2 or position_ids.shape[-1] != seqlen:
        return None

    def compute():
        pos = position_ids.detach().reshape(-1).cpu()
        if torch.equal(pos, torch.arange(seqlen, dtype=pos.dtype) + pos.min()):
            return None  # one sequence
        starts = (pos == pos.min()).nonzero().reshape(-1).to(torch.int32)
        cu = torch.cat([starts, torch.tensor([seqlen], dtype=torch.int32)])
        return cu, int((cu[1:] - cu[:-1]).max())

    return _host_cache.get(position_ids, ("posids", seqlen), compute)


def dash_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                           softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention-function contract: query (batch, heads, seqlen_q, head_dim), key / value (batch,
    heads_kv, seqlen_k, head_dim), attention_mask what the registered mask function gave (a (batch, seqlen_k) bool
    padding mask or None). Returns (attn_output (batch, seqlen_q, heads, head_dim), None). The module docstring says
    what runs when, and what is refused."""
    if dropout:
        raise ValueError(f"{_WHERE}: attention dropout {dropout} is not supported (dash_attn has no dropout); set "
                         "config.attention_dropout = 0.0 (the default of Llama, Qwen2 and Mistral), or call "
                         "model.eval()")
    if softcap:
        raise ValueError(f"{_WHERE}: softcap = {softcap} (logit soft-capping) is not supported")
    if s_aux is not None:
        raise ValueError(f"{_WHERE}: s_aux (attention sinks) is not supported")
    if kwargs.get("output_attentions", False):
        logger.warning_once(f"{_WHERE} does not form the attention weights: output_attentions=True returns None "
                            "for them (use attn_implementation=\"eager\" to get them)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{_WHERE}: {name} must be a 4-D tensor (batch, heads, seqlen, head_dim), got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
    if value.shape[-1] != query.shape[-1]:
        raise ValueError(f"{_WHERE}: a value head dim ({value.shape[-1]}) other than the query's ({query.shape[-1]}) "
                         "is not supported")

    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    deterministic = kwargs.get("deterministic")
    deterministic = settings["deterministic"] if deterministic is None else bool(deterministic)
    schedule = kwargs.get("schedule") or settings["schedule"]
    sm_margin = kwargs.get("sm_margin")
    sm_margin = settings["sm_margin"] if sm_margin is None else sm_margin
    window = (-1, -1)
    if sliding_window is not None:
        if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
            raise ValueError(f"{_WHERE}: sliding_window must be an int >= 1, got {sliding_window!r}")
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    opts = dict(causal=causal, softmax_scale=scaling, deterministic=deterministic, schedule=schedule,
                sm_margin=sm_margin, window_size=window)

    # (batch, heads, seqlen, head_dim) -> the library's (batch, seqlen, heads, head_dim): a view.
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    target = _target_dtype(q, module)
    if target is not None:
        q, k, v = (t.to(target) for t in (q, k, v))
    batch, seqlen_q, heads, head_dim = q.shape

    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
            raise ValueError(f"{_WHERE}: attention_mask must be the 2-D (batch, seqlen) padding mask that the "
                             f"registered mask function gives, got "
                             f"{getattr(attention_mask, 'shape', type(attention_mask).__name__)}; a 4-D (custom or "
                             "already prepared) mask is not supported: pass the 2-D padding mask, or use "
                             "attn_implementation=\"sdpa\" / \"eager\"")
        kv_len = attention_mask.shape[1]
        if k.shape[1] > kv_len:  # a static cache longer than the tokens seen so far (HF's flash path slices too)
            k, v = k[:, :kv_len], v[:, :kv_len]
        if k.shape[1] != kv_len or seqlen_q > kv_len:
            raise ValueError(f"{_WHERE}: attention_mask shape {tuple(attention_mask.shape)} does not cover the keys "
                             f"(seqlen_k {k.shape[1]}) and queries (seqlen_q {seqlen_q})")
        if seqlen_q == kv_len:
            out = dash_attn.attention(q, k, v, key_padding_mask=attention_mask, **opts)
        else:
            # Decoding after left padding: the queries are the mask's last seqlen_q positions.
            validate(q, k, v, causal, scaling, schedule, deterministic, sm_margin=sm_margin, window_size=window)
            if attention_mask.shape[0] != batch or attention_mask.dtype.is_floating_point:
                raise ValueError(f"{_WHERE}: attention_mask must be a (batch, seqlen_k) = {(batch, kv_len)} bool "
                                 f"padding mask, got {attention_mask.dtype} of shape {tuple(attention_mask.shape)}")
            _check_key_padding_mask(attention_mask, k, k)  # its device
            out = _attention_padded(q, k, v, attention_mask, causal, scaling, deterministic, schedule, False,
                                    sm_margin, window, queries_last=True)
        return out, None

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
    packed = None
    if all(x is not None for x in (cu_q, cu_k, max_q, max_k)):
        packed = (_host_cu_seqlens(cu_q, "cu_seq_lens_q"), _host_cu_seqlens(cu_k, "cu_seq_lens_k"), int(max_q),
                  int(max_k))
    elif seqlen_q == k.shape[1]:
        found = _packed_from_position_ids(kwargs.get("position_ids"), batch, seqlen_q)
        if found is not None:
            packed = (found[0], found[0], found[1], found[1])
    if packed is not None:
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k = packed
        out = dash_attn.attention_varlen(q.reshape(-1, heads, head_dim), k.reshape(-1, k.shape[2], head_dim),
                                         v.reshape(-1, v.shape[2], head_dim), cu_seqlens_q, cu_seqlens_k,
                                         max_seqlen_q, max_seqlen_k, **opts)
        return out.view(batch, seqlen_q, heads, head_dim), None

    return dash_attn.attention(q, k, v, **opts), None


register()
