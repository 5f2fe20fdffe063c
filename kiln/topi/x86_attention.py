"""Blocked attention for x86: the compute and schedule of nn.attention's common cases (static heads,
4-D or packed 3-D (B, S, H * D)).

The general compute (kiln/topi/attention.py) materializes every (query, key) tensor and takes
exp twice, with libm's scalar expf. Here the scores Q K^T are one GEMM over a transposed K (scaled
once) in register tiles (queries x a vectorized run of keys, the head dim outside), and everything
after them runs per (batch, head, block of queries) in one parallel task: the row max and the row
sum in vector lanes, exp once (a softmax-only polynomial, vectorized) into a block buffer that stays
in cache, then P V in register tiles over the value dim, scaled by 1 / sum once per output. When no
output reads the scores (the op trimmed to Y, see kiln/transform/attention_heads.py) they are the
task's block buffer too. A 3-D Y is merged from the heads in a last parallel copy. Masks, bounds,
softcap, GQA and KV caches come from the general compute's logits. Sums are reassociated (lanes), so
results differ from it by roundings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from kiln import te, tir
from kiln.op import fast_math as spec
from kiln.target import Target
from kiln.te.schedule import Schedule, create_schedule
from kiln.te.tensor import Tensor
from kiln.tir.expr import PrimExpr
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import block, data_size, parallel_outer, static
from kiln.topi.schedule_generic import loop_nest
from kiln.topi.vmath import fmax, vexp
from kiln.topi.x86_rowwise import lanes_of

Load = Callable[..., PrimExpr]
QUERY_BLOCK = 16  # queries per block: their exp buffer (block x keys) should stay in L1/L2
ROWS = 4  # queries per register tile of P V and of the scores, at most (AVX2: 16 registers)
ROWS_WIDE = 8  # with AVX-512's 32 registers
# vector accumulators of a tile, at most: a tile's rows are cut to fit (see tile_rows)
ACCUMULATORS = 12
ACCUMULATORS_WIDE = 24
OUT = "attn_fast_y"
QK_OUT = "qk_out"
MERGED = "attn_fast_merged"  # a 3-D Y: (B, S, H * dv)
STAGES = ("attn_fast_kt", "attn_fast_scores", "attn_fast_max", "attn_fast_exp", "attn_fast_sum", "attn_fast_ctx",
          "attn_fast_max_lanes", "attn_fast_sum_lanes")


SOFTMAX_EXP_LO = -87.0  # e^x below this is 0 in a softmax row (whose largest term is e^0 = 1); 2^n stays normal


def _f32(v: float) -> PrimExpr:
    return tir.const(float(v), "float32")


def _bind(value: PrimExpr, body: Callable[[tir.Var], PrimExpr]) -> PrimExpr:
    v = tir.Var("t", value.dtype)
    return tir.Let(v, value, body(v))


def softmax_exp(x: PrimExpr) -> PrimExpr:
    """e^x for a softmax term x = logit - row max <= 0 (or NaN): kiln.op.fast_math's float32 exp
    without its overflow side, its floor's correction step or its split power of two (x >= -87 keeps
    2^n normal), and 0 below -87 (a masked -inf included). float64 keeps the general exp."""
    if x.dtype != "float32":
        return vexp(x)

    def body(xv: tir.Var) -> PrimExpr:
        xc = tir.select(xv < _f32(SOFTMAX_EXP_LO), _f32(SOFTMAX_EXP_LO), xv)

        def with_n(n: tir.Var) -> PrimExpr:
            def with_f(f: tir.Var) -> PrimExpr:
                poly = _f32(spec.EXP_POLY[0])
                for c in spec.EXP_POLY[1:]:
                    poly = poly * f + _f32(c)
                bits = tir.call("shift_left", tir.cast("int32", n) + tir.IntImm(127, "int32"),
                                tir.IntImm(23, "int32"), dtype="int32")
                y = (poly * (f * f) + f + _f32(1.0)) * tir.call("reinterpret", bits, dtype="float32")
                return tir.select(xv < _f32(SOFTMAX_EXP_LO), _f32(0.0), tir.select(tir.ne(xv, xv), xv, y))

            return _bind((xc - n * _f32(spec.LN2_HI)) - n * _f32(spec.LN2_LO), with_f)

        magic = _f32(12582912.0)  # 1.5 * 2^23: adding and removing it rounds to the nearest integer
        return _bind((xc * _f32(spec.LOG2E) + magic) - magic, with_n)

    return _bind(x, body)


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
                      qk_mode: Callable[[te.Tensor], Load] | None, want_qk: bool = True
                      ) -> tuple[te.Tensor, te.Tensor | None]:
    """(y, qk_out) of attention; y in q's layout (4-D heads, or (B, S, H * dv) for a 3-D q).
    `logits(raw, b, h, i, j)` applies softcap and masks to a raw score; `qk_mode(scores)` gives the
    qk_matmul_output load from the scores tensor; None: qk_out is the scores themselves, and their
    buffer is the output's (no copy, no temporary). Without `want_qk` qk_out is None."""
    b_, hq, sq, skv = shape
    ct = scale.dtype
    hkv = tir.IntImm(hq.value // group)
    # both factors' scale on K^T, once per key, rather than on every query load of the GEMM
    kt = te.compute((b_, hkv, d, skv), lambda b, h, e, j: lk(b, h, j, e) * (scale * scale), name=STAGES[0])

    def raw(b, h, i, j):
        r = te.reduce_axis(d, "d")
        return te.sum(lq(b, h, i, r.var) * kt(b, h // group, r.var, j), r)

    scores = te.compute(shape, raw, name=STAGES[1])
    sl = lambda b, h, i, j: tir.cast(st, logits(scores(b, h, i, j), b, h, i, j))  # noqa: E731
    neg_inf, zero, one = tir.const(-math.inf, st), tir.const(0.0, st), tir.const(1.0, st)
    peak = _by_lanes((b_, hq, sq), skv, sl, fmax, STAGES[2])
    safe = lambda b, h, i: tir.select(tir.eq(peak(b, h, i), neg_inf), zero, peak(b, h, i))  # noqa: E731
    ex = te.compute(shape, lambda b, h, i, j: softmax_exp(sl(b, h, i, j) - safe(b, h, i)), name=STAGES[3])
    total = _by_lanes((b_, hq, sq), skv, ex, te.sum, STAGES[4])
    # 1 / sum once per element of y, not a division per probability inside P V
    inv = lambda b, h, i: tir.cast(ct, one / tir.select(tir.eq(total(b, h, i), zero), one, total(b, h, i)))  # noqa: E731

    def context(b, h, i, e):
        j = te.reduce_axis(skv, "j")
        return te.sum(tir.cast(ct, ex(b, h, i, j.var)) * lv(b, h // group, j.var, e), j)

    ctx = te.compute((b_, hq, sq, dv), context, name=STAGES[5])
    y = te.compute(ctx.shape, lambda b, h, i, e: tir.cast(q.dtype, ctx(b, h, i, e) * inv(b, h, i)), name=OUT)
    if q.ndim == 3:  # NOTE: heads merge in a copy: bound inference cannot see through c // dv inside its loops
        n = dv.value
        y4 = y
        y = te.compute((b_, sq, tir.IntImm(hq.value * n)), lambda b, i, c: y4(b, c // n, i, c % n), name=MERGED)
    if not want_qk:
        return y, None
    if qk_mode is None and q.dtype == ct:
        return y, scores
    load = qk_mode(scores) if qk_mode is not None else scores
    qk = te.compute(shape, lambda *i: tir.cast(q.dtype, load(*i)), name=QK_OUT)
    return y, qk


def tile_rows(rows: int, width: int, dtype: str, queries, target: Target) -> int:
    """Rows of a register tile `width` elements of `dtype` wide: at most `rows`, as many as keep the tile
    within the target's accumulator budget, a divisor of the `queries` loop where one is near. BERT's tiles
    (32 keys or a 32-wide head, 4 AVX2 vectors a row) were 4 rows: 16 accumulators in 16 registers, one
    spilled to the stack and reloaded every step."""
    wide = target.vector_bytes >= 64
    lanes = target.vector_bytes // (8 if "64" in dtype else 4)
    fit = (ACCUMULATORS_WIDE if wide else ACCUMULATORS) // max(1, -(-width // lanes))
    return block(queries, max(1, min(rows, fit)))


def _score_tiles(s: Schedule, scores, rows: int, outer: list, target: Target) -> None:
    """Q K^T in register tiles: `rows` queries (at most; see tile_rows) x a vectorized run of keys, the head
    dim outside. `outer` are the scores' loops outside the (query tile, key run) tiles."""
    acc = s[s.cache_write(scores.op.output(0), "local")]
    *lead, i, j = scores.op.axis
    run = block(j.dom.extent, knob("attention.score_run", (16, 32, 64), 32))
    io, ii = scores.split(i, tile_rows(rows, run, scores.op.output(0).dtype, i.dom.extent, target))
    jo, ji = scores.split(j, run)
    scores.reorder(*lead, io, jo, ii, ji)
    at = outer(scores, [*lead, io, jo])
    scores.unroll(ii)  # the tile stored row by row at constant offsets
    scores.vectorize(ji)
    acc.compute_at(scores, at)
    ab, ah, ai, aj = acc.op.axis
    acc.reorder(ab, ah, *acc.op.reduce_axis, ai, aj)
    red = acc.op.reduce_axis[0]
    if (static(red.dom.extent) or 1 << 30) <= knob("attention.unroll_head", (0, 16, 32, 64), 0):
        acc.unroll(red)
    acc.unroll(ai)
    acc.vectorize(aj)


def _merge_nest(st, dv: int) -> None:
    """The 3-D Y copy: (batch, query) rows in parallel, each head's dv values a vector."""
    b, i, c = st.op.axis
    h, e = st.split(c, dv)
    st.parallel(st.fuse(b, i))
    st.vectorize(e)


def schedule_attention_blocked(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    """Max, exp, sum and P V inside each (batch, head, query block) task of the output; the scores at
    the root (a GEMM vectorized over keys) when they are an output, else inside the task too."""
    s = create_schedule(outputs)
    by_name = {st.op.name: st for st in s.stages}
    if OUT not in by_name or any(n not in by_name for n in STAGES):
        return None
    kt, scores, peak, ex, total, ctx, peak_l, total_l = (by_name[n] for n in STAGES)
    out = by_name[OUT]
    keep = {kt, scores, peak, ex, total, ctx, peak_l, total_l, out}
    out_ops = {t.op for t in outputs}
    for st in list(s.stages):  # the small selects (safe max, 1 / sum) and input casts
        if st not in keep and st.op not in out_ops:
            st.compute_inline()
    rows = knob("attention.rows", (2, 4, 6, 8), ROWS_WIDE if target.vector_bytes >= 64 else ROWS)
    local = all(t.op is not scores.op and t.op.name != QK_OUT for t in outputs)  # no output reads the scores
    b, h, i, e = out.op.axis
    io, ii = out.split(i, block(i.dom.extent, knob("attention.query_block", (4, 8, 16, 32, 64), QUERY_BLOCK)))
    width = static(e.dom.extent) or 1 << 20
    ro, ri = out.split(ii, tile_rows(rows, width, ctx.op.output(0).dtype, ii.dom.extent, target))
    out.reorder(b, h, io, ro, ri, e)
    # NOTE: K^T stays at the root: as a task's stack array gcc keeps the scores' register tile in memory
    loop_nest(kt, target)
    if not local:
        _score_tiles(s, scores, rows, lambda st, axes: parallel_outer(st, axes, data_size(st, reduce_too=True)), target)
    # a task per (batch, head, query block), or per (batch, head) with its query blocks in turn
    per_block = not local or knob("attention.task", ("block", "head"), "block") == "block"
    task = parallel_outer(out, [b, h, io] if per_block else [b, h], None)
    block_loop = task if per_block else io
    if local:  # each block's scores in a buffer of the task
        scores.compute_at(out, block_loop)
        _score_tiles(s, scores, rows, lambda st, axes: axes[-1], target)
    out.vectorize(e)
    for st in (peak_l, peak, ex, total_l, total):
        st.compute_at(out, block_loop)
    for st in (peak_l, total_l):
        *rws, lane = st.op.axis
        st.reorder(*rws, *st.op.reduce_axis, lane)
        st.vectorize(lane)
    ex.vectorize(ex.op.axis[3])
    ctx.compute_at(out, ro)
    cb, ch, ci, ce = ctx.op.axis
    ctx.reorder(cb, ch, *ctx.op.reduce_axis, ci, ce)
    ctx.unroll(ci)
    ctx.vectorize(ce)
    for st in s.stages:
        if st.op.name == MERGED:
            _merge_nest(st, static(ctx.op.axis[3].dom.extent))
        elif st.op in out_ops and st is not out and st is not scores:
            loop_nest(st, target)
    return s


def eligible(q: te.Tensor, attrs, st: str) -> bool:
    """The blocked compute covers static heads whose qk output is not the probabilities."""
    return (q.ndim in (3, 4) and attrs.qk_matmul_output_mode != 3 and st in ("float32", "float64")
            and all(static(x) is not None for x in q.shape[1:]))
