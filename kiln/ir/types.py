"""Types of IR values: tensors (with symbolic dims), tuples, sequences, optionals, functions.

A tensor dimension is an int, a named SizeVar (a symbolic dim such as a dynamic batch), or
ANY (unknown: decided only at run time, e.g. by a data-dependent shape). Types are frozen
dataclasses, so == and hash are structural.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.ir import dtype as _dt


@dataclass(frozen=True)
class SizeVar:
    """A symbolic dimension. Two SizeVars with the same name are the same size; `?` is unknown."""

    name: str

    def __repr__(self) -> str:
        return self.name


ANY = SizeVar("?")
Dim = int | SizeVar


class Type:
    """Base class of IR types."""


@dataclass(frozen=True)
class TensorType(Type):
    shape: tuple[Dim, ...] | None  # None: rank unknown
    dtype: str

    def __post_init__(self):
        if self.dtype not in _dt.NAME_TO_NUMPY:
            raise ValueError(f"unknown dtype {self.dtype!r}")
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(d if isinstance(d, SizeVar) else int(d)
                                                    for d in self.shape))

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __repr__(self) -> str:
        return type_str(self)


@dataclass(frozen=True)
class TupleType(Type):
    fields: tuple[Type, ...]

    def __repr__(self) -> str:
        return type_str(self)


@dataclass(frozen=True)
class SeqType(Type):
    """An ONNX sequence: a run-time list of values of one element type."""

    elem: Type

    def __repr__(self) -> str:
        return type_str(self)


@dataclass(frozen=True)
class OptionalType(Type):
    """An ONNX optional: a value of the element type, or none."""

    elem: Type

    def __repr__(self) -> str:
        return type_str(self)


@dataclass(frozen=True)
class FuncType(Type):
    params: tuple[Type, ...]
    ret: Type

    def __repr__(self) -> str:
        return type_str(self)


UNIT = TupleType(())


def dim_str(d: Dim) -> str:
    return d.name if isinstance(d, SizeVar) else str(d)


def type_str(t: Type) -> str:
    """Text form of a type, as the printer writes it and the parser reads it."""
    if isinstance(t, TensorType):
        if t.shape is None:
            return f"Tensor[*, {t.dtype}]"
        return f"Tensor[({', '.join(dim_str(d) for d in t.shape)}{',' if len(t.shape) == 1 else ''}), {t.dtype}]"
    if isinstance(t, TupleType):
        return "(" + ", ".join(type_str(f) for f in t.fields) + ("," if len(t.fields) == 1 else "") + ")"
    if isinstance(t, SeqType):
        return f"Seq[{type_str(t.elem)}]"
    if isinstance(t, OptionalType):
        return f"Optional[{type_str(t.elem)}]"
    if isinstance(t, FuncType):
        return f"fn({', '.join(type_str(p) for p in t.params)}) -> {type_str(t.ret)}"
    raise TypeError(t)


def dims_equal(a: Dim, b: Dim) -> bool:
    """True when two dims are known to be the same size."""
    return a == b and a != ANY


def join_dim(a: Dim, b: Dim) -> Dim:
    """The most precise dim that covers both (used where two branches meet)."""
    return a if a == b else ANY


def join(a: Type, b: Type) -> Type:
    """Least upper bound of two types (If branches, loop-carried values)."""
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype == b.dtype:
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return TensorType(None, a.dtype)
        return TensorType(tuple(join_dim(x, y) for x, y in zip(a.shape, b.shape)), a.dtype)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        return TupleType(tuple(join(x, y) for x, y in zip(a.fields, b.fields)))
    if isinstance(a, SeqType) and isinstance(b, SeqType):
        return SeqType(join(a.elem, b.elem))
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        return OptionalType(join(a.elem, b.elem))
    raise ValueError(f"types {a} and {b} do not agree")


def compatible(expected: Type, actual: Type) -> bool:
    """True when a value of type `actual` may flow where `expected` is declared."""
    if isinstance(expected, TensorType) and isinstance(actual, TensorType):
        if expected.dtype != actual.dtype:
            return False
        if expected.shape is None or actual.shape is None:
            return True
        if len(expected.shape) != len(actual.shape):
            return False
        return all(isinstance(e, SizeVar) or isinstance(a, SizeVar) or e == a
                   for e, a in zip(expected.shape, actual.shape))
    if isinstance(expected, TupleType) and isinstance(actual, TupleType):
        return len(expected.fields) == len(actual.fields) and all(
            compatible(e, a) for e, a in zip(expected.fields, actual.fields))
    if isinstance(expected, (SeqType, OptionalType)) and type(expected) is type(actual):
        return compatible(expected.elem, actual.elem)
    if isinstance(expected, FuncType) and isinstance(actual, FuncType):
        return len(expected.params) == len(actual.params) and compatible(expected.ret, actual.ret)
    return False
