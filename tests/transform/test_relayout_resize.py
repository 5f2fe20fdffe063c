"""alter-op-layout carries a spatial Resize through the blocked layout: no transforms around it, and
the same values as the NCHW resize (interpreter and compiled)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from tests.helpers import F, model

RNG = np.random.default_rng(0)


def _model(mode: str, how: str, values, axes=None, c=16, **attrs):
    w1 = numpy_helper.from_array(RNG.standard_normal((c, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(RNG.standard_normal((8, c, 3, 3)).astype(np.float32), "w2")
    arr = numpy_helper.from_array(np.asarray(values, np.float32 if how == "scales" else np.int64), how)
    ins = ["a", "", how] if how == "scales" else ["a", "", "", how]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ins, ["r"], mode=mode, **({"axes": axes} if axes else {}), **attrs),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    return model(nodes, [("x", F, [1, 3, 9, 7])], [("y", F, ["n", "c", "h", "w"])], [w1, w2, arr], opset=18)


@pytest.mark.parametrize("mode, how, values, axes, attrs", [
    ("linear", "scales", [1, 1, 2, 2], None, {}),
    ("nearest", "scales", [1, 1, 2, 3], None, {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}),
    ("linear", "sizes", [1, 16, 13, 5], None, {"coordinate_transformation_mode": "align_corners"}),
    ("cubic", "scales", [1.5, 0.5], [2, 3], {}),
    ("linear", "sizes", [20, 11], [-2, -1], {"antialias": 1}),
])
def test_resize_stays_blocked(mode, how, values, axes, attrs):
    onnx_model = _model(mode, how, values, axes, **attrs)
    mod = kiln.from_onnx(onnx_model)
    fused = fuse(mod, 3)
    ops = [e.op.name for fn in fused.functions.values() for e in post_order(fn) if isinstance(e, Call)
           and hasattr(e.op, "name")]
    assert "vision.resize" in ops and ops.count("tensor.layout_transform") == 2  # the image in, the result out
    x = RNG.standard_normal((1, 3, 9, 7)).astype(np.float32)
    want = kiln.evaluate(mod, {"x": x})[0]
    np.testing.assert_allclose(kiln.evaluate(fused, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(build(mod, opt_level=3).run({"x": x})[0], want, rtol=1e-4, atol=1e-4)


def test_channel_resize_is_left_alone():
    w1 = numpy_helper.from_array(RNG.standard_normal((16, 3, 3, 3)).astype(np.float32), "w1")
    sc = numpy_helper.from_array(np.array([1, 2, 2, 1], np.float32), "scales")
    onnx_model = model([helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
                        helper.make_node("Resize", ["a", "", "scales"], ["y"], mode="nearest")],
                       [("x", F, [1, 3, 9, 7])], [("y", F, ["n", "c", "h", "w"])], [w1, sc], opset=18)
    mod = kiln.from_onnx(onnx_model)
    resizes = [e for fn in fuse(mod, 3).functions.values() for e in post_order(fn) if isinstance(e, Call)
               and getattr(e.op, "name", "") == "vision.resize"]
    assert [r.args[0].type.ndim for r in resizes] == [4]  # back to NCHW first
    x = RNG.standard_normal((1, 3, 9, 7)).astype(np.float32)
    np.testing.assert_allclose(build(mod, opt_level=3).run({"x": x})[0], kiln.evaluate(mod, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)
