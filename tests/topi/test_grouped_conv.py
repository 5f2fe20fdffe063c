"""Grouped (not depthwise) convolutions compile to the blocked conv, blocked inside each group
(ResNeXt's 32 groups of 4-16 channels), and match the interpreter: channels per group that the
vector block divides, that it does not (blocks of 2, 3, 4), strides, dilations, padding, a bias and
a fused activation, batch 2."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.op import get_op
from tests.helpers import op_names

pytestmark = pytest.mark.usefixtures("fresh_cache")

CASES = [  # (batch, in, out, groups, kernel, stride, pad, dilation, height, width)
    (1, 64, 64, 32, 3, 1, 1, 1, 13, 11),  # 2 channels a group
    (1, 64, 128, 8, 3, 2, 1, 1, 14, 14),  # 8 in, 16 out a group
    (2, 12, 6, 3, 3, 1, 0, 2, 9, 7),  # 4 in, 2 out, dilated, batch 2
    (1, 15, 10, 5, 1, 1, 0, 1, 5, 5),  # 3 in, 2 out, 1x1
    (1, 32, 32, 4, 5, 1, 2, 1, 7, 7),  # 8 a group, 5x5
]


def _grouped(n, ci, co, g, k, s, p, d, h, w, seed=0):
    rng = np.random.default_rng(seed)
    x = Var("x", TensorType((n, ci, h, w), "float32"))
    wt = (rng.standard_normal((co, ci // g, k, k)) / np.sqrt(ci // g * k * k)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    y = get_op("nn.conv")(x, Constant(wt), Constant(b), group=g, strides=(s, s), pads=(p, p, p, p),
                          dilations=(d, d))
    mod = IRModule({"main": Function((x,), get_op("nn.relu")(y))})
    return mod, {"x": rng.standard_normal((n, ci, h, w)).astype(np.float32)}


@pytest.mark.parametrize("case", CASES, ids=[f"g{c[3]}_{c[1]}to{c[2]}_k{c[4]}s{c[5]}d{c[7]}" for c in CASES])
def test_grouped_conv_compiles_blocked_and_matches(case):
    mod, feeds = _grouped(*case)
    compiled = kiln.build(mod, opt_level=2)
    assert not compiled.host_groups
    assert "nn.conv2d_nchwc" in op_names(compiled.mod) and "nn.conv" not in op_names(compiled.mod)
    np.testing.assert_allclose(compiled.run(feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-5)
