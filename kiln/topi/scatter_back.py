"""Computes for tensor.col2im and nn.max_unpool: scatter-backs whose reference (kiln/op/blocks.py,
kiln/op/nn.py) moves whole elements back into an image, so each is an index computation (col2im) or
a conditional reduction (max_unpool).
"""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.tir import select
from kiln.topi.injective import norm_index, ravel
from kiln.topi.registry import ComputeError, const_ints, out_dims, register_compute, static_shape

# ---------------------------------------------------------------------------------------------
# tensor.col2im


@register_compute("tensor.col2im")
def _col2im(attrs, inputs, out_type, consts):
    """Each image element sums the column entries of every kernel offset whose sliding block
    covers it: a reduction over the kernel offsets, in the reference's order."""
    x = inputs[0]
    name = "tensor.col2im"
    image = const_ints(name, consts, 1, "image_shape")
    block = const_ints(name, consts, 2, "block_shape")
    r = len(image)
    dil = attrs.dilations or (1,) * r
    strides = attrs.strides or (1,) * r
    pads = attrs.pads or (0,) * (2 * r)
    padded = [image[a] + pads[a] + pads[a + r] for a in range(r)]
    blocks = [(padded[a] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(r)]
    if min(blocks, default=1) < 1:
        raise ComputeError(f"{name}: block_shape {block} does not fit image_shape {image} with pads {pads}")
    if isinstance(x.shape[2], tir.IntImm) and x.shape[2].value != math.prod(blocks):
        raise ComputeError(f"{name}: input has {x.shape[2].value} columns; the geometry gives "
                           f"{math.prod(blocks)} blocks")
    kb = math.prod(block)
    bdims = [tir.const(b) for b in blocks]
    kdims = [tir.const(k) for k in block]

    def f(n, c, *p):
        ks = [te.reduce_axis(k, f"k{a}") for a, k in enumerate(block)]
        conds, src = [], []
        for a in range(r):
            q = p[a] + pads[a] - ks[a].var * dil[a]  # position in the padded image relative to the block start
            conds += [q >= 0, tir.eq(q % strides[a], tir.const(0)), q // strides[a] < blocks[a]]
            src.append(tir.min_(tir.max_(q // strides[a], tir.const(0)), tir.const(blocks[a] - 1)))
        col = ravel([k.var for k in ks], kdims)
        return te.sum(x(n, c * kb + col, ravel(src, bdims)), ks, where=tir.all_of(conds))

    return te.compute(out_dims(out_type, inputs), f, name="col2im")



# ---------------------------------------------------------------------------------------------
# nn.max_unpool

MAX_UNPOOL_WORK = 1 << 26  # output elements x input elements the all-pairs kernel may test


@register_compute("nn.max_unpool")
def _max_unpool(attrs, inputs, out_type, consts):
    """Each output element takes the last input whose flat index names it (numpy's assignment
    order), else zero. Indices may point anywhere, so every output tests every input: large
    unpools stay on the host, where the reference scatters in linear time."""
    from kiln.op.nn import Window, unpool_dim
    from kiln.topi.scatter import LAST

    x, idx = inputs[0], inputs[1]
    name = "nn.max_unpool"
    xs = static_shape(name, x)
    win = Window.of(attrs, attrs.kernel_shape)
    natural = xs[:2] + tuple(unpool_dim(win, a, d) for a, d in enumerate(xs[2:]))
    shape = out_dims(out_type, inputs)
    if not all(isinstance(d, tir.IntImm) for d in shape):
        raise ComputeError(f"{name}: output_shape must be known to generate code")
    if any(d.value < n for d, n in zip(shape, natural)):
        raise ComputeError(f"{name}: output_shape {tuple(d.value for d in shape)} is smaller than the unpooled "
                           f"shape {natural}")
    if math.prod(xs) * math.prod(natural) > MAX_UNPOOL_WORK:
        raise ComputeError(f"{name}: {math.prod(xs)} inputs into {math.prod(natural)} outputs is too large for "
                           f"the all-pairs kernel")
    nat = [tir.const(n) for n in natural]
    total = math.prod(natural)
    zero = tir.const(0, x.dtype)

    def f(*o):
        ks = [te.reduce_axis(n, f"r{a}") for a, n in enumerate(xs)]
        vs = [k.var for k in ks]
        hit = tir.eq(norm_index(idx(*vs), tir.const(total)), tir.cast("int64", ravel(o, nat)))
        return LAST((tir.const(True), x(*vs)), ks, where=hit)

    found, val = te.compute(shape, f, name="max_unpool_acc")
    inside = lambda o: tir.all_of([v < n for v, n in zip(o, natural)])  # noqa: E731
    return te.compute(shape, lambda *o: select(found(*o) & inside(o), val(*o), zero), name="max_unpool")
