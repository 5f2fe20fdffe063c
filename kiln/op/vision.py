"""Vision: resizing, grid sampling, RoI pooling and non-maximum suppression.

Resampling ops compute in float64 and cast back to the input dtype (integers round half to
even and saturate).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kiln.errors import EvaluationError, TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType
from kiln.op.registry import INJECTIVE, OPAQUE, define_op
from kiln.op.typerel import check_dtype, norm_axis, tensor


def cast_back(v: np.ndarray, like: np.dtype) -> np.ndarray:
    """float64 results in dtype `like`: integers are rounded half to even and saturated."""
    if np.issubdtype(like, np.integer):
        info = np.iinfo(like)
        return np.clip(np.rint(v), info.min, info.max).astype(like)
    return v.astype(like)


def present(types: list, i: int) -> bool:
    """Input i is given and not an empty tensor (old opsets pass `[]` for 'absent')."""
    if i >= len(types) or types[i] is None:
        return False
    shape = tensor(types[i]).shape
    return not (shape is not None and len(shape) == 1 and shape[0] == 0)


def cubic_kernel(a: float) -> Callable[[np.ndarray], np.ndarray]:
    """Keys' cubic convolution kernel with coefficient `a` (support |d| < 2)."""

    def k(d: np.ndarray) -> np.ndarray:
        d = np.abs(d)
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        return np.where(d <= 1, near, np.where(d < 2, far, 0.0))

    return k


def linear_kernel(d: np.ndarray) -> np.ndarray:
    return np.clip(1 - np.abs(d), 0, 1)


# ---------------------------------------------------------------------------------------------
# Resize


@dataclass(frozen=True)
class ResizeAttrs:
    antialias: int = 0
    axes: tuple[int, ...] | None = None
    coordinate_transformation_mode: str = "half_pixel"
    cubic_coeff_a: float = -0.75
    exclude_outside: int = 0
    extrapolation_value: float = 0.0
    keep_aspect_ratio_policy: str = "stretch"
    mode: str = "nearest"
    nearest_mode: str = "round_prefer_floor"

    def __post_init__(self):
        if self.mode not in ("nearest", "linear", "cubic"):
            raise ValueError(f"mode must be nearest, linear or cubic, got {self.mode!r}")
        if self.coordinate_transformation_mode not in SOURCE_COORD:
            raise ValueError(f"unknown coordinate_transformation_mode {self.coordinate_transformation_mode!r}")
        if self.nearest_mode not in NEAREST_MODE:
            raise ValueError(f"unknown nearest_mode {self.nearest_mode!r}")
        if self.keep_aspect_ratio_policy not in ("stretch", "not_larger", "not_smaller"):
            raise ValueError(f"unknown keep_aspect_ratio_policy {self.keep_aspect_ratio_policy!r}")


# (output index y, scale, input length, output length as float, as int, roi start, end) -> x_original
SOURCE_COORD: dict[str, Callable[..., np.ndarray]] = {
    "half_pixel": lambda y, s, n, w, wi, r0, r1: (y + 0.5) / s - 0.5,
    "half_pixel_symmetric": lambda y, s, n, w, wi, r0, r1: (
        n / 2 * (1 - wi / w) + (y + 0.5) / s - 0.5),
    "pytorch_half_pixel": lambda y, s, n, w, wi, r0, r1: (
        (y + 0.5) / s - 0.5 if w > 1 else np.zeros_like(y)),
    "align_corners": lambda y, s, n, w, wi, r0, r1: (
        y * (n - 1) / (w - 1) if w != 1 else np.zeros_like(y)),
    "asymmetric": lambda y, s, n, w, wi, r0, r1: y / s,
    "tf_half_pixel_for_nn": lambda y, s, n, w, wi, r0, r1: (y + 0.5) / s,
    "tf_crop_and_resize": lambda y, s, n, w, wi, r0, r1: r0 * (n - 1) + (
        y * (r1 - r0) * (n - 1) / (w - 1) if w != 1 else np.full_like(y, (r1 - r0) * (n - 1) / 2)),
}

NEAREST_MODE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def resize_axes(attrs: ResizeAttrs, rank: int) -> list[int]:
    axes = [norm_axis(a, rank, "axes entry") for a in attrs.axes] if attrs.axes is not None else list(range(rank))
    if len(set(axes)) != len(axes):
        raise TypeInferenceError(f"axes {attrs.axes} repeat an axis")
    return axes


def resize_plan(attrs: ResizeAttrs, shape: tuple[Dim, ...], scales: np.ndarray | None,
                sizes: np.ndarray | None) -> tuple[list[Dim], list[float | None]]:
    """Output dims and the per-axis scale used to map coordinates (None where not known)."""
    axes = resize_axes(attrs, len(shape))
    given = sizes if sizes is not None else scales
    if given is not None and given.size != len(axes):
        raise TypeInferenceError(f"{'sizes' if sizes is not None else 'scales'} has {given.size} "
                                 f"entries; expected {len(axes)} (one per resized axis)")
    out: list[Dim] = list(shape)
    scale: list[float | None] = [1.0] * len(shape)
    for a in axes:
        out[a], scale[a] = ANY, None
    if scales is not None:
        for a, s in zip(axes, scales.astype(np.float64)):
            if s <= 0:
                raise TypeInferenceError(f"scales must be > 0, got {scales.tolist()}")
            scale[a] = float(s)
            out[a] = math.floor(shape[a] * s) if isinstance(shape[a], int) else (
                shape[a] if s == 1 else ANY)
    elif sizes is not None:
        if (sizes < 0).any():
            raise TypeInferenceError(f"sizes must be >= 0, got {sizes.tolist()}")
        if attrs.keep_aspect_ratio_policy == "stretch":
            for a, n in zip(axes, sizes.tolist()):
                out[a] = int(n)
                scale[a] = n / shape[a] if isinstance(shape[a], int) and shape[a] else None
        elif all(isinstance(shape[a], int) and shape[a] for a in axes):
            ratios = [n / shape[a] for a, n in zip(axes, sizes.tolist())]
            s = min(ratios) if attrs.keep_aspect_ratio_policy == "not_larger" else max(ratios)
            for a in axes:
                out[a], scale[a] = math.floor(s * shape[a] + 0.5), s
    return out, scale


def _resize_rel(attrs: ResizeAttrs, types, values) -> TensorType:
    x = tensor(types[0], "X")
    has_scales, has_sizes = present(types, 2), present(types, 3)
    if has_scales == has_sizes:
        raise TypeInferenceError("exactly one of scales and sizes must be given")
    if has_scales:
        check_dtype(tensor(types[2]), dt.FLOATS, "scales")
    if has_sizes:
        check_dtype(tensor(types[3]), ("int64",), "sizes")
    if attrs.antialias and attrs.mode == "nearest":
        raise TypeInferenceError("antialias applies to linear and cubic modes only")
    if x.shape is None:
        return TensorType(None, x.dtype)
    scales = values[2] if has_scales else None
    sizes = values[3] if has_sizes else None
    if scales is None and sizes is None:
        axes = resize_axes(attrs, len(x.shape))
        return TensorType(tuple(ANY if i in axes else d for i, d in enumerate(x.shape)), x.dtype)
    out, _ = resize_plan(attrs, x.shape, scales, sizes)
    return TensorType(tuple(out), x.dtype)


def _taps(attrs: ResizeAttrs, pos: np.ndarray, scale: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Input indices [out, taps] (may lie outside [0, n)) and their weights for source positions."""
    if attrs.mode == "nearest":
        return NEAREST_MODE[attrs.nearest_mode](pos).astype(np.int64)[:, None], np.ones((pos.size, 1))
    kernel, support = ((linear_kernel, 1.0) if attrs.mode == "linear"
                       else (cubic_kernel(attrs.cubic_coeff_a), 2.0))
    stretch = min(scale, 1.0) if attrs.antialias else 1.0
    reach = support / stretch
    first = np.floor(pos - reach) + 1
    idx = (first[:, None] + np.arange(int(2 * math.ceil(reach)) + 1)[None, :]).astype(np.int64)
    w = kernel(stretch * (idx - pos[:, None]))
    if attrs.exclude_outside:
        w = np.where((idx < 0) | (idx >= n), 0.0, w)
    total = w.sum(axis=1, keepdims=True)
    return idx, w / np.where(total == 0, 1.0, total)


def _resize_axis(attrs: ResizeAttrs, data: np.ndarray, axis: int, scale: float, out: int,
                 roi: tuple[float, float]) -> np.ndarray:
    """Separable 1-d resampling of `data` along `axis` to `out` points."""
    n = data.shape[axis]
    y = np.arange(out, dtype=np.float64)
    pos = SOURCE_COORD[attrs.coordinate_transformation_mode](y, scale, n, scale * n, out, *roi)
    idx, w = _taps(attrs, pos, scale, n)
    gathered = np.take(data, np.clip(idx, 0, max(n - 1, 0)), axis=axis)  # [.., out, taps, ..]
    shape = (1,) * axis + w.shape + (1,) * (data.ndim - axis - 1)
    res = (gathered * w.reshape(shape)).sum(axis=axis + 1)
    if attrs.coordinate_transformation_mode == "tf_crop_and_resize":
        outside = ((pos < 0) | (pos > n - 1)).reshape((1,) * axis + (out,) + (1,) * (data.ndim - axis - 1))
        res = np.where(outside, attrs.extrapolation_value, res)
    return res


def _resize_ref(attrs: ResizeAttrs, x, roi=None, scales=None, sizes=None):
    scales = scales if scales is not None and scales.size else None
    sizes = sizes if sizes is not None and sizes.size else None
    out, scale = resize_plan(attrs, x.shape, scales, sizes)
    axes = resize_axes(attrs, x.ndim)
    rois = {a: (0.0, 1.0) for a in axes}
    if roi is not None and roi.size:
        r = roi.astype(np.float64).reshape(2, -1)
        rois = {a: (float(r[0, i]), float(r[1, i])) for i, a in enumerate(axes)}
    res = x.astype(np.float64)
    for a in axes:
        if out[a] == x.shape[a] and scale[a] == 1.0 and rois[a] == (0.0, 1.0):
            continue
        res = _resize_axis(attrs, res, a, scale[a], out[a], rois[a])
    return cast_back(res, x.dtype)


resize = define_op("vision.resize", pattern=INJECTIVE, inputs=(1, 4), attrs=ResizeAttrs,
                   infer=_resize_rel, ref=_resize_ref,
                   doc="Resample X (nearest / linear / cubic, optional antialias) to sizes or by scales "
                       "over `axes`; inputs X, roi, scales, sizes.")


# ---------------------------------------------------------------------------------------------
# GridSample


@dataclass(frozen=True)
class GridSampleAttrs:
    align_corners: int = 0
    mode: str = "linear"
    padding_mode: str = "zeros"

    def __post_init__(self):
        if self.mode not in ("linear", "nearest", "cubic"):
            raise ValueError(f"mode must be linear, nearest or cubic, got {self.mode!r}")
        if self.padding_mode not in ("zeros", "border", "reflection"):
            raise ValueError(f"padding_mode must be zeros, border or reflection, got {self.padding_mode!r}")


def _grid_sample_rel(attrs: GridSampleAttrs, types, values) -> TensorType:
    x, grid = tensor(types[0], "X"), tensor(types[1], "grid")
    check_dtype(x, dt.NUMERIC + ("bool",) if attrs.mode == "nearest" else dt.NUMERIC, "X")
    check_dtype(grid, dt.FLOATS, "grid")
    if x.shape is None or grid.shape is None:
        return TensorType(None, x.dtype)
    r = len(x.shape) - 2
    if r < 1 or len(grid.shape) != r + 2:
        raise TypeInferenceError(f"X {x.shape} must be (N, C, D1..Dr) and grid (N, D1_out..Dr_out, r); "
                                 f"got grid {grid.shape}")
    if isinstance(grid.shape[-1], int) and grid.shape[-1] != r:
        raise TypeInferenceError(f"grid's last dim is {grid.shape[-1]}; X has {r} spatial dims")
    n = x.shape[0] if isinstance(x.shape[0], int) else grid.shape[0]
    return TensorType((n, x.shape[1]) + grid.shape[1:-1], x.dtype)


def reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates into [lo, hi] by mirroring at the borders repeatedly."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below = x < lo
    dist = np.where(below, lo - x, x - hi)
    flips = np.floor(dist / span)
    rem = dist - flips * span
    even = flips % 2 == 0
    folded = np.where(below == even, lo + rem, hi - rem)
    return np.where((x < lo) | (x > hi), folded, x)


def _grid_taps(attrs: GridSampleAttrs, pos: np.ndarray, size: int):
    """Indices [..., taps] into an axis of length `size`, their weights, and a validity mask.

    Out-of-range positions are first clamped / reflected for nearest and linear sampling; cubic
    sampling (as in torch and ONNX Runtime) pads each of its four taps instead."""
    lo, hi = (0.0, size - 1.0) if attrs.align_corners else (-0.5, size - 0.5)
    if attrs.mode == "nearest":
        pos = np.rint(pos)
    outside = (pos < lo) | (pos > hi)
    if attrs.padding_mode == "border" and attrs.mode != "cubic":
        pos = np.where(outside, np.clip(pos, 0, size - 1), pos)
    elif attrs.padding_mode == "reflection" and attrs.mode != "cubic":
        pos = np.where(outside, reflect(pos, lo, hi), pos)
    if attrs.mode == "nearest":
        idx, w = pos[..., None], np.ones(pos.shape + (1,))
    else:
        base = np.floor(pos)
        offsets = np.arange(2) if attrs.mode == "linear" else np.arange(-1, 3)
        idx = base[..., None] + offsets
        d = pos[..., None] - idx
        w = linear_kernel(d) if attrs.mode == "linear" else cubic_kernel(-0.75)(d)
    if attrs.padding_mode == "zeros":
        valid = (idx >= 0) & (idx < size)
    else:
        if attrs.padding_mode == "reflection":
            idx = np.trunc(reflect(idx, lo, hi))
        valid = np.ones(idx.shape, bool)
    return np.clip(idx, 0, size - 1).astype(np.int64), w, valid


def _grid_sample_ref(attrs: GridSampleAttrs, x, grid):
    sizes = x.shape[2:]
    r = len(sizes)
    g = grid.astype(np.float64)[..., ::-1]  # grid's last dim is (x, y, ...): innermost axis first
    pos = [((g[..., k] + 1) / 2 * (n - 1)) if attrs.align_corners else (((g[..., k] + 1) * n - 1) / 2)
           for k, n in enumerate(sizes)]
    taps = [_grid_taps(attrs, p, n) for p, n in zip(pos, sizes)]
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * r)
    data = np.moveaxis(x, 1, -1)  # [N, D1..Dr, C]
    out = None
    for combo in np.ndindex(*(t[0].shape[-1] for t in taps)):
        idx = tuple(t[0][..., j] for t, j in zip(taps, combo))
        w = np.prod([t[1][..., j] for t, j in zip(taps, combo)], axis=0)
        valid = np.all([t[2][..., j] for t, j in zip(taps, combo)], axis=0)
        vals = data[(batch,) + idx]  # [N, D1_out..Dr_out, C]
        if attrs.mode == "nearest":
            return np.moveaxis(np.where(valid[..., None], vals, np.zeros((), x.dtype)), -1, 1)
        term = np.where(valid[..., None], vals.astype(np.float64) * w[..., None], 0.0)
        out = term if out is None else out + term
    return cast_back(np.moveaxis(out, -1, 1), x.dtype)


grid_sample = define_op("vision.grid_sample", pattern=INJECTIVE, inputs=2, attrs=GridSampleAttrs,
                        infer=_grid_sample_rel, ref=_grid_sample_ref,
                        doc="Sample X (N, C, D1..Dr) at the normalized positions of grid "
                            "(N, D1_out..Dr_out, r) with nearest / N-linear / N-cubic interpolation.")


# ---------------------------------------------------------------------------------------------
# AffineGrid


@dataclass(frozen=True)
class AffineGridAttrs:
    align_corners: int = 0


def _affine_grid_rel(attrs: AffineGridAttrs, types, values) -> TensorType:
    theta, size = tensor(types[0], "theta"), tensor(types[1], "size")
    check_dtype(theta, dt.FLOATS, "theta")
    check_dtype(size, ("int64",), "size")
    if size.shape is not None and (len(size.shape) != 1 or size.shape[0] not in (4, 5, ANY)):
        raise TypeInferenceError(f"size must be [N, C, H, W] or [N, C, D, H, W], got shape {size.shape}")
    r = values[1].size - 2 if values[1] is not None else (
        size.shape[0] - 2 if size.shape is not None and isinstance(size.shape[0], int) else None)
    if theta.shape is not None:
        if len(theta.shape) != 3:
            raise TypeInferenceError(f"theta must be (N, 2, 3) or (N, 3, 4), got {theta.shape}")
        if r is not None and theta.shape[1:] != (r, r + 1):
            raise TypeInferenceError(f"theta {theta.shape} does not fit a {r}-d size")
    if r is None:
        return TensorType(None, theta.dtype)
    n = theta.shape[0] if theta.shape is not None else ANY
    spatial = tuple(int(v) for v in values[1][2:]) if values[1] is not None else (ANY,) * r
    return TensorType((n,) + spatial + (r,), theta.dtype)


def _base_coords(n: int, align_corners: int) -> np.ndarray:
    """n evenly spaced positions in [-1, 1]: pixel centers (align_corners) or their midpoints
    of n equal cells; a single position is 0."""
    if n == 1:
        return np.zeros(1)
    return np.linspace(-1, 1, n) if align_corners else (2 * np.arange(n) + 1) / n - 1


def _affine_grid_ref(attrs: AffineGridAttrs, theta, size):
    spatial = [int(v) for v in size[2:]]
    axes = [_base_coords(n, attrs.align_corners) for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # D, H, W order
    homo = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1)  # (x, y, [z], 1)
    grid = np.einsum("...k,nik->n...i", homo, theta.astype(np.float64))
    return grid.astype(theta.dtype)


affine_grid = define_op("vision.affine_grid", pattern=INJECTIVE, inputs=2, attrs=AffineGridAttrs,
                        infer=_affine_grid_rel, ref=_affine_grid_ref,
                        doc="Sampling grid (N, [D,] H, W, r) of theta applied to normalized positions of "
                            "an output of `size`; feeds GridSample.")


# ---------------------------------------------------------------------------------------------
# RoiAlign


@dataclass(frozen=True)
class RoiAlignAttrs:
    coordinate_transformation_mode: str = "half_pixel"
    mode: str = "avg"
    output_height: int = 1
    output_width: int = 1
    sampling_ratio: int = 0
    spatial_scale: float = 1.0

    def __post_init__(self):
        if self.mode not in ("avg", "max"):
            raise ValueError(f"mode must be avg or max, got {self.mode!r}")
        if self.coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
            raise ValueError(f"unknown coordinate_transformation_mode {self.coordinate_transformation_mode!r}")


def _roi_align_rel(attrs: RoiAlignAttrs, types, values) -> TensorType:
    x, rois, idx = tensor(types[0], "X"), tensor(types[1], "rois"), tensor(types[2], "batch_indices")
    check_dtype(x, dt.FLOATS, "X")
    if rois.dtype != x.dtype:
        raise TypeInferenceError(f"rois dtype {rois.dtype} differs from X's {x.dtype}")
    check_dtype(idx, ("int64",), "batch_indices")
    if x.shape is not None and len(x.shape) != 4:
        raise TypeInferenceError(f"X must be (N, C, H, W), got {x.shape}")
    if rois.shape is not None and (len(rois.shape) != 2 or rois.shape[1] not in (4, ANY)):
        raise TypeInferenceError(f"rois must be (num_rois, 4), got {rois.shape}")
    num = rois.shape[0] if rois.shape is not None else (idx.shape[0] if idx.shape else ANY)
    c = x.shape[1] if x.shape is not None else ANY
    return TensorType((num, c, attrs.output_height, attrs.output_width), x.dtype)


def _roi_samples(start: float, extent: float, bins: int, ratio: int, size: int):
    """Per sample along one axis: low/high pixel index, low/high weight, and validity.
    Samples sit at the centers of a `ratio`-per-bin grid over the RoI."""
    step = extent / bins
    p = start + (np.arange(bins)[:, None] * step + (np.arange(ratio)[None, :] + 0.5) * step / ratio)
    p = p.reshape(-1)
    valid = (p >= -1.0) & (p <= size)
    p = np.maximum(p, 0.0)
    low = np.minimum(np.floor(p).astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    frac = np.where(low >= size - 1, 0.0, p - low)
    return low, high, 1 - frac, frac, valid


def _roi_align_one(attrs: RoiAlignAttrs, img: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Pooled (C, out_h, out_w) features of one RoI [x1, y1, x2, y2] of img (C, H, W)."""
    shift = 0.5 if attrs.coordinate_transformation_mode == "half_pixel" else 0.0
    x1, y1, x2, y2 = (float(v) * attrs.spatial_scale - shift for v in box)
    w, h = x2 - x1, y2 - y1
    if shift == 0.0:
        w, h = max(w, 1.0), max(h, 1.0)
    oh, ow = attrs.output_height, attrs.output_width
    gh = attrs.sampling_ratio or math.ceil(h / oh)
    gw = attrs.sampling_ratio or math.ceil(w / ow)
    yl, yh, wyl, wyh, vy = _roi_samples(y1, h, oh, gh, img.shape[1])
    xl, xh, wxl, wxh, vx = _roi_samples(x1, w, ow, gw, img.shape[2])
    corners = np.stack([wy[:, None] * wx[None, :] * img[:, ys][:, :, xs]
                        for ys, wy in ((yl, wyl), (yh, wyh)) for xs, wx in ((xl, wxl), (xh, wxh))])
    valid = vy[:, None] & vx[None, :]
    if attrs.mode == "avg":
        samples = np.where(valid, corners.sum(axis=0), 0.0)
        pooled = samples.reshape(-1, oh, gh, ow, gw).sum(axis=(2, 4)) / max(gh * gw, 1)
    else:  # NOTE: as in ONNX Runtime, each sample is its largest weighted corner, not its value
        samples = np.where(valid, corners.max(axis=0), 0.0)
        pooled = samples.reshape(-1, oh, gh, ow, gw).max(axis=(2, 4))
    return pooled


def _roi_align_ref(attrs: RoiAlignAttrs, x, rois, batch_indices):
    out = np.zeros((rois.shape[0], x.shape[1], attrs.output_height, attrs.output_width))
    data = x.astype(np.float64)
    for i, (box, b) in enumerate(zip(rois, batch_indices)):
        out[i] = _roi_align_one(attrs, data[int(b)], box)
    return out.astype(x.dtype)


roi_align = define_op("vision.roi_align", pattern=OPAQUE, inputs=3, attrs=RoiAlignAttrs,
                      infer=_roi_align_rel, ref=_roi_align_ref,
                      doc="Pool each RoI of X into (output_height, output_width) bins by bilinear "
                          "samples averaged (avg) or maxed (max).")


# ---------------------------------------------------------------------------------------------
# NonMaxSuppression


@dataclass(frozen=True)
class NonMaxSuppressionAttrs:
    center_point_box: int = 0


def _nms_rel(attrs: NonMaxSuppressionAttrs, types, values) -> TensorType:
    boxes, scores = tensor(types[0], "boxes"), tensor(types[1], "scores")
    check_dtype(boxes, ("float32",), "boxes")
    check_dtype(scores, ("float32",), "scores")
    if boxes.shape is not None and (len(boxes.shape) != 3 or boxes.shape[2] not in (4, ANY)):
        raise TypeInferenceError(f"boxes must be [batches, boxes, 4], got {boxes.shape}")
    if scores.shape is not None and len(scores.shape) != 3:
        raise TypeInferenceError(f"scores must be [batches, classes, boxes], got {scores.shape}")
    for i, what, kind in ((2, "max_output_boxes_per_class", "int64"), (3, "iou_threshold", "float32"),
                          (4, "score_threshold", "float32")):
        if i < len(types) and types[i] is not None:
            check_dtype(tensor(types[i], what), (kind,), what)
    return TensorType((ANY, 3), "int64")


def _corners(boxes: np.ndarray, center: int) -> np.ndarray:
    """Boxes as [..., (y_min, x_min, y_max, x_max)]."""
    if center:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one corner box with many; 0 where either box or the union is empty."""
    lo = np.maximum(box[:2], others[:, :2])
    hi = np.minimum(box[2:], others[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    a, b = area(box), area(others)
    union = a + b - inter
    ok = (a > 0) & (b > 0) & (union > 0) & (inter > 0)
    return np.where(ok, inter / np.where(ok, union, 1), 0.0)


def _nms_one(boxes: np.ndarray, scores: np.ndarray, limit: int, iou: float, thresh: float | None):
    """Greedy selection for one batch and class: best score first (ties: lower index)."""
    order = np.argsort(-scores, kind="stable")
    if thresh is not None:
        order = order[scores[order] > thresh]
    chosen: list[int] = []
    for i in order:
        if len(chosen) >= limit:
            break
        if not chosen or not (_iou(boxes[i], boxes[chosen]) > iou).any():
            chosen.append(int(i))
    return chosen


def _nms_ref(attrs: NonMaxSuppressionAttrs, boxes, scores, max_out=None, iou=None, score_thresh=None):
    first = lambda v, d: v.reshape(-1)[0].item() if v is not None and v.size else d
    limit, iou_t, thresh = max(int(first(max_out, 0)), 0), float(first(iou, 0.0)), first(score_thresh, None)
    corners = _corners(boxes.astype(np.float64), attrs.center_point_box)
    rows = [(b, c, i) for b in range(scores.shape[0]) for c in range(scores.shape[1])
            for i in _nms_one(corners[b], scores[b, c], limit, iou_t, thresh)]
    return np.array(rows, np.int64).reshape(-1, 3)


non_max_suppression = define_op(
    "vision.non_max_suppression", pattern=OPAQUE, inputs=(2, 5), attrs=NonMaxSuppressionAttrs,
    infer=_nms_rel, ref=_nms_ref,
    doc="Per batch and class, greedily keep the best-scoring boxes whose IoU with kept boxes is "
        "<= iou_threshold; returns [num_selected, 3] rows (batch, class, box).")


# ---------------------------------------------------------------------------------------------
# ImageDecoder: the lossless formats a few lines of numpy + zlib can decode (BMP, PNG, PNM, TIFF).
# NOTE: JPEG, JPEG 2000 and WebP need a real codec, which is not a core dependency: decoding them
# raises EvaluationError rather than silently giving the empty image of a corrupt stream.


@dataclass(frozen=True)
class ImageDecoderAttrs:
    pixel_format: str = "RGB"

    def __post_init__(self):
        if self.pixel_format not in ("RGB", "BGR", "Grayscale"):
            raise ValueError(f"pixel_format must be RGB, BGR or Grayscale, got {self.pixel_format!r}")


def _image_decoder_rel(attrs: ImageDecoderAttrs, types, values) -> TensorType:
    s = tensor(types[0], "encoded_stream")
    check_dtype(s, ("uint8",), "encoded_stream")
    return TensorType((ANY, ANY, 1 if attrs.pixel_format == "Grayscale" else 3), "uint8")


def _decode_bmp(b: bytes) -> np.ndarray:
    """Uncompressed 24/32-bit BMP (rows bottom-up unless the height is negative)."""
    offset, = np.frombuffer(b, "<u4", 1, 10)
    w, h = (int(v) for v in np.frombuffer(b, "<i4", 2, 18))
    bpp, = np.frombuffer(b, "<u2", 1, 28)
    compression, = np.frombuffer(b, "<u4", 1, 30)
    if bpp not in (24, 32) or compression != 0:
        raise ValueError(f"unsupported BMP ({bpp} bits, compression {compression})")
    stride = (w * bpp + 31) // 32 * 4
    rows = np.frombuffer(b, np.uint8, stride * abs(h), offset).reshape(abs(h), stride)
    px = rows[:, : w * bpp // 8].reshape(abs(h), w, bpp // 8)[:, :, 2::-1]
    return px[::-1] if h > 0 else px


def _decode_pnm(b: bytes) -> np.ndarray:
    """Binary PGM (P5) / PPM (P6) with maxval <= 255."""
    tokens, pos = [], 2
    while len(tokens) < 3:
        while b[pos:pos + 1].isspace() or b[pos:pos + 1] == b"#":
            pos = b.index(b"\n", pos) + 1 if b[pos:pos + 1] == b"#" else pos + 1
        end = pos
        while not b[end:end + 1].isspace():
            end += 1
        tokens.append(int(b[pos:end]))
        pos = end
    w, h, maxval = tokens
    channels = 3 if b[:2] == b"P6" else 1
    if maxval > 255:
        raise ValueError("16-bit PNM is not supported")
    px = np.frombuffer(b, np.uint8, w * h * channels, pos + 1).reshape(h, w, channels)
    return px if maxval == 255 else np.rint(px * (255 / maxval)).astype(np.uint8)


def _png_unfilter(raw: np.ndarray, h: int, row_bytes: int, bpp: int) -> np.ndarray:
    """Undo PNG's per-row prediction filters (none, sub, up, average, paeth)."""
    rows = raw.reshape(h, row_bytes + 1)
    out = np.zeros((h, row_bytes), np.int64)
    for y in range(h):
        kind, cur = rows[y, 0], rows[y, 1:].astype(np.int64)
        up = out[y - 1] if y else np.zeros(row_bytes, np.int64)
        if kind in (0, 2):
            out[y] = (cur + (up if kind == 2 else 0)) % 256
            continue
        for x in range(0, row_bytes, bpp):
            left = out[y, x - bpp:x] if x else np.zeros(bpp, np.int64)
            diag = up[x - bpp:x] if x else np.zeros(bpp, np.int64)
            if kind == 1:
                pred = left
            elif kind == 3:
                pred = (left + up[x:x + bpp]) // 2
            else:
                p = left + up[x:x + bpp] - diag
                pa, pb, pc = np.abs(p - left), np.abs(p - up[x:x + bpp]), np.abs(p - diag)
                pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up[x:x + bpp], diag))
            out[y, x:x + bpp] = (cur[x:x + bpp] + pred) % 256
    return out.astype(np.uint8)


def _decode_png(b: bytes) -> np.ndarray:
    """8-bit, non-interlaced PNG: gray, RGB, palette, gray+alpha, RGBA (alpha dropped)."""
    import zlib

    pos, idat, palette, head = 8, [], None, None
    while pos < len(b):
        n = int.from_bytes(b[pos:pos + 4], "big")
        kind, body = b[pos + 4:pos + 8], b[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = body
        elif kind == b"PLTE":
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    w, h = int.from_bytes(head[0:4], "big"), int.from_bytes(head[4:8], "big")
    depth, color, interlace = head[8], head[9], head[12]
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    if depth != 8 or interlace:
        raise ValueError(f"unsupported PNG (bit depth {depth}, interlace {interlace})")
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8)
    px = _png_unfilter(raw, h, w * channels, channels).reshape(h, w, channels)
    if color == 3:
        return palette[px[:, :, 0]]
    return px[:, :, :3] if color in (2, 6) else px[:, :, :1]


def _decode_tiff(b: bytes) -> np.ndarray:
    """Baseline uncompressed, chunky 8-bit RGB or grayscale TIFF (first image)."""
    order = "<" if b[:2] == b"II" else ">"
    ifd = int(np.frombuffer(b, order + "u4", 1, 4)[0])
    count = int(np.frombuffer(b, order + "u2", 1, ifd)[0])
    tags: dict[int, list[int]] = {}
    for i in range(count):
        at = ifd + 2 + 12 * i
        tag, kind = (int(v) for v in np.frombuffer(b, order + "u2", 2, at))
        n = int(np.frombuffer(b, order + "u4", 1, at + 4)[0])
        size = {3: 2, 4: 4}.get(kind, 1)
        where = at + 8 if n * size <= 4 else int(np.frombuffer(b, order + "u4", 1, at + 8)[0])
        tags[tag] = [int(v) for v in np.frombuffer(b, order + {2: "u2", 4: "u4"}.get(size, "u1"), n, where)]
    w, h, spp = tags[256][0], tags[257][0], tags.get(277, [1])[0]
    if tags.get(259, [1])[0] != 1 or any(v != 8 for v in tags.get(258, [8])) or tags.get(284, [1])[0] != 1:
        raise ValueError("only uncompressed, chunky 8-bit TIFF is supported")
    data = b"".join(b[o:o + c] for o, c in zip(tags[273], tags[279]))
    px = np.frombuffer(data, np.uint8, w * h * spp).reshape(h, w, spp)
    return px[:, :, :3] if spp >= 3 else px[:, :, :1]


_DECODERS: list[tuple[tuple[bytes, ...], Callable[[bytes], np.ndarray]]] = [
    ((b"BM",), _decode_bmp), ((b"\x89PNG\r\n\x1a\n",), _decode_png), ((b"P5", b"P6"), _decode_pnm),
    ((b"II*\x00", b"MM\x00*"), _decode_tiff),
]
_LOSSY = {b"\xff\xd8\xff": "JPEG", b"\x00\x00\x00\x0cjP  ": "JPEG 2000", b"\xff\x4f\xff\x51": "JPEG 2000",
          b"RIFF": "WebP"}


def _image_decoder_ref(attrs: ImageDecoderAttrs, stream):
    """Decoded (H, W, C) uint8; an undecodable stream gives an empty (0, 0, C) image."""
    b = np.ascontiguousarray(stream, np.uint8).tobytes()
    channels = 1 if attrs.pixel_format == "Grayscale" else 3
    lossy = next((name for magic, name in _LOSSY.items() if b.startswith(magic)), None)
    if lossy:
        raise EvaluationError(f"cannot decode {lossy}: Kiln decodes only BMP, PNG, PNM and TIFF "
                              f"(no image codec library is a dependency)")
    try:
        decode = next(fn for magics, fn in _DECODERS if b.startswith(magics))
        px = decode(b)
    except (StopIteration, ValueError, IndexError, KeyError, TypeError):
        return np.zeros((0, 0, channels), np.uint8)
    if px.shape[2] == 1:
        return px if channels == 1 else np.repeat(px, 3, axis=2)
    if channels == 1:  # ITU-R 601-2 luma in 16-bit fixed point, rounded
        luma = (px.astype(np.uint32) * np.array([19595, 38470, 7471], np.uint32)).sum(axis=2) + 0x8000
        return (luma >> 16).astype(np.uint8)[:, :, None]
    return np.ascontiguousarray(px[:, :, ::-1] if attrs.pixel_format == "BGR" else px)


image_decoder = define_op("vision.image_decoder", host_only=True, pattern=OPAQUE, attrs=ImageDecoderAttrs,
                          infer=_image_decoder_rel, ref=_image_decoder_ref,
                          doc="Decode a BMP / PNG / PNM / TIFF byte stream to an (H, W, C) uint8 image "
                              "in RGB, BGR or Grayscale.")
