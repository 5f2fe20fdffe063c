"""Expressions of the loop IR (tir): scalar (or vector) index and value arithmetic.

Nodes are frozen dataclasses: `==` is structural (the simplifier relies on it), except Var,
which is identity. Python operators build nodes (`i * 4 + j`, `x < y`); `eq(a, b)` / `ne(a, b)`
build comparisons since `==` means structural equality. Integer division is explicit:
FloorDiv/FloorMod for index arithmetic, TruncDiv/TruncMod for C semantics (ONNX Div on ints).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

_ids = itertools.count()


def lanes_of(dtype: str) -> int:
    return int(dtype.split("x")[1]) if "x" in dtype else 1


def elem_of(dtype: str) -> str:
    return dtype.split("x")[0]


def with_lanes(dtype: str, lanes: int) -> str:
    return elem_of(dtype) if lanes == 1 else f"{elem_of(dtype)}x{lanes}"


def is_float(dtype: str) -> bool:
    return elem_of(dtype) in ("float16", "bfloat16", "float32", "float64")


class _derived:
    """A dtype derived from the operands, computed once per node: the value goes into the instance's dict
    (not a field, so equality and hashing never see it), where it hides this descriptor. Asking a sum's
    dtype walked its whole left spine, a tenth of lowering's calls. functools.cached_property would do,
    but for its lock per class, held while it computes: two threads computing nested dtypes of
    different classes could each wait for the other's."""

    def __init__(self, fn: Callable[[Any], str]):
        self.fn = fn

    def __get__(self, node: Any, owner: type | None = None) -> Any:
        if node is None:
            return self
        value = node.__dict__["dtype"] = self.fn(node)
        return value


class PrimExpr:
    dtype: str

    def __add__(self, o): return Add(self, const(o, self.dtype))  # noqa: E704
    def __radd__(self, o): return Add(const(o, self.dtype), self)  # noqa: E704
    def __sub__(self, o): return Sub(self, const(o, self.dtype))  # noqa: E704
    def __rsub__(self, o): return Sub(const(o, self.dtype), self)  # noqa: E704
    def __mul__(self, o): return Mul(self, const(o, self.dtype))  # noqa: E704
    def __rmul__(self, o): return Mul(const(o, self.dtype), self)  # noqa: E704
    def __truediv__(self, o): return Div(self, const(o, self.dtype))  # noqa: E704
    def __rtruediv__(self, o): return Div(const(o, self.dtype), self)  # noqa: E704
    def __floordiv__(self, o): return FloorDiv(self, const(o, self.dtype))  # noqa: E704
    def __mod__(self, o): return FloorMod(self, const(o, self.dtype))  # noqa: E704
    def __neg__(self): return Sub(const(0, self.dtype), self)  # noqa: E704
    def __lt__(self, o): return LT(self, const(o, self.dtype))  # noqa: E704
    def __le__(self, o): return LE(self, const(o, self.dtype))  # noqa: E704
    def __gt__(self, o): return GT(self, const(o, self.dtype))  # noqa: E704
    def __ge__(self, o): return GE(self, const(o, self.dtype))  # noqa: E704
    def __and__(self, o): return And(self, o)  # noqa: E704
    def __or__(self, o): return Or(self, o)  # noqa: E704
    def __invert__(self): return Not(self)  # noqa: E704

    def __str__(self) -> str:
        from kiln.tir.printer import to_str

        return to_str(self)

    def __bool__(self):
        raise TypeError("a tir expression has no truth value; use eq()/ne() to compare, "
                        "structural == only between expressions")


ExprLike = PrimExpr | int | float | bool


@dataclass(frozen=True)
class IntImm(PrimExpr):
    value: int
    dtype: str = "int64"


@dataclass(frozen=True)
class FloatImm(PrimExpr):
    value: float
    dtype: str = "float32"


@dataclass(frozen=True, eq=False)
class Var(PrimExpr):
    """A scalar variable (loop index, size, let binding). Identity, not name, distinguishes Vars."""

    name: str
    dtype: str = "int64"
    uid: int = field(default_factory=lambda: next(_ids), repr=False)

    def __repr__(self) -> str:
        return self.name


def const(v: ExprLike, dtype: str = "int64") -> PrimExpr:
    """Wrap a Python number as an immediate of `dtype` (the other operand's dtype)."""
    if isinstance(v, PrimExpr):
        return v
    if lanes_of(dtype) > 1:  # the other operand is a vector: broadcast the scalar to its lanes
        return Broadcast(const(v, elem_of(dtype)), lanes_of(dtype))
    if isinstance(v, bool):
        return IntImm(int(v), "bool")
    if is_float(dtype) or isinstance(v, float):
        return FloatImm(float(v), elem_of(dtype) if is_float(dtype) else "float32")
    return IntImm(int(v), elem_of(dtype))


@dataclass(frozen=True)
class BinaryOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


class Add(BinaryOp): pass  # noqa: E701
class Sub(BinaryOp): pass  # noqa: E701
class Mul(BinaryOp): pass  # noqa: E701
class Div(BinaryOp): """True division (floats)."""  # noqa: E701
class FloorDiv(BinaryOp): """Integer division rounding toward -inf (index arithmetic)."""  # noqa: E701
class FloorMod(BinaryOp): """Remainder with the divisor's sign (index arithmetic)."""  # noqa: E701
class TruncDiv(BinaryOp): """Integer division rounding toward zero (C semantics)."""  # noqa: E701
class TruncMod(BinaryOp): """Remainder with the dividend's sign (C semantics)."""  # noqa: E701
class Min(BinaryOp): pass  # noqa: E701
class Max(BinaryOp): pass  # noqa: E701


@dataclass(frozen=True)
class CmpOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return with_lanes("bool", lanes_of(self.a.dtype))


class EQ(CmpOp): pass  # noqa: E701
class NE(CmpOp): pass  # noqa: E701
class LT(CmpOp): pass  # noqa: E701
class LE(CmpOp): pass  # noqa: E701
class GT(CmpOp): pass  # noqa: E701
class GE(CmpOp): pass  # noqa: E701


@dataclass(frozen=True)
class And(PrimExpr):
    a: PrimExpr
    b: PrimExpr

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Or(PrimExpr):
    a: PrimExpr
    b: PrimExpr

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Not(PrimExpr):
    a: PrimExpr

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


@dataclass(frozen=True)
class Select(PrimExpr):
    """cond ? t : f (both sides may be evaluated)."""

    cond: PrimExpr
    t: PrimExpr
    f: PrimExpr

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.t.dtype


@dataclass(frozen=True)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


@dataclass(frozen=True)
class Call(PrimExpr):
    """An intrinsic (exp, sqrt, tanh, erf, pow, fabs, floor, ...) or an external runtime function."""

    dtype: str
    name: str
    args: tuple[PrimExpr, ...]


@dataclass(frozen=True)
class Let(PrimExpr):
    var: Var
    value: PrimExpr
    body: PrimExpr

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.body.dtype


@dataclass(frozen=True)
class Ramp(PrimExpr):
    """The vector base, base+stride, ..., base+(lanes-1)*stride."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return with_lanes(self.base.dtype, self.lanes)


@dataclass(frozen=True)
class Broadcast(PrimExpr):
    value: PrimExpr
    lanes: int

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return with_lanes(self.value.dtype, self.lanes)


@dataclass(frozen=True)
class BufferLoad(PrimExpr):
    buffer: Any  # kiln.tir.stmt.Buffer
    indices: tuple[PrimExpr, ...]

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        lanes = max((lanes_of(i.dtype) for i in self.indices), default=1)
        return with_lanes(self.buffer.dtype, lanes)


@dataclass(frozen=True)
class ProducerLoad(PrimExpr):
    """A read of a te.Tensor before lowering (te's compute bodies are built from these)."""

    producer: Any  # kiln.te.Tensor
    indices: tuple[PrimExpr, ...]

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.producer.dtype


@dataclass(frozen=True)
class Reduce(PrimExpr):
    """A commutative reduction over `axis` (te.IterVars) of `source`, combined by `combiner`
    (a CommReducer); `value_index` picks one result of a tuple reducer (argmax)."""

    combiner: Any
    source: tuple[PrimExpr, ...]
    axis: tuple[Any, ...]
    condition: PrimExpr | None = None
    value_index: int = 0

    @_derived
    def dtype(self) -> str:  # type: ignore[override]
        return self.source[self.value_index].dtype


def _pair(a: ExprLike, b: ExprLike) -> tuple[PrimExpr, PrimExpr]:
    """Both operands as expressions, a Python number taking the other side's dtype."""
    a = const(a, b.dtype if isinstance(b, PrimExpr) else "int64")
    return a, const(b, a.dtype)


def eq(a: ExprLike, b: ExprLike) -> EQ:
    return EQ(*_pair(a, b))


def ne(a: ExprLike, b: ExprLike) -> NE:
    return NE(*_pair(a, b))


def min_(a: ExprLike, b: ExprLike) -> Min:
    return Min(*_pair(a, b))


def max_(a: ExprLike, b: ExprLike) -> Max:
    return Max(*_pair(a, b))


def all_of(conds: Sequence[PrimExpr]) -> PrimExpr:
    """The conjunction of `conds` (true when there are none)."""
    out = conds[0] if conds else const(True)
    for c in conds[1:]:
        out = out & c
    return out


def select(cond: PrimExpr, t: ExprLike, f: ExprLike) -> Select:
    t = const(t, f.dtype if isinstance(f, PrimExpr) else "float32")
    return Select(cond, t, const(f, t.dtype))


def cast(dtype: str, v: ExprLike) -> PrimExpr:
    v = const(v, dtype)
    return v if v.dtype == dtype else Cast(dtype, v)


def call(name: str, *args: ExprLike, dtype: str | None = None) -> Call:
    """An intrinsic call; its dtype defaults to the first argument's."""
    ex = [const(a) for a in args]
    return Call(dtype or ex[0].dtype, name, tuple(ex))
