"""A numpy evaluator of te graphs: the reference for testing computes without a compiler.

Each ComputeOp body is evaluated once, vectorized over its whole index grid (every index var is
an `arange` placed on its own axis, so expressions broadcast to the grid). A Reduce appends its
reduce axes to the grid and folds them with the reducer: sum/prod/max/min directly, any other
(argmax, argmin, user reducers) by applying its combine expression position by position, in loop
order. Select evaluates both sides; loads under a Select clamp their indices (the clamped values
are never selected), loads elsewhere must be in bounds. ExternOps run the numpy functions in
`EXTERN_FUNCS`, which topi fills where it defines each extern (a C runtime library implements the
same names).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kiln import tir
from kiln.ir import dtype as _dt
from kiln.te import tensor as _te
from kiln.te.schedule import reads
from kiln.tir import expr as E

_BINARY = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Min: np.minimum, E.Max: np.maximum,
    E.EQ: np.equal, E.NE: np.not_equal, E.LT: np.less, E.LE: np.less_equal, E.GT: np.greater,
    E.GE: np.greater_equal, E.And: np.logical_and, E.Or: np.logical_or,
}


def _np_dtype(dtype: str) -> np.dtype:
    return _dt.to_numpy(tir.elem_of(dtype))


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.true_divide(a, b)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.trunc(a / b)
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def _round_away(x: np.ndarray) -> np.ndarray:
    """C round(): halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + x.dtype.type(0.5))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _shift(left: bool):
    def f(x: np.ndarray, n: np.ndarray) -> np.ndarray:
        """C shifts; the shift count is taken modulo nothing, so callers keep it in [0, bits)."""
        n = np.asarray(n).astype(x.dtype)
        return np.left_shift(x, n) if left else np.right_shift(x, n)

    return f


# intrinsic name -> numpy function (arguments already in their dtypes)
INTRINSICS: dict[str, Any] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sigmoid": _sigmoid, "fabs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": _round_away, "nearbyint": np.rint, "trunc": np.trunc,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "log1p": np.log1p, "expm1": np.expm1, "isnan": np.isnan, "isinf": np.isinf, "pow": np.power,
    "erf": lambda x: _ERF(x), "fmod": np.fmod, "abs": np.abs,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.invert, "shift_left": _shift(True), "shift_right": _shift(False),
    "check_index": lambda i, n: np.where((i >= 0) & (i < n), i, 0),  # the C kernel also reports it
}


class _Grid:
    """Values of index vars over one (broadcastable) grid of `ndim` axes."""

    def __init__(self, ev: Evaluator, env: dict[Any, np.ndarray], ndim: int, guarded: bool = False):
        self.ev, self.env, self.ndim, self.guarded = ev, env, ndim, guarded
        self.memo: dict[int, np.ndarray] = {}

    def __call__(self, e: E.PrimExpr) -> np.ndarray:
        key = id(e)
        if key not in self.memo:
            self.memo[key] = np.asarray(self._eval(e))
        return self.memo[key]

    def _eval(self, e: E.PrimExpr) -> np.ndarray:
        dtype = getattr(e, "dtype", None)
        if isinstance(e, (E.IntImm, E.FloatImm)):
            return np.asarray(e.value).astype(_np_dtype(e.dtype))
        if isinstance(e, E.Var):
            if e in self.env:
                return self.env[e]
            raise KeyError(f"te eval: variable {e.name} is unbound (pass its value in `sizes`)")
        if isinstance(e, E.Select):
            inner = _Grid(self.ev, self.env, self.ndim, True)
            cond, t, f = inner(e.cond), inner(e.t), inner(e.f)
            return np.where(cond, t, f).astype(_np_dtype(dtype), copy=False)
        if type(e) in _BINARY:
            return _BINARY[type(e)](self(e.a), self(e.b)).astype(_np_dtype(dtype), copy=False)
        if isinstance(e, (E.Div, E.FloorDiv, E.FloorMod, E.TruncDiv, E.TruncMod)):
            return self._division(e)
        if isinstance(e, E.Not):
            return np.logical_not(self(e.a))
        if isinstance(e, E.Cast):
            return self(e.value).astype(_np_dtype(e.dtype))
        if isinstance(e, E.Call):
            if e.name == "reinterpret":  # same bits, the call's dtype
                v = self(e.args[0])
                return np.ascontiguousarray(v).reshape(-1).view(_np_dtype(e.dtype)).reshape(v.shape)
            if e.name not in INTRINSICS:
                raise NotImplementedError(f"te eval: no numpy version of intrinsic {e.name!r}")
            out = INTRINSICS[e.name](*(self(a) for a in e.args))
            return np.asarray(out).astype(_np_dtype(e.dtype), copy=False)
        if isinstance(e, E.Let):
            inner = _Grid(self.ev, {**self.env, e.var: self(e.value)}, self.ndim, self.guarded)
            return inner(e.body)
        if isinstance(e, E.ProducerLoad):
            return self._load(e)
        if isinstance(e, E.Reduce):
            return self.ev.reduce(e, self)[e.value_index]
        raise NotImplementedError(f"te eval: cannot evaluate {type(e).__name__}")

    def _division(self, e: E.BinaryOp) -> np.ndarray:
        a, b = self(e.a), self(e.b)
        if isinstance(e, E.Div):
            out = _div(a, b)
        elif isinstance(e, E.FloorDiv):
            out = np.floor_divide(a, b) if a.dtype.kind != "f" else np.floor(a / b)
        elif isinstance(e, E.FloorMod):
            out = np.mod(a, b)
        elif isinstance(e, E.TruncDiv):
            out = _trunc_div(a, b)
        else:
            out = np.fmod(a, b)
        return out.astype(_np_dtype(e.dtype), copy=False)

    def _load(self, e: E.ProducerLoad) -> np.ndarray:
        arr = self.ev.value(e.producer)
        idx = []
        for axis, i in enumerate(e.indices):
            v = self(i).astype(np.int64, copy=False)
            n = arr.shape[axis]
            if self.guarded:
                v = np.clip(v, 0, max(n - 1, 0))
            elif v.size and (v.min() < 0 or v.max() >= n):
                raise IndexError(f"te eval: {e.producer.name} axis {axis} read at "
                                 f"[{v.min()}, {v.max()}] outside [0, {n})")
            idx.append(v)
        if arr.size == 0:  # nothing to read; any value is right
            shape = np.broadcast_shapes(*(v.shape for v in idx)) if idx else ()
            return np.zeros(shape, arr.dtype)
        return arr[tuple(idx)]


class Evaluator:
    """Evaluates tensors of one te graph; values are cached per (operation, output index)."""

    def __init__(self, feeds: Mapping[_te.Tensor, np.ndarray], sizes: Mapping[E.Var, int] | None = None):
        self.values: dict[tuple[Any, int], np.ndarray] = {}
        self.sizes: dict[E.Var, int] = dict(sizes or {})
        for t, v in feeds.items():
            self.values[(t.op, t.value_index)] = np.asarray(v)

    def scalar(self, e: E.PrimExpr) -> int | float:
        env = {v: np.asarray(n, np.int64) for v, n in self.sizes.items()}
        return _Grid(self, env, 0)(e).item()

    def shape(self, shape: Sequence[E.PrimExpr]) -> tuple[int, ...]:
        return tuple(int(self.scalar(d)) for d in shape)

    def value(self, t: _te.Tensor) -> np.ndarray:
        key = (t.op, t.value_index)
        if key not in self.values:
            op = t.op
            if isinstance(op, _te.PlaceholderOp):
                raise KeyError(f"te eval: no value fed for placeholder {op.name}")
            outs = self._extern(op) if isinstance(op, _te.ExternOp) else self._compute(op)
            for k, v in enumerate(outs):
                self.values[(op, k)] = v
        return self.values[key]

    def _compute(self, op: _te.ComputeOp) -> list[np.ndarray]:
        for t in reads(op):  # an extern read here may bind a data-dependent dim of this shape
            if isinstance(t.op, _te.ExternOp):
                self.value(t)
        shape = self.shape(op.shape)
        env = {v: np.asarray(n, np.int64) for v, n in self.sizes.items()}
        nd = len(shape)
        for k, iv in enumerate(op.axis):
            env[iv.var] = np.arange(shape[k], dtype=np.int64).reshape((1,) * k + (-1,) + (1,) * (nd - k - 1))
        grid = _Grid(self, env, nd)
        with np.errstate(all="ignore"):
            return [np.array(np.broadcast_to(grid(b), shape), dtype=_np_dtype(b.dtype)) for b in op.body]

    def _extern(self, op: _te.ExternOp) -> list[np.ndarray]:
        ins = [self.value(t) for t in op.inputs]
        outs = op.evaluate(ins, self.sizes)  # an extern whose body is tir evaluates itself
        if outs is None:
            if op.func not in EXTERN_FUNCS:
                raise NotImplementedError(f"te eval: no reference for extern function {op.func!r}")
            outs = EXTERN_FUNCS[op.func](ins, [self.scalar(s) for s in op.scalars])
        for shape, dtype, out in zip(op.out_shapes, op.out_dtypes, outs):
            if out.dtype != _np_dtype(dtype):
                raise TypeError(f"extern {op.func} returned {out.dtype}, declared {dtype}")
            for d, n in zip(shape, out.shape):  # data-dependent dims bind their Vars here
                if isinstance(d, E.Var) and d not in self.sizes:
                    self.sizes[d] = n
            if self.shape(shape) != out.shape:
                raise ValueError(f"extern {op.func} returned shape {out.shape}, declared {shape}")
        return list(outs)

    def reduce(self, r: E.Reduce, grid: _Grid) -> list[np.ndarray]:
        """All results of the reduction r (one per source), over grid's axes plus r's axes."""
        key = ("reduce", r.combiner, r.source, r.axis, r.condition)
        if key in grid.memo:
            return grid.memo[key]
        extents = [int(self.scalar(iv.dom.extent)) for iv in r.axis]
        nr, nd = len(extents), grid.ndim
        env = {v: a.reshape(a.shape + (1,) * nr) if a.ndim == nd else a for v, a in grid.env.items()}
        for k, iv in enumerate(r.axis):
            lo = int(self.scalar(iv.dom.min))
            env[iv.var] = (lo + np.arange(extents[k], dtype=np.int64)).reshape(
                (1,) * (nd + k) + (-1,) + (1,) * (nr - k - 1))
        # the condition guards the source: where it fails, the source may read out of bounds
        inner = _Grid(self, env, nd + nr, grid.guarded or r.condition is not None)
        full = np.broadcast_shapes(*(a.shape for a in env.values()), (1,) * (nd + nr))
        srcs = [np.broadcast_to(inner(s), full) for s in r.source]
        cond = None
        if r.condition is not None:
            cond = np.broadcast_to(_Grid(self, env, nd + nr, grid.guarded)(r.condition), full)
        dtypes = [s.dtype for s in r.source]
        ident = [grid(i) for i in r.combiner.identity(*dtypes)]
        axes = tuple(range(nd, nd + nr))
        out = _fast_reduce(r.combiner, srcs[0], cond, ident[0], axes) if len(srcs) == 1 else None
        if out is None:
            out = self._fold(r.combiner, srcs, cond, ident, dtypes, full[:nd], grid)
        grid.memo[key] = out
        return out

    def _fold(self, combiner, srcs, cond, ident, dtypes, shape, grid: _Grid) -> list[np.ndarray]:
        """Apply the combiner's expression at each reduce position in loop order (any reducer)."""
        lhs = [E.Var(f"lhs{i}", d) for i, d in enumerate(dtypes)]
        rhs = [E.Var(f"rhs{i}", d) for i, d in enumerate(dtypes)]
        combined = combiner.combine(*lhs, *rhs)
        acc = [np.array(np.broadcast_to(v, shape), _np_dtype(d)) for v, d in zip(ident, dtypes)]
        nd = len(shape)
        for pos in np.ndindex(*srcs[0].shape[nd:]):
            at = (Ellipsis,) + pos
            env = {**grid.env, **dict(zip(lhs, acc)), **{v: s[at] for v, s in zip(rhs, srcs)}}
            step = _Grid(self, env, nd)
            new = [np.broadcast_to(step(c), shape) for c in combined]
            keep = None if cond is None else cond[at]
            acc = [np.array(n if keep is None else np.where(keep, n, a), a.dtype) for n, a in zip(new, acc)]
        return acc


def _fast_reduce(combiner, src: np.ndarray, cond, ident: np.ndarray, axes: tuple[int, ...]):
    fn = {_te.sum: np.sum, _te.prod: np.prod, _te.max: np.max, _te.min: np.min}.get(combiner)
    if fn is None:
        return None
    if cond is not None:
        src = np.where(cond, src, ident)
    if fn in (np.max, np.min):
        return [fn(src, axis=axes, initial=ident.item())]
    return [fn(src, axis=axes, dtype=src.dtype)]


def evaluate(outputs: _te.Tensor | Sequence[_te.Tensor], feeds: Mapping[_te.Tensor, np.ndarray],
             sizes: Mapping[E.Var, int] | None = None) -> np.ndarray | list[np.ndarray]:
    """Values of `outputs` given arrays for the placeholders and ints for symbolic dim Vars."""
    ev = Evaluator(feeds, sizes)
    if isinstance(outputs, _te.Tensor):
        return ev.value(outputs)
    return [ev.value(t) for t in outputs]


# extern functions: name -> f(input arrays, scalar args) -> output arrays. The layer that emits an
# extern call registers its reference here (topi/extern.py: the operators' numpy references), so te
# needs no operator registry.
EXTERN_FUNCS: dict[str, Any] = {}
