"""The te compute of nn.attention (kiln/op/attention.py): 4-D or packed 3-D heads, GQA, scale,
softcap, bool/float masks, causal and sliding windows.

Attention is written as its reference computes it: scores in the wide dtype, a masked softmax whose
fully masked rows give zeros, then probs @ V. A KV cache (past_key/past_value) is the concatenation
past ++ new along the key axis (the present outputs), with causal/window bounds shifted by the past
length; nonpad_kv_seqlen masks keys at or past each batch's length and shifts the bounds by
nonpad - Sq. The softmax runs in softmax_precision when that is float32 or float64; a narrower one
raises ComputeError (runs on the host). Static heads take the blocked compute of
kiln/topi/x86_attention.py unless the probabilities are the qk output. Outputs past attrs.outputs are
not computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kiln import te, tir
from kiln.tir.expr import PrimExpr
from kiln.topi.elemwise import wide_dtype
from kiln.topi.registry import ComputeError, broadcast_load, out_dims, register_compute
from kiln.topi.x86_attention import blocked_attention, eligible

Load = Callable[..., PrimExpr]


def _heads(x: te.Tensor, heads: int | None, ct: str) -> tuple[Load, PrimExpr, PrimExpr]:
    """(load(b, h, s, d) in dtype ct, heads, head size) of a 4-D or packed 3-D (B, S, H*D) input."""
    if x.ndim == 4:
        return (lambda b, h, s, d: tir.cast(ct, x(b, h, s, d))), x.shape[1], x.shape[3]
    size = tir.IntImm(x.shape[2].value // heads) if isinstance(x.shape[2], tir.IntImm) else x.shape[2] // heads
    return (lambda b, h, s, d: tir.cast(ct, x(b, s, h * size + d))), tir.IntImm(heads), size


def _allowed(attrs, i: PrimExpr, j: PrimExpr, offset: PrimExpr | None) -> PrimExpr | None:
    """Causal and window bounds, bottom-right aligned: query i sits at key position i + offset."""
    pos = i if offset is None else i + offset
    conds = []
    if attrs.is_causal:
        conds.append(j <= pos)
    if attrs.left_window_size >= 0:
        conds.append(pos - j <= attrs.left_window_size)
    if attrs.right_window_size >= 0:
        conds.append(j - pos <= attrs.right_window_size)
    out = None
    for c in conds:
        out = c if out is None else out & c
    return out


def _with_past(past: te.Tensor | None, new: te.Tensor, heads: int | None, dtype: str, name: str) -> te.Tensor:
    """The present cache (B, H, past + new, D) in `dtype`: past_key or past_value followed by the new entries.

    Its length comes from the input shapes (the type relation leaves it unknown when either is symbolic)."""
    load, h, size = _heads(new, heads, dtype)
    s_new = new.shape[2] if new.ndim == 4 else new.shape[1]
    if past is None:
        return te.compute((new.shape[0], h, s_new, size), lambda b, hh, j, e: load(b, hh, j, e), name=name)
    p = past.shape[2]
    total = tir.IntImm(p.value + s_new.value) if isinstance(p, tir.IntImm) and isinstance(s_new, tir.IntImm) \
        else p + s_new
    return te.compute((new.shape[0], h, total, size),
                      lambda b, hh, j, e: tir.select(j < p, tir.cast(dtype, past(b, hh, j, e)), load(b, hh, j - p, e)),
                      name=name)


@register_compute("nn.attention")
def _attention(attrs, inputs, out_type, consts):
    q, k, v, mask, past_k, past_v, nonpad = inputs
    ct = wide_dtype(q.dtype)
    st = attrs.softmax_precision or ct  # the softmax's dtype
    if st not in (ct, "float32", "float64"):
        raise ComputeError(f"nn.attention: softmax_precision {st} has no compute")
    lq, hq, d = _heads(q, attrs.q_num_heads, ct)
    present_k = _with_past(past_k, k, attrs.kv_num_heads, k.dtype, "present_key")
    present_v = _with_past(past_v, v, attrs.kv_num_heads, v.dtype, "present_value")
    hkv, dv = present_k.shape[1], present_v.shape[3]
    if not (isinstance(hq, tir.IntImm) and isinstance(hkv, tir.IntImm) and isinstance(d, tir.IntImm)):
        raise ComputeError("nn.attention: head counts and head size must be static")
    group = hq.value // hkv.value
    b_, sq = (q.shape[0], q.shape[2] if q.ndim == 4 else q.shape[1])
    skv = present_k.shape[2]
    if past_k is None:  # the keys and values are the inputs: read them there, not through the present copies
        lk, lv = _heads(k, attrs.kv_num_heads, ct)[0], _heads(v, attrs.kv_num_heads, ct)[0]
    else:
        lk = lambda b, h, j, e: tir.cast(ct, present_k(b, h, j, e))  # noqa: E731
        lv = lambda b, h, j, e: tir.cast(ct, present_v(b, h, j, e))  # noqa: E731
    short = _mask_short(mask, skv)
    if past_k is not None:
        offset = past_k.shape[2]
    elif nonpad is not None:
        offset = None  # per batch: nonpad[b] - Sq
    else:
        offset = tir.IntImm(0)
    s = math.sqrt(attrs.scale if attrs.scale is not None else 1 / math.sqrt(d.value))
    scale = tir.const(float(s), ct)
    shape4 = (b_, hq, sq, skv)

    cap = tir.const(float(attrs.softcap), ct)
    neg_inf = tir.const(-math.inf, ct)

    def capped(x: PrimExpr) -> PrimExpr:
        return cap * te.tanh(x / cap) if attrs.softcap > 0 else x

    def masked(x, b, h, i, j):
        """The logit of raw score x: softcap, then causal/window/nonpad bounds and the mask."""
        x = capped(x)
        ok = _allowed(attrs, i, j, offset if offset is not None else nonpad(b) - sq)
        if nonpad is not None:
            ok = j < nonpad(b) if ok is None else ok & (j < nonpad(b))
        if mask is not None:
            m = broadcast_load(mask, (b, h, i, j))
            if mask.dtype == "bool":
                m = m if short is None else tir.select(j < short, m, tir.IntImm(0, "bool"))
                ok = m if ok is None else ok & m
            elif short is None:
                x = x + tir.cast(ct, m)
            else:  # keys past an external cache's mask are masked out, as -inf padding
                x = tir.select(j < short, x + tir.cast(ct, m), neg_inf)
        return x if ok is None else tir.select(ok, x, neg_inf)

    if eligible(q, attrs, st):
        mode = attrs.qk_matmul_output_mode
        qk_mode = None if mode == 0 or (mode == 1 and attrs.softcap <= 0) else \
            (lambda t: lambda *i: capped(t(*i))) if mode == 1 else (lambda t: lambda *i: masked(t(*i), *i))
        y, qk = blocked_attention(q, lq, lk, lv, shape4, d, dv, group, scale, masked, st, qk_mode,
                                  want_qk=attrs.outputs > 3)
        return (y, present_k, present_v, qk)[:attrs.outputs]

    def raw(b, h, i, j):
        r = te.reduce_axis(d, "d")
        return te.sum((lq(b, h, i, r.var) * scale) * (lk(b, h // group, j, r.var) * scale), r)

    raw_t = te.compute(shape4, raw, name="attn_raw")

    def logits(b, h, i, j):
        return masked(raw_t(b, h, i, j), b, h, i, j)

    logit_t = te.compute(shape4, logits, name="attn_logits")
    sl = lambda b, h, i, j: tir.cast(st, logit_t(b, h, i, j))  # noqa: E731

    def row_max(b, h, i):
        j = te.reduce_axis(skv, "j")
        return te.max(sl(b, h, i, j), j)

    peak = te.compute((b_, hq, sq), row_max, name="attn_max")
    safe = te.compute((b_, hq, sq), lambda b, h, i: tir.select(tir.eq(peak(b, h, i), tir.const(-math.inf, st)),
                                                                 tir.const(0.0, st), peak(b, h, i)), name="attn_peak")

    def row_sum(b, h, i):
        j = te.reduce_axis(skv, "j")
        return te.sum(te.exp(sl(b, h, i, j) - safe(b, h, i)), j)

    total = te.compute((b_, hq, sq), row_sum, name="attn_sum")
    denom = te.compute((b_, hq, sq), lambda b, h, i: tir.select(tir.eq(total(b, h, i), tir.const(0.0, st)),
                                                                  tir.const(1.0, st), total(b, h, i)), name="attn_den")
    probs = te.compute(shape4, lambda b, h, i, j: tir.cast(ct, te.exp(sl(b, h, i, j) - safe(b, h, i)) / denom(b, h, i)),
                       name="attn_probs")

    def context(b, h, i, e):
        j = te.reduce_axis(skv, "j")
        return te.sum(probs(b, h, i, j.var) * lv(b, h // group, j.var, e), j)

    ctx = te.compute((b_, hq, sq, dv), context, name="attn_ctx")
    if q.ndim == 4:
        y = te.compute(ctx.shape, lambda *i: tir.cast(q.dtype, ctx(*i)), name="attn_y")
    else:
        y = te.compute(out_dims(out_type, inputs, 0),
                       lambda b, i, c: tir.cast(q.dtype, ctx(b, c // dv, i, c % dv)), name="attn_y")
    mode = (raw_t, lambda *i: capped(raw_t(*i)), logit_t, probs)[attrs.qk_matmul_output_mode]
    qk = te.compute(shape4, lambda *i: tir.cast(q.dtype, mode(*i)), name="qk_out")
    return (y, present_k, present_v, qk)[:attrs.outputs]


def _mask_short(mask: te.Tensor | None, keys: PrimExpr) -> PrimExpr | None:
    """The mask's key length when it stops before the keys (an external cache's padding), else None."""
    if mask is None:
        return None
    m = mask.shape[-1]
    if m is keys or (isinstance(m, tir.IntImm) and (m.value == 1 or isinstance(keys, tir.IntImm)
                                                    and m.value == keys.value)):
        return None
    if isinstance(m, tir.IntImm) and isinstance(keys, tir.IntImm) and m.value < keys.value:
        return m
    raise ComputeError(f"nn.attention: an attn_mask of key length {m} for {keys} keys has no compute")

