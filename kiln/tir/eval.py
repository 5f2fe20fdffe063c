"""A numpy evaluator for tir: the reference semantics every pass and backend is tested against.

Every value is a 1-D numpy array of its lanes (a scalar has one lane), computed in its own dtype:
integers wrap around, float16/bfloat16 round after every op, TruncDiv/TruncMod (and Div on
integers) follow C, FloorDiv/FloorMod round toward -inf. Math intrinsics on half types compute
in float32 and round, as the C backend does. Buffer accesses are bounds-checked.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np

from kiln.ir.dtype import to_numpy
from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.expr import elem_of, is_float

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


INTRINSICS: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
    "tanh": np.tanh, "erf": _erf, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "fabs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": _round_half_away, "nearbyint": np.rint, "trunc": np.trunc,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "log1p": np.log1p, "expm1": np.expm1, "isnan": np.isnan, "isinf": np.isinf, "pow": np.power,
    "fmod": np.fmod, "atan2": np.arctan2,
    "check_index": lambda i, n: np.where((i >= 0) & (i < n), i, 0),  # the C kernel also reports it
}


def np_dtype(dtype: str) -> np.dtype:
    """numpy dtype of a tir dtype's element type."""
    return to_numpy(elem_of(dtype))


def wrap_int(value: int, dtype: str) -> int:
    """`value` reduced into the range of integer `dtype` (two's complement wraparound)."""
    if dtype == "bool":
        return int(bool(value))
    info = ml_dtypes.iinfo(np_dtype(dtype))  # int4 and friends too
    span = int(info.max) - int(info.min) + 1
    return (int(value) - int(info.min)) % span + int(info.min)


def _truncdiv(a, b):
    if a.dtype.kind == "f":
        return np.trunc(a / b).astype(a.dtype)
    q = np.floor_divide(a, b)
    return q + ((a - q * b != 0) & ((a < 0) != (b < 0))).astype(a.dtype)


def _truncmod(a, b):
    return np.fmod(a, b) if a.dtype.kind == "f" else a - _truncdiv(a, b) * b


def _floordiv(a, b):
    return np.floor(a / b).astype(a.dtype) if a.dtype.kind == "f" else np.floor_divide(a, b)


_BINARY = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.FloorDiv: _floordiv, E.FloorMod: np.mod,
    E.TruncDiv: _truncdiv, E.TruncMod: _truncmod, E.Min: np.minimum, E.Max: np.maximum,
    E.Div: lambda a, b: np.divide(a, b).astype(a.dtype) if a.dtype.kind == "f" else _truncdiv(a, b),
    E.EQ: np.equal, E.NE: np.not_equal, E.LT: np.less, E.LE: np.less_equal, E.GT: np.greater,
    E.GE: np.greater_equal, E.And: np.logical_and, E.Or: np.logical_or,
}


class Evaluator:
    """Holds the environment (Var -> value) and memory (Buffer -> flat array) of one run."""

    def __init__(self, externs: dict[str, Callable] | None = None):
        self.env: dict[E.Var, np.ndarray] = {}
        self.mem: dict[S.Buffer, np.ndarray] = {}
        self.externs = externs or {}

    # expressions -------------------------------------------------------------------------------
    def expr(self, e: E.PrimExpr) -> np.ndarray:
        t = type(e)
        if t in _BINARY:
            a, b = self.expr(e.a), self.expr(e.b)
            if t not in (E.And, E.Or):
                b = b.astype(a.dtype, copy=False)
            return np.asarray(_BINARY[t](a, b))
        if t is E.IntImm:
            return np.array([wrap_int(e.value, e.dtype)], np_dtype(e.dtype))
        if t is E.FloatImm:
            return np.array([e.value], np_dtype(e.dtype))
        if t is E.Var:
            if e not in self.env:
                raise NameError(f"tir Var {e.name} used outside its scope")
            return self.env[e]
        if t is E.BufferLoad:
            return self.mem[e.buffer][self._offsets(e.buffer, e.indices)]
        if t is E.Not:
            return np.logical_not(self.expr(e.a))
        if t is E.Select:
            c, x, y = self.expr(e.cond), self.expr(e.t), self.expr(e.f)
            return np.where(c, x, y).astype(x.dtype)
        if t is E.Cast:
            v = self.expr(e.value)
            return (v != 0) if elem_of(e.dtype) == "bool" else v.astype(np_dtype(e.dtype))
        if t is E.Call:
            return self._call(e)
        if t is E.Let:
            return self._bind(e.var, self.expr(e.value), lambda: self.expr(e.body))
        if t is E.Ramp:
            base, stride = self.expr(e.base), self.expr(e.stride)
            return base + stride * np.arange(e.lanes, dtype=base.dtype)
        if t is E.Broadcast:
            return np.repeat(self.expr(e.value), e.lanes)
        raise TypeError(f"cannot evaluate {t.__name__} (te nodes must be lowered first): {e}")

    def _call(self, e: E.Call) -> np.ndarray:
        args = [self.expr(a) for a in e.args]
        if e.name in self.externs:
            return np.atleast_1d(np.asarray(self.externs[e.name](*args))).astype(np_dtype(e.dtype))
        if e.name not in INTRINSICS:
            raise NameError(f"unknown tir intrinsic or extern {e.name!r} in {e}")
        half = args and args[0].dtype.itemsize == 2 and is_float(e.args[0].dtype)
        out = INTRINSICS[e.name](*(a.astype(np.float32) if half else a for a in args))
        return np.asarray(out).astype(np_dtype(e.dtype))

    def _bind(self, var: E.Var, value: np.ndarray, body: Callable):
        old = self.env.get(var)
        self.env[var] = value
        try:
            return body()
        finally:
            if old is None:
                del self.env[var]
            else:
                self.env[var] = old

    def _scalar(self, e: E.PrimExpr) -> int:
        return int(self.expr(e)[0])

    def _strides(self, buf: S.Buffer) -> list[int]:
        if buf.strides is not None:
            return [self._scalar(s) for s in buf.strides]
        out, acc = [], 1
        for d in reversed(buf.shape):
            out.append(acc)
            acc *= self._scalar(d)
        return out[::-1]

    def _offsets(self, buf: S.Buffer, indices) -> np.ndarray:
        if len(indices) != len(buf.shape):
            raise IndexError(f"{buf.name} has {len(buf.shape)} dims, accessed with {len(indices)} indices")
        off = sum(self.expr(i).astype(np.int64) * s for i, s in zip(indices, self._strides(buf)))
        off = np.atleast_1d(np.asarray(off, np.int64))
        size = len(self.mem[buf])
        if off.min() < 0 or off.max() >= size:
            raise IndexError(f"access out of bounds of {buf.name} (size {size}): offsets {off.tolist()}")
        return off

    def size(self, buf: S.Buffer) -> int:
        """Elements spanned by `buf` (its shape, through its strides if it has any)."""
        dims = [self._scalar(d) for d in buf.shape]
        if any(d == 0 for d in dims):
            return 0
        return 1 + sum((d - 1) * s for d, s in zip(dims, self._strides(buf)))

    # statements --------------------------------------------------------------------------------
    def stmt(self, s: S.Stmt) -> None:
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, S.BufferStore):
            off = self._offsets(s.buffer, s.indices)
            self.mem[s.buffer][off] = self.expr(s.value).astype(self.mem[s.buffer].dtype)
        elif isinstance(s, S.For):
            lo, n = self._scalar(s.min), self._scalar(s.extent)
            dt = np_dtype(s.loop_var.dtype)
            for k in range(lo, lo + n):
                self._bind(s.loop_var, np.array([k], dt), lambda: self.stmt(s.body))
        elif isinstance(s, S.IfThenElse):
            if bool(self.expr(s.cond)[0]):
                self.stmt(s.then_case)
            elif s.else_case is not None:
                self.stmt(s.else_case)
        elif isinstance(s, S.LetStmt):
            self._bind(s.var, self.expr(s.value), lambda: self.stmt(s.body))
        elif isinstance(s, S.Allocate):
            self.mem[s.buffer] = np.zeros(self.size(s.buffer), np_dtype(s.buffer.dtype))
            try:
                self.stmt(s.body)
            finally:
                del self.mem[s.buffer]
        elif isinstance(s, S.Evaluate):
            self.expr(s.value)
        else:
            raise TypeError(f"cannot execute {type(s).__name__}")


def eval_expr(e: E.PrimExpr, env: dict[E.Var, int | float] | None = None, externs=None):
    """Value of `e` with Vars bound by `env`: a numpy scalar, or an array for a vector."""
    ev = Evaluator(externs)
    for v, x in (env or {}).items():
        ev.env[v] = np.array([x]).astype(np_dtype(v.dtype))
    with np.errstate(all="ignore"):
        out = ev.expr(e)
    return out[0] if E.lanes_of(e.dtype) == 1 else out


def run(func: S.PrimFunc, *args, externs: dict[str, Callable] | None = None) -> None:
    """Execute `func`: numpy arrays for its Buffer params (written in place), ints for its Vars."""
    if len(args) != len(func.params):
        raise TypeError(f"{func.name} takes {len(func.params)} arguments, got {len(args)}")
    ev = Evaluator(externs)
    for p, a in zip(func.params, args):
        if isinstance(p, E.Var):
            ev.env[p] = np.array([a]).astype(np_dtype(p.dtype))
    for p, a in zip(func.params, args):
        if isinstance(p, S.Buffer):
            if not isinstance(a, np.ndarray) or a.dtype != np_dtype(p.dtype) or not a.flags.c_contiguous:
                raise TypeError(f"{func.name}: argument {p.name} must be a C-contiguous {p.dtype} numpy array")
            ev.mem[p] = a.reshape(-1)
            if ev.size(p) > a.size:
                raise ValueError(f"{func.name}: argument {p.name} has {a.size} elements, needs {ev.size(p)}")
    with np.errstate(all="ignore"):
        ev.stmt(func.body)
