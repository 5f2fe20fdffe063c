"""Blocked attention for x86: the compute and schedule of nn.attention's common cases (4-D heads).

The general compute (kiln/topi/attention.py) materializes every (query, key) tensor and takes
exp twice, with libm's scalar expf. Here the scores Q K^T are one GEMM over a transposed K in
register tiles (queries x a vectorized run of keys, the head dim outside), and everything after
them runs per (batch, head, block of queries) in one parallel task: the row max and the row sum in
vector lanes, exp once (kiln.topi.vmath, vectorized) into a block buffer that stays in cache, then
P V in register tiles over the value dim. Masks, bounds, softcap, GQA and KV caches come from the
general compute's logits. Sums are reassociated (lanes), so results differ from it by roundings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from kiln import te, tir
from kiln.te.schedule import Schedule, create_schedule
from kiln.te.tensor import Tensor
from kiln.tir.expr import PrimExpr
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import block, data_size, parallel_outer, static
from kiln.topi.schedule_generic import _loop_nest
from kiln.topi.vmath import fmax, vexp
from kiln.topi.x86_rowwise import lanes_of

Load = Callable[..., PrimExpr]
QUERY_BLOCK = 16  # queries per parallel task: their exp buffer (block x keys) should stay in L1/L2
ROWS = 4  # queries per register tile of P V and of the scores
OUT = "attn_fast_y"
STAGES = ("attn_fast_kt", "attn_fast_scores", "attn_fast_max", "attn_fast_exp", "attn_fast_sum", "attn_fast_ctx",
          "attn_fast_max_lanes", "attn_fast_sum_lanes")


def _lanes(skv: PrimExpr) -> int:
    n = static(skv)
    return 1 if n is None else lanes_of(n)


def _by_lanes(shape3: tuple, skv: PrimExpr, load: Load, reducer, name: str) -> te.Tensor:
    """reducer over keys of load(b, h, i, j) as lanes x chunks: lane l reduces keys l, l + L, ...
    (vectorized across lanes), then the L lanes are reduced."""
    lanes = _lanes(skv)
    chunks = skv // lanes

    def part(b, h, i, ln):
        c = te.reduce_axis(chunks, "c")
        return reducer(load(b, h, i, c.var * lanes + ln), c)

    parts = te.compute((*shape3, tir.IntImm(lanes)), part, name=f"{name}_lanes")

    def whole(b, h, i):
        ln = te.reduce_axis(lanes, "l")
        return reducer(parts(b, h, i, ln.var), ln)

    return te.compute(shape3, whole, name=name)


def blocked_attention(q: te.Tensor, lq: Load, lk: Load, lv: Load, shape: tuple, d: PrimExpr, dv: PrimExpr,
                      group: int, scale: PrimExpr, logits: Callable[..., PrimExpr], st: str,
                      qk_mode: Callable[[te.Tensor], Load] | None) -> tuple[te.Tensor, te.Tensor]:
    """(y, qk_out) of 4-D attention. `logits(raw, b, h, i, j)` applies softcap and masks to a raw score;
    `qk_mode(scores)` gives the qk_matmul_output load from the scores tensor; None: qk_out is the
    scores themselves, and their buffer is the output's (no copy, no temporary)."""
    b_, hq, sq, skv = shape
    ct = scale.dtype
    hkv = tir.IntImm(hq.value // group)
    kt = te.compute((b_, hkv, d, skv), lambda b, h, e, j: lk(b, h, j, e) * scale, name=STAGES[0])

    def raw(b, h, i, j):
        r = te.reduce_axis(d, "d")
        return te.sum((lq(b, h, i, r.var) * scale) * kt(b, h // group, r.var, j), r)

    scores = te.compute(shape, raw, name=STAGES[1])
    sl = lambda b, h, i, j: tir.cast(st, logits(scores(b, h, i, j), b, h, i, j))  # noqa: E731
    neg_inf, zero, one = tir.const(-math.inf, st), tir.const(0.0, st), tir.const(1.0, st)
    peak = _by_lanes((b_, hq, sq), skv, sl, fmax, STAGES[2])
    safe = lambda b, h, i: tir.select(tir.eq(peak(b, h, i), neg_inf), zero, peak(b, h, i))  # noqa: E731
    ex = te.compute(shape, lambda b, h, i, j: vexp(sl(b, h, i, j) - safe(b, h, i)), name=STAGES[3])
    total = _by_lanes((b_, hq, sq), skv, ex, te.sum, STAGES[4])
    denom = lambda b, h, i: tir.select(tir.eq(total(b, h, i), zero), one, total(b, h, i))  # noqa: E731

    def context(b, h, i, e):
        j = te.reduce_axis(skv, "j")
        p = tir.cast(ct, ex(b, h, i, j.var) / denom(b, h, i))
        return te.sum(p * lv(b, h // group, j.var, e), j)

    ctx = te.compute((b_, hq, sq, dv), context, name=STAGES[5])
    y = te.compute(ctx.shape, lambda *i: tir.cast(q.dtype, ctx(*i)), name=OUT)
    if qk_mode is None and q.dtype == ct:
        return y, scores
    load = qk_mode(scores) if qk_mode is not None else scores
    qk = te.compute(shape, lambda *i: tir.cast(q.dtype, load(*i)), name="qk_out")
    return y, qk


def _scores_tiles(s: Schedule, scores) -> None:
    """Q K^T in register tiles: ROWS queries x a vectorized run of keys, the head dim outside."""
    acc = s[s.cache_write(scores.op.output(0), "local")]
    b, h, i, j = scores.op.axis
    io, ii = scores.split(i, block(i.dom.extent, ROWS))
    jo, ji = scores.split(j, block(j.dom.extent, knob("attention.score_run", (16, 32, 64), 32)))
    scores.reorder(b, h, io, jo, ii, ji)
    at = parallel_outer(scores, [b, h, io, jo], data_size(acc, reduce_too=True))
    scores.vectorize(ji)
    acc.compute_at(scores, at)
    ab, ah, ai, aj = acc.op.axis
    acc.reorder(ab, ah, *acc.op.reduce_axis, ai, aj)
    acc.unroll(ai)
    acc.vectorize(aj)


def schedule_attention_blocked(outputs: Sequence[Tensor]) -> Schedule | None:
    """Scores at the root (a GEMM vectorized over keys); max, exp, sum and P V inside each
    (batch, head, query block) task of the output."""
    s = create_schedule(outputs)
    by_name = {st.op.name: st for st in s.stages}
    if OUT not in by_name or any(n not in by_name for n in STAGES):
        return None
    kt, scores, peak, ex, total, ctx, peak_l, total_l = (by_name[n] for n in STAGES)
    out = by_name[OUT]
    keep = {kt, scores, peak, ex, total, ctx, peak_l, total_l, out}
    out_ops = {t.op for t in outputs}
    for st in list(s.stages):  # the small selects (safe max, denominator) and input casts
        if st not in keep and st.op not in out_ops:
            st.compute_inline()
    _loop_nest(kt)
    _scores_tiles(s, scores)

    b, h, i, e = out.op.axis
    io, ii = out.split(i, block(i.dom.extent, knob("attention.query_block", (4, 8, 16, 32, 64), QUERY_BLOCK)))
    ro, ri = out.split(ii, ROWS)
    out.reorder(b, h, io, ro, ri, e)
    task = parallel_outer(out, [b, h, io], None)
    out.vectorize(e)
    for st in (peak_l, peak, ex, total_l, total):
        st.compute_at(out, task)
    for st in (peak_l, total_l):
        *rows, lane = st.op.axis
        st.reorder(*rows, *st.op.reduce_axis, lane)
        st.vectorize(lane)
    ex.vectorize(ex.op.axis[3])
    ctx.compute_at(out, ro)
    cb, ch, ci, ce = ctx.op.axis
    ctx.reorder(cb, ch, *ctx.op.reduce_axis, ci, ce)
    ctx.unroll(ci)
    ctx.vectorize(ce)
    for st in s.stages:
        if st.op in out_ops and st is not out and st is not scores:
            _loop_nest(st)
    return s


def eligible(q: te.Tensor, attrs, st: str) -> bool:
    """The blocked compute covers 4-D heads with static sizes whose qk output is not the probabilities.
    Packed 3-D heads (B, S, H * D) keep the general compute and schedule (kiln/topi/schedule_attention.py)."""
    return (q.ndim == 4 and attrs.qk_matmul_output_mode != 3 and st in ("float32", "float64")
            and all(static(x) is not None for x in q.shape[1:]))
