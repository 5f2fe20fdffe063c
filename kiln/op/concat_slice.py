"""Operators that join tensors or cut them along axes: concat, split, slice.

Split sizes and slice bounds are inputs (latest ONNX opset); type relations read them only when they
are Constants, else the dims they decide are ANY.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.registry import INJECTIVE, define_op
from kiln.op.shape_rel import INDEX, index_vector, int_values, norm_axes, padded, unify_dim
from kiln.op.typerel import norm_axis, same_dtype, tensor


@dataclass(frozen=True)
class ConcatAttrs:
    axis: int


def _concat_rel(attrs, types, values):
    ts = [tensor(t) for t in types]
    dtype = same_dtype(ts)
    shapes = [t.shape for t in ts if t.shape is not None]
    if not shapes:
        return TensorType(None, dtype)
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise TypeInferenceError(f"inputs have different ranks: {shapes}")
    if rank == 0:
        raise TypeInferenceError("cannot concatenate scalars")
    axis = norm_axis(attrs.axis, rank)
    out: list[Dim] = list(shapes[0])
    for s in shapes[1:]:
        for i, d in enumerate(s):
            if i != axis:
                out[i] = unify_dim(out[i], d, f"dim {i}")
    total = [t.shape[axis] if t.shape is not None else ANY for t in ts]
    out[axis] = _dim_sum(total)
    return TensorType(tuple(out), dtype)


def _dim_sum(dims: Sequence[Dim]) -> Dim:
    """Sum of dims: an int, the single symbolic dim when the rest are 0, else ANY."""
    syms = [d for d in dims if not isinstance(d, int)]
    n = sum(d for d in dims if isinstance(d, int))
    if not syms:
        return n
    return syms[0] if len(syms) == 1 and n == 0 else ANY


concat = define_op("tensor.concat", pattern=INJECTIVE, inputs=(1, None), attrs=ConcatAttrs,
                   infer=_concat_rel, ref=lambda a, *xs: np.concatenate(xs, axis=a.axis),
                   doc="Join tensors along `axis`; other dims must agree.")


@dataclass(frozen=True)
class SplitAttrs:
    axis: int = 0
    num_outputs: int | None = None


def even_split(d: Dim, n: int) -> list[Dim]:
    """Opset-18 split into n parts of ceil(d / n), the last one smaller."""
    if n < 1:
        raise TypeInferenceError(f"num_outputs must be >= 1, got {n}")
    if not isinstance(d, int):
        return [ANY] * n
    chunk = -(-d // n)
    last = d - chunk * (n - 1)
    if last < 0:
        raise TypeInferenceError(f"dim {d} cannot be split into {n} parts of {chunk}")
    return [chunk] * (n - 1) + [last]


def _split_sizes(attrs, types, values, d: Dim) -> list[Dim]:
    if types[1] is None:
        if attrs.num_outputs is None:
            raise TypeInferenceError("needs a `split` input or the num_outputs attribute")
        return even_split(d, attrs.num_outputs)
    if attrs.num_outputs is not None:
        raise TypeInferenceError("takes a `split` input or num_outputs, not both")
    n = index_vector(types[1], "split")
    sizes = int_values(values[1])
    if sizes is None:
        if n is None:
            raise TypeInferenceError("the length of a non-constant `split` must be static")
        return [ANY] * n
    if any(s < 0 for s in sizes) or (isinstance(d, int) and sum(sizes) != d):
        raise TypeInferenceError(f"split {sizes} does not partition a dim of size {d}")
    return list(sizes)


def _split_rel(attrs, types, values):
    x = tensor(types[0])
    rank = None if x.shape is None else len(x.shape)
    axis = norm_axis(attrs.axis, rank)
    d = ANY if x.shape is None else x.shape[axis]
    sizes = _split_sizes(attrs, padded(types, 2), padded(values, 2), d)
    if x.shape is None:
        return TupleType(tuple(TensorType(None, x.dtype) for _ in sizes))
    return TupleType(tuple(TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes))


def _split_ref(attrs, x, split=None):
    axis = attrs.axis % x.ndim
    if split is None:
        sizes = even_split(x.shape[axis], attrs.num_outputs)
    else:
        sizes = [int(s) for s in split]
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


split = define_op("tensor.split", pattern=INJECTIVE, inputs=(1, 2), attrs=SplitAttrs, infer=_split_rel,
                  ref=_split_ref, doc="Cut along `axis` by the `split` sizes, or into num_outputs parts.")



# Slice bounds at or beyond this mean "to the end" even on a symbolic dim.
_OPEN_END = 2**31 - 1


def slice_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX Slice clamping of (start, end) on a dim of known size."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _covers_dim(start: int, end: int, step: int) -> bool:
    """True when a slice takes a whole dim whatever its size (open bounds, unit step)."""
    if step == 1:
        return (start == 0 or start <= -_OPEN_END) and end >= _OPEN_END
    if step == -1:
        return (start == -1 or start >= _OPEN_END) and end <= -_OPEN_END
    return False


def _slice_dim(d: Dim, start: int, end: int, step: int) -> Dim:
    if isinstance(d, int):
        s, e = slice_bounds(start, end, step, d)
        return len(range(s, e, step))
    return d if _covers_dim(start, end, step) else ANY


def _slice_rel(attrs, types, values):
    x = tensor(types[0])
    t, v = padded(types, 5), padded(values, 5)
    n = index_vector(t[1], "starts", INDEX)
    index_vector(t[2], "ends", INDEX)
    for i, what in ((3, "axes"), (4, "steps")):
        if t[i] is not None:
            index_vector(t[i], what, INDEX)
    if x.shape is None:
        return TensorType(None, x.dtype)
    rank = len(x.shape)
    axes = (None if n is None else tuple(range(n))) if t[3] is None else int_values(v[3])
    if axes is None:
        return TensorType((ANY,) * rank, x.dtype)
    axes = norm_axes(axes, rank)
    starts, ends = int_values(v[1]), int_values(v[2])
    steps = (1,) * len(axes) if t[4] is None else int_values(v[4])
    if starts is None or ends is None or steps is None:
        return TensorType(tuple(ANY if i in axes else d for i, d in enumerate(x.shape)), x.dtype)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise TypeInferenceError(f"starts/ends/axes/steps lengths differ: {starts}, {ends}, {axes}, {steps}")
    if 0 in steps:
        raise TypeInferenceError("steps may not be 0")
    dims = list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        dims[a] = _slice_dim(dims[a], s, e, st)
    return TensorType(tuple(dims), x.dtype)


def _slice_ref(attrs, x, starts, ends, axes=None, steps=None):
    starts, ends = int_values(starts), int_values(ends)
    axes = range(len(starts)) if axes is None else int_values(axes)
    steps = (1,) * len(starts) if steps is None else int_values(steps)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        a %= x.ndim
        s, e = slice_bounds(s, e, st, x.shape[a])
        index[a] = slice(s, e if e >= 0 else None, st)
    return x[tuple(index)]


slice_ = define_op("tensor.slice", pattern=INJECTIVE, inputs=(3, 5), infer=_slice_rel, ref=_slice_ref,
                   doc="Strided window [starts, ends) with steps on `axes`, bounds clamped as ONNX does.")
