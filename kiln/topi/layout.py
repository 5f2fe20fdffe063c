"""Computes of the data-layout operators (kiln/op/layout.py): layout_transform, the blocked
NCHW[x]c convolution and pooling in a blocked layout. They let the regions AlterOpLayout builds
compile instead of running on the host.

A grouped blocked conv (the batched GEMM of Winograd) reads its group's input channel blocks.
The blocked conv reads a padded copy of its input (a Select on bounds computed once) so the taps
of a window never test bounds; its reduction runs over (input channel blocks, kernel rows,
kernel columns, channels in a block), the order the x86 schedule keeps in registers. A pointwise
conv (1x1, stride 1, no padding) may run its pixels as one axis ("conv.flat", see _pointwise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kiln import te, tir
from kiln.ir.dtype import to_numpy
from kiln.op.layout import Layout, nchw_pool_attrs, parse_layout
from kiln.op.nn import Window
from kiln.target import Target
from kiln.te.tensor import lowest
from kiln.tir import PrimExpr, select
from kiln.topi.elemwise import wide_dtype
from kiln.topi.knobs import knob
from kiln.topi.nn import MAX_TAKEN, window_count
from kiln.topi.registry import ComputeError, get_compute, register_compute, static_shape


def _static(d: PrimExpr) -> int | None:
    return d.value if isinstance(d, tir.IntImm) else None


@register_compute("tensor.layout_transform")
def _layout_transform(attrs, inputs, out_type, consts):
    x = inputs[0]
    src, dst = parse_layout(attrs.src_layout), parse_layout(attrs.dst_layout)
    shape = tuple(x.shape)
    logical: dict[str, PrimExpr] = {}  # logical (padding included) size of each primal axis of x
    for p in src.primals:
        d = shape[src.index(p)]
        f = src.block(p)
        logical[p] = (tir.const(_static(d) * f) if _static(d) is not None else d * f) if f else d
    sizes = dict(zip(dst.primals, attrs.sizes)) if attrs.sizes else {}
    out_dims: list[PrimExpr] = []
    for a, f in dst.axes:
        if f:
            out_dims.append(tir.const(f))
            continue
        n, g = (tir.const(sizes[a]) if sizes.get(a) else logical[a]), dst.block(a)
        if g:
            s = _static(n)
            if s is None and g > 1:
                raise ComputeError(f"layout_transform to {dst.name}: axis {a} of unknown size cannot be blocked")
            n = tir.const(-(-s // g)) if s is not None else n
        out_dims.append(n)

    def f(*i):
        idx: dict[str, PrimExpr] = {}
        for p in dst.primals:
            g = dst.block(p)
            idx[p] = i[dst.index(p)] * g + i[dst.sub_index(p)] if g else i[dst.index(p)]
        conds = []
        for p in src.primals:
            n = _static(logical[p])
            g = dst.block(p)
            if g and n is not None and n % g:
                conds.append(idx[p] < n)
        src_idx = []
        for a, fa in src.axes:
            g = src.block(a)
            if fa:
                src_idx.append(idx[a] % g)
            else:
                src_idx.append(idx[a] // g if g else idx[a])
        cond = tir.all_of(conds) if conds else None
        v = x(*src_idx)
        return v if cond is None else select(cond, v, tir.const(0, x.dtype))

    # NCHW[x]c -> NCHW: the source's innermost axis is a block of an axis the destination keeps whole (the
    # schedule reads it whole: kiln.topi.schedule_transform.unblock_nest); NCHW -> NCHW[x]c: the
    # destination's innermost axis is a block of an axis the source keeps whole (written whole: block_nest)
    nest: dict | None = None
    inner, g = src.axes[-1]
    if g and not dst.block(inner) and inner in dst.primals:
        nest = {"unblock": (dst.index(inner), g)}
    inner, g = dst.axes[-1]
    if g and not src.block(inner) and inner in src.primals:
        nest = {"block": g}
    return te.compute(tuple(out_dims), f, name="layout_transform", attrs=nest)


# ---------------------------------------------------------------------------------------------
# blocked convolution


def pad_blocked(x: te.Tensor, pads: Sequence[tuple[int, int]], fill: PrimExpr, name: str = "pad") -> te.Tensor:
    """x (N, C, H, W, c) padded on H and W by (before, after) with `fill`."""
    if not any(b or e for b, e in pads):
        return x
    n, c, h, w, cb = x.shape
    (pt, pb), (pl, pr) = pads
    hs, ws = _static(h), _static(w)

    def f(i, j, y, z, k):
        ok = [(y >= pt) & (y - pt < hs)] if pt or pb else []
        ok += [(z >= pl) & (z - pl < ws)] if pl or pr else []
        return select(tir.all_of(ok), x(i, j, y - pt, z - pl, k), fill)

    return te.compute((n, c, hs + pt + pb, ws + pl + pr, cb), f, name=name)


def _cast(dtype: str, v: PrimExpr) -> PrimExpr:
    return tir.cast(dtype, v)


@register_compute("nn.conv2d_nchwc")
def _conv2d_nchwc(attrs, inputs, out_type, consts):
    x, w, b = inputs[:3]
    data, kernel = parse_layout(attrs.data_layout), parse_layout(attrs.kernel_layout)
    if data.axes != (("N", 0), ("C", 0), ("H", 0), ("W", 0), ("C", data.block("C"))) or \
            kernel.axes != (("O", 0), ("I", 0), ("H", 0), ("W", 0), ("I", kernel.block("I")), ("O", kernel.block("O"))):
        raise ComputeError(f"nn.conv2d_nchwc: layouts {data.name}/{kernel.name} are not NCHW[x]c/OIHW[x]i[y]o")
    xs = x.shape
    if not all(_static(d) is not None for d in xs[1:]):
        raise ComputeError(f"nn.conv2d_nchwc: needs static channel and spatial dims, got {xs}")
    ws = static_shape("nn.conv2d_nchwc", w)
    oco, ico, kh, kw, icb, ocb = ws
    win = Window.of(attrs, (kh, kw))
    out, pads, _ = win.layout((_static(xs[2]), _static(xs[3])))
    acc = wide_dtype(x.dtype)
    xp = pad_blocked(x, pads, tir.const(0, x.dtype))
    (sh, sw), (dh, dw) = win.strides, win.dilations
    group = attrs.group
    if group > 1 and icb == 1 and ico == 1 and ocb == _static(xs[4]) and oco == _static(xs[1]):
        return _depthwise(x, w, b, xp, (oco, out[0], out[1], ocb), win, acc)
    if group > 1 and (oco % group or ico * group != _static(xs[1]) or icb != _static(xs[4])):
        raise ComputeError(f"nn.conv2d_nchwc: group {attrs.group} does not split {oco} output and "
                           f"{_static(xs[1])} input channel blocks evenly")
    per_group = oco // group  # output channel blocks of one group; it reads input blocks g*ico ...
    size = _bytes(x)  # of the pixels a 1x1 conv reads: a strided one reads out[0] x out[1] of them
    size = size * out[0] * out[1] // (_static(xs[2]) * _static(xs[3])) if size else None
    if (kh, kw) == (1, 1) and xp is x and \
            knob("conv.flat", (False, True), flat_by_default(size // group if size else None, oco, Target.current())):
        return _pointwise(x, w, b, (oco, out[0], out[1], ocb), acc, per_group if group > 1 else None, (sh, sw))

    def f(n, m, y, z, mc):
        c = te.reduce_axis(ico, "c")
        ry, rx = te.reduce_axis(kh, "ky"), te.reduce_axis(kw, "kx")
        ci = te.reduce_axis(icb, "ci")
        cin = c.var if group == 1 else m // per_group * ico + c.var
        v = _cast(acc, xp(n, cin, y * sh + ry.var * dh, z * sw + rx.var * dw, ci.var)) * \
            _cast(acc, w(m, c.var, ry.var, rx.var, ci.var, mc))
        return te.sum(v, [c, ry, rx, ci])

    # per_group: the schedule splits the output blocks by it first, so that one tile's blocks share one group's
    # input index (else the index differs per block and gcc loads every broadcast once per block)
    y = te.compute((xs[0], oco, out[0], out[1], ocb), f, name="conv_acc",
                   attrs={"per_group": per_group} if group > 1 else None)

    def finish(n, m, oy, ox, mc):
        v = y(n, m, oy, ox, mc)
        return _cast(x.dtype, v + _cast(acc, b(m, mc)) if b is not None else v)

    return te.compute(y.shape, finish, name="conv")


# a pointwise conv's pixels run as one axis (knob "conv.flat") by default while its input stays in cache across
# the output channel tiles (the loop order is then channel tiles outside pixels: each tile reads the whole input)
# and there are enough channel tiles to share among the cores (the parallel loop is over them alone). Whole model
# against rows, builds in separate kernel caches, a run of each in turn, median of the paired ratios: this rule,
# 2 threads: resnet50 0.982, mobilenet_v2 0.981 (batch 8: 0.968), efficientnet_b0 0.997 (1 thread: 0.952);
# inputs up to half an L2 with no rule on blocks: resnet50 0.965 (1 thread: 0.994), mobilenet_v2 0.975 (0.947);
# every pointwise conv flat: resnet50 1.028 (inputs past L2 re-read once per channel tile, and the Winograd
# transforms after them 5-30% slower). A grouped pointwise conv (Winograd's batched products: one 1x1 conv per
# tile position over a 7- or 14-wide grid of tiles) weighs the input of one group; flat, its 2 x 6 tiles replace
# rows of one 2 x 7 tile (a weight from memory) or 6 + 6 + 2 columns. Against rows (kernels paired, 2 threads,
# AMD EPYC): resnet18's products 0.90-0.94x, kernel sum 0.965; resnet50's 0.88-0.93x, kernel sum 0.971
FLAT_INPUT_L2_SHARE = 2  # the input fits in 1/FLAT_INPUT_L2_SHARE of a core's L2
FLAT_BLOCKS_PER_CORE = 4  # output channel blocks per core, at least (two tiles of two blocks)


def flat_by_default(input_bytes: int | None, out_blocks: int, target: Target) -> bool:
    """Whether a pointwise conv runs its pixels as one axis unless a tuning record says otherwise (the compute
    passes Target.current(): the registry gives computes no target)."""
    return (input_bytes is not None and input_bytes <= target.l2_bytes // FLAT_INPUT_L2_SHARE
            and out_blocks >= FLAT_BLOCKS_PER_CORE * target.cores)


def _bytes(t: te.Tensor) -> int | None:
    """Bytes of one batch item of `t` (None when a dim is symbolic)."""
    dims = [_static(d) for d in t.shape[1:]]
    return None if None in dims else math.prod(dims) * np.dtype(to_numpy(t.dtype)).itemsize


def _pointwise(x: te.Tensor, w: te.Tensor, b: te.Tensor | None, shape: tuple[int, ...], acc: str,
               per_group: int | None = None, strides: tuple[int, int] = (1, 1)) -> te.Tensor:
    """A 1x1 conv of stride 1 without padding is a product over pixels: its accumulator runs over the
    pixels of all rows as one axis (N, C, 1, H*W, c; the "pixels" attribute holds W), so that a column tile
    never ends at a row's end: 14-wide rows in 6-column tiles leave a 2-column tile (4 accumulators, half
    the FMA rate), 7-wide rows a 7-column tile whose 15th register spills. Only the last tile of the map is
    short. Alone (1 thread), 1024 -> 256 at 14x14 runs at 75.5-77.4 GFLOP/s flat against 68.7-71.9 in rows;
    in a model flat pays only where the input stays in L2 (flat_by_default), which that one's 800 KB do not.
    A grouped conv (`per_group` output blocks a group, whole input blocks) reads its group's input blocks.
    A strided one (resnet's downsampling projections: 14- and 7-wide output rows) reads every sh-th row
    and sw-th column in place; its flat default weighs the pixels it reads. resnet50's 512 -> 1024 (14x14
    out) and 1024 -> 2048 (7x7 out), flat against rows, paired in the model (2 threads): 0.88-0.94x and
    0.84-0.86x (materializing the strided pixels first: no faster)."""
    oco, oh, ow, ocb = shape
    ico, icb = w.shape[1], w.shape[4]
    sh, sw = strides

    def f(n, m, one, p, mc):
        c, ci = te.reduce_axis(ico, "c"), te.reduce_axis(icb, "ci")
        ry, rx = te.reduce_axis(1, "ky"), te.reduce_axis(1, "kx")
        cin = c.var if per_group is None else m // per_group * ico + c.var
        v = _cast(acc, x(n, cin, p // ow * sh + ry.var, p % ow * sw + rx.var, ci.var)) * \
            _cast(acc, w(m, c.var, ry.var, rx.var, ci.var, mc))
        return te.sum(v, [c, ry, rx, ci])

    attrs = {"pixels": ow} if per_group is None else {"pixels": ow, "per_group": per_group}
    y = te.compute((x.shape[0], oco, 1, oh * ow, ocb), f, name="conv_acc", attrs=attrs)

    def finish(n, m, oy, ox, mc):
        v = y(n, m, 0, oy * ow + ox, mc)
        return _cast(x.dtype, v + _cast(acc, b(m, mc)) if b is not None else v)

    return te.compute((x.shape[0], oco, oh, ow, ocb), finish, name="conv")


def _depthwise(x: te.Tensor, w: te.Tensor, b: te.Tensor | None, xp: te.Tensor, shape: tuple[int, ...],
               win: Window, acc: str) -> te.Tensor:
    """One input channel per output channel: the channel block is the vector, the taps the reduction."""
    (sh, sw), (dh, dw) = win.strides, win.dilations

    def f(n, m, y, z, mc):
        ry, rx = te.reduce_axis(win.kernel[0], "ky"), te.reduce_axis(win.kernel[1], "kx")
        v = _cast(acc, xp(n, m, y * sh + ry.var * dh, z * sw + rx.var * dw, mc)) * \
            _cast(acc, w(m, 0, ry.var, rx.var, 0, mc))
        return te.sum(v, [ry, rx])

    y = te.compute((x.shape[0],) + shape, f, name="depthwise_acc", attrs={"stride_w": sw})

    def finish(n, m, oy, ox, mc):
        v = y(n, m, oy, ox, mc)
        return _cast(x.dtype, v + _cast(acc, b(m, mc)) if b is not None else v)

    return te.compute(y.shape, finish, name="depthwise")


# ---------------------------------------------------------------------------------------------
# pooling in a blocked layout (NCHW[x]c)


def _blocked(lay: Layout) -> bool:
    return lay.axes == (("N", 0), ("C", 0), ("H", 0), ("W", 0), ("C", lay.block("C")))


@register_compute("nn.pool2d_layout")
def _pool2d_layout(attrs, inputs, out_type, consts):
    x = inputs[0]
    lay = parse_layout(attrs.layout)
    if attrs.layout == "NCHW" and attrs.mode == "max":  # a max pool whose indices nobody reads
        _, nchw_attrs = nchw_pool_attrs(attrs)
        return get_compute("nn.max_pool")(nchw_attrs, inputs, out_type, consts)[0]
    if not _blocked(lay) or attrs.mode not in ("max", "average", "global_average", "global_max"):
        raise ComputeError(f"nn.pool2d_layout: no compute for mode {attrs.mode} in layout {attrs.layout}")
    n, c, h, w, cb = x.shape
    hs, ws = _static(h), _static(w)
    if hs is None or ws is None:
        raise ComputeError("nn.pool2d_layout: needs static spatial dims")
    acc = wide_dtype(x.dtype)
    if attrs.mode.startswith("global"):
        ry, rx = te.reduce_axis(hs, "ky"), te.reduce_axis(ws, "kx")
        if attrs.mode == "global_max":
            return te.compute((n, c, 1, 1, cb), lambda i, j, y, z, k: te.max(x(i, j, ry.var, rx.var, k), [ry, rx]),
                              name="global_max_pool")
        total = te.compute((n, c, 1, 1, cb),
                           lambda i, j, y, z, k: te.sum(_cast(acc, x(i, j, ry.var, rx.var, k)), [ry, rx]),
                           name="global_average_pool_sum")
        inv = tir.const(1.0 / (hs * ws), acc)
        return te.compute(total.shape, lambda *i: _cast(x.dtype, total(*i) * inv), name="global_average_pool")
    _, nchw_attrs = nchw_pool_attrs(attrs)
    win = Window.of(nchw_attrs, nchw_attrs.kernel_shape, nchw_attrs.ceil_mode)
    out, pads, extra = win.layout((hs, ws))
    widths = [(p0, p1 + e) for (p0, p1), e in zip(pads, extra)]
    (sh, sw), (dh, dw) = win.strides, win.dilations
    if attrs.mode == "max":
        fill = tir.const(float("-inf"), x.dtype) if tir.is_float(x.dtype) else lowest(x.dtype)
        xp = pad_blocked(x, widths, fill)

        def fmax(i, j, y, z, k):
            ry, rx = te.reduce_axis(win.kernel[0], "ky"), te.reduce_axis(win.kernel[1], "kx")
            return MAX_TAKEN(xp(i, j, y * sh + ry.var * dh, z * sw + rx.var * dw, k), [ry, rx])

        return te.compute((n, c, out[0], out[1], cb), fmax, name="max_pool")
    xp = pad_blocked(x, widths, tir.const(0, x.dtype))

    def fsum(i, j, y, z, k):
        ry, rx = te.reduce_axis(win.kernel[0], "ky"), te.reduce_axis(win.kernel[1], "kx")
        return te.sum(_cast(acc, xp(i, j, y * sh + ry.var * dh, z * sw + rx.var * dw, k)), [ry, rx])

    total = te.compute((n, c, out[0], out[1], cb), fsum, name="average_pool_sum")

    def f(i, j, y, z, k):
        return _cast(x.dtype, total(i, j, y, z, k) / window_count((y, z), win, (hs, ws), pads, attrs.count_include_pad,
                                                                  acc))

    return te.compute(total.shape, f, name="average_pool")

from kiln.topi import winograd  # noqa: F401,E402  (the Winograd transforms around the grouped blocked conv)
