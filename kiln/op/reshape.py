"""Operators that change the shape or axis order of a tensor, not its elements: reshape, flatten,
transpose, squeeze, unsqueeze.

Shape-deciding operands (shape, axes) are inputs, as in the latest ONNX opset. Type relations read
them only when they are Constants; otherwise the dims they decide are ANY (and the rank is unknown
when even their length is unknown).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, SizeVar, TensorType
from kiln.op.registry import INJECTIVE, define_op
from kiln.op.shape_rel import dim_product, index_vector, int_values, norm_axes, padded
from kiln.op.typerel import tensor, unknown_shape


@dataclass(frozen=True)
class ReshapeAttrs:
    allowzero: int = 0


def _quotient(num: Sequence[Dim] | None, den: Sequence[Dim]) -> Dim:
    """prod(num) / prod(den), cancelling equal symbolic dims: the dim a -1 in Reshape stands for."""
    if num is None or ANY in num or ANY in den:
        return ANY
    syms = Counter(d for d in num if isinstance(d, SizeVar))
    syms.subtract(d for d in den if isinstance(d, SizeVar))
    if any(c < 0 for c in syms.values()):
        return ANY
    left = [s for s, c in syms.items() for _ in range(c)]
    n = math.prod(d for d in num if isinstance(d, int))
    m = math.prod(d for d in den if isinstance(d, int))
    if m == 0 or n % m:
        if left:
            return ANY
        raise TypeInferenceError(f"cannot infer -1: {n} elements do not split into parts of {m}")
    if not left:
        return n // m
    return left[0] if len(left) == 1 and n == m else ANY


def reshape_dims(src: tuple[Dim, ...] | None, target: Sequence[int], allowzero: int) -> tuple[Dim, ...]:
    """Output dims of Reshape with a constant target: 0 copies an input dim, -1 is inferred."""
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise TypeInferenceError(f"shape {tuple(target)} has more than one -1 or a dim below -1")
    if allowzero and 0 in target and -1 in target:
        raise TypeInferenceError("with allowzero=1 the shape may not hold both 0 and -1")
    dims: list[Dim] = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if src is not None and i >= len(src):
                raise TypeInferenceError(f"shape {tuple(target)} copies dim {i} of a rank-{len(src)} input")
            dims.append(ANY if src is None else src[i])
        else:
            dims.append(d)
    if -1 in target:
        i = target.index(-1)
        dims[i] = _quotient(src, dims[:i] + dims[i + 1:])
    elif src is not None and all(isinstance(d, int) for d in src) and math.prod(src) != math.prod(dims):
        raise TypeInferenceError(f"cannot reshape {tuple(src)} to {tuple(target)}")
    return tuple(dims)


def _reshape_rel(attrs, types, values):
    x = tensor(types[0])
    n = index_vector(types[1], "shape")
    target = int_values(values[1])
    if target is None:
        return TensorType(unknown_shape(n), x.dtype)
    return TensorType(reshape_dims(x.shape, target, attrs.allowzero), x.dtype)


def _reshape_ref(attrs, x, shape):
    target = [x.shape[i] if d == 0 and not attrs.allowzero else d for i, d in enumerate(shape.tolist())]
    return x.reshape(target)


reshape = define_op("tensor.reshape", pattern=INJECTIVE, inputs=2, attrs=ReshapeAttrs,
                    infer=_reshape_rel, ref=_reshape_ref,
                    doc="Same elements in a new shape; 0 copies the input dim (unless allowzero), -1 is inferred.")


@dataclass(frozen=True)
class FlattenAttrs:
    axis: int = 1


def _flatten_rel(attrs, types, values):
    x = tensor(types[0])
    if x.shape is None:
        return TensorType((ANY, ANY), x.dtype)
    a = _flatten_axis(attrs.axis, len(x.shape))
    return TensorType((dim_product(x.shape[:a]), dim_product(x.shape[a:])), x.dtype)


def _flatten_axis(axis: int, rank: int) -> int:
    if not -rank <= axis <= rank:
        raise TypeInferenceError(f"axis {axis} out of range [-{rank}, {rank}]")
    return axis + rank if axis < 0 else axis


def _flatten_ref(attrs, x):
    a = _flatten_axis(attrs.axis, x.ndim)
    return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))


flatten = define_op("tensor.flatten", pattern=INJECTIVE, attrs=FlattenAttrs, infer=_flatten_rel,
                    ref=_flatten_ref, doc="2-D view: dims before `axis` times dims from `axis` on.")


@dataclass(frozen=True)
class TransposeAttrs:
    perm: tuple[int, ...] | None = None


def transpose_perm(perm: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    if perm is None:
        return tuple(range(rank))[::-1]
    if sorted(perm) != list(range(rank)):
        raise TypeInferenceError(f"perm {perm} is not a permutation of the {rank} axes")
    return tuple(perm)


def _transpose_rel(attrs, types, values):
    x = tensor(types[0])
    if x.shape is None:
        return TensorType(unknown_shape(None if attrs.perm is None else len(attrs.perm)), x.dtype)
    return TensorType(tuple(x.shape[p] for p in transpose_perm(attrs.perm, len(x.shape))), x.dtype)


transpose = define_op("tensor.transpose", pattern=INJECTIVE, attrs=TransposeAttrs, infer=_transpose_rel,
                      ref=lambda a, x: np.transpose(x, transpose_perm(a.perm, x.ndim)),
                      doc="Permute axes (default: reverse them).")


def _squeeze_rel(attrs, types, values):
    x = tensor(types[0])
    types, values = padded(types, 2), padded(values, 2)
    if types[1] is None:
        if x.shape is None or not all(isinstance(d, int) for d in x.shape):
            return TensorType(None, x.dtype)  # a symbolic dim may or may not be 1
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    n = index_vector(types[1], "axes")
    axes = int_values(values[1])
    if axes is None or x.shape is None:
        rank = None if x.shape is None or n is None else len(x.shape) - n
        return TensorType(unknown_shape(rank), x.dtype)
    axes = norm_axes(axes, len(x.shape))
    for a in axes:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            raise TypeInferenceError(f"cannot squeeze axis {a} of size {x.shape[a]}")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


def _squeeze_ref(attrs, x, axes=None):
    return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(int(a) for a in axes.reshape(-1)))


squeeze = define_op("tensor.squeeze", pattern=INJECTIVE, inputs=(1, 2), infer=_squeeze_rel, ref=_squeeze_ref,
                    doc="Drop size-1 axes (the listed ones, or all).")


def _unsqueeze_rel(attrs, types, values):
    x = tensor(types[0])
    n = index_vector(types[1], "axes")
    axes = int_values(values[1])
    if axes is None or x.shape is None:
        rank = None if x.shape is None or n is None else len(x.shape) + n
        return TensorType(unknown_shape(rank), x.dtype)
    rank = len(x.shape) + len(axes)
    axes = norm_axes(axes, rank)
    rest = iter(x.shape)
    return TensorType(tuple(1 if i in axes else next(rest) for i in range(rank)), x.dtype)


unsqueeze = define_op("tensor.unsqueeze", pattern=INJECTIVE, inputs=2, infer=_unsqueeze_rel,
                      ref=lambda a, x, axes: np.expand_dims(x, tuple(int(i) for i in axes.reshape(-1))),
                      doc="Insert size-1 axes at the listed output positions.")
