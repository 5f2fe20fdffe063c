"""The register tiles of the blocked conv schedule against the interpreter: depthwise convs with every tap
unrolled (guarded last column tiles, stride 2, 5x5 and 7x7 windows), 1x1 convs whose channel tile is 3 or 4
blocks (up to 28 accumulators), the stem's 16, and each tile knob's other choice."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kiln
from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.compiler.lower import lower_groups
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.target import Target
from kiln.topi.knobs import applying
from kiln.transform import PassContext
from tests.topi.conftest import SCHEDULE_TEST

pytestmark = SCHEDULE_TEST
F32 = "float32"
rng = np.random.default_rng(1)


def _w(*shape) -> Constant:
    return Constant(rng.standard_normal(shape).astype(np.float32))


def _relu6(y):
    return get_op("math.clip")(y, Constant(np.float32(0)), Constant(np.float32(6)))


def _conv(x, ws, **attrs):
    """conv + bias, times a per-channel scale (folded batch norm)."""
    y = get_op("nn.conv")(x, _w(*ws), _w(ws[0]), **attrs)
    return get_op("math.mul")(y, _w(ws[0], 1, 1))


def _check(xs, make, config=None, target=None):
    """Compile at the default opt_level (under knob `config`, for `target`: default the host); outputs equal the
    interpreter's."""
    x = Var("x", TensorType(xs, F32))
    mod = IRModule({"main": Function((x,), make(x))})
    feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
    with applying(config or {}):
        cm = build(mod, 2, PassContext(2, target=target or Target.host()))
    for g, r in zip(cm.run(feeds), kiln.evaluate(mod, feeds)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
    assert not cm.host_groups and not cm.ran_on_host


DEPTHWISE = [  # (x shape, kernel, attrs): widths that the 8-column tile does not divide
    ((1, 16, 13, 13), 3, dict(pads=(1, 1, 1, 1))),
    ((1, 8, 11, 29), 3, dict(strides=(2, 2), pads=(0, 0, 1, 1))),  # mobilenet's stride-2 padding
    ((1, 8, 17, 16), 3, dict(strides=(2, 2), pads=(1, 1, 1, 1))),
    ((1, 8, 9, 19), 5, dict(pads=(2, 2, 2, 2))),  # 25 taps: all unrolled
    ((1, 8, 10, 11), 7, dict(pads=(3, 2, 3, 1))),  # 49 taps: the row loop stays
    ((1, 8, 1, 3), 3, dict(pads=(1, 1, 1, 1))),
]


@pytest.mark.parametrize("xs, k, attrs", DEPTHWISE)
@pytest.mark.parametrize("config", [{}, {"dw.unroll_ky": False, "dw.unroll_kx": False},
                                    {"dw.ow_tile": 14}])
def test_depthwise_tiles(xs, k, attrs, config):
    c = xs[1]
    _check(xs, lambda x: _relu6(_conv(x, (c, 1, k, k), group=c, **attrs)), config)


POINTWISE = [  # (x shape, output channels): output blocks 3 (tile 3 x 7), 4 (4 x 7), 5 (1 x 7)
    ((1, 16, 7, 7), 24),
    ((1, 16, 11, 13), 32),  # primes: guarded column tiles
    ((1, 24, 5, 3), 40),
    ((1, 8, 14, 14), 48),
]


@pytest.mark.parametrize("xs, oc", POINTWISE)
@pytest.mark.parametrize("config", [{}, {"conv.accumulators": 28}, {"conv.oc_tile": 3, "conv.ow_tile": 5}, {"conv.rows_outer": True}])
def test_pointwise_tiles(xs, oc, config):
    """1x1 conv with a residual add (the projection of an inverted residual block) and one with relu6."""
    _check(xs, lambda x: get_op("math.add")(_conv(_relu6(_conv(x, (oc, xs[1], 1, 1))), (xs[1], oc, 1, 1)), x),
           config)


@pytest.mark.parametrize("config", [{}, {"conv.accumulators": 28}])
def test_stem_tiles(config):
    """3 input channels, stride 2, 32 outputs (4 blocks): the stem keeps 2 x 7 unless told otherwise."""
    _check((1, 3, 23, 19), lambda x: _relu6(_conv(x, (32, 3, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1))), config)


def test_a_patch_embedding_keeps_its_kernel_rows_rolled():
    """A 16x16 stride-16 patch conv over 3 channels (ViT) is not unrolled like a 7x7 stem: unrolled
    it was 290 KB of C and two minutes of gcc."""
    x = Var("x", TensorType((1, 3, 64, 48), F32))
    conv = get_op("nn.conv")(x, _w(32, 3, 16, 16), _w(32), strides=(16, 16))
    mod = IRModule({"main": Function((x,), conv)})
    kernels, _, _ = lower_groups(fuse(mod, 3))
    assert len(generate([k.func for k in kernels]).code) < 100_000
    feeds = {"x": rng.standard_normal((1, 3, 64, 48)).astype(np.float32)}
    np.testing.assert_allclose(kiln.build(mod, opt_level=3).run(feeds)[0], kiln.evaluate(mod, feeds)[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("xs, ws, weights_outer", [
    ((1, 64, 5, 5), (64, 64, 3, 3), True),  # 147 KB of weights, 10 KB of padded input
    ((1, 16, 31, 29), (16, 16, 1, 1), False),  # 57 KB of input, 1 KB of weights
])
def test_weights_outside_rows_when_they_outgrow_the_cache(monkeypatch, xs, ws, weights_outer):
    """Channel blocks go outside rows when rows outside would stream more bytes (_weights_outer: the weights
    once per row once they are past L2, against the input once per channel tile). A 16 KB L2 stands in for
    the host's so small convs take both sides; the results equal the interpreter's either way."""
    import kiln.topi.schedule_conv_nchwc as sc

    decided = []
    real = sc._weights_outer
    monkeypatch.setattr(sc, "_weights_outer", lambda *a: decided.append(real(*a)) or decided[-1])
    small_l2 = dataclasses.replace(Target.host(), l2_bytes=16 << 10)
    _check(xs, lambda x: get_op("nn.relu")(_conv(x, ws, pads=(ws[2] // 2,) * 4)), target=small_l2)
    assert decided == [weights_outer]


def test_tile_steps_walk_columns_outside_channel_blocks():
    """Inside a reduction step the tile's statements go column by column, each column's channel blocks
    together: the input value they share is broadcast into one register and used at once (blocks outside
    would hold every column's broadcast at once: 4 x 7 accumulators + 7 broadcasts + a weight is 36 of 32
    registers, and gcc spills accumulators)."""
    import re

    x = Var("x", TensorType((1, 64, 7, 14), F32))
    mod = IRModule({"main": Function((x,), _conv(x, (64, 64, 1, 1)))})
    with applying({"conv.oc_tile": 4, "conv.ow_tile": 7}):
        kernels, _, _ = lower_groups(fuse(mod, 3))
    code = generate([k.func for k in kernels]).code
    steps = re.findall(r"conv_acc\[[^\]]*\] = \(conv_acc\[[^\]]*\] \+ \((p\d+\[[^\]]*\]) \* (p\d+\[[^\]]*\])\)\)", code)
    assert len(steps) == 28
    first_input = steps[0][0]
    assert [s[0] for s in steps[:4]] == [first_input] * 4  # one column's four blocks read one input value
    assert steps[4][0] != first_input
