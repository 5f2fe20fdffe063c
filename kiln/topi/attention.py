"""The te compute of nn.attention (kiln/op/attention.py): 4-D or packed 3-D heads, GQA, scale,
softcap, bool/float masks, causal and sliding windows.

Attention is written as its reference computes it: scores in the wide dtype, a masked softmax whose
fully masked rows give zeros, then probs @ V. A KV cache (past_key/past_value), nonpad_kv_seqlen or
a softmax_precision other than the compute dtype raise ComputeError, so those calls run on the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kiln import te, tir
from kiln.tir.expr import PrimExpr
from kiln.topi.elemwise import wide_dtype
from kiln.topi.registry import ComputeError, broadcast_load, out_dims, register_compute

Load = Callable[..., PrimExpr]


def _heads(x: te.Tensor, heads: int | None, ct: str) -> tuple[Load, PrimExpr, PrimExpr]:
    """(load(b, h, s, d) in dtype ct, heads, head size) of a 4-D or packed 3-D (B, S, H*D) input."""
    if x.ndim == 4:
        return (lambda b, h, s, d: tir.cast(ct, x(b, h, s, d))), x.shape[1], x.shape[3]
    size = tir.IntImm(x.shape[2].value // heads) if isinstance(x.shape[2], tir.IntImm) else x.shape[2] // heads
    return (lambda b, h, s, d: tir.cast(ct, x(b, s, h * size + d))), tir.IntImm(heads), size


def _allowed(attrs, i: PrimExpr, j: PrimExpr) -> PrimExpr | None:
    """Causal and window bounds (no cache: query i sits at key position i)."""
    conds = []
    if attrs.is_causal:
        conds.append(j <= i)
    if attrs.left_window_size >= 0:
        conds.append(i - j <= attrs.left_window_size)
    if attrs.right_window_size >= 0:
        conds.append(j - i <= attrs.right_window_size)
    out = None
    for c in conds:
        out = c if out is None else out & c
    return out


@register_compute("nn.attention")
def _attention(attrs, inputs, out_type, consts):
    q, k, v, mask, past_k, past_v, nonpad = inputs
    if past_k is not None or past_v is not None or nonpad is not None:
        raise ComputeError("nn.attention: a KV cache or nonpad_kv_seqlen has no compute (runs on the host)")
    ct = wide_dtype(q.dtype)
    if attrs.softmax_precision not in (None, ct):
        raise ComputeError(f"nn.attention: softmax_precision {attrs.softmax_precision} has no compute")
    lq, hq, d = _heads(q, attrs.q_num_heads, ct)
    lk, hkv, _ = _heads(k, attrs.kv_num_heads, ct)
    lv, _, dv = _heads(v, attrs.kv_num_heads, ct)
    if not (isinstance(hq, tir.IntImm) and isinstance(hkv, tir.IntImm) and isinstance(d, tir.IntImm)):
        raise ComputeError("nn.attention: head counts and head size must be static")
    group = hq.value // hkv.value
    b_, sq = (q.shape[0], q.shape[2] if q.ndim == 4 else q.shape[1])
    skv = k.shape[2] if k.ndim == 4 else k.shape[1]
    if mask is not None and not _same(mask.shape[-1], skv):
        raise ComputeError("nn.attention: an attn_mask shorter than the keys has no compute")
    s = math.sqrt(attrs.scale if attrs.scale is not None else 1 / math.sqrt(d.value))
    scale = tir.const(float(s), ct)
    shape4 = (b_, hq, sq, skv)

    def raw(b, h, i, j):
        r = te.reduce_axis(d, "d")
        return te.sum((lq(b, h, i, r.var) * scale) * (lk(b, h // group, j, r.var) * scale), r)

    raw_t = te.compute(shape4, raw, name="attn_raw")
    cap = tir.const(float(attrs.softcap), ct)
    capped = (lambda *i: cap * te.tanh(raw_t(*i) / cap)) if attrs.softcap > 0 else (lambda *i: raw_t(*i))
    neg_inf = tir.const(-math.inf, ct)

    def logits(b, h, i, j):
        x = capped(b, h, i, j)
        ok = _allowed(attrs, i, j)
        if mask is not None:
            m = broadcast_load(mask, (b, h, i, j))
            if mask.dtype == "bool":
                ok = m if ok is None else ok & m
            else:
                x = x + tir.cast(ct, m)
        return x if ok is None else tir.select(ok, x, neg_inf)

    logit_t = te.compute(shape4, logits, name="attn_logits")

    def row_max(b, h, i):
        j = te.reduce_axis(skv, "j")
        return te.max(logit_t(b, h, i, j), j)

    peak = te.compute((b_, hq, sq), row_max, name="attn_max")
    safe = te.compute((b_, hq, sq), lambda b, h, i: tir.select(tir.eq(peak(b, h, i), neg_inf), tir.const(0.0, ct),
                                                                 peak(b, h, i)), name="attn_peak")

    def row_sum(b, h, i):
        j = te.reduce_axis(skv, "j")
        return te.sum(te.exp(logit_t(b, h, i, j) - safe(b, h, i)), j)

    total = te.compute((b_, hq, sq), row_sum, name="attn_sum")
    denom = te.compute((b_, hq, sq), lambda b, h, i: tir.select(tir.eq(total(b, h, i), tir.const(0.0, ct)),
                                                                  tir.const(1.0, ct), total(b, h, i)), name="attn_den")
    probs = te.compute(shape4, lambda b, h, i, j: te.exp(logit_t(b, h, i, j) - safe(b, h, i)) / denom(b, h, i),
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
    present_k = te.compute(out_dims(out_type, inputs, 1), lambda b, h, j, e: tir.cast(k.dtype, lk(b, h, j, e)),
                           name="present_key")
    present_v = te.compute(out_dims(out_type, inputs, 2), lambda b, h, j, e: tir.cast(v.dtype, lv(b, h, j, e)),
                           name="present_value")
    mode = (raw_t, lambda *i: capped(*i), logit_t, probs)[attrs.qk_matmul_output_mode]
    qk = te.compute(out_dims(out_type, inputs, 3), lambda *i: tir.cast(q.dtype, mode(*i)), name="qk_out")
    return y, present_k, present_v, qk


def _same(a: PrimExpr, b: PrimExpr) -> bool:
    return a is b or (isinstance(a, tir.IntImm) and isinstance(b, tir.IntImm) and a.value == b.value) \
        or (isinstance(a, tir.IntImm) and a.value == 1)

