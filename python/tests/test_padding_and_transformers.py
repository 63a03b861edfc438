# SPDX-License-Identifier: Apache-2.0
"""Padded batches (dash_attn.attention(..., key_padding_mask=...)) and the HuggingFace transformers integration
(attn_implementation="dash", dash_attn.integrations.transformers).

Padded batches: a row's output and gradients are bitwise those of the packed varlen call on its real tokens (and so
of attention() on those tokens alone), whatever the other rows and however much padding; they match float64 within
the library's error budget; padded query rows get zeros and padded positions zero gradients; the mask's errors name
it. transformers: tiny random Llama, Qwen2 (with sliding layers) and Mistral (sliding window shorter than the
sequence) on the CPU backend match attn_implementation="eager" on padded (left and right) and unpadded batches, on
packed sequences and while generating; a training step's gradients repeat bitwise. The CUDA variant (bf16 AdamW steps
on a small Llama, twice, against SDPA) runs where a GPU is present.

The CPU backend is fp32 and slow: the shapes are tiny (head dim 64, the smallest the library takes)."""
import copy

import pytest

torch = pytest.importorskip("torch")
import dash_attn  # noqa: E402
from dash_attn import _abi  # noqa: E402

import attention_reference  # noqa: E402
import transformers_version  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and bool(_abi.LIB.dash_cuda_available())
CUDA_SKIP = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device, or libdash_attn built without CUDA kernels")
DEVICE_DTYPES = [("cpu", torch.float32), pytest.param("cuda", torch.bfloat16, marks=CUDA_SKIP)]


TRANSFORMERS_VERSION = transformers_version.installed_version()
# The integration is written against transformers 5.17 (scripts/run-tests.sh installs it); older majors are skipped.
HAVE_TRANSFORMERS = transformers_version.is_supported(TRANSFORMERS_VERSION)
TRANSFORMERS_SKIP = pytest.mark.skipif(
    not HAVE_TRANSFORMERS, reason=f"transformers >= 5 is not installed (found {TRANSFORMERS_VERSION}): the "
                                  "attn_implementation=\"dash\" tests are skipped")


# ---- padded batches ----------------------------------------------------------------------------------------

def masks(kind, batch, seqlen, g):
    """(batch, seqlen) bool masks, True = a real token: right padding, left padding, holes, and one row without a
    padded position beside rows of 1 and 0 real tokens."""
    lengths = [seqlen, max(1, seqlen // 3), seqlen - 5][:batch]
    m = torch.zeros(batch, seqlen, dtype=torch.bool)
    if kind == "right":
        for r, n in enumerate(lengths):
            m[r, :n] = True
    elif kind == "left":
        for r, n in enumerate(lengths):
            m[r, seqlen - n:] = True
    elif kind == "holes":
        m = torch.rand(batch, seqlen, generator=g) < 0.6
        m[0, 0] = True
    elif kind == "edge":
        m[0] = True
        m[1, seqlen // 2] = True  # a row of one real token
        # row 2: no real token at all
    return m


def padded_inputs(batch, seqlen, hq, hk, d, device, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    make = lambda h: torch.randn(batch, seqlen, h, d, generator=g).to(device, dtype)
    return make(hq), make(hk), make(hk), make(hq)


def forward_backward(fn, q, k, v, dout):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = fn(*leaves)
    out.backward(dout)
    return [out.detach(), leaves[0].grad, leaves[1].grad, leaves[2].grad], lse


def pack(mask, *tensors):
    """The real tokens of padded (batch, seqlen, ...) tensors, packed back to back, and int32 cu_seqlens."""
    idx = mask.reshape(-1).nonzero().reshape(-1)
    cu = torch.zeros(mask.shape[0] + 1, dtype=torch.int32)
    cu[1:] = mask.sum(1).cumsum(0)
    return [t.reshape(-1, *t.shape[2:])[idx.to(t.device)] for t in tensors], cu


KINDS = ["right", "left", "holes", "edge"]


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal, window", [(False, (-1, -1)), (True, (-1, -1)), (True, (5, 0)), (False, (3, 2))])
def test_padded_rows_have_the_bits_of_the_packed_call(device, dtype, kind, causal, window):
    batch, seqlen = 3, 24 if device == "cpu" else 300
    q, k, v, dout = padded_inputs(batch, seqlen, 4, 2, 64, device, dtype, seed=1)
    mask = masks(kind, batch, seqlen, torch.Generator().manual_seed(2))
    (out, dq, dk, dv), lse = forward_backward(
        lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, window_size=window, key_padding_mask=mask,
                                            return_lse=True), q, k, v, dout)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (batch, 4, seqlen)

    (pq, pk, pv, pdout), cu = pack(mask, q, k, v, dout)
    (p_out, p_dq, p_dk, p_dv), p_lse = forward_backward(
        lambda q, k, v: dash_attn.attention_varlen(q, k, v, cu, cu, causal=causal, window_size=window,
                                                   return_lse=True), pq, pk, pv, pdout)
    on_device = mask.to(device)
    for name, a, b in (("out", out, p_out), ("dq", dq, p_dq), ("dk", dk, p_dk), ("dv", dv, p_dv)):
        assert torch.equal(a[on_device], b), f"{kind}: {name} differs from the packed call"
        padded = a[~on_device]
        assert torch.equal(padded, torch.zeros_like(padded)), f"{kind}: {name} is not 0 at padded positions"
    assert torch.equal(lse.transpose(1, 2)[on_device], p_lse.t()), f"{kind}: lse differs from the packed call"
    assert torch.all(lse.transpose(1, 2)[~on_device] == float("-inf"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_padded_rows_match_the_float64_reference(kind, causal):
    # Causal counts positions among a row's real tokens: the reference runs on each row's real tokens alone.
    batch, seqlen = 3, 24
    q, k, v, dout = padded_inputs(batch, seqlen, 4, 2, 64, "cpu", torch.float32, seed=3)
    mask = masks(kind, batch, seqlen, torch.Generator().manual_seed(4))
    (out, dq, dk, dv), _ = forward_backward(
        lambda q, k, v: (dash_attn.attention(q, k, v, causal=causal, key_padding_mask=mask), None), q, k, v, dout)
    for r in range(batch):
        keep = mask[r]
        if not keep.any():
            continue
        ours = [t[r][keep][None] for t in (out, dq, dk, dv)]
        attention_reference.check_against_reference(ours, q[r][keep][None], k[r][keep][None], v[r][keep][None],
                                                     dout[r][keep][None], causal, 64 ** -0.5, torch.float32,
                                                     label=f"{kind} row {r}")


@pytest.mark.parametrize("device, dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_a_rows_bits_do_not_depend_on_padding_or_other_rows(device, dtype, causal):
    # One sequence of 13 tokens (300 on CUDA) in batches of other lengths, with left or right padding and other
    # neighbours: the same bits everywhere, and the bits of attention() on the sequence alone without a mask.
    n = 13 if device == "cpu" else 300
    g = torch.Generator().manual_seed(5)
    target = [torch.randn(n, h, 64, generator=g) for h in (4, 2, 2, 4)]  # q, k, v, dout

    def batch_with(seqlen, offset, row, neighbours_seed):
        q, k, v, dout = (t.float() for t in padded_inputs(3, seqlen, 4, 2, 64, "cpu", torch.float32,
                                                           neighbours_seed))
        mask = torch.rand(3, seqlen, generator=torch.Generator().manual_seed(neighbours_seed)) < 0.7
        mask[row] = False
        mask[row, offset:offset + n] = True
        for t, x in zip((q, k, v, dout), target):
            t[row, offset:offset + n] = x
        return [t.to(device, dtype) for t in (q, k, v, dout)], mask

    seen = None
    extra = 0 if device == "cpu" else 200
    for seqlen, offset, row, seed in ((n, 0, 0, 10), (n + 4, 4, 1, 11), (n + 11 + extra, 0, 2, 12),
                                      (n + 11 + extra, 11 + extra, 0, 13)):
        (q, k, v, dout), mask = batch_with(seqlen, offset, row, seed)
        (out, dq, dk, dv), lse = forward_backward(
            lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, key_padding_mask=mask, return_lse=True),
            q, k, v, dout)
        rows = slice(offset, offset + n)
        bits = [out[row, rows], dq[row, rows], dk[row, rows], dv[row, rows], lse[row, :, rows]]
        if seen is None:
            alone, alone_lse = forward_backward(
                lambda q, k, v: dash_attn.attention(q, k, v, causal=causal, return_lse=True),
                *(t.to(device, dtype)[None] for t in target[:3]), target[3].to(device, dtype)[None])
            seen = [t[0] for t in alone] + [alone_lse[0]]
        for name, a, b in zip(("out", "dq", "dk", "dv", "lse"), bits, seen):
            assert torch.equal(a, b), f"seqlen {seqlen}, offset {offset}, row {row}: {name} differs"


def test_no_real_token_at_all_gives_zeros():
    q, k, v, dout = padded_inputs(2, 9, 2, 1, 64, "cpu", torch.float32, seed=6)
    mask = torch.zeros(2, 9, dtype=torch.bool)
    (out, dq, dk, dv), lse = forward_backward(
        lambda q, k, v: dash_attn.attention(q, k, v, causal=True, key_padding_mask=mask, return_lse=True),
        q, k, v, dout)
    for t in (out, dq, dk, dv):
        assert torch.equal(t, torch.zeros_like(t))
    assert torch.all(lse == float("-inf"))


def test_integer_masks_and_the_mask_cache():
    # An int64 0/1 mask (a tokenizer's attention_mask) reads as the bool mask; changing a mask in place is seen
    # (the host-side lengths are cached per mask tensor while it is unchanged).
    q, k, v, _ = padded_inputs(2, 12, 2, 2, 64, "cpu", torch.float32, seed=7)
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[0, 8:] = 0
    as_bool = dash_attn.attention(q, k, v, causal=True, key_padding_mask=mask.bool())
    assert torch.equal(dash_attn.attention(q, k, v, causal=True, key_padding_mask=mask), as_bool)
    mask[1, :5] = 0
    fresh = dash_attn.attention(q, k, v, causal=True, key_padding_mask=mask.clone())
    assert torch.equal(dash_attn.attention(q, k, v, causal=True, key_padding_mask=mask), fresh)
    assert not torch.equal(fresh, as_bool)
    with torch.inference_mode():  # inference tensors have no version counter: never cached, still right
        m = mask.clone()
        first = dash_attn.attention(q, k, v, causal=True, key_padding_mask=m)
        m[0] = 1
        assert not torch.equal(dash_attn.attention(q, k, v, causal=True, key_padding_mask=m), first)


def test_torch_compile_runs_the_mask_on_the_host():
    # The mask's host work runs eagerly (torch.compiler.disable): one graph break, the same bits.
    q, k, v, dout = padded_inputs(2, 12, 4, 2, 64, "cpu", torch.float32, seed=9)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 9:] = False
    mask[1, :2] = False
    fn = lambda q, k, v: (dash_attn.attention(q, k, v, causal=True, key_padding_mask=mask), None)
    compiled = torch.compile(fn, backend="aot_eager")
    eager, _ = forward_backward(fn, q, k, v, dout)
    got, _ = forward_backward(compiled, q, k, v, dout)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, eager):
        assert torch.equal(a, b), f"{name} differs under torch.compile"


def _mask_args():
    q, k, v, _ = padded_inputs(2, 10, 2, 2, 64, "cpu", torch.float32, seed=8)
    return dict(q=q, k=k, v=v, key_padding_mask=torch.ones(2, 10, dtype=torch.bool))


@pytest.mark.parametrize("change, error, message", [
    (dict(key_padding_mask=[[True] * 10] * 2), TypeError, "key_padding_mask must be a torch.Tensor"),
    (dict(key_padding_mask=torch.zeros(2, 10)), ValueError, "key_padding_mask must be bool .* got torch.float32"),
    (dict(key_padding_mask=torch.ones(2, 9, dtype=torch.bool)), ValueError,
     r"key_padding_mask must have shape \(batch, seqlen\) = \(2, 10\)"),
    (dict(key_padding_mask=torch.ones(10, dtype=torch.bool)), ValueError, "key_padding_mask must have shape"),
    (dict(k=torch.randn(2, 12, 2, 64), v=torch.randn(2, 12, 2, 64)), ValueError,
     "key_padding_mask needs seqlen_q == seqlen_k"),
    (dict(key_padding_mask=torch.full((2, 10), 2)), ValueError, "must hold 0 .* and 1 .* only, got 2"),
    (dict(key_padding_mask=torch.ones(2, 10, dtype=torch.bool, device="meta")), ValueError,
     "key_padding_mask is on meta but q is on cpu"),
    (dict(q=torch.randn(2, 10, 2, 96)), ValueError, "differ in head_dim"),  # q/k/v are checked first
])
def test_key_padding_mask_errors_name_it(change, error, message):
    args = _mask_args()
    args.update(change)
    with pytest.raises(error, match=message):
        dash_attn.attention(**args)


# ---- transformers: attn_implementation="dash" -----------------------------------------------------------------

def tiny_config(model, windowed=True, **overrides):
    """A tiny random config: hidden 64, 2 layers, 4 heads / 2 KV heads of head dim 64. initializer_range 0.2 (HF's
    0.02 leaves the attention almost uniform, where any implementation matches any other). windowed=False: the same
    model (the same weights for the same seed) without its sliding window."""
    import transformers
    common = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  intermediate_size=128, vocab_size=97, max_position_embeddings=128, initializer_range=0.2,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if model == "llama":
        config = transformers.LlamaConfig(**common)
    elif model == "qwen2":  # layer 0 full attention, layer 1 a sliding window of 6
        config = transformers.Qwen2Config(**common, use_sliding_window=windowed, sliding_window=6, max_window_layers=1)
    elif model == "mistral":  # every layer a sliding window of 5, shorter than the sequences
        config = transformers.MistralConfig(**common, sliding_window=5 if windowed else None)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def build(config, implementation, seed=0, device="cpu", dtype=torch.float32):
    """The model of `config` with `implementation`, the same weights for the same seed. The config is copied:
    from_config records the implementation on the config object."""
    import transformers
    import dash_attn.integrations.transformers  # noqa: F401  (registers "dash")
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=implementation,
                                                          dtype=dtype)
    assert model.config._attn_implementation == implementation
    return model.to(device)


def padded_batch(padding, batch=3, seqlen=20, vocab=97, seed=0):
    """(input_ids, attention_mask int64 0/1) with rows of seqlen, seqlen - 5 and 7 real tokens, padded on the
    right, the left, or ("both") row 1 on the right and row 2 on both sides; pad tokens are 0."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seqlen), generator=g)
    mask = torch.ones(batch, seqlen, dtype=torch.int64)
    for r, n in enumerate([seqlen, seqlen - 5, 7][:batch]):
        if padding == "right":
            mask[r, n:] = 0
        elif padding == "left":
            mask[r, :seqlen - n] = 0
        elif padding == "both" and r > 0:
            mask[r] = 0
            start = 0 if r == 1 else (seqlen - n) // 2
            mask[r, start:start + n] = 1
    return ids.masked_fill(mask == 0, 0), mask


MODELS = ["llama", "qwen2", "mistral"]
# fp32 on the CPU: eager and SDPA differ by ~6e-6 on these logits (of magnitude ~6), dash by ~8e-6.
LOGIT_ATOL = 1e-4


@TRANSFORMERS_SKIP
@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("padding", ["right", "left", "none"])
def test_logits_match_eager(model_name, padding):
    config = tiny_config(model_name)
    ids, mask = padded_batch(padding)
    logits = {}
    for implementation in ("eager", "dash"):
        model = build(config, implementation).eval()
        with torch.no_grad():
            logits[implementation] = model(ids, attention_mask=mask).logits
    keep = mask.bool()
    err = (logits["dash"] - logits["eager"])[keep].abs().max().item()
    assert err <= LOGIT_ATOL, f"{model_name} {padding} padding: dash vs eager logits differ by {err:.2e}"
    if padding == "left":  # the padding mask changes the logits of the real tokens: the comparison is not vacuous
        with torch.no_grad():
            unmasked = build(config, "eager").eval()(ids).logits
        assert (unmasked - logits["eager"])[keep].abs().max().item() > 1e-2


@TRANSFORMERS_SKIP
@pytest.mark.parametrize("model_name", ["qwen2", "mistral"])
def test_the_sliding_window_is_applied(model_name):
    # The same weights without the window: the logits agree on the positions the window does not cut (the first
    # 5, a window of 5 or 6) and move far more than the tolerance after them, so matching eager needs the window.
    ids, _ = padded_batch("none")
    with torch.no_grad():
        windowed = build(tiny_config(model_name), "dash").eval()(ids).logits
        full = build(tiny_config(model_name, windowed=False), "dash").eval()(ids).logits
    torch.testing.assert_close(windowed[:, :5], full[:, :5], atol=LOGIT_ATOL, rtol=0)
    assert (windowed - full)[:, 6:].abs().amax(dim=(0, 2)).min().item() > 1e-2


@TRANSFORMERS_SKIP
@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("how", ["position_ids", "cu_seq_lens"])
def test_packed_sequences_match_eager(model_name, how):
    # Sequences of 7, 9 and 5 tokens packed in one row, as DataCollatorWithFlattening gives them: eager builds the
    # block-diagonal mask from the restarting position_ids; dash runs the varlen path from them, or from the
    # cu_seq_lens_q / cu_seq_lens_k / max_length_q / max_length_k kwargs.
    config = tiny_config(model_name)
    lengths = [7, 9, 5]
    ids = torch.randint(3, 97, (1, sum(lengths)), generator=torch.Generator().manual_seed(3))
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    extra = {}
    if how == "cu_seq_lens":
        cu = torch.tensor([0, 7, 16, 21], dtype=torch.int32)
        extra = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=9, max_length_k=9)
    with torch.no_grad():
        eager = build(config, "eager").eval()(ids, position_ids=position_ids, use_cache=False).logits
        dash = build(config, "dash").eval()(ids, position_ids=position_ids, use_cache=False, **extra).logits
        # each sequence alone, through the dense path
        alone = torch.cat([build(config, "dash").eval()(ids[:, a:b], use_cache=False).logits
                           for a, b in ((0, 7), (7, 16), (16, 21))], dim=1)
    assert (dash - eager).abs().max().item() <= LOGIT_ATOL
    assert (dash - alone).abs().max().item() <= LOGIT_ATOL


@TRANSFORMERS_SKIP
@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("padding", ["left", "none"])
def test_generation_matches_eager(model_name, padding):
    # Greedy decoding. Left padding: the prefill runs the padded path, each step a query of one token against the
    # cache with the padding mask (the queries are the mask's last positions). No padding: the dense path, a step's
    # query aligned bottom-right (it sees the whole cache, or its window).
    config = tiny_config(model_name)
    ids, mask = padded_batch(padding, seqlen=12)
    out = {}
    for implementation in ("eager", "dash"):
        model = build(config, implementation).eval()
        with torch.no_grad():
            out[implementation] = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                                                 output_logits=True, return_dict_in_generate=True)
    assert torch.equal(out["dash"].sequences, out["eager"].sequences)
    for step, (a, b) in enumerate(zip(out["dash"].logits, out["eager"].logits)):
        err = (a - b).abs().max().item()
        assert err <= LOGIT_ATOL, f"decoding step {step}: logits differ by {err:.2e}"


def training_labels(ids, mask):
    """Labels for a padded batch: -100 at padded tokens and at a row's first real token. HF's loss predicts label t
    from the logits at t - 1, which for the first real token after left padding is a padded position: its output is
    the implementation's choice (zeros here, eager's average over masked keys), so it is kept out of the loss."""
    keep = mask.bool()
    keep[:, 1:] &= keep[:, :-1].clone()
    keep[:, 0] = False
    return ids.masked_fill(~keep, -100)


def _train_step(config, implementation, ids, mask, seed=0, device="cpu", dtype=torch.float32):
    model = build(config, implementation, seed=seed, device=device, dtype=dtype).train()
    labels = training_labels(ids, mask)
    loss = model(ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@TRANSFORMERS_SKIP
@pytest.mark.parametrize("model_name", MODELS)
def test_training_step_gradients_repeat_bitwise(model_name):
    config = tiny_config(model_name)
    ids, mask = padded_batch("both", seqlen=24)
    first = _train_step(config, "dash", ids, mask)
    again = _train_step(config, "dash", ids, mask)
    assert torch.equal(first[0], again[0])
    for name, grad in first[1].items():
        assert grad is not None, name
        assert torch.equal(grad, again[1][name]), f"{name}: gradient bits differ between two runs"
    # and they are eager's gradients, to fp32 rounding
    eager = _train_step(config, "eager", ids, mask)
    assert abs(first[0].item() - eager[0].item()) <= 1e-5
    for name, grad in first[1].items():
        ref = eager[1][name]
        err = (grad - ref).abs().max().item()
        assert err <= 2e-5 * max(1.0, ref.abs().max().item()), f"{name}: gradient differs from eager by {err:.2e}"


@TRANSFORMERS_SKIP
def test_register_is_idempotent_and_settings_reach_the_calls(monkeypatch):
    import transformers
    from dash_attn.integrations import transformers as dash_tf
    assert dash_tf.register() == dash_tf.register() == "dash"
    assert transformers.AttentionInterface._global_mapping["dash"] is dash_tf.dash_attention_forward
    assert "dash" in transformers.AttentionMaskInterface._global_mapping

    seen = []
    real = dash_attn.attention

    def spy(*args, **kwargs):
        seen.append({key: kwargs.get(key) for key in ("deterministic", "schedule", "causal", "window_size")})
        return real(*args, **kwargs)

    monkeypatch.setattr(dash_attn, "attention", spy)
    model = build(tiny_config("mistral"), "dash").eval()
    ids, mask = padded_batch("none", seqlen=10)
    saved = dict(dash_tf.settings)
    try:
        with torch.no_grad():
            model(ids)
            assert seen[-1] == dict(deterministic=True, schedule="auto", causal=True, window_size=(4, 0))
            dash_tf.configure(schedule="ascending")
            model(ids)
            assert seen[-1]["schedule"] == "ascending"
            model(ids, schedule="descending")  # a call's own kwargs win
            assert seen[-1]["schedule"] == "descending"
    finally:
        dash_tf.configure(**saved)
    with pytest.raises(ValueError, match="schedule 'fastest' is unknown"):
        dash_tf.configure(schedule="fastest")
    with pytest.raises(TypeError, match="deterministic must be a bool"):
        dash_tf.configure(deterministic=1)


@TRANSFORMERS_SKIP
def test_the_integration_refuses_what_it_cannot_run():
    from dash_attn.integrations.transformers import dash_attention_forward
    model = build(tiny_config("llama", attention_dropout=0.1), "dash").train()
    ids, mask = padded_batch("right", seqlen=8)
    with pytest.raises(ValueError, match="attention dropout 0.1 is not supported"):
        model(ids, attention_mask=mask)
    model.eval()  # eval passes dropout 0.0
    with torch.no_grad():
        model(ids, attention_mask=mask)

    module = model.model.layers[0].self_attn
    q, k, v = torch.randn(2, 4, 8, 64), torch.randn(2, 2, 8, 64), torch.randn(2, 2, 8, 64)
    with pytest.raises(ValueError, match="softcap = 30.0"):
        dash_attention_forward(module, q, k, v, None, softcap=30.0)
    with pytest.raises(ValueError, match="s_aux"):
        dash_attention_forward(module, q, k, v, None, s_aux=torch.zeros(4))
    with pytest.raises(ValueError, match="a 4-D .* mask is not supported"):
        dash_attention_forward(module, q, k, v, torch.zeros(2, 1, 8, 8))
    with pytest.raises(ValueError, match="value head dim"):
        dash_attention_forward(module, q, k, torch.randn(2, 2, 8, 128), None)
    with pytest.raises(ValueError, match="head_dim 32 is not supported"):
        dash_attention_forward(module, q[..., :32], k[..., :32], v[..., :32], None)
    # is_causal from the kwargs wins over the module's, as in HF's flash path
    full, _ = dash_attention_forward(module, q, k, v, None, scaling=0.125, is_causal=False)
    torch.testing.assert_close(full, dash_attn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                         softmax_scale=0.125), rtol=0, atol=0)


# ---- transformers on CUDA (H200) ------------------------------------------------------------------------------

@TRANSFORMERS_SKIP
@CUDA_SKIP
def test_cuda_bf16_training_repeats_bitwise_and_tracks_sdpa():
    # A small Llama (hidden 256, 4 layers, 8 heads / 4 KV heads of 64), bf16, a padded batch (right, left and both),
    # 4 AdamW steps, twice from the same seed: identical losses and parameters. Against SDPA: the same losses to
    # bf16 rounding (2e-2 after 4 steps).
    import transformers
    config = transformers.LlamaConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                                      num_key_value_heads=4, head_dim=64, intermediate_size=512, vocab_size=1000,
                                      max_position_embeddings=512, pad_token_id=0)
    batch, seqlen = 4, 256
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (batch, seqlen), generator=g)
    mask = torch.ones(batch, seqlen, dtype=torch.int64)
    mask[1, 200:] = 0
    mask[2, :125] = 0
    mask[3, :30] = 0
    mask[3, 107:] = 0
    ids, mask = ids.masked_fill(mask == 0, 0).cuda(), mask.cuda()
    labels = training_labels(ids, mask)

    def train(implementation):
        model = build(config, implementation, seed=0, device="cuda", dtype=torch.bfloat16).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(4):
            loss = model(ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach().float().item())
        with torch.no_grad():
            losses.append(model(ids, attention_mask=mask, labels=labels).loss.float().item())
        return losses, [p.detach().clone() for p in model.parameters()]

    first, again, sdpa = train("dash"), train("dash"), train("sdpa")
    assert first[0] == again[0], f"losses differ between two runs: {first[0]} vs {again[0]}"
    for i, (a, b) in enumerate(zip(first[1], again[1])):
        assert torch.equal(a, b), f"parameter {i} differs between two runs"
    assert abs(first[0][-1] - sdpa[0][-1]) <= 2e-2, f"after 4 steps: dash {first[0]} vs sdpa {sdpa[0]}"
