"""Injective computes: every output element reads one input element at a computed index
(reshape, transpose, concat, split, slice, gather family, pad, expand, tile, squeeze/unsqueeze,
flatten, depth/space moves, creation ops). Scatters are in kiln/topi/scatter.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.op.concat_slice import even_split, slice_bounds
from kiln.op.reshape import transpose_perm
from kiln.tir import PrimExpr, select
from kiln.topi.registry import (
    ComputeError,
    broadcast_load,
    const_ints,
    const_value,
    out_dims,
    register_compute,
    static_shape,
)


def ravel(idx: Sequence[PrimExpr], shape: Sequence[PrimExpr]) -> PrimExpr:
    flat: PrimExpr = tir.const(0)
    for i, d in zip(idx, shape):
        flat = flat * d + i
    return flat


def unravel(flat: PrimExpr, shape: Sequence[PrimExpr]) -> list[PrimExpr]:
    out = []
    for d in reversed(shape):
        out.append(flat % d)
        flat = flat // d
    return out[::-1]


def reshape_to(x: te.Tensor, shape: Sequence[PrimExpr], name: str = "reshape") -> te.Tensor:
    return te.compute(shape, lambda *i: x(*unravel(ravel(i, shape), x.shape)), name=name)


def norm_index(v: PrimExpr, n: PrimExpr) -> PrimExpr:
    """An index that may count from the end (negative) as an int64 index."""
    v = tir.cast("int64", v)
    return select(v < 0, v + n, v)


def checked_index(v: PrimExpr, n: PrimExpr) -> PrimExpr:
    """norm_index, checked in the kernel: an index outside [-n, n) makes the kernel fail with
    KILN_ERR_INDEX (kiln_runtime.h) instead of reading outside the tensor."""
    n = tir.cast("int64", n)
    return tir.Call("int64", "check_index", (norm_index(v, n), n))


@register_compute("tensor.reshape")
def _reshape(attrs, inputs, out_type, consts):
    return reshape_to(inputs[0], out_dims(out_type, inputs))


@register_compute("tensor.flatten")
def _flatten(attrs, inputs, out_type, consts):
    return reshape_to(inputs[0], out_dims(out_type, inputs), "flatten")


@register_compute("tensor.squeeze")
def _squeeze(attrs, inputs, out_type, consts):
    x = inputs[0]
    if inputs[1] is None:
        axes = tuple(a for a, n in enumerate(static_shape("tensor.squeeze", x)) if n == 1)
    else:
        axes = tuple(a % x.ndim for a in const_ints("tensor.squeeze", consts, 1, "axes"))
    keep = [a for a in range(x.ndim) if a not in axes]

    def f(*i):
        pos = dict(zip(keep, i))
        return x(*(pos.get(a, tir.const(0)) for a in range(x.ndim)))

    return te.compute([x.shape[a] for a in keep], f, name="squeeze")


@register_compute("tensor.unsqueeze")
def _unsqueeze(attrs, inputs, out_type, consts):
    x = inputs[0]
    shape = out_dims(out_type, inputs)
    axes = {a % len(shape) for a in const_ints("tensor.unsqueeze", consts, 1, "axes")}
    return te.compute(shape, lambda *i: x(*(v for a, v in enumerate(i) if a not in axes)), name="unsqueeze")


@register_compute("tensor.transpose")
def _transpose(attrs, inputs, out_type, consts):
    x = inputs[0]
    perm = transpose_perm(attrs.perm, x.ndim)

    def f(*i):
        src = [None] * x.ndim
        for k, p in enumerate(perm):
            src[p] = i[k]
        return x(*src)

    return te.compute([x.shape[p] for p in perm], f, name="transpose")


@register_compute("tensor.concat")
def _concat(attrs, inputs, out_type, consts):
    xs = [x for x in inputs if x is not None]
    axis = attrs.axis % xs[0].ndim
    offsets = [tir.const(0)]
    for x in xs:
        offsets.append(offsets[-1] + x.shape[axis])

    def f(*i):
        def read(k):
            return xs[k](*(v - offsets[k] if a == axis else v for a, v in enumerate(i)))

        out = read(len(xs) - 1)
        for k in range(len(xs) - 2, -1, -1):
            out = select(i[axis] < offsets[k + 1], read(k), out)
        return out

    return te.compute(out_dims(out_type, xs), f, name="concat")


def window(x: te.Tensor, begins: Sequence[PrimExpr], steps: Sequence[int], shape: Sequence[PrimExpr],
           name: str) -> te.Tensor:
    """out[i] = x[begin + i * step] per axis."""
    return te.compute(shape, lambda *i: x(*(b + v * s for b, v, s in zip(begins, i, steps))), name=name)


@register_compute("tensor.split")
def _split(attrs, inputs, out_type, consts):
    x = inputs[0]
    axis = attrs.axis % x.ndim
    if inputs[1] is None:
        n = static_shape("tensor.split", x)[axis]
        sizes = even_split(n, attrs.num_outputs)
    else:
        sizes = const_ints("tensor.split", consts, 1, "split")
    outs, start = [], 0
    for k, s in enumerate(sizes):
        begins = [tir.const(start if a == axis else 0) for a in range(x.ndim)]
        shape = [tir.const(s) if a == axis else d for a, d in enumerate(x.shape)]
        outs.append(window(x, begins, [1] * x.ndim, shape, f"split{k}"))
        start += s
    return tuple(outs)


@register_compute("tensor.slice")
def _slice(attrs, inputs, out_type, consts):
    x = inputs[0]
    if consts[1] is None or consts[2] is None:
        from kiln.topi.runtime_window import slice_runtime
        return slice_runtime(attrs, inputs, out_type, consts)
    starts = const_ints("tensor.slice", consts, 1, "starts")
    ends = const_ints("tensor.slice", consts, 2, "ends")
    axes = const_ints("tensor.slice", consts, 3, "axes", required=inputs[3] is not None) or range(len(starts))
    steps = const_ints("tensor.slice", consts, 4, "steps", required=inputs[4] is not None) or (1,) * len(starts)
    begins, strides = [tir.const(0)] * x.ndim, [1] * x.ndim
    shape = list(x.shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        a %= x.ndim
        d = x.shape[a]
        if not isinstance(d, tir.IntImm):
            raise ComputeError(f"tensor.slice: axis {a} has symbolic size {d}")
        s, e = slice_bounds(s, e, st, d.value)
        begins[a], strides[a], shape[a] = tir.const(s), st, tir.const(len(range(s, e, st)))
    return window(x, begins, strides, shape, "slice")


# ---------------------------------------------------------------------------------------------
# gathers


@register_compute("tensor.gather")
def _gather(attrs, inputs, out_type, consts):
    x, idx = inputs[0], inputs[1]
    axis = attrs.axis % x.ndim
    q = idx.ndim

    def f(*i):
        j = checked_index(idx(*i[axis:axis + q]), x.shape[axis])
        return x(*i[:axis], j, *i[axis + q:])

    return te.compute(x.shape[:axis] + idx.shape + x.shape[axis + 1:], f, name="gather")


@register_compute("tensor.gather_elements")
def _gather_elements(attrs, inputs, out_type, consts):
    x, idx = inputs[0], inputs[1]
    axis = attrs.axis % x.ndim

    def f(*i):
        j = checked_index(idx(*i), x.shape[axis])
        return x(*(j if a == axis else v for a, v in enumerate(i)))

    return te.compute(idx.shape, f, name="gather_elements")


@register_compute("tensor.gather_nd")
def _gather_nd(attrs, inputs, out_type, consts):
    x, idx = inputs[0], inputs[1]
    b, q = attrs.batch_dims, idx.ndim
    k = idx.shape[-1]
    if not isinstance(k, tir.IntImm):
        raise ComputeError("tensor.gather_nd: the index depth must be static")
    k = k.value

    def f(*i):
        row = i[:q - 1]
        picked = [checked_index(idx(*row, tir.const(t)), x.shape[b + t]) for t in range(k)]
        return x(*i[:b], *picked, *i[q - 1:])

    return te.compute(idx.shape[:-1] + x.shape[b + k:], f, name="gather_nd")


# ---------------------------------------------------------------------------------------------
# pad, expand, tile


def _pad_source(o: PrimExpr, before: int, n: int, mode: str) -> tuple[PrimExpr, PrimExpr | None]:
    """(source index, in-bounds condition or None) of output position o on one axis."""
    s = o - before
    if mode == "constant":
        return s, (s >= 0) & (s < n)
    if mode == "edge" or (mode == "reflect" and n == 1):
        return tir.min_(tir.max_(s, tir.const(0)), tir.const(n - 1)), None
    if mode == "wrap":
        return s % n, None
    p = 2 * (n - 1)
    m = s % p
    return select(m >= n, p - m, m), None


@register_compute("tensor.pad")
def _pad(attrs, inputs, out_type, consts):
    x, value = inputs[0], inputs[2]
    if consts[1] is None and inputs[1] is not None:
        from kiln.topi.runtime_window import pad_runtime
        return pad_runtime(attrs, inputs, out_type, consts)
    shape = static_shape("tensor.pad", x)
    pads = const_ints("tensor.pad", consts, 1, "pads")
    axes = const_ints("tensor.pad", consts, 3, "axes", required=inputs[3] is not None)
    axes = [a % x.ndim for a in axes] if axes is not None else list(range(x.ndim))
    widths = [(0, 0)] * x.ndim
    for k, a in enumerate(axes):
        widths[a] = (pads[k], pads[k + len(axes)])
    # negative pads crop first: the padded tensor is x[crop_b : n - crop_e]
    crop = [(max(-b, 0), max(-e, 0)) for b, e in widths]
    inner = [n - cb - ce for n, (cb, ce) in zip(shape, crop)]
    out_shape = [m + max(b, 0) + max(e, 0) for m, (b, e) in zip(inner, widths)]

    def source(a: int, o: PrimExpr) -> tuple[PrimExpr, PrimExpr | None]:
        s, cond = _pad_source(o, max(widths[a][0], 0), inner[a], attrs.mode)
        return s + crop[a][0], cond

    return padded_read(x, value, out_shape, source)


def padded_read(x: te.Tensor, value: te.Tensor | None, out_shape, source) -> te.Tensor:
    """out[i] = x[s_0, ..., s_k] where (s_a, in-bounds condition or None) = source(a, i_a), and the
    fill value (or 0) where some condition fails: the loop of both pads (static and run-time widths)."""
    def f(*i):
        src, ok = [], []
        for a, o in enumerate(i):
            s, cond = source(a, o)
            src.append(s)
            if cond is not None:
                ok.append(cond)
        v = x(*src)
        if not ok:
            return v
        fill = value(*([0] * value.ndim)) if value is not None else tir.const(0, x.dtype)
        return select(tir.all_of(ok), v, fill)

    return te.compute(out_shape, f, name="pad")


@register_compute("tensor.expand")
def _expand(attrs, inputs, out_type, consts):
    x = inputs[0]
    return te.compute(out_dims(out_type, inputs), lambda *i: broadcast_load(x, i), name="expand")


@register_compute("tensor.tile")
def _tile(attrs, inputs, out_type, consts):
    x = inputs[0]
    return te.compute(out_dims(out_type, inputs), lambda *i: x(*(v % d for v, d in zip(i, x.shape))), name="tile")


# ---------------------------------------------------------------------------------------------
# depth/space moves, sequence reversal


@register_compute("tensor.depth_to_space")
def _depth_to_space(attrs, inputs, out_type, consts):
    x, b = inputs[0], attrs.blocksize
    c_out = x.shape[1] // (b * b)

    def f(n, c, h, w):
        bh, bw = h % b, w % b
        ch = (bh * b + bw) * c_out + c if attrs.mode == "DCR" else c * (b * b) + bh * b + bw
        return x(n, ch, h // b, w // b)

    return te.compute(out_dims(out_type, inputs), f, name="depth_to_space")


@register_compute("tensor.space_to_depth")
def _space_to_depth(attrs, inputs, out_type, consts):
    x, b = inputs[0], attrs.blocksize
    c_in = x.shape[1]

    def f(n, c, h, w):
        if attrs.mode == "DCR":
            blk, ch = c // c_in, c % c_in
        else:
            ch, blk = c // (b * b), c % (b * b)
        return x(n, ch, h * b + blk // b, w * b + blk % b)

    return te.compute(out_dims(out_type, inputs), f, name="space_to_depth")


@register_compute("tensor.reverse_sequence")
def _reverse_sequence(attrs, inputs, out_type, consts):
    x, lens = inputs[0], inputs[1]
    ba, ta = attrs.batch_axis, attrs.time_axis

    def f(*i):
        n = tir.cast("int64", lens(i[ba]))
        src = [n - 1 - v if a == ta else v for a, v in enumerate(i)]
        return select(i[ta] < n, x(*src), x(*i))

    return te.compute(x.shape, f, name="reverse_sequence")


# ---------------------------------------------------------------------------------------------
# creation


@register_compute("tensor.one_hot")
def _one_hot(attrs, inputs, out_type, consts):
    idx, values = inputs[0], inputs[2]
    depth = int(const_value("tensor.one_hot", consts, 1, "depth"))
    shape = out_dims(out_type, inputs)
    axis = attrs.axis % len(shape)

    def f(*i):
        v = tir.cast("int64", idx(*(i[:axis] + i[axis + 1:])))
        v = select(v < 0, v + depth, v)
        return select(tir.eq(v, i[axis]), values(tir.const(1)), values(tir.const(0)))

    return te.compute(shape, f, name="one_hot")


@register_compute("tensor.trilu")
def _trilu(attrs, inputs, out_type, consts):
    x = inputs[0]
    k = const_ints("tensor.trilu", consts, 1, "k", required=inputs[1] is not None)
    k = k[0] if k else 0

    def f(*i):
        d = i[-1] - i[-2]
        keep = d >= k if attrs.upper else d <= k
        return select(keep, x(*i), tir.const(0, x.dtype))

    return te.compute(x.shape, f, name="trilu")


@register_compute("tensor.eye_like")
def _eye_like(attrs, inputs, out_type, consts):
    x = inputs[0]
    dtype = attrs.dtype or x.dtype
    return te.compute(x.shape, lambda i, j: tir.cast(dtype, tir.eq(j - i, tir.const(attrs.k))), name="eye_like")


@register_compute("tensor.range")
def _range(attrs, inputs, out_type, consts):
    dtype = inputs[0].dtype
    calc = attrs.stash_type if dtype in ("float16", "bfloat16") else dtype
    start, delta = (np.asarray(consts[k]).astype(dt.to_numpy(calc)).reshape(()).item()
                    if consts[k] is not None else None for k in (0, 2))
    if start is None or delta is None:
        raise ComputeError("tensor.range: start and delta must be constants to generate code")
    return te.compute(out_dims(out_type, inputs),
                      lambda i: tir.cast(dtype, tir.const(start, calc) + tir.cast(calc, i) * tir.const(delta, calc)),
                      name="range")


@register_compute("tensor.constant_of_shape")
def _constant_of_shape(attrs, inputs, out_type, consts):
    v = np.zeros((), np.float32) if attrs.value is None else attrs.value.reshape(-1)[0]
    dtype = dt.from_numpy(np.asarray(v).dtype)
    if dtype == "string":
        raise ComputeError("tensor.constant_of_shape of strings has no compute")
    return te.compute(out_dims(out_type, inputs), lambda *i: tir.const(np.asarray(v).item(), dtype),
                      name="constant_of_shape")


@register_compute("tensor.shape")
def _shape(attrs, inputs, out_type, consts):
    dims = inputs[0].shape[attrs.start:attrs.end]
    return te.compute((len(dims),), lambda i: _pick(dims, i), name="shape")


def _pick(dims: Sequence[PrimExpr], i: PrimExpr) -> PrimExpr:
    out: PrimExpr = tir.const(0)
    for k in range(len(dims) - 1, -1, -1):
        out = select(tir.eq(i, tir.const(k)), tir.cast("int64", dims[k]), out)
    return out


@register_compute("tensor.size")
def _size(attrs, inputs, out_type, consts):
    n: PrimExpr = tir.const(1)
    for d in inputs[0].shape:
        n = n * d
    return te.compute((), lambda: n, name="size")
