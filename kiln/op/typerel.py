"""Shared pieces of type relations: broadcasting with symbolic dims, axis handling, checks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, SizeVar, TensorType, Type


def tensor(t: Type | None, what: str = "input") -> TensorType:
    if not isinstance(t, TensorType):
        raise TypeInferenceError(f"{what} must be a tensor, got {t}")
    return t


def check_dtype(t: TensorType, allowed: Iterable[str], what: str = "input") -> None:
    allowed = tuple(allowed)
    if t.dtype not in allowed:
        raise TypeInferenceError(f"{what} has dtype {t.dtype}; expected one of {', '.join(allowed)}")


def same_dtype(types: Sequence[TensorType], what: str = "inputs") -> str:
    dts = {t.dtype for t in types}
    if len(dts) != 1:
        raise TypeInferenceError(f"{what} must share one dtype, got {', '.join(sorted(dts))}")
    return dts.pop()


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    if a == 1:
        return b
    if b == 1:
        return a
    if a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise TypeInferenceError(f"dims {a} and {b} do not broadcast")
    if isinstance(a, SizeVar) and a != ANY and isinstance(b, int):
        return b  # a symbolic dim broadcast against n must be n (or 1)
    if isinstance(b, SizeVar) and b != ANY and isinstance(a, int):
        return a
    return ANY


def broadcast_shapes(*shapes: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """numpy-style multidirectional broadcasting; None (unknown rank) is contagious."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        padded = (1,) * (rank - len(s)) + tuple(s)
        for i, d in enumerate(padded):
            try:
                out[i] = broadcast_dim(out[i], d)
            except TypeInferenceError:
                raise TypeInferenceError(
                    f"shapes {' and '.join(str(tuple(x)) for x in shapes)} do not broadcast") from None
    return tuple(out)


def norm_axis(axis: int, rank: int | None, what: str = "axis") -> int:
    if rank is None:
        return axis
    if not -rank <= axis < max(rank, 1):
        raise TypeInferenceError(f"{what} {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def same_as_input(attrs, types, values) -> Type:
    """Relation of unary ops whose output has the input's type."""
    return tensor(types[0])


def broadcast_rel(attrs, types, values) -> TensorType:
    """Relation of n-ary broadcasting ops whose output dtype is the common input dtype."""
    ts = [tensor(t) for t in types]
    return TensorType(broadcast_shapes(*(t.shape for t in ts)), same_dtype(ts))


def shape_product(shape: Sequence[Dim]) -> Dim:
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return ANY
        n *= d
    return n


def unknown_shape(rank: int | None) -> tuple[Dim, ...] | None:
    return None if rank is None else (ANY,) * rank
