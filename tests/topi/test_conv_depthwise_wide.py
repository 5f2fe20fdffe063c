"""Stride-1 depthwise convs over rows of at most DW_WIDE_MAX_ROW columns take a 16-, 14- or 12-column tile
(neighbouring columns share input vectors); stride 2 and wider rows keep the 5-8 column tiles. Checked against
the interpreter and by the accumulator count in the generated C."""

from __future__ import annotations

import re
import shutil

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
from kiln.transform import PassContext
from kiln.transform.layout import choose_block, default_block

pytestmark = [pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed"),
              pytest.mark.usefixtures("fresh_cache")]
rng = np.random.default_rng(5)


def _depthwise(xs, k, stride):
    c = xs[1]
    x = Var("x", TensorType(xs, "float32"))
    w = Constant(rng.standard_normal((c, 1, k, k)).astype(np.float32))
    b = Constant(rng.standard_normal(c).astype(np.float32))
    y = get_op("nn.conv")(x, w, b, group=c, strides=(stride, stride), pads=(k // 2,) * 4)
    y = get_op("math.clip")(y, Constant(np.float32(0)), Constant(np.float32(6)))
    return IRModule({"main": Function((x,), y)}), {"x": rng.standard_normal(xs).astype(np.float32)}


CASES = [  # (x shape, kernel, stride, columns of the tile)
    ((1, 16, 14, 14), 3, 1, 14),
    ((1, 8, 5, 28), 3, 1, 14),
    ((1, 16, 3, 32), 5, 1, 16),
    ((1, 8, 7, 24), 3, 1, 12),
    ((1, 8, 4, 13), 3, 1, 8),  # no wide divisor: the usual guarded 8
    ((1, 8, 6, 56), 3, 1, 8),  # a wide row keeps 8
    ((1, 8, 9, 28), 3, 2, 7),  # stride 2 keeps the usual tile of its 14 outputs
]


@pytest.mark.parametrize("xs, k, stride, columns", CASES)
def test_depthwise_column_tile(xs, k, stride, columns):
    mod, feeds = _depthwise(xs, k, stride)
    kernels, _, _ = lower_groups(fuse(mod, 2))
    sizes = {int(n) for n in re.findall(r"float depthwise_acc\[(\d+)\]", generate([k.func for k in kernels]).code)}
    assert sizes == {columns * choose_block(xs[1], default_block(Target.host()), True)}  # accumulator floats: columns x block
    cm = build(mod, 2, PassContext(2))
    np.testing.assert_allclose(cm.run(feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-4)
