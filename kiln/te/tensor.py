"""Tensor expressions: what is computed, separate from how (schedules).

`placeholder` declares an input; `compute(shape, f)` declares an output whose element at index
i is f(*i), where f reads other tensors by calling them (`A(i, k)`); `reduce_axis` plus a
reducer (`sum`, `max`, `min`, `prod`, or a tuple reducer such as argmax) describe reductions.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln import tir
from kiln.tir.expr import PrimExpr, ProducerLoad, Reduce, Var, const

_ids = itertools.count()


@dataclass(frozen=True)
class Range:
    min: PrimExpr
    extent: PrimExpr


@dataclass(frozen=True, eq=False)
class IterVar:
    """A loop index with its domain: data-parallel (an output axis) or a reduction axis."""

    var: Var
    dom: Range
    kind: str = "data"  # "data" | "reduce"

    def __repr__(self) -> str:
        return f"IterVar({self.var.name}, {self.kind})"

    @property
    def dtype(self) -> str:
        return self.var.dtype


def _delegate(name: str) -> Callable[..., PrimExpr]:
    def f(self: IterVar, *other: Any) -> PrimExpr:
        return getattr(self.var, name)(*(_as_var(o) for o in other))

    return f


# an IterVar takes part in index arithmetic as its var: A(i, k + 1), k * 2 ...
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__", "__mod__",
              "__neg__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(IterVar, _name, _delegate(_name))


def _as_var(v: IterVar | PrimExpr) -> PrimExpr:
    return v.var if isinstance(v, IterVar) else v


class Operation:
    name: str
    num_outputs: int = 1

    def output(self, i: int = 0) -> Tensor:
        return Tensor(self, i)


@dataclass(frozen=True, eq=False)
class PlaceholderOp(Operation):
    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str


@dataclass(frozen=True, eq=False)
class ComputeOp(Operation):
    """body[k] is the expression of output k (several outputs only for tuple reducers)."""

    name: str
    axis: tuple[IterVar, ...]
    body: tuple[PrimExpr, ...]
    tag: str = ""
    attrs: tuple[tuple[str, Any], ...] = ()

    @property
    def num_outputs(self) -> int:  # type: ignore[override]
        return len(self.body)

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        b = self.body[0]
        return tuple(b.axis) if isinstance(b, Reduce) else ()

    @property
    def shape(self) -> tuple[PrimExpr, ...]:
        return tuple(iv.dom.extent for iv in self.axis)


@dataclass(frozen=True, eq=False)
class ExternOp(Operation):
    """An output computed by a function of Kiln's runtime library (sorting, top-k, NMS ...):
    `func` names it; it receives the input and output buffers and `scalars`."""

    name: str
    inputs: tuple[Tensor, ...]
    out_shapes: tuple[tuple[PrimExpr, ...], ...]
    out_dtypes: tuple[str, ...]
    func: str
    scalars: tuple[PrimExpr, ...] = ()

    @property
    def num_outputs(self) -> int:  # type: ignore[override]
        return len(self.out_shapes)

    def lower_stmt(self, ins: Sequence[Any], outs: Sequence[Any]) -> Any:
        """tir computing the outputs from the input/output Buffers; None (here): call `func`.
        Subclasses whose body is tir (kiln.te.scan) override this and `evaluate`."""
        return None

    def evaluate(self, ins: Sequence[Any], sizes: dict) -> Any:
        """numpy outputs from numpy inputs and dim sizes; None (here): run `func`'s reference."""
        return None


@dataclass(frozen=True, eq=False)
class Tensor:
    op: Operation
    value_index: int = 0
    uid: int = field(default_factory=lambda: next(_ids), repr=False)

    @property
    def shape(self) -> tuple[PrimExpr, ...]:
        if isinstance(self.op, ExternOp):
            return self.op.out_shapes[self.value_index]
        return self.op.shape

    @property
    def dtype(self) -> str:
        op = self.op
        if isinstance(op, PlaceholderOp):
            return op.dtype
        if isinstance(op, ExternOp):
            return op.out_dtypes[self.value_index]
        return op.body[self.value_index].dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str:
        return self.op.name if self.op.num_outputs == 1 else f"{self.op.name}.{self.value_index}"

    def __call__(self, *indices: Any) -> ProducerLoad:
        if len(indices) != self.ndim:
            raise ValueError(f"{self.name} has {self.ndim} dims, indexed with {len(indices)}")
        return ProducerLoad(self, tuple(const(_as_var(i)) for i in indices))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.dtype})"


def _dims(shape: Sequence[Any]) -> tuple[PrimExpr, ...]:
    return tuple(const(d) for d in shape)


def placeholder(shape: Sequence[Any], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    return PlaceholderOp(name, _dims(shape), dtype).output(0)


def compute(shape: Sequence[Any], fcompute: Callable[..., Any], name: str = "compute", tag: str = "",
            attrs: dict | None = None) -> Tensor | tuple[Tensor, ...]:
    """Declare a tensor of `shape` whose element at i is fcompute(*i) (or a tuple for tuple reducers)."""
    shape = _dims(shape)
    params = inspect.signature(fcompute).parameters.values()
    names = [p.name for p in params]
    if len(names) != len(shape) or any(p.kind == p.VAR_POSITIONAL for p in params):
        names = [f"i{k}" for k in range(len(shape))]  # fcompute(*indices)
    axis = tuple(IterVar(Var(n), Range(const(0), d)) for n, d in zip(names, shape))
    body = fcompute(*(iv.var for iv in axis))
    bodies = tuple(body) if isinstance(body, (tuple, list)) else (body,)
    bodies = tuple(const(b, "float32") if not isinstance(b, PrimExpr) else b for b in bodies)
    op = ComputeOp(name, axis, bodies, tag, tuple(sorted((attrs or {}).items())))
    outs = tuple(op.output(k) for k in range(len(bodies)))
    return outs[0] if len(outs) == 1 else outs


def reduce_axis(dom: Any, name: str = "k") -> IterVar:
    """A reduction axis over range(extent) or (min, extent)."""
    lo, ext = (dom if isinstance(dom, (tuple, list)) else (0, dom))
    return IterVar(Var(name), Range(const(lo), const(ext)), "reduce")


@dataclass(frozen=True, eq=False)
class CommReducer:
    """combine(lhs..., rhs...) -> new values; identity(dtypes) -> initial values."""

    name: str
    combine: Callable[..., tuple[PrimExpr, ...]]
    identity: Callable[..., tuple[PrimExpr, ...]]

    def __call__(self, source: PrimExpr | tuple[PrimExpr, ...], axis: IterVar | Sequence[IterVar],
                 where: PrimExpr | None = None) -> PrimExpr | tuple[PrimExpr, ...]:
        src = tuple(_as_var(s) for s in (source if isinstance(source, (tuple, list)) else (source,)))
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        outs = tuple(Reduce(self, src, axes, where, k) for k in range(len(src)))
        return outs if len(outs) > 1 else outs[0]


def lowest(dtype: str) -> PrimExpr:
    return tir.FloatImm(float("-inf"), dtype) if tir.is_float(dtype) else tir.IntImm(_int_min(dtype), dtype)


def highest(dtype: str) -> PrimExpr:
    return tir.FloatImm(float("inf"), dtype) if tir.is_float(dtype) else tir.IntImm(_int_max(dtype), dtype)


def _int_min(dtype: str) -> int:
    if dtype == "bool" or dtype.startswith("uint"):
        return 0
    return -(1 << (int(dtype[3:]) - 1))


def _int_max(dtype: str) -> int:
    if dtype == "bool":
        return 1
    if dtype.startswith("uint"):
        return (1 << int(dtype[4:])) - 1
    return (1 << (int(dtype[3:]) - 1)) - 1


sum = CommReducer("sum", lambda a, b: (a + b,), lambda d: (const(0, d),))  # noqa: A001
prod = CommReducer("prod", lambda a, b: (a * b,), lambda d: (const(1, d),))
max = CommReducer("max", lambda a, b: (tir.Max(a, b),), lambda d: (lowest(d),))  # noqa: A001
min = CommReducer("min", lambda a, b: (tir.Min(a, b),), lambda d: (highest(d),))  # noqa: A001


def _arg_combine(cmp: Callable[[PrimExpr, PrimExpr], PrimExpr]):
    def combine(ia, va, ib, vb):
        take_b = cmp(vb, va) | (tir.eq(vb, va) & ((ib < ia) | (ia < 0)))  # ia < 0: nothing taken yet
        return tir.Select(take_b, ib, ia), tir.Select(take_b, vb, va)

    return combine


# tuple reducers over (index, value): the first index of the extreme value
argmax = CommReducer("argmax", _arg_combine(lambda x, y: x > y), lambda di, dv: (const(-1, di), lowest(dv)))
argmin = CommReducer("argmin", _arg_combine(lambda x, y: x < y), lambda di, dv: (const(-1, di), highest(dv)))
