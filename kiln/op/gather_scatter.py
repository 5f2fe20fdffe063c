"""Operators that read or write elements at index tensors: gather, gather_elements, gather_nd,
scatter_elements, scatter_nd, tensor_scatter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import TensorType
from kiln.op.registry import INJECTIVE, OPAQUE, define_op
from kiln.op.shape_rel import I64, check_rank, index_input, index_vector, unify_dim
from kiln.op.typerel import norm_axis, same_dtype, tensor


@dataclass(frozen=True)
class GatherAttrs:
    axis: int = 0


def _gather_rel(attrs, types, values):
    x, idx = tensor(types[0]), index_input(types[1], "indices")
    if x.shape is None or idx.shape is None:
        return TensorType(None, x.dtype)
    check_rank(x, 1, "data")
    a = norm_axis(attrs.axis, len(x.shape))
    return TensorType(x.shape[:a] + idx.shape + x.shape[a + 1:], x.dtype)


gather = define_op("tensor.gather", pattern=INJECTIVE, inputs=2, attrs=GatherAttrs, infer=_gather_rel,
                   ref=lambda a, x, idx: np.take(x, idx, axis=a.axis),
                   doc="Pick slices along `axis` by index (negative indices count from the end).")


def _elements_rel(attrs, types, values):
    x, idx = tensor(types[0]), index_input(types[1], "indices")
    if x.shape is not None and idx.shape is not None and len(x.shape) != len(idx.shape):
        raise TypeInferenceError(f"data {x.shape} and indices {idx.shape} must have the same rank")
    rank = x.ndim if x.ndim is not None else idx.ndim
    if rank is not None:
        norm_axis(attrs.axis, rank)
    return x, idx


def _gather_elements_rel(attrs, types, values):
    x, idx = _elements_rel(attrs, types, values)
    return TensorType(idx.shape, x.dtype)


def _along_axis(idx: np.ndarray, axis: int) -> tuple:
    """Full index tuple that reads position idx[i] on `axis` and i elsewhere."""
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


gather_elements = define_op(
    "tensor.gather_elements", pattern=INJECTIVE, inputs=2, attrs=GatherAttrs, infer=_gather_elements_rel,
    ref=lambda a, x, idx: x[_along_axis(idx, a.axis % x.ndim)],
    doc="out[i] = data[i with i[axis] replaced by indices[i]]; output has the indices' shape.")


@dataclass(frozen=True)
class GatherNDAttrs:
    batch_dims: int = 0


def _gather_nd_rel(attrs, types, values):
    x, idx = tensor(types[0]), index_input(types[1], "indices", ("int64",))
    b = attrs.batch_dims
    if x.shape is None or idx.shape is None:
        return TensorType(None, x.dtype)
    if b < 0 or b >= min(len(x.shape), len(idx.shape)):
        raise TypeInferenceError(f"batch_dims {b} needs data {x.shape} and indices {idx.shape} of higher rank")
    k = idx.shape[-1]
    if not isinstance(k, int):
        return TensorType(None, x.dtype)  # the index depth decides the rank
    if k > len(x.shape) - b:
        raise TypeInferenceError(f"indices' last dim {k} exceeds data rank {len(x.shape)} minus batch_dims {b}")
    for i in range(b):
        unify_dim(x.shape[i], idx.shape[i], f"batch dim {i}")
    return TensorType(idx.shape[:-1] + x.shape[b + k:], x.dtype)


def _gather_nd_ref(attrs, x, idx):
    b, k = attrs.batch_dims, idx.shape[-1]
    batch = math.prod(x.shape[:b])
    xs = x.reshape((batch,) + x.shape[b:])
    ids = idx.reshape((batch, math.prod(idx.shape[b:-1]), k))
    picked = xs[(np.arange(batch)[:, None],) + tuple(ids[..., j] for j in range(k))]
    return picked.reshape(idx.shape[:-1] + x.shape[b + k:])


gather_nd = define_op("tensor.gather_nd", pattern=INJECTIVE, inputs=2, attrs=GatherNDAttrs,
                      infer=_gather_nd_rel, ref=_gather_nd_ref,
                      doc="Gather slices addressed by the last dim of `indices`, after `batch_dims` shared dims.")


_REDUCERS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _check_reduction(reduction: str) -> None:
    if reduction != "none" and reduction not in _REDUCERS:
        raise TypeInferenceError(f"reduction must be none, add, mul, max or min; got {reduction!r}")


def _scatter_into(data: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    """A copy of data with updates written (or combined by `reduction`) at `where`."""
    out = data.copy()
    if reduction == "none":
        out[where] = updates
    else:
        _REDUCERS[reduction].at(out, where, updates)
    return out


@dataclass(frozen=True)
class ScatterElementsAttrs:
    axis: int = 0
    reduction: str = "none"


def _scatter_elements_rel(attrs, types, values):
    _check_reduction(attrs.reduction)
    x, idx = _elements_rel(attrs, types, values)
    upd = tensor(types[2], "updates")
    same_dtype([x, upd], "data and updates")
    if idx.shape is not None and upd.shape is not None:
        if len(idx.shape) != len(upd.shape):
            raise TypeInferenceError(f"indices {idx.shape} and updates {upd.shape} differ in rank")
        for i, j in zip(idx.shape, upd.shape):
            unify_dim(i, j, "indices and updates")
    return x


scatter_elements = define_op(
    "tensor.scatter_elements", pattern=OPAQUE, inputs=3, attrs=ScatterElementsAttrs,
    infer=_scatter_elements_rel,
    ref=lambda a, x, idx, upd: _scatter_into(x, _along_axis(idx, a.axis % x.ndim), upd, a.reduction),
    doc="Copy of data with data[i with i[axis] = indices[i]] set to (or reduced with) updates[i].")


@dataclass(frozen=True)
class ScatterNDAttrs:
    reduction: str = "none"


def _scatter_nd_rel(attrs, types, values):
    _check_reduction(attrs.reduction)
    x, idx = tensor(types[0]), index_input(types[1], "indices", ("int64",))
    upd = tensor(types[2], "updates")
    same_dtype([x, upd], "data and updates")
    if x.shape is not None and idx.shape is not None and upd.shape is not None and idx.shape:
        k = idx.shape[-1]
        if isinstance(k, int):
            if k > len(x.shape):
                raise TypeInferenceError(f"indices' last dim {k} exceeds data rank {len(x.shape)}")
            want = idx.shape[:-1] + x.shape[k:]
            if len(want) != len(upd.shape):
                raise TypeInferenceError(f"updates must have shape {want}, got {upd.shape}")
            for w, u in zip(want, upd.shape):
                unify_dim(w, u, "updates")
    return x


def _scatter_nd_ref(attrs, x, idx, upd):
    where = tuple(idx[..., j] for j in range(idx.shape[-1]))
    return _scatter_into(x, where, upd, attrs.reduction)


scatter_nd = define_op("tensor.scatter_nd", pattern=OPAQUE, inputs=3, attrs=ScatterNDAttrs,
                       infer=_scatter_nd_rel, ref=_scatter_nd_ref,
                       doc="Copy of data with the slices addressed by `indices` set to (or reduced with) updates.")


@dataclass(frozen=True)
class TensorScatterAttrs:
    axis: int = -2
    mode: str = "linear"


def _tensor_scatter_rel(attrs, types, values):
    cache, upd = tensor(types[0], "past_cache"), tensor(types[1], "update")
    same_dtype([cache, upd], "past_cache and update")
    if attrs.mode not in ("linear", "circular"):
        raise TypeInferenceError(f"mode must be linear or circular, got {attrs.mode!r}")
    if cache.shape is not None:
        check_rank(cache, 2, "past_cache")
        axis = norm_axis(attrs.axis, len(cache.shape))
        if axis == 0:
            raise TypeInferenceError("axis may not be the batch axis 0")
        if upd.shape is not None:
            if len(upd.shape) != len(cache.shape):
                raise TypeInferenceError(f"update {upd.shape} and past_cache {cache.shape} differ in rank")
            for i, (c, u) in enumerate(zip(cache.shape, upd.shape)):
                if i != axis:
                    unify_dim(c, u, f"dim {i} of update and past_cache")
    if len(types) > 2 and types[2] is not None:
        index_vector(types[2], "write_indices")
    return cache


def _tensor_scatter_ref(attrs, cache, upd, write_indices=None):
    axis = attrs.axis % cache.ndim
    out = cache.copy()
    starts = np.zeros(cache.shape[0], I64) if write_indices is None else write_indices
    length, size = upd.shape[axis], cache.shape[axis]
    for b, start in enumerate(starts.tolist()):
        pos = start + np.arange(length)
        if attrs.mode == "circular":
            pos %= size
        np.moveaxis(out[b], axis - 1, 0)[pos] = np.moveaxis(upd[b], axis - 1, 0)
    return out


tensor_scatter = define_op(
    "tensor.tensor_scatter", pattern=OPAQUE, inputs=(2, 3), attrs=TensorScatterAttrs,
    infer=_tensor_scatter_rel, ref=_tensor_scatter_ref,
    doc="KV-cache update: write `update` into the cache along `axis` from each batch's write index.")
