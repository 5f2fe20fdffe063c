"""TreeEnsemble (kiln/op/ml.py): the trees are attributes, so each one unrolls at compile time into a
nest of selects over the sample's features whose leaves are that tree's contribution to the output
column; the trees' contributions are then summed (or min/max-ed) and post-transformed, in float64 as the
reference does. PROBIT (the normal quantile, no intrinsic) has no compute. Binarizer and
ArrayFeatureExtractor are elementwise and a gather along the last axis.
"""

from __future__ import annotations

import math

import numpy as np

from kiln import te, tir
from kiln.op.ml import member_sets
from kiln.tir import PrimExpr, select
from kiln.topi.injective import checked_index
from kiln.topi.registry import ComputeError, out_dims, register_compute

F64 = "float64"
SUM, AVERAGE, MIN, MAX = 1, 0, 2, 3
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO = 0, 1, 2, 3


def _f(v: float) -> PrimExpr:
    return tir.const(float(v), F64)


def _branch(mode: int, v: PrimExpr, split: float, members: frozenset) -> PrimExpr:
    """The node's test on feature value v (float64; the split already rounded to the input dtype)."""
    s = _f(split)
    if mode == 6:
        hit: PrimExpr = tir.const(False)
        for m in sorted(members):
            hit = hit | tir.eq(v, _f(m))
        return hit
    return (v <= s, v < s, v >= s, v > s, tir.eq(v, s), tir.ne(v, s))[mode]


class _Trees:
    """The attributes as Python lists, and the select nest of one tree for one sample and column."""

    def __init__(self, attrs, x: te.Tensor):
        self.a = attrs
        self.x = x
        self.feat = list(attrs.nodes_featureids)
        self.mode = [int(m) for m in attrs.nodes_modes.reshape(-1)]
        dtype = np.dtype({"float16": np.float16, "float32": np.float32, "float64": np.float64}[x.dtype])
        self.split = [float(s) for s in attrs.nodes_splits.reshape(-1).astype(dtype)]
        n = len(self.feat)
        self.nan_true = list(attrs.nodes_missing_value_tracks_true or [0] * n)
        self.sets = member_sets(attrs)
        self.weights = [float(w) for w in attrs.leaf_weights.reshape(-1).astype(np.float64)]
        self.targets = list(attrs.leaf_targetids)

    def tree(self, root: int, row: PrimExpr, col: PrimExpr, absent: PrimExpr) -> PrimExpr:
        a = self.a

        def leaf(k: int) -> PrimExpr:
            return select(tir.eq(col, tir.const(self.targets[k])), _f(self.weights[k]), absent)

        def node(i: int, depth: int) -> PrimExpr:
            if depth > len(self.feat):
                raise ComputeError("ml.tree_ensemble: a tree has a cycle")
            v = tir.cast(F64, self.x(row, tir.const(self.feat[i])))
            go = _branch(self.mode[i], v, self.split[i], self.sets.get(i, frozenset()))
            if self.nan_true[i]:
                go = go | te.isnan(v)
            t = leaf(a.nodes_truenodeids[i]) if a.nodes_trueleafs[i] else node(a.nodes_truenodeids[i], depth + 1)
            f = leaf(a.nodes_falsenodeids[i]) if a.nodes_falseleafs[i] else node(a.nodes_falsenodeids[i], depth + 1)
            return select(go, t, f)

        return node(root, 0)


@register_compute("ml.tree_ensemble")
def _tree_ensemble(attrs, inputs, out_type, consts):
    x = inputs[0]
    if attrs.post_transform not in (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO):
        raise ComputeError("ml.tree_ensemble: the PROBIT post transform has no compute")
    trees = _Trees(attrs, x)
    agg = attrs.aggregate_function
    absent = _f(math.inf if agg == MIN else -math.inf if agg == MAX else 0.0)
    shape = out_dims(out_type, inputs)

    def score(row, col):
        acc = absent
        for root in attrs.tree_roots:
            t = trees.tree(root, row, col, absent)
            acc = tir.min_(acc, t) if agg == MIN else tir.max_(acc, t) if agg == MAX else acc + t
        if agg == AVERAGE:
            return acc / _f(len(attrs.tree_roots))
        return select(te.isinf(acc), _f(0.0), acc) if agg in (MIN, MAX) else acc

    v = _post_transform(attrs.post_transform, te.compute(shape, score, name="tree_scores"))
    return te.compute(shape, lambda r, c: tir.cast(x.dtype, v(r, c)), name="tree_ensemble")


def _post_transform(kind: int, s: te.Tensor) -> te.Tensor:
    if kind == LOGISTIC:
        return te.compute(s.shape, lambda r, c: _f(1.0) / (_f(1.0) + te.exp(_f(0.0) - s(r, c))), name="tree_logistic")
    if kind in (SOFTMAX, SOFTMAX_ZERO):
        def keep(r, c):
            return tir.ne(s(r, c), _f(0.0)) if kind == SOFTMAX_ZERO else tir.const(True)

        k = te.reduce_axis(s.shape[1], "c")
        top = te.compute((s.shape[0],), lambda r: te.max(select(keep(r, k.var), s(r, k.var), _f(-math.inf)), k),
                         name="tree_top")

        def exp(r, c):
            t = top(r)
            return select(keep(r, c), te.exp(s(r, c) - select(te.isinf(t), _f(0.0), t)), _f(0.0))

        e = te.compute(s.shape, exp, name="tree_exp")
        k2 = te.reduce_axis(s.shape[1], "c")
        total = te.compute((s.shape[0],), lambda r: te.sum(e(r, k2.var), k2), name="tree_total")
        tiny = _f(float(np.finfo(np.float64).tiny))
        return te.compute(s.shape, lambda r, c: e(r, c) / tir.max_(total(r), tiny), name="tree_softmax")
    return s


# ---------------------------------------------------------------------------------------------
# Binarizer, ArrayFeatureExtractor


@register_compute("ml.binarizer")
def _binarizer(attrs, inputs, out_type, consts):
    """Floats compare in their own dtype and integers in float64, as numpy compares with a Python float."""
    x = inputs[0]
    cmp = x.dtype if x.dtype.startswith("float") else F64
    t = tir.const(float(np.asarray(attrs.threshold, dtype=cmp)), cmp)
    one, zero = tir.const(1, x.dtype), tir.const(0, x.dtype)
    return te.compute(x.shape, lambda *i: select(tir.cast(cmp, x(*i)) > t, one, zero), name="binarizer")


@register_compute("ml.array_feature_extractor")
def _array_feature_extractor(attrs, inputs, out_type, consts):
    """out[..., j] = x[..., flat(y)[j]]; a negative index counts from the end. An index out of range is an
    error in the reference: constant indices are checked here (the call then runs on the host and raises),
    run-time ones by the kernel (checked_index)."""
    x, y = inputs
    if x.dtype == "string":
        raise ComputeError("ml.array_feature_extractor: string inputs have no compute")
    shape = out_dims(out_type, inputs)
    n = x.shape[-1]
    if consts[1] is not None and isinstance(n, tir.IntImm):
        bad = [int(i) for i in np.asarray(consts[1]).reshape(-1) if not -n.value <= i < n.value]
        if bad:
            raise ComputeError(f"ml.array_feature_extractor: indices {bad[:4]} are out of range for {n.value} features")

    def flat_index(j: PrimExpr) -> list[PrimExpr]:
        idx = []
        for d in reversed(y.shape):
            idx.append(j % d)
            j = j // d
        return idx[::-1]

    def f(*i):
        k = checked_index(y(*flat_index(i[-1])), n)
        lead = i[:-1] if x.ndim > 1 else ()
        return x(*lead, tir.cast(n.dtype, k))

    return te.compute(shape, f, name="array_feature_extractor")
