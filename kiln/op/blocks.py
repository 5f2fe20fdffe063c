"""Operators that move blocks of elements between spatial and channel dims: depth_to_space,
space_to_depth, col2im."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, TensorType
from kiln.op.registry import INJECTIVE, OPAQUE, define_op
from kiln.op.shape_rel import div_dim, index_vector, int_values, mul_dim
from kiln.op.typerel import tensor, unknown_shape


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
    return TensorType((n, div_dim(c, b * b, "channels"), mul_dim(h, b), mul_dim(w, b)), x.dtype)


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
    return TensorType((n, mul_dim(c, b * b), div_dim(h, b, "height"), div_dim(w, b, "width")), x.dtype)


def _space_to_depth_ref(attrs, x):
    n, c, h, w = x.shape
    b = attrs.blocksize
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if attrs.mode == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


space_to_depth = define_op(
    "tensor.space_to_depth", pattern=INJECTIVE, attrs=DepthSpaceAttrs, infer=_space_to_depth_rel,
    ref=_space_to_depth_ref, doc="Move blocksize x blocksize spatial tiles into channels (inverse of depth_to_space).")


@dataclass(frozen=True)
class Col2ImAttrs:
    dilations: tuple[int, ...] | None = None
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def _col2im_rel(attrs, types, values):
    x = tensor(types[0])
    n = index_vector(types[1], "image_shape")
    nb = index_vector(types[2], "block_shape")
    if x.shape is not None and len(x.shape) != 3:
        raise TypeInferenceError(f"input must be 3-D (N, C * prod(block_shape), L), got shape {x.shape}")
    if n is not None and nb is not None and n != nb:
        raise TypeInferenceError(f"image_shape ({n}) and block_shape ({nb}) lengths differ")
    n = n if n is not None else nb
    if n is None:
        return TensorType(None, x.dtype)
    image, block = int_values(values[1]), int_values(values[2])
    batch, cols = (ANY, ANY) if x.shape is None else x.shape[:2]
    c = ANY if block is None else div_dim(cols, math.prod(block), "input dim 1 by prod(block_shape)")
    return TensorType((batch, c) + (image if image is not None else (ANY,) * n), x.dtype)


def _col2im_ref(attrs, x, image_shape, block_shape):
    image, block = int_values(image_shape), int_values(block_shape)
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
