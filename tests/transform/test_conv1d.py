"""conv1d-as-conv2d: a 1-D conv runs as a 2-D conv over a unit height (then the blocked kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.transform import PASSES, PassContext
from tests.helpers import F, model

RNG = np.random.default_rng(0)


def _model(c, m, length, k, bias=True, **attrs):
    g = attrs.get("group", 1)
    inits = [numpy_helper.from_array(RNG.standard_normal((m, c // g, k)).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b"))
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], kernel_shape=[k], **attrs)
    return model([node], [("x", F, [2, c, length])], [("y", F, ["n", "m", "l"])], inits, opset=17)


@pytest.mark.parametrize("case", [
    dict(c=1, m=16, length=101, k=10, strides=[5]),  # a wav2vec-style feature encoder's first layer
    dict(c=16, m=24, length=37, k=3, pads=[1, 2], dilations=[2]),
    dict(c=12, m=12, length=29, k=5, group=12, bias=False),  # depthwise
    dict(c=8, m=6, length=7, k=7, auto_pad="VALID"),
])
def test_conv1d_runs_as_conv2d(case):
    onnx_model = _model(**case)
    mod = kiln.from_onnx(onnx_model)
    after = PASSES["conv1d-as-conv2d"](mod, PassContext(opt_level=2))
    convs = [e for e in post_order(after.main) if isinstance(e, Call) and getattr(e.op, "name", "") == "nn.conv"]
    assert [c.args[0].type.ndim for c in convs] == [4]
    x = RNG.standard_normal(mod.main.params[0].type.shape).astype(np.float32)
    want = kiln.evaluate(mod, {"x": x})[0]
    np.testing.assert_allclose(kiln.evaluate(after, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(build(mod, opt_level=3).run({"x": x})[0], want, rtol=1e-4, atol=1e-4)


def test_same_padding_stays():
    mod = kiln.from_onnx(_model(4, 4, 9, 3, auto_pad="SAME_UPPER"))
    after = PASSES["conv1d-as-conv2d"](mod, PassContext(opt_level=2))
    assert [e.args[0].type.ndim for e in post_order(after.main) if isinstance(e, Call)
            and getattr(e.op, "name", "") == "nn.conv"] == [3]


def test_an_activation_moves_before_the_squeeze_and_fuses_into_the_conv():
    w = numpy_helper.from_array(RNG.standard_normal((16, 8, 3)).astype(np.float32), "w")
    onnx_model = model([helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3], pads=[1, 1]),
                        helper.make_node("Relu", ["c"], ["y"])], [("x", F, [1, 8, 50])], [("y", F, ["n", "m", "l"])],
                       [w], opset=17)
    mod = kiln.from_onnx(onnx_model)
    after = PASSES["conv1d-as-conv2d"](mod, PassContext(opt_level=2))
    relu = next(e for e in post_order(after.main) if isinstance(e, Call) and getattr(e.op, "name", "") == "nn.relu")
    assert relu.type.ndim == 4
    x = RNG.standard_normal((1, 8, 50)).astype(np.float32)
    cm = build(mod, opt_level=3)
    np.testing.assert_allclose(cm.run({"x": x})[0], kiln.evaluate(mod, {"x": x})[0], rtol=1e-4, atol=1e-4)
    groups = [" > ".join(e.op.name for e in post_order(fn.body) if isinstance(e, Call) and hasattr(e.op, "name"))
              for fn in (k.group for k in cm.kernels.values())]
    assert any("conv2d_nchwc" in g and "relu" in g for g in groups), groups


def test_consecutive_convs_exchange_4d_values():
    """conv1d -> relu -> conv1d: the second conv takes the first's 4-D result (no squeeze then
    unsqueeze between them), so one blocked region holds both and nothing is transformed between."""
    ws = [numpy_helper.from_array(RNG.standard_normal(s).astype(np.float32), n) for n, s in
          (("w1", (16, 8, 3)), ("w2", (8, 16, 1)))]
    onnx_model = model([helper.make_node("Conv", ["x", "w1"], ["c"], kernel_shape=[3], pads=[1, 1]),
                        helper.make_node("Relu", ["c"], ["r"]),
                        helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[1])],
                       [("x", F, [1, 8, 50])], [("y", F, ["n", "m", "l"])], ws, opset=17)
    mod = kiln.from_onnx(onnx_model)
    after = PASSES["conv1d-as-conv2d"](mod, PassContext(opt_level=2))
    ops = [e.op.name for e in post_order(after.main) if isinstance(e, Call) and hasattr(e.op, "name")]
    assert ops.count("tensor.unsqueeze") == 1 and ops.count("tensor.squeeze") == 1
    x = RNG.standard_normal((1, 8, 50)).astype(np.float32)
    cm = build(mod, opt_level=3)
    np.testing.assert_allclose(cm.run({"x": x})[0], kiln.evaluate(mod, {"x": x})[0], rtol=1e-4, atol=1e-4)
    transforms = [k for k in cm.kernels.values() if "layout_transform" in
                  " ".join(e.op.name for e in post_order(k.group.body) if isinstance(e, Call) and hasattr(e.op, "name"))]
    assert len(transforms) == 2  # the input in, the result out
