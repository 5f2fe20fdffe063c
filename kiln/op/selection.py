"""Operators whose output shape depends on the data, or that select and reorder elements by value:
compress, non_zero, reverse_sequence, unique, top_k."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.registry import INJECTIVE, OPAQUE, define_op
from kiln.op.shape_rel import I64, check_rank, dim_product, index_input, index_vector, int_values, unify_dim
from kiln.op.typerel import norm_axis, shape_product, tensor


@dataclass(frozen=True)
class CompressAttrs:
    axis: int | None = None


def _compress_rel(attrs, types, values):
    x = tensor(types[0])
    index_vector(types[1], "condition", ("bool",))
    if attrs.axis is None:
        return TensorType((ANY,), x.dtype)
    if x.shape is None:
        return TensorType(None, x.dtype)
    axis = norm_axis(attrs.axis, len(x.shape))
    return TensorType(x.shape[:axis] + (ANY,) + x.shape[axis + 1:], x.dtype)


compress = define_op("tensor.compress", pattern=OPAQUE, inputs=2, attrs=CompressAttrs, infer=_compress_rel,
                     ref=lambda a, x, cond: np.compress(cond, x, axis=a.axis),
                     doc="Keep the slices along `axis` (or flattened elements) where condition is true.")


def _non_zero_ref(attrs, x):
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), I64)
    return np.array(np.nonzero(x), dtype=I64).reshape(x.ndim, -1)


def _non_zero_rel(attrs, types, values):
    rank = tensor(types[0]).ndim
    return TensorType((ANY if rank is None else rank, ANY), "int64")


non_zero = define_op("tensor.non_zero", pattern=OPAQUE, infer=_non_zero_rel, ref=_non_zero_ref,
                     doc="Coordinates of non-zero elements, one column per element, row-major.")


@dataclass(frozen=True)
class ReverseSequenceAttrs:
    batch_axis: int = 1
    time_axis: int = 0


def _reverse_sequence_rel(attrs, types, values):
    x = tensor(types[0])
    check_rank(x, 2)
    n = index_vector(types[1], "sequence_lens")
    if {attrs.batch_axis, attrs.time_axis} != {0, 1}:
        raise TypeInferenceError(f"batch_axis and time_axis must be 0 and 1 in some order, got "
                                 f"{attrs.batch_axis} and {attrs.time_axis}")
    if x.shape is not None and n is not None:
        unify_dim(x.shape[attrs.batch_axis], n, "batch dim and sequence_lens length")
    return x


def _reverse_sequence_ref(attrs, x, lens):
    out = x.copy()
    src = np.moveaxis(x, (attrs.batch_axis, attrs.time_axis), (0, 1))
    dst = np.moveaxis(out, (attrs.batch_axis, attrs.time_axis), (0, 1))
    for b, n in enumerate(lens.tolist()):
        dst[b, :n] = src[b, :n][::-1]
    return out


reverse_sequence = define_op(
    "tensor.reverse_sequence", pattern=INJECTIVE, inputs=2, attrs=ReverseSequenceAttrs,
    infer=_reverse_sequence_rel, ref=_reverse_sequence_ref,
    doc="Reverse the first sequence_lens[b] steps along time_axis of each batch entry b.")


@dataclass(frozen=True)
class UniqueAttrs:
    axis: int | None = None
    sorted: int = 1


def _unique_rel(attrs, types, values):
    x = tensor(types[0])
    vec = TensorType((ANY,), "int64")
    if attrs.axis is None:
        y, n = TensorType((ANY,), x.dtype), (ANY if x.shape is None else dim_product(x.shape))
    elif x.shape is None:
        y, n = TensorType(None, x.dtype), ANY
    else:
        axis = norm_axis(attrs.axis, len(x.shape))
        y, n = TensorType(x.shape[:axis] + (ANY,) + x.shape[axis + 1:], x.dtype), x.shape[axis]
    return TupleType((y, vec, TensorType((n,), "int64"), vec))


def _unique_ref(attrs, x):
    src = x.reshape(-1) if attrs.axis is None else x
    axis = 0 if attrs.axis is None else attrs.axis % x.ndim
    y, first, inverse, counts = np.unique(src, return_index=True, return_inverse=True, return_counts=True,
                                          axis=attrs.axis if attrs.axis is None else axis)
    inverse = inverse.reshape(-1)
    if not attrs.sorted:
        order = np.argsort(first, kind="stable")
        new_pos = np.empty_like(order)
        new_pos[order] = np.arange(len(order))
        y, first, counts, inverse = np.take(y, order, axis=axis), first[order], counts[order], new_pos[inverse]
    return y, first.astype(I64), inverse.astype(I64), counts.astype(I64)


unique = define_op("tensor.unique", pattern=OPAQUE, attrs=UniqueAttrs, infer=_unique_rel, ref=_unique_ref,
                   doc="Distinct elements (or slices along `axis`), sorted or in first-seen order, with "
                       "first indices, inverse indices and counts.")


@dataclass(frozen=True)
class TopKAttrs:
    axis: int = -1
    largest: int = 1
    sorted: int = 1


def _top_k_rel(attrs, types, values):
    x = tensor(types[0])
    k_type = index_input(types[1], "K", ("int64",))
    if k_type.shape is not None and shape_product(k_type.shape) not in (1, ANY):
        raise TypeInferenceError(f"K must hold one value, got shape {k_type.shape}")
    if x.shape is None:
        out = TensorType(None, x.dtype)
    else:
        axis = norm_axis(attrs.axis, len(x.shape))
        k: Dim = ANY if values[1] is None else int_values(values[1])[0]
        d = x.shape[axis]
        if isinstance(k, int) and (k < 0 or isinstance(d, int) and k > d):
            raise TypeInferenceError(f"K={k} out of range for a dim of size {d}")
        out = TensorType(x.shape[:axis] + (k,) + x.shape[axis + 1:], x.dtype)
    return TupleType((out, TensorType(out.shape, "int64")))


def _top_k_ref(attrs, x, k):
    """Ties keep the lower index first, for largest and smallest alike."""
    k, axis = int_values(k)[0], attrs.axis % x.ndim
    if attrs.largest:
        # stable ascending sort of the reversed axis, read backwards: descending, ties by index
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis), idx.astype(I64)


top_k = define_op("tensor.top_k", pattern=OPAQUE, inputs=2, attrs=TopKAttrs, infer=_top_k_rel, ref=_top_k_ref,
                  doc="The K largest (or smallest) elements along `axis`, sorted, with their int64 indices.")
