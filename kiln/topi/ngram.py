"""TfIdfVectorizer over integer tokens (kiln/op/string.py): counting the pool's n-grams is a reduction
over (pool entry, skip, start position) per output column, one compute per n-gram size.

The pool is part of the attributes, so it enters the kernel as small constant tables (select chains over
the entry index). String tokens have no compute (they run on the host).
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln import te, tir
from kiln.op.string import ngram_columns
from kiln.tir import PrimExpr, select
from kiln.topi.registry import ComputeError, out_dims, register_compute

F32 = "float32"


def const_table(values: Sequence[float | int], dtype: str, name: str) -> te.Tensor:
    """A 1-D tensor holding `values` (a select chain over the index: for tables of attribute size)."""
    def f(i: PrimExpr) -> PrimExpr:
        v = tir.const(values[-1], dtype)
        for k in range(len(values) - 2, -1, -1):
            v = select(tir.eq(i, tir.const(k)), tir.const(values[k], dtype), v)
        return v

    return te.compute((len(values),), f, name=name)


def _size_counts(x: te.Tensor, shape, size: int, entries: list[tuple[tuple[int, ...], int]], skips: int) -> te.Tensor:
    """counts[..., col] of the pool n-grams of `size` tokens mapped to col, for every skip 0..skips."""
    grams = const_table([t for g, _ in entries for t in g], "int64", f"ngram{size}_tokens")
    cols = const_table([c for _, c in entries], "int64", f"ngram{size}_columns")
    length = x.shape[-1]
    gaps = 1 if size == 1 else skips + 1

    def f(*idx):
        rows, col = idx[:-1], idx[-1]
        e, g, st = te.reduce_axis(len(entries), "e"), te.reduce_axis(gaps, "gap"), te.reduce_axis(length, "start")
        gap = g.var + tir.const(1)
        cond = tir.eq(cols(e.var), col) & (st.var + tir.const(size - 1) * gap < length)
        for k in range(size):
            pos = tir.min_(st.var + tir.const(k) * gap, length - tir.const(1))  # in bounds when cond fails
            cond = cond & tir.eq(tir.cast("int64", x(*rows, pos)), grams(e.var * tir.const(size) + tir.const(k)))
        return te.sum(select(cond, tir.const(1.0, F32), tir.const(0.0, F32)), [e, g, st])

    return te.compute(shape, f, name=f"ngram{size}_counts")


@register_compute("string.tf_idf_vectorizer")
def _tf_idf_vectorizer(attrs, inputs, out_type, consts):
    x = inputs[0]
    if attrs.pool_int64s is None:
        raise ComputeError("string.tf_idf_vectorizer: string tokens have no compute")
    shape = out_dims(out_type, inputs)
    width = max(attrs.ngram_indexes) + 1
    by_size: dict[int, list[tuple[tuple[int, ...], int]]] = {}
    for gram, col in ngram_columns(attrs).items():
        if attrs.min_gram_length <= len(gram) <= attrs.max_gram_length:
            by_size.setdefault(len(gram), []).append((gram, col))
    parts = [_size_counts(x, shape, n, e, attrs.max_skip_count) for n, e in sorted(by_size.items())]
    weight = [1.0] * width
    for j, w in zip(attrs.ngram_indexes, attrs.weights or ()):
        weight[j] = w
    weights = const_table(weight, F32, "tfidf_weights")

    def f(*idx):
        count = tir.const(0.0, F32)
        for p in parts:
            count = count + p(*idx)
        if attrs.mode == "IDF":
            return select(count > tir.const(0.0, F32), tir.const(1.0, F32), tir.const(0.0, F32)) * weights(idx[-1])
        return count * weights(idx[-1]) if attrs.mode == "TFIDF" else count

    return te.compute(shape, f, name="tf_idf")
