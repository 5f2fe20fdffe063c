"""Channel counts that 8 does not divide (58, 116, 255) run blocked with zero-padded channels (AlterOpLayout
pads by default): 1x1 and depthwise convs, an activation that maps the padding to non-zero (hard sigmoid),
a channel split + concat + shuffle as ShuffleNet exports it, and a YOLO-style 255-channel head. Every
model matches the interpreter, and the convs compile as blocked convs in whole vectors: blocks of 8, or
of 16 on an AVX-512 host."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.target import Target
from kiln.transform.layout import default_block
from tests.helpers import op_names

pytestmark = pytest.mark.usefixtures("fresh_cache")

rng = np.random.default_rng(7)


def _conv(x, ci: int, co: int, k: int = 1, group: int = 1):
    w = (rng.standard_normal((co, ci // group, k, k)) / np.sqrt(ci // group * k * k)).astype(np.float32)
    b = (rng.standard_normal(co) * 0.1).astype(np.float32)
    return get_op("nn.conv")(x, Constant(w), Constant(b), group=group, pads=(k // 2,) * 4)


def _check(body, x: Var, shape: tuple[int, ...]) -> None:
    mod = IRModule({"main": Function((x,), body)})
    compiled = kiln.build(mod, opt_level=3, executor="aot")
    names = op_names(compiled.mod)
    assert "nn.conv" not in names and "nn.conv2d_nchwc" in names
    blocks = set(re.findall(r"NCHW(\d+)c", kiln.ir.text(compiled.mod)))
    assert blocks and blocks <= {"8", str(default_block(Target.host()))}  # whole vectors only
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-5)


def test_depthwise_and_pointwise_on_58_channels():
    x = Var("x", TensorType((1, 16, 9, 11), "float32"))
    y = get_op("nn.relu")(_conv(x, 16, 58))
    y = _conv(y, 58, 58, 3, group=58)  # depthwise: 58 groups of one, padded to 64
    y = get_op("nn.hard_sigmoid")(y)  # maps the zero padding to 0.5
    _check(_conv(y, 58, 116), x, (1, 16, 9, 11))


def test_split_concat_and_channel_shuffle():
    x = Var("x", TensorType((1, 116, 7, 5), "float32"))
    halves = get_op("tensor.split")(x, Constant(np.array([58, 58], np.int64)), axis=1)
    a, b = kiln.ir.TupleGetItem(halves, 0), kiln.ir.TupleGetItem(halves, 1)
    b = get_op("nn.relu")(_conv(_conv(get_op("nn.relu")(_conv(b, 58, 58)), 58, 58, 3, group=58), 58, 58))
    y = get_op("tensor.concat")(a, b, axis=1)
    y = get_op("tensor.reshape")(y, Constant(np.array([1, 2, 58, 7, 5], np.int64)))
    y = get_op("tensor.transpose")(y, perm=(0, 2, 1, 3, 4))
    y = get_op("tensor.reshape")(y, Constant(np.array([1, 116, 7, 5], np.int64)))
    _check(_conv(y, 116, 116), x, (1, 116, 7, 5))


def test_yolo_head_of_255_channels():
    x = Var("x", TensorType((1, 64, 10, 10), "float32"))
    y = get_op("nn.sigmoid")(_conv(x, 64, 255))
    y = get_op("tensor.reshape")(y, Constant(np.array([1, 3, 85, 10, 10], np.int64)))
    _check(get_op("tensor.transpose")(y, perm=(0, 1, 3, 4, 2)), x, (1, 64, 10, 10))
