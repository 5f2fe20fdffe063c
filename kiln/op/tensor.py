"""Tensor operators: shape and layout changes, indexing, gather/scatter, creation.

Shape-deciding operands (shape, axes, pads, repeats, K, ...) are inputs, as in the latest ONNX
opset. Type relations read them only when they are Constants; otherwise the dims they decide are
ANY (and the rank is unknown when even their length is unknown).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, SizeVar, TensorType, TupleType
from kiln.op.registry import BROADCAST, INJECTIVE, OPAQUE, define_op
from kiln.op.typerel import broadcast_shapes, check_dtype, norm_axis, same_dtype, shape_product, tensor, unknown_shape

INDEX = ("int32", "int64")
I64 = np.int64

# ---------------------------------------------------------------------------------------------
# shared helpers


def _ints(v: np.ndarray | None) -> tuple[int, ...] | None:
    """A constant integer input (scalar or 1-D) as Python ints; None when not a constant."""
    return None if v is None else tuple(int(x) for x in np.asarray(v).reshape(-1))


def _padded(items: list, n: int) -> list:
    """Argument types/values padded with None to n entries (trailing omitted inputs are dropped)."""
    return list(items) + [None] * (n - len(items))


def _index_input(t, what: str, dtypes: Sequence[str] = INDEX) -> TensorType:
    t = tensor(t, what)
    check_dtype(t, dtypes, what)
    return t


def _vector(t, what: str, dtypes: Sequence[str] = ("int64",)) -> int | None:
    """Check a 1-D integer input (axes, pads, shape...) and return its static length, if known.
    A scalar counts as one element, as onnxruntime accepts it."""
    t = _index_input(t, what, dtypes)
    if t.shape is None:
        return None
    if len(t.shape) == 0:
        return 1
    if len(t.shape) != 1:
        raise TypeInferenceError(f"{what} must be 1-D, got shape {t.shape}")
    return t.shape[0] if isinstance(t.shape[0], int) else None


def _rank(t: TensorType, lo: int, what: str = "input") -> None:
    if t.shape is not None and len(t.shape) < lo:
        raise TypeInferenceError(f"{what} must have rank >= {lo}, got shape {t.shape}")


def _norm_axes(axes: Sequence[int], rank: int | None, what: str = "axes") -> tuple[int, ...]:
    out = tuple(norm_axis(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise TypeInferenceError(f"{what} {tuple(axes)} name an axis twice")
    return out


def _mul_dim(d: Dim, k: int) -> Dim:
    """d * k for a dim and a constant factor."""
    if isinstance(d, int):
        return d * k
    if k == 0:
        return 0
    return d if k == 1 else ANY


def _div_dim(d: Dim, k: int, what: str) -> Dim:
    """d / k where k must divide d."""
    if not isinstance(d, int):
        return d if k == 1 else ANY
    if k <= 0 or d % k:
        raise TypeInferenceError(f"{what}: dim {d} is not divisible by {k}")
    return d // k


def _dim_product(dims: Sequence[Dim]) -> Dim:
    """Product of dims: an int, the single symbolic dim when the rest multiply to 1, else ANY."""
    syms = [d for d in dims if not isinstance(d, int)]
    n = math.prod(d for d in dims if isinstance(d, int))
    if not syms or n == 0:
        return n
    return syms[0] if len(syms) == 1 and n == 1 else ANY


def _unify(a: Dim, b: Dim, what: str) -> Dim:
    """Two dims that must be equal: the more precise of them."""
    if isinstance(a, int) and isinstance(b, int):
        if a != b:
            raise TypeInferenceError(f"{what}: dims {a} and {b} differ")
        return a
    if isinstance(b, int) or a == ANY:
        return b
    return a


def _zero(dtype: np.dtype):
    return "" if dtype == np.dtype(object) else np.zeros((), dtype)[()]


# ---------------------------------------------------------------------------------------------
# reshape family


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
    n = _vector(types[1], "shape")
    target = _ints(values[1])
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
    return TensorType((_dim_product(x.shape[:a]), _dim_product(x.shape[a:])), x.dtype)


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


def _perm(perm: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    if perm is None:
        return tuple(range(rank))[::-1]
    if sorted(perm) != list(range(rank)):
        raise TypeInferenceError(f"perm {perm} is not a permutation of the {rank} axes")
    return tuple(perm)


def _transpose_rel(attrs, types, values):
    x = tensor(types[0])
    if x.shape is None:
        return TensorType(unknown_shape(None if attrs.perm is None else len(attrs.perm)), x.dtype)
    return TensorType(tuple(x.shape[p] for p in _perm(attrs.perm, len(x.shape))), x.dtype)


transpose = define_op("tensor.transpose", pattern=INJECTIVE, attrs=TransposeAttrs, infer=_transpose_rel,
                      ref=lambda a, x: np.transpose(x, _perm(a.perm, x.ndim)),
                      doc="Permute axes (default: reverse them).")


def _squeeze_rel(attrs, types, values):
    x = tensor(types[0])
    types, values = _padded(types, 2), _padded(values, 2)
    if types[1] is None:
        if x.shape is None or not all(isinstance(d, int) for d in x.shape):
            return TensorType(None, x.dtype)  # a symbolic dim may or may not be 1
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    n = _vector(types[1], "axes")
    axes = _ints(values[1])
    if axes is None or x.shape is None:
        rank = None if x.shape is None or n is None else len(x.shape) - n
        return TensorType(unknown_shape(rank), x.dtype)
    axes = _norm_axes(axes, len(x.shape))
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
    n = _vector(types[1], "axes")
    axes = _ints(values[1])
    if axes is None or x.shape is None:
        rank = None if x.shape is None or n is None else len(x.shape) + n
        return TensorType(unknown_shape(rank), x.dtype)
    rank = len(x.shape) + len(axes)
    axes = _norm_axes(axes, rank)
    rest = iter(x.shape)
    return TensorType(tuple(1 if i in axes else next(rest) for i in range(rank)), x.dtype)


unsqueeze = define_op("tensor.unsqueeze", pattern=INJECTIVE, inputs=2, infer=_unsqueeze_rel,
                      ref=lambda a, x, axes: np.expand_dims(x, tuple(int(i) for i in axes.reshape(-1))),
                      doc="Insert size-1 axes at the listed output positions.")


# ---------------------------------------------------------------------------------------------
# concat / split / slice


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
                out[i] = _unify(out[i], d, f"dim {i}")
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


def _even_split(d: Dim, n: int) -> list[Dim]:
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
        return _even_split(d, attrs.num_outputs)
    if attrs.num_outputs is not None:
        raise TypeInferenceError("takes a `split` input or num_outputs, not both")
    n = _vector(types[1], "split")
    sizes = _ints(values[1])
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
    sizes = _split_sizes(attrs, _padded(types, 2), _padded(values, 2), d)
    if x.shape is None:
        return TupleType(tuple(TensorType(None, x.dtype) for _ in sizes))
    return TupleType(tuple(TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes))


def _split_ref(attrs, x, split=None):
    axis = attrs.axis % x.ndim
    if split is None:
        sizes = _even_split(x.shape[axis], attrs.num_outputs)
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
    t, v = _padded(types, 5), _padded(values, 5)
    n = _vector(t[1], "starts", INDEX)
    _vector(t[2], "ends", INDEX)
    for i, what in ((3, "axes"), (4, "steps")):
        if t[i] is not None:
            _vector(t[i], what, INDEX)
    if x.shape is None:
        return TensorType(None, x.dtype)
    rank = len(x.shape)
    axes = (None if n is None else tuple(range(n))) if t[3] is None else _ints(v[3])
    if axes is None:
        return TensorType((ANY,) * rank, x.dtype)
    axes = _norm_axes(axes, rank)
    starts, ends = _ints(v[1]), _ints(v[2])
    steps = (1,) * len(axes) if t[4] is None else _ints(v[4])
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
    starts, ends = _ints(starts), _ints(ends)
    axes = range(len(starts)) if axes is None else _ints(axes)
    steps = (1,) * len(starts) if steps is None else _ints(steps)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        a %= x.ndim
        s, e = slice_bounds(s, e, st, x.shape[a])
        index[a] = slice(s, e if e >= 0 else None, st)
    return x[tuple(index)]


slice_ = define_op("tensor.slice", pattern=INJECTIVE, inputs=(3, 5), infer=_slice_rel, ref=_slice_ref,
                   doc="Strided window [starts, ends) with steps on `axes`, bounds clamped as ONNX does.")


# ---------------------------------------------------------------------------------------------
# gather / scatter


@dataclass(frozen=True)
class GatherAttrs:
    axis: int = 0


def _gather_rel(attrs, types, values):
    x, idx = tensor(types[0]), _index_input(types[1], "indices")
    if x.shape is None or idx.shape is None:
        return TensorType(None, x.dtype)
    _rank(x, 1, "data")
    a = norm_axis(attrs.axis, len(x.shape))
    return TensorType(x.shape[:a] + idx.shape + x.shape[a + 1:], x.dtype)


gather = define_op("tensor.gather", pattern=INJECTIVE, inputs=2, attrs=GatherAttrs, infer=_gather_rel,
                   ref=lambda a, x, idx: np.take(x, idx, axis=a.axis),
                   doc="Pick slices along `axis` by index (negative indices count from the end).")


def _elements_rel(attrs, types, values):
    x, idx = tensor(types[0]), _index_input(types[1], "indices")
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
    x, idx = tensor(types[0]), _index_input(types[1], "indices", ("int64",))
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
        _unify(x.shape[i], idx.shape[i], f"batch dim {i}")
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
            _unify(i, j, "indices and updates")
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
    x, idx = tensor(types[0]), _index_input(types[1], "indices", ("int64",))
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
                _unify(w, u, "updates")
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
        _rank(cache, 2, "past_cache")
        axis = norm_axis(attrs.axis, len(cache.shape))
        if axis == 0:
            raise TypeInferenceError("axis may not be the batch axis 0")
        if upd.shape is not None:
            if len(upd.shape) != len(cache.shape):
                raise TypeInferenceError(f"update {upd.shape} and past_cache {cache.shape} differ in rank")
            for i, (c, u) in enumerate(zip(cache.shape, upd.shape)):
                if i != axis:
                    _unify(c, u, f"dim {i} of update and past_cache")
    if len(types) > 2 and types[2] is not None:
        _vector(types[2], "write_indices")
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


# ---------------------------------------------------------------------------------------------
# expand / tile / pad / crop / depth-space


def _expand_rel(attrs, types, values):
    x = tensor(types[0])
    n = _vector(types[1], "shape")
    target = _ints(values[1])
    if target is None:
        rank = None if x.shape is None or n is None else max(len(x.shape), n)
        return TensorType(unknown_shape(rank), x.dtype)
    return TensorType(broadcast_shapes(x.shape, target), x.dtype)


def _expand_ref(attrs, x, shape):
    return np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(_ints(shape)))))


expand = define_op("tensor.expand", pattern=BROADCAST, inputs=2, infer=_expand_rel, ref=_expand_ref,
                   doc="Broadcast the input against `shape` (numpy rules; 1s in `shape` keep the input dim).")


def _tile_rel(attrs, types, values):
    x = tensor(types[0])
    n = _vector(types[1], "repeats")
    reps = _ints(values[1])
    if x.shape is not None and n is not None and n != len(x.shape):
        raise TypeInferenceError(f"repeats has {n} entries for a rank-{len(x.shape)} input")
    if reps is None or x.shape is None:
        return TensorType(unknown_shape(x.ndim if x.ndim is not None else n), x.dtype)
    if any(r < 0 for r in reps):
        raise TypeInferenceError(f"repeats {reps} must be >= 0")
    return TensorType(tuple(_mul_dim(d, r) for d, r in zip(x.shape, reps)), x.dtype)


tile = define_op("tensor.tile", pattern=INJECTIVE, inputs=2, infer=_tile_rel,
                 ref=lambda a, x, reps: np.tile(x, _ints(reps)),
                 doc="Repeat the input repeats[i] times along each axis i.")


@dataclass(frozen=True)
class PadAttrs:
    mode: str = "constant"


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_rel(attrs, types, values):
    x = tensor(types[0])
    t, v = _padded(types, 4), _padded(values, 4)
    if attrs.mode not in _PAD_MODES:
        raise TypeInferenceError(f"mode must be one of {', '.join(_PAD_MODES)}; got {attrs.mode!r}")
    _vector(t[1], "pads")
    if t[2] is not None:
        same_dtype([x, tensor(t[2], "constant_value")], "data and constant_value")
    if t[3] is not None:
        _vector(t[3], "axes", INDEX)
    if x.shape is None:
        return TensorType(None, x.dtype)
    rank = len(x.shape)
    axes = tuple(range(rank)) if t[3] is None else _ints(v[3])
    if axes is None:
        return TensorType((ANY,) * rank, x.dtype)
    axes = _norm_axes(axes, rank)
    pads = _ints(v[1])
    if pads is None:
        return TensorType(tuple(ANY if i in axes else d for i, d in enumerate(x.shape)), x.dtype)
    if len(pads) != 2 * len(axes):
        raise TypeInferenceError(f"pads {pads} must hold 2 entries per padded axis ({len(axes)} axes)")
    dims = list(x.shape)
    for i, a in enumerate(axes):
        dims[a] = _grow_dim(dims[a], pads[i] + pads[i + len(axes)])
    return TensorType(tuple(dims), x.dtype)


def _grow_dim(d: Dim, n: int) -> Dim:
    if isinstance(d, int):
        if d + n < 0:
            raise TypeInferenceError(f"padding {n} makes a dim of size {d} negative")
        return d + n
    return d if n == 0 else ANY


def _pad_widths(ndim: int, pads, axes) -> list[tuple[int, int]]:
    """(before, after) per axis from ONNX pads [b_0..b_k, e_0..e_k] over `axes`."""
    pads = _ints(pads)
    axes = range(ndim) if axes is None else [a % ndim for a in _ints(axes)]
    widths = [(0, 0)] * ndim
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    return widths


def _pad_ref(attrs, x, pads, value=None, axes=None):
    widths = _pad_widths(x.ndim, pads, axes)
    x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for (b, e), n in zip(widths, x.shape))]
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    if attrs.mode != "constant":
        return np.pad(x, grow, mode=attrs.mode)
    fill = _zero(x.dtype) if value is None else value.reshape(-1)[0]
    return np.pad(x, grow, mode="constant", constant_values=fill)


pad = define_op("tensor.pad", pattern=INJECTIVE, inputs=(2, 4), attrs=PadAttrs, infer=_pad_rel, ref=_pad_ref,
                doc="Pad (negative pads crop) with a constant, or reflect/edge/wrap the border.")


@dataclass(frozen=True)
class CenterCropPadAttrs:
    axes: tuple[int, ...] | None = None


def _center_crop_pad_rel(attrs, types, values):
    x = tensor(types[0])
    n = _vector(types[1], "shape", INDEX)
    if x.shape is None:
        return TensorType(None, x.dtype)
    axes = _norm_axes(attrs.axes if attrs.axes is not None else range(len(x.shape)), len(x.shape))
    if n is not None and n != len(axes):
        raise TypeInferenceError(f"shape has {n} entries for {len(axes)} axes")
    target = _ints(values[1])
    dims = list(x.shape)
    for i, a in enumerate(axes):
        dims[a] = ANY if target is None else target[i]
    return TensorType(tuple(dims), x.dtype)


def _center_crop_pad_ref(attrs, x, shape):
    axes = range(x.ndim) if attrs.axes is None else [a % x.ndim for a in attrs.axes]
    crop = [slice(None)] * x.ndim
    place = [slice(None)] * x.ndim
    out_shape = list(x.shape)
    for a, want in zip(axes, _ints(shape)):
        have = x.shape[a]
        out_shape[a] = want
        if want < have:
            start = (have - want) // 2
            crop[a] = slice(start, start + want)
        else:
            start = (want - have) // 2
            place[a] = slice(start, start + have)
    out = np.zeros(out_shape, x.dtype)
    out[tuple(place)] = x[tuple(crop)]
    return out


center_crop_pad = define_op(
    "tensor.center_crop_pad", pattern=INJECTIVE, inputs=2, attrs=CenterCropPadAttrs,
    infer=_center_crop_pad_rel, ref=_center_crop_pad_ref,
    doc="Crop or zero-pad `axes` to `shape`, centred (odd leftovers go to the end).")


@dataclass(frozen=True)
class DepthSpaceAttrs:
    blocksize: int
    mode: str = "DCR"


def _depth_space_check(attrs, x: TensorType) -> None:
    if attrs.mode not in ("DCR", "CRD"):
        raise TypeInferenceError(f"mode must be DCR or CRD, got {attrs.mode!r}")
    if attrs.blocksize < 1:
        raise TypeInferenceError(f"blocksize must be >= 1, got {attrs.blocksize}")
    if x.shape is not None and len(x.shape) != 4:
        raise TypeInferenceError(f"input must be 4-D (N, C, H, W), got shape {x.shape}")


def _depth_to_space_rel(attrs, types, values):
    x = tensor(types[0])
    _depth_space_check(attrs, x)
    if x.shape is None:
        return TensorType(unknown_shape(4), x.dtype)
    b = attrs.blocksize
    n, c, h, w = x.shape
    return TensorType((n, _div_dim(c, b * b, "channels"), _mul_dim(h, b), _mul_dim(w, b)), x.dtype)


def _depth_to_space_ref(attrs, x):
    n, c, h, w = x.shape
    b = attrs.blocksize
    if attrs.mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


depth_to_space = define_op(
    "tensor.depth_to_space", pattern=INJECTIVE, attrs=DepthSpaceAttrs, infer=_depth_to_space_rel,
    ref=_depth_to_space_ref, doc="Move channel blocks into blocksize x blocksize spatial tiles.")


def _space_to_depth_rel(attrs, types, values):
    x = tensor(types[0])
    _depth_space_check(attrs, x)
    if x.shape is None:
        return TensorType(unknown_shape(4), x.dtype)
    b = attrs.blocksize
    n, c, h, w = x.shape
    return TensorType((n, _mul_dim(c, b * b), _div_dim(h, b, "height"), _div_dim(w, b, "width")), x.dtype)


def _space_to_depth_ref(attrs, x):
    n, c, h, w = x.shape
    b = attrs.blocksize
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if attrs.mode == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


space_to_depth = define_op(
    "tensor.space_to_depth", pattern=INJECTIVE, attrs=DepthSpaceAttrs, infer=_space_to_depth_rel,
    ref=_space_to_depth_ref, doc="Move blocksize x blocksize spatial tiles into channels (inverse of depth_to_space).")


# ---------------------------------------------------------------------------------------------
# shape queries and creation


@dataclass(frozen=True)
class ShapeAttrs:
    start: int = 0
    end: int | None = None


def _shape_rel(attrs, types, values):
    x = tensor(types[0])
    n = ANY if x.shape is None else len(range(len(x.shape))[attrs.start:attrs.end])
    return TensorType((n,), "int64")


shape = define_op("tensor.shape", pattern=OPAQUE, attrs=ShapeAttrs, infer=_shape_rel,
                  ref=lambda a, x: np.array(x.shape[a.start:a.end], I64),
                  doc="The input's dims [start:end] as an int64 vector (bounds clamp like Python slices).")

size = define_op("tensor.size", pattern=OPAQUE, infer=lambda a, t, v: TensorType((), "int64"),
                 ref=lambda a, x: np.array(x.size, I64), doc="Number of elements, as an int64 scalar.")


@dataclass(frozen=True)
class ConstantOfShapeAttrs:
    value: np.ndarray | None = None  # one element; None is float32 0


def _fill_value(attrs) -> np.ndarray:
    return np.zeros((), np.float32) if attrs.value is None else attrs.value.reshape(-1)[0:1].reshape(())


def _constant_of_shape_rel(attrs, types, values):
    if attrs.value is not None and attrs.value.size != 1:
        raise TypeInferenceError(f"value must hold one element, got shape {attrs.value.shape}")
    n = _vector(types[0], "shape")
    dims = _ints(values[0])
    if dims is not None and any(d < 0 for d in dims):
        raise TypeInferenceError(f"shape {dims} has a negative dim")
    dtype = dt.from_numpy(_fill_value(attrs).dtype)
    return TensorType(dims if dims is not None else unknown_shape(n), dtype)


constant_of_shape = define_op(
    "tensor.constant_of_shape", pattern=INJECTIVE, attrs=ConstantOfShapeAttrs, infer=_constant_of_shape_rel,
    ref=lambda a, s: np.full(_ints(s), _fill_value(a)), doc="A tensor of the given shape filled with `value`.")


@dataclass(frozen=True)
class RangeAttrs:
    stash_type: str = "float32"


_RANGE_DTYPES = ("int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
_LOW_PRECISION = ("float16", "bfloat16")


def _range_compute_dtype(attrs, dtype: str) -> np.dtype:
    """Low-precision floats count in `stash_type`; every other type in itself."""
    return dt.to_numpy(attrs.stash_type if dtype in _LOW_PRECISION else dtype)


def _range_count(start, limit, delta) -> int:
    """max(ceil((limit - start) / delta), 0), exact for integers."""
    if delta == 0:
        raise TypeInferenceError("delta may not be 0")
    if isinstance(start, (int, np.integer)):
        return max(-((int(start) - int(limit)) // int(delta)), 0)
    return max(math.ceil((limit - start) / delta), 0)


def _range_args(attrs, start, limit, delta):
    cdt = _range_compute_dtype(attrs, dt.from_numpy(start.dtype))
    return tuple(np.asarray(v).astype(cdt).reshape(()).item() for v in (start, limit, delta))


def _range_rel(attrs, types, values):
    ts = [tensor(t, w) for t, w in zip(types, ("start", "limit", "delta"))]
    dtype = same_dtype(ts, "start, limit and delta")
    check_dtype(ts[0], _RANGE_DTYPES, "start")
    if attrs.stash_type not in ("float32", "float64"):
        raise TypeInferenceError(f"stash_type must be float32 or float64, got {attrs.stash_type}")
    for t, w in zip(ts, ("start", "limit", "delta")):
        n = shape_product(t.shape) if t.shape is not None else 1
        if isinstance(n, int) and n != 1:
            raise TypeInferenceError(f"{w} must be a scalar, got shape {t.shape}")
    if any(v is None for v in values):
        return TensorType((ANY,), dtype)
    return TensorType((_range_count(*_range_args(attrs, *values)),), dtype)


def _range_ref(attrs, start, limit, delta):
    s, lim, d = _range_args(attrs, start, limit, delta)
    n = _range_count(s, lim, d)
    cdt = _range_compute_dtype(attrs, dt.from_numpy(start.dtype))
    return (np.asarray(s, cdt) + np.arange(n, dtype=cdt) * np.asarray(d, cdt)).astype(start.dtype)


range_ = define_op("tensor.range", pattern=INJECTIVE, inputs=3, attrs=RangeAttrs, infer=_range_rel,
                   ref=_range_ref, doc="start + i * delta for i < ceil((limit - start) / delta).")


@dataclass(frozen=True)
class EyeLikeAttrs:
    dtype: str | None = None
    k: int = 0


def _eye_like_rel(attrs, types, values):
    x = tensor(types[0])
    if x.shape is not None and len(x.shape) != 2:
        raise TypeInferenceError(f"input must be 2-D, got shape {x.shape}")
    return TensorType(unknown_shape(2) if x.shape is None else x.shape, attrs.dtype or x.dtype)


def _eye_like_ref(attrs, x):
    return np.eye(*x.shape, k=attrs.k, dtype=dt.to_numpy(attrs.dtype) if attrs.dtype else x.dtype)


eye_like = define_op("tensor.eye_like", pattern=INJECTIVE, attrs=EyeLikeAttrs, infer=_eye_like_rel,
                     ref=_eye_like_ref, doc="Ones on diagonal k of a matrix shaped like the input, zeros elsewhere.")


@dataclass(frozen=True)
class OneHotAttrs:
    axis: int = -1


def _one_hot_rel(attrs, types, values):
    idx = _index_input(types[0], "indices", dt.NUMERIC)
    depth = _index_input(types[1], "depth", dt.NUMERIC)
    vals = tensor(types[2], "values")
    if vals.shape is not None and (len(vals.shape) != 1 or vals.shape[0] not in (2, ANY)):
        raise TypeInferenceError(f"values must be [off, on], got shape {vals.shape}")
    if depth.shape is not None and shape_product(depth.shape) not in (1, ANY):
        raise TypeInferenceError(f"depth must hold one value, got shape {depth.shape}")
    if idx.shape is None:
        return TensorType(None, vals.dtype)
    axis = norm_axis(attrs.axis, len(idx.shape) + 1)
    d: Dim = ANY if values[1] is None else int(np.asarray(values[1]).reshape(-1)[0])
    if isinstance(d, int) and d < 1:
        raise TypeInferenceError(f"depth must be >= 1, got {d}")
    return TensorType(idx.shape[:axis] + (d,) + idx.shape[axis:], vals.dtype)


def _one_hot_ref(attrs, indices, depth, values):
    depth = int(depth.reshape(-1)[0])
    idx = indices.astype(I64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = idx[..., None] == np.arange(depth)
    out = np.where(hot, values[1], values[0]).astype(values.dtype)
    return np.moveaxis(out, -1, attrs.axis % out.ndim)


one_hot = define_op("tensor.one_hot", pattern=INJECTIVE, inputs=3, attrs=OneHotAttrs, infer=_one_hot_rel,
                    ref=_one_hot_ref,
                    doc="values[1] where the new `axis` equals the index, values[0] elsewhere (out-of-range: all off).")


@dataclass(frozen=True)
class TriluAttrs:
    upper: int = 1


def _trilu_rel(attrs, types, values):
    x = tensor(types[0])
    _rank(x, 2)
    if len(types) > 1 and types[1] is not None:
        k = _index_input(types[1], "k", ("int64",))
        if k.shape is not None and shape_product(k.shape) not in (1, ANY):
            raise TypeInferenceError(f"k must be a scalar, got shape {k.shape}")
    return x


def _trilu_ref(attrs, x, k=None):
    k = 0 if k is None else int(k.reshape(-1)[0])
    return np.triu(x, k) if attrs.upper else np.tril(x, k)


trilu = define_op("tensor.trilu", pattern=INJECTIVE, inputs=(1, 2), attrs=TriluAttrs, infer=_trilu_rel,
                  ref=_trilu_ref, doc="Keep the upper (or lower) triangle from diagonal k of the last two dims.")


# ---------------------------------------------------------------------------------------------
# data-dependent shapes and selection


@dataclass(frozen=True)
class CompressAttrs:
    axis: int | None = None


def _compress_rel(attrs, types, values):
    x = tensor(types[0])
    _vector(types[1], "condition", ("bool",))
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
    _rank(x, 2)
    n = _vector(types[1], "sequence_lens")
    if {attrs.batch_axis, attrs.time_axis} != {0, 1}:
        raise TypeInferenceError(f"batch_axis and time_axis must be 0 and 1 in some order, got "
                                 f"{attrs.batch_axis} and {attrs.time_axis}")
    if x.shape is not None and n is not None:
        _unify(x.shape[attrs.batch_axis], n, "batch dim and sequence_lens length")
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
        y, n = TensorType((ANY,), x.dtype), (ANY if x.shape is None else _dim_product(x.shape))
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
    k_type = _index_input(types[1], "K", ("int64",))
    if k_type.shape is not None and shape_product(k_type.shape) not in (1, ANY):
        raise TypeInferenceError(f"K must hold one value, got shape {k_type.shape}")
    if x.shape is None:
        out = TensorType(None, x.dtype)
    else:
        axis = norm_axis(attrs.axis, len(x.shape))
        k: Dim = ANY if values[1] is None else _ints(values[1])[0]
        d = x.shape[axis]
        if isinstance(k, int) and (k < 0 or isinstance(d, int) and k > d):
            raise TypeInferenceError(f"K={k} out of range for a dim of size {d}")
        out = TensorType(x.shape[:axis] + (k,) + x.shape[axis + 1:], x.dtype)
    return TupleType((out, TensorType(out.shape, "int64")))


def _top_k_ref(attrs, x, k):
    """Ties keep the lower index first, for largest and smallest alike."""
    k, axis = _ints(k)[0], attrs.axis % x.ndim
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


@dataclass(frozen=True)
class Col2ImAttrs:
    dilations: tuple[int, ...] | None = None
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def _col2im_rel(attrs, types, values):
    x = tensor(types[0])
    n = _vector(types[1], "image_shape")
    nb = _vector(types[2], "block_shape")
    if x.shape is not None and len(x.shape) != 3:
        raise TypeInferenceError(f"input must be 3-D (N, C * prod(block_shape), L), got shape {x.shape}")
    if n is not None and nb is not None and n != nb:
        raise TypeInferenceError(f"image_shape ({n}) and block_shape ({nb}) lengths differ")
    n = n if n is not None else nb
    if n is None:
        return TensorType(None, x.dtype)
    image, block = _ints(values[1]), _ints(values[2])
    batch, cols = (ANY, ANY) if x.shape is None else x.shape[:2]
    c = ANY if block is None else _div_dim(cols, math.prod(block), "input dim 1 by prod(block_shape)")
    return TensorType((batch, c) + (image if image is not None else (ANY,) * n), x.dtype)


def _col2im_ref(attrs, x, image_shape, block_shape):
    image, block = _ints(image_shape), _ints(block_shape)
    n = len(image)
    dil = attrs.dilations or (1,) * n
    strides = attrs.strides or (1,) * n
    pads = attrs.pads or (0,) * (2 * n)
    padded = [image[i] + pads[i] + pads[i + n] for i in range(n)]
    blocks = [(padded[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(n)]
    batch, cols, length = x.shape
    if length != math.prod(blocks):
        raise ValueError(f"input has {length} columns; the geometry gives {math.prod(blocks)} blocks")
    c = cols // math.prod(block)
    patches = x.reshape((batch, c, *block, *blocks))
    out = np.zeros((batch, c, *padded), x.dtype)
    for off in np.ndindex(*block):
        window = tuple(slice(o * d, o * d + s * (m - 1) + 1, s) for o, d, s, m in zip(off, dil, strides, blocks))
        out[(slice(None), slice(None)) + window] += patches[(slice(None), slice(None)) + off]
    return out[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + image[i]) for i in range(n))]


col2im = define_op("tensor.col2im", pattern=OPAQUE, inputs=3, attrs=Col2ImAttrs, infer=_col2im_rel,
                   ref=_col2im_ref, doc="Sum sliding-window columns back into an image (the inverse of im2col).")
