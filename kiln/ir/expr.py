"""Expressions of the graph IR. Immutable; every expression knows its type at construction.

`==` and `hash` are identity (fast memo keys for passes); structural comparison is
`kiln.ir.structural_equal` / `structural_hash`. Typing is eager: building a Call runs its
operator's type relation, so an ill-typed graph cannot be built silently.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as _dt
from kiln.ir.aligned import aligned, aligned_copy
from kiln.ir.types import UNIT, FuncType, OptionalType, SeqType, TensorType, TupleType, Type, join

_ids = itertools.count()


class Op:
    """An operator callee. The registry (kiln.op) defines the concrete class."""

    name: str

    def infer_type(self, args: tuple[Expr, ...], attrs: Any) -> Type:  # pragma: no cover
        raise NotImplementedError


class Expr:
    """Base class; `type` is set by each subclass at construction."""

    __slots__ = ()
    type: Type


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A variable bound by a Function parameter or a Let. Identity matters: two Vars with the
    same name are different variables."""

    name: str
    type: Type
    uid: int = field(default_factory=lambda: next(_ids), compare=False, repr=False)

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True, eq=False)
class GlobalVar(Expr):
    """Names a function of the IRModule; carries that function's type."""

    name: str
    type: Type

    def __repr__(self) -> str:
        return f"@{self.name}"


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    data: np.ndarray
    type: Type = field(init=False)

    def __post_init__(self):
        data = self.data if isinstance(self.data, np.ndarray) else np.asarray(self.data)
        # stored on 64 bytes, so the runtimes pass it to kernels as it is (no second, aligned copy). A
        # writable array is copied (the IR's data never changes); a read-only one (an ONNX initializer over the
        # model's bytes) only when it is off the boundary; a broadcast splat (zero strides) is taken as is
        if data.flags.writeable:
            data = aligned_copy(data)
        elif data.flags.c_contiguous and not data.dtype.hasobject:
            data = aligned(data)
        data.flags.writeable = False
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "type", TensorType(data.shape, _dt.from_numpy(data.dtype)))


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    """A tuple of values. The empty tuple `()` also stands for an omitted optional operator input."""

    fields: tuple[Expr, ...]
    type: Type = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "type", TupleType(tuple(f.type for f in self.fields)))


def absent() -> Tuple:
    """Placeholder for an omitted optional input of an operator."""
    return Tuple(())


def is_absent(e: Expr) -> bool:
    return isinstance(e, Tuple) and not e.fields


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int
    type: Type = field(init=False)

    def __post_init__(self):
        t = self.tuple_value.type
        if not isinstance(t, TupleType) or not 0 <= self.index < len(t.fields):
            raise TypeInferenceError(f"TupleGetItem index {self.index} on a value of type {t}")
        object.__setattr__(self, "type", t.fields[self.index])


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """Apply an operator, a global function or a function value to arguments.

    `name` is the source node name (for error messages only; not part of structure).
    """

    op: Op | Expr
    args: tuple[Expr, ...]
    attrs: Any = None
    name: str = field(default="", compare=False)
    type: Type = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))
        if isinstance(self.op, Op):
            try:
                t = self.op.infer_type(self.args, self.attrs)
            except TypeInferenceError as e:
                where = f" at node '{self.name}'" if self.name else ""
                raise TypeInferenceError(f"{self.op.name}{where}: {e}") from None
        else:
            ft = self.op.type
            if not isinstance(ft, FuncType):
                raise TypeInferenceError(f"calling a value of non-function type {ft}")
            if len(ft.params) != len(self.args):
                raise TypeInferenceError(f"function expects {len(ft.params)} args, got {len(self.args)}")
            t = ft.ret
        object.__setattr__(self, "type", t)


@dataclass(frozen=True, eq=False)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr
    type: Type = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "type", self.body.type)


@dataclass(frozen=True, eq=False)
class If(Expr):
    cond: Expr
    then_branch: Expr
    else_branch: Expr
    type: Type = field(init=False)

    def __post_init__(self):
        try:
            t = join(self.then_branch.type, self.else_branch.type)
        except ValueError as e:
            raise TypeInferenceError(f"If branches disagree: {e}") from None
        object.__setattr__(self, "type", t)


@dataclass(frozen=True, eq=False)
class Function(Expr):
    """A function. attrs holds flags such as {"Primitive": 1} (fused kernels) or {"Inline": 1}."""

    params: tuple[Var, ...]
    body: Expr
    attrs: tuple[tuple[str, Any], ...] = ()
    type: Type = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        attrs = self.attrs.items() if isinstance(self.attrs, dict) else self.attrs
        object.__setattr__(self, "attrs", tuple(sorted(attrs)))
        object.__setattr__(self, "type", FuncType(tuple(p.type for p in self.params), self.body.type))

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


def children(e: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions in evaluation order (Function bodies included)."""
    if isinstance(e, Call):
        return ((e.op,) if isinstance(e.op, Expr) else ()) + e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, Let):
        return (e.var, e.value, e.body)
    if isinstance(e, If):
        return (e.cond, e.then_branch, e.else_branch)
    if isinstance(e, Function):
        return e.params + (e.body,)
    return ()


__all__ = ["Op", "Expr", "Var", "GlobalVar", "Constant", "Tuple", "TupleGetItem", "Call", "Let",
           "If", "Function", "absent", "is_absent", "children", "UNIT", "SeqType", "OptionalType"]
