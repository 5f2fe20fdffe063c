"""x86 schedule of a pooling group in a blocked layout (nn.pool2d_layout: NCHW[x]c), global pools too.

Pooling is memory bound, so it is one pass: the padding is tested per tap inside the window (a
vector select on a block of channels) rather than copied first, and each tile of `pool.ow_tile`
output columns x one channel vector accumulates in registers over the window taps, then stores
once through any fused epilogue. Parallel over (channel blocks, rows); a small pool stays serial.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.target import Target
from kiln.te.schedule import Schedule, create_schedule
from kiln.te.tensor import Tensor
from kiln.topi.knobs import knob
from kiln.topi.schedule_anchor import (
    block,
    data_size,
    inline_injective,
    is_pad,
    is_reduction,
    materialize,
    parallel_outer,
    static,
)

OW_TILES = (1, 2, 4, 7, 8, 14, 16)


def schedule_pool(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    if len(outputs) != 1 or len(outputs[0].shape) != 5:
        return None
    s = create_schedule(outputs)
    inline_pad = knob("pool.inline_pad", (True, False), True)
    rest = inline_injective(s, outputs, keep=lambda st: is_reduction(st) or (is_pad(st) and not inline_pad))
    reds = [st for st in rest if is_reduction(st)]
    out = s[outputs[0]]
    if len(reds) != 1 or reds[0].op.num_outputs != 1 or len(reds[0].op.axis) != 5:
        return None
    red = reds[0]
    if red is not out and len(out.op.axis) != 5:
        return None
    for st in rest:
        if st is not red and st is not out:
            materialize(st, target)
    n, c, y, x, cb = out.op.axis
    ow = static(x.dom.extent)
    default = max((t for t in OW_TILES if ow is not None and ow % t == 0 and t <= 8), default=8)
    xo, xi = out.split(x, block(x.dom.extent, knob("pool.ow_tile", OW_TILES, default)))
    work = data_size(red, reduce_too=True)
    if red is out:
        out.reorder(n, c, y, xo, *red.op.reduce_axis, xi, cb)
    else:
        out.reorder(n, c, y, xo, xi, cb)
    parallel_outer(out, [n, c, y], work)
    out.unroll(xi)
    out.vectorize(cb)
    if red is not out:
        rn, rc, ry, rx, rcb = red.op.axis
        red.compute_at(out, xo)
        red.reorder(rn, rc, ry, *red.op.reduce_axis, rx, rcb)
        red.unroll(rx)
        red.vectorize(rcb)
    return s
