# SPDX-License-Identifier: Apache-2.0
"""Reference attention for the tests, and the error budget every accuracy test applies.

Layout (batch, seqlen, heads, head_dim), v (and the output, dout, dv) with its own last dim where it differs from
q and k's (MLA-style 192 / 128); the causal mask is aligned bottom-right (query i sees key j iff
j <= i + seqlen_k - seqlen_q), as dash_attn.attention does; GQA repeats each KV head over its group. A query
row that sees no key has zero output and zero gradients, computed without ever forming a NaN, so that a NaN
in a test's result can only come from its inputs.

The error budget ("error against error", FlashAttention's test rule): the kernel's largest error against the
float64 reference may be at most twice that of the same computation done in lower precision through PyTorch,
plus FA3's absolute term for the reference's own rounding, 2 * max|(ref + 0.3 - 0.3) - ref| in the input
dtype. The lower-precision baselines are two, and the budget takes the larger error of:
  * `math`: attention through PyTorch autograd in the input dtype (bf16 / fp16 on CUDA), or in fp32 for the
    fp32 CPU backend;
  * `flash`: the FlashAttention backward equations that every flash kernel (ours, FA2/FA3, cuDNN) evaluates,
    in fp32: dS = P * (dP - delta) with delta = rowsum(dO * O) over the output O the forward returned.
The second matters where the exact gradient is zero by an identity the first baseline reproduces exactly:
when every query sees exactly one key (seqlen_k = 1), softmax has a zero Jacobian, so exact dQ and dK are 0
and PyTorch's math gives exactly 0, while any flash-style kernel returns the fp32 rounding of dP - delta,
about 1e-7 of the gradient's scale. Both baselines are computed from the caller's inputs the same way for
every shape: nothing is tuned per shape.

One more absolute term covers what neither baseline reproduces: the kernels form P = exp2(S * scale * log2(e)
- LSE * log2(e)) from the forward's fp32 LSE, two fp32 roundings that leave P a few fp32 ulps from the exact
value even where the baselines are exact (a row that sees a single key: P = 1 there, and the error is all of
dV's). It is 2 * max|(ref + 0.3 - 0.3) - ref| in fp32, below the other terms except in such cases.
"""
import torch


def visibility(sq, sk, causal, device):
    """(sq, sk) bool: query i sees key j. `causal` is a bool (the bottom-right aligned causal mask, or none) or a
    window (left, right): i + offset - left <= j <= i + offset + right with offset = sk - sq, -1 = unbounded side.
    Every function below takes the mask in this form and passes it here."""
    if isinstance(causal, tuple):
        left, right = causal
    else:
        left, right = -1, (0 if causal else -1)
    diagonal = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        vis &= j >= diagonal - left
    if right >= 0:
        vis &= j <= diagonal + right
    return vis


def _expand_kv(q, k, v):
    group = q.shape[2] // k.shape[2]
    return k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)


def attention(q, k, v, causal, scale, dtype=torch.float64, softmax_dtype=None):
    """softmax(q k^T * scale) v computed in `dtype` (the softmax in `softmax_dtype`, default `dtype`),
    differentiable. Rows that see no key give 0 without a NaN."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    k, v = _expand_kv(q, k, v)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    vis = visibility(q.shape[1], k.shape[1], causal, q.device)
    seen = vis.any(-1)[:, None]  # (sq, 1): rows that see at least one key
    # Masked entries are -inf; a row that sees nothing gets scores 0 (any finite value) and is zeroed after the
    # softmax, so that neither its forward nor its backward forms inf - inf.
    s = s.masked_fill(~vis, float("-inf")).masked_fill(~seen, 0.0)
    p = torch.softmax(s.to(softmax_dtype or dtype), dim=-1).to(dtype) * seen.to(dtype)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def log_sum_exp(q, k, causal, scale):
    """float64 LSE (batch, heads, seqlen_q); -inf where a row sees no key."""
    q, k = q.double(), k.double()
    k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    return s.masked_fill(~visibility(q.shape[1], k.shape[1], causal, q.device), float("-inf")).logsumexp(-1)


def flash_backward(q, k, v, out, dout, causal, scale, dtype=torch.float32):
    """The FlashAttention backward equations in `dtype`, given the forward's output `out` (delta is formed from
    it, as the kernels form it): returns (dq, dk, dv)."""
    qf, kf, vf, of, dof = (t.to(dtype) for t in (q, k, v, out, dout))
    group = q.shape[2] // k.shape[2]
    ke, ve = _expand_kv(qf, kf, vf)
    vis = visibility(q.shape[1], k.shape[1], causal, q.device)
    s = torch.einsum("bqhd,bkhd->bhqk", qf, ke) * scale
    s = s.masked_fill(~vis, float("-inf"))
    lse = s.logsumexp(-1, keepdim=True)
    p = torch.where(vis & torch.isfinite(lse), torch.exp(s - lse.nan_to_num(0.0, neginf=0.0)), torch.zeros_like(s))
    dp = torch.einsum("bqhd,bkhd->bhqk", dof, ve)
    delta = (dof * of).sum(-1).transpose(1, 2)[..., None]  # (b, h, q, 1)
    ds = p * (dp - delta)
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, ke) * scale
    dk = torch.einsum("bhqk,bqhd->bkhd", ds, qf) * scale
    dv = torch.einsum("bhqk,bqhd->bkhd", p, dof)
    fold = lambda t: t.unflatten(2, (k.shape[2], group)).sum(3)
    return dq, fold(dk), fold(dv)


def forward_backward(fn, q, k, v, dout):
    """[out, dq, dk, dv] of fn(q, k, v) with upstream gradient dout, on fresh leaf copies of q, k, v."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(dout)
    return [out.detach(), q.grad, k.grad, v.grad]


def rounding_term(exact, dtype):
    """FA3's absolute term: 2 * max|(ref + 0.3 - 0.3) - ref| evaluated in `dtype`."""
    r = exact.to(dtype)
    return 2 * ((r + 0.3 - 0.3) - r).abs().max().item()


def _budget_check(name, a, r, baselines, failures, report):
    """The error budget of one output: a (ours) against r (float64), baselines {name: lower-precision result}."""
    assert a.shape == r.shape, f"{name}: shape {tuple(a.shape)} != {tuple(r.shape)}"
    a64, r64 = a.double(), r.double()
    if not torch.isfinite(a64).all():
        failures.append(f"{name}: {int((~torch.isfinite(a64)).sum())} non-finite values")
        return
    err = (a64 - r64).abs().max().item()
    errors = {base: (b.double() - r64).abs().max().item() for base, b in baselines.items()}
    budget = 2 * max(errors.values()) + rounding_term(r64, a.dtype) + 2 * rounding_term(r64, torch.float32)
    report[name] = (err, budget)
    if not err <= budget:
        failures.append(f"{name}: error {err:.3e} > budget {budget:.3e} (baselines: "
                        + ", ".join(f"{base} {e:.3e}" for base, e in errors.items()) + ")")


def check_forward_against_reference(out, q, k, v, causal, scale, low_dtype, label=""):
    """The error budget (module docstring) on the forward's output alone, for a head dim pair whose backward is not
    built (the GPU forward of 256 and 192 / 128): baselines `math` and the fp32 forward. Returns {"out": (error,
    budget)}."""
    exact = attention(q, k, v, causal, scale)
    math_ = attention(q.to(low_dtype), k.to(low_dtype), v.to(low_dtype), causal, scale, low_dtype, torch.float32)
    fp32 = attention(q, k, v, causal, scale, torch.float32)
    report, failures = {}, []
    _budget_check("out", out, exact, {"math": math_, "fp32": fp32}, failures, report)
    assert not failures, f"{label}: " + "; ".join(failures)
    return report


def check_against_reference(ours, q, k, v, dout, causal, scale, low_dtype, label=""):
    """Asserts the error budget (module docstring) on out, dq, dk, dv; returns {name: (error, budget)}.

    ours: [out, dq, dk, dv] of the implementation under test; q, k, v, dout: its inputs; low_dtype: the
    precision of the `math` baseline (the input dtype, or fp32 for the CPU backend)."""
    exact = forward_backward(lambda q, k, v: attention(q, k, v, causal, scale), q, k, v, dout.double())
    math_ = forward_backward(lambda q, k, v: attention(q, k, v, causal, scale, low_dtype, torch.float32),
                             q.to(low_dtype), k.to(low_dtype), v.to(low_dtype), dout.to(low_dtype))
    flash = [attention(q, k, v, causal, scale, torch.float32).detach(),
             *flash_backward(q, k, v, ours[0], dout, causal, scale)]
    report, failures = {}, []
    for name, a, r, m, f in zip(("out", "dq", "dk", "dv"), ours, exact, math_, flash):
        _budget_check(name, a, r, {"math": m, "flash": f}, failures, report)
    assert not failures, f"{label}: " + "; ".join(failures)
    return report
