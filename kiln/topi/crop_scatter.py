"""Index-remapping computes of two operators whose geometry is known when code is generated:
tensor.center_crop_pad (the target shape is a constant) and tensor.tensor_scatter (a KV-cache
update: each output position reads the update or keeps the cache, from the batch's write index).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.topi.registry import ComputeError, const_ints, register_compute


@register_compute("tensor.center_crop_pad")
def _center_crop_pad(attrs, inputs, out_type, consts):
    x = inputs[0]
    want = const_ints("tensor.center_crop_pad", consts, 1, "shape")
    axes = [a % x.ndim for a in (attrs.axes if attrs.axes is not None else range(x.ndim))]
    shape = list(x.shape)
    offset: dict[int, tuple[int, bool]] = {}  # axis -> (shift, whether padded)
    for a, n in zip(axes, want):
        have = x.shape[a]
        if not isinstance(have, tir.IntImm):
            raise ComputeError(f"tensor.center_crop_pad: axis {a} must have a static size, got {have}")
        shape[a] = tir.const(n)
        offset[a] = ((have.value - n) // 2, False) if n < have.value else ((n - have.value) // 2, True)

    def f(*i):
        src, ok = [], None
        for a, v in enumerate(i):
            shift, padded = offset.get(a, (0, False))
            src.append(v - shift if padded else v + shift)
            if padded:
                inside = (v >= shift) & (v - shift < x.shape[a])
                ok = inside if ok is None else ok & inside
        return x(*src) if ok is None else tir.select(ok, x(*src), tir.const(0, x.dtype))

    return te.compute(shape, f, name="center_crop_pad")


@register_compute("tensor.tensor_scatter")
def _tensor_scatter(attrs, inputs, out_type, consts):
    cache, upd, starts = inputs[:3]
    axis = attrs.axis % cache.ndim
    length, size = upd.shape[axis], cache.shape[axis]

    def f(*i):
        start = tir.const(0) if starts is None else tir.cast("int64", starts(i[0]))
        j = i[axis] - start
        if attrs.mode == "circular":
            j = j % size
        hit = (j >= 0) & (j < length)
        return tir.select(hit, upd(*(j if k == axis else v for k, v in enumerate(i))), cache(*i))

    return te.compute(cache.shape, f, name="tensor_scatter")
