"""Operators that grow or shrink a tensor by repeating or padding it: expand, tile, pad, center_crop_pad.

Shapes, repeats and pads are inputs (latest ONNX opset); type relations read them only when they are
Constants, else the dims they decide are ANY.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, TensorType
from kiln.op.registry import BROADCAST, INJECTIVE, define_op
from kiln.op.shape_rel import INDEX, index_vector, int_values, mul_dim, norm_axes, padded, zero_of
from kiln.op.typerel import broadcast_shapes, same_dtype, tensor, unknown_shape


def _expand_rel(attrs, types, values):
    x = tensor(types[0])
    n = index_vector(types[1], "shape")
    target = int_values(values[1])
    if target is None:
        rank = None if x.shape is None or n is None else max(len(x.shape), n)
        return TensorType(unknown_shape(rank), x.dtype)
    return TensorType(broadcast_shapes(x.shape, target), x.dtype)


def _expand_ref(attrs, x, shape):
    return np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(int_values(shape)))))


expand = define_op("tensor.expand", pattern=BROADCAST, inputs=2, infer=_expand_rel, ref=_expand_ref,
                   doc="Broadcast the input against `shape` (numpy rules; 1s in `shape` keep the input dim).")


def _tile_rel(attrs, types, values):
    x = tensor(types[0])
    n = index_vector(types[1], "repeats")
    reps = int_values(values[1])
    if x.shape is not None and n is not None and n != len(x.shape):
        raise TypeInferenceError(f"repeats has {n} entries for a rank-{len(x.shape)} input")
    if reps is None or x.shape is None:
        return TensorType(unknown_shape(x.ndim if x.ndim is not None else n), x.dtype)
    if any(r < 0 for r in reps):
        raise TypeInferenceError(f"repeats {reps} must be >= 0")
    return TensorType(tuple(mul_dim(d, r) for d, r in zip(x.shape, reps)), x.dtype)


tile = define_op("tensor.tile", pattern=INJECTIVE, inputs=2, infer=_tile_rel,
                 ref=lambda a, x, reps: np.tile(x, int_values(reps)),
                 doc="Repeat the input repeats[i] times along each axis i.")


@dataclass(frozen=True)
class PadAttrs:
    mode: str = "constant"


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_rel(attrs, types, values):
    x = tensor(types[0])
    t, v = padded(types, 4), padded(values, 4)
    if attrs.mode not in _PAD_MODES:
        raise TypeInferenceError(f"mode must be one of {', '.join(_PAD_MODES)}; got {attrs.mode!r}")
    index_vector(t[1], "pads")
    if t[2] is not None:
        same_dtype([x, tensor(t[2], "constant_value")], "data and constant_value")
    if t[3] is not None:
        index_vector(t[3], "axes", INDEX)
    if x.shape is None:
        return TensorType(None, x.dtype)
    rank = len(x.shape)
    axes = tuple(range(rank)) if t[3] is None else int_values(v[3])
    if axes is None:
        return TensorType((ANY,) * rank, x.dtype)
    axes = norm_axes(axes, rank)
    pads = int_values(v[1])
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
    pads = int_values(pads)
    axes = range(ndim) if axes is None else [a % ndim for a in int_values(axes)]
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
    fill = zero_of(x.dtype) if value is None else value.reshape(-1)[0]
    return np.pad(x, grow, mode="constant", constant_values=fill)


pad = define_op("tensor.pad", pattern=INJECTIVE, inputs=(2, 4), attrs=PadAttrs, infer=_pad_rel, ref=_pad_ref,
                doc="Pad (negative pads crop) with a constant, or reflect/edge/wrap the border.")


@dataclass(frozen=True)
class CenterCropPadAttrs:
    axes: tuple[int, ...] | None = None


def _center_crop_pad_rel(attrs, types, values):
    x = tensor(types[0])
    n = index_vector(types[1], "shape", INDEX)
    if x.shape is None:
        return TensorType(None, x.dtype)
    axes = norm_axes(attrs.axes if attrs.axes is not None else range(len(x.shape)), len(x.shape))
    if n is not None and n != len(axes):
        raise TypeInferenceError(f"shape has {n} entries for {len(axes)} axes")
    target = int_values(values[1])
    dims = list(x.shape)
    for i, a in enumerate(axes):
        dims[a] = ANY if target is None else target[i]
    return TensorType(tuple(dims), x.dtype)


def _center_crop_pad_ref(attrs, x, shape):
    axes = range(x.ndim) if attrs.axes is None else [a % x.ndim for a in attrs.axes]
    crop = [slice(None)] * x.ndim
    place = [slice(None)] * x.ndim
    out_shape = list(x.shape)
    for a, want in zip(axes, int_values(shape)):
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
