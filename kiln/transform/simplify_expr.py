"""SimplifyExpr: algebraic and layout no-ops removed, chains of data movement collapsed.

Every rule is exact (or exact up to the sign of a zero) and proves its side conditions from types
and constants: what it cannot prove (unknown dims, non-constant shapes) it leaves alone.
"""

from __future__ import annotations

from collections import Counter

import ml_dtypes
import numpy as np

from kiln.ir import dtype as dt
from kiln.ir.expr import Call, Constant, Expr, Function
from kiln.ir.module import IRModule
from kiln.ir.types import ANY, Dim, TensorType
from kiln.op.registry import get_op
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.pattern import (
    Match,
    Rule,
    apply_rules,
    int_list,
    is_constant,
    is_op,
    is_tuple,
    is_tuple_get_item,
    omitted,
    optional,
    wildcard,
)

OPEN_END = 2**31 - 1  # a Slice end at least this large takes the rest of the axis


def shape_of(e: Expr) -> tuple[Dim, ...] | None:
    t = e.type
    return t.shape if isinstance(t, TensorType) else None


def static_shape(e: Expr) -> tuple[int, ...] | None:
    t = e.type
    return tuple(t.shape) if isinstance(t, TensorType) and t.is_static else None  # type: ignore[arg-type]


def known_same_shape(a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> bool:
    """Both shapes known and equal dim by dim, no dim unknown (named dims match by name)."""
    return a is not None and b is not None and len(a) == len(b) and all(
        x == y and x != ANY for x, y in zip(a, b))


def broadcasts_into(small: tuple[Dim, ...] | None, big: tuple[Dim, ...] | None) -> bool:
    """Broadcasting `small` against `big` leaves `big` unchanged, whatever the run-time sizes."""
    if small is None or big is None or len(small) > len(big):
        return False
    return all(s == 1 or (isinstance(s, int) and s == b) for s, b in zip(small[::-1], big[::-1]))


def reshape_to(x: Expr, dims) -> Expr:
    return get_op("tensor.reshape")(x, Constant(np.array(list(dims), dtype=np.int64)))


X = wildcard().named("x")


# ---------------------------------------------------------------------------------------------
# reshape / flatten

_RESHAPE_LIKE = (is_op("tensor.reshape")(X, wildcard()) | is_op("tensor.flatten")(X)).named("inner")
_OUTER_RESHAPE = (is_op("tensor.reshape")(_RESHAPE_LIKE, wildcard().named("shape"))
                  | is_op("tensor.flatten")(_RESHAPE_LIKE))


def _reshape_chain(m: Match) -> Expr | None:
    """Only the last reshape of a chain matters: its target, with copied (0) dims made explicit."""
    out = static_shape(m.root)
    if out is not None:
        return reshape_to(m["x"], out)
    target = int_list(m.get("shape"))
    if target is None or m.root.attrs.allowzero:
        return None
    inner, x_shape = shape_of(m["inner"]), shape_of(m["x"]) or ()
    resolved = []
    for i, d in enumerate(target):
        if d == 0:  # copies the inner result's dim i: a number, or x's dim i when that is the same
            if inner is None or i >= len(inner):
                return None
            if isinstance(inner[i], int):
                d = inner[i]
            elif not (i < len(x_shape) and x_shape[i] == inner[i] != ANY):
                return None
        resolved.append(d)
    return reshape_to(m["x"], resolved)


def _same_shape_identity(m: Match) -> Expr | None:
    return m["x"] if known_same_shape(shape_of(m["x"]), shape_of(m.root)) else None


# ---------------------------------------------------------------------------------------------
# transpose, squeeze / unsqueeze


def _perm(e: Call) -> tuple[int, ...] | None:
    if e.attrs.perm is not None:
        return tuple(e.attrs.perm)
    rank = e.type.ndim if isinstance(e.type, TensorType) else None
    return None if rank is None else tuple(range(rank))[::-1]


def _transpose_pair(m: Match) -> Expr | None:
    """transpose(transpose(x, p), q) reads x[p[q[i]]]: one transpose, or none if that is identity."""
    p, q = _perm(m["inner"]), _perm(m.root)
    if p is None or q is None:
        return None
    perm = tuple(p[i] for i in q)
    if perm == tuple(range(len(perm))):
        return m["x"]
    return get_op("tensor.transpose")(m["x"], perm=perm)


def _transpose_identity(m: Match) -> Expr | None:
    p = _perm(m.root)
    return m["x"] if p is not None and p == tuple(range(len(p))) else None


def _axes(e: Expr | None, rank: int | None) -> frozenset[int] | None:
    vals = int_list(e)
    if vals is None or rank is None:
        return None
    norm = [a + rank if a < 0 else a for a in vals]
    return frozenset(norm) if len(set(norm)) == len(norm) and all(0 <= a < rank for a in norm) else None


def _squeeze_unsqueeze(m: Match) -> Expr | None:
    """squeeze(unsqueeze(x, A), A) is x: the same size-1 axes are inserted and removed."""
    rank = m["inner"].type.ndim
    a_in, a_out = _axes(m["axes_in"], rank), _axes(m.get("axes_out"), rank)
    if a_in is None:
        return None
    if m.get("axes_out") is None:  # squeeze of every size-1 axis: x must have none
        x_shape = static_shape(m["x"])
        return m["x"] if x_shape is not None and 1 not in x_shape else None
    return m["x"] if a_in == a_out else None


def _unsqueeze_squeeze(m: Match) -> Expr | None:
    """unsqueeze(squeeze(x, A), A) is x when x's A axes are known to be 1."""
    x_shape = shape_of(m["x"])
    a_in = _axes(m.get("axes_in"), None if x_shape is None else len(x_shape))
    a_out = _axes(m["axes_out"], m.root.type.ndim)
    if a_in is None or a_in != a_out or any(x_shape[a] != 1 for a in a_in):
        return None
    return m["x"]


# ---------------------------------------------------------------------------------------------
# arithmetic identities


def _drop_neutral(m: Match) -> Expr | None:
    """x op c == x when c is the neutral element and broadcasting c leaves x's shape alone."""
    x, c = m["x"], m["c"]
    if x.type != m.root.type or not broadcasts_into(shape_of(c), shape_of(x)):
        return None
    return x


def _neutral(op: str, value: float):
    """x op c (for add and mul also c op x: the matcher tries both orders)."""
    return is_op(op)(X, is_constant(value).named("c"))


# ---------------------------------------------------------------------------------------------
# casts


def exact_cast(src: str, dst: str) -> bool:
    """Every value of `src` is represented exactly in `dst` (so casting through dst loses nothing)."""
    if src == dst:
        return True
    if dst in ("string", "bool") or dst in dt.SMALL_FLOATS or dst in dt.SMALL_INTS:
        return False
    if src == "bool":
        return True
    real = {"complex64": "float32", "complex128": "float64"}.get(dst, dst)
    if src in dt.INTS:
        lo, hi = int(np.iinfo(dt.to_numpy(src)).min), int(np.iinfo(dt.to_numpy(src)).max)
        if real in dt.INTS:
            info = np.iinfo(dt.to_numpy(real))
            return int(info.min) <= lo and hi <= int(info.max)
        return max(-lo, hi) <= 2 ** (ml_dtypes.finfo(dt.to_numpy(real)).nmant + 1)
    if src in dt.FLOATS and real in dt.FLOATS:
        a, b = ml_dtypes.finfo(dt.to_numpy(src)), ml_dtypes.finfo(dt.to_numpy(real))
        return b.nmant >= a.nmant and b.maxexp >= a.maxexp and b.minexp <= a.minexp
    return False


def _cast_same(m: Match) -> Expr | None:
    return m["x"] if m["x"].type.dtype == m.root.attrs.to else None


def _cast_chain(m: Match) -> Expr | None:
    """cast(cast(x, T1), T2) == cast(x, T2) when T1 holds every value of x exactly."""
    x, inner = m["x"], m["inner"]
    if not isinstance(x.type, TensorType) or not exact_cast(x.type.dtype, inner.attrs.to):
        return None
    if x.type.dtype == m.root.attrs.to:
        return x
    return Call(m.root.op, (x,), m.root.attrs, m.root.name)


# ---------------------------------------------------------------------------------------------
# identity-like data movement


def _expand_same(m: Match) -> Expr | None:
    target = int_list(m["shape"])
    x_shape = shape_of(m["x"])
    if target is None or not broadcasts_into(tuple(target), x_shape):
        return None
    return m["x"]


def _slice_whole(m: Match) -> Expr | None:
    """A slice whose every (start, end, step) covers its whole axis, at run time too."""
    x_shape = shape_of(m["x"])
    starts, ends = int_list(m["starts"]), int_list(m["ends"])
    if x_shape is None or starts is None or ends is None:
        return None
    axes = int_list(m.get("axes")) if m.get("axes") is not None else list(range(len(starts)))
    steps = int_list(m.get("steps")) if m.get("steps") is not None else [1] * len(starts)
    if axes is None or steps is None or not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    rank = len(x_shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st != 1 or not -rank <= a < rank:
            return None
        d = x_shape[a % rank]
        if isinstance(d, int):
            s2 = s + d if s < 0 else s
            e2 = e + d if e < 0 else e
            if not (max(s2, 0) == 0 and min(e2, d) >= d):
                return None
        elif not ((s == 0 or s <= -OPEN_END) and e >= OPEN_END):
            return None
    return m["x"]


def _all_values(e: Expr | None, value: int) -> bool:
    vals = int_list(e)
    return vals is not None and all(v == value for v in vals)


def _tile_ones(m: Match) -> Expr | None:
    return m["x"] if _all_values(m["reps"], 1) else None


def _pad_zero(m: Match) -> Expr | None:
    return m["x"] if _all_values(m["pads"], 0) else None


def _single_input(m: Match) -> Expr | None:
    return m["x"] if m["x"].type == m.root.type else None


def _tuple_item(m: Match) -> Expr | None:
    return m["t"].fields[m.root.index]


def _keep(m: Match) -> Expr | None:
    return m["x"]


SIMPLIFY_EXPR_RULES: list[Rule] = [
    Rule("reshape-chain", _OUTER_RESHAPE, _reshape_chain),
    Rule("reshape-identity", is_op("tensor.reshape")(X, wildcard()) | is_op("tensor.flatten")(X),
         _same_shape_identity),
    Rule("transpose-pair", is_op("tensor.transpose")(is_op("tensor.transpose")(X).named("inner")), _transpose_pair),
    Rule("transpose-identity", is_op("tensor.transpose")(X), _transpose_identity),
    Rule("squeeze-unsqueeze", is_op("tensor.squeeze")(
        is_op("tensor.unsqueeze")(X, wildcard().named("axes_in")).named("inner"),
        optional(wildcard().named("axes_out"))), _squeeze_unsqueeze),
    Rule("unsqueeze-squeeze", is_op("tensor.unsqueeze")(
        is_op("tensor.squeeze")(X, optional(wildcard().named("axes_in"))), wildcard().named("axes_out")),
        _unsqueeze_squeeze),
    Rule("mul-one", _neutral("math.mul", 1.0), _drop_neutral),
    Rule("div-one", _neutral("math.div", 1.0), _drop_neutral),
    Rule("add-zero", _neutral("math.add", 0.0), _drop_neutral),
    Rule("sub-zero", _neutral("math.sub", 0.0), _drop_neutral),
    Rule("cast-same-dtype", is_op("math.cast")(X), _cast_same),
    Rule("cast-chain", is_op("math.cast")(is_op("math.cast")(X).named("inner")), _cast_chain),
    Rule("expand-same-shape", is_op("tensor.expand")(X, wildcard().named("shape")), _expand_same),
    Rule("slice-whole", is_op("tensor.slice")(X, wildcard().named("starts"), wildcard().named("ends"),
                                              optional(wildcard().named("axes")),
                                              optional(wildcard().named("steps"))), _slice_whole),
    Rule("tile-ones", is_op("tensor.tile")(X, wildcard().named("reps")), _tile_ones),
    Rule("pad-zero", is_op("tensor.pad")(X, wildcard().named("pads"), optional(), optional()), _pad_zero),
    Rule("single-input-variadic", is_op("tensor.concat", "math.sum", "math.max", "math.min", "math.mean")(X),
         _single_input),
    Rule("clip-unbounded", is_op("math.clip")(X, omitted(), omitted()), _keep),
    Rule("tuple-get-item-of-tuple", is_tuple_get_item(is_tuple().named("t")), _tuple_item),
]


def simplify_expr_fn(fn: Function, stats: Counter | None = None) -> Function:
    return apply_rules(fn, SIMPLIFY_EXPR_RULES, stats)


@function_pass("simplify-expr", opt_level=2)
def simplify_expr(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Remove no-op data movement and arithmetic; collapse reshape/transpose/cast chains."""
    return simplify_expr_fn(fn)


