"""Data-layout operators: layout_transform between NCHW / NHWC / blocked NCHW[x]c layouts, and
the 2-D convolution and pooling forms that take those layouts (targets of ConvertLayout and
AlterOpLayout).

A layout is a string of axes: an upper-case letter is a primal axis (`C`), a number and the
same letter in lower case is a block of it (`8c`: the inner 8 channels), so `NCHW8c` holds
a logical NCHW tensor as (N, ceil(C/8), H, W, 8). Packing pads a primal axis to a multiple of
its block with zeros; unpacking keeps the padding unless `sizes` crops it. The conv and pool
ops below reuse the NCHW operators' type relations and references through these layouts, so
geometry rules stay in kiln/op/nn.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.nn import ConvAttrs
from kiln.op.registry import INJECTIVE, OUT_EWISE_FUSABLE, define_op, get_op
from kiln.op.typerel import tensor

# ---------------------------------------------------------------------------------------------
# layouts


@dataclass(frozen=True)
class Layout:
    """A parsed layout: `axes` are (letter, block) pairs; block 0 marks a primal axis."""

    name: str
    axes: tuple[tuple[str, int], ...]

    @property
    def primals(self) -> tuple[str, ...]:
        return tuple(a for a, f in self.axes if not f)

    @property
    def rank(self) -> int:
        return len(self.axes)

    def index(self, letter: str) -> int:
        return self.axes.index((letter, 0))

    def block(self, letter: str) -> int:
        """Block factor of primal `letter` (0: not blocked)."""
        return next((f for a, f in self.axes if a == letter and f), 0)

    def sub_index(self, letter: str) -> int:
        return next(i for i, (a, f) in enumerate(self.axes) if a == letter and f)

    @property
    def is_permutation(self) -> bool:
        return all(not f for _, f in self.axes)


@functools.cache
def parse_layout(s: str) -> Layout:
    """`NCHW8c` -> Layout; raises TypeInferenceError naming the problem."""
    axes: list[tuple[str, int]] = []
    i = 0
    while i < len(s):
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        if j >= len(s) or not s[j].isalpha():
            raise TypeInferenceError(f"layout {s!r}: expected a letter at position {j}")
        ch = s[j]
        if j > i:
            if not ch.islower() or int(s[i:j]) < 1:
                raise TypeInferenceError(f"layout {s!r}: a block is a positive size and a lower-case letter")
            axes.append((ch.upper(), int(s[i:j])))
        elif ch.isupper():
            axes.append((ch, 0))
        else:
            raise TypeInferenceError(f"layout {s!r}: lower-case axis {ch!r} needs a block size")
        i = j + 1
    lay = Layout(s, tuple(axes))
    prim = lay.primals
    blocks = [a for a, f in axes if f]
    if len(set(prim)) != len(prim) or len(set(blocks)) != len(blocks):
        raise TypeInferenceError(f"layout {s!r} repeats an axis")
    if any(b not in prim for b in blocks):
        raise TypeInferenceError(f"layout {s!r} blocks an axis it does not have")
    return lay


def is_blocked(s: str) -> bool:
    return not parse_layout(s).is_permutation


def primal_dims(lay: Layout, shape: tuple[Dim, ...]) -> dict[str, Dim]:
    """Logical (unpacked, padding included) size of each primal axis of a tensor in `lay`."""
    out: dict[str, Dim] = {}
    for p in lay.primals:
        d = shape[lay.index(p)]
        f = lay.block(p)
        if f:
            inner = shape[lay.sub_index(p)]
            if isinstance(inner, int) and inner != f:
                raise TypeInferenceError(f"axis {p.lower()} of layout {lay.name} has size {inner}; expected {f}")
            d = d * f if isinstance(d, int) else ANY
        out[p] = d
    return out


def packed_shape(lay: Layout, dims: dict[str, Dim]) -> tuple[Dim, ...]:
    """Shape in `lay` of a tensor with logical primal sizes `dims` (blocked axes rounded up)."""
    out: list[Dim] = []
    for a, f in lay.axes:
        if f:
            out.append(f)
            continue
        d, g = dims[a], lay.block(a)
        out.append((-(-d // g) if isinstance(d, int) else (d if g == 1 else ANY)) if g else d)
    return tuple(out)


def unpack(x: np.ndarray, lay: Layout) -> np.ndarray:
    """Array in `lay` -> array over `lay.primals` (blocks merged, padding kept)."""
    order: list[int] = []
    merged: list[int] = []
    for p in lay.primals:
        order.append(lay.index(p))
        if lay.block(p):
            order.append(lay.sub_index(p))
            merged.append(x.shape[lay.index(p)] * lay.block(p))
        else:
            merged.append(x.shape[lay.index(p)])
    return x.transpose(order).reshape(merged)


def pack(x: np.ndarray, primals: tuple[str, ...], lay: Layout) -> np.ndarray:
    """Array over `primals` -> array in `lay` (blocked axes zero-padded to a multiple)."""
    x = x.transpose([primals.index(p) for p in lay.primals])
    widths = [(0, -x.shape[i] % lay.block(p)) if lay.block(p) else (0, 0) for i, p in enumerate(lay.primals)]
    if any(w for _, w in widths):
        x = np.pad(x, widths)
    split: list[int] = []
    pos: dict[tuple[str, int], int] = {}
    for i, p in enumerate(lay.primals):
        f = lay.block(p)
        pos[(p, 0)] = len(split)
        split.append(x.shape[i] // f if f else x.shape[i])
        if f:
            pos[(p, f)] = len(split)
            split.append(f)
    return x.reshape(split).transpose([pos[a] for a in lay.axes])


def convert_array(x: np.ndarray, src: str, dst: str, sizes: tuple[int, ...] = ()) -> np.ndarray:
    """The reference of layout_transform: unpack `src`, crop to `sizes`, pack `dst`."""
    s, d = parse_layout(src), parse_layout(dst)
    flat = unpack(x, s)
    if sizes:
        index = [slice(None)] * flat.ndim
        for p, n in zip(d.primals, sizes):
            if n:
                index[s.primals.index(p)] = slice(0, n)
        flat = flat[tuple(index)]
    return pack(flat, s.primals, d)


# ---------------------------------------------------------------------------------------------
# layout_transform


@dataclass(frozen=True)
class LayoutTransformAttrs:
    """`sizes` (one per primal axis of dst_layout, 0: keep) crops padding when unpacking."""

    src_layout: str
    dst_layout: str
    sizes: tuple[int, ...] = ()


def _check_pair(src: Layout, dst: Layout, sizes: tuple[int, ...]) -> None:
    if sorted(src.primals) != sorted(dst.primals):
        raise TypeInferenceError(f"layouts {src.name} and {dst.name} have different axes")
    if sizes and len(sizes) != len(dst.primals):
        raise TypeInferenceError(f"sizes {sizes} needs one entry per axis of {dst.name}")
    for p, n in zip(dst.primals, sizes):
        if n and not src.block(p):
            raise TypeInferenceError(f"sizes crops axis {p}, which {src.name} does not block")


def transformed_type(t: TensorType, attrs: LayoutTransformAttrs) -> TensorType:
    src, dst = parse_layout(attrs.src_layout), parse_layout(attrs.dst_layout)
    _check_pair(src, dst, attrs.sizes)
    if t.shape is None:
        return TensorType((ANY,) * dst.rank, t.dtype)
    if len(t.shape) != src.rank:
        raise TypeInferenceError(f"input {t} does not have the rank of layout {src.name}")
    dims = primal_dims(src, t.shape)
    for p, n in zip(dst.primals, attrs.sizes):
        if n:
            if isinstance(dims[p], int) and n > dims[p]:
                raise TypeInferenceError(f"cannot crop axis {p} of size {dims[p]} to {n}")
            dims[p] = n
    return TensorType(packed_shape(dst, dims), t.dtype)


layout_transform = define_op(
    "tensor.layout_transform", pattern=INJECTIVE, attrs=LayoutTransformAttrs,
    infer=lambda a, t, v: transformed_type(tensor(t[0]), a),
    ref=lambda a, x: np.ascontiguousarray(convert_array(x, a.src_layout, a.dst_layout, a.sizes)),
    doc="Move a tensor between layouts (NCHW, NHWC, NCHW8c, OIHW8i8o, ...), zero-padding blocked axes.")


# ---------------------------------------------------------------------------------------------
# conv2d in other layouts: type relation and reference go through nn.conv in NCHW / OIHW


def _to_layout_type(t: TensorType, src: str, dst: str) -> TensorType:
    return transformed_type(t, LayoutTransformAttrs(src, dst))


def _conv_attrs(a) -> ConvAttrs:
    return ConvAttrs(auto_pad=a.auto_pad, dilations=a.dilations, group=getattr(a, "group", 1),
                     pads=a.pads, strides=a.strides)


def _check_layout(t: TensorType, lay: str, kind: str, what: str) -> None:
    letters = parse_layout(lay).primals
    if sorted(letters) != sorted(kind) or len(parse_layout(lay).axes) > len(kind) + 2:
        raise TypeInferenceError(f"{what} layout {lay!r} must be a form of {kind}")
    if t.shape is not None and len(t.shape) != parse_layout(lay).rank:
        raise TypeInferenceError(f"{what} {t} does not have the rank of layout {lay}")


def _conv_layout_rel(a, types, data: str, kernel: str, out: str, bias: str) -> TensorType:
    x, w = tensor(types[0], "X"), tensor(types[1], "W")
    _check_layout(x, data, "NCHW", "X")
    _check_layout(w, kernel, "OIHW", "W")
    b = tensor(types[2], "B") if len(types) > 2 and types[2] is not None else None
    nchw = [_to_layout_type(x, data, "NCHW"), _to_layout_type(w, kernel, "OIHW"),
            _to_layout_type(b, bias, "C") if b is not None else None]
    y = get_op("nn.conv").type_rel(_conv_attrs(a), nchw, [None] * 3)
    return _to_layout_type(y, "NCHW", out)


def _conv_layout_ref(a, x, w, b, data: str, kernel: str, out: str, bias: str) -> np.ndarray:
    conv = get_op("nn.conv")
    args = [convert_array(x, data, "NCHW"), convert_array(w, kernel, "OIHW")]
    if b is not None:
        args.append(convert_array(b, bias, "C"))
    y = conv.reference(_conv_attrs(a), *args)
    return np.ascontiguousarray(convert_array(y, "NCHW", out))


@dataclass(frozen=True)
class Conv2dNHWCAttrs:
    auto_pad: str = "NOTSET"
    dilations: tuple[int, ...] | None = None
    group: int = 1
    kernel_layout: str = "HWIO"
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


conv2d_nhwc = define_op(
    "nn.conv2d_nhwc", host_only=True, pattern=OUT_EWISE_FUSABLE, inputs=(2, 3), attrs=Conv2dNHWCAttrs,
    infer=lambda a, t, v: _conv_layout_rel(a, t, "NHWC", a.kernel_layout, "NHWC", "C"),
    ref=lambda a, x, w, b=None: _conv_layout_ref(a, x, w, b, "NHWC", a.kernel_layout, "NHWC", "C"),
    doc="2-D grouped convolution of X (N, H, W, C) with W in kernel_layout (HWIO, OHWI, ...).")


@dataclass(frozen=True)
class Conv2dNCHWcAttrs:
    """data_layout NCHW[x]c, kernel_layout OIHW[x]i[y]o; the output is NCHW[y]c, bias is C[y]c.
    `group` > 1 is a depthwise conv (one input channel per output channel: kernel OIHW1i[x]o) or a grouped
    conv whose groups hold whole channel blocks (Winograd's batched GEMM, kiln/op/winograd.py)."""

    data_layout: str
    kernel_layout: str
    auto_pad: str = "NOTSET"
    dilations: tuple[int, ...] | None = None
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    group: int = 1


def nchwc_layouts(a: Conv2dNCHWcAttrs) -> tuple[str, str]:
    """(output layout, bias layout) of a blocked conv: both blocked by the kernel's `o` block."""
    k = parse_layout(a.kernel_layout)
    d = parse_layout(a.data_layout)
    depthwise = a.group > 1 and k.block("I") == 1 and k.block("O") == d.block("C")
    if (k.block("I") != d.block("C") and not depthwise) or not k.block("O"):
        raise TypeInferenceError(f"kernel_layout {a.kernel_layout} must block I as data_layout "
                                 f"{a.data_layout} blocks C, and block O")
    oc = k.block("O")
    return f"NCHW{oc}c", f"C{oc}c"


def _nchwc_rel(a, types, values):
    out, bias = nchwc_layouts(a)
    return _conv_layout_rel(a, types, a.data_layout, a.kernel_layout, out, bias)


def _nchwc_ref(a, x, w, b=None):
    out, bias = nchwc_layouts(a)
    return _conv_layout_ref(a, x, w, b, a.data_layout, a.kernel_layout, out, bias)


conv2d_nchwc = define_op(
    "nn.conv2d_nchwc", pattern=OUT_EWISE_FUSABLE, inputs=(2, 3), attrs=Conv2dNCHWcAttrs,
    infer=_nchwc_rel, ref=_nchwc_ref,
    doc="2-D convolution in blocked layout: X NCHW[x]c, W OIHW[x]i[y]o, B C[y]c -> NCHW[y]c.")


# ---------------------------------------------------------------------------------------------
# pooling in other layouts


# mode -> NCHW pooling operator
POOL_OPS = {"max": "nn.max_pool", "average": "nn.average_pool", "lp": "nn.lp_pool",
            "global_average": "nn.global_average_pool", "global_max": "nn.global_max_pool",
            "global_lp": "nn.global_lp_pool"}


@dataclass(frozen=True)
class Pool2dLayoutAttrs:
    mode: str
    layout: str
    kernel_shape: tuple[int, ...] | None = None
    auto_pad: str = "NOTSET"
    ceil_mode: int = 0
    count_include_pad: int = 0
    dilations: tuple[int, ...] | None = None
    p: int = 2
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def nchw_pool_attrs(a: Pool2dLayoutAttrs):
    """The attrs of the NCHW pooling operator this pooling call is a relayout of."""
    op = get_op(POOL_OPS[a.mode]) if a.mode in POOL_OPS else None
    if op is None:
        raise TypeInferenceError(f"mode {a.mode!r} is not one of {', '.join(POOL_OPS)}")
    if op.attrs_type is None:
        return op, None
    return op, op.attrs_type(**{f.name: getattr(a, f.name) for f in fields(op.attrs_type)
                                if hasattr(a, f.name)})


def _pool_rel(a, types, values):
    x = tensor(types[0], "X")
    _check_layout(x, a.layout, "NCHW", "X")
    op, attrs = nchw_pool_attrs(a)
    y = op.type_rel(attrs, [_to_layout_type(x, a.layout, "NCHW")], [None])
    y = y.fields[0] if isinstance(y, TupleType) else y
    return _to_layout_type(y, "NCHW", a.layout)


def _pool_ref(a, x):
    op, attrs = nchw_pool_attrs(a)
    y = op.reference(attrs, convert_array(x, a.layout, "NCHW"))
    y = y[0] if isinstance(y, tuple) else y
    return np.ascontiguousarray(convert_array(y, "NCHW", a.layout))


pool2d_layout = define_op(
    "nn.pool2d_layout", pattern=OUT_EWISE_FUSABLE, attrs=Pool2dLayoutAttrs, infer=_pool_rel, ref=_pool_ref,
    doc="2-D pooling (max/average/lp, or global_*) of X in `layout` (NHWC, NCHW8c, ...); "
        "the pooled values only (no max indices).")


def padding_of(size: Dim, block: int) -> int | None:
    """Zero entries a block of `block` adds to an axis of `size` (None when unknown)."""
    return -size % block if isinstance(size, int) else (0 if block == 1 else None)


__all__ = [
    "POOL_OPS",
    "Layout",
    "conv2d_nchwc",
    "conv2d_nhwc",
    "convert_array",
    "is_blocked",
    "layout_transform",
    "parse_layout",
    "pool2d_layout",
    "transformed_type",
]
